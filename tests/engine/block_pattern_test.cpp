// Block-sparse visiting lists (docs/block-sparse.md) on every backend: the pattern's construction and checks, and
// every backend operation under a hand-made pattern against an fp64 masked reference written here (unlisted pairs
// are zero plan entries, inactive blocks keep their potentials), per-segment parameters, and the dense pattern as
// an explicit list against the null pattern.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "../../engine/src/backend.hpp"
#include "../../engine/src/block_pattern.hpp"
#include "backend_fixture.hpp"
#include "problems.hpp"

namespace flashot::test {
namespace {

using detail::BlockPattern;
using detail::BlockRange;
using detail::kBlockSize;
using detail::SegmentParams;

TEST(BlockPattern, MergesSortsAndTransposes) {
  // 3 row blocks (700 rows), 4 column blocks (800 columns).
  const BlockPattern p(700, 800, {{{2, 3}, {0, 1}, {1, 2}}, {{3, 4}, {3, 3}}, {}});
  ASSERT_EQ(p.row_blocks(), 3u);
  ASSERT_EQ(p.col_blocks(), 4u);
  ASSERT_EQ(p.row_list(0).size(), 1u);  // [0,1) [1,2) [2,3) merge into [0,3)
  EXPECT_EQ(p.row_list(0)[0].begin, 0);
  EXPECT_EQ(p.row_list(0)[0].end, 3);
  ASSERT_EQ(p.row_list(1).size(), 1u);  // the empty [3,3) is dropped
  EXPECT_TRUE(p.row_list(2).empty());
  EXPECT_EQ(p.pairs(), 4u);
  EXPECT_DOUBLE_EQ(p.kept_fraction(), 4.0 / 12.0);
  for (int c = 0; c < 3; ++c) {
    ASSERT_EQ(p.col_list(c).size(), 1u) << c;
    EXPECT_EQ(p.col_list(c)[0].begin, 0);
    EXPECT_EQ(p.col_list(c)[0].end, 1);
  }
  ASSERT_EQ(p.col_list(3).size(), 1u);
  EXPECT_EQ(p.col_list(3)[0].begin, 1);
  EXPECT_EQ(p.segments(), 1u);
  EXPECT_NE(p.describe().find("4 pairs listed"), std::string::npos) << p.describe();
}

TEST(BlockPattern, RefusesBadLists) {
  EXPECT_THROW(BlockPattern(700, 800, {{{0, 5}}, {}, {}}), std::invalid_argument);  // past the 4 column blocks
  EXPECT_THROW(BlockPattern(700, 800, {{{0, 1}}, {}}), std::invalid_argument);       // 2 lists for 3 row blocks
  // A pair across segments.
  try {
    BlockPattern(512, 512, {{{0, 2}}, {{1, 2}}}, {0, 1}, {0, 1});
    FAIL() << "a pair across segments was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("one segment"), std::string::npos) << e.what();
  }
}

TEST(BlockPattern, BlockDiagonalAndActive) {
  const std::vector<std::int32_t> rows{0, 2, 3}, cols{0, 1, 3};
  const BlockPattern p = BlockPattern::block_diagonal(700, 600, rows, cols);
  EXPECT_EQ(p.segments(), 2u);
  EXPECT_EQ(p.pairs(), 2u * 1u + 1u * 2u);
  EXPECT_EQ(p.row_segment(), (std::vector<std::int32_t>{0, 0, 1}));
  EXPECT_EQ(p.col_segment(), (std::vector<std::int32_t>{0, 1, 1}));
  const BlockPattern q = BlockPattern::block_diagonal(700, 600, rows, cols, {true, false});
  EXPECT_TRUE(q.row_list(2).empty());
  EXPECT_TRUE(q.col_list(1).empty());
  EXPECT_EQ(q.pairs(), 2u);
  const BlockPattern slice = p.row_slice(256, 700);
  EXPECT_EQ(slice.row_blocks(), 2u);
  EXPECT_EQ(slice.segments(), 2u);
  EXPECT_EQ(slice.row_list(1)[0].begin, 1);
  EXPECT_THROW(p.row_slice(100, 700), std::invalid_argument);
}

/// fp64 reference of the masked operations: soft c-transforms, plan entries and updates over listed pairs only,
/// each row's segment's ε and cost scale.
struct Masked {
  const TestProblem& p;
  const BlockPattern& pat;
  std::vector<SegmentParams> seg;

