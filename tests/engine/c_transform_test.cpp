// The hard c-transform (Problem::c_transform) on every backend against an fp64 brute force over the points as
// given (no centring): values, argmins, ties (lowest index), both sides, shards, gradients by finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend_fixture.hpp"
#include "problems.hpp"

namespace flashot::test {
namespace {

struct Brute {
  std::vector<double> values;
  std::vector<std::int32_t> index;
  double scale = 0;  // max |value|, for tolerances
};

/// value_i = min_j (s‖p_i − q_j‖² − h_j) in fp64, the first j of an exact tie.
Brute brute_force(const std::vector<float>& p, std::size_t np, const std::vector<float>& q, std::size_t nq,
                  std::size_t d, const std::vector<float>& h, double s) {
  Brute b;
  b.values.resize(np);
  b.index.resize(np);
  for (std::size_t i = 0; i < np; ++i) {
    double best = std::numeric_limits<double>::infinity();
    std::int32_t at = -1;
    for (std::size_t j = 0; j < nq; ++j) {
      double dist = 0;
      for (std::size_t c = 0; c < d; ++c) {
        const double diff = static_cast<double>(p[i * d + c]) - q[j * d + c];
        dist += diff * diff;
      }
      const double v = s * dist - h[j];
      if (v < best) best = v, at = static_cast<std::int32_t>(j);
    }
    b.values[i] = best;
    b.index[i] = at;
    b.scale = std::max(b.scale, std::abs(best));
  }
  return b;
}

/// s‖p_i − q_j‖² − h_j in fp64 for one pair.
double pair_value(const std::vector<float>& p, std::size_t i, const std::vector<float>& q, std::size_t j,
                  std::size_t d, const std::vector<float>& h, double s) {
  double dist = 0;
  for (std::size_t c = 0; c < d; ++c) {
    const double diff = static_cast<double>(p[i * d + c]) - q[j * d + c];
    dist += diff * diff;
  }
  return s * dist - h[j];
}

std::vector<float> random_potential(std::size_t n, std::uint64_t seed, double scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<float> h(n);
  for (float& v : h) v = static_cast<float>(u(rng));
  return h;
}

class CTransformTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto b = available_backends();
    if (std::find(b.begin(), b.end(), GetParam()) == b.end()) {
      if (GetParam() == "cuda" && cuda_required())
        FAIL() << "FLASHOT_REQUIRE_CUDA=1 but the CUDA backend is not available (not compiled in, or no device)";
      GTEST_SKIP() << "backend '" << GetParam() << "' is not available here (not compiled in, or no device)";
    }
  }
  BackendOptions options() const { return backend_options(GetParam()); }

  /// Engine against brute force on one side: values to 1e-5 of the scale, and every argmin either the reference's
  /// or one whose fp64 value is within that tolerance of the minimum (the centring's fp32 rounding may reorder a
  /// near tie the reference resolves on the uncentred points). Returns the number of differing argmins.
  static int expect_matches(const CTransform& t, const Brute& ref, const std::vector<float>& p,
                            const std::vector<float>& q, std::size_t d, const std::vector<float>& h, double s,
                            const std::string& what) {
    EXPECT_EQ(t.values.size(), ref.values.size()) << what;
    const double tol = 1e-5 * std::max(1.0, ref.scale);
    int differing = 0;
    for (std::size_t i = 0; i < ref.values.size(); ++i) {
      EXPECT_NEAR(t.values[i], ref.values[i], tol) << what << " row " << i;
      if (t.index[i] != ref.index[i]) {
        ++differing;
        EXPECT_NEAR(pair_value(p, i, q, static_cast<std::size_t>(t.index[i]), d, h, s), ref.values[i], tol)
            << what << " row " << i << ": argmin " << t.index[i] << " vs " << ref.index[i];
      }
    }
    return differing;
  }
};

