// The one-pass symmetric step (docs/design.md §2): with E_ij = a_i b_j exp((f_i + g_j − C_ij)/ε)/a_i built from the old
// pair, the row sums ρ_i = Σ_j E_ij and column sums Σ_i a_i E_ij give both soft c-transforms from ONE exponential per
// plan entry: softmin_rows(g)_i = f_i − ε ln ρ_i and softmin_cols(f)_j = g_j − ε ln(Σ_i a_i E_ij / b_j).
// The shift is the potentials themselves (no running max), so sums can underflow or overflow far from the fixed
// point: the finish kernel flags that and the caller redoes the step with the two-pass reductions.

#include <algorithm>
#include <cmath>

#include "device_common.cuh"
#include "error.hpp"

namespace flashot::detail::cuda {
namespace {

constexpr int kSumThreads = 128;
constexpr int kSumRows = 8;
constexpr int kSumTile = 256;
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
__global__ void __launch_bounds__(kSumThreads) sums_small_kernel(PointSet x, PointSet y, const float* __restrict__ f,
                                                                 const float* __restrict__ g, Scale sc,
                                                                 int cols_per_split, float* __restrict__ rsum,
                                                                 float* __restrict__ csum,
                                                                 const SumsForecast* forecast) {
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
}

__global__ void __launch_bounds__(kTileThreads) sums_tiled_kernel(PointSet x, PointSet y, const float* __restrict__ f,
                                                                  const float* __restrict__ g, Scale sc,
                                                                  int cols_per_split, float* __restrict__ rsum,
                                                                  float* __restrict__ csum,
                                                                  const SumsForecast* forecast) {
  const SumsStep step = forecast != nullptr ? sums_step(*forecast) : SumsStep{};
  if (step.skip != 0) return;
  const float shift = step.shift;
  __shared__ TileStage<> st;
  __shared__ float colbuf[kTileThreads / 32][kTileCols];  // (warps, BN)
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int i0 = blockIdx.x * kTileRows;
  float u[4], ar[4], rs[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = i0 + ty + 16 * r;
    const bool valid = i < x.count;
    u[r] = valid ? sc.c1 * (f[i] - sc.s * x.norm2[i]) + shift : -INFINITY;
    ar[r] = valid ? x.weight[i] : 0.f;
    rs[r] = 0.f;
  }
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(y.count, j_begin + cols_per_split);
  const int tiles = (j_end - j_begin + kTileCols - 1) / kTileCols;
  for (int t = 0; t < tiles; ++t) {
    const int j0 = j_begin + ((t + blockIdx.x) % tiles) * kTileCols;
    float acc[4][4];  // (TM, TN)
    tile_dots(x.points, x.count, i0, y.points, j_end, j0, sc.d, st, acc);
    float cp[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = j0 + tx + 16 * c;
      const float v = j < j_end ? column_bias(y, g, sc, j) : -INFINITY;
      cp[c] = 0.f;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float e = fast_exp2(fmaf(sc.alpha, acc[r][c], v + u[r]));
        rs[r] += e;
        cp[c] = fmaf(ar[r], e, cp[c]);
      }
      cp[c] += __shfl_xor_sync(0xffffffffu, cp[c], 16);  // the other half-warp holds the same columns
      if (lane < 16) colbuf[warp][tx + 16 * c] = cp[c];
    }
    __syncthreads();
    if (threadIdx.x < kTileCols) {
      const int j = j0 + threadIdx.x;
      float total = 0.f;
#pragma unroll
      for (int w = 0; w < kTileThreads / 32; ++w) total += colbuf[w][threadIdx.x];
      if (j < j_end && total != 0.f) atomicAdd(&csum[j], total);
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
#pragma unroll
    for (int offset = 1; offset < 16; offset <<= 1) rs[r] += __shfl_xor_sync(0xffffffffu, rs[r], offset);
    const int i = i0 + ty + 16 * r;
    if (tx == 0 && i < x.count) atomicAdd(&rsum[i], rs[r]);
  }
}

__global__ void finish_kernel(const float* __restrict__ f, const float* __restrict__ g, float* __restrict__ rsum,
                              float* __restrict__ csum, const float* __restrict__ b, int n, int m, float epsilon,
                              float lambda_f, float lambda_g, float* __restrict__ tmp_f, float* __restrict__ tmp_g,
                              int* flag, const SumsForecast* forecast, float sums_min, const int* screened,
                              float screened_min, SumsForecast* next, const int* next_screened, float next_floor) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  const SumsStep step = forecast != nullptr ? sums_step(*forecast) : SumsStep{};
  if (step.skip != 0) {  // the sums were not computed (and rsum/csum are still zero): redo (and its commit forecasts)
    if (idx == 0) *flag = 1;
    return;
  }
  // The sums carry 2^shift: ln of the true sum is ln(sum) − shift·ln 2.
  const float shift_ln = step.shift * 0.69314718f;
  float lo = INFINITY, hi = -INFINITY;              // the next step's log2 sum if this result stands
  if (idx < n + m) {
    float sum, pot, lambda;
    float* out;
    if (idx < n) {
      sum = rsum[idx];
      rsum[idx] = 0.f;
      pot = f[idx], lambda = lambda_f, out = tmp_f + idx;
    } else {
      const int j = idx - n;
      sum = csum[j] / b[j];
      csum[j] = 0.f;
      pot = g[j], lambda = lambda_g, out = tmp_g + j;
    }
    const float low = low_floor_applies(screened) ? screened_min : sums_min;
    if (!(sum >= low && sum <= kSumsMax)) *flag = 1;  // kernels.cuh: why this range
    const float transform = pot - epsilon * (logf(sum) - shift_ln);  // the soft c-transform
    *out = lambda * transform;
    // The commit makes the potential ½(pot + λ·c); the next row sum is then e^((that − c)/ε) to first order
    // (launch_finalize).
    predicted_log2_sum((0.5f * (pot + lambda * transform) - transform) / (epsilon * 0.69314718f), lo, hi);
  }
  if (next != nullptr) {
    add_forecast(lo, hi, next->sums, next->floor, low_floor_applies(next_screened) ? next_floor : kSumsMinLog2);
  }
}

__global__ void cold_check_kernel(const float* __restrict__ softmin, int count, float epsilon_ln2, int* skip,
                                  const int* screened, float floor_log2) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float log2_sum = -softmin[i] / epsilon_ln2;
  const float low = low_floor_applies(screened) ? floor_log2 : kSumsMinLog2;
  if (!(log2_sum >= low && log2_sum <= kSumsMaxLog2)) *skip = 1;
}

}  // namespace