  bool listed(std::size_t i, std::size_t j) const {
    for (const BlockRange& r : pat.row_list(i / kBlockSize))
      if (j / kBlockSize >= std::size_t(r.begin) && j / kBlockSize < std::size_t(r.end)) return true;
    return false;
  }
  double cost(std::size_t i, std::size_t j, double s) const {
    double c = 0;
    for (std::size_t k = 0; k < p.d; ++k) {
      const double diff = double(p.x[i * p.d + k]) - double(p.y[j * p.d + k]);
      c += diff * diff;
    }
    return s * c;
  }
  const SegmentParams& row_seg(std::size_t i) const { return seg[pat.row_segment()[i / kBlockSize]]; }
  const SegmentParams& col_seg(std::size_t j) const { return seg[pat.col_segment()[j / kBlockSize]]; }
  /// softmin over the other side (rows = x: h = g), +∞ when nothing is listed.
  std::vector<double> softmin(bool rows, const std::vector<double>& h) const {
    const std::size_t n = rows ? p.n : p.m, m = rows ? p.m : p.n;
    std::vector<double> out(n);
    for (std::size_t i = 0; i < n; ++i) {
      const SegmentParams& sp = rows ? row_seg(i) : col_seg(i);
      double top = -std::numeric_limits<double>::infinity();
      std::vector<double> t;
      for (std::size_t j = 0; j < m; ++j) {
        const std::size_t xi = rows ? i : j, yj = rows ? j : i;
        const double w = rows ? p.b[j] : p.a[j];
        if (!listed(xi, yj) || !(w > 0)) continue;
        t.push_back(std::log(w) + (h[j] - cost(xi, yj, sp.cost_scale)) / sp.epsilon);
        top = std::max(top, t.back());
      }
      if (t.empty()) {
        out[i] = std::numeric_limits<double>::infinity();
        continue;
      }
      double sum = 0;
      for (double v : t) sum += std::exp(v - top);
      out[i] = -sp.epsilon * (top + std::log(sum));
    }
    return out;
  }
  double plan(std::size_t i, std::size_t j, const std::vector<double>& f, const std::vector<double>& g) const {
    if (!listed(i, j)) return 0;
    const SegmentParams& sp = row_seg(i);
    return double(p.a[i]) * p.b[j] * std::exp((f[i] + g[j] - cost(i, j, sp.cost_scale)) / sp.epsilon);
  }
  bool row_active(bool rows, std::size_t i) const { return !pat.list(rows, i / kBlockSize).empty(); }
  /// `count` updates of (f, g), inactive blocks left as they are.
  void iterate(Scheme scheme, int count, std::vector<double>& f, std::vector<double>& g) const {
    for (int it = 0; it < count; ++it) {
      const std::vector<double> fn = softmin(true, g);
      std::vector<double> f_new = f;
      for (std::size_t i = 0; i < p.n; ++i) {
        if (!row_active(true, i)) continue;
        const double v = row_seg(i).damping_f * fn[i];
        f_new[i] = scheme == Scheme::kAlternating ? v : 0.5 * (f[i] + v);
      }
      const std::vector<double> gn = softmin(false, scheme == Scheme::kAlternating ? f_new : f);
      for (std::size_t j = 0; j < p.m; ++j) {
        if (!row_active(false, j)) continue;
        const double v = col_seg(j).damping_g * gn[j];
        g[j] = scheme == Scheme::kAlternating ? v : 0.5 * (g[j] + v);
      }
      f = f_new;
    }
  }
};

/// Relative closeness of finite values; +∞ must match +∞.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double w : want)
    if (std::isfinite(w)) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_TRUE(std::isinf(got[i]) && got[i] > 0) << what << " [" << i << "] = " << got[i] << ", want +inf";
      continue;
    }
    ASSERT_NEAR(got[i], want[i], tol * std::max(scale, 1e-30)) << what << " [" << i << "]";
  }
}

struct BlockSetup {
  TestProblem p;
  std::unique_ptr<detail::Backend> backend;
  std::vector<double> f, g;
};

