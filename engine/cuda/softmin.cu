// Log-sum-exp reductions over the other side (the soft c-transform, docs/design.md §1) with online max in exp2, and
// the finalize step that merges the column splits and updates the potentials.

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "device_common.cuh"
#include "dispatch.hpp"
#include "error.hpp"
#include "small_d.cuh"

namespace flashot::detail::cuda {

Scale Scale::make(double epsilon, double cost_scale, int d) {
  Scale sc;
  sc.alpha = static_cast<float>(2.0 * cost_scale * 1.4426950408889634 / epsilon);
  sc.c1 = static_cast<float>(1.4426950408889634 / epsilon);
  sc.s = static_cast<float>(cost_scale);
  sc.epsilon = static_cast<float>(epsilon);
  sc.d = d;
  return sc;
}

int fp32_width(const PointSet& rows, int d) {
  if (rows.fp32_kernel >= 0) return rows.fp32_kernel;
  return default_fp32_width(d);
}

namespace {

// ---- kTiled: any d. --------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(kTileThreads) lse_tiled_kernel(PointSet rows, PointSet cols, const float* __restrict__ h,
                                                                 Scale sc, int cols_per_split,
                                                                 float2* __restrict__ partials, const int* guard) {
  if (guard != nullptr && *guard == 0) return;
  const int i0 = blockIdx.x * kTileRows;
  if (rows.active != nullptr && i0 >= *rows.active) return;
  __shared__ TileStage<> st;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(cols.count, j_begin + cols_per_split);
  float run_max[4], run_sum[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) run_max[r] = kNoMax, run_sum[r] = 0.f;
  for (int j0 = j_begin; j0 < j_end; j0 += kTileCols) {
    float acc[4][4];  // (TM, TN) dot products
    tile_dots(rows.points, rows.count, i0, cols.points, j_end, j0, sc.d, st, acc);
    float v[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = j0 + tx + 16 * c;
      v[c] = j < j_end ? column_bias(cols, h, sc, j) : -INFINITY;
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      float s[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) s[c] = fmaf(sc.alpha, acc[r][c], v[c]);
      const float top = fmaxf(fmaxf(s[0], s[1]), fmaxf(s[2], s[3]));
      if (top > run_max[r]) {
        run_sum[r] *= fast_exp2(run_max[r] - top);
        run_max[r] = top;
      }
#pragma unroll
      for (int c = 0; c < 4; ++c) run_sum[r] += fast_exp2(s[c] - run_max[r]);
    }
  }
  // The 16 threads of a half-warp share rows: merge their (max, sum) pairs.
#pragma unroll
  for (int r = 0; r < 4; ++r) {
#pragma unroll
    for (int offset = 1; offset < 16; offset <<= 1) {
      const float om = __shfl_xor_sync(0xffffffffu, run_max[r], offset);
      const float os = __shfl_xor_sync(0xffffffffu, run_sum[r], offset);
      merge_lse(run_max[r], run_sum[r], om, os);
    }
    const int i = i0 + ty + 16 * r;
    if (tx == 0 && i < rows.count)
      partials[std::size_t(blockIdx.y) * rows.count + i] = make_float2(run_max[r], run_sum[r]);
  }
}

// ---- finalize --------------------------------------------------------------------------------------------------
/// G lanes per row (1, or 32 when a side has many splits: a row's partials are then read by a whole warp in
/// parallel instead of one after another, which at 157 splits took 64 µs).
template <int G>
__global__ void finalize_kernel(Finalize mode, FinalizeSide a, FinalizeSide b, float epsilon_ln2, float s,
                                const int* flag, int* nonfinite, SumsForecast* forecast, const int* screened,
                                float floor_log2) {
  const int rows_per_block = int(blockDim.x) / G;
  const int blocks_a = (a.count + rows_per_block - 1) / rows_per_block;
  const bool on_a = int(blockIdx.x) < blocks_a;
  const FinalizeSide side = on_a ? a : b;
  const int i = (on_a ? blockIdx.x : blockIdx.x - blocks_a) * rows_per_block + int(threadIdx.x) / G;
  const int lane = int(threadIdx.x) % G;
  float lo = INFINITY, hi = -INFINITY;  // this thread's predicted next log2 sum (forecast)
  if (i < side.count) {                 // the G lanes of a row agree
    const bool use_tmp = mode == Finalize::kCommit && *flag == 0;
    float result, transform = 0.f;  // transform: the soft c-transform of a redone step (for the forecast)
    if (use_tmp) {
      result = relax_blend(side.out[i], side.tmp[i], 0.5f * side.omega);
    } else {
      float m = kNoMax, sum = 0.f;
      for (int k = lane; k < side.splits; k += G) {
        const float2 p = side.partials[std::size_t(k) * side.count + i];
        merge_lse<true>(m, sum, p.x, p.y);
      }
#pragma unroll
      for (int offset = G / 2; offset > 0; offset /= 2) {
        const float om = __shfl_xor_sync(0xffffffffu, m, offset), os = __shfl_xor_sync(0xffffffffu, sum, offset);
        merge_lse<true>(m, sum, om, os);
      }
      const float lse2 = m + log2f(sum);
      const float softmin = s * side.norm2[i] - epsilon_ln2 * lse2;
      switch (mode) {
        case Finalize::kLse2: result = lse2; break;
        case Finalize::kSoftmin: result = softmin; break;
        case Finalize::kAlternating: result = relax_blend(side.out[i], side.lambda * softmin, side.omega); break;
        default: result = relax_blend(side.out[i], side.lambda * softmin, 0.5f * side.omega); break;
      }
      transform = softmin;
    }
    if (lane == 0) {
      side.out[i] = result;
      if (!isfinite(result)) *nonfinite = 1;
      if (side.bias != nullptr) side.bias[i] = side.c1 * (result - s * side.norm2[i]) + kLog2e * side.logw[i];
      predicted_log2_sum((result - transform) / epsilon_ln2, lo, hi);  // to first order (launch_finalize)
    }
  }
  // A redone one-pass step (kCommit with *flag): the next step goes by this forecast (a step that stands goes by
  // the finish kernel's).
  if (forecast != nullptr && *flag != 0) {
    if (blockIdx.x == 0 && threadIdx.x == 0) forecast->fell_back = 1;
    add_forecast(lo, hi, forecast->fallback, forecast->floor, low_floor_applies(screened) ? floor_log2 : kSumsMinLog2);
  }
}

}  // namespace

