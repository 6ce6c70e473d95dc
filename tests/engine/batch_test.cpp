// Batches of problems (flashot/batch.hpp) on every backend: a ragged batch, each problem with its own schedule and
// options, against the fp64 reference solver problem by problem; a batch of one against the plain solve; a
// problem's result independent of its batch-mates (converged problems leave the lists); warm starts; the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend_fixture.hpp"
#include "flashot/batch.hpp"
#include "problems.hpp"
#include "reference.hpp"

namespace flashot::test {
namespace {

constexpr double kPotentialTol = 2e-4;  // × max(1, max|f|), as tests/engine/reference_test.cpp
constexpr double kCostRelTol = 1e-4;

class BatchTest : public ::testing::TestWithParam<std::string> {
 protected:
  BackendOptions options() const { return backend_options(GetParam(), 2); }
};

SolveOptions fixed(double epsilon, int iterations, Scheme scheme) {
  SolveOptions o;
  o.epsilon = epsilon;
  o.tolerance = 0;
  o.max_iterations = iterations;
  o.scheme = scheme;
  return o;
}

TEST_P(BatchTest, RaggedBatchMatchesTheReferenceProblemByProblem) {
  FLASHOT_REQUIRE_BACKEND(GetParam());
  for (const std::size_t d : {std::size_t{3}, std::size_t{20}}) {
    const std::vector<TestProblem> ps = {
        make_problem({.n = 300, .m = 200, .d = d, .seed = 41}),
        make_problem({.n = 40, .m = 530, .d = d, .seed = 42, .random_weights = true, .zero_fraction = 0.1}),
        make_problem({.n = 256, .m = 256, .d = d, .seed = 43, .spread = 0.3}),
        make_problem({.n = 700, .m = 90, .d = d, .seed = 44, .random_weights = true}),
    };
    std::vector<SolveOptions> os(ps.size());
    os[0] = fixed(0.05 * double(d), 30, Scheme::kAlternating);
    os[1].blur = 0.1 * std::sqrt(double(d));  // ε-scaling, its own schedule
    os[1].scaling = 0.6;
    os[1].tolerance = 0;
    os[1].max_iterations = 20;
    os[1].scheme = Scheme::kAlternating;
    os[2] = fixed(0.1 * double(d), 45, Scheme::kAlternating);
    os[2].reach = 1.0;  // unbalanced, its own damping
    os[3] = fixed(0.03 * double(d), 12, Scheme::kAlternating);
    os[3].cost = Cost::kHalfSquaredEuclidean;
    std::vector<BatchProblem> batch(ps.size());
    for (std::size_t q = 0; q < ps.size(); ++q) batch[q] = {ps[q].xv(), ps[q].yv(), ps[q].a, ps[q].b, os[q]};
    const std::vector<SolveResult> rs = solve_batch(batch, options());
    ASSERT_EQ(rs.size(), ps.size());
    for (std::size_t q = 0; q < ps.size(); ++q) {
      SCOPED_TRACE("d = " + std::to_string(d) + ", problem " + std::to_string(q));
      const SolveResult& r = rs[q];
      const ReferenceResult ref = reference_solve(ps[q].xv(), ps[q].yv(), ps[q].a, ps[q].b, os[q]);
      ASSERT_NE(r.reason, StopReason::kNonFinite) << r.message;
      ASSERT_EQ(r.f.size(), ps[q].n);
      ASSERT_EQ(r.g.size(), ps[q].m);
      EXPECT_EQ(r.iterations, ref.iterations);
      EXPECT_DOUBLE_EQ(r.epsilon, ref.epsilon);
      EXPECT_EQ(r.stages.size(), ref.stage_epsilons.size());
      const double scale = std::max(1.0, std::max(max_abs(ref.f), max_abs(ref.g)));
      EXPECT_LE(max_abs_diff(r.f, ref.f), kPotentialTol * scale);
      EXPECT_LE(max_abs_diff(r.g, ref.g), kPotentialTol * scale);
      EXPECT_NEAR(r.dual_cost, ref.dual_cost, kCostRelTol * std::max(1e-3, std::abs(ref.dual_cost)));
      EXPECT_NEAR(r.primal_cost, ref.primal_cost, kCostRelTol * std::max(1e-3, std::abs(ref.primal_cost)));
      EXPECT_NEAR(r.marginal_error, ref.marginal_error, 1e-3 + 1e-2 * ref.marginal_error);
      EXPECT_EQ(r.reason, StopReason::kFixedIterations);
    }
  }
}

TEST_P(BatchTest, BatchOfOneEqualsThePlainSolve) {
  FLASHOT_REQUIRE_BACKEND(GetParam());
  const TestProblem p = make_problem({.n = 333, .m = 290, .d = 3, .seed = 45, .random_weights = true});
  for (const Scheme scheme : {Scheme::kSymmetric, Scheme::kAlternating}) {
    SolveOptions o;
    o.blur = 0.2;
    o.tolerance = 1e-3;
    o.check_every = 5;
    o.scheme = scheme;
    Problem problem(p.xv(), p.yv(), p.a, p.b, options());
    const SolveResult plain = problem.solve(o);
    ASSERT_TRUE(plain.converged) << plain.message;
    const BatchProblem one{p.xv(), p.yv(), p.a, p.b, o};
    const SolveResult r = solve_batch({&one, 1}, options())[0];
    SCOPED_TRACE(to_string(scheme));
    EXPECT_EQ(r.reason, plain.reason);
    EXPECT_EQ(r.converged, plain.converged);
    // The symmetric dense step takes other (one-exponential) arithmetic, and CUDA's dense kernels other rounding
    // than its block kernels: a check may fall one period apart. The CPU's alternating steps are the same sums.
    const bool same_sums = GetParam() == "cpu" && scheme == Scheme::kAlternating;
    EXPECT_NEAR(r.iterations, plain.iterations, same_sums ? 0 : o.check_every);
    EXPECT_EQ(r.stages.size(), plain.stages.size());
    EXPECT_DOUBLE_EQ(r.epsilon, plain.epsilon);
    EXPECT_DOUBLE_EQ(r.diameter, plain.diameter);
    if (r.iterations == plain.iterations) {
      const double scale = std::max(1.0, max_abs(plain.f));
      EXPECT_LE(max_abs_diff(r.f, plain.f), 1e-4 * scale);
      EXPECT_LE(max_abs_diff(r.g, plain.g), 1e-4 * scale);
    }
    EXPECT_NEAR(r.dual_cost, plain.dual_cost, 1e-3 * std::abs(plain.dual_cost));
    EXPECT_NEAR(r.primal_cost, plain.primal_cost, 1e-3 * std::abs(plain.primal_cost));
    EXPECT_LE(r.marginal_error, o.tolerance);
    // The batch result serves the problem's plan operations.
    const std::vector<float> rows = problem.row_marginal(r);
    double err = 0;
    for (std::size_t i = 0; i < p.n; ++i) err += std::abs(rows[i] - p.a[i]);
    EXPECT_LE(err, 2 * o.tolerance);
  }
}

TEST_P(BatchTest, ProblemsDoNotDependOnTheirBatchMates) {
  FLASHOT_REQUIRE_BACKEND(GetParam());
  // An easy problem converges early and leaves the lists; a hard one (small ε) runs on. Each result equals the
  // problem's own batch of one.
  const TestProblem easy = make_problem({.n = 200, .m = 180, .d = 2, .seed = 46});
  const TestProblem hard = make_problem({.n = 500, .m = 520, .d = 2, .seed = 47, .spread = 0.3});
  SolveOptions oe, oh;
  oe.epsilon = 0.5;
  oe.tolerance = 1e-4;
  oe.check_every = 3;
  oh.epsilon = 0.005;
  oh.tolerance = 1e-5;
  oh.check_every = 7;
  oh.max_iterations = 300;
  const BatchProblem both[] = {{easy.xv(), easy.yv(), easy.a, easy.b, oe}, {hard.xv(), hard.yv(), hard.a, hard.b, oh}};
  const std::vector<SolveResult> rs = solve_batch(both, options());
  const SolveResult alone_e = solve_batch({&both[0], 1}, options())[0];
  const SolveResult alone_h = solve_batch({&both[1], 1}, options())[0];
  EXPECT_TRUE(rs[0].converged) << rs[0].message;
  EXPECT_LT(rs[0].iterations, rs[1].iterations);
  for (const auto& [r, alone] : {std::pair{&rs[0], &alone_e}, std::pair{&rs[1], &alone_h}}) {
    EXPECT_EQ(r->iterations, alone->iterations);
    EXPECT_EQ(r->reason, alone->reason);
    EXPECT_EQ(r->checks.size(), alone->checks.size());
    const double scale = std::max(1.0, max_abs(alone->f));
    // The CPU backend walks every problem's columns in the same chunks alone or not: identical. The CUDA backend
    // may split the columns differently: fp32 rounding.
    const double tol = GetParam() == "cpu" ? 0.0 : 1e-5 * scale;
    EXPECT_LE(max_abs_diff(r->f, alone->f), tol);
    EXPECT_LE(max_abs_diff(r->g, alone->g), tol);
  }
}

TEST_P(BatchTest, WarmStartsFromSavedPotentials) {
  FLASHOT_REQUIRE_BACKEND(GetParam());
  const TestProblem p = make_problem({.n = 260, .m = 240, .d = 3, .seed = 48});
  SolveOptions o;
  o.epsilon = 0.03;
  o.tolerance = 1e-4;
  o.check_every = 5;
  o.max_iterations = 2000;
  const BatchProblem cold{p.xv(), p.yv(), p.a, p.b, o};
  const SolveResult first = solve_batch({&cold, 1}, options())[0];
  ASSERT_TRUE(first.converged) << first.message;
  BatchProblem warm = cold;
  warm.options.initial_f = first.f;
  warm.options.initial_g = first.g;
  const BatchProblem both[] = {warm, cold};
  const std::vector<SolveResult> rs = solve_batch(both, options());
  EXPECT_TRUE(rs[0].converged);
  EXPECT_EQ(rs[0].iterations, o.check_every);  // already converged: the first check stops it
  EXPECT_EQ(rs[1].iterations, first.iterations);
  EXPECT_NEAR(rs[0].dual_cost, first.dual_cost, 1e-4 * std::abs(first.dual_cost));
}

TEST_P(BatchTest, ACallbackCancelsItsOwnProblemOnly) {
  FLASHOT_REQUIRE_BACKEND(GetParam());
  const TestProblem p = make_problem({.n = 150, .m = 170, .d = 3, .seed = 51});
  const TestProblem q = make_problem({.n = 260, .m = 120, .d = 3, .seed = 52});
  SolveOptions stop, go;
  stop.epsilon = go.epsilon = 0.02;
  stop.tolerance = go.tolerance = 1e-9;  // never reached: the budget or the callback ends them
  stop.check_every = go.check_every = 5;
  stop.max_iterations = go.max_iterations = 40;
  int calls = 0;
  stop.progress = [&calls](const Progress& pr) {
    ++calls;
    return pr.iteration < 10;  // cancels at the check after iteration 10
  };
  const BatchProblem both[] = {{p.xv(), p.yv(), p.a, p.b, stop}, {q.xv(), q.yv(), q.a, q.b, go}};
  const std::vector<SolveResult> rs = solve_batch(both, options());
  EXPECT_EQ(rs[0].reason, StopReason::kCancelled) << rs[0].message;
  EXPECT_EQ(rs[0].iterations, 10);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(rs[1].reason, StopReason::kIterationBudget) << rs[1].message;
  EXPECT_EQ(rs[1].iterations, 40);
  EXPECT_EQ(rs[1].checks.size(), 8u);
  for (const SolveResult& r : rs) EXPECT_TRUE(std::isfinite(r.marginal_error));
}

TEST(BatchShards, HostCombinedShardsSolveTheBatchAsOneBackend) {
  // 4 problems, 3072 rows with padding: two CPU shards split them at a multiple of 1024 rows.
  std::vector<TestProblem> ps;
  for (int q = 0; q < 4; ++q)
    ps.push_back(make_problem({.n = std::size_t(500 + 60 * q), .m = std::size_t(300 + 50 * q), .d = 3,
                               .seed = std::uint64_t(60 + q)}));
  SolveOptions o;
  o.epsilon = 0.05;
  o.tolerance = 1e-3;
  o.check_every = 5;
  o.max_iterations = 200;
  std::vector<BatchProblem> batch;
  for (const TestProblem& p : ps) batch.push_back({p.xv(), p.yv(), p.a, p.b, o});
  BackendOptions sharded = backend_options("cpu", 2);
  sharded.shards = 2;
  const std::vector<SolveResult> one = solve_batch(batch, backend_options("cpu", 2));
  const std::vector<SolveResult> two = solve_batch(batch, sharded);
  for (std::size_t q = 0; q < ps.size(); ++q) {
    EXPECT_EQ(two[q].iterations, one[q].iterations) << q;
    EXPECT_EQ(two[q].converged, one[q].converged) << q;
    EXPECT_LE(max_abs_diff(two[q].f, one[q].f), 1e-5 * std::max(1.0, max_abs(one[q].f))) << q;
    EXPECT_NEAR(two[q].dual_cost, one[q].dual_cost, 1e-5 * std::abs(one[q].dual_cost)) << q;
  }
  BackendOptions many = backend_options("cuda");
  many.devices = {0, 1};
  EXPECT_THROW(solve_batch(batch, many), std::runtime_error);  // NCCL shards: refused before anything runs
}

TEST_P(BatchTest, RefusesEmptyAndMismatchedProblems) {
  FLASHOT_REQUIRE_BACKEND(GetParam());
  const TestProblem p = make_problem({.n = 30, .m = 20, .d = 3, .seed = 49});
  const TestProblem q = make_problem({.n = 30, .m = 20, .d = 2, .seed = 50});
  const std::vector<float> none;
  const auto message = [&](std::vector<BatchProblem> batch) {
    try {
      solve_batch(batch, options());
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(nothing thrown)");
  };
  EXPECT_NE(message({}).find("at least one problem"), std::string::npos);
  const std::string empty = message({{p.xv(), p.yv(), {}, {}, {}}, {PointsView{none, 0, 3}, p.yv(), {}, {}, {}}});
  EXPECT_NE(empty.find("batch problem 1 is empty"), std::string::npos) << empty;
  const std::string dims = message({{p.xv(), p.yv(), {}, {}, {}}, {q.xv(), q.yv(), {}, {}, {}}});
  EXPECT_NE(dims.find("batch problem 1 has dimension"), std::string::npos) << dims;
  SolveOptions alt;
  alt.scheme = Scheme::kAlternating;
  const std::string scheme = message({{p.xv(), p.yv(), {}, {}, {}}, {p.xv(), p.yv(), {}, {}, alt}});
  EXPECT_NE(scheme.find("scheme"), std::string::npos) << scheme;
  SolveOptions bad;
  bad.scaling = 2;
  const std::string opts = message({{p.xv(), p.yv(), {}, {}, {}}, {p.xv(), p.yv(), {}, {}, bad}});
  EXPECT_NE(opts.find("batch problem 1: scaling"), std::string::npos) << opts;
  // Non-finite coordinates (found in the pass that centres the points): the problem, cloud, row, column and value.
  for (const float v : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    std::vector<float> y = q.y;
    y[7 * 2 + 1] = v;
    const std::string finite =
        message({{q.xv(), q.yv(), {}, {}, {}}, {q.xv(), PointsView{y, q.yv().n, 2}, {}, {}, {}}});
    EXPECT_NE(finite.find("batch problem 1: y has a non-finite coordinate at row 7, column 1"), std::string::npos)
        << finite;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, BatchTest, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace flashot::test