BlockSetup make_setup(const std::string& backend, std::size_t d, std::size_t n = 700, std::size_t m = 600) {
  BlockSetup s;
  s.p = make_problem({.n = n, .m = m, .d = d, .seed = 70 + d, .random_weights = true, .zero_fraction = 0.1});
  s.backend = detail::make_backend(backend_options(backend, 2), detail::ProblemData{s.p.xv(), s.p.yv(), s.p.a, s.p.b});
  std::mt19937 rng(5 + d);
  std::uniform_real_distribution<double> u(-0.05, 0.05);
  s.f.resize(n);
  s.g.resize(m);
  for (double& v : s.f) v = u(rng) * double(d);
  for (double& v : s.g) v = u(rng) * double(d);
  const std::vector<float> ff(s.f.begin(), s.f.end()), gf(s.g.begin(), s.g.end());
  s.backend->set_potentials(ff, gf);
  s.f.assign(ff.begin(), ff.end());
  s.g.assign(gf.begin(), gf.end());
  return s;
}

class BlockBackend : public ::testing::TestWithParam<std::tuple<std::string, std::size_t>> {};

/// Row block 0 lists column blocks {0, 2}, row block 1 lists {1, 2}, row block 2 nothing (inactive);
/// column block 0 is then listed by row block 0 only, and so on.
std::shared_ptr<const BlockPattern> hand_pattern(std::size_t n, std::size_t m) {
  return std::make_shared<const BlockPattern>(
      n, m, std::vector<std::vector<BlockRange>>{{{0, 1}, {2, 3}}, {{1, 3}}, {}});
}

TEST_P(BlockBackend, OperationsFollowTheLists) {
  const auto& [name, d] = GetParam();
  FLASHOT_REQUIRE_BACKEND(name);
  BlockSetup s = make_setup(name, d);
  const auto pat = hand_pattern(s.p.n, s.p.m);
  s.backend->set_pattern(pat);
  const double eps = 0.05 * double(d);
  const Masked ref{s.p, *pat, {SegmentParams{eps, 1, 1, 1}}};
  const detail::PlanParams pp{eps, 1.0};
  // CUDA at d ≥ 16 reduces on the tensor cores (split fp16 operands): fp32-class, a little looser than the CPU.
  const double tol = name == "cpu" ? 1e-5 : 1e-4;

  // Soft c-transforms of both sides (+∞ on the inactive row block).
  std::vector<float> fh(s.p.n), gh(s.p.m);
  s.backend->softmin(pp, Side::kSource, fh);
  s.backend->softmin(pp, Side::kTarget, gh);
  expect_close(fh, ref.softmin(true, s.g), tol, "softmin rows");
  expect_close(gh, ref.softmin(false, s.f), tol, "softmin columns");

  // P·V and Pᵀ·U: unlisted pairs contribute nothing, the inactive rows are zero. At d ≤ 4, k = 1, 3 and 4 take
  // the CUDA register kernel with one float4 of V a column, k = 5 and 8 the one with two (the row pass P·[Y | ‖y‖² |
  // 1] of 3-D points), k = 9 the tiled one.
  for (const std::size_t k : {std::size_t{9}, std::size_t{8}, std::size_t{5}, std::size_t{4}, std::size_t{3},
                              std::size_t{1}}) {
    const std::vector<float> v = random_points(s.p.m, k, 11), u = random_points(s.p.n, k, 12);
    std::vector<float> pv(s.p.n * k), ptu(s.p.m * k);
    s.backend->apply(pp, Side::kSource, v, k, false, pv);
    s.backend->apply(pp, Side::kTarget, u, k, false, ptu);
    std::vector<double> pv_ref(s.p.n * k, 0.0), ptu_ref(s.p.m * k, 0.0);
    for (std::size_t i = 0; i < s.p.n; ++i)
      for (std::size_t j = 0; j < s.p.m; ++j) {
        const double e = ref.plan(i, j, s.f, s.g);
        for (std::size_t c = 0; c < k; ++c) {
          pv_ref[i * k + c] += e * v[j * k + c];
          ptu_ref[j * k + c] += e * u[i * k + c];
        }
      }
    expect_close(pv, pv_ref, 1e-4, "P·V, k = " + std::to_string(k));
    expect_close(ptu, ptu_ref, 1e-4, "Pᵀ·U, k = " + std::to_string(k));
    for (std::size_t i = 2 * kBlockSize; i < s.p.n; ++i)
      for (std::size_t c = 0; c < k; ++c) ASSERT_EQ(pv[i * k + c], 0.0f) << "inactive row " << i;
  }

  // Top-k: only listed columns, the reference's entries.
  const std::size_t kk = 4;
  std::vector<std::int32_t> cols(s.p.n * kk);
  std::vector<float> vals(s.p.n * kk);
  s.backend->top_k(pp, kk, cols, vals);
  for (std::size_t i = 0; i < s.p.n; ++i) {
    for (std::size_t c = 0; c < kk; ++c) {
      const std::int32_t j = cols[i * kk + c];
      if (!ref.row_active(true, i)) {
        ASSERT_EQ(j, -1) << "row " << i;
        ASSERT_EQ(vals[i * kk + c], 0.0f);
        continue;
      }
      ASSERT_GE(j, 0) << "row " << i;
      ASSERT_TRUE(ref.listed(i, std::size_t(j))) << "row " << i << " picked unlisted column " << j;
      const double want = ref.plan(i, std::size_t(j), s.f, s.g);
      ASSERT_NEAR(vals[i * kk + c], want, 1e-4 * want + 1e-30) << "row " << i;
    }
  }

  // Iterations of both schemes; the inactive row block keeps its potentials.
  for (const Scheme scheme : {Scheme::kSymmetric, Scheme::kAlternating}) {
    std::vector<float> f0(s.f.begin(), s.f.end()), g0(s.g.begin(), s.g.end());
    s.backend->set_potentials(f0, g0);
    detail::IterationParams ip{eps, 1.0, scheme, 1.0, 1.0};
    ASSERT_TRUE(s.backend->iterate(ip, 6));
    std::vector<double> f = s.f, g = s.g;
    ref.iterate(scheme, 6, f, g);
    std::vector<float> fo(s.p.n), go(s.p.m);
    s.backend->get_potentials(fo, go);
    expect_close(fo, f, 2 * tol, "f after 6 " + to_string(scheme) + " iterations");
    expect_close(go, g, 2 * tol, "g after 6 " + to_string(scheme) + " iterations");
    for (std::size_t i = 2 * kBlockSize; i < s.p.n; ++i) ASSERT_EQ(fo[i], f0[i]) << "inactive row " << i << " moved";
  }
}

