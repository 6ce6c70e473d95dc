// CPU figures for docs/benchmarks.md:
//   BM_Exp2Ceiling/<isa>/<threads>: SLEEF's vectorized exp2f on in-cache data, exponentials per second: a
//     reference rate for the exponentials one Sinkhorn iteration needs (2·n·m, two soft c-transforms). The CPU
//     backend itself no longer calls SLEEF: its kernels inline a cheaper 2^x of the same accuracy (docs/engine.md,
//     "The CPU backend"), and skip the exponentials of terms below 2^−100 of their row's max.
//   BM_Iteration/<n>/<d>/<warm>: wall time of one fixed-ε Sinkhorn iteration of the CPU backend (symmetric
//     scheme, ε = 0.1, seeded N(0,1) points, uniform weights), from zero potentials (warm = 0, the benchmark
//     setting of POT/GeomLoss) or from potentials near the fixed point (warm = 1: the fused one-exponential
//     update applies). Times exclude the fixed costs of a solve: time(K iterations) − time(0), divided by K;
//     the cpu_ms counter is the same in process CPU time (all threads together).
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <ctime>
#include <random>
#include <vector>

#include "flashot/flashot.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
extern "C" __m512 Sleef_exp2f16_u10avx512f(__m512);
extern "C" __m256 Sleef_exp2f8_u10avx2(__m256);

namespace {

constexpr int kBuffer = 4096;  // 16 KiB of arguments: the measurement is of the exponential, not of memory

__attribute__((noinline)) float exp2_sum_avx512(const float* in, int reps) {
  __m512 acc = _mm512_setzero_ps();
  for (int r = 0; r < reps; ++r)
    for (int i = 0; i < kBuffer; i += 16) acc = _mm512_add_ps(acc, Sleef_exp2f16_u10avx512f(_mm512_loadu_ps(in + i)));
  alignas(64) float lanes[16];  // not _mm512_reduce_add_ps: GCC 12's header warns about it
  _mm512_store_ps(lanes, acc);
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}

__attribute__((noinline)) float exp2_sum_avx2(const float* in, int reps) {
  __m256 acc = _mm256_setzero_ps();
  for (int r = 0; r < reps; ++r)
    for (int i = 0; i < kBuffer; i += 8) acc = _mm256_add_ps(acc, Sleef_exp2f8_u10avx2(_mm256_loadu_ps(in + i)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}

}  // namespace
#pragma GCC pop_options

namespace {

void BM_Exp2Ceiling(benchmark::State& state) {
  const bool avx512 = state.range(0) == 512;
  const int threads = static_cast<int>(state.range(1));
  if (avx512 ? !__builtin_cpu_supports("avx512f") : !__builtin_cpu_supports("avx2")) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  std::vector<float> in(kBuffer);
  for (int i = 0; i < kBuffer; ++i) in[i] = -30.0f * static_cast<float>(i) / kBuffer;  // the range scores take
  const int reps = 2000;
  float sink = 0;
  for (auto _ : state) {
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += avx512 ? exp2_sum_avx512(in.data(), reps) : exp2_sum_avx2(in.data(), reps);
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(reps) * kBuffer * threads);
}
BENCHMARK(BM_Exp2Ceiling)->ArgNames({"isa", "threads"})->Args({512, 1})->Args({512, 2})->Args({256, 1})->Args({256, 2})
    ->UseRealTime()->Unit(benchmark::kMillisecond);

std::vector<float> normal_points(std::size_t n, std::size_t d, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> p(n * d);
  for (auto& v : p) v = g(rng);
  return p;
}

struct Seconds {
  double wall = 0;
  double cpu = 0;  // process CPU time, all threads
};

Seconds seconds_of(flashot::Problem& problem, const flashot::SolveOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  benchmark::DoNotOptimize(problem.solve(o));
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
          static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC};
}

void BM_Iteration(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto d = static_cast<std::size_t>(state.range(1));
  const bool warm = state.range(2) != 0;
  const int k = 10;
  const std::vector<float> x = normal_points(n, d, 1), y = normal_points(n, d, 2);
  flashot::BackendOptions backend;
  backend.backend = flashot::BackendKind::kCpu;
  flashot::Problem problem({x, n, d}, {y, n, d}, {}, {}, backend);
  flashot::SolveOptions o;
  o.epsilon = 0.1;
  o.tolerance = 0;
  if (warm) {
    o.max_iterations = 60;
    const flashot::SolveResult start = problem.solve(o);
    o.initial_f = start.f;
    o.initial_g = start.g;
  }
  double cpu_ms = 0;
  for (auto _ : state) {
    o.max_iterations = 0;
    const Seconds base = seconds_of(problem, o);
    o.max_iterations = k;
    const Seconds run = seconds_of(problem, o);
    state.SetIterationTime((run.wall - base.wall) / k);
    cpu_ms += (run.cpu - base.cpu) / k * 1e3;
  }
  state.SetLabel(problem.device_name());
  // CPU time per iteration summed over the threads: on a machine shared with other work it estimates the cost
  // better than the wall time (wall ≈ cpu_ms / threads when the cores are free).
  state.counters["cpu_ms"] = benchmark::Counter(cpu_ms, benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_Iteration)->ArgNames({"n", "d", "warm"})->ArgsProduct({{10000, 20000}, {3, 50}, {0, 1}})
    ->UseManualTime()->Iterations(3)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
