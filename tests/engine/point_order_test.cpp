// BackendOptions::point_order (docs/engine.md, "Point order"): a Problem whose backend holds its points in the
// locality order gives every result of the caller's order — the solves (balanced, unbalanced, alternating, warm
// started, fixed iterations), every plan operation, the c-transform with its argmins (exact ties between copies
// included), the divergence, the derivatives, shards and multiscale solves — within the rounding of another
// summation order; the order really groups nearby points (the screen it enables keeps few tiles on clustered data);
// and the option is checked at the API edge. On every backend present (the order's code is the same for both).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../../engine/src/point_order.hpp"
#include "backend_fixture.hpp"
#include "flashot/differentiation.hpp"
#include "problems.hpp"
#include "screen_estimate.hpp"

namespace flashot::test {
namespace {

// Named tolerances: the two orders differ only in the order of the backends' summations (CPU: fp64 sums of fp32
// exponentials; CUDA: fp32 tiles and atomics), which a solve carries through its iterations.
constexpr double kPotentialTol = 5e-5;  // × max(1, max|f|, max|g|) after a solve
constexpr double kCostTol = 2e-5;       // dual and primal costs, relative
constexpr double kPlanTol = 2e-5;       // one result's plan operations, relative to the largest entry
constexpr double kPointTol = 2e-5;      // barycentric and mapped points, × the data scale (≈ 5)
constexpr double kErrorTol = 1e-4;      // marginal errors, absolute
// CUDA's fp32 tiles sum in another order too (and its one-pass steps shift by forecasts of the potentials): the same
// bounds as the sharded CUDA runs (tests/engine/shard_backend_test.cpp).
constexpr double kDevicePotentialTol = 4e-4, kDeviceCostTol = 2e-4, kDevicePlanTol = 2e-4, kDevicePointTol = 2e-4;
// Hessian-vector products: CG to 1e-6 of the right-hand side over the plan applications above.
constexpr double kHessianTol = 1e-4, kDeviceHessianTol = 1e-3;

struct Tol {
  double potential, cost, plan, point, error;
};
Tol tolerances(const std::string& backend) {
  return backend == "cpu" ? Tol{kPotentialTol, kCostTol, kPlanTol, kPointTol, kErrorTol}
                          : Tol{kDevicePotentialTol, kDeviceCostTol, kDevicePlanTol, kDevicePointTol, 1e-3};
}

/// A mixture of 8 Gaussians per side (centres 1.5·N(0, I), spread 0.25, each side its own centres): the clustered
/// data the locality order is for. Random weights with a tenth of them zero on both sides.
TestProblem clustered(std::size_t n, std::size_t m, std::size_t d, std::uint64_t seed, double centre_scale = 1.5,
                      bool zeros = true) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  TestProblem p;
  p.n = n, p.m = m, p.d = d;
  const auto cloud = [&](std::size_t count) {
    std::vector<double> centres(8 * d);
    for (double& c : centres) c = centre_scale * normal(rng);
    std::uniform_int_distribution<int> pick(0, 7);
    std::vector<float> v(count * d);
    for (std::size_t i = 0; i < count; ++i) {
      const int c = pick(rng);
      for (std::size_t k = 0; k < d; ++k) v[i * d + k] = static_cast<float>(centres[c * d + k] + 0.25 * normal(rng));
    }
    return v;
  };
  p.x = cloud(n);
  p.y = cloud(m);
  const auto weights = [&](std::size_t count) {
    std::uniform_real_distribution<double> u(0.1, 1.0);
    std::vector<float> w(count);
    double total = 0;
    for (std::size_t i = 0; i < count; ++i) total += w[i] = (zeros && i % 10 == 3) ? 0.0f : static_cast<float>(u(rng));
    for (float& v : w) v = static_cast<float>(v / total);
    return w;
  };
  p.a = weights(n);
  p.b = weights(m);
  return p;
}

BackendOptions ordered(const std::string& backend, PointOrder order) {
  BackendOptions o = backend_options(backend, 2);
  o.point_order = order;
  return o;
}

bool says_locality(const Problem& p) { return p.device_name().find("locality order") != std::string::npos; }

double scale_of(const SolveResult& r) { return std::max({1.0, max_abs(r.f), max_abs(r.g)}); }

void expect_same_solve(const SolveResult& a, const SolveResult& b, const Tol& tol, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.f.size(), b.f.size());
  ASSERT_EQ(a.g.size(), b.g.size());
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.converged, b.converged);
  EXPECT_NEAR(a.iterations, b.iterations, 10) << "iterations (one check period of 10 at most)";
  EXPECT_LE(max_abs_diff(a.f, b.f), tol.potential * scale_of(a)) << "f";
  EXPECT_LE(max_abs_diff(a.g, b.g), tol.potential * scale_of(a)) << "g";
  EXPECT_NEAR(a.dual_cost, b.dual_cost, tol.cost * std::max(1.0, std::abs(a.dual_cost))) << "dual cost";
  if (std::isfinite(a.primal_cost)) {
    EXPECT_NEAR(a.primal_cost, b.primal_cost, tol.cost * std::max(1.0, std::abs(a.primal_cost))) << "primal cost";
  }
  if (std::isfinite(a.marginal_error)) {
    EXPECT_NEAR(a.marginal_error, b.marginal_error, tol.error);
  }
}

