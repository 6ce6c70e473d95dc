// Example: entropic OT between two 2-D point clouds with the engine alone (flashot/flashot.hpp).
// The target is the source circle moved by (2, 1), sampled at other points: the barycentric projection of every
// source point should move it by about (2, 1), since a translation is the optimal map for the squared cost.
// Exit 0 when it does (ctest runs this).

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "flashot/flashot.hpp"

int main() {
  constexpr std::size_t kSource = 500, kTarget = 400;
  constexpr double kShiftX = 2.0, kShiftY = 1.0;
  constexpr double kAllowedError = 0.05;  // blur 0.1 and finite sampling leave a few hundredths
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> angle(0.0f, 6.2831853f);
  std::vector<float> x, y;
  for (std::size_t i = 0; i < kSource; ++i) {
    const float t = angle(rng);
    x.insert(x.end(), {std::cos(t), 0.5f * std::sin(t)});
  }
  for (std::size_t j = 0; j < kTarget; ++j) {
    const float t = angle(rng);
    y.insert(y.end(), {std::cos(t) + float(kShiftX), 0.5f * std::sin(t) + float(kShiftY)});
  }
  flashot::Problem problem({x, kSource, 2}, {y, kTarget, 2});
  flashot::SolveOptions options;
  options.blur = 0.1;
  options.scheme = flashot::Scheme::kAlternating;  // converges in fewer iterations than the averaged scheme here
  const flashot::SolveResult result = problem.solve(options);
  const std::vector<float> mapped = problem.barycentric(result, flashot::Side::kSource);
  double dx = 0, dy = 0;
  for (std::size_t i = 0; i < kSource; ++i) {
    dx += (mapped[2 * i] - x[2 * i]) / kSource;
    dy += (mapped[2 * i + 1] - x[2 * i + 1]) / kSource;
  }
  std::printf("%s: epsilon %.3g, cost %.4f (|shift|^2 = %.4f), %d iterations, %s\n", result.backend.c_str(),
              result.epsilon, result.dual_cost, kShiftX * kShiftX + kShiftY * kShiftY, result.iterations,
              result.converged ? "converged" : "not converged");
  std::printf("mean displacement (%.4f, %.4f), expected (%.1f, %.1f)\n", dx, dy, kShiftX, kShiftY);
  const bool ok = result.converged && std::abs(dx - kShiftX) < kAllowedError && std::abs(dy - kShiftY) < kAllowedError;
  return ok ? 0 : 1;
}
