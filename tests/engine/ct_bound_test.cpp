// The hard c-transform's score error bounds (engine/src/ct_bound.hpp), on the host: the scores of each pass are
// emulated bit for bit where it matters (fp16 rounding of the operands, fp32 accumulation rounded to nearest and
// truncated, the final FMA, the bias's rounding) and must lie within E_i of the exact score; the bounds must also be
// tight enough to certify (within a small factor of the worst error found on adversarial operands).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../../engine/src/ct_bound.hpp"

namespace flashot::test {
namespace {

namespace ct = flashot::detail::ct;

/// fp16 round-to-nearest-even of a float (11 significant bits; subnormal spacing 2^−24 below 2^−14), in double.
double to_fp16(double x) {
  if (x == 0) return 0;
  int e = 0;
  std::frexp(x, &e);                     // x = m·2^e, 0.5 ≤ |m| < 1
  const int q = std::max(e - 11, -24);   // the spacing's exponent
  return std::nearbyint(std::ldexp(x, -q)) * std::ldexp(1.0, q);  // ties to even (the default rounding mode)
}

/// Sum of fp32 terms in order, each addition rounded to nearest or towards zero (a tensor core may truncate).
float accumulate(const std::vector<float>& terms, bool truncate) {
  const int mode = std::fegetround();
  if (truncate) std::fesetround(FE_TOWARDZERO);
  volatile float acc = 0.f;
  for (const float t : terms) acc = acc + t;
  std::fesetround(mode);
  return acc;
}

struct Operands {
  int d = 0;
  std::vector<float> p, q;  // one row, one column (unscaled)
  float row_scale = 1, col_scale = 1, h = 0, s = 1;
};

/// Powers of two as the engine picks them: the largest |coordinate| lands in [2^7, 2^8).
float operand_scale(const std::vector<float>& v) {
  float m = 0;
  for (const float x : v) m = std::max(m, std::abs(x));
  return m > 0 ? std::ldexp(1.f, 7 - std::ilogb(m)) : 1.f;
}

struct Scored {
  double exact = 0;  // 2s⟨p, q⟩ + h − s‖q‖² in fp64 (exact to 2^−50 for these sizes)
  float bias = 0, norm_p = 0, norm_q = 0;
  float single = 0, split = 0, fp32 = 0;  // the three passes' fp32 scores
};

Scored score(const Operands& o, bool truncate) {
  Scored r;
  double dot = 0, pp = 0, qq = 0;
  for (int k = 0; k < o.d; ++k) {
    dot += double(o.p[k]) * o.q[k];
    pp += double(o.p[k]) * o.p[k];
    qq += double(o.q[k]) * o.q[k];
  }
  const float s = o.s;
  r.exact = 2.0 * s * dot + o.h - double(s) * qq;
  r.norm_p = std::sqrt(float(pp));
  r.norm_q = std::sqrt(float(qq));
  const float norm2_q = float(qq);  // rounded from fp64, as the engine keeps it
  r.bias = o.h - s * norm2_q;
  // Split operands: P = scale·p exactly (a power of two), hi = fp16(P), lo = fp16(P − hi).
  std::vector<float> hh, hl;  // hi·hi products; the three products in the tensor core's order
  std::vector<float> three;
  for (int k = 0; k < o.d; ++k) {
    const double P = double(o.p[k]) * o.row_scale, Q = double(o.q[k]) * o.col_scale;
    const double ph = to_fp16(P), pl = to_fp16(P - ph), qh = to_fp16(Q), ql = to_fp16(Q - qh);
    hh.push_back(float(ph * qh));  // exact: 11 × 11 bits
    three.push_back(float(ph * qh));
    three.push_back(float(ph * ql));
    three.push_back(float(pl * qh));
  }
  const float alpha = 2.f * s / (o.row_scale * o.col_scale);
  r.single = std::fma(alpha, accumulate(hh, truncate), r.bias);
  r.split = std::fma(alpha, accumulate(three, truncate), r.bias);
  // fp32 FMA scores as the register pass: bias + Σ (2s·p_k)·q_k.
  float t = r.bias;
  for (int k = 0; k < o.d; ++k) t = std::fma(2.f * s * o.p[k], o.q[k], t);
  r.fp32 = t;
  return r;
}

/// Random operands; `adversarial`: every scaled coordinate just below a midpoint between two fp16 values of the
/// same sign (the largest rounding error, all of one sign, so that they add up), some in fp16's subnormal range.
Operands make(int d, std::mt19937_64& rng, bool adversarial, float h_scale) {
  Operands o;
  o.d = d;
  std::normal_distribution<float> g(0.f, 1.f);
  for (int k = 0; k < d; ++k) {
    o.p.push_back(g(rng));
    o.q.push_back(g(rng));
  }
  if (adversarial) {
    std::uniform_int_distribution<int> e(-30, 0);
    for (int k = 0; k < d; ++k) {
      // |x| = (1 + (2j + 1)·2^−11 − tiny)·2^e: the midpoint between two fp16 values, less a little, so that fp16
      // rounds down by nearly half a spacing; e down to the subnormal range after scaling.
      const int ex = k % 7 == 0 ? e(rng) : 0;
      for (std::vector<float>* v : {&o.p, &o.q}) {
        const float m = 1.f + float(2 * (k % 500) + 1) * 0x1p-11f - 0x1p-20f;
        (*v)[k] = std::ldexp(m, ex);
      }
    }
  }
  o.row_scale = operand_scale(o.p);
  o.col_scale = operand_scale(o.q);
  o.h = h_scale * g(rng);
  o.s = 1.f;
  return o;
}

TEST(CTransformBound, EveryPassStaysWithinItsBoundOnRandomAndAdversarialOperands) {
  std::mt19937_64 rng(7);
  for (const int d : {1, 3, 17, 32, 64, 100, 128}) {
    const ct::ScoreBound fp32 = ct::fp32_bound(d);
    double worst_single = 0, worst_split = 0;  // error / bound
    for (int trial = 0; trial < 400; ++trial) {
      const bool adversarial = trial % 2 == 1;
      // h: of the size of the scores, or cancelling s‖q‖² (the bias then ≈ 0 and its rounding relative to ‖q‖²).
      Operands o = make(d, rng, adversarial, trial % 4 == 0 ? 0.f : float(d));
      if (trial % 8 == 3) {
        double qq = 0;
        for (const float v : o.q) qq += double(v) * v;
        o.h = float(qq);
      }
      if (trial % 3 == 2) o.s = 0.5f;
      for (const bool truncate : {false, true}) {
        const Scored r = score(o, truncate);
        const float max_bias = std::abs(r.bias);
        const ct::ScoreBound single = ct::hi_fp16_bound(d, o.row_scale, o.col_scale);
        const ct::ScoreBound split = ct::split_fp16_bound(d, o.row_scale, o.col_scale);
        const double e1 = ct::score_bound(single, o.s, r.norm_p, r.norm_q, max_bias);
        const double e3 = ct::score_bound(split, o.s, r.norm_p, r.norm_q, max_bias);
        const double ef = ct::score_bound(fp32, o.s, r.norm_p, r.norm_q, max_bias);
        const double err1 = std::abs(double(r.single) - r.exact), err3 = std::abs(double(r.split) - r.exact);
        const double errf = std::abs(double(r.fp32) - r.exact);
        EXPECT_LE(err1, e1) << "hi·hi d=" << d << " trial " << trial << " truncate " << truncate;
        EXPECT_LE(err3, e3) << "split d=" << d << " trial " << trial << " truncate " << truncate;
        EXPECT_LE(errf, ef) << "fp32 d=" << d << " trial " << trial << " truncate " << truncate;
        // The refinement's floor assumes E(split) ≥ E(fp32), and the cascade E(hi·hi) ≥ E(split).
        EXPECT_GE(e3, ef) << d;
        EXPECT_GE(e1, e3) << d;
        if (adversarial) {
          worst_single = std::max(worst_single, err1 / e1);
          worst_split = std::max(worst_split, err3 / e3);
        }
      }
    }
    // The hi·hi bound is dominated by the operands' rounding, which the adversarial operands nearly attain: a bound
    // many times looser would send rows to the second pass for nothing.
    EXPECT_GT(worst_single, 0.25) << "d=" << d << ": the hi·hi bound is far above the worst error found";
    EXPECT_GT(worst_split, 0.0) << d;
  }
}

TEST(CTransformBound, TheSingleProductBoundIsAboutTwoToTheMinusTenOfTheProduct) {
  // At d = 64 with unit-norm-ish points the bound is 2^−10·2s‖p‖·max‖q‖ plus small terms: what the cascade's
  // certification rate rests on (docs/engine.md, "Hard c-transform").
  const ct::ScoreBound b = ct::hi_fp16_bound(64, 16.f, 16.f);
  const float e = ct::score_bound(b, 1.f, 8.f, 11.f, 0.f);
  const float main = 0x1p-10f * 2.f * 8.f * 11.f;
  EXPECT_GT(e, main);
  EXPECT_LT(e, 1.1f * main);
  // The split bound is ~ (3d + 8)·2^−22 of the same product: some 60 times tighter at d = 64.
  const float e3 = ct::score_bound(ct::split_fp16_bound(64, 16.f, 16.f), 1.f, 8.f, 11.f, 0.f);
  EXPECT_GT(e / e3, 15.f);
  EXPECT_LT(e / e3, 25.f);
}

TEST(CTransformBound, TheBiasTermCoversAPotentialThatCancelsTheNorm) {
  // h = s‖q‖²: the bias is ~0 and its rounding comes from s‖q‖² alone; p = 0 leaves no dot-product term to hide it.
  const int d = 3;
  Operands o;
  o.d = d;
  o.p = {0.f, 0.f, 0.f};
  o.q = {1.1f, -2.3f, 0.7f};
  double qq = 0;
  for (const float v : o.q) qq += double(v) * v;
  o.h = float(qq) * (1.f + 0x1p-23f);
  o.row_scale = 1.f;
  o.col_scale = operand_scale(o.q);
  const Scored r = score(o, false);
  const float e = ct::score_bound(ct::fp32_bound(d), o.s, r.norm_p, r.norm_q, std::abs(r.bias));
  EXPECT_LE(std::abs(double(r.fp32) - r.exact), e);
  EXPECT_GT(e, 0.f) << "the norm term keeps the bound positive where the bias and the row vanish";
}

/// One trial of the tile pass's skip test (ct::ct_tile_below) at D coordinates: a tile of 8 columns at scale
/// `spread` around `centre` (per coordinate), potentials of scale `h_scale` (or cancelling s‖q‖² when `cancel`), a
/// row inside, on the faces of or away from the box. Records a failure if the test skipped a rest below the box's
/// exact maximum score, or did not skip one 2^−12 of the terms' size above it.
template <int D>
void tile_trial(std::mt19937_64& rng, float s, double centre, double spread, double h_scale, bool cancel, int where) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  float lo[D], hi[D];
  float hmax = -INFINITY;
  for (int k = 0; k < D; ++k) lo[k] = INFINITY, hi[k] = -INFINITY;
  for (int j = 0; j < 8; ++j) {
    double qq = 0;
    for (int k = 0; k < D; ++k) {
      const float q = static_cast<float>(centre + spread * normal(rng));
      lo[k] = std::min(lo[k], q);
      hi[k] = std::max(hi[k], q);
      qq += double(q) * q;
    }
    const float h = cancel ? static_cast<float>(double(s) * qq * (1.0 + 1e-6 * normal(rng)))
                           : static_cast<float>(h_scale * normal(rng));
    hmax = std::max(hmax, h);
  }
  float p[D];
  for (int k = 0; k < D; ++k) {
    const double inside = lo[k] + (double(hi[k]) - lo[k]) * unit(rng);
    if (where == 0) p[k] = static_cast<float>(inside);                                  // in the box
    else if (where == 1) p[k] = unit(rng) < 0.5 ? lo[k] : hi[k];                       // on its faces
    else p[k] = static_cast<float>(inside + 4 * (spread + std::abs(centre)) * normal(rng));  // away from it
  }
  // The kernel's operands: x = fp32(2s·p), ‖x‖² by fp32 FMA, the box scaled and rounded outwards.
  const float two_s = 2.f * s, four_s = 4.f * s;
  float x[D], lower[D], upper[D];
  float xn = 0.f;
  for (int k = 0; k < D; ++k) {
    x[k] = two_s * p[k];
    xn = std::fma(x[k], x[k], xn);
    lower[k] = ct::ct_mul_down(two_s, lo[k]);
    upper[k] = ct::ct_mul_up(two_s, hi[k]);
  }
  // The exact maximum over the box of t = s‖p‖² − s‖p − q‖² + h (long double: the terms' products are exact).
  long double pp = 0, ee = 0;
  for (int k = 0; k < D; ++k) {
    const long double e = std::max({0.0L, (long double)lo[k] - p[k], (long double)p[k] - hi[k]});
    pp += (long double)p[k] * p[k];
    ee += e * e;
  }
  const long double top = (long double)s * (pp - ee) + hmax;
  const long double size = (long double)s * (pp + ee) + std::abs((long double)hmax);
  const std::string what = "D=" + std::to_string(D) + " s=" + std::to_string(s) + " centre=" + std::to_string(centre) +
                           " spread=" + std::to_string(spread) + " where=" + std::to_string(where) +
                           (cancel ? " cancelling h" : "");
  // The largest float below the exact maximum: a column of the box may score above it, so the tile must be kept.
  float below = static_cast<float>(top);
  while ((long double)below >= top) below = std::nextafter(below, -INFINITY);
  EXPECT_FALSE(ct::ct_tile_below(x, xn, lower, upper, hmax, four_s, below))
      << what << ": skipped a rest " << below << " below the exact maximum " << double(top);
  // 2^−12 of the terms above it: the margin (2^−18) must not keep the tile.
  const float above = static_cast<float>(top + 0x1p-12L * size);
  EXPECT_TRUE(ct::ct_tile_below(x, xn, lower, upper, hmax, four_s, above))
      << what << ": kept a rest " << above << " above the exact maximum " << double(top);
}

TEST(CTransformBound, TheTileTestNeverSkipsATileThatCouldBeatTheRest) {
  // The tile pass (d ≤ 4) skips a tile of columns for a row when its box bound lies below the row's rest: a bound
  // below some column's exact score would lose the argmin. Random tiles at scales 10^−3 to 10^3, near the origin
  // and far from it (the terms then cancel), potentials of every scale or cancelling s‖q‖², rows inside, on the
  // faces of and away from the box, several cost scales: the test never skips a rest below the box's exact maximum
  // score and always skips one 2^−12 of the terms' size above it.
  std::mt19937_64 rng(2026);
  std::uniform_real_distribution<double> exponent(-3.0, 3.0);
  for (const float s : {1.f, 0.5f, 3.7f, 1e-3f, 250.f})
    for (int trial = 0; trial < 400; ++trial) {
      const double spread = std::pow(10.0, exponent(rng));
      const double centre = trial % 3 == 0 ? 0.0 : std::pow(10.0, exponent(rng)) * (trial % 2 == 0 ? 1 : -1);
      const double h_scale = std::pow(10.0, exponent(rng));
      const bool cancel = trial % 5 == 0;
      const int where = trial % 3;
      tile_trial<1>(rng, s, centre, spread, h_scale, cancel, where);
      tile_trial<2>(rng, s, centre, spread, h_scale, cancel, where);
      tile_trial<3>(rng, s, centre, spread, h_scale, cancel, where);
      tile_trial<4>(rng, s, centre, spread, h_scale, cancel, where);
    }
}

TEST(CTransformBound, TheSecondPassGridCoversEveryCountAndFillsTheDevice) {
  // The second pass's blocks find their role from the count on the device: for every count up to the rows, its
  // blocks·splits must fit the grid launched for the rows (and the scratch sized from it), and fill the device's
  // slots whenever the columns allow.
  for (const int slots : {132, 264})
    for (const int tiles : {1, 7, 1563})
      for (const int nrows : {1, 255, 256, 257, 5000, 100000}) {
        const int grid = ct::ct_listed_grid(nrows, slots, 256);
        for (int count = 0; count <= nrows; count += count < 600 ? 1 : 997) {
          const int blocks = (count + 255) / 256;
          const int splits = ct::ct_listed_splits(blocks, tiles, slots);
          ASSERT_GE(splits, 1) << count;
          ASSERT_LE(splits, tiles) << count;
          ASSERT_LE(blocks * splits, grid) << "count " << count << " of " << nrows << ", slots " << slots;
          if (blocks > 0) {
            ASSERT_GE(blocks * splits, std::min(slots, blocks * tiles)) << count;
          }
        }
      }
}

}  // namespace
}  // namespace flashot::test
