// The tensor-core sites' launch policy: the plans of the LSE and one-pass sums sites (plan_lse_mma), the screen's
// cut, and which kernels a site launches (launch_site) for the operands' mode and KS. The kernels themselves are in
// their family's header (lse_mma.cuh, sums_mma.cuh, lse_wg.cuh, sums_wg.cuh), compiled once per KS in
// engine/cuda/instances/ (mma_launch.cuh has the pattern; docs/engine.md, "Where the kernels live", the map).

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "error.hpp"
#include "mma.cuh"
#include "mma_launch.cuh"

namespace flashot::detail::cuda {
namespace {

/// Calls fn(std::integral_constant<int, KS>{}) for the run-time KS = padded d / 16 (1..8; 12 and 16, the wide
/// warpgroup kernels: tensor_padded_d).
template <typename Fn>
void dispatch_ks(int ks, Fn&& fn) {
  switch (ks) {
    case 1: fn(std::integral_constant<int, 1>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    case 3: fn(std::integral_constant<int, 3>{}); break;
    case 4: fn(std::integral_constant<int, 4>{}); break;
    case 5: fn(std::integral_constant<int, 5>{}); break;
    case 6: fn(std::integral_constant<int, 6>{}); break;
    case 7: fn(std::integral_constant<int, 7>{}); break;
    case 8: fn(std::integral_constant<int, 8>{}); break;
    case 12: fn(std::integral_constant<int, 12>{}); break;
    case 16: fn(std::integral_constant<int, 16>{}); break;
    default: throw std::logic_error("tensor-core path asked for padded d = " + std::to_string(16 * ks));
  }
}

/// Calls fn(std::integral_constant<int, TERMS>{}, std::bool_constant<BF16>{}) for the operands' mode.
template <typename Fn>
void dispatch_mode(MmaMode mode, Fn&& fn) {
  if (mode == MmaMode::kSplitFp16) {
    fn(std::integral_constant<int, 3>{}, std::false_type{});
  } else if (mode == MmaMode::kFp16) {
    fn(std::integral_constant<int, 1>{}, std::false_type{});
  } else {
    fn(std::integral_constant<int, 1>{}, std::true_type{});
  }
}

}  // namespace

// A warpgroup block's fixed cost in column tiles (plan_waves): its rows, two tiles in flight before its first
// product, the seeds, the partials.
constexpr int kWgOverheadTiles = 2;

ReductionPlan plan_lse_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& op, int resident_blocks,
                           int sms) {
  if (op.warpgroup) {
    // Two subtiles per warpgroup (wg_subtiles, the LSE and the sums kernels alike): blocks of half the threads,
    // two per SM, so twice the slots.
    const int ks = op.padded_d / 16;
    const int per_sm = ks >= 1 ? wg_blocks_per_sm(ks) : 1;
    return plan_waves(rows.count, cols.count, wg_block_rows(ks), kMmaTile, per_sm * sms, kWgOverheadTiles);
  }
  return plan_reduction(rows.count, cols.count, kMmaBlockRows, kMmaTile, resident_blocks);
}

namespace {

/// log2 units by which a hi·hi score may fall short of (or exceed) the split one: |Δ⟨x̃,ỹ⟩| ≤ 2^-10·Σ|x̃_k||ỹ_k|
/// (each half rounded to 11 bits) plus the subnormal halves' 2^-25 per coordinate, bounded with the largest norms
/// (Cauchy–Schwarz) and a factor of two to spare, times the score's factor α/(scale_x·scale_y).
float screen_margin(const MmaOperands& a, const MmaOperands& b, float alpha) {
  const double xa = double(a.scale) * a.max_norm, yb = double(b.scale) * b.max_norm;
  const double bound = std::ldexp(xa * yb, -9) + std::ldexp(std::sqrt(double(a.padded_d)) * (xa + yb + 1), -18);
  return static_cast<float>(std::abs(double(alpha)) * bound);
}

/// The kernels of one site whose operands have KS, TERMS, BF16 (Args: LseSiteArgs or SumsSiteArgs picks the
/// family). A screened site launches its screened kernel, then its dense one (ScreenState); otherwise the dense one
/// alone. Where the operands allow it (MmaOperands::warpgroup), the warpgroup kernels replace both (256 rows per
/// block, their own shared memory; `at.grid` then comes from their plan, plan_lse_mma), a screened site as one
/// launch of its site kernel (which runs either body). Only split operands are screened or run on warpgroups.
template <int KS, int TERMS, bool BF16, typename Args>
void launch_site(SiteLaunch at, bool warpgroup, const Args& args) {
  constexpr bool kLse = std::is_same_v<Args, LseSiteArgs>;
  if constexpr (TERMS == 3) {
    if (warpgroup) {  // the plan is the warpgroup kernels' (plan_lse_mma)
      if constexpr (kLse) {
        if (at.screen != nullptr) launch_lse_wg_kernel<KS, true>(at, args);
        else launch_lse_wg_kernel<KS, false>(at, args);
      } else {
        if (at.screen != nullptr) launch_sums_wg_kernel<KS, true>(at, args);
        else launch_sums_wg_kernel<KS, false>(at, args);
      }
      return;
    }
  }
  if constexpr (wg_wide(KS)) {
    // DeviceStep takes the fp32 kernels past d = 128 where the warpgroup kernels cannot serve.
    throw std::logic_error("tensor-core sites past padded d = 128 run split operands on warpgroups only");
  } else {
    if constexpr (TERMS != 3) {
      at.screen = nullptr;
    } else if (at.screen != nullptr) {
      if constexpr (kLse) launch_lse_mma_kernel<KS, 3, false, true>(at, args);
      else launch_sums_mma_kernel<KS, 3, false, true>(at, args);
    }
    if constexpr (kLse) launch_lse_mma_kernel<KS, TERMS, BF16, false>(at, args);
    else launch_sums_mma_kernel<KS, TERMS, BF16, false>(at, args);
  }
}

}  // namespace

void launch_lse_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
                    const float* h, const Scale& scale, const ReductionPlan& plan, float2* partials,
                    const int* guard, ScreenState* screen, int* seeds, cudaStream_t stream) {
  const float alpha = scale.alpha / (rop.scale * cop.scale);
  // A dropped tile's entries are each below 2^-reach of the row max: at most cols.count·2^-reach < 2^-26 of the sum.
  const float cut = 26.f + std::ceil(std::log2(float(std::max(cols.count, 1)))) + screen_margin(rop, cop, alpha);
  const SiteLaunch at{dim3(plan.row_blocks, plan.splits), stream, screen, cut};
  const LseSiteArgs args{rows, cols, rop, cop, h, scale, alpha, plan.cols_per_split, partials, guard, seeds};
  dispatch_mode(rop.mode, [&](auto terms, auto bf16) {
    dispatch_ks(rop.padded_d / 16, [&](auto ks) {
      launch_site<decltype(ks)::value, decltype(terms)::value, decltype(bf16)::value>(at, rop.warpgroup, args);
    });
  });
  FLASHOT_CUDA_CHECK_LAUNCH();
}