TEST_P(CTransformTest, MatchesTheFp64BruteForceAtEveryWidthOnBothSides) {
  for (const std::size_t d : {1, 3, 8, 16, 64, 100}) {
    for (const auto& [n, m] : {std::pair<std::size_t, std::size_t>{300, 257}, {97, 1200}}) {
      const TestProblem pr = make_problem({.n = n, .m = m, .d = d, .seed = 40 + d});
      Problem problem(pr.xv(), pr.yv(), {}, {}, options());
      // Potentials of the size of the costs, so that they move the argmin away from the nearest point.
      const std::vector<float> g = random_potential(m, 7 + d, 0.3 * d);
      const std::vector<float> f = random_potential(n, 9 + d, 0.3 * d);
      for (const Cost cost : {Cost::kSquaredEuclidean, Cost::kHalfSquaredEuclidean}) {
        const double s = cost == Cost::kSquaredEuclidean ? 1.0 : 0.5;
        const std::string what = GetParam() + " d=" + std::to_string(d) + " n=" + std::to_string(n) +
                                 " m=" + std::to_string(m) + " s=" + std::to_string(s);
        const CTransform rows = problem.c_transform(Side::kSource, g, cost);
        const int dr = expect_matches(rows, brute_force(pr.x, n, pr.y, m, d, g, s), pr.x, pr.y, d, g, s,
                                      what + " rows");
        const CTransform cols = problem.c_transform(Side::kTarget, f, cost);
        const int dc = expect_matches(cols, brute_force(pr.y, m, pr.x, n, d, f, s), pr.y, pr.x, d, f, s,
                                      what + " columns");
        // Random data has no near ties at this tolerance beyond a handful.
        EXPECT_LE(dr + dc, 2) << what;
      }
    }
  }
}

TEST_P(CTransformTest, EveryCudaScoreFamilyMatchesTheBruteForce) {
  if (GetParam() != "cuda") GTEST_SKIP() << "the score families are the CUDA backend's";
  // Each family forced (CudaTuning::kernel): the register pass (d ≤ 16), the tiled fp32 pass, the split-fp16
  // tensor-core pass (any d ≤ 128 whose problem uses the tensor cores), with and without the warpgroup kernels elsewhere in the problem.
  for (const std::size_t d : {3, 8, 16, 24, 64, 100, 130}) {
    const std::size_t n = 700, m = 900;
    const TestProblem pr = make_problem({.n = n, .m = m, .d = d, .seed = 70 + d});
    const std::vector<float> g = random_potential(m, 17 + d, 0.2 * d);
    const Brute ref = brute_force(pr.x, n, pr.y, m, d, g, 1.0);
    std::vector<ScoreKernel> families = {ScoreKernel::kAuto, ScoreKernel::kTiled};
    if (d <= 16) families.push_back(ScoreKernel::kRegister);
    if (d <= 128) families.push_back(ScoreKernel::kTensor);
    for (const ScoreKernel family : families)
      for (const bool warpgroup : {true, false}) {
        // The tensor pass runs on warpgroups (wgmma) where the problem has their column tiles (a Hopper GPU), else
        // on mma.sync: both, on a Hopper GPU.
        if (!warpgroup && family != ScoreKernel::kTensor && family != ScoreKernel::kAuto) continue;
        BackendOptions o = options();
        o.cuda.kernel = family;
        o.cuda.warpgroup_kernels = warpgroup;
        Problem problem(pr.xv(), pr.yv(), {}, {}, o);
        const CTransform t = problem.c_transform(Side::kSource, g);
        const std::string what = "d=" + std::to_string(d) + " family " + to_string(family) +
                                 (warpgroup ? "" : " (no warpgroup kernels)");
        const int differing = expect_matches(t, ref, pr.x, pr.y, d, g, 1.0, what);
        EXPECT_LE(differing, 2) << what;
      }
  }
}

TEST_P(CTransformTest, ExactTiesGoToTheLowestIndex) {
  // Integer lattice targets, each present three times (with equal potentials), and sources at midpoints between
  // two lattice points: every row has exact ties, resolved to the lowest index in any arithmetic.
  for (const std::size_t d : {2, 3, 20}) {
    const std::size_t base = 40;
    std::vector<float> y;
    std::mt19937_64 rng(5 + d);
    std::uniform_int_distribution<int> coord(-6, 6);
    std::vector<float> pts(base * d);
    for (float& v : pts) v = static_cast<float>(coord(rng));
    for (int copy = 0; copy < 3; ++copy) y.insert(y.end(), pts.begin(), pts.end());
    const std::size_t m = 3 * base;
    std::vector<float> x;
    for (std::size_t i = 0; i + 1 < base; ++i)
      for (std::size_t c = 0; c < d; ++c) x.push_back(0.5f * (pts[i * d + c] + pts[(i + 1) * d + c]));
    const std::size_t n = base - 1;
    const std::vector<float> g(m, 0.0f);
    Problem problem({x, n, d}, {y, m, d}, {}, {}, options());
    const CTransform t = problem.c_transform(Side::kSource, g);
    const Brute ref = brute_force(x, n, y, m, d, g, 1.0);
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(t.index[i], ref.index[i]) << GetParam() << " d=" << d << " row " << i;
      EXPECT_LT(t.index[i], static_cast<std::int32_t>(base)) << "the first copy is the lowest index";
      EXPECT_DOUBLE_EQ(t.values[i], static_cast<float>(ref.values[i]));
    }
    // The column side: every copy of a lattice point gets the same source.
    const std::vector<float> f(n, 0.0f);
    const CTransform c = problem.c_transform(Side::kTarget, f);
    const Brute cref = brute_force(y, m, x, n, d, f, 1.0);
    for (std::size_t j = 0; j < m; ++j) EXPECT_EQ(c.index[j], cref.index[j]) << GetParam() << " column " << j;
  }
}

