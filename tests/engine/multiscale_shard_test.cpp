// The multiscale solver on a sharded backend (docs/multiscale.md, "Several shards"): the certified block lists are
// cut by x's row blocks like the dense rows (ShardBackend::set_pattern gives each shard its row slice), so one
// problem over G shards must give the one-shard multiscale solve within rounding — the same stages and lists, the
// same convergence, the same costs and plan operations. CPU shards run in CI; CUDA shards on device 0 (combined on
// the host) on a GPU machine, and one device per shard (NCCL) where FLASHOT_TEST_GPUS promises them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "backend_fixture.hpp"
#include "flashot/flashot.hpp"
#include "flashot/synthetic.hpp"

namespace flashot::test {
namespace {

struct ShardLayout {
  std::string name, backend;
  bool nccl = false;  // one device per shard, combined with NCCL
  int shards = 2;
};

BackendOptions options_for(const ShardLayout& l, int shards) {
  BackendOptions o = backend_options(l.backend, 2);
  if (shards <= 1) return o;
  if (l.nccl) {
    o.nccl = true;
    o.devices.resize(static_cast<std::size_t>(shards));
    std::iota(o.devices.begin(), o.devices.end(), 0);
  } else {
    o.shards = shards;
  }
  return o;
}

struct ShardCase {
  std::string name;
  synthetic::Shape shape;
  std::size_t n, m, d;
  double reach = 0;
  Scheme scheme = Scheme::kAlternating;
  double tolerance = 1e-4;
  double blur = 0.03;  // relative to the diameter
};

class MultiscaleShards : public ::testing::TestWithParam<std::tuple<ShardLayout, ShardCase>> {};

TEST_P(MultiscaleShards, MatchTheOneShardSolveAndItsPlanOperations) {
  const auto& [layout, c] = GetParam();
  FLASHOT_REQUIRE_BACKEND(layout.backend);
  if (layout.nccl && gpus_promised() < layout.shards)
    GTEST_SKIP() << layout.shards << " devices need FLASHOT_TEST_GPUS ≥ " << layout.shards;
  const std::vector<float> x = synthetic::generate(c.shape, c.n, c.d, 31);
  const std::vector<float> y = synthetic::deform(synthetic::generate(c.shape, c.m, c.d, 31, 0, 1), c.d, 4, 0.03);
  SolveOptions o;
  o.blur_relative = c.blur;
  o.tolerance = c.tolerance;
  o.max_iterations = 4000;
  o.multiscale = Multiscale::kOn;
  o.multiscale_dense_fraction = 1.0;  // every stage on its lists: the sharded lists are what is compared
  o.scheme = c.scheme;
  o.reach = c.reach;
  Problem one({x, c.n, c.d}, {y, c.m, c.d}, {}, {}, options_for(layout, 1));
  Problem many({x, c.n, c.d}, {y, c.m, c.d}, {}, {}, options_for(layout, layout.shards));
  EXPECT_NE(many.device_name().find(std::to_string(layout.shards) + " row shards"), std::string::npos)
      << many.device_name();
  const SolveResult r1 = one.solve(o);
  const SolveResult rs = many.solve(o);
  ASSERT_TRUE(r1.multiscale.used);
  ASSERT_TRUE(rs.multiscale.used);
  ASSERT_TRUE(r1.converged) << r1.message;
  ASSERT_TRUE(rs.converged) << rs.message;
  EXPECT_TRUE(rs.multiscale.certified);
  EXPECT_LE(rs.marginal_error, o.tolerance);
  // The same schedule; the lists come from potentials equal within rounding, so their sizes agree closely.
  ASSERT_EQ(rs.multiscale.stages.size(), r1.multiscale.stages.size());
  const MultiscaleStage& last1 = r1.multiscale.stages.back();
  const MultiscaleStage& lasts = rs.multiscale.stages.back();
  EXPECT_FALSE(lasts.dense);
  EXPECT_FALSE(lasts.coarse);
  EXPECT_LT(lasts.kept_fraction, 1.0) << "the lists must prune for the test to mean anything";
  EXPECT_NEAR(lasts.kept_fraction, last1.kept_fraction, 0.02 * last1.kept_fraction);
  EXPECT_NEAR(static_cast<double>(rs.iterations), static_cast<double>(r1.iterations), 0.1 * r1.iterations + 10);
  // Costs: both converged to the tolerance on the same lists' plan.
  EXPECT_NEAR(rs.dual_cost, r1.dual_cost, 1e-4 * std::abs(r1.dual_cost));
  EXPECT_NEAR(rs.primal_cost, r1.primal_cost, 1e-4 * std::abs(r1.primal_cost));
  // Plan operations on each result's own certified lists.
  const double diameter = one.diameter();
  for (Side side : {Side::kSource, Side::kTarget}) {
    const auto b1 = one.barycentric(r1, side), bs = many.barycentric(rs, side);
    ASSERT_EQ(b1.size(), bs.size());
    EXPECT_LT(max_abs_diff(b1, bs), 2e-3 * diameter) << "barycentric, side " << static_cast<int>(side);
  }
  const auto m1 = one.column_marginal(r1), ms = many.column_marginal(rs);
  EXPECT_LT(max_abs_diff(m1, ms), 2e-3 * max_abs(m1)) << "column marginal";
  const TopKCoupling t1 = one.top_k(r1, 2), ts = many.top_k(rs, 2);
  std::size_t same = 0;
  for (std::size_t i = 0; i < c.n; ++i) same += t1.columns[i * 2] == ts.columns[i * 2];
  EXPECT_GE(static_cast<double>(same), 0.98 * static_cast<double>(c.n)) << "top-1 columns";
}

std::vector<ShardLayout> layouts() {
  return {{"cpu_2", "cpu", false, 2}, {"cpu_3", "cpu", false, 3}, {"cuda_host_2", "cuda", false, 2},
          {"cuda_nccl_2", "cuda", true, 2}};
}

std::vector<ShardCase> shard_cases() {
  // Sizes: several row blocks of 256 per shard (3 shards), small enough for CI's two cores (the symmetric case
  // at a larger blur and a looser tolerance: its averaged updates need ≈ 10× the alternating iterations).
  return {{"sphere_d3", synthetic::Shape::kSphere, 5000, 4500, 3},
          {"clusters_d8_unbalanced", synthetic::Shape::kClusters, 4000, 3800, 8, 0.5},
          {"torus_d3_symmetric", synthetic::Shape::kTorus, 3000, 3200, 3, 0, Scheme::kSymmetric, 1e-3, 0.06}};
}

INSTANTIATE_TEST_SUITE_P(Layouts, MultiscaleShards,
                         ::testing::Combine(::testing::ValuesIn(layouts()), ::testing::ValuesIn(shard_cases())),
                         [](const auto& info) { return std::get<0>(info.param).name + "_" + std::get<1>(info.param).name; });

}  // namespace
}  // namespace flashot::test