ReductionPlan plan_symmetric(const PointSet& x, const PointSet& y, int d, int resident_blocks, int sms) {
  if (choose_path(d) == Path::kSmallD) {
    // Bound by the SMs' exponential units, all blocks resident at once up to n ≈ 100k: balance the SMs' work
    // (plan_balanced) in 32-column chunks, the kernel's inner step, with the kernel's own occupancy.
    int per_sm = 0;
    const cudaError_t status =
        d == 1   ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sums_small_kernel<1>, kSumThreads, 0)
        : d == 2 ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sums_small_kernel<2>, kSumThreads, 0)
        : d == 3 ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sums_small_kernel<3>, kSumThreads, 0)
                 : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sums_small_kernel<4>, kSumThreads, 0);
    if (status != cudaSuccess || per_sm <= 0) {
      (void)cudaGetLastError();
      per_sm = std::max(resident_blocks / std::max(sms, 1), 1);
    }
    return plan_balanced(x.count, y.count, kSumBlockRows, 32, sms, per_sm, 3, 2);
  }
  return plan_reduction(x.count, y.count, kTileRows, kTileCols, resident_blocks);
}

void launch_symmetric_sums(const PointSet& x, const PointSet& y, const float* f, const float* g, const Scale& scale,
                           const ReductionPlan& plan, float* rsum, float* csum, const SumsForecast* forecast,
                           cudaStream_t stream) {
  const dim3 grid(plan.row_blocks, plan.splits);
  const int cps = plan.cols_per_split;
  const SumsForecast* fc = forecast;
  if (choose_path(scale.d) == Path::kSmallD) {
    switch (scale.d) {
      case 1: sums_small_kernel<1><<<grid, kSumThreads, 0, stream>>>(x, y, f, g, scale, cps, rsum, csum, fc); break;
      case 2: sums_small_kernel<2><<<grid, kSumThreads, 0, stream>>>(x, y, f, g, scale, cps, rsum, csum, fc); break;
      case 3: sums_small_kernel<3><<<grid, kSumThreads, 0, stream>>>(x, y, f, g, scale, cps, rsum, csum, fc); break;
      default: sums_small_kernel<4><<<grid, kSumThreads, 0, stream>>>(x, y, f, g, scale, cps, rsum, csum, fc); break;
    }
  } else {
    sums_tiled_kernel<<<grid, kTileThreads, 0, stream>>>(x, y, f, g, scale, cps, rsum, csum, fc);
  }
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_cold_check(const float* softmin, int count, double epsilon, int* skip, cudaStream_t stream,
                       const int* screened, float floor_log2) {
  if (count <= 0) return;
  constexpr int kThreads = 256;
  cold_check_kernel<<<div_up(count, kThreads), kThreads, 0, stream>>>(
      softmin, count, static_cast<float>(epsilon * 0.6931471805599453), skip, screened, floor_log2);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_symmetric_finish(const float* f, const float* g, float* rsum, float* csum, const float* b, int n, int m,
                             double epsilon, float lambda_f, float lambda_g, float* tmp_f, float* tmp_g, int* flag,
                             const SumsForecast* forecast, cudaStream_t stream, const int* screened, float floor_log2,
                             SumsForecast* next, const int* next_screened) {
  constexpr int kThreads = 256;
  finish_kernel<<<div_up(std::int64_t(n) + m, kThreads), kThreads, 0, stream>>>(
      f, g, rsum, csum, b, n, m, static_cast<float>(epsilon), lambda_f, lambda_g, tmp_f, tmp_g, flag, forecast,
      std::exp2(kSumsMinLog2), screened, std::exp2(floor_log2), next, next_screened, floor_log2);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace flashot::detail::cuda
