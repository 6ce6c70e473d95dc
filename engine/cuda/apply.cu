// Streaming plan application: out = P·V (or Pᵀ·V with the sides swapped), V with k columns cut into chunks of
// kApplyChunk, never forming P. The weights are exp2(score − lse2_i) with the row's log-normaliser computed first
// (launch_lse + kLse2), so every weight is in [0, 1] and nothing overflows whatever the potentials; the row's mass
// is put back in launch_apply_scale.

#include <cmath>

#include "device_common.cuh"
#include "error.hpp"

namespace flashot::detail::cuda {
namespace {

static_assert(kApplyChunk == kTileCols, "one 64-wide chunk of V per block");

__global__ void __launch_bounds__(kTileThreads) apply_kernel(PointSet rows, PointSet cols, const float* __restrict__ h,
                                                             Scale sc, const float* __restrict__ lse2,
                                                             const float* __restrict__ v, int k, int cols_per_split,
                                                             float* __restrict__ out, float* __restrict__ wsum) {
  __shared__ TileStage<> st;
  __shared__ float w[kTileRows][kTileCols + 4];     // (BM, BN) plan weights of the tile
  __shared__ float vals[kTileCols][kApplyChunk + 4];  // (BN, KC) the tile's rows of V
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int i0 = blockIdx.x * kTileRows;
  const int kc0 = blockIdx.z * kApplyChunk;
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(cols.count, j_begin + cols_per_split);
  float shift[4], total[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = i0 + ty + 16 * r;
    shift[r] = i < rows.count ? lse2[i] : INFINITY;
    total[r] = 0.f;
  }
  float result[4][4] = {};  // (TM, 4 of the chunk's columns)
  for (int j0 = j_begin; j0 < j_end; j0 += kTileCols) {
    float acc[4][4];
    tile_dots(rows.points, rows.count, i0, cols.points, j_end, j0, sc.d, st, acc);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = j0 + tx + 16 * c;
      const float bias = j < j_end ? column_bias(cols, h, sc, j) : -INFINITY;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float e = fast_exp2(fmaf(sc.alpha, acc[r][c], bias) - shift[r]);
        w[ty + 16 * r][tx + 16 * c] = e;
        total[r] += e;
      }
    }
    for (int e = threadIdx.x; e < kTileCols * kApplyChunk; e += kTileThreads) {
      const int jj = e / kApplyChunk, cc = e % kApplyChunk, j = j0 + jj, col = kc0 + cc;
      vals[jj][cc] = (j < j_end && col < k) ? v[std::size_t(j) * k + col] : 0.f;
    }
    __syncthreads();
#pragma unroll 4
    for (int jj = 0; jj < kTileCols; ++jj) {
      float b[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) b[c] = vals[jj][tx + 16 * c];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float a = w[ty + 16 * r][jj];
#pragma unroll
        for (int c = 0; c < 4; ++c) result[r][c] = fmaf(a, b[c], result[r][c]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = i0 + ty + 16 * r;
    if (i >= rows.count) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int col = kc0 + tx + 16 * c;
      if (col < k) atomicAdd(&out[std::size_t(i) * k + col], result[r][c]);
    }
  }
  if (blockIdx.z == 0) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      float t = total[r];
#pragma unroll
      for (int offset = 1; offset < 16; offset <<= 1) t += __shfl_xor_sync(0xffffffffu, t, offset);
      const int i = i0 + ty + 16 * r;
      if (tx == 0 && i < rows.count) atomicAdd(&wsum[i], t);
    }
  }
}

