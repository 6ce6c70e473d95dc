// Behaviour of Problem::solve on every backend: convergence and its report, non-convergence, cancellation,
// warm start, thread-count independence, gradients against finite differences, the Sinkhorn divergence.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend_fixture.hpp"
#include "problems.hpp"
#include "reference.hpp"

namespace flashot::test {
namespace {

constexpr double kCostRelTol = 1e-4;
constexpr double kConvergedCostRelTol = 1e-3;  // two converged solves (engine, reference) of the same problem
constexpr double kFiniteDifferenceRelTol = 2e-2;
constexpr double kDivergenceZeroTol = 1e-5;

class SolveTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!present()) {
      if (GetParam() == "cuda" && cuda_required())
        FAIL() << "FLASHOT_REQUIRE_CUDA=1 but the CUDA backend is not available (not compiled in, or no device)";
      GTEST_SKIP() << "backend '" << GetParam() << "' is not available here (not compiled in, or no device)";
    }
  }
  bool present() const {
    const auto b = available_backends();
    return std::find(b.begin(), b.end(), GetParam()) != b.end();
  }
  BackendOptions options(int threads = 0) const { return backend_options(GetParam(), threads); }
};

TEST_P(SolveTest, ConvergesToToleranceAndReportsIt) {
  const TestProblem p = make_problem({.n = 160, .m = 130, .d = 3, .seed = 21});
  Problem problem(p.xv(), p.yv(), p.a, p.b, options());
  // The symmetric (averaged) scheme contracts at ½(1 + σ₂) per iteration against σ₂² for the alternating one
  // (σ₂ the plan's second singular value, → 1 as ε → 0), so it gets a larger ε to converge in the budget.
  SolveOptions o;
  o.blur = 0.1;
  o.tolerance = 1e-4;
  o.max_iterations = 3000;
  const SolveResult r = problem.solve(o);
  EXPECT_TRUE(r.converged) << r.message;
  EXPECT_EQ(r.reason, StopReason::kTolerance);
  EXPECT_LE(r.marginal_error, o.tolerance);
  EXPECT_DOUBLE_EQ(r.epsilon, o.blur * o.blur);
  ASSERT_FALSE(r.checks.empty());
  EXPECT_EQ(r.checks.back().iteration, r.iterations);
  EXPECT_DOUBLE_EQ(r.checks.back().error, r.marginal_error);
  ASSERT_GE(r.stages.size(), 2u);
  int total = 0;
  for (const StageReport& s : r.stages) total += s.iterations;
  EXPECT_EQ(total, r.iterations);
  for (std::size_t k = 1; k < r.stages.size(); ++k) EXPECT_LT(r.stages[k].epsilon, r.stages[k - 1].epsilon);
  EXPECT_EQ(r.backend, GetParam());
  EXPECT_FALSE(r.device.empty());
  EXPECT_GT(r.seconds, 0);
  // The converged cost agrees with a converged fp64 solve (the potentials may differ by a constant).
  const ReferenceResult ref = reference_solve(p.xv(), p.yv(), p.a, p.b, o);
  ASSERT_TRUE(ref.converged);
  EXPECT_NEAR(r.dual_cost, ref.dual_cost, kConvergedCostRelTol * std::abs(ref.dual_cost));
  EXPECT_NEAR(r.primal_cost, ref.primal_cost, kConvergedCostRelTol * std::abs(ref.primal_cost));
  // Balanced and converged: both marginals of the plan are the weights.
  const std::vector<float> rows = problem.row_marginal(r), cols = problem.column_marginal(r);
  double err = 0;
  for (std::size_t i = 0; i < p.n; ++i) err += std::abs(rows[i] - p.a[i]);
  for (std::size_t j = 0; j < p.m; ++j) err += std::abs(cols[j] - p.b[j]);
  EXPECT_LE(err, 2 * o.tolerance);
}

/// Diagonal of the bounding box of both clouds, computed here in double from the points as given.
double box_diagonal(const TestProblem& p) {
  double sum = 0;
  for (std::size_t c = 0; c < p.d; ++c) {
    double lo = INFINITY, hi = -INFINITY;
    for (std::size_t i = 0; i < p.n; ++i) lo = std::min<double>(lo, p.x[i * p.d + c]), hi = std::max<double>(hi, p.x[i * p.d + c]);
    for (std::size_t j = 0; j < p.m; ++j) lo = std::min<double>(lo, p.y[j * p.d + c]), hi = std::max<double>(hi, p.y[j * p.d + c]);
    sum += (hi - lo) * (hi - lo);
  }
  return std::sqrt(sum);
}

