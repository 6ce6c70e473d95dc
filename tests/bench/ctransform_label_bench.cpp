// flashot_ctransform_label_bench: times the hard c-transform (Problem::c_transform) and the label-augmented solve
// (LabelCostProblem::solve) on the problem tests/bench/peers/ctransform_label_peers.py gives FlashSinkhorn:
// x, y ~ N(0, 1) (n = m), random weights, ψ ~ 0.1·N(0, 1); labels uniform in [0, L), W = 1 − δ, fixed ε, fixed
// iterations (no convergence checks, no diagnostics). Warm-up, then the median of --rep runs. Prints figures (one
// CSV line per run: method,n,m,d,eps,iters,median_ms), asserts nothing. The c-transform's kernel choices
// (CudaTuning): --ct-cascade 0|1 (c_transform_cascade), --ct-columns 1|2|4 (c_transform_columns), --ct-tiles 0|1
// (c_transform_tiles), --ct-tile-rows 2|4|8 (c_transform_tile_rows); --copies C makes every target point appear C
// times (near ties: C ≥ 4 sends rows to the full re-scan). stderr tells how many rows the cascade scored again and how
// many were re-scanned (EngineStatistics).
//   flashot_ctransform_label_bench --mode ctransform|label [--n N] [--d D] [--classes L] [--lambda λ] [--eps E]
//                                  [--iters K] [--rep R] [--backend cpu|cuda|auto] [--threads T]
//                                  [--ct-cascade 0|1] [--ct-columns C] [--ct-tiles 0|1] [--ct-tile-rows R]
//                                  [--copies C]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "flashot/flashot.hpp"
#include "flashot/label_cost.hpp"

namespace {

std::vector<float> normal(std::size_t count, std::uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, static_cast<float>(scale));
  std::vector<float> v(count);
  for (float& e : v) e = g(rng);
  return v;
}

std::vector<float> weights(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.1f, 1.1f);
  std::vector<float> w(count);
  double total = 0;
  for (float& e : w) total += e = u(rng);
  for (float& e : w) e = static_cast<float>(e / total);
  return w;
}

template <class Fn>
double median_ms(Fn fn, int rep) {
  for (int i = 0; i < 2; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < rep; ++i) {
    const auto s = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "ctransform";
  std::size_t n = 100000, d = 3, classes = 10;
  double lambda = 1.0, eps = 0.1;
  int iters = 10, rep = 10;
  std::size_t copies = 1;
  flashot::BackendOptions bo;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--mode") mode = v;
    else if (k == "--n") n = std::stoull(v);
    else if (k == "--d") d = std::stoull(v);
    else if (k == "--classes") classes = std::stoull(v);
    else if (k == "--lambda") lambda = std::stod(v);
    else if (k == "--eps") eps = std::stod(v);
    else if (k == "--iters") iters = std::stoi(v);
    else if (k == "--rep") rep = std::stoi(v);
    else if (k == "--backend") bo.backend = flashot::parse_backend(v);
    else if (k == "--threads") bo.threads = std::stoi(v);
    else if (k == "--ct-cascade") bo.cuda.c_transform_cascade = std::stoi(v) != 0;
    else if (k == "--ct-columns") bo.cuda.c_transform_columns = std::stoi(v);
    else if (k == "--ct-tiles") bo.cuda.c_transform_tiles = std::stoi(v) != 0;
    else if (k == "--ct-tile-rows") bo.cuda.c_transform_tile_rows = std::stoi(v);
    else if (k == "--copies") copies = std::stoull(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (copies < 1 || copies > n) {
    std::fprintf(stderr, "--copies must be in [1, n] (got %zu)\n", copies);
    return 2;
  }
  const std::vector<float> x = normal(n * d, 1);
  std::vector<float> y = normal(n * d, 2);
  for (std::size_t j = 0; j < n; ++j)  // point j repeats point j % (n / copies)
    std::copy_n(y.begin() + static_cast<std::ptrdiff_t>(j % (n / copies) * d), d,
                y.begin() + static_cast<std::ptrdiff_t>(j * d));
  const std::vector<float> a = weights(n, 3), b = weights(n, 4);
  if (mode == "ctransform") {
    std::vector<float> psi = normal(n, 5, 0.1);
    for (std::size_t j = 0; j < n; ++j) psi[j] = psi[j % (n / copies)];  // copies tie exactly
    flashot::Problem problem({x, n, d}, {y, n, d}, a, b, bo);
    const double ms = median_ms([&] { (void)problem.c_transform(flashot::Side::kSource, psi); }, rep);
    const flashot::EngineStatistics st = problem.statistics();
    std::fprintf(stderr,
                 "# %s, %s; cascade %d, columns %d, tiles %d, tile rows %d, copies %zu: rows rescored %lld, "
                 "re-scanned %lld of %zu\n",
                 problem.backend_name().c_str(), problem.device_name().c_str(), int(bo.cuda.c_transform_cascade),
                 bo.cuda.c_transform_columns, int(bo.cuda.c_transform_tiles), bo.cuda.c_transform_tile_rows, copies,
                 st.c_transform_rescored, st.c_transform_rescanned, n);
    std::printf("flashot_ctransform,%zu,%zu,%zu,0,0,%.4f\n", n, n, d, ms);
    return 0;
  }
  if (mode == "label") {
    flashot::LabelCost labels;
    labels.classes = classes;
    labels.weight = lambda;
    std::mt19937_64 rng(6);
    std::uniform_int_distribution<int> pick(0, static_cast<int>(classes) - 1);
    for (std::size_t i = 0; i < n; ++i) labels.source.push_back(pick(rng));
    for (std::size_t j = 0; j < n; ++j) labels.target.push_back(pick(rng));
    flashot::LabelCostProblem problem({x, n, d}, {y, n, d}, a, b, labels, bo);
    for (const flashot::Scheme scheme : {flashot::Scheme::kSymmetric, flashot::Scheme::kAlternating}) {
      flashot::SolveOptions o;
      o.epsilon = eps;
      o.tolerance = 0;
      o.max_iterations = iters;
      o.diagnostics = false;
      o.scheme = scheme;
      const double ms = median_ms([&] { (void)problem.solve(o); }, rep);
      std::fprintf(stderr, "# %s, %s, augmented d = %zu\n", problem.backend_name().c_str(),
                   problem.device_name().c_str(), problem.augmented_d());
      std::printf("flashot_label_%s,%zu,%zu,%zu,%g,%d,%.4f\n", flashot::to_string(scheme).c_str(), n, n, d, eps, iters,
                  ms);
    }
    return 0;
  }
  std::fprintf(stderr, "--mode must be ctransform or label (got %s)\n", mode.c_str());
  return 2;
}
