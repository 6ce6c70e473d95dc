// Log-sum-exp reductions over the other side (the soft c-transform, docs/design.md §1) with online max in exp2, and
// the finalize step that merges the column splits and updates the potentials.

#include <algorithm>
#include <cmath>

#include "device_common.cuh"
#include "error.hpp"

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

Path choose_path(int d) { return d <= 4 ? Path::kSmallD : Path::kTiled; }

namespace {

// ---- kSmallD: each thread keeps kSmallRows rows (coordinates pre-multiplied by α) in registers and walks a
// shared-memory tile of columns; all lanes read the same column (a broadcast), so rows never leave the thread.
constexpr int kSmallThreads = 128;
constexpr int kSmallRows = 8;
constexpr int kSmallTile = 256;
constexpr int kSmallBlockRows = kSmallThreads * kSmallRows;

template <int D>
__global__ void __launch_bounds__(kSmallThreads) lse_small_kernel(PointSet rows, PointSet cols, const float* __restrict__ h,
                                                                  Scale sc, int cols_per_split,
                                                                  float2* __restrict__ partials, const int* guard) {
  if (guard != nullptr && *guard == 0) return;
  __shared__ float4 tile[kSmallTile];  // (BN): (q0, q1, q2, v) for D ≤ 3, (q0..q3) for D = 4
  __shared__ float vtile[kSmallTile];  // (BN): v for D = 4
  const int i_base = blockIdx.x * kSmallBlockRows + threadIdx.x;
  float xr[kSmallRows][D];
  float run_max[kSmallRows], run_sum[kSmallRows];
#pragma unroll
  for (int r = 0; r < kSmallRows; ++r) {
    const int i = i_base + r * kSmallThreads;
#pragma unroll
    for (int k = 0; k < D; ++k) xr[r][k] = i < rows.count ? sc.alpha * rows.points[std::size_t(i) * D + k] : 0.f;
    run_max[r] = kNoMax;
    run_sum[r] = 0.f;
  }
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(cols.count, j_begin + cols_per_split);
  for (int t0 = j_begin; t0 < j_end; t0 += kSmallTile) {
    __syncthreads();
    for (int c = threadIdx.x; c < kSmallTile; c += kSmallThreads) {
      const int j = t0 + c;
      float q[4] = {0.f, 0.f, 0.f, 0.f};
      float v = -INFINITY;
      if (j < j_end) {
#pragma unroll
        for (int k = 0; k < D; ++k) q[k] = cols.points[std::size_t(j) * D + k];
        v = column_bias(cols, h, sc, j);
      }
      if constexpr (D <= 3) {
        tile[c] = make_float4(q[0], q[1], q[2], v);
      } else {
        tile[c] = make_float4(q[0], q[1], q[2], q[3]);
        vtile[c] = v;
      }
    }
    __syncthreads();
    const int ncols = min(kSmallTile, j_end - t0);
    for (int c0 = 0; c0 < ncols; c0 += 8) {
      float s[kSmallRows][8];  // (TM, 8) scores
#pragma unroll
      for (int cc = 0; cc < 8; ++cc) {
        const float4 q = tile[c0 + cc];
        const float v = D <= 3 ? q.w : vtile[c0 + cc];
#pragma unroll
        for (int r = 0; r < kSmallRows; ++r) {
          float t = v;
          t = fmaf(xr[r][0], q.x, t);
          if constexpr (D > 1) t = fmaf(xr[r][1], q.y, t);
          if constexpr (D > 2) t = fmaf(xr[r][2], q.z, t);
          if constexpr (D > 3) t = fmaf(xr[r][3], q.w, t);
          s[r][cc] = t;
        }
      }
#pragma unroll
      for (int r = 0; r < kSmallRows; ++r) {
        float top = s[r][0];
#pragma unroll
        for (int cc = 1; cc < 8; ++cc) top = fmaxf(top, s[r][cc]);
        if (top > run_max[r]) {
          run_sum[r] *= fast_exp2(run_max[r] - top);
          run_max[r] = top;
        }
        float sum = 0.f;
#pragma unroll
        for (int cc = 0; cc < 8; ++cc) sum += fast_exp2(s[r][cc] - run_max[r]);
        run_sum[r] += sum;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kSmallRows; ++r) {
    const int i = i_base + r * kSmallThreads;
    if (i < rows.count) partials[std::size_t(blockIdx.y) * rows.count + i] = make_float2(run_max[r], run_sum[r]);
  }
}

// ---- kTiled: any d. --------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(kTileThreads) lse_tiled_kernel(PointSet rows, PointSet cols, const float* __restrict__ h,
                                                                 Scale sc, int cols_per_split,
                                                                 float2* __restrict__ partials, const int* guard) {
  if (guard != nullptr && *guard == 0) return;
  __shared__ TileStage<> st;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int i0 = blockIdx.x * kTileRows;
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
      result = 0.5f * (side.out[i] + side.tmp[i]);
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
        case Finalize::kAlternating: result = side.lambda * softmin; break;
        default: result = 0.5f * (side.out[i] + side.lambda * softmin); break;
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
  if (choose_path(d) == Path::kSmallD) {
    return plan_reduction(rows.count, cols.count, kSmallBlockRows, kSmallTile, resident_blocks);
  }
  return plan_reduction(rows.count, cols.count, kTileRows, kTileCols, resident_blocks);
}

void launch_lse(const PointSet& rows, const PointSet& cols, const float* h, const Scale& scale, const ReductionPlan& plan,
                float2* partials, const int* guard, cudaStream_t stream) {
  const dim3 grid(plan.row_blocks, plan.splits);
  if (choose_path(scale.d) == Path::kSmallD) {
    switch (scale.d) {
      case 1: lse_small_kernel<1><<<grid, kSmallThreads, 0, stream>>>(rows, cols, h, scale, plan.cols_per_split, partials, guard); break;
      case 2: lse_small_kernel<2><<<grid, kSmallThreads, 0, stream>>>(rows, cols, h, scale, plan.cols_per_split, partials, guard); break;
      case 3: lse_small_kernel<3><<<grid, kSmallThreads, 0, stream>>>(rows, cols, h, scale, plan.cols_per_split, partials, guard); break;
      default: lse_small_kernel<4><<<grid, kSmallThreads, 0, stream>>>(rows, cols, h, scale, plan.cols_per_split, partials, guard); break;
    }
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
