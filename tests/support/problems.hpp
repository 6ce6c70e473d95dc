#pragma once
// Seeded problem generators shared by the engine tests of every backend.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot::test {

/// Two point clouds with weights, owning their storage.
struct TestProblem {
  std::size_t n = 0, m = 0, d = 0;
  std::vector<float> x;  // (n × d)
  std::vector<float> y;  // (m × d)
  std::vector<float> a;  // (n), sums to 1
  std::vector<float> b;  // (m), sums to 1

  PointsView xv() const { return {x, n, d}; }
  PointsView yv() const { return {y, m, d}; }
};

struct ProblemShape {
  std::size_t n = 200;
  std::size_t m = 200;
  std::size_t d = 3;
  std::uint64_t seed = 1;
  /// Random weights (else uniform); with zero_fraction of them set to exactly zero.
  bool random_weights = false;
  double zero_fraction = 0;
  /// Standard deviation of the points and the offset between the clouds' centres (along every axis).
  double spread = 0.5;
  double offset = 0.3;
  /// Every point also appears a second time (duplicates), halving the number of distinct points.
  bool duplicates = false;
};

/// x ~ N(0, spread²), y ~ N(offset, (0.8·spread)²) with a mild nonlinearity, deterministic in `seed`.
TestProblem make_problem(const ProblemShape& shape);

/// n seeded N(0,1)·scale points in d dimensions.
std::vector<float> random_points(std::size_t n, std::size_t d, std::uint64_t seed, double scale = 1.0);

/// Seeded labels in [0, classes) with a fraction set to −1 (missing).
std::vector<std::int32_t> random_labels(std::size_t n, std::size_t classes, std::uint64_t seed,
                                        double missing_fraction = 0);

}  // namespace flashot::test
