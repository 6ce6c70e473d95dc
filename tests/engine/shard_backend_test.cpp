// One problem cut into G shards of x's rows gives the one-shard results within rounding: the solve (both schemes,
// balanced and unbalanced) and every operation, on CPU shards here and on CUDA shards where devices are present
// (docs/multi-gpu.md). The one-shard problem on the same backend is the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>
#include <tuple>

#include "../../engine/src/backend.hpp"
#include "../../engine/src/shard_backend.hpp"
#include "backend_fixture.hpp"
#include "problems.hpp"

namespace flashot::test {
namespace {

// Named tolerances. Sharded and one-shard runs differ only in rounding: the shards' fp32 soft c-transforms are
// combined in fp64, the potentials cross to the shards in fp32 each iteration (the CPU backend keeps fp64), and a
// shard's log-sum-exp is taken about its own max, so its fp32 exponentials are evaluated at other arguments. The
// backends' own fp32 error (≈1e-5 on normalized maps at ε = 0.01, tests/engine/reference_test.cpp) bounds what
// "equal within rounding" can mean for the maps and the gradient (a difference of nearby points).
struct Tolerances {
  double potential;    // × max(1, max|f|, max|g|), cost units
  double cost;         // dual and primal costs, relative
  double plan;         // plan applications and marginals, relative to the largest entry
  double point;        // barycentric and mapped points, × the data scale
  double probability;  // label probabilities
  double entry;        // top-k plan entries, relative to the row's largest
  double gradient;     // relative to the largest gradient entry
  double error;        // marginal error, absolute (it is a relative L1 error)
};
constexpr Tolerances kCpuTol{2e-5, 1e-5, 2e-5, 5e-5, 2e-5, 2e-5, 5e-5, 1e-4};
// CUDA shards: every shard runs the one-GPU step (the same score path, the same one-exponential steps), so the
// sharded and one-GPU runs differ only in rounding — the column LSE merged per shard then over the shards, the
// column sums added in another order, each shard's operands scaled by its own power of two — but at large d both
// take split-fp16 products (≈ 22-bit significands) whose rounding enters each score as up to ≈ 2^-22·|C|/ε, i.e.
// ≈ 2^-22·|C| per iteration on the potentials, accumulating over up to a few hundred non-expansive iterations: the
// tolerances stay twice tests/engine/reference_test.cpp's against the fp64 reference (unchanged since the shards
// ran their own FMA copy of the iteration).
constexpr Tolerances kDeviceTol{4e-4, 2e-4, 2e-4, 2e-4, 2e-4, 6e-4, 4e-4, 2e-3};

/// How the shards are laid out: "cpu" (G shards on the CPU), "cuda_host" (G shards on device 0, combined on the
/// host), "cuda_nccl" (G devices 0..G−1, combined with NCCL; runs when FLASHOT_TEST_GPUS ≥ G).
struct Layout {
  std::string name;
  std::string backend;
  bool nccl = false;
  bool one_device_per_shard = false;
};

std::vector<Layout> layouts() {
  return {{"cpu", "cpu", false, false}, {"cuda_host", "cuda", false, false}, {"cuda_nccl", "cuda", true, true}};
}

/// One CPU thread: the suite's run time then does not depend on how busy the machine is (results do not depend on
/// the thread count).
constexpr int kThreads = 1;

BackendOptions sharded_options(const Layout& layout, int shards) {
  BackendOptions o;
  o.backend = parse_backend(layout.backend);
  o.threads = kThreads;
  o.nccl = layout.nccl;
  if (layout.one_device_per_shard) {
    o.devices.resize(static_cast<std::size_t>(shards));
    std::iota(o.devices.begin(), o.devices.end(), 0);
  } else {
    o.shards = shards;
  }
  return o;
}

struct Case {
  std::string name;
  ProblemShape shape;
  SolveOptions options;
  /// Rows of x given zero weight (the rest renormalized): the first shard then holds no mass at all.
  std::size_t massless_rows = 0;
};

SolveOptions fixed_iterations(SolveOptions o, int iterations) {
  o.tolerance = 0;
  o.max_iterations = iterations;
  return o;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  SolveOptions scaling;
  scaling.blur = 0.1;
  scaling.scaling = 0.6;
  SolveOptions fixed;
  fixed.epsilon = 0.02;
  c.push_back({"balanced_symmetric_scaling", {.n = 150, .m = 130, .d = 3, .seed = 21}, fixed_iterations(scaling, 20)});
  SolveOptions alt = fixed_iterations(fixed, 40);
  alt.scheme = Scheme::kAlternating;
  c.push_back({"balanced_alternating_fixed", {.n = 170, .m = 120, .d = 2, .seed = 22}, alt});
  SolveOptions unb = fixed_iterations(scaling, 25);
  unb.reach = 0.5;
  c.push_back({"unbalanced_symmetric", {.n = 140, .m = 100, .d = 3, .seed = 23, .random_weights = true}, unb});
  SolveOptions semi = fixed_iterations(fixed, 30);
  semi.scheme = Scheme::kAlternating;
  semi.reach_target = 0.7;
  c.push_back({"semi_unbalanced_alternating", {.n = 130, .m = 90, .d = 3, .seed = 24}, semi});
  SolveOptions tol = scaling;
  tol.tolerance = 1e-3;
  tol.max_iterations = 300;
  // The plain loop: shards sum in another order, and an over-relaxed path (SolveOptions::overrelaxation, auto by
  // default) carries such fp32 rounding differences further (measured 6.3e-5 of the potentials' scale against
  // the 6e-5 bound here). overrelaxation_test.cpp checks ω on every backend.
  tol.overrelaxation = 1;
  c.push_back({"to_tolerance_d50", {.n = 120, .m = 110, .d = 50, .seed = 25, .spread = 0.2, .offset = 0.05}, tol});
  c.push_back({"massless_first_shard_zero_weights",
               {.n = 160, .m = 140, .d = 3, .seed = 26, .random_weights = true, .zero_fraction = 0.2},
               fixed_iterations(scaling, 20), 40});
  return c;
}

TestProblem problem_for(const Case& c) {
  TestProblem p = make_problem(c.shape);
  if (c.massless_rows > 0) {
    std::fill_n(p.a.begin(), c.massless_rows, 0.0f);
    const double total = std::accumulate(p.a.begin(), p.a.end(), 0.0);
    for (float& w : p.a) w = static_cast<float>(w / total);
  }
  return p;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ShardedProblemTest : public ::testing::TestWithParam<std::tuple<Layout, int, Case>> {};

TEST_P(ShardedProblemTest, SolveAndEveryOperationMatchOneShard) {
  const auto& [layout, shards, c] = GetParam();
  FLASHOT_REQUIRE_BACKEND(layout.backend);
  if (layout.one_device_per_shard && gpus_promised() < shards)
    GTEST_SKIP() << shards << " shards on " << shards << " devices need FLASHOT_TEST_GPUS ≥ " << shards
                 << " (got " << gpus_promised() << ")";
  const Tolerances tol = layout.backend == "cpu" ? kCpuTol : kDeviceTol;
  const TestProblem p = problem_for(c);
  Problem one(p.xv(), p.yv(), p.a, p.b, backend_options(layout.backend, kThreads));
  Problem many(p.xv(), p.yv(), p.a, p.b, sharded_options(layout, shards));
  EXPECT_EQ(many.backend_name(), one.backend_name());
  EXPECT_NE(many.device_name().find(std::to_string(shards) + " row shards"), std::string::npos) << many.device_name();

  const SolveResult r1 = one.solve(c.options);
  const SolveResult rg = many.solve(c.options);
  if (layout.nccl) {
    // Every shard runs the one-GPU step (docs/multi-gpu.md): the same score path (tensor cores at d = 50, screening
    // where it applies), and the same one-exponential steps as one GPU takes, counted once.
    EXPECT_NE(many.device_name().find(one.device_name()), std::string::npos)
        << many.device_name() << " vs " << one.device_name();
    const EngineStatistics s1 = one.statistics(), sg = many.statistics();
    EXPECT_EQ(sg.one_pass_steps + sg.skipped_steps + sg.redone_steps,
              s1.one_pass_steps + s1.skipped_steps + s1.redone_steps);
    EXPECT_EQ(sg.screened, s1.screened);
  }
  ASSERT_NE(r1.reason, StopReason::kNonFinite) << r1.message;
  ASSERT_EQ(rg.reason, r1.reason) << rg.message;
  EXPECT_EQ(rg.iterations, r1.iterations);
  EXPECT_EQ(rg.converged, r1.converged);
  const double fscale = std::max({1.0, max_abs(r1.f), max_abs(r1.g)});
  EXPECT_LE(max_abs_diff(rg.f, r1.f), tol.potential * fscale);
  EXPECT_LE(max_abs_diff(rg.g, r1.g), tol.potential * fscale);
  EXPECT_NEAR(rg.dual_cost, r1.dual_cost, tol.cost * std::max(1e-3, std::abs(r1.dual_cost)));
  EXPECT_NEAR(rg.primal_cost, r1.primal_cost, tol.cost * std::max(1e-3, std::abs(r1.primal_cost)));
  EXPECT_NEAR(rg.marginal_error, r1.marginal_error, tol.error);

  // Every operation on the same potentials (the one-shard solve's), so each is compared on its own.
  const std::size_t k = 5;
  const std::vector<float> v = random_points(p.m, k, 31);
  const std::vector<float> u = random_points(p.n, k, 32);
  const std::vector<float> pv = one.apply_plan(r1, v, k), ptu = one.apply_plan_transpose(r1, u, k);
  EXPECT_LE(max_abs_diff(many.apply_plan(r1, v, k), pv), tol.plan * max_abs(pv));
  EXPECT_LE(max_abs_diff(many.apply_plan_transpose(r1, u, k), ptu), tol.plan * max_abs(ptu));
  const std::vector<float> rm = one.row_marginal(r1), cm = one.column_marginal(r1);
  EXPECT_LE(max_abs_diff(many.row_marginal(r1), rm), tol.plan * max_abs(rm));
  EXPECT_LE(max_abs_diff(many.column_marginal(r1), cm), tol.plan * max_abs(cm));

  const double scale = std::max(max_abs(p.x), max_abs(p.y));
  for (Side side : {Side::kSource, Side::kTarget}) {
    const std::vector<float> t1 = one.barycentric(r1, side), tg = many.barycentric(r1, side);
    const std::vector<float>& w = side == Side::kSource ? p.a : p.b;
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (!(w[i] > 0)) continue;  // no plan mass: the projection is not defined
      for (std::size_t c2 = 0; c2 < p.d; ++c2)
        ASSERT_NEAR(tg[i * p.d + c2], t1[i * p.d + c2], tol.point * scale) << "row " << i;
    }
    const std::vector<float> g1 = one.gradient(r1, side);
    EXPECT_LE(max_abs_diff(many.gradient(r1, side), g1), tol.gradient * max_abs(g1))
        << (side == Side::kSource ? "∇x" : "∇y");
  }

  // Out-of-sample maps on both sides: target-side queries need the shards' x, a and f, combined by mass share.
  const std::size_t nq = 23;
  const std::vector<float> q = random_points(nq, p.d, 33, 0.5);
  for (Side from : {Side::kSource, Side::kTarget})
    EXPECT_LE(max_abs_diff(many.map_points(r1, {q, nq, p.d}, from), one.map_points(r1, {q, nq, p.d}, from)),
              tol.point * scale)
        << (from == Side::kSource ? "source" : "target") << " queries";

  const std::size_t classes = 4;
  const std::vector<std::int32_t> labels = random_labels(p.n, classes, 34, 0.1);
  const LabelTransfer l1 = one.transfer_labels(r1, Side::kSource, labels, classes);
  const LabelTransfer lg = many.transfer_labels(r1, Side::kSource, labels, classes);
  EXPECT_LE(max_abs_diff(lg.probabilities, l1.probabilities), tol.probability);
  const std::vector<std::int32_t> back = random_labels(p.m, 3, 35);
  EXPECT_LE(max_abs_diff(many.transfer_labels(r1, Side::kTarget, back, 3).probabilities,
                         one.transfer_labels(r1, Side::kTarget, back, 3).probabilities),
            tol.probability);

  const std::size_t topk = 4;
  const TopKCoupling t1 = one.top_k(r1, topk), tg = many.top_k(r1, topk);
  ASSERT_EQ(tg.k, t1.k);
  for (std::size_t i = 0; i < p.n; ++i) {
    const double largest = t1.values[i * topk];
    for (std::size_t c2 = 0; c2 < topk; ++c2) {
      EXPECT_NEAR(tg.values[i * topk + c2], t1.values[i * topk + c2], tol.entry * largest) << "row " << i;
      // The column is the same unless two entries tie within rounding.
      const bool distinct = (c2 == 0 || t1.values[i * topk + c2 - 1] - t1.values[i * topk + c2] > tol.entry * largest) &&
                            (c2 + 1 == topk || t1.values[i * topk + c2] - t1.values[i * topk + c2 + 1] > tol.entry * largest);
      if (distinct && largest > 0) {
        EXPECT_EQ(tg.columns[i * topk + c2], t1.columns[i * topk + c2]) << "row " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, ShardedProblemTest,
                         ::testing::Combine(::testing::ValuesIn(layouts()), ::testing::Values(2, 3, 4),
                                            ::testing::ValuesIn(cases())),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" + std::to_string(std::get<1>(info.param)) +
                                  "_shards_" + std::get<2>(info.param).name;
                         });

// ---- The Backend contract directly, G = 1..4 (one shard included: the sharded backend over a single child). -----

class ShardedBackendTest : public ::testing::TestWithParam<int> {};

TEST_P(ShardedBackendTest, EveryBackendOperationMatchesTheUnshardedBackend) {
  const int shards = GetParam();
  const TestProblem p = make_problem({.n = 111, .m = 97, .d = 3, .seed = 51, .random_weights = true});
  const detail::ProblemData data{p.xv(), p.yv(), p.a, p.b};
  BackendOptions o;
  o.backend = BackendKind::kCpu;
  o.threads = kThreads;
  o.shards = shards;
  const std::unique_ptr<detail::Backend> one = detail::make_cpu_backend(backend_options("cpu", kThreads), data);
  const std::unique_ptr<detail::Backend> many = detail::make_sharded_backend(o, data, detail::make_cpu_backend);

  for (Scheme scheme : {Scheme::kSymmetric, Scheme::kAlternating}) {
    const std::vector<float> f0 = random_points(p.n, 1, 52, 0.1), g0 = random_points(p.m, 1, 53, 0.1);
    one->set_potentials(f0, g0);
    many->set_potentials(f0, g0);
    const detail::IterationParams ip{0.05, 1.0, scheme, 0.9, 0.8};
    ASSERT_TRUE(one->iterate(ip, 7));
    ASSERT_TRUE(many->iterate(ip, 7));
    std::vector<float> f1(p.n), g1(p.m), fg(p.n), gg(p.m);
    one->get_potentials(f1, g1);
    many->get_potentials(fg, gg);
    const double fscale = std::max({1.0, max_abs(f1), max_abs(g1)});
    EXPECT_LE(max_abs_diff(fg, f1), kCpuTol.potential * fscale);
    EXPECT_LE(max_abs_diff(gg, g1), kCpuTol.potential * fscale);
  }

  // Operations on identical potentials.
  std::vector<float> f(p.n), g(p.m);
  one->get_potentials(f, g);
  many->set_potentials(f, g);
  const detail::PlanParams pp{0.05, 0.5};
  for (Side side : {Side::kSource, Side::kTarget}) {
    const std::size_t rows = side == Side::kSource ? p.n : p.m, cols = side == Side::kSource ? p.m : p.n;
    std::vector<float> s1(rows), sg(rows);
    one->softmin(pp, side, s1);
    many->softmin(pp, side, sg);
    EXPECT_LE(max_abs_diff(sg, s1), kCpuTol.potential * std::max(1.0, max_abs(s1)));
    const std::size_t k = 3;
    const std::vector<float> v = random_points(cols, k, 54);
    for (bool normalized : {false, true}) {
      std::vector<float> a1(rows * k), ag(rows * k);
      one->apply(pp, side, v, k, normalized, a1);
      many->apply(pp, side, v, k, normalized, ag);
      EXPECT_LE(max_abs_diff(ag, a1), kCpuTol.plan * max_abs(a1)) << "normalized " << normalized;
    }
    const std::size_t nq = 9;
    const std::vector<float> q = random_points(nq, p.d, 55, 0.5);
    std::vector<float> q1(nq * k), qg(nq * k);
    one->apply_queries(pp, side, {q, nq, p.d}, v, k, q1);
    many->apply_queries(pp, side, {q, nq, p.d}, v, k, qg);
    EXPECT_LE(max_abs_diff(qg, q1), kCpuTol.plan * max_abs(q1));
  }
  const std::size_t topk = 3;
  std::vector<std::int32_t> c1(p.n * topk), cg(p.n * topk);
  std::vector<float> v1(p.n * topk), vg(p.n * topk);
  one->top_k(pp, topk, c1, v1);
  many->top_k(pp, topk, cg, vg);
  EXPECT_LE(max_abs_diff(vg, v1), kCpuTol.entry * max_abs(v1));
}

INSTANTIATE_TEST_SUITE_P(Shards, ShardedBackendTest, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "_shards"; });

}  // namespace
}  // namespace flashot::test