TEST_P(CTransformTest, DuplicatedTargetsResolveToTheLowestIndexThroughCandidatesAndRescans) {
  // Random targets, each present `copies` times at random positions with equal potentials: every row's best score
  // is tied exactly `copies` times. The CUDA pass keeps three candidates per row: up to three copies the row is
  // decided from its candidates, four or more send it to the full re-scan (docs/engine.md, "Hard c-transform").
  // Either way the argmin is the lowest index among the copies of the nearest point, and the value is exact. Every
  // score family on CUDA, with enough columns to split them (the splits' lists merged).
  for (const std::size_t d : {3, 24, 64}) {
    const std::size_t base = 400, n = 500;
    const TestProblem pr = make_problem({.n = n, .m = base, .d = d, .seed = 90 + d});
    const std::vector<float> g_base = random_potential(base, 19 + d, 0.2 * d);
    for (const std::size_t copies : {1, 2, 3, 4, 5}) {
      const std::size_t m = copies * base;
      std::vector<std::size_t> order(m);
      for (std::size_t j = 0; j < m; ++j) order[j] = j % base;
      std::mt19937_64 rng(copies * 1000 + d);
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<float> y(m * d), g(m);
      for (std::size_t j = 0; j < m; ++j) {
        std::copy_n(pr.y.begin() + static_cast<std::ptrdiff_t>(order[j] * d), d,
                    y.begin() + static_cast<std::ptrdiff_t>(j * d));
        g[j] = g_base[order[j]];
      }
      const Brute ref = brute_force(pr.x, n, y, m, d, g, 1.0);
      // (family, warpgroup kernels): the tensor pass on warpgroups (a Hopper GPU) and on mma.sync.
      std::vector<std::pair<ScoreKernel, bool>> families = {{ScoreKernel::kAuto, true}};
      if (GetParam() == "cuda") {
        families.emplace_back(ScoreKernel::kTiled, true);
        if (d <= 16) {
          families.emplace_back(ScoreKernel::kRegister, true);
        } else {
          families.emplace_back(ScoreKernel::kTensor, true);
          families.emplace_back(ScoreKernel::kTensor, false);
        }
      }
      for (const auto& [family, warpgroup] : families) {
        BackendOptions o = options();
        o.cuda.kernel = family;
        o.cuda.warpgroup_kernels = warpgroup;
        Problem problem(pr.xv(), {y, m, d}, {}, {}, o);
        const CTransform t = problem.c_transform(Side::kSource, g);
        const std::string what = GetParam() + " d=" + std::to_string(d) + " copies=" + std::to_string(copies) +
                                 " family " + to_string(family) + (warpgroup ? "" : " (no warpgroup kernels)");
        ASSERT_EQ(t.index.size(), n) << what;
        const double tol = 1e-5 * std::max(1.0, ref.scale);
        int wrong = 0;
        for (std::size_t i = 0; i < n; ++i) {
          EXPECT_NEAR(t.values[i], ref.values[i], tol) << what << " row " << i;
          // Copies score identically in any arithmetic, so the lowest index of the nearest point's copies is the
          // answer; only a near tie between two distinct points may go the other way (as in the test above).
          if (t.index[i] != ref.index[i]) {
            ++wrong;
            const std::size_t j = static_cast<std::size_t>(t.index[i]);
            ASSERT_LT(j, m) << what << " row " << i;
            EXPECT_NE(order[j], order[static_cast<std::size_t>(ref.index[i])])
                << what << " row " << i << ": another copy of the argmin, not the lowest (" << j << " vs "
                << ref.index[i] << ")";
            for (std::size_t k = 0; k < j; ++k)
              EXPECT_NE(order[k], order[j]) << what << " row " << i << ": column " << j << " is not its point's first copy";
            EXPECT_NEAR(pair_value(pr.x, i, y, j, d, g, 1.0), ref.values[i], tol) << what << " row " << i;
          }
        }
        EXPECT_LE(wrong, 2) << what;
      }
    }
  }
}

