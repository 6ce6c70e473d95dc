// Every backend against the fp64 dense reference (tests/support), on seeded problems covering the option space.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>

#include "backend_fixture.hpp"
#include "problems.hpp"
#include "reference.hpp"

namespace flashot::test {
namespace {

// Named tolerances. Potentials are compared after the same iterations (same trajectory); fp32 scores and fp32
// potentials leave ~1e-6 relative error per iteration, the reference is exact.
constexpr double kPotentialTol = 2e-4;   // × max(1, max|f|), absolute in cost units
constexpr double kCostRelTol = 1e-4;     // dual and primal costs, relative
constexpr double kPlanRelTol = 1e-4;     // plan applications and marginals, relative to the largest entry
constexpr double kPointTol = 1e-4;       // barycentric / mapped points, × the data scale
constexpr double kGradientRelTol = 2e-4; // relative to the largest gradient entry
constexpr double kProbabilityTol = 1e-4; // label probabilities
// A single plan entry carries the fp32 rounding of its score, amplified by 1/ε (≈1e-4 relative at ε = 1e-3);
// sums over many entries (the applications above) average it out.
constexpr double kEntryRelTol = 3e-4;

struct Case {
  std::string name;
  ProblemShape shape;
  SolveOptions options;
};

SolveOptions fixed_iterations(SolveOptions o, int iterations) {
  o.tolerance = 0;
  o.max_iterations = iterations;
  return o;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  SolveOptions scaling;  // ε-scaling from the diameter down to blur²
  scaling.blur = 0.1;
  scaling.scaling = 0.6;
  SolveOptions fixed;
  fixed.epsilon = 0.02;

  c.push_back({"balanced_symmetric_scaling_d3", {.n = 150, .m = 150, .d = 3, .seed = 1}, fixed_iterations(scaling, 20)});
  SolveOptions alt = fixed_iterations(fixed, 40);
  alt.scheme = Scheme::kAlternating;
  c.push_back({"balanced_alternating_fixed_d2", {.n = 120, .m = 170, .d = 2, .seed = 2}, alt});
  SolveOptions unb = fixed_iterations(scaling, 25);
  unb.reach = 0.5;
  c.push_back({"unbalanced_symmetric_d3", {.n = 140, .m = 100, .d = 3, .seed = 3, .random_weights = true}, unb});
  SolveOptions semi = fixed_iterations(fixed, 30);
  semi.scheme = Scheme::kAlternating;
  semi.reach_source = 0.7;
  c.push_back({"semi_unbalanced_alternating_d3", {.n = 90, .m = 130, .d = 3, .seed = 4}, semi});
  SolveOptions half = fixed_iterations(scaling, 20);
  half.cost = Cost::kHalfSquaredEuclidean;
  c.push_back({"half_cost_d1", {.n = 200, .m = 150, .d = 1, .seed = 5}, half});
  SolveOptions high = fixed_iterations(scaling, 15);
  high.blur = 0.5;
  c.push_back({"embedding_d50", {.n = 160, .m = 110, .d = 50, .seed = 6, .spread = 0.2, .offset = 0.05}, high});
  c.push_back({"embedding_d128", {.n = 70, .m = 90, .d = 128, .seed = 7, .spread = 0.15, .offset = 0.02}, high});
  c.push_back({"zero_weights_and_duplicates_d3",
               {.n = 160, .m = 140, .d = 3, .seed = 8, .random_weights = true, .zero_fraction = 0.2, .duplicates = true},
               fixed_iterations(scaling, 20)});
  SolveOptions small = fixed_iterations(SolveOptions{}, 150);
  small.epsilon = 1e-3;
  c.push_back({"small_epsilon_1em3_d2", {.n = 150, .m = 150, .d = 2, .seed = 9, .spread = 0.3}, small});
  return c;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ReferenceTest : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

TEST_P(ReferenceTest, SolveAndEveryOperationMatchTheReference) {
  const auto& [backend, c] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const TestProblem p = make_problem(c.shape);
  Problem problem(p.xv(), p.yv(), p.a, p.b, backend_options(backend));
  const SolveResult r = problem.solve(c.options);
  const ReferenceResult ref = reference_solve(p.xv(), p.yv(), p.a, p.b, c.options);

  ASSERT_NE(r.reason, StopReason::kNonFinite) << r.message;
  EXPECT_EQ(r.iterations, ref.iterations);
  EXPECT_DOUBLE_EQ(r.epsilon, ref.epsilon);
  for (float v : r.f) ASSERT_TRUE(std::isfinite(v));
  for (float v : r.g) ASSERT_TRUE(std::isfinite(v));
  const double fscale = std::max(1.0, std::max(max_abs(ref.f), max_abs(ref.g)));
  EXPECT_LE(max_abs_diff(r.f, ref.f), kPotentialTol * fscale);
  EXPECT_LE(max_abs_diff(r.g, ref.g), kPotentialTol * fscale);
  EXPECT_NEAR(r.dual_cost, ref.dual_cost, kCostRelTol * std::max(1e-3, std::abs(ref.dual_cost)));
  EXPECT_NEAR(r.primal_cost, ref.primal_cost, kCostRelTol * std::max(1e-3, std::abs(ref.primal_cost)));
  EXPECT_NEAR(r.marginal_error, ref.marginal_error, 1e-3 + 1e-2 * ref.marginal_error);

  // Plan operations, on the engine's own potentials (the dense plan of exactly those potentials is the truth).
  const ReferencePlan plan(p.xv(), p.yv(), p.a, p.b, r);
  const std::size_t k = 5;
  const std::vector<float> v = random_points(p.m, k, 11);
  const std::vector<float> u = random_points(p.n, k, 12);
  const std::vector<double> pv = plan.apply(v, k), ptu = plan.apply_transpose(u, k);
  EXPECT_LE(max_abs_diff(problem.apply_plan(r, v, k), pv), kPlanRelTol * max_abs(pv));
  EXPECT_LE(max_abs_diff(problem.apply_plan_transpose(r, u, k), ptu), kPlanRelTol * max_abs(ptu));
  const std::vector<double> rm = plan.row_marginal(), cm = plan.column_marginal();
  EXPECT_LE(max_abs_diff(problem.row_marginal(r), rm), kPlanRelTol * max_abs(rm));
  EXPECT_LE(max_abs_diff(problem.column_marginal(r), cm), kPlanRelTol * max_abs(cm));

  const double scale = std::max(max_abs(p.x), max_abs(p.y));
  for (Side side : {Side::kSource, Side::kTarget}) {
    const std::vector<float> t = problem.barycentric(r, side);
    const std::vector<double> tr = plan.barycentric(side);
    // Rows without plan mass (zero weight) are softmax-normalized by the engine and undefined in the reference.
    const std::span<const float> w = side == Side::kSource ? std::span<const float>(p.a) : std::span<const float>(p.b);
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (!(w[i] > 0)) continue;
      for (std::size_t c2 = 0; c2 < p.d; ++c2)
        ASSERT_NEAR(t[i * p.d + c2], tr[i * p.d + c2], kPointTol * scale) << "row " << i;
    }
    const std::vector<float> gr = problem.gradient(r, side);
    const std::vector<double> grr = plan.gradient(side);
    EXPECT_LE(max_abs_diff(gr, grr), kGradientRelTol * max_abs(grr));
  }

  // Out-of-sample map: new points, and the source points themselves (whose map is the barycentric projection).
  const std::size_t nq = 17;
  std::vector<float> q = random_points(nq, p.d, 13, 0.5);
  const std::vector<float> mq = problem.map_points(r, {q, nq, p.d}, Side::kSource);
  const std::vector<double> mqr = plan.map_points({q, nq, p.d}, Side::kSource);
  EXPECT_LE(max_abs_diff(mq, mqr), kPointTol * scale);
  const std::vector<float> mt = problem.map_points(r, {q, nq, p.d}, Side::kTarget);
  EXPECT_LE(max_abs_diff(mt, plan.map_points({q, nq, p.d}, Side::kTarget)), kPointTol * scale);

  // Label transfer in both directions.
  const std::size_t classes = 4;
  const std::vector<std::int32_t> labels = random_labels(p.n, classes, 14, 0.1);
  const LabelTransfer lt = problem.transfer_labels(r, Side::kSource, labels, classes);
  const std::vector<double> lp = plan.label_probabilities(Side::kSource, labels, classes);
  ASSERT_EQ(lt.points, p.m);
  EXPECT_LE(max_abs_diff(lt.probabilities, lp), kProbabilityTol);
  for (std::size_t j = 0; j < p.m; ++j) {
    if (!(p.b[j] > 0)) continue;
    double best = -1;
    for (std::size_t c2 = 0; c2 < classes; ++c2) best = std::max(best, lp[j * classes + c2]);
    ASSERT_GE(lt.label[j], 0);
    EXPECT_NEAR(lp[j * classes + lt.label[j]], best, kProbabilityTol) << "argmax of target " << j;
    EXPECT_NEAR(lt.confidence[j], best, kProbabilityTol);
  }
  const std::vector<std::int32_t> tl = random_labels(p.m, 3, 15);
  const LabelTransfer back = problem.transfer_labels(r, Side::kTarget, tl, 3);
  EXPECT_LE(max_abs_diff(back.probabilities, plan.label_probabilities(Side::kTarget, tl, 3)), kProbabilityTol);

  // Top-k: the k largest entries of each row, in decreasing order, with the plan's values.
  const std::size_t topk = 4;
  const TopKCoupling top = problem.top_k(r, topk);
  ASSERT_EQ(top.k, topk);
  for (std::size_t i = 0; i < p.n; ++i) {
    if (!(p.a[i] > 0)) continue;
    std::vector<double> row(p.m);
    for (std::size_t j = 0; j < p.m; ++j) row[j] = plan.at(i, j);
    std::vector<double> sorted = row;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    for (std::size_t c2 = 0; c2 < topk; ++c2) {
      const double expected = sorted[c2];
      EXPECT_NEAR(top.values[i * topk + c2], expected, kEntryRelTol * sorted[0]) << "row " << i;
      EXPECT_NEAR(row[top.columns[i * topk + c2]], expected, kEntryRelTol * sorted[0]) << "row " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ReferenceTest,
                         ::testing::Combine(::testing::ValuesIn(backends_under_test()), ::testing::ValuesIn(cases())),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param).name; });

}  // namespace
}  // namespace flashot::test

