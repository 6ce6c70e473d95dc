// Register-resident fp32 score kernels for small d (docs/engine.md, "Where the kernels live"): each thread keeps R
// rows (coordinates pre-multiplied by α) in registers and walks a shared-memory tile of columns; all lanes read the
// same column (a broadcast), so rows never leave the thread. Two families: lse_small_kernel<D> (the two-pass
// online log-sum-exp) and sums_small_kernel<D> (the one-exponential symmetric step, symmetric.cu's header comment).
// D is the instantiated width (dispatch.hpp: kRegisterInstances); a problem of dimension d ≤ D reads its points
// with stride d and pads the coordinates past d with zeros, which leaves dot products and norms exact. D ≤ 4 keeps
// the original float4 layout (one float4 per column); wider D store ⌈D/4⌉ float4 chunks per column and keep fewer
// rows per thread past D = 8 (registers: xr is R × D floats). Compiled one D per file in instances/small_d*.cu.
#pragma once

#include <cmath>

#include "device_common.cuh"
#include "error.hpp"
#include "one_pass.hpp"

namespace flashot::detail::cuda {

inline constexpr int kSmallThreads = 128;
inline constexpr int kSmallTile = 256;
inline constexpr int kSumThreads = 128;
inline constexpr int kSumTile = 256;

/// Rows per thread of the register kernels at width D.
constexpr int small_rows(int D) { return D <= 8 ? 8 : 4; }
constexpr int small_block_rows(int D) { return kSmallThreads * small_rows(D); }

namespace small_d {

constexpr int kSmallRows = 8;  // D ≤ 4
constexpr int kSumRows = 8;    // D ≤ 4
constexpr int kSmallBlockRows = kSmallThreads * kSmallRows;
constexpr int kSumBlockRows = kSumThreads * kSumRows;
constexpr int kWarps = kSumThreads / 32;

/// One halving step of warp_transpose_sum: lanes with bit W set keep the upper half of v[0, 2W), the others the
/// lower half, and each adds its partner's copy. W is a template parameter so that every index is a constant
/// (a run-time trip count left the loop rolled and turned v into predicated moves).
template <int W>
__device__ __forceinline__ void transpose_step(float (&v)[32], bool upper) {
#pragma unroll
  for (int k = 0; k < W; ++k) {
    const float lo = v[k], hi = v[k + W];
    const float send = upper ? lo : hi;
    const float keep = upper ? hi : lo;
    v[k] = keep + __shfl_xor_sync(0xffffffffu, send, W);
  }
}

/// Sums 32 per-lane values per column across the warp: lane l ends with the total of column l. A halving
/// exchange (16 + 8 + 4 + 2 + 1 shuffles) instead of 32 full butterfly reductions.
__device__ __forceinline__ float warp_transpose_sum(float (&v)[32]) {
  const int lane = threadIdx.x % 32;
  transpose_step<16>(v, lane & 16);
  transpose_step<8>(v, lane & 8);
  transpose_step<4>(v, lane & 4);
  transpose_step<2>(v, lane & 2);
  transpose_step<1>(v, lane & 1);
  return v[0];
}

template <int D>
__global__ void __launch_bounds__(kSmallThreads) lse_small_kernel(PointSet rows, PointSet cols, const float* __restrict__ h,
                                                                  Scale sc, int cols_per_split,
                                                                  float2* __restrict__ partials, const int* guard) {
  if constexpr (D <= 4) {  // the original kernel, unchanged
    if (guard != nullptr && *guard == 0) return;
    if (rows.active != nullptr && int(blockIdx.x) * kSmallBlockRows >= *rows.active) return;
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

  } else {
    if (guard != nullptr && *guard == 0) return;
    constexpr int R = small_rows(D), C = (D + 3) / 4;
    if (rows.active != nullptr && int(blockIdx.x) * (kSmallThreads * R) >= *rows.active) return;
    __shared__ float4 tile[C][kSmallTile];  // (chunks, BN): coordinates 4c..4c+3 of each column, zero past d
    __shared__ float vtile[kSmallTile];     // (BN): column bias
    const int d = sc.d;                     // ≤ D: the points' stride
    const int i_base = blockIdx.x * (kSmallThreads * R) + threadIdx.x;
    float xr[R][D];
    float run_max[R], run_sum[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = i_base + r * kSmallThreads;
#pragma unroll
      for (int k = 0; k < D; ++k)
        xr[r][k] = i < rows.count && k < d ? sc.alpha * rows.points[std::size_t(i) * d + k] : 0.f;
      run_max[r] = kNoMax;
      run_sum[r] = 0.f;
    }
    const int j_begin = blockIdx.y * cols_per_split;
    const int j_end = min(cols.count, j_begin + cols_per_split);
    for (int t0 = j_begin; t0 < j_end; t0 += kSmallTile) {
      __syncthreads();
      for (int c = threadIdx.x; c < kSmallTile; c += kSmallThreads) {
        const int j = t0 + c;
        float q[4 * C];
#pragma unroll
        for (int k = 0; k < 4 * C; ++k) q[k] = 0.f;
        float v = -INFINITY;
        if (j < j_end) {
#pragma unroll
          for (int k = 0; k < D; ++k)
            if (k < d) q[k] = cols.points[std::size_t(j) * d + k];
          v = column_bias(cols, h, sc, j);
        }
#pragma unroll
        for (int ch = 0; ch < C; ++ch) tile[ch][c] = make_float4(q[4 * ch], q[4 * ch + 1], q[4 * ch + 2], q[4 * ch + 3]);
        vtile[c] = v;
      }
      __syncthreads();
      const int ncols = min(kSmallTile, j_end - t0);
      for (int c0 = 0; c0 < ncols; c0 += 8) {
        float s[R][8];  // (R, 8) scores
#pragma unroll
        for (int cc = 0; cc < 8; ++cc) {
          float q[4 * C];
#pragma unroll
          for (int ch = 0; ch < C; ++ch) {
            const float4 t = tile[ch][c0 + cc];
            q[4 * ch] = t.x, q[4 * ch + 1] = t.y, q[4 * ch + 2] = t.z, q[4 * ch + 3] = t.w;
          }
          const float v = vtile[c0 + cc];
#pragma unroll
          for (int r = 0; r < R; ++r) {
            float t = v;
#pragma unroll
            for (int k = 0; k < D; ++k) t = fmaf(xr[r][k], q[k], t);
            s[r][cc] = t;
          }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
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
    for (int r = 0; r < R; ++r) {
      const int i = i_base + r * kSmallThreads;
      if (i < rows.count) partials[std::size_t(blockIdx.y) * rows.count + i] = make_float2(run_max[r], run_sum[r]);
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kSumThreads) sums_small_kernel(PointSet x, PointSet y, const float* __restrict__ f,
                                                                 const float* __restrict__ g, Scale sc,
                                                                 int cols_per_split, float* __restrict__ rsum,
                                                                 float* __restrict__ csum,
                                                                 const SumsForecast* forecast) {
  if constexpr (D <= 4) {  // the original kernel, unchanged
    const SumsStep step = forecast != nullptr ? sums_step(*forecast) : SumsStep{};
    if (step.skip != 0) return;
    const float shift = step.shift;
    __shared__ float4 tile[kSumTile];           // (BN): (y0, y1, y2, v) for D ≤ 3, (y0..y3) for D = 4
    __shared__ float vtile[kSumTile];           // (BN): v for D = 4
    __shared__ float colbuf[kWarps][kSumTile];  // (warps, BN): per-warp column sums
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int i_base = blockIdx.x * kSumBlockRows + threadIdx.x;
    float xr[kSumRows][D], u[kSumRows], ar[kSumRows], rs[kSumRows];
  #pragma unroll
    for (int r = 0; r < kSumRows; ++r) {
      const int i = i_base + r * kSumThreads;
      const bool valid = i < x.count;
  #pragma unroll
      for (int k = 0; k < D; ++k) xr[r][k] = valid ? sc.alpha * x.points[std::size_t(i) * D + k] : 0.f;
      u[r] = valid ? sc.c1 * (f[i] - sc.s * x.norm2[i]) + shift : -INFINITY;
      ar[r] = valid ? x.weight[i] : 0.f;
      rs[r] = 0.f;
    }
    const int j_begin = blockIdx.y * cols_per_split;
    const int j_end = min(y.count, j_begin + cols_per_split);
    const int tiles = (j_end - j_begin + kSumTile - 1) / kSumTile;
    for (int t = 0; t < tiles; ++t) {
      // Blocks of one split start at different tiles so that their column atomics do not all hit one address range.
      const int t0 = j_begin + ((t + blockIdx.x) % tiles) * kSumTile;
      __syncthreads();
      for (int c = threadIdx.x; c < kSumTile; c += kSumThreads) {
        const int j = t0 + c;
        float q[4] = {0.f, 0.f, 0.f, 0.f};
        float v = -INFINITY;
        if (j < j_end) {
  #pragma unroll
          for (int k = 0; k < D; ++k) q[k] = y.points[std::size_t(j) * D + k];
          v = column_bias(y, g, sc, j);
        }
        if constexpr (D <= 3) {
          tile[c] = make_float4(q[0], q[1], q[2], v);
        } else {
          tile[c] = make_float4(q[0], q[1], q[2], q[3]);
          vtile[c] = v;
        }
      }
      __syncthreads();
      const int ncols = min(kSumTile, j_end - t0);
      for (int c0 = 0; c0 < ncols; c0 += 32) {
        float cp[32];  // (32 columns) this thread's Σ_r a_r E_rc
  #pragma unroll
        for (int cc = 0; cc < 32; ++cc) {
          const float4 q = tile[c0 + cc];
          const float v = D <= 3 ? q.w : vtile[c0 + cc];
          float col = 0.f;
  #pragma unroll
          for (int r = 0; r < kSumRows; ++r) {
            float t = v + u[r];
            t = fmaf(xr[r][0], q.x, t);
            if constexpr (D > 1) t = fmaf(xr[r][1], q.y, t);
            if constexpr (D > 2) t = fmaf(xr[r][2], q.z, t);
            if constexpr (D > 3) t = fmaf(xr[r][3], q.w, t);
            const float e = fast_exp2(t);
            rs[r] += e;
            col = fmaf(ar[r], e, col);
          }
          cp[cc] = col;
        }
        colbuf[warp][c0 + lane] = warp_transpose_sum(cp);
      }
      __syncthreads();
      for (int c = threadIdx.x; c < ncols; c += kSumThreads) {
        float total = 0.f;
  #pragma unroll
        for (int w = 0; w < kWarps; ++w) total += colbuf[w][c];
        if (total != 0.f) atomicAdd(&csum[t0 + c], total);
      }
    }
  #pragma unroll
    for (int r = 0; r < kSumRows; ++r) {
      const int i = i_base + r * kSumThreads;
      if (i < x.count) atomicAdd(&rsum[i], rs[r]);
    }

  } else {
    const SumsStep step = forecast != nullptr ? sums_step(*forecast) : SumsStep{};
    if (step.skip != 0) return;
    const float shift = step.shift;
    constexpr int R = small_rows(D), C = (D + 3) / 4;
    __shared__ float4 tile[C][kSumTile];        // (chunks, BN): coordinates, zero past d
    __shared__ float vtile[kSumTile];           // (BN): column bias
    __shared__ float colbuf[kWarps][kSumTile];  // (warps, BN): per-warp column sums
    const int d = sc.d;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int i_base = blockIdx.x * (kSumThreads * R) + threadIdx.x;
    float xr[R][D], u[R], ar[R], rs[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = i_base + r * kSumThreads;
      const bool valid = i < x.count;
#pragma unroll
      for (int k = 0; k < D; ++k) xr[r][k] = valid && k < d ? sc.alpha * x.points[std::size_t(i) * d + k] : 0.f;
      u[r] = valid ? sc.c1 * (f[i] - sc.s * x.norm2[i]) + shift : -INFINITY;
      ar[r] = valid ? x.weight[i] : 0.f;
      rs[r] = 0.f;
    }
    const int j_begin = blockIdx.y * cols_per_split;
    const int j_end = min(y.count, j_begin + cols_per_split);
    const int tiles = (j_end - j_begin + kSumTile - 1) / kSumTile;
    for (int t = 0; t < tiles; ++t) {
      const int t0 = j_begin + ((t + blockIdx.x) % tiles) * kSumTile;
      __syncthreads();
      for (int c = threadIdx.x; c < kSumTile; c += kSumThreads) {
        const int j = t0 + c;
        float q[4 * C];
#pragma unroll
        for (int k = 0; k < 4 * C; ++k) q[k] = 0.f;
        float v = -INFINITY;
        if (j < j_end) {
#pragma unroll
          for (int k = 0; k < D; ++k)
            if (k < d) q[k] = y.points[std::size_t(j) * d + k];
          v = column_bias(y, g, sc, j);
        }
#pragma unroll
        for (int ch = 0; ch < C; ++ch) tile[ch][c] = make_float4(q[4 * ch], q[4 * ch + 1], q[4 * ch + 2], q[4 * ch + 3]);
        vtile[c] = v;
      }
      __syncthreads();
      const int ncols = min(kSumTile, j_end - t0);
      for (int c0 = 0; c0 < ncols; c0 += 32) {
        float cp[32];  // (32 columns) this thread's Σ_r a_r E_rc
#pragma unroll
        for (int cc = 0; cc < 32; ++cc) {
          float q[4 * C];
#pragma unroll
          for (int ch = 0; ch < C; ++ch) {
            const float4 tq = tile[ch][c0 + cc];
            q[4 * ch] = tq.x, q[4 * ch + 1] = tq.y, q[4 * ch + 2] = tq.z, q[4 * ch + 3] = tq.w;
          }
          const float v = vtile[c0 + cc];
          float col = 0.f;
#pragma unroll
          for (int r = 0; r < R; ++r) {
            float t = v + u[r];
#pragma unroll
            for (int k = 0; k < D; ++k) t = fmaf(xr[r][k], q[k], t);
            const float e = fast_exp2(t);
            rs[r] += e;
            col = fmaf(ar[r], e, col);
          }
          cp[cc] = col;
        }
        colbuf[warp][c0 + lane] = warp_transpose_sum(cp);
      }
      __syncthreads();
      for (int c = threadIdx.x; c < ncols; c += kSumThreads) {
        float total = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) total += colbuf[w][c];
        if (total != 0.f) atomicAdd(&csum[t0 + c], total);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = i_base + r * kSumThreads;
      if (i < x.count) atomicAdd(&rsum[i], rs[r]);
    }
  }
}

}  // namespace small_d

/// Launchers of one instantiated width D (instances/small_d<D>.cu).
template <int D>
void launch_lse_small(const PointSet& rows, const PointSet& cols, const float* h, const Scale& sc,
                      const ReductionPlan& plan, float2* partials, const int* guard, cudaStream_t stream);
template <int D>
void launch_sums_small(const PointSet& x, const PointSet& y, const float* f, const float* g, const Scale& sc,
                       const ReductionPlan& plan, float* rsum, float* csum, const SumsForecast* forecast,
                       cudaStream_t stream);
/// Blocks of sums_small_kernel<D> resident per SM (0 when the query fails).
template <int D>
int sums_small_blocks_per_sm();

#define FLASHOT_SMALL_D_INSTANCE(D)                                                                                 \
  template <>                                                                                                       \
  void launch_lse_small<D>(const PointSet& rows, const PointSet& cols, const float* h, const Scale& sc,             \
                           const ReductionPlan& plan, float2* partials, const int* guard, cudaStream_t stream) {    \
    small_d::lse_small_kernel<D><<<dim3(plan.row_blocks, plan.splits), kSmallThreads, 0, stream>>>(                 \
        rows, cols, h, sc, plan.cols_per_split, partials, guard);                                                   \
    FLASHOT_CUDA_CHECK_LAUNCH();                                                                                    \
  }                                                                                                                 \
  template <>                                                                                                       \
  void launch_sums_small<D>(const PointSet& x, const PointSet& y, const float* f, const float* g, const Scale& sc,  \
                            const ReductionPlan& plan, float* rsum, float* csum, const SumsForecast* forecast,      \
                            cudaStream_t stream) {                                                                  \
    small_d::sums_small_kernel<D><<<dim3(plan.row_blocks, plan.splits), kSumThreads, 0, stream>>>(                  \
        x, y, f, g, sc, plan.cols_per_split, rsum, csum, forecast);                                                 \
    FLASHOT_CUDA_CHECK_LAUNCH();                                                                                    \
  }                                                                                                                 \
  template <>                                                                                                       \
  int sums_small_blocks_per_sm<D>() {                                                                               \
    int per_sm = 0;                                                                                                 \
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, small_d::sums_small_kernel<D>, kSumThreads, 0) !=    \
        cudaSuccess) {                                                                                              \
      (void)cudaGetLastError();                                                                                     \
      return 0;                                                                                                     \
    }                                                                                                               \
    return per_sm;                                                                                                  \
  }

}  // namespace flashot::detail::cuda