/// Point layouts for the variant tests: random, duplicated columns, a lattice with exact ties, tight clusters.
enum class Layout { kRandom, kDuplicated, kLattice, kClustered };

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kRandom: return "random";
    case Layout::kDuplicated: return "duplicated";
    case Layout::kLattice: return "lattice";
    case Layout::kClustered: return "clustered";
  }
  return "?";
}

struct Cloud {
  std::vector<float> x, y, g;
  bool exact_ties = false;  // every near tie is an exact one (the lowest index is the only right answer)
};

/// n rows, m columns in d dimensions. kDuplicated: m/3 distinct points, each 3 or 4 times (4: beyond the K = 3
/// candidates, the full re-scan) at shuffled places, equal potentials. kLattice: integer coordinates in [−2, 2]
/// (columns repeat at small d), rows at half-integers, zero potentials: rows equidistant from several columns.
/// kClustered: m/8 centres, 8 columns within 0.01·N(0, 1) of each, rows within 0.3·N(0, 1) of a centre: at d = 64
/// a row's scores of its cluster's columns differ by ~2⟨p − c, q_j − q_k⟩ ≈ 0.05, well within twice the hi·hi
/// product's error bound (≈ 0.36) but mostly beyond twice the split products' (≈ 0.02): the cascade's second pass
/// decides them.
Cloud make_cloud(Layout layout, std::size_t n, std::size_t m, std::size_t d, std::uint64_t seed) {
  Cloud c;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  c.x.resize(n * d);
  c.y.resize(m * d);
  c.g.resize(m);
  switch (layout) {
    case Layout::kRandom: {
      for (float& v : c.x) v = normal(rng);
      for (float& v : c.y) v = normal(rng);
      c.g = random_potential(m, seed + 1, 0.2 * static_cast<double>(d));
      break;
    }
    case Layout::kDuplicated: {
      const std::size_t base = std::max<std::size_t>(1, m / 3);
      std::vector<float> pts(base * d);
      for (float& v : pts) v = normal(rng);
      const std::vector<float> gb = random_potential(base, seed + 2, 0.2 * static_cast<double>(d));
      std::vector<std::size_t> order(m);
      for (std::size_t j = 0; j < m; ++j) order[j] = j % base;
      std::shuffle(order.begin(), order.end(), rng);
      for (std::size_t j = 0; j < m; ++j) {
        std::copy_n(pts.begin() + static_cast<std::ptrdiff_t>(order[j] * d), d,
                    c.y.begin() + static_cast<std::ptrdiff_t>(j * d));
        c.g[j] = gb[order[j]];
      }
      for (float& v : c.x) v = normal(rng);
      break;
    }
    case Layout::kLattice: {
      std::uniform_int_distribution<int> coord(-2, 2);
      for (float& v : c.y) v = static_cast<float>(coord(rng));
      for (float& v : c.x) v = static_cast<float>(coord(rng)) + 0.5f;
      std::fill(c.g.begin(), c.g.end(), 0.f);
      c.exact_ties = true;
      break;
    }
    case Layout::kClustered: {
      const std::size_t centres = std::max<std::size_t>(1, m / 8);
      std::vector<float> ctr(centres * d);
      for (float& v : ctr) v = normal(rng);
      std::uniform_int_distribution<std::size_t> pick(0, centres - 1);
      for (std::size_t j = 0; j < m; ++j)
        for (std::size_t k = 0; k < d; ++k) c.y[j * d + k] = ctr[(j % centres) * d + k] + 0.01f * normal(rng);
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t at = pick(rng);
        for (std::size_t k = 0; k < d; ++k) c.x[i * d + k] = ctr[at * d + k] + 0.3f * normal(rng);
      }
      c.g = random_potential(m, seed + 3, 0.001);
      break;
    }
  }
  return c;
}

/// One CUDA kernel choice of the c-transform.
struct Variant {
  ScoreKernel family = ScoreKernel::kAuto;
  bool warpgroup = true, cascade = true;
  int columns = 0;
  bool tiles = true;  // the register pass's tile order (d ≤ 4)
  int tile_rows = 0;
  std::string name() const {
    return std::string(to_string(family)) + (warpgroup ? "" : " mma.sync") + (cascade ? "" : " no-cascade") +
           (columns != 0 ? " columns=" + std::to_string(columns) : "") + (tiles ? "" : " no-tiles") +
           (tile_rows != 0 ? " tile-rows=" + std::to_string(tile_rows) : "");
  }
};