namespace flashot::test {
namespace {

// The CPU kernels exist once per instruction set (engine/cpu/kernels_<isa>.cpp) and the widest one the CPU has is
// picked at run time, so a test run covers only that one unless BackendOptions::cpu_isa narrows the choice: try them all.
TEST(CpuInstructionSets, EveryOneThisCpuRunsMatchesTheReference) {
  const TestProblem p = make_problem({.n = 130, .m = 110, .d = 50, .seed = 51, .spread = 0.2, .offset = 0.05});
  const TestProblem q = make_problem({.n = 150, .m = 140, .d = 3, .seed = 52, .random_weights = true});
  SolveOptions o;
  o.blur = 0.2;
  o.tolerance = 0;
  o.max_iterations = 25;
  BackendOptions cpu;
  cpu.backend = BackendKind::kCpu;
  struct Isa {
    const char* name;
    CpuIsa isa;
    bool present;
  };
  const Isa isas[] = {{"generic", CpuIsa::kGeneric, true},
                      {"avx2", CpuIsa::kAvx2, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")},
                      {"avx512", CpuIsa::kAvx512,
                       __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
                           __builtin_cpu_supports("fma")}};
  for (const Isa& isa : isas) {
    if (!isa.present) continue;
    cpu.cpu_isa = isa.isa;
    for (const TestProblem* t : {&p, &q}) {
      Problem problem(t->xv(), t->yv(), t->a, t->b, cpu);
      EXPECT_NE(problem.device_name().find(isa.name), std::string::npos) << problem.device_name();
      const SolveResult r = problem.solve(o);
      const ReferenceResult ref = reference_solve(t->xv(), t->yv(), t->a, t->b, o);
      const double scale = std::max(1.0, std::max(max_abs(ref.f), max_abs(ref.g)));
      EXPECT_LE(max_abs_diff(r.f, ref.f), kPotentialTol * scale) << isa.name << " d = " << t->d;
      EXPECT_LE(max_abs_diff(r.g, ref.g), kPotentialTol * scale) << isa.name << " d = " << t->d;
      const ReferencePlan plan(t->xv(), t->yv(), t->a, t->b, r);
      const std::vector<double> bary = plan.barycentric(Side::kSource);
      EXPECT_LE(max_abs_diff(problem.barycentric(r, Side::kSource), bary), kPointTol * max_abs(t->y))
          << isa.name << " d = " << t->d;
    }
  }
}

TEST(CpuInstructionSets, AnUnknownOrMissingSetIsRefused) {
  EXPECT_THROW((void)parse_cpu_isa("sse9"), std::invalid_argument);
  EXPECT_EQ(parse_cpu_isa("avx2"), CpuIsa::kAvx2);
  if (!__builtin_cpu_supports("avx512f")) {
    const TestProblem p = make_problem({.n = 10, .m = 10, .d = 3, .seed = 53});
    BackendOptions cpu;
    cpu.backend = BackendKind::kCpu;
    cpu.cpu_isa = CpuIsa::kAvx512;
    EXPECT_THROW(Problem(p.xv(), p.yv(), p.a, p.b, cpu), std::runtime_error);
  }
}

}  // namespace
}  // namespace flashot::test