template <class V>
void expect_close(const V& a, const V& b, double rel, double floor, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_LE(max_abs_diff(a, b), rel * std::max(floor, max_abs(a))) << what;
}

class PointOrderTest : public ::testing::TestWithParam<std::tuple<std::string, std::size_t>> {};

// Every operation of one solved problem in both orders. The plan operations take one result (the input order's) in
// both problems, so they differ only by the permutation: their sums in another order.
TEST_P(PointOrderTest, EveryOperationMatchesTheInputOrder) {
  const auto [backend, d] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const Tol tol = tolerances(backend);
  const TestProblem t = clustered(900, 700, d, 40 + d);
  Problem in(t.xv(), t.yv(), t.a, t.b, ordered(backend, PointOrder::kInput));
  Problem lo(t.xv(), t.yv(), t.a, t.b, ordered(backend, PointOrder::kLocality));
  EXPECT_FALSE(says_locality(in)) << in.device_name();
  EXPECT_TRUE(says_locality(lo)) << lo.device_name();

  SolveOptions o;
  o.blur_relative = 0.03;
  o.tolerance = 1e-4;
  const SolveResult r = in.solve(o);
  const SolveResult rl = lo.solve(o);
  ASSERT_TRUE(r.converged) << r.message;
  expect_same_solve(r, rl, tol, "ε-scaling to tolerance");

  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0, 1);
  const std::size_t k = 3;
  std::vector<float> v(t.m * k), u(t.n * k);
  for (float& e : v) e = normal(rng);
  for (float& e : u) e = normal(rng);
  expect_close(in.apply_plan(r, v, k), lo.apply_plan(r, v, k), tol.plan, 0, "P·V");
  expect_close(in.apply_plan_transpose(r, u, k), lo.apply_plan_transpose(r, u, k), tol.plan, 0, "Pᵀ·U");
  expect_close(in.row_marginal(r), lo.row_marginal(r), tol.plan, 0, "P·1");
  expect_close(in.column_marginal(r), lo.column_marginal(r), tol.plan, 0, "Pᵀ·1");
  for (Side side : {Side::kSource, Side::kTarget}) {
    const std::string name = side == Side::kSource ? " (source)" : " (target)";
    expect_close(in.barycentric(r, side), lo.barycentric(r, side), tol.point, 5.0, "barycentric" + name);
    expect_close(in.gradient(r, side), lo.gradient(r, side), tol.plan, 0, "gradient" + name);
    std::vector<float> q(50 * d);
    for (float& e : q) e = 1.5f * normal(rng);
    const PointsView queries{q, 50, d};
    expect_close(in.map_points(r, queries, side), lo.map_points(r, queries, side), tol.point, 5.0, "map" + name);
    const std::size_t count = side == Side::kSource ? t.n : t.m;
    const std::vector<std::int32_t> labels = random_labels(count, 5, 11, 0.1);
    const LabelTransfer a = in.transfer_labels(r, side, labels, 5), b = lo.transfer_labels(r, side, labels, 5);
    expect_close(a.probabilities, b.probabilities, tol.plan, 1.0, "label probabilities" + name);
    std::size_t same = 0;
    for (std::size_t i = 0; i < a.label.size(); ++i) same += a.label[i] == b.label[i];
    EXPECT_GE(double(same), 0.995 * double(a.label.size())) << "argmax labels" + name;
  }
  // Top-k: values within rounding; columns wherever the values are not near-tied.
  const TopKCoupling ta = in.top_k(r, 5), tb = lo.top_k(r, 5);
  expect_close(ta.values, tb.values, tol.plan, 0, "top-k values");
  const double largest = max_abs(ta.values);
  for (std::size_t i = 0; i < ta.rows; ++i)
    for (std::size_t c = 0; c + 1 < ta.k; ++c) {
      const bool apart_before = c == 0 || ta.values[i * 5 + c - 1] - ta.values[i * 5 + c] > 1e-3 * largest;
      const bool apart_after = ta.values[i * 5 + c] - ta.values[i * 5 + c + 1] > 1e-3 * largest;
      if (apart_before && apart_after && ta.values[i * 5 + c] > 1e-3 * largest) {
        EXPECT_EQ(ta.columns[i * 5 + c], tb.columns[i * 5 + c]) << "row " << i << ", rank " << c;
      }
    }
  // The hard c-transform of one potential: the same argmins and the same fp64 values, bit for bit (both are the
  // direct difference at the exact argmin).
  for (Side side : {Side::kSource, Side::kTarget}) {
    const CTransform ca = in.c_transform(r, side), cb = lo.c_transform(r, side);
    EXPECT_EQ(ca.index, cb.index);
    EXPECT_EQ(ca.values, cb.values);
    const CTransformGradient ga = in.c_transform_gradient(ca), gb = lo.c_transform_gradient(cb);
    EXPECT_EQ(ga.points, gb.points);
    EXPECT_EQ(ga.potential, gb.potential);
  }
}