std::vector<Variant> cuda_variants(std::size_t d) {
  std::vector<Variant> v = {{ScoreKernel::kAuto, true, true, 0}, {ScoreKernel::kTiled, true, true, 0}};
  if (d <= 4) {
    // The register pass in the caller's order with its column groupings (R = 8 rows per thread), and in the tile
    // order with each row count per thread.
    for (const int columns : {1, 2, 4}) v.push_back({ScoreKernel::kRegister, true, true, columns, false});
    for (const int rows : {2, 4, 8}) v.push_back({ScoreKernel::kRegister, true, true, 0, true, rows});
  } else if (d <= 16)
    v.push_back({ScoreKernel::kRegister, true, true, 0});
  if (d <= 128) {
    v.push_back({ScoreKernel::kTensor, true, true, 0});   // the cascade on warpgroups (a Hopper GPU)
    v.push_back({ScoreKernel::kTensor, true, false, 0});  // the three products on warpgroups
    v.push_back({ScoreKernel::kTensor, false, true, 0});  // mma.sync
  }
  return v;
}

TEST_P(CTransformTest, EveryVariantGivesTheSameExactArgminsOnNearTies) {
  if (GetParam() != "cuda") GTEST_SKIP() << "the kernel variants are the CUDA backend's";
  // Every variant decides each row in fp64 among candidates certified to hold the exact argmin (or over all columns),
  // so all variants agree bit for bit, and with the fp64 brute force up to the centring's rounding (exactly, where
  // every near tie is an exact one). A certification that let the true argmin slip (a bound too small) would show as
  // a variant that differs, on these tie-heavy layouts most of all. Ragged sizes: neither a multiple of a tile.
  for (const Layout layout : {Layout::kRandom, Layout::kDuplicated, Layout::kLattice, Layout::kClustered})
    for (const std::size_t d : {3, 16, 64, 100})
      for (const auto& [n, m] : {std::pair<std::size_t, std::size_t>{333, 1001}, {1030, 517}}) {
        const Cloud c = make_cloud(layout, n, m, d, 1000 * d + n + static_cast<std::size_t>(layout));
        const Brute ref = brute_force(c.x, n, c.y, m, d, c.g, 1.0);
        const std::string where = std::string(layout_name(layout)) + " d=" + std::to_string(d) +
                                  " n=" + std::to_string(n) + " m=" + std::to_string(m);
        CTransform first;
        std::string first_name;
        for (const Variant& v : cuda_variants(d)) {
          BackendOptions o = options();
          o.cuda.kernel = v.family;
          o.cuda.warpgroup_kernels = v.warpgroup;
          o.cuda.c_transform_cascade = v.cascade;
          o.cuda.c_transform_columns = v.columns;
          o.cuda.c_transform_tiles = v.tiles;
          o.cuda.c_transform_tile_rows = v.tile_rows;
          Problem problem({c.x, n, d}, {c.y, m, d}, {}, {}, o);
          const CTransform t = problem.c_transform(Side::kSource, c.g);
          const std::string what = where + " " + v.name();
          ASSERT_EQ(t.index.size(), n) << what;
          if (c.exact_ties) {
            for (std::size_t i = 0; i < n; ++i) {
              ASSERT_EQ(t.index[i], ref.index[i]) << what << " row " << i;
              ASSERT_EQ(t.values[i], static_cast<float>(ref.values[i])) << what << " row " << i;
            }
          } else {
            expect_matches(t, ref, c.x, c.y, d, c.g, 1.0, what);
          }
          if (first.index.empty()) {
            first = t;
            first_name = v.name();
            continue;
          }
          for (std::size_t i = 0; i < n; ++i) {
            ASSERT_EQ(t.index[i], first.index[i]) << what << " row " << i << " vs " << first_name;
            ASSERT_EQ(t.values[i], first.values[i]) << what << " row " << i << " vs " << first_name;
          }
        }
      }
}

