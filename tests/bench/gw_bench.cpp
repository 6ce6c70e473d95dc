// flashot_gw_bench: times entropic fused Gromov–Wasserstein on synthetic tissue slices (tests/support/slices.cpp)
// at a given size: wall time, outer and inner iterations, peak device memory. Prints figures, asserts nothing.
//   flashot_gw_bench [--n N] [--m M] [--e E] [--alpha A] [--blur B] [--backend cpu|cuda|auto] [--threads T]
//                    [--outer-tol T] [--inner-tol T]
// Coordinates and embedding are normalized as `flashot align --spatial` does (workflow/spatial.cpp): ε = blur².
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "flashot/flashot.hpp"
#include "flashot/gromov.hpp"
#include "slices.hpp"

int main(int argc, char** argv) {
  std::size_t n = 20000, m = 20000, e = 50;
  double alpha = 0.5, blur = 0.05, outer_tol = 1e-5, inner_tol = 1e-4;
  flashot::BackendOptions bo;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--n") n = std::stoull(v);
    else if (k == "--m") m = std::stoull(v);
    else if (k == "--e") e = std::stoull(v);
    else if (k == "--alpha") alpha = std::stod(v);
    else if (k == "--blur") blur = std::stod(v);
    else if (k == "--outer-tol") outer_tol = std::stod(v);
    else if (k == "--inner-tol") inner_tol = std::stod(v);
    else if (k == "--backend") bo.backend = flashot::parse_backend(v);
    else if (k == "--threads") bo.threads = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  flashot::test::SliceOptions so;
  so.n_source = n;
  so.n_target = m;
  so.embedding_d = e;
  so.rotation_degrees = 30;
  const flashot::test::SlicePair s = flashot::test::make_slice_pair(so);
  // The CLI's units: coordinates so that the mean squared distance within a slice is 1 (a unit square has
  // variance 1/6 per axis: 1/3 for both slices' two axes together), embedding so that the mean ‖u − v‖² is 1.
  const auto scale = [](std::vector<float> v, std::size_t d) {
    double mean_sq = 0;
    std::vector<double> mean(d, 0.0);
    const std::size_t rows = v.size() / d;
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t c = 0; c < d; ++c) mean[c] += v[i * d + c];
    for (double& c : mean) c /= static_cast<double>(rows);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t c = 0; c < d; ++c) mean_sq += (v[i * d + c] - mean[c]) * (v[i * d + c] - mean[c]);
    mean_sq /= static_cast<double>(rows);
    const float f = static_cast<float>(1.0 / std::sqrt(2 * mean_sq));
    for (float& x : v) x *= f;
    return v;
  };
  const std::vector<float> x = scale(s.x, 2), y = scale(s.y, 2), u = scale(s.u, e), v = scale(s.v, e);
  const auto t0 = std::chrono::steady_clock::now();
  flashot::GromovProblem problem({{x, n, 2}, {y, m, 2}, {u, n, e}, {v, m, e}, {}, {}}, bo);
  flashot::GromovOptions o;
  o.alpha = alpha;
  o.epsilon = blur * blur;
  o.outer_tolerance = outer_tol;
  o.inner_tolerance = inner_tol;
  const flashot::GromovResult r = problem.solve(o);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const flashot::DeviceMemory mem = flashot::device_memory();
  std::printf("fused GW n=%zu m=%zu e=%zu spatial d=2 alpha=%g eps=%g backend=%s (%s)\n", n, m, e, alpha,
              o.epsilon, r.plan.backend.c_str(), r.plan.device.c_str());
  for (const flashot::GromovIteration& it : r.history)
    std::printf("  outer %3d  objective %.6g  change %.3g  inner %5d  marginal error %.2g  %.3f s\n", it.outer,
                it.objective, it.change, it.inner_iterations, it.marginal_error, it.seconds);
  std::printf("wall %.3f s (solve %.3f s), outer %d, inner %d, converged %s, peak device memory %.1f MB\n%s\n",
              wall, r.seconds, r.outer_iterations, r.inner_iterations, r.converged ? "yes" : "no",
              mem.peak_bytes / 1e6, r.message.c_str());
  return 0;
}
