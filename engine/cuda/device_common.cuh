#pragma once
// Device helpers shared by the kernels: fast exp2, (max, sum) merging, and the register-blocked tile of dot
// products used by the kTiled path.

#include <cstddef>

#include <cuda_runtime.h>

#include "kernels.cuh"

namespace flashot::detail::cuda {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
/// Start of a running max: finite, so that exp2(start − start) is 1, not NaN, when a whole range is masked.
inline constexpr float kNoMax = -1e30f;

/// MUFU ex2 with flush-to-zero: one special-function instruction per plan entry (docs/design.md §2).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// Merges two (max, sum-of-exp2(· − max)) pairs; ACCURATE: with exp2f instead of ex2.approx.ftz (the finalize
/// step's merge of split partials).
template <bool ACCURATE = false>
__device__ __forceinline__ void merge_lse(float& m, float& s, float other_m, float other_s) {
  const float top = fmaxf(m, other_m);
  if constexpr (ACCURATE) {
    s = s * exp2f(m - top) + other_s * exp2f(other_m - top);
  } else {
    s = s * fast_exp2(m - top) + other_s * fast_exp2(other_m - top);
  }
  m = top;
}

/// Whether a launch trusts the one-pass sums only down to the screened sums' floor rather than 2^kSumsMinLog2:
/// the device flag `screened` (may be null; kernels.cuh, launch_finalize) is set.
/// The blend of every potential update, relax() of engine/src/backend.hpp: (1 − t)·old + t·fresh, fresh at t = 1;
/// t = ½ gives ½(old + fresh) exactly.
__device__ __forceinline__ float relax_blend(float old, float fresh, float t) {
  return t == 1.f ? fresh : (1.f - t) * old + t * fresh;
}

__device__ __forceinline__ bool low_floor_applies(const int* screened) { return screened != nullptr && *screened != 0; }

/// v_j of the column side: log2e·((h_j − s‖q_j‖²)/ε + ln w_j).
__device__ __forceinline__ float column_bias(const PointSet& cols, const float* h, const Scale& sc, int j) {
  return sc.c1 * (h[j] - sc.s * cols.norm2[j]) + kLog2e * cols.logw[j];
}

// ---- kTiled: 256 threads compute a (64 rows × 64 columns) tile of dot products, 4×4 per thread ------------------
inline constexpr int kTileThreads = 256;
inline constexpr int kTileRows = 64;
inline constexpr int kTileCols = 64;
inline constexpr int kTileDepth = 16;  // d is streamed in chunks of this many coordinates (4 when d ≤ 4)

template <int DK = kTileDepth>
struct TileStage {
  float xs[DK][kTileRows + 4];  // (DK, BM): x chunk, transposed
  float ys[DK][kTileCols + 4];  // (DK, BN)
};

/// Thread (ty, tx) = (tid / 16, tid % 16) owns rows i0 + ty + 16·r and columns j0 + tx + 16·c, r, c ∈ [0, 4).
/// Points beyond nx / ny read as zero. Starts with a barrier, so callers may reuse shared memory before it.
template <int DK = kTileDepth>
__device__ __forceinline__ void tile_dots(const float* __restrict__ x, int nx, int i0, const float* __restrict__ y,
                                          int ny, int j0, int d, TileStage<DK>& st, float (&acc)[4][4]) {
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[r][c] = 0.f;
  for (int k0 = 0; k0 < d; k0 += DK) {
    __syncthreads();
#pragma unroll
    for (int q = 0; q < DK / 4; ++q) {
      const int e = tid + kTileThreads * q, row = e / DK, kk = e % DK, k = k0 + kk;
      const int gi = i0 + row, gj = j0 + row;
      st.xs[kk][row] = (gi < nx && k < d) ? x[std::size_t(gi) * d + k] : 0.f;
      st.ys[kk][row] = (gj < ny && k < d) ? y[std::size_t(gj) * d + k] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < DK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) a[r] = st.xs[kk][ty + 16 * r];
#pragma unroll
      for (int c = 0; c < 4; ++c) b[c] = st.ys[kk][tx + 16 * c];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
    }
  }
}

inline int div_up(long long a, long long b) { return static_cast<int>((a + b - 1) / b); }

/// A predicted log2 sum as a range [lo, hi] for add_forecast: a NaN makes the forecast unusable (the next step skips).
__device__ __forceinline__ void predicted_log2_sum(float predicted, float& lo, float& hi) {
  const bool number = predicted == predicted;
  lo = number ? predicted : -INFINITY;
  hi = number ? predicted : INFINITY;
}

/// Adds the block's predicted log2 sums (each thread's [lo, hi]; +∞/−∞ for none) to `range`, block 0 records the
/// floor. Every thread of the block must call it. Most blocks find their extremes already there (a plain load
/// first), so the atomics on the two addresses stay few.
__device__ __forceinline__ void add_forecast(float lo, float hi, SumsRange& range, float& floor_out, float floor) {
  __shared__ float lows[32], highs[32];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, offset));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, offset));
  }
  const int warp = int(threadIdx.x) / 32, warps = int(blockDim.x) / 32;
  if (threadIdx.x % 32 == 0) lows[warp] = lo, highs[warp] = hi;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < warps; ++w) lo = fminf(lo, lows[w]), hi = fmaxf(hi, highs[w]);
  const unsigned low = ~float_key(lo), high = float_key(hi);
  if (low > *reinterpret_cast<volatile unsigned*>(&range.low)) atomicMax(&range.low, low);
  if (high > *reinterpret_cast<volatile unsigned*>(&range.high)) atomicMax(&range.high, high);
  if (blockIdx.x == 0) floor_out = floor;
}

}  // namespace flashot::detail::cuda