TEST_P(CTransformTest, TheCascadeDecidesMostRowsInItsFirstPassAndTheRestExactly) {
  if (GetParam() != "cuda") GTEST_SKIP() << "the cascade is the CUDA backend's";
  // d = 64 on warpgroups (a Hopper GPU; elsewhere the cascade does not run and the counts are zero): random data
  // leaves few rows to the second pass; clustered data (columns within the hi·hi bound of each other) sends most
  // rows there, and the second pass decides nearly all of them without the full re-scan; four copies of every
  // column send every row to the re-scan. Every argmin is checked against the brute force in each case.
  const std::size_t n = 1500, m = 2400, d = 64;
  for (const Layout layout : {Layout::kRandom, Layout::kClustered, Layout::kDuplicated}) {
    Cloud c = make_cloud(layout, n, m, d, 77 + static_cast<std::size_t>(layout));
    if (layout == Layout::kDuplicated) {  // exactly four copies of every point: beyond the K = 3 candidates
      const std::size_t base = m / 4;
      for (std::size_t j = base; j < m; ++j) {
        std::copy_n(c.y.begin() + static_cast<std::ptrdiff_t>((j % base) * d), d,
                    c.y.begin() + static_cast<std::ptrdiff_t>(j * d));
        c.g[j] = c.g[j % base];
      }
    }
    const Brute ref = brute_force(c.x, n, c.y, m, d, c.g, 1.0);
    BackendOptions o = options();
    o.cuda.kernel = ScoreKernel::kTensor;
    Problem problem({c.x, n, d}, {c.y, m, d}, {}, {}, o);
    const CTransform t = problem.c_transform(Side::kSource, c.g);
    const std::string what = std::string(layout_name(layout)) + " " + problem.device_name();
    const int differing = expect_matches(t, ref, c.x, c.y, d, c.g, 1.0, what);
    EXPECT_LE(differing, 2) << what;
    if (layout == Layout::kDuplicated) {
      for (std::size_t i = 0; i < n; ++i)
        EXPECT_LT(t.index[i], static_cast<std::int32_t>(m / 4)) << what << " row " << i << ": not the first copy";
    }
    const EngineStatistics st = problem.statistics();
    if (problem.device_name().find("sm_90") == std::string::npos) {
      EXPECT_EQ(st.c_transform_rescored, 0) << what << ": no warpgroup kernels, no cascade";
      continue;
    }
    const long long rows = static_cast<long long>(n);
    if (layout == Layout::kRandom) {
      EXPECT_LE(st.c_transform_rescored, rows / 20) << what;
      EXPECT_LE(st.c_transform_rescanned, st.c_transform_rescored) << what;
    } else if (layout == Layout::kClustered) {
      EXPECT_GE(st.c_transform_rescored, rows / 2) << what << ": the clusters should defeat the hi·hi bound";
      EXPECT_LE(st.c_transform_rescanned, rows / 10) << what << ": the split products should decide the clusters";
    } else {
      EXPECT_EQ(st.c_transform_rescored, rows) << what;
      EXPECT_EQ(st.c_transform_rescanned, rows) << what;
    }
    // The same answers without the cascade, and then no second pass.
    o.cuda.c_transform_cascade = false;
    Problem plain({c.x, n, d}, {c.y, m, d}, {}, {}, o);
    const CTransform u = plain.c_transform(Side::kSource, c.g);
    EXPECT_EQ(u.index, t.index) << what;
    EXPECT_EQ(u.values, t.values) << what;
    EXPECT_EQ(plain.statistics().c_transform_rescored, 0) << what;
  }
}