ReductionPlan plan_lse(const PointSet& rows, const PointSet& cols, int d, int resident_blocks) {
  if (const int width = fp32_width(rows, d); width > 0) {
    return plan_reduction(rows.count, cols.count, small_block_rows(width), kSmallTile, resident_blocks);
  }
  return plan_reduction(rows.count, cols.count, kTileRows, kTileCols, resident_blocks);
}

void launch_lse(const PointSet& rows, const PointSet& cols, const float* h, const Scale& scale, const ReductionPlan& plan,
                float2* partials, const int* guard, cudaStream_t stream) {
  const dim3 grid(plan.row_blocks, plan.splits);
  if (const int width = fp32_width(rows, scale.d); width > 0) {
    switch (width) {
      case 1: launch_lse_small<1>(rows, cols, h, scale, plan, partials, guard, stream); break;
      case 2: launch_lse_small<2>(rows, cols, h, scale, plan, partials, guard, stream); break;
      case 3: launch_lse_small<3>(rows, cols, h, scale, plan, partials, guard, stream); break;
      case 4: launch_lse_small<4>(rows, cols, h, scale, plan, partials, guard, stream); break;
      case 5: launch_lse_small<5>(rows, cols, h, scale, plan, partials, guard, stream); break;
      case 6: launch_lse_small<6>(rows, cols, h, scale, plan, partials, guard, stream); break;
      case 7: launch_lse_small<7>(rows, cols, h, scale, plan, partials, guard, stream); break;
      case 8: launch_lse_small<8>(rows, cols, h, scale, plan, partials, guard, stream); break;
      case 12: launch_lse_small<12>(rows, cols, h, scale, plan, partials, guard, stream); break;
      case 16: launch_lse_small<16>(rows, cols, h, scale, plan, partials, guard, stream); break;
      default: throw std::logic_error("no register kernel of width " + std::to_string(width));
    }
    return;
  } else {
    lse_tiled_kernel<<<grid, kTileThreads, 0, stream>>>(rows, cols, h, scale, plan.cols_per_split, partials, guard);
  }
  FLASHOT_CUDA_CHECK_LAUNCH();
}

/// A side with this many split partials per row or more is finalized by a warp per row.
constexpr int kWarpFinalizeSplits = 16;

void launch_finalize(Finalize mode, const FinalizeSide& a, const FinalizeSide& b, double epsilon, float s,
                     const int* flag, int* nonfinite, cudaStream_t stream, SumsForecast* forecast,
                     const int* screened, float floor_log2) {
  constexpr int kThreads = 256;
  const float epsilon_ln2 = static_cast<float>(epsilon * 0.6931471805599453);
  if (mode != Finalize::kCommit) forecast = nullptr;
  if (std::max(a.splits, b.splits) >= kWarpFinalizeSplits) {  // a warp per row
    constexpr int kRows = kThreads / 32;
    const int blocks = div_up(a.count, kRows) + div_up(b.count, kRows);
    if (blocks == 0) return;
    finalize_kernel<32><<<blocks, kThreads, 0, stream>>>(mode, a, b, epsilon_ln2, s, flag, nonfinite, forecast,
                                                         screened, floor_log2);
  } else {
    const int blocks = div_up(a.count, kThreads) + div_up(b.count, kThreads);
    if (blocks == 0) return;
    finalize_kernel<1><<<blocks, kThreads, 0, stream>>>(mode, a, b, epsilon_ln2, s, flag, nonfinite, forecast,
                                                        screened, floor_log2);
  }
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace flashot::detail::cuda