// The other solves: fixed iterations at one ε (the benchmark's), the alternating scheme, unbalanced and
// semi-unbalanced, a warm start, and the divergence.
TEST_P(PointOrderTest, SolvesOfEveryKindMatchTheInputOrder) {
  const auto [backend, d] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const Tol tol = tolerances(backend);
  const TestProblem t = clustered(800, 650, d, 90 + d);
  Problem in(t.xv(), t.yv(), t.a, t.b, ordered(backend, PointOrder::kInput));
  Problem lo(t.xv(), t.yv(), t.a, t.b, ordered(backend, PointOrder::kLocality));
  const double eps = 0.02 * in.diameter() * in.diameter();

  SolveOptions fixed;
  fixed.epsilon = eps;
  fixed.tolerance = 0;
  fixed.max_iterations = 30;
  expect_same_solve(in.solve(fixed), lo.solve(fixed), tol, "fixed ε, 30 symmetric iterations");
  fixed.scheme = Scheme::kAlternating;
  const SolveResult first = in.solve(fixed);
  expect_same_solve(first, lo.solve(fixed), tol, "fixed ε, 30 alternating iterations");

  SolveOptions warm = fixed;
  warm.initial_f = first.f;
  warm.initial_g = first.g;
  expect_same_solve(in.solve(warm), lo.solve(warm), tol, "warm start");

  SolveOptions unbalanced;
  unbalanced.blur_relative = 0.05;
  unbalanced.reach = 0.5 * in.diameter();
  expect_same_solve(in.solve(unbalanced), lo.solve(unbalanced), tol, "unbalanced");
  unbalanced.reach = 0;
  unbalanced.reach_target = 0.5 * in.diameter();
  unbalanced.scheme = Scheme::kAlternating;
  expect_same_solve(in.solve(unbalanced), lo.solve(unbalanced), tol, "semi-unbalanced, alternating");

  SolveOptions div;
  div.blur_relative = 0.05;
  const DivergenceResult da = sinkhorn_divergence(t.xv(), t.yv(), t.a, t.b, div, ordered(backend, PointOrder::kInput));
  const DivergenceResult db =
      sinkhorn_divergence(t.xv(), t.yv(), t.a, t.b, div, ordered(backend, PointOrder::kLocality));
  EXPECT_NEAR(da.divergence, db.divergence, tol.cost * std::max(1.0, std::abs(da.xy.dual_cost))) << "divergence";
}

