// Backend::apply_bilinear (the Hessian's second-moment term) on every backend against the fp64 dense plan: the
// general split over derived columns (w ≠ v, several chunks) and the symmetric path taken when w and v are the same
// data.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../../engine/src/backend.hpp"
#include "backend_fixture.hpp"
#include "problems.hpp"
#include "reference.hpp"

namespace flashot::test {
namespace {

constexpr double kRelTol = 1e-4;  // fp32 plan applications, relative to the largest entry

/// Σ_j P_ij ⟨u_i, w_j⟩ v_j from the dense plan.
std::vector<double> dense_bilinear(const ReferencePlan& plan, const std::vector<float>& u, const std::vector<float>& w,
                                   std::size_t e, const std::vector<float>& v, std::size_t k) {
  std::vector<double> out(plan.n() * k, 0.0);
  for (std::size_t i = 0; i < plan.n(); ++i)
    for (std::size_t j = 0; j < plan.m(); ++j) {
      double uw = 0;
      for (std::size_t c = 0; c < e; ++c) uw += static_cast<double>(u[i * e + c]) * w[j * e + c];
      for (std::size_t q = 0; q < k; ++q) out[i * k + q] += plan.at(i, j) * uw * v[j * k + q];
    }
  return out;
}

class BilinearTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BilinearTest, MatchesTheDensePlanInBothPaths) {
  const std::string backend = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const TestProblem p = make_problem({.n = 60, .m = 50, .d = 3, .seed = 91, .random_weights = true});
  const std::vector<float> f = random_points(p.n, 1, 92, 0.05), g = random_points(p.m, 1, 93, 0.05);
  const double eps = 0.1;
  const detail::ProblemData data{p.xv(), p.yv(), p.a, p.b};
  const std::unique_ptr<detail::Backend> b = detail::make_backend(backend_options(backend, 1), data);
  b->set_potentials(f, g);
  const detail::PlanParams pp{eps, 1.0};
  const std::vector<double> fd(f.begin(), f.end()), gd(g.begin(), g.end());
  const ReferencePlan plan(p.xv(), p.yv(), p.a, p.b, fd, gd, eps, Cost::kSquaredEuclidean);

  // General path: e = 40 bilinear terms of k = 7 columns: 280 derived columns, two chunks.
  const std::size_t e = 40, k = 7;
  const std::vector<float> u = random_points(p.n, e, 94), w = random_points(p.m, e, 95), v = random_points(p.m, k, 96);
  std::vector<float> out(p.n * k);
  b->apply_bilinear(pp, Side::kSource, u, w, e, v, k, out);
  const std::vector<double> expected = dense_bilinear(plan, u, w, e, v, k);
  EXPECT_LE(max_abs_diff(out, expected), kRelTol * max_abs(expected));

  // Symmetric path: w and v the same data (the Hessian's call with y).
  const std::vector<float> uy = random_points(p.n, p.d, 97);
  std::vector<float> moment(p.n * p.d);
  b->apply_bilinear(pp, Side::kSource, uy, p.y, p.d, p.y, p.d, moment);
  const std::vector<double> expected_moment = dense_bilinear(plan, uy, p.y, p.d, p.y, p.d);
  EXPECT_LE(max_abs_diff(moment, expected_moment), kRelTol * max_abs(expected_moment));
}

INSTANTIATE_TEST_SUITE_P(Backends, BilinearTest, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace flashot::test