TEST_P(CTransformTest, TheTileOrderSkipsNoColumnThatCouldWin) {
  if (GetParam() != "cuda") GTEST_SKIP() << "the tile order is the CUDA register pass's";
  // At d ≤ 4 the register pass sorts both sides along a Morton curve and skips, per block of rows, every tile of 128
  // columns whose box bound cannot beat the rows' candidate lists (docs/engine.md, "Hard c-transform"). Enough
  // columns for many tiles (ragged: neither side a multiple of a block or a tile), on the tie-heavy layouts and on
  // one where a far column with a large potential wins about half the rows (its tile lies at the far end of the
  // order, and only its potential makes it win): every row count per thread gives the untiled pass's answers bit for
  // bit, and the brute force's (exactly, where every near tie is an exact one: the lowest caller's index).
  const std::size_t n = 5000, m = 6000;
  for (const std::size_t d : {1, 2, 3, 4}) {
    for (const int layout_index : {0, 1, 2, 3, 4}) {
      const bool far_winner = layout_index == 4;
      const Layout layout = far_winner ? Layout::kRandom : static_cast<Layout>(layout_index);
      Cloud c = make_cloud(layout, n, m, d, 5000 + 10 * d + static_cast<std::size_t>(layout_index));
      if (far_winner) {
        const std::size_t j = m / 2;
        double norm2 = 0;
        for (std::size_t k = 0; k < d; ++k) norm2 += 100.0, c.y[j * d + k] = 10.f;
        c.g[j] = static_cast<float>(norm2);  // value ‖p‖² − 2⟨p, q⟩ there: negative for about half the rows
      }
      const Brute ref = brute_force(c.x, n, c.y, m, d, c.g, 1.0);
      const std::string where = std::string(far_winner ? "far-winner" : layout_name(layout)) +
                                " d=" + std::to_string(d);
      if (far_winner) {
        std::size_t won = 0;
        for (std::size_t i = 0; i < n; ++i) won += ref.index[i] == static_cast<std::int32_t>(m / 2) ? 1 : 0;
        ASSERT_GT(won, n / 4) << where << ": the far column should win many rows";
      }
      BackendOptions o = options();
      o.cuda.kernel = ScoreKernel::kRegister;
      o.cuda.c_transform_tiles = false;
      Problem plain({c.x, n, d}, {c.y, m, d}, {}, {}, o);
      const CTransform u = plain.c_transform(Side::kSource, c.g);
      for (const int rows : {2, 4, 8}) {
        o.cuda.c_transform_tiles = true;
        o.cuda.c_transform_tile_rows = rows;
        Problem problem({c.x, n, d}, {c.y, m, d}, {}, {}, o);
        const CTransform t = problem.c_transform(Side::kSource, c.g);
        const std::string what = where + " tile-rows=" + std::to_string(rows);
        ASSERT_EQ(t.index.size(), n) << what;
        if (c.exact_ties) {
          for (std::size_t i = 0; i < n; ++i) {
            ASSERT_EQ(t.index[i], ref.index[i]) << what << " row " << i;
            ASSERT_EQ(t.values[i], static_cast<float>(ref.values[i])) << what << " row " << i;
          }
        } else {
          EXPECT_LE(expect_matches(t, ref, c.x, c.y, d, c.g, 1.0, what), 2) << what;
        }
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_EQ(t.index[i], u.index[i]) << what << " row " << i << " vs no-tiles";
          ASSERT_EQ(t.values[i], u.values[i]) << what << " row " << i << " vs no-tiles";
        }
      }
    }
  }
}

/// Making a Problem with `o` throws std::invalid_argument naming `field` and the value 3.
void expect_refused_with_three(const BackendOptions& o, const std::string& field) {
  const TestProblem pr = make_problem({.n = 10, .m = 12, .d = 2, .seed = 1});
  try {
    Problem problem(pr.xv(), pr.yv(), {}, {}, o);
    FAIL() << field << " = 3 must throw";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(field), std::string::npos) << what;
    EXPECT_NE(what.find("got 3"), std::string::npos) << what;
  }
}

TEST_P(CTransformTest, RefusesAnUnknownTileRowCount) {
  BackendOptions o = options();
  o.cuda.c_transform_tile_rows = 3;
  expect_refused_with_three(o, "c_transform_tile_rows");
}

TEST_P(CTransformTest, RefusesAnUnknownColumnGrouping) {
  BackendOptions o = options();
  o.cuda.c_transform_columns = 3;
  expect_refused_with_three(o, "c_transform_columns");
}

TEST_P(CTransformTest, ShardsGiveTheOneDeviceResultExactly) {
  const TestProblem pr = make_problem({.n = 301, .m = 230, .d = 5, .seed = 3});
  const std::vector<float> g = random_potential(pr.m, 1, 1.0), f = random_potential(pr.n, 2, 1.0);
  Problem one(pr.xv(), pr.yv(), {}, {}, options());
  std::vector<BackendOptions> layouts;
  BackendOptions host = options();
  host.shards = 3;  // combined on the host (one device, or the CPU)
  host.nccl = false;
  layouts.push_back(host);
  const char* gpus = std::getenv("FLASHOT_TEST_GPUS");
  if (GetParam() == "cuda" && gpus != nullptr && std::atoi(gpus) >= 2) {
    BackendOptions nccl = options();  // one shard per device, combined through NCCL
    nccl.devices = {0, 1};
    layouts.push_back(nccl);
  }
  for (const BackendOptions& layout : layouts) {
    Problem sharded(pr.xv(), pr.yv(), {}, {}, layout);
    for (const Side side : {Side::kSource, Side::kTarget}) {
      const std::vector<float>& h = side == Side::kSource ? g : f;
      const CTransform a = one.c_transform(side, h), b = sharded.c_transform(side, h);
      EXPECT_EQ(a.index, b.index) << sharded.device_name();
      EXPECT_EQ(a.values, b.values) << sharded.device_name();
    }
  }
}