// Derivatives (their own backend, built through the same boundary), shards of the sorted rows, and a multiscale
// solve (which keeps its own hierarchy's order) with plan operations on its result.
TEST_P(PointOrderTest, DerivativesShardsAndMultiscaleMatchTheInputOrder) {
  const auto [backend, d] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const Tol tol = tolerances(backend);
  const TestProblem t = clustered(1200, 1100, d, 130 + d);
  SolveOptions o;
  o.blur_relative = 0.05;
  o.tolerance = 1e-5;
  Problem in(t.xv(), t.yv(), t.a, t.b, ordered(backend, PointOrder::kInput));
  const SolveResult r = in.solve(o);

  const TransportDerivatives da(t.xv(), t.yv(), t.a, t.b, r, ordered(backend, PointOrder::kInput));
  const TransportDerivatives db(t.xv(), t.yv(), t.a, t.b, r, ordered(backend, PointOrder::kLocality));
  EXPECT_TRUE(db.device_name().find("locality order") != std::string::npos) << db.device_name();
  const TransportGradient ga = da.gradient(), gb = db.gradient();
  expect_close(ga.x, gb.x, tol.plan, 0, "∇x");
  expect_close(ga.y, gb.y, tol.plan, 0, "∇y");
  std::vector<float> v(t.n * d);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0, 1);
  for (float& e : v) e = normal(rng);
  const HessianProduct ha = da.hessian_product(v), hb = db.hessian_product(v);
  EXPECT_TRUE(ha.cg.converged && hb.cg.converged);
  // CG to 1e-6 of the right-hand side: the two products agree to that and the products' rounding, not to one ulp.
  expect_close(ha.product, hb.product, backend == "cpu" ? kHessianTol : kDeviceHessianTol, 0, "Hessian-vector product");

  BackendOptions sharded = ordered(backend, PointOrder::kLocality);
  sharded.shards = 2;
  if (backend == "cpu") {
    Problem sh(t.xv(), t.yv(), t.a, t.b, sharded);
    EXPECT_TRUE(says_locality(sh)) << sh.device_name();
    expect_same_solve(r, sh.solve(o), tol, "two row shards of the sorted rows");
    expect_close(in.barycentric(r, Side::kSource), sh.barycentric(r, Side::kSource), tol.point, 5.0,
                 "sharded barycentric");
  }

  SolveOptions ms = o;
  ms.multiscale = Multiscale::kOn;
  ms.tolerance = 1e-3;
  Problem lo(t.xv(), t.yv(), t.a, t.b, ordered(backend, PointOrder::kLocality));
  const SolveResult ma = in.solve(ms), mb = lo.solve(ms);
  ASSERT_TRUE(ma.multiscale.used);
  expect_same_solve(ma, mb, tol, "multiscale");
  expect_close(in.barycentric(ma, Side::kTarget), lo.barycentric(ma, Side::kTarget), tol.point, 5.0,
               "multiscale barycentric");
}

// Exact ties of the c-transform between copies of one point (same coordinates, same potential) go to the lowest
// caller index in both orders, as without the order.
TEST_P(PointOrderTest, CopiesTieToTheLowestCallerIndex) {
  const auto [backend, d] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  TestProblem t = make_problem({.n = 700, .m = 640, .d = d, .seed = 5 + d, .duplicates = true});
  // The copies of y lie at j and j + 320; every column's potential is a function of its point, so copies tie exactly.
  std::vector<float> h(t.m), hx(t.n);
  for (std::size_t j = 0; j < t.m; ++j) h[j] = 0.1f * t.y[j * d] - 0.05f * t.y[j * d + d - 1];
  for (std::size_t i = 0; i < t.n; ++i) hx[i] = 0.2f * t.x[i * d];
  Problem in(t.xv(), t.yv(), {}, {}, ordered(backend, PointOrder::kInput));
  Problem lo(t.xv(), t.yv(), {}, {}, ordered(backend, PointOrder::kLocality));
  const CTransform a = in.c_transform(Side::kSource, h), b = lo.c_transform(Side::kSource, h);
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.values, b.values);
  for (std::int32_t j : b.index) EXPECT_LT(j, 320) << "a copy's lower index wins";
  const CTransform c = in.c_transform(Side::kTarget, hx), e = lo.c_transform(Side::kTarget, hx);
  EXPECT_EQ(c.index, e.index);
  EXPECT_EQ(c.values, e.values);
  for (std::int32_t i : e.index) EXPECT_LT(i, 350) << "a copy's lower index wins";
}