// Potentials far from the fixed point (row blocks pushed 100·ε up or down, so their rows' sums against the
// potentials leave 2^±100): the CUDA register kernel's shifted pass (launch_block_lse) must hand those row blocks
// to its running-maximum kernel, and every backend must still follow the reference.
TEST_P(BlockBackend, IteratesFarFromTheFixedPoint) {
  const auto& [name, d] = GetParam();
  FLASHOT_REQUIRE_BACKEND(name);
  BlockSetup s = make_setup(name, d);
  const auto pat = hand_pattern(s.p.n, s.p.m);
  s.backend->set_pattern(pat);
  const double eps = 0.05 * double(d);
  const Masked ref{s.p, *pat, {SegmentParams{eps, 1, 1, 1}}};
  for (std::size_t i = 0; i < s.p.n; ++i) s.f[i] += (i / kBlockSize) % 2 == 0 ? 100 * eps : -100 * eps;
  for (std::size_t j = 0; j < s.p.m; ++j) s.g[j] -= (j / kBlockSize) % 2 == 0 ? 0.0 : 120 * eps;
  const std::vector<float> f0(s.f.begin(), s.f.end()), g0(s.g.begin(), s.g.end());
  s.f.assign(f0.begin(), f0.end());
  s.g.assign(g0.begin(), g0.end());
  const double tol = name == "cpu" ? 1e-5 : 1e-4;
  for (const Scheme scheme : {Scheme::kAlternating, Scheme::kSymmetric}) {
    s.backend->set_potentials(f0, g0);
    detail::IterationParams ip{eps, 1.0, scheme, 1.0, 1.0};
    ASSERT_TRUE(s.backend->iterate(ip, 3));
    std::vector<double> f = s.f, g = s.g;
    ref.iterate(scheme, 3, f, g);
    std::vector<float> fo(s.p.n), go(s.p.m);
    s.backend->get_potentials(fo, go);
    expect_close(fo, f, 2 * tol, "f after 3 " + to_string(scheme) + " iterations");
    expect_close(go, g, 2 * tol, "g after 3 " + to_string(scheme) + " iterations");
  }
}

