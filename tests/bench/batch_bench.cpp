// Times flashot::solve_batch (docs/engine.md, "Batches") the way tests/bench/peers/peers_bench.py --batch times
// FlashSinkhorn's batched (B, N, D) solve: B problems of n = m points ~ N(0,1) in d dimensions (seeded), random
// weights U(0,1) + 0.1 normalized, fixed ε, fixed iterations, no checks and no diagnostics. The whole call is timed;
// median of the repeats after one warm-up. Prints CSV lines `method,B,n,m,d,eps,iters,median_ms`.
// Two modes (--resident, default 0,1 in a CUDA build, 0 otherwise):
//   0 (method flashot_batch_<scheme>): solve_batch from host arrays — validation, centring and concatenation on the
//     host, the upload, the iterations, the download of every potential.
//   1 (method flashot_batch_resident_<scheme>): solve_batch_on_device from one (B, n, d) and one (B, m, d) device
//     array and (B, n), (B, m) device weights, uploaded once before the timed calls, as the peer's inputs are torch
//     CUDA tensors: validation, centring and concatenation on the device, the iterations, the download of every
//     potential.
// --breakdown 1: also times the same call with 0 iterations (everything but the iterations) and prints to stderr
// `fixed_ms` (that call's median) and `per_iteration_ms` ((median − fixed) / iters), per mode.
// usage: flashot_batch_bench [--batch 64] [--n 4096] [--d 3,64] [--eps 0.1] [--iters 10] [--repeats 5]
//                            [--backend cuda|cpu] [--scheme symmetric,alternating] [--breakdown 0|1]
//                            [--resident 0,1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(FLASHOT_BENCH_CUDA_RUNTIME)
#include <cuda_runtime.h>
#endif

#include "flashot/batch.hpp"

using namespace flashot;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