// On a GPU: auto sorts a clustered problem past the size and leaves a normal one as given (construction only).
TEST_P(PointOrderTest, AutoSortsClusteredDataOnly) {
  const auto [backend, d] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  if (backend != "cuda" || d < detail::kPointOrderAutoMinD) GTEST_SKIP() << "auto sorts on CUDA from d = 5 only";
  const std::size_t side = 32000;  // side² ≥ 10⁹
  const TestProblem c = clustered(side, side, d, 900 + d, 3.0, false);
  Problem sorted(c.xv(), c.yv(), {}, {}, ordered(backend, PointOrder::kAuto));
  EXPECT_TRUE(says_locality(sorted)) << sorted.device_name();
  const std::vector<float> x = random_points(side, d, 1), y = random_points(side, d, 2);
  Problem given({x, side, d}, {y, side, d}, {}, {}, ordered(backend, PointOrder::kAuto));
  EXPECT_FALSE(says_locality(given)) << given.device_name();
}

INSTANTIATE_TEST_SUITE_P(Backends, PointOrderTest,
                         ::testing::Combine(::testing::ValuesIn(backends_under_test()), ::testing::Values(3, 16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_d" + std::to_string(std::get<1>(info.param));
                         });

// What the order is for: on clustered data (the benchmark's 8 Gaussians, centres 3·N(0, I), spread 0.25, ε = 0.1)
// the rows' LSE screen of the CUDA kernels (16 × 64 warp tiles) would keep far fewer tiles in the locality order
// than as generated, where every tile mixes clusters. Estimated in fp64 from the CPU backend's potentials after 1 and
// 10 cold symmetric iterations (the benchmark's solve); the figures are printed.
TEST(PointOrder, LocalityOrderLetsTheScreenDropFarTiles) {
  for (const std::size_t d : {8, 16}) {
    const TestProblem t = clustered(4096, 4096, d, 500 + d, 3.0, false);
    Problem in(t.xv(), t.yv(), t.a, t.b, ordered("cpu", PointOrder::kInput));
    const std::vector<std::uint32_t> ox = detail::locality_order(t.xv()), oy = detail::locality_order(t.yv());
    for (const int iterations : {1, 10}) {
      SolveOptions o;
      o.epsilon = 0.1;
      o.tolerance = 0;
      o.max_iterations = iterations;
      o.diagnostics = false;
      const SolveResult r = in.solve(o);
      const ScreenEstimate as_given = rows_screen_estimate(t.xv(), t.yv(), t.b, r.g, 0.1, 1.0, {}, {});
      const ScreenEstimate sorted = rows_screen_estimate(t.xv(), t.yv(), t.b, r.g, 0.1, 1.0, ox, oy);
      std::printf("[ screen   ] clusters 4096², d = %zu, after %d iteration(s): rows' screen keeps %.1f%% of 16 × 64 "
                  "tiles as generated, %.1f%% in the locality order\n",
                  d, iterations, 100 * as_given.fraction(), 100 * sorted.fraction());
      EXPECT_LT(sorted.fraction(), 0.5 * as_given.fraction()) << "d = " << d << ", " << iterations << " iterations";
      EXPECT_LT(sorted.fraction(), 0.35) << "d = " << d << ", " << iterations << " iterations";
    }
  }
}

// The order is a permutation of each side, and runs of kPointOrderLeaf positions are compact: on two far apart
// blobs no leaf mixes them.
TEST(PointOrder, LocalityOrderIsAPermutationWhoseLeavesStayInOneCluster) {
  const std::size_t n = 3000, d = 5;
  std::vector<float> p(n * d);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0, 1);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < d; ++k) p[i * d + k] = normal(rng) + (i % 3 == 0 ? 50.0f : 0.0f);
  const std::vector<std::uint32_t> order = detail::locality_order({p, n, d});
  std::vector<std::uint32_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i);
  std::size_t mixed = 0;
  for (std::size_t b = 0; b < n; b += detail::kPointOrderLeaf) {
    bool far = false, near = false;
    for (std::size_t q = b; q < std::min(n, b + detail::kPointOrderLeaf); ++q) (order[q] % 3 == 0 ? far : near) = true;
    mixed += far && near;
  }
  // The blob of 1000 points ends inside one leaf at most once.
  EXPECT_LE(mixed, 1u);
}