TEST_P(BlockBackend, SegmentsHaveTheirOwnParameters) {
  const auto& [name, d] = GetParam();
  FLASHOT_REQUIRE_BACKEND(name);
  BlockSetup s = make_setup(name, d);
  // Two problems: rows [0, 512) with columns [0, 256), rows [512, 700) with columns [256, 600).
  const std::vector<std::int32_t> rows{0, 2, 3}, cols{0, 1, 3};
  const auto pat = std::make_shared<const BlockPattern>(BlockPattern::block_diagonal(s.p.n, s.p.m, rows, cols));
  s.backend->set_pattern(pat);
  const std::vector<SegmentParams> seg{{0.04 * double(d), 1.0, 0.9, 0.95}, {0.1 * double(d), 0.5, 1.0, 0.8}};
  const Masked ref{s.p, *pat, seg};
  detail::IterationParams ip;
  ip.scheme = Scheme::kAlternating;
  ip.segments = seg;
  ASSERT_TRUE(s.backend->iterate(ip, 4));
  std::vector<double> f = s.f, g = s.g;
  ref.iterate(Scheme::kAlternating, 4, f, g);
  std::vector<float> fo(s.p.n), go(s.p.m);
  s.backend->get_potentials(fo, go);
  const double tol = name == "cpu" ? 1e-5 : 1e-4;
  expect_close(fo, f, 2 * tol, "f");
  expect_close(go, g, 2 * tol, "g");
  detail::PlanParams pp;
  pp.segments = seg;
  std::vector<float> fh(s.p.n);
  s.backend->softmin(pp, Side::kSource, fh);
  expect_close(fh, ref.softmin(true, g), tol, "softmin rows");
}

TEST_P(BlockBackend, DenseListEqualsNullPattern) {
  const auto& [name, d] = GetParam();
  FLASHOT_REQUIRE_BACKEND(name);
  BlockSetup s = make_setup(name, d);
  const detail::PlanParams pp{0.05 * double(d), 1.0};
  const std::size_t k = 3;
  const std::vector<float> v = random_points(s.p.m, k, 13);
  std::vector<float> dense_soft(s.p.n), dense_pv(s.p.n * k), list_soft(s.p.n), list_pv(s.p.n * k);
  s.backend->softmin(pp, Side::kSource, dense_soft);
  s.backend->apply(pp, Side::kSource, v, k, true, dense_pv);
  s.backend->set_pattern(std::make_shared<const BlockPattern>(BlockPattern::dense(s.p.n, s.p.m)));
  s.backend->softmin(pp, Side::kSource, list_soft);
  s.backend->apply(pp, Side::kSource, v, k, true, list_pv);
  const std::vector<double> ds(dense_soft.begin(), dense_soft.end()), dp(dense_pv.begin(), dense_pv.end());
  // CUDA's dense path may take another kernel family (register, tensor cores): fp32 rounding apart.
  expect_close(list_soft, ds, name == "cpu" ? 0.0 : 1e-4, "softmin");
  expect_close(list_pv, dp, name == "cpu" ? 0.0 : 1e-4, "normalized P·V");
  s.backend->set_pattern(nullptr);  // back to dense
  std::vector<float> again(s.p.n);
  s.backend->softmin(pp, Side::kSource, again);
  // CUDA may pick another family for the repeated pass (the dispatch's measured choice, a column split with
  // another summation order: H200, d = 20): equal to fp32 rounding, bitwise on the CPU.
  expect_close(again, ds, name == "cpu" ? 0.0 : 1e-5, "softmin after the pattern is removed");
}