TEST_P(SolveTest, RelativeBlurFollowsTheDataDiameter) {
  TestProblem p = make_problem({.n = 90, .m = 70, .d = 4, .seed = 23});
  const double diameter = box_diagonal(p);
  Problem problem(p.xv(), p.yv(), p.a, p.b, options());
  EXPECT_NEAR(problem.diameter(), diameter, 1e-6 * diameter);
  SolveOptions o;
  o.blur = 123.0;  // ignored: the relative blur takes precedence
  o.blur_relative = 0.1;
  o.max_iterations = 3000;
  const SolveResult r = problem.solve(o);
  EXPECT_TRUE(r.converged) << r.message;
  EXPECT_NEAR(r.epsilon, std::pow(0.1 * diameter, 2), 1e-6 * r.epsilon);
  EXPECT_NEAR(r.diameter, diameter, 1e-6 * diameter);
  // The same problem in other units (×1000): the same plan, ε scaled by 1000², no tuning.
  TestProblem big = p;
  for (float& v : big.x) v *= 1000.0f;
  for (float& v : big.y) v *= 1000.0f;
  Problem scaled(big.xv(), big.yv(), big.a, big.b, options());
  const SolveResult rs = scaled.solve(o);
  EXPECT_NEAR(rs.epsilon, r.epsilon * 1e6, 1e-5 * rs.epsilon);
  EXPECT_NEAR(rs.dual_cost, r.dual_cost * 1e6, kConvergedCostRelTol * std::abs(rs.dual_cost));
  // A given diameter replaces the data's, for the schedule and the relative blur alike.
  o.diameter = 10.0;
  const SolveResult given = problem.solve(o);
  EXPECT_DOUBLE_EQ(given.epsilon, 1.0);
  EXPECT_DOUBLE_EQ(given.diameter, 10.0);
  // The divergence's three solves share one ε (the x–y diameter's), or the debiasing would be wrong.
  o.diameter = 0;
  const DivergenceResult div = sinkhorn_divergence(p.xv(), p.yv(), p.a, p.b, o, options());
  EXPECT_DOUBLE_EQ(div.xx.epsilon, div.xy.epsilon);
  EXPECT_DOUBLE_EQ(div.yy.epsilon, div.xy.epsilon);
}

TEST_P(SolveTest, NonConvergenceIsReportedNotThrown) {
  const TestProblem p = make_problem({.n = 200, .m = 200, .d = 2, .seed = 22});
  Problem problem(p.xv(), p.yv(), p.a, p.b, options());
  SolveOptions o;
  o.epsilon = 1e-3;
  o.tolerance = 1e-9;
  o.max_iterations = 20;
  o.check_every = 5;
  SolveResult r;
  ASSERT_NO_THROW(r = problem.solve(o));
  EXPECT_FALSE(r.converged);
  EXPECT_EQ(r.reason, StopReason::kIterationBudget);
  EXPECT_EQ(r.iterations, 20);
  EXPECT_EQ(r.checks.size(), 4u);
  EXPECT_GT(r.marginal_error, o.tolerance);
  EXPECT_NE(r.message.find("not converged"), std::string::npos) << r.message;
}

TEST_P(SolveTest, FixedIterationsWithoutToleranceRunExactly) {
  const TestProblem p = make_problem({.n = 100, .m = 120, .d = 3, .seed = 23});
  Problem problem(p.xv(), p.yv(), p.a, p.b, options());
  SolveOptions o;
  o.epsilon = 0.05;
  o.tolerance = 0;
  o.max_iterations = 7;
  const SolveResult r = problem.solve(o);
  EXPECT_EQ(r.reason, StopReason::kFixedIterations);
  EXPECT_EQ(r.iterations, 7);
  EXPECT_TRUE(r.checks.empty());
  EXPECT_TRUE(std::isfinite(r.marginal_error));
  ASSERT_EQ(r.stages.size(), 1u);
  EXPECT_EQ(r.stages[0].iterations, 7);
}