/// k ≤ KC ≤ 16: each thread multiplies its 4×4 weights by the V rows of its 4 columns in registers (no shared
/// staging of the weights); the 16 threads sharing rows merge their partial rows once at the end.
template <int KC, int DK>
__global__ void __launch_bounds__(kTileThreads) apply_narrow_kernel(PointSet rows, PointSet cols,
                                                                    const float* __restrict__ h, Scale sc,
                                                                    const float* __restrict__ lse2,
                                                                    const float* __restrict__ v, int k,
                                                                    int cols_per_split, float* __restrict__ out,
                                                                    float* __restrict__ wsum) {
  __shared__ TileStage<DK> st;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int i0 = blockIdx.x * kTileRows;
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(cols.count, j_begin + cols_per_split);
  float shift[4], total[4], result[4][KC];  // (TM, KC)
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = i0 + ty + 16 * r;
    shift[r] = i < rows.count ? lse2[i] : INFINITY;
    total[r] = 0.f;
#pragma unroll
    for (int c = 0; c < KC; ++c) result[r][c] = 0.f;
  }
  for (int j0 = j_begin; j0 < j_end; j0 += kTileCols) {
    float acc[4][4];
    tile_dots<DK>(rows.points, rows.count, i0, cols.points, j_end, j0, sc.d, st, acc);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = j0 + tx + 16 * c;
      if (j >= j_end) continue;
      const float bias = column_bias(cols, h, sc, j);
      float vj[KC];
#pragma unroll
      for (int q = 0; q < KC; ++q) vj[q] = q < k ? v[std::size_t(j) * k + q] : 0.f;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float e = fast_exp2(fmaf(sc.alpha, acc[r][c], bias) - shift[r]);
        total[r] += e;
#pragma unroll
        for (int q = 0; q < KC; ++q) result[r][q] = fmaf(e, vj[q], result[r][q]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = i0 + ty + 16 * r;
#pragma unroll
    for (int offset = 1; offset < 16; offset <<= 1) {
      total[r] += __shfl_xor_sync(0xffffffffu, total[r], offset);
#pragma unroll
      for (int q = 0; q < KC; ++q) result[r][q] += __shfl_xor_sync(0xffffffffu, result[r][q], offset);
    }
    if (tx != 0 || i >= rows.count) continue;
    atomicAdd(&wsum[i], total[r]);
#pragma unroll
    for (int q = 0; q < KC; ++q)
      if (q < k) atomicAdd(&out[std::size_t(i) * k + q], result[r][q]);
  }
}

// ---- d ≤ 4, k ≤ 8: coordinates and the k running sums of kApplySmallRows rows per thread in registers, the
// column tile (points, biases and V rows) broadcast from shared memory: no dot-product tile, no weight staging.
constexpr int kApplySmallThreads = 128;
constexpr int kApplySmallRows = 4;
constexpr int kApplySmallTile = 128;
constexpr int kApplySmallBlockRows = kApplySmallThreads * kApplySmallRows;