TEST_P(CTransformTest, ThroughASolutionUsesItsPotentialsAndCost) {
  const TestProblem pr = make_problem({.n = 120, .m = 90, .d = 3, .seed = 8});
  Problem problem(pr.xv(), pr.yv(), pr.a, pr.b, options());
  SolveOptions o;
  o.cost = Cost::kHalfSquaredEuclidean;
  o.blur = 0.1;
  const SolveResult s = problem.solve(o);
  const CTransform t = problem.c_transform(s, Side::kSource);
  const Brute ref = brute_force(pr.x, pr.n, pr.y, pr.m, pr.d, s.g, 0.5);
  expect_matches(t, ref, pr.x, pr.y, pr.d, s.g, 0.5, GetParam());
  EXPECT_EQ(t.cost, Cost::kHalfSquaredEuclidean);
}

TEST_P(CTransformTest, GradientsMatchFiniteDifferences) {
  const std::size_t n = 40, m = 60, d = 3;
  const TestProblem pr = make_problem({.n = n, .m = m, .d = d, .seed = 12});
  const std::vector<float> g = random_potential(m, 4, 0.2);
  const std::vector<float> w = random_potential(n, 6, 1.0);
  Problem problem(pr.xv(), pr.yv(), {}, {}, options());
  const CTransform t = problem.c_transform(Side::kSource, g);
  const CTransformGradient grad = problem.c_transform_gradient(t, w);
  ASSERT_EQ(grad.points.size(), n * d);
  ASSERT_EQ(grad.potential.size(), m);
  ASSERT_EQ(grad.other.size(), m * d);
  const auto loss = [&](const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& h) {
    Problem q({x, n, d}, {y, m, d}, {}, {}, options());
    const CTransform c = q.c_transform(Side::kSource, h);
    double l = 0;
    for (std::size_t i = 0; i < n; ++i) l += static_cast<double>(w[i]) * c.values[i];
    return l;
  };
  const double step = 1e-3;
  // Points: central differences (the argmin does not change for a step this small on random data).
  for (std::size_t i = 0; i < n; i += 7)
    for (std::size_t c = 0; c < d; ++c) {
      std::vector<float> xp = pr.x, xm = pr.x;
      xp[i * d + c] += static_cast<float>(step);
      xm[i * d + c] -= static_cast<float>(step);
      const double fd = (loss(xp, pr.y, g) - loss(xm, pr.y, g)) / (xp[i * d + c] - xm[i * d + c]);
      EXPECT_NEAR(grad.points[i * d + c], fd, 2e-3 * (1 + std::abs(fd))) << "x row " << i << " coord " << c;
    }
  for (std::size_t j = 0; j < m; j += 5) {
    std::vector<float> hp = g, hm = g;
    hp[j] += static_cast<float>(step);
    hm[j] -= static_cast<float>(step);
    const double fd = (loss(pr.x, pr.y, hp) - loss(pr.x, pr.y, hm)) / (hp[j] - hm[j]);
    EXPECT_NEAR(grad.potential[j], fd, 2e-3 * (1 + std::abs(fd))) << "h " << j;
    for (std::size_t c = 0; c < d; ++c) {
      std::vector<float> yp = pr.y, ym = pr.y;
      yp[j * d + c] += static_cast<float>(step);
      ym[j * d + c] -= static_cast<float>(step);
      const double fy = (loss(pr.x, yp, g) - loss(pr.x, ym, g)) / (yp[j * d + c] - ym[j * d + c]);
      EXPECT_NEAR(grad.other[j * d + c], fy, 2e-3 * (1 + std::abs(fy))) << "y row " << j << " coord " << c;
    }
  }
}

TEST_P(CTransformTest, RefusesBadInputNamingIt) {
  const TestProblem pr = make_problem({.n = 10, .m = 12, .d = 2, .seed = 1});
  Problem problem(pr.xv(), pr.yv(), {}, {}, options());
  std::vector<float> h(11, 0.0f);
  try {
    (void)problem.c_transform(Side::kSource, h);
    FAIL() << "a wrong size must throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("12"), std::string::npos) << e.what();
  }
  h.assign(12, 0.0f);
  h[4] = std::numeric_limits<float>::quiet_NaN();
  try {
    (void)problem.c_transform(Side::kSource, h);
    FAIL() << "a NaN must throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("g[4]"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CTransformTest, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace flashot::test