TEST(PointOrder, AutoMaySortHostInputsOnCudaFromTheThresholdUp) {
  BackendOptions o;
  o.backend = BackendKind::kCuda;
  const std::size_t side = 31623;  // side² ≥ 10⁹
  EXPECT_TRUE(detail::uses_locality_order(o, side, side, 8, false));
  EXPECT_FALSE(detail::uses_locality_order(o, side, side, 8, true)) << "device inputs keep their order";
  EXPECT_FALSE(detail::uses_locality_order(o, 30000, 30000, 8, false)) << "below 10⁹ pairs";
  EXPECT_FALSE(detail::uses_locality_order(o, side, side, 4, false)) << "the register kernels' d have no screen";
  o.backend = BackendKind::kCpu;
  EXPECT_FALSE(detail::uses_locality_order(o, 100000, 100000, 8, false)) << "the CPU backend has no screen";
  o.point_order = PointOrder::kLocality;
  EXPECT_TRUE(detail::uses_locality_order(o, 10, 10, 2, false));
  o.point_order = PointOrder::kInput;
  o.backend = BackendKind::kCuda;
  EXPECT_FALSE(detail::uses_locality_order(o, side, side, 8, false));
  // Small problems under auto stay in the input order on every backend present.
  const TestProblem t = make_problem({.n = 100, .m = 90});
  Problem p(t.xv(), t.yv(), {}, {});
  EXPECT_FALSE(says_locality(p)) << p.device_name();
}

// auto sorts clustered data only: leaf_spread tells the benchmark's mixture (8 Gaussians) from N(0, I).
TEST(PointOrder, LeafSpreadTellsClustersFromANormalCloud) {
  for (const std::size_t d : {8, 16, 64}) {
    const TestProblem c = clustered(20000, 10, d, 70 + d, 3.0, false);
    const double clusters = detail::leaf_spread(c.xv());
    const std::vector<float> normal = random_points(20000, d, 80 + d);
    const double gauss = detail::leaf_spread({normal, 20000, d});
    std::printf("[ spread   ] d = %zu: 8 Gaussians %.4f, N(0, I) %.4f (auto sorts at most %.2f)\n", d, clusters, gauss,
                detail::kPointOrderAutoSpread);
    EXPECT_LE(clusters, 0.5 * detail::kPointOrderAutoSpread) << "d = " << d;
    EXPECT_GE(gauss, 2 * detail::kPointOrderAutoSpread) << "d = " << d;
  }
  const std::vector<float> same(300 * 3, 1.5f);
  EXPECT_EQ(detail::leaf_spread({same, 300, 3}), 0.0) << "coincident points have no spread";
}

TEST(PointOrder, BadValuesAreRefusedByName) {
  EXPECT_EQ(parse_point_order("locality"), PointOrder::kLocality);
  EXPECT_EQ(to_string(PointOrder::kInput), "input");
  EXPECT_THROW(parse_point_order("sorted"), std::invalid_argument);
  const TestProblem t = make_problem({.n = 50, .m = 40});
  BackendOptions o = backend_options("cpu");
  o.point_order = static_cast<PointOrder>(7);
  try {
    Problem p(t.xv(), t.yv(), {}, {}, o);
    FAIL() << "a PointOrder out of range was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("point_order"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("got 7"), std::string::npos) << e.what();
  }
  // Device inputs keep their order: kLocality is refused before any device call (so also without CUDA).
  BackendOptions dev;
  dev.point_order = PointOrder::kLocality;
  const float dummy[2] = {0, 0};
  try {
    Problem::on_device({dummy, 1, 2, 0}, {dummy, 1, 2, 0}, {}, {}, dev);
    FAIL() << "point_order = locality was accepted for device inputs";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("point_order = locality needs host inputs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flashot::test
