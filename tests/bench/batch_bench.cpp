// Times flashot::solve_batch (docs/engine.md, "Batches") the way tests/bench/peers/peers_bench.py --batch times
// FlashSinkhorn's batched (B, N, D) solve: B problems of n = m points ~ N(0,1) in d dimensions (seeded), random
// weights U(0,1) + 0.1 normalized, fixed ε, fixed iterations, no checks and no diagnostics. The whole call is timed
// (centring, upload, the iterations, the download of every potential); median of the repeats after one warm-up.
// Prints CSV lines `method,B,n,m,d,eps,iters,median_ms` (method flashot_batch_<scheme>).
// --breakdown 1: also times the same call with 0 iterations (validation, centring and concatenation on the host,
// the upload and per-point preparation, the lists, the download: everything but the iterations) and prints to
// stderr `fixed_ms` (that call's median) and `per_iteration_ms` ((median − fixed) / iters). The peer takes tensors
// already on the GPU; the fixed part is what a host-array call pays on top of its iterations.
// usage: flashot_batch_bench [--batch 64] [--n 4096] [--d 3,64] [--eps 0.1] [--iters 10] [--repeats 5]
//                            [--backend cuda|cpu] [--scheme symmetric,alternating] [--breakdown 0|1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashot/batch.hpp"

using namespace flashot;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  std::size_t batch = 64, n = 4096;
  std::string dims = "3,64", schemes = "symmetric,alternating", backend = "cuda";
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
    else throw std::invalid_argument("unknown option " + k);
  }
  if (repeats < 1) throw std::invalid_argument("--repeats must be ≥ 1 (got " + std::to_string(repeats) + ")");
  BackendOptions bo;
  bo.backend = parse_backend(backend);
  std::printf("method,B,n,m,d,eps,iters,median_ms\n");
  for (const std::string& ds : split(dims)) {
    const std::size_t d = std::stoul(ds);
    std::mt19937_64 rng(0);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_real_distribution<float> uniform(0.f, 1.f);
    std::vector<std::vector<float>> xs(batch), ys(batch), as(batch), bs(batch);
    for (std::size_t q = 0; q < batch; ++q) {
      xs[q].resize(n * d);
      ys[q].resize(n * d);
      as[q].resize(n);
      bs[q].resize(n);
      for (float& v : xs[q]) v = normal(rng);
      for (float& v : ys[q]) v = normal(rng);
      double sa = 0, sb = 0;
      for (float& v : as[q]) sa += v = uniform(rng) + 0.1f;
      for (float& v : bs[q]) sb += v = uniform(rng) + 0.1f;
      for (float& v : as[q]) v = float(v / sa);
      for (float& v : bs[q]) v = float(v / sb);
    }
    for (const std::string& scheme : split(schemes)) {
      // The median of `repeats` timed calls after one warm-up (context, allocations), each running `run` iterations.
      const auto time_calls = [&](int run) {
        SolveOptions o;
        o.epsilon = eps;
        o.tolerance = 0;
        o.max_iterations = run;
        o.diagnostics = false;
        o.scheme = parse_scheme(scheme);
        std::vector<BatchProblem> problems(batch);
        for (std::size_t q = 0; q < batch; ++q) problems[q] = {{xs[q], n, d}, {ys[q], n, d}, as[q], bs[q], o};
        std::vector<double> ms;
        for (int r = 0; r <= repeats; ++r) {
          const auto start = std::chrono::steady_clock::now();
          const std::vector<SolveResult> out = solve_batch(problems, bo);
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
      std::printf("flashot_batch_%s,%zu,%zu,%zu,%zu,%g,%d,%.4f\n", scheme.c_str(), batch, n, n, d, eps, iters, median);
      std::fflush(stdout);
      if (breakdown) {
        const double fixed = time_calls(0);
        std::fprintf(stderr, "flashot_batch_%s B=%zu n=%zu d=%zu: fixed_ms %.3f (0 iterations), per_iteration_ms %.4f\n",
                     scheme.c_str(), batch, n, d, fixed, iters > 0 ? (median - fixed) / iters : 0.0);
      }
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "flashot_batch_bench: %s\n", e.what());
  return 1;
}