template <int D, int K>
__global__ void __launch_bounds__(kApplySmallThreads) apply_small_kernel(PointSet rows, PointSet cols,
                                                                         const float* __restrict__ h, Scale sc,
                                                                         const float* __restrict__ lse2,
                                                                         const float* __restrict__ v,
                                                                         int cols_per_split, float* __restrict__ out,
                                                                         float* __restrict__ wsum) {
  __shared__ float4 tile[kApplySmallTile];        // (BN): (q0, q1, q2, bias) for D ≤ 3, (q0..q3) for D = 4
  __shared__ float btile[kApplySmallTile];        // (BN): bias for D = 4
  __shared__ float vtile[kApplySmallTile][K];     // (BN, K): the tile's rows of V
  const int i_base = blockIdx.x * kApplySmallBlockRows + threadIdx.x;
  float xr[kApplySmallRows][D], shift[kApplySmallRows], total[kApplySmallRows], acc[kApplySmallRows][K];
#pragma unroll
  for (int r = 0; r < kApplySmallRows; ++r) {
    const int i = i_base + r * kApplySmallThreads;
    const bool valid = i < rows.count;
#pragma unroll
    for (int q = 0; q < D; ++q) xr[r][q] = valid ? rows.points[std::size_t(i) * D + q] : 0.f;
    shift[r] = valid ? lse2[i] : INFINITY;
    total[r] = 0.f;
#pragma unroll
    for (int q = 0; q < K; ++q) acc[r][q] = 0.f;
  }
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(cols.count, j_begin + cols_per_split);
  for (int t0 = j_begin; t0 < j_end; t0 += kApplySmallTile) {
    __syncthreads();
    for (int c = threadIdx.x; c < kApplySmallTile; c += kApplySmallThreads) {
      const int j = t0 + c;
      float q[4] = {0.f, 0.f, 0.f, 0.f};
      float bias = -INFINITY;
      if (j < j_end) {
#pragma unroll
        for (int k = 0; k < D; ++k) q[k] = cols.points[std::size_t(j) * D + k];
        bias = column_bias(cols, h, sc, j);
      }
      if constexpr (D <= 3) {
        tile[c] = make_float4(q[0], q[1], q[2], bias);
      } else {
        tile[c] = make_float4(q[0], q[1], q[2], q[3]);
        btile[c] = bias;
      }
#pragma unroll
      for (int k = 0; k < K; ++k) vtile[c][k] = j < j_end ? v[std::size_t(j) * K + k] : 0.f;
    }
    __syncthreads();
    const int ncols = min(kApplySmallTile, j_end - t0);
    for (int c = 0; c < ncols; ++c) {
      const float4 q = tile[c];
      const float bias = D <= 3 ? q.w : btile[c];
      float vc[K];
#pragma unroll
      for (int k = 0; k < K; ++k) vc[k] = vtile[c][k];
#pragma unroll
      for (int r = 0; r < kApplySmallRows; ++r) {
        // The dot product unscaled, then one rounding of α·dot + bias: at small ε the terms are ~1/ε large and
        // summing them one by one (α folded into x) doubled the weights' rounding error.
        float dot = xr[r][0] * q.x;
        if constexpr (D > 1) dot = fmaf(xr[r][1], q.y, dot);
        if constexpr (D > 2) dot = fmaf(xr[r][2], q.z, dot);
        if constexpr (D > 3) dot = fmaf(xr[r][3], q.w, dot);
        const float e = fast_exp2(fmaf(sc.alpha, dot, bias) - shift[r]);
        total[r] += e;
#pragma unroll
        for (int k = 0; k < K; ++k) acc[r][k] = fmaf(e, vc[k], acc[r][k]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kApplySmallRows; ++r) {
    const int i = i_base + r * kApplySmallThreads;
    if (i >= rows.count) continue;
    atomicAdd(&wsum[i], total[r]);
#pragma unroll
    for (int k = 0; k < K; ++k) atomicAdd(&out[std::size_t(i) * K + k], acc[r][k]);
  }
}

template <int D>
void launch_apply_small(int k, dim3 grid, cudaStream_t stream, const PointSet& rows, const PointSet& cols,
                        const float* h, const Scale& sc, const float* lse2, const float* v, int cps, float* out,
                        float* wsum) {
#define FLASHOT_APPLY_SMALL(K)                                                                                \
  case K:                                                                                                     \
    apply_small_kernel<D, K><<<grid, kApplySmallThreads, 0, stream>>>(rows, cols, h, sc, lse2, v, cps, out,  \
                                                                      wsum);                                  \
    break;
  switch (k) {
    FLASHOT_APPLY_SMALL(1)
    FLASHOT_APPLY_SMALL(2)
    FLASHOT_APPLY_SMALL(3)
    FLASHOT_APPLY_SMALL(4)
    FLASHOT_APPLY_SMALL(5)
    FLASHOT_APPLY_SMALL(6)
    FLASHOT_APPLY_SMALL(7)
    default: FLASHOT_APPLY_SMALL(8)
  }
#undef FLASHOT_APPLY_SMALL
}

bool uses_small_apply(int d, int k) { return d <= 4 && k <= 8; }

__global__ void apply_scale_kernel(PointSet rows, const float* __restrict__ pot, const float* __restrict__ lse2,
                                   const float* __restrict__ wsum, int k, bool normalized, Scale sc,
                                   float* __restrict__ out) {
  const std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= std::size_t(rows.count) * k) return;
  const int i = static_cast<int>(e / k);
  float mass = 1.f;
  if (!normalized) mass = exp2f(sc.c1 * (pot[i] - sc.s * rows.norm2[i]) + kLog2e * rows.logw[i] + lse2[i]);
  const float total = wsum[i];
  out[e] = total > 0.f ? out[e] * (mass / total) : 0.f;
}

}  // namespace

ReductionPlan plan_apply(const PointSet& rows, const PointSet& cols, int d, int k, int resident_blocks) {
  if (uses_small_apply(d, k))
    return plan_reduction(rows.count, cols.count, kApplySmallBlockRows, kApplySmallTile, resident_blocks);
  return plan_apply(rows, cols, resident_blocks);
}

ReductionPlan plan_apply(const PointSet& rows, const PointSet& cols, int resident_blocks) {
  return plan_reduction(rows.count, cols.count, kTileRows, kTileCols, resident_blocks);
}

void launch_apply(const PointSet& rows, const PointSet& cols, const float* h, const Scale& scale, const float* lse2,
                  const float* v, int k, const ReductionPlan& plan, float* out, float* wsum, cudaStream_t stream) {
  if (uses_small_apply(scale.d, k)) {
    // Rows per block differ from the tiled kernel's: size the grid here so that any plan's column splits work.
    const dim3 grid(div_up(rows.count, kApplySmallBlockRows), plan.splits);
    const int cps = plan.cols_per_split;
    switch (scale.d) {
      case 1: launch_apply_small<1>(k, grid, stream, rows, cols, h, scale, lse2, v, cps, out, wsum); break;
      case 2: launch_apply_small<2>(k, grid, stream, rows, cols, h, scale, lse2, v, cps, out, wsum); break;
      case 3: launch_apply_small<3>(k, grid, stream, rows, cols, h, scale, lse2, v, cps, out, wsum); break;
      default: launch_apply_small<4>(k, grid, stream, rows, cols, h, scale, lse2, v, cps, out, wsum); break;
    }
    FLASHOT_CUDA_CHECK_LAUNCH();
    return;
  }
  if (k <= 16) {
    const dim3 grid(plan.row_blocks, plan.splits);
    const int cps = plan.cols_per_split;
    const bool shallow = scale.d <= 4;
#define FLASHOT_NARROW(KC)                                                                                          \
  (shallow ? apply_narrow_kernel<KC, 4><<<grid, kTileThreads, 0, stream>>>(rows, cols, h, scale, lse2, v, k, cps,   \
                                                                          out, wsum)                               \
           : apply_narrow_kernel<KC, kTileDepth><<<grid, kTileThreads, 0, stream>>>(rows, cols, h, scale, lse2, v, \
                                                                                   k, cps, out, wsum))
    if (k <= 4) FLASHOT_NARROW(4);
    else if (k <= 8) FLASHOT_NARROW(8);
    else FLASHOT_NARROW(16);
#undef FLASHOT_NARROW
    FLASHOT_CUDA_CHECK_LAUNCH();
    return;
  }
  const dim3 grid(plan.row_blocks, plan.splits, apply_chunks(k));
  apply_kernel<<<grid, kTileThreads, 0, stream>>>(rows, cols, h, scale, lse2, v, k, plan.cols_per_split, out, wsum);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_apply_scale(const PointSet& rows, const float* pot, const float* lse2, const float* wsum, int k,
                        bool normalized, const Scale& scale, float* out, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const std::int64_t elements = std::int64_t(rows.count) * k;
  if (elements == 0) return;
  apply_scale_kernel<<<div_up(elements, kThreads), kThreads, 0, stream>>>(rows, pot, lse2, wsum, k, normalized,
                                                                          scale, out);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace flashot::detail::cuda