#if defined(FLASHOT_BENCH_CUDA_RUNTIME)
/// The batch's values in one device allocation, freed on scope exit.
class DeviceCopy {
 public:
  explicit DeviceCopy(const std::vector<float>& host) {
    if (cudaMalloc(&data_, std::max<std::size_t>(host.size(), 1) * sizeof(float)) != cudaSuccess)
      throw std::runtime_error("cudaMalloc of " + std::to_string(host.size() * sizeof(float)) + " bytes failed");
    if (cudaMemcpy(data_, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy to the device failed");
  }
  ~DeviceCopy() { cudaFree(data_); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  const float* get() const { return data_; }

 private:
  float* data_ = nullptr;
};
#endif

}  // namespace

int main(int argc, char** argv) try {
  std::size_t batch = 64, n = 4096;
  std::string dims = "3,64", schemes = "symmetric,alternating", backend = "cuda";
#if defined(FLASHOT_BENCH_CUDA_RUNTIME)
  std::string modes = "0,1";
#else
  std::string modes = "0";
#endif
  double eps = 0.1;
  int iters = 10, repeats = 5;
  bool breakdown = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--batch") batch = std::stoul(v);
    else if (k == "--n") n = std::stoul(v);
    else if (k == "--d") dims = v;
    else if (k == "--eps") eps = std::stod(v);
    else if (k == "--iters") iters = std::stoi(v);
    else if (k == "--repeats") repeats = std::stoi(v);
    else if (k == "--backend") backend = v;
    else if (k == "--scheme") schemes = v;
    else if (k == "--breakdown") breakdown = v != "0";
    else if (k == "--resident") modes = v;
    else throw std::invalid_argument("unknown option " + k);
  }
  if (repeats < 1) throw std::invalid_argument("--repeats must be ≥ 1 (got " + std::to_string(repeats) + ")");
  for (const std::string& mode : split(modes)) {
    if (mode != "0" && mode != "1")
      throw std::invalid_argument("--resident takes 0 (host arrays), 1 (device arrays) or both, 0,1 (got '" + mode +
                                  "')");
#if !defined(FLASHOT_BENCH_CUDA_RUNTIME)
    if (mode == "1")
      throw std::invalid_argument("--resident 1 needs a CUDA build (this flashot_batch_bench has no CUDA runtime)");
#endif
  }
  BackendOptions bo;
  bo.backend = parse_backend(backend);
  std::printf("method,B,n,m,d,eps,iters,median_ms\n");
  for (const std::string& ds : split(dims)) {
    const std::size_t d = std::stoul(ds);
    std::mt19937_64 rng(0);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_real_distribution<float> uniform(0.f, 1.f);
    // (B, n, d) and (B, n) row-major, as a batched tensor holds them; problem q is the q-th slice.
    std::vector<float> xs(batch * n * d), ys(batch * n * d), as(batch * n), bs(batch * n);
    for (std::size_t q = 0; q < batch; ++q) {
      for (std::size_t e = 0; e < n * d; ++e) xs[q * n * d + e] = normal(rng);
      for (std::size_t e = 0; e < n * d; ++e) ys[q * n * d + e] = normal(rng);
      double sa = 0, sb = 0;
      for (std::size_t i = 0; i < n; ++i) sa += as[q * n + i] = uniform(rng) + 0.1f;
      for (std::size_t i = 0; i < n; ++i) sb += bs[q * n + i] = uniform(rng) + 0.1f;
      for (std::size_t i = 0; i < n; ++i) as[q * n + i] = float(as[q * n + i] / sa);
      for (std::size_t i = 0; i < n; ++i) bs[q * n + i] = float(bs[q * n + i] / sb);
    }
    for (const std::string& mode : split(modes)) {
      const bool resident = mode == "1";
      // The call a timed repeat makes, for the options of one problem (every problem takes the same).
      std::function<std::vector<SolveResult>(const SolveOptions&)> call;
#if defined(FLASHOT_BENCH_CUDA_RUNTIME)
      std::unique_ptr<DeviceCopy> dx, dy, da, db;
#endif
      if (!resident) {
        call = [&](const SolveOptions& o) {
          std::vector<BatchProblem> problems(batch);
          for (std::size_t q = 0; q < batch; ++q)
            problems[q] = {{std::span<const float>(xs).subspan(q * n * d, n * d), n, d},
                           {std::span<const float>(ys).subspan(q * n * d, n * d), n, d},
                           std::span<const float>(as).subspan(q * n, n), std::span<const float>(bs).subspan(q * n, n),
                           o};
          return solve_batch(problems, bo);
        };
      } else {
#if defined(FLASHOT_BENCH_CUDA_RUNTIME)
        // Uploaded once, outside the timed calls (the peer's inputs are CUDA tensors already).
        dx = std::make_unique<DeviceCopy>(xs);
        dy = std::make_unique<DeviceCopy>(ys);
        da = std::make_unique<DeviceCopy>(as);
        db = std::make_unique<DeviceCopy>(bs);
        bo.device = 0;
        call = [&](const SolveOptions& o) {
          std::vector<DeviceBatchProblem> problems(batch);
          for (std::size_t q = 0; q < batch; ++q)
            problems[q] = {{dx->get() + q * n * d, n, d, 0}, {dy->get() + q * n * d, n, d, 0},
                           {da->get() + q * n, n, 0}, {db->get() + q * n, n, 0}, o};
          return solve_batch_on_device(problems, bo);
        };
#endif
      }
      const std::string method = resident ? "flashot_batch_resident_" : "flashot_batch_";
      for (const std::string& scheme : split(schemes)) {
        // The median of `repeats` timed calls after one warm-up (context, allocations), each running `run` iterations.
        const auto time_calls = [&](int run) {
          SolveOptions o;
          o.epsilon = eps;
          o.tolerance = 0;
          o.max_iterations = run;
          o.diagnostics = false;
          o.scheme = parse_scheme(scheme);
          std::vector<double> ms;
          for (int r = 0; r <= repeats; ++r) {
            const auto start = std::chrono::steady_clock::now();
            const std::vector<SolveResult> out = call(o);
            const double t =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
            if (out[0].iterations != run)
              throw std::runtime_error("ran " + std::to_string(out[0].iterations) + " iterations");
            if (r > 0) ms.push_back(t);
          }
          std::sort(ms.begin(), ms.end());
          return ms[ms.size() / 2];
        };
        const double median = time_calls(iters);
        std::printf("%s%s,%zu,%zu,%zu,%zu,%g,%d,%.4f\n", method.c_str(), scheme.c_str(), batch, n, n, d, eps, iters,
                    median);
        std::fflush(stdout);
        if (breakdown) {
          const double fixed = time_calls(0);
          std::fprintf(stderr, "%s%s B=%zu n=%zu d=%zu: fixed_ms %.3f (0 iterations), per_iteration_ms %.4f\n",
                       method.c_str(), scheme.c_str(), batch, n, d, fixed, iters > 0 ? (median - fixed) / iters : 0.0);
        }
      }
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "flashot_batch_bench: %s\n", e.what());
  return 1;
}