TEST_P(SolveTest, ProgressCallbackSeesChecksAndCanCancel) {
  const TestProblem p = make_problem({.n = 150, .m = 150, .d = 3, .seed = 24});
  Problem problem(p.xv(), p.yv(), p.a, p.b, options());
  SolveOptions o;
  o.epsilon = 1e-3;
  o.tolerance = 1e-9;
  o.check_every = 4;
  o.max_iterations = 1000;
  std::vector<Progress> seen;
  o.progress = [&](const Progress& pr) {
    seen.push_back(pr);
    return seen.size() < 3;  // stop at the third check
  };
  const SolveResult r = problem.solve(o);
  EXPECT_EQ(r.reason, StopReason::kCancelled);
  EXPECT_FALSE(r.converged);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(r.iterations, 12);
  for (std::size_t k = 0; k < seen.size(); ++k) {
    EXPECT_EQ(seen[k].iteration, static_cast<int>(4 * (k + 1)));
    EXPECT_DOUBLE_EQ(seen[k].epsilon, 1e-3);
    EXPECT_EQ(seen[k].stage_count, 1);
    EXPECT_EQ(seen[k].max_iterations, 1000);
    EXPECT_TRUE(std::isfinite(seen[k].marginal_error));
  }
  // Cancelling during the ε-scaling stages stops there too.
  SolveOptions scaled;
  scaled.blur = 0.01;
  int calls = 0;
  scaled.progress = [&](const Progress&) { return ++calls < 2; };
  const SolveResult rs = problem.solve(scaled);
  EXPECT_EQ(rs.reason, StopReason::kCancelled);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(rs.iterations, 2);
  ASSERT_GE(rs.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(rs.epsilon, rs.stages[1].epsilon);  // the ε its potentials belong to
  EXPECT_TRUE(std::isfinite(rs.marginal_error));
}

TEST_P(SolveTest, SmallEpsilonStaysFinite) {
  // ε = 1e-3 on unit-scale data, far from the origin (centring keeps the fp32 scores accurate).
  ProblemShape shape{.n = 200, .m = 150, .d = 3, .seed = 25, .spread = 0.5, .offset = 0.2};
  TestProblem p = make_problem(shape);
  for (auto& v : p.x) v += 100.0f;
  for (auto& v : p.y) v += 100.0f;
  Problem problem(p.xv(), p.yv(), p.a, p.b, options());
  SolveOptions o;
  o.blur = std::sqrt(1e-3);
  o.scheme = Scheme::kAlternating;
  o.tolerance = 1e-3;
  o.max_iterations = 3000;
  const SolveResult r = problem.solve(o);
  ASSERT_NE(r.reason, StopReason::kNonFinite) << r.message;
  EXPECT_TRUE(r.converged) << r.message;
  for (float v : r.f) ASSERT_TRUE(std::isfinite(v));
  for (float v : r.g) ASSERT_TRUE(std::isfinite(v));
  EXPECT_TRUE(std::isfinite(r.dual_cost));
  const std::vector<float> t = problem.barycentric(r, Side::kSource);
  for (float v : t) {
    ASSERT_TRUE(std::isfinite(v));
    ASSERT_GT(v, 95.0f);  // in the caller's coordinates, not the centred ones
  }
}

TEST_P(SolveTest, WarmStartFromASolutionIsAlreadyConverged) {
  const TestProblem p = make_problem({.n = 200, .m = 180, .d = 3, .seed = 26});
  Problem problem(p.xv(), p.yv(), p.a, p.b, options());
  SolveOptions o;
  o.epsilon = 0.01;
  o.scheme = Scheme::kAlternating;
  o.tolerance = 1e-4;
  o.max_iterations = 5000;
  o.check_every = 1;
  const SolveResult first = problem.solve(o);
  ASSERT_TRUE(first.converged) << first.message;
  SolveOptions warm = o;
  warm.initial_f = first.f;
  warm.initial_g = first.g;
  const SolveResult second = problem.solve(warm);
  EXPECT_TRUE(second.converged);
  EXPECT_LE(second.iterations, 2);
  EXPECT_NEAR(second.dual_cost, first.dual_cost, kCostRelTol * std::abs(first.dual_cost));
}

TEST_P(SolveTest, ResultsDoNotDependOnTheThreadCount) {
  if (GetParam() != "cpu") GTEST_SKIP() << "thread count is a CPU option";
  const TestProblem p = make_problem({.n = 700, .m = 530, .d = 5, .seed = 27});
  SolveOptions o;
  o.blur = 0.05;
  o.tolerance = 1e-4;
  std::vector<SolveResult> results;
  std::vector<std::vector<float>> maps;
  for (int threads : {1, 2, 3}) {
    Problem problem(p.xv(), p.yv(), p.a, p.b, options(threads));
    results.push_back(problem.solve(o));
    maps.push_back(problem.barycentric(results.back(), Side::kSource));
  }
  for (std::size_t k = 1; k < results.size(); ++k) {
    EXPECT_EQ(results[k].iterations, results[0].iterations);
    EXPECT_EQ(results[k].f, results[0].f);  // the block partition is fixed: bitwise equal
    EXPECT_EQ(results[k].g, results[0].g);
    EXPECT_EQ(maps[k], maps[0]);
    EXPECT_EQ(results[k].dual_cost, results[0].dual_cost);
  }
}

TEST_P(SolveTest, GradientMatchesFiniteDifferencesOfTheCost) {
  // Danskin: ∇_x OT_ε = 2s(r_i x_i − (P Y)_i) at the optimum. Compare with central differences of the converged
  // dual cost, moving one coordinate of a few points.
  const TestProblem p = make_problem({.n = 40, .m = 50, .d = 2, .seed = 28});
  for (Cost cost : {Cost::kSquaredEuclidean, Cost::kHalfSquaredEuclidean}) {
    SolveOptions o;
    o.cost = cost;
    o.scheme = Scheme::kAlternating;
    o.epsilon = 0.05;
    o.tolerance = 1e-6;
    o.check_every = 5;
    o.max_iterations = 20000;
    Problem problem(p.xv(), p.yv(), p.a, p.b, options());
    const SolveResult r = problem.solve(o);
    ASSERT_TRUE(r.converged) << r.message;
    const std::vector<float> gx = problem.gradient(r, Side::kSource);
    const std::vector<float> gy = problem.gradient(r, Side::kTarget);
    const double h = 1e-2;
    for (Side side : {Side::kSource, Side::kTarget}) {
      const std::vector<float>& grad = side == Side::kSource ? gx : gy;
      const double gmax = max_abs(grad);
      for (std::size_t i : {0, 7, 19}) {
        for (std::size_t c = 0; c < p.d; ++c) {
          double cost_at[2];
          for (int sgn = 0; sgn < 2; ++sgn) {
            TestProblem q = p;
            std::vector<float>& pts = side == Side::kSource ? q.x : q.y;
            pts[i * p.d + c] += static_cast<float>(sgn == 0 ? h : -h);
            Problem moved(q.xv(), q.yv(), q.a, q.b, options());
            SolveOptions w = o;
            w.initial_f = r.f;
            w.initial_g = r.g;
            cost_at[sgn] = moved.solve(w).dual_cost;
          }
          const double fd = (cost_at[0] - cost_at[1]) / (2 * h);
          EXPECT_NEAR(grad[i * p.d + c], fd, kFiniteDifferenceRelTol * gmax)
              << (side == Side::kSource ? "x" : "y") << "[" << i << "][" << c << "] cost " << to_string(cost);
        }
      }
    }
  }
}

TEST_P(SolveTest, SinkhornDivergenceIsZeroOnItselfAndMatchesTheReference) {
  const TestProblem p = make_problem({.n = 120, .m = 90, .d = 3, .seed = 29, .random_weights = true});
  SolveOptions o;
  o.blur = 0.1;
  o.tolerance = 1e-5;
  const DivergenceResult self = sinkhorn_divergence(p.xv(), p.xv(), p.a, p.a, o, options());
  EXPECT_NEAR(self.divergence, 0.0, kDivergenceZeroTol);
  const DivergenceResult d = sinkhorn_divergence(p.xv(), p.yv(), p.a, p.b, o, options());
  EXPECT_GT(d.divergence, 0.0);
  const double ref = reference_solve(p.xv(), p.yv(), p.a, p.b, o).dual_cost -
                     0.5 * reference_solve(p.xv(), p.xv(), p.a, p.a, o).dual_cost -
                     0.5 * reference_solve(p.yv(), p.yv(), p.b, p.b, o).dual_cost;
  EXPECT_NEAR(d.divergence, ref, kConvergedCostRelTol * std::abs(d.xy.dual_cost));
}

TEST_P(SolveTest, PlanApplicationChunksOverManyColumns) {
  // k in the hundreds goes through the column chunking; every column must match the one-column application.
  const TestProblem p = make_problem({.n = 150, .m = 130, .d = 3, .seed = 30});
  Problem problem(p.xv(), p.yv(), p.a, p.b, options());
  SolveOptions o;
  o.epsilon = 0.02;
  o.max_iterations = 50;
  const SolveResult r = problem.solve(o);
  const std::size_t k = 300;
  const std::vector<float> v = random_points(p.m, k, 31);
  const std::vector<float> all = problem.apply_plan(r, v, k);
  const ReferencePlan plan(p.xv(), p.yv(), p.a, p.b, r);
  const std::vector<double> ref = plan.apply(v, k);
  EXPECT_LE(max_abs_diff(all, ref), 1e-4 * max_abs(ref));
}

INSTANTIATE_TEST_SUITE_P(Backends, SolveTest, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace flashot::test