ReductionPlan plan_symmetric_mma(const PointSet& x, const PointSet& y, const MmaOperands& op, int resident_blocks,
                                 int sms) {
  return plan_lse_mma(x, y, op, resident_blocks, sms);
}

void launch_symmetric_sums_mma(const PointSet& x, const PointSet& y, const MmaOperands& xop, const MmaOperands& yop,
                               const float* f, const float* g, const Scale& scale, const ReductionPlan& plan,
                               float* rsum, float* csum, const SumsForecast* forecast, ScreenState* screen,
                               float sums_reach, float floor_log2, cudaStream_t stream) {
  const float alpha = scale.alpha / (xop.scale * yop.scale);
  // The finish kernel keeps sums down to 2^floor (floor_log2 ≤ 0); dropped entries are each below 2^-cut, at most m
  // of them per row sum and total weight 1 per column sum (≥ 2^floor·b_j): cut = 26 − floor + log2 max(m, 1/min b)
  // keeps them < 2^-26 of every sum.
  const float cut = 26.f - floor_log2 + sums_reach + screen_margin(xop, yop, alpha);
  const SiteLaunch at{dim3(plan.row_blocks, plan.splits), stream, screen, cut};
  const SumsSiteArgs args{x, y, xop, yop, f, g, scale, alpha, plan.cols_per_split, rsum, csum, forecast};
  dispatch_mode(xop.mode, [&](auto terms, auto bf16) {
    dispatch_ks(xop.padded_d / 16, [&](auto ks) {
      launch_site<decltype(ks)::value, decltype(terms)::value, decltype(bf16)::value>(at, xop.warpgroup, args);
    });
  });
  FLASHOT_CUDA_CHECK_LAUNCH();
}

BiasFactors bias_factors(float alpha, float largest) {
  BiasFactors out;
  if (!(alpha > 0) || !std::isfinite(alpha)) return out;
  const double rb = std::exp2(std::round(0.5 * std::log2(double(alpha))));
  out.rb = static_cast<float>(rb);
  out.ra = static_cast<float>(alpha / rb);
  const double biggest = double(largest) * std::max(double(out.ra), rb);
  out.fits = std::isfinite(out.ra) && out.ra > 0 && out.rb > 0 && biggest < 32768.0;
  return out;
}

ReductionPlan plan_symmetric_bias(const PointSet& x, const PointSet& y, int padded_d, int sms) {
  // Blocks of kWgBlockRows rows, as many per SM as the biased sums' subtiles (wg_bias_subtiles).
  return plan_waves(x.count, y.count, kWgBlockRows, kMmaTile, wg_bias_subtiles(padded_d / 16) * sms,
                    kWgOverheadTiles);
}

bool launch_symmetric_sums_bias(const PointSet& x, const PointSet& y, const MmaOperands& xop, const MmaOperands& yop,
                                const float* f, const float* vbias, const Scale& scale, const ReductionPlan& plan,
                                const BiasOperands& out, float* rsum, float* csum, const SumsForecast* forecast,
                                cudaStream_t stream) {
  // Every |coordinate| is below 256 / scale (operand_scale, the same on every shard).
  const BiasFactors factors = bias_factors(scale.alpha, 256.f / xop.scale);
  if (!factors.fits) return false;
  launch_bias_operands(x, f, y, vbias, scale, factors, forecast, out, stream);
  MmaOperands rop, cop;
  rop.hi = out.rows_hi, rop.lo = out.rows_lo, rop.padded_d = out.padded_d, rop.warpgroup = true;
  rop.subtile_overlap = xop.subtile_overlap;
  cop.tiles = out.tiles, cop.bias = vbias, cop.padded_d = out.padded_d, cop.warpgroup = true;
  const SiteLaunch at{dim3(plan.row_blocks, plan.splits), stream, nullptr, 0.f};
  const BiasSumsArgs args{x, y.count, rop, cop, plan.cols_per_split, rsum, csum, forecast};
  if (out.padded_d == 16) launch_sums_bias_wg_kernel<1>(at, args);
  else if (out.padded_d == 32) launch_sums_bias_wg_kernel<2>(at, args);
  else throw std::logic_error("biased sums asked for a padded width other than 16 or 32");
  FLASHOT_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace flashot::detail::cuda