TEST_P(BlockBackend, RefusesAPatternOfAnotherSize) {
  const auto& [name, d] = GetParam();
  FLASHOT_REQUIRE_BACKEND(name);
  BlockSetup s = make_setup(name, d);
  EXPECT_THROW(s.backend->set_pattern(std::make_shared<const BlockPattern>(BlockPattern::dense(s.p.n + 1, s.p.m))),
               std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Backends, BlockBackend,
                         ::testing::Combine(::testing::ValuesIn(backends_under_test()),
                                            ::testing::Values(std::size_t{3}, std::size_t{20}, std::size_t{64})),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_d" + std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace flashot::test

namespace flashot::test {
namespace {

/// The host-combined shards (BackendOptions::shards, here on the CPU) follow the lists as one backend does: every
/// operation equals the unsharded block-sparse backend's, with two segments of their own ε and damping.
TEST(BlockShards, ShardedBackendFollowsTheListsAsOneBackendDoes) {
  const TestProblem p = make_problem({.n = 2100, .m = 600, .d = 3, .seed = 90, .random_weights = true});
  BackendOptions sharded = backend_options("cpu", 2);
  sharded.shards = 2;  // boundaries at multiples of 1024 rows: whole blocks
  const detail::ProblemData data{p.xv(), p.yv(), p.a, p.b};
  const auto one = detail::make_backend(backend_options("cpu", 2), data);
  const auto two = detail::make_backend(sharded, data);
  // Two segments: rows [0, 1024) with columns [0, 256); rows [1024, 2100) with columns [256, 600), the last row
  // block inactive.
  std::vector<std::vector<BlockRange>> lists(9);
  for (int r = 0; r < 4; ++r) lists[r] = {{0, 1}};
  for (int r = 4; r < 8; ++r) lists[r] = {{1, 3}};
  const auto pat = std::make_shared<const BlockPattern>(p.n, p.m, lists, std::vector<std::int32_t>{0, 0, 0, 0, 1, 1, 1, 1, 1},
                                                        std::vector<std::int32_t>{0, 1, 1});
  one->set_pattern(pat);
  two->set_pattern(pat);
  const std::vector<SegmentParams> seg{{0.05, 1.0, 0.9, 1.0}, {0.2, 0.5, 1.0, 0.8}};
  for (const Scheme scheme : {Scheme::kSymmetric, Scheme::kAlternating}) {
    detail::IterationParams ip;
    ip.scheme = scheme;
    ip.segments = seg;
    const std::vector<float> f0(p.n, 0.01f), g0(p.m, -0.02f);
    one->set_potentials(f0, g0);
    two->set_potentials(f0, g0);
    ASSERT_TRUE(one->iterate(ip, 5));
    ASSERT_TRUE(two->iterate(ip, 5));
    std::vector<float> f1(p.n), g1(p.m), f2(p.n), g2(p.m);
    one->get_potentials(f1, g1);
    two->get_potentials(f2, g2);
    EXPECT_LE(max_abs_diff(f1, f2), 1e-5 * std::max(1.0, max_abs(f1))) << to_string(scheme);
    EXPECT_LE(max_abs_diff(g1, g2), 1e-5 * std::max(1.0, max_abs(g1))) << to_string(scheme);
    for (std::size_t i = 2048; i < p.n; ++i) ASSERT_EQ(f2[i], f0[i]) << "inactive row " << i;
  }
  detail::PlanParams pp;
  pp.segments = seg;
  std::vector<float> s1(p.m), s2(p.m);
  one->softmin(pp, Side::kTarget, s1);
  two->softmin(pp, Side::kTarget, s2);
  EXPECT_LE(max_abs_diff(s1, s2), 1e-5 * std::max(1.0, max_abs(s1)));
  const std::size_t k = 3;
  const std::vector<float> u = random_points(p.n, k, 91);
  for (const bool normalized : {false, true}) {
    std::vector<float> a1(p.m * k), a2(p.m * k);
    one->apply(pp, Side::kTarget, u, k, normalized, a1);
    two->apply(pp, Side::kTarget, u, k, normalized, a2);
    EXPECT_LE(max_abs_diff(a1, a2), 1e-4 * std::max(1e-30, max_abs(a1))) << "normalized " << normalized;
  }
  // Boundaries off the blocks are refused by name.
  BackendOptions small = backend_options("cpu", 2);
  small.shards = 2;
  const auto odd = detail::make_backend(small, detail::ProblemData{p.xv(), p.yv(), p.a, p.b});
  EXPECT_NO_THROW(odd->set_pattern(pat));  // 2100 rows: aligned
  // 700 rows over 2 shards now cut at a 256-row block (shard_plan.hpp, kShardListAlign) and are accepted; 400
  // rows cannot give each shard a whole block, so their boundary falls inside one.
  const TestProblem mid = make_problem({.n = 700, .m = 600, .d = 3, .seed = 93});
  const auto cut = detail::make_backend(small, detail::ProblemData{mid.xv(), mid.yv(), mid.a, mid.b});
  EXPECT_NO_THROW(cut->set_pattern(std::make_shared<const BlockPattern>(BlockPattern::dense(mid.n, mid.m))));
  const TestProblem q = make_problem({.n = 400, .m = 600, .d = 3, .seed = 92});
  const auto tiny = detail::make_backend(small, detail::ProblemData{q.xv(), q.yv(), q.a, q.b});
  EXPECT_THROW(tiny->set_pattern(std::make_shared<const BlockPattern>(BlockPattern::dense(q.n, q.m))),
               std::runtime_error);
}

}  // namespace
}  // namespace flashot::test
