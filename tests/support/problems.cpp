#include "problems.hpp"

#include <cmath>
#include <random>

namespace flashot::test {

namespace {

std::vector<float> normalized_weights(std::size_t n, bool random, double zero_fraction, std::mt19937_64& rng) {
  std::vector<float> w(n, 1.0f);
  if (random) {
    std::uniform_real_distribution<double> u(0.2, 1.0);
    std::uniform_real_distribution<double> z(0.0, 1.0);
    for (auto& v : w) v = static_cast<float>(u(rng));
    for (std::size_t i = 1; i < n; ++i)  // keep w[0] > 0 so the total mass is positive
      if (z(rng) < zero_fraction) w[i] = 0.0f;
  }
  double total = 0;
  for (float v : w) total += v;
  for (auto& v : w) v = static_cast<float>(v / total);
  return w;
}

}  // namespace

std::vector<float> random_points(std::size_t n, std::size_t d, std::uint64_t seed, double scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<float> p(n * d);
  for (auto& v : p) v = static_cast<float>(scale * g(rng));
  return p;
}

TestProblem make_problem(const ProblemShape& s) {
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<double> g(0.0, 1.0);
  TestProblem p;
  p.n = s.n;
  p.m = s.m;
  p.d = s.d;
  p.x.resize(s.n * s.d);
  p.y.resize(s.m * s.d);
  const std::size_t nx = s.duplicates ? (s.n + 1) / 2 : s.n;
  const std::size_t ny = s.duplicates ? (s.m + 1) / 2 : s.m;
  for (std::size_t i = 0; i < s.n; ++i)
    for (std::size_t c = 0; c < s.d; ++c)
      p.x[i * s.d + c] = i < nx ? static_cast<float>(s.spread * g(rng)) : p.x[(i - nx) * s.d + c];
  for (std::size_t j = 0; j < s.m; ++j)
    for (std::size_t c = 0; c < s.d; ++c) {
      if (j >= ny) {
        p.y[j * s.d + c] = p.y[(j - ny) * s.d + c];
        continue;
      }
      const double v = 0.8 * s.spread * g(rng);
      p.y[j * s.d + c] = static_cast<float>(s.offset + v + 0.2 * std::sin(3.0 * v));
    }
  p.a = normalized_weights(s.n, s.random_weights, s.zero_fraction, rng);
  p.b = normalized_weights(s.m, s.random_weights, s.zero_fraction, rng);
  return p;
}

std::vector<std::int32_t> random_labels(std::size_t n, std::size_t classes, std::uint64_t seed,
                                        double missing_fraction) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> cls(0, static_cast<std::int32_t>(classes) - 1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::int32_t> l(n);
  for (auto& v : l) v = u(rng) < missing_fraction ? -1 : cls(rng);
  return l;
}

}  // namespace flashot::test
