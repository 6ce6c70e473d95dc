// The one-pass symmetric step (docs/design.md §2): with E_ij = a_i b_j exp((f_i + g_j − C_ij)/ε)/a_i built from the old
// pair, the row sums ρ_i = Σ_j E_ij and column sums Σ_i a_i E_ij give both soft c-transforms from ONE exponential per
// plan entry: softmin_rows(g)_i = f_i − ε ln ρ_i and softmin_cols(f)_j = g_j − ε ln(Σ_i a_i E_ij / b_j).
// The shift is the potentials themselves (no running max), so sums can underflow or overflow far from the fixed
// point: the finish kernel flags that and the caller redoes the step with the two-pass reductions — or, where the step
// keeps a list of strays (kernels.cuh Strays), redoes only the rows and columns whose sums left the range.

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "device_common.cuh"
#include "dispatch.hpp"
#include "error.hpp"
#include "small_d.cuh"

namespace flashot::detail::cuda {
namespace {

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
                              float screened_min, SumsForecast* next, const int* next_screened, float next_floor,
                              float commit_weight, Strays strays) {
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
    bool alone = false;  // a stray: redone alone (launch_strays_commit writes its result and forecast)
    if (!(sum >= low && sum <= kSumsMax)) {  // kernels.cuh: why this range
      const bool on_y = idx >= n;
      const int at = strays.index != nullptr ? atomicAdd(strays.count + (on_y ? 1 : 0), 1) : 0;
      if (strays.index != nullptr && at < (on_y ? strays.cap_y : strays.cap_x)) {
        strays.index[(on_y ? strays.cap_x : 0) + at] = on_y ? idx - n : idx;
        alone = true;
      } else {
        *flag = 1;
      }
    }
    const float transform = pot - epsilon * (logf(sum) - shift_ln);  // the soft c-transform
    *out = lambda * transform;
    // The commit makes the potential ½(pot + λ·c) (the blend with commit_weight); the next row sum is then
    // e^((that − c)/ε) to first order (launch_finalize).
    if (!alone) {
      predicted_log2_sum((relax_blend(pot, lambda * transform, commit_weight) - transform) / (epsilon * 0.69314718f),
                         lo, hi);
    }
  }
  if (next != nullptr) {
    add_forecast(lo, hi, next->sums, next->floor, low_floor_applies(next_screened) ? next_floor : kSumsMinLog2);
  }
}

__global__ void cold_check_kernel(const float* __restrict__ softmin, int count_x, int even_x, int count_y, int even_y,
                                  bool strays, float epsilon_ln2, SumsForecast* forecast, const int* screened,
                                  float floor_log2) {
  // One block: the range of the sample's log2 sums e^(−softmin/ε) and the lowest of its evenly spaced part, which
  // sums_step judges (decide_cold_step).
  __shared__ SumsRange even;
  __shared__ float unused_floor;
  const float floor = low_floor_applies(screened) ? floor_log2 : kSumsMinLog2;
  if (threadIdx.x == 0) *forecast = SumsForecast{}, even = SumsRange{};
  __syncthreads();
  float lo = INFINITY, hi = -INFINITY, even_lo = INFINITY;
  bool bad = false;
  for (int k = int(threadIdx.x); k < count_x + count_y; k += int(blockDim.x)) {
    const float log2_sum = -softmin[k] / epsilon_ln2;
    bad |= !(log2_sum == log2_sum);
    lo = fminf(lo, log2_sum);
    hi = fmaxf(hi, log2_sum);
    if (k < even_x || (k >= count_x && k < count_x + even_y)) even_lo = fminf(even_lo, log2_sum);
  }
  const bool bad_any = __syncthreads_or(bad) != 0;
  add_forecast(lo, hi, forecast->sums, forecast->floor, floor);
  __syncthreads();  // add_forecast's shared scratch, reused
  add_forecast(even_lo, -INFINITY, even, unused_floor, floor);
  __syncthreads();
  if (threadIdx.x != 0) return;
  forecast->cold = 1;
  forecast->skip = bad_any ? 1 : 0;
  forecast->fit_low = strays ? even.low : forecast->sums.low;
}

/// One warp per stray (a grid-stride loop over both sides): its coordinates and values into the compact side.
__global__ void pack_strays_kernel(Strays strays, PointSet x, PointSet y, int d, float* __restrict__ packed_x,
                                   float* __restrict__ packed_y) {
  const int lane = int(threadIdx.x) % 32;
  const int warps = int(gridDim.x * blockDim.x) / 32;
  const int nx = min(strays.count[0], strays.cap_x), ny = min(strays.count[1], strays.cap_y);
  for (int w = int(blockIdx.x * blockDim.x + threadIdx.x) / 32; w < nx + ny; w += warps) {
    const bool on_y = w >= nx;
    const int k = on_y ? w - nx : w, c = on_y ? strays.cap_y : strays.cap_x;
    const PointSet& side = on_y ? y : x;
    float* packed = on_y ? packed_y : packed_x;
    const std::size_t i = std::size_t(strays.index[(on_y ? strays.cap_x : 0) + k]);
    for (int j = lane; j < d; j += 32) packed[std::size_t(k) * d + j] = side.points[i * d + j];
    if (lane == 0) {
      packed[std::size_t(c) * d + k] = side.norm2[i];
      packed[std::size_t(c) * (d + 1) + k] = side.logw[i];
      packed[std::size_t(c) * (d + 2) + k] = side.weight[i];
    }
  }
}

/// A grid-stride loop over both sides' strays: merge the compact side's LSE partials, write λ·softmin, forecast.
__global__ void strays_commit_kernel(Strays strays, StraySide x, StraySide y, float epsilon_ln2, float s,
                                     float commit_weight, SumsForecast* next) {
  const int nx = min(strays.count[0], strays.cap_x), ny = min(strays.count[1], strays.cap_y);
  float lo = INFINITY, hi = -INFINITY;
  for (int w = int(blockIdx.x * blockDim.x + threadIdx.x); w < nx + ny; w += int(gridDim.x * blockDim.x)) {
    const bool on_y = w >= nx;
    const int k = on_y ? w - nx : w, c = on_y ? strays.cap_y : strays.cap_x;
    const StraySide& side = on_y ? y : x;
    float m = kNoMax, sum = 0.f;
    for (int q = 0; q < side.splits; ++q) {
      const float2 p = side.partials[std::size_t(q) * c + k];
      merge_lse<true>(m, sum, p.x, p.y);
    }
    const float transform = s * side.norm2[k] - epsilon_ln2 * (m + log2f(sum));  // the soft c-transform
    const int i = strays.index[(on_y ? strays.cap_x : 0) + k];
    side.tmp[i] = side.lambda * transform;
    float plo, phi;
    predicted_log2_sum((relax_blend(side.pot[i], side.lambda * transform, commit_weight) - transform) / epsilon_ln2,
                       plo, phi);
    lo = fminf(lo, plo), hi = fmaxf(hi, phi);
  }
  if (next != nullptr) add_forecast(lo, hi, next->sums, next->floor, next->floor);
}

}  // namespace

ReductionPlan plan_symmetric(const PointSet& x, const PointSet& y, int d, int resident_blocks, int sms) {
  if (const int width = fp32_width(x, d); width > 0) {
    // Bound by the SMs' exponential units, all blocks resident at once up to n ≈ 100k: balance the SMs' work
    // (plan_balanced) in 32-column chunks, the kernel's inner step, with the kernel's own occupancy.
    int per_sm = 0;
    switch (width) {
      case 1: per_sm = sums_small_blocks_per_sm<1>(); break;
      case 2: per_sm = sums_small_blocks_per_sm<2>(); break;
      case 3: per_sm = sums_small_blocks_per_sm<3>(); break;
      case 4: per_sm = sums_small_blocks_per_sm<4>(); break;
      case 5: per_sm = sums_small_blocks_per_sm<5>(); break;
      case 6: per_sm = sums_small_blocks_per_sm<6>(); break;
      case 7: per_sm = sums_small_blocks_per_sm<7>(); break;
      case 8: per_sm = sums_small_blocks_per_sm<8>(); break;
      case 12: per_sm = sums_small_blocks_per_sm<12>(); break;
      case 16: per_sm = sums_small_blocks_per_sm<16>(); break;
      default: throw std::logic_error("no register kernel of width " + std::to_string(width));
    }
    if (per_sm <= 0) per_sm = std::max(resident_blocks / std::max(sms, 1), 1);
    return plan_balanced(x.count, y.count, small_block_rows(width), 32, sms, per_sm, 3, 2);
  }
  return plan_reduction(x.count, y.count, kTileRows, kTileCols, resident_blocks);
}

void launch_symmetric_sums(const PointSet& x, const PointSet& y, const float* f, const float* g, const Scale& scale,
                           const ReductionPlan& plan, float* rsum, float* csum, const SumsForecast* forecast,
                           cudaStream_t stream) {
  const dim3 grid(plan.row_blocks, plan.splits);
  const int cps = plan.cols_per_split;
  const SumsForecast* fc = forecast;
  if (const int width = fp32_width(x, scale.d); width > 0) {
    switch (width) {
      case 1: launch_sums_small<1>(x, y, f, g, scale, plan, rsum, csum, fc, stream); break;
      case 2: launch_sums_small<2>(x, y, f, g, scale, plan, rsum, csum, fc, stream); break;
      case 3: launch_sums_small<3>(x, y, f, g, scale, plan, rsum, csum, fc, stream); break;
      case 4: launch_sums_small<4>(x, y, f, g, scale, plan, rsum, csum, fc, stream); break;
      case 5: launch_sums_small<5>(x, y, f, g, scale, plan, rsum, csum, fc, stream); break;
      case 6: launch_sums_small<6>(x, y, f, g, scale, plan, rsum, csum, fc, stream); break;
      case 7: launch_sums_small<7>(x, y, f, g, scale, plan, rsum, csum, fc, stream); break;
      case 8: launch_sums_small<8>(x, y, f, g, scale, plan, rsum, csum, fc, stream); break;
      case 12: launch_sums_small<12>(x, y, f, g, scale, plan, rsum, csum, fc, stream); break;
      case 16: launch_sums_small<16>(x, y, f, g, scale, plan, rsum, csum, fc, stream); break;
      default: throw std::logic_error("no register kernel of width " + std::to_string(width));
    }
    return;
  } else {
    sums_tiled_kernel<<<grid, kTileThreads, 0, stream>>>(x, y, f, g, scale, cps, rsum, csum, fc);
  }
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_cold_check(const float* softmin, int count_x, int even_x, int count_y, int even_y, bool strays,
                       double epsilon, SumsForecast* forecast, cudaStream_t stream, const int* screened,
                       float floor_log2) {
  if (count_x + count_y <= 0) return;
  cold_check_kernel<<<1, 256, 0, stream>>>(softmin, count_x, even_x, count_y, even_y, strays,
                                           static_cast<float>(epsilon * 0.6931471805599453), forecast, screened,
                                           floor_log2);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_symmetric_finish(const float* f, const float* g, float* rsum, float* csum, const float* b, int n, int m,
                             double epsilon, float lambda_f, float lambda_g, float* tmp_f, float* tmp_g, int* flag,
                             const SumsForecast* forecast, cudaStream_t stream, const int* screened, float floor_log2,
                             SumsForecast* next, const int* next_screened, float commit_weight, Strays strays) {
  constexpr int kThreads = 256;
  finish_kernel<<<div_up(std::int64_t(n) + m, kThreads), kThreads, 0, stream>>>(
      f, g, rsum, csum, b, n, m, static_cast<float>(epsilon), lambda_f, lambda_g, tmp_f, tmp_g, flag, forecast,
      std::exp2(kSumsMinLog2), screened, std::exp2(floor_log2), next, next_screened, floor_log2, commit_weight,
      strays);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

// Both stray kernels run a fixed grid (the counts are on the device): a few blocks, enough for the hundreds of
// strays a cold step leaves (docs/benchmarks.md, "Cold steps"); with none they return at once.
constexpr int kStrayBlocks = 64, kStrayThreads = 256;

void launch_pack_strays(const Strays& strays, const PointSet& x, const PointSet& y, int d, float* packed_x,
                        float* packed_y, cudaStream_t stream) {
  pack_strays_kernel<<<kStrayBlocks, kStrayThreads, 0, stream>>>(strays, x, y, d, packed_x, packed_y);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_strays_commit(const Strays& strays, const StraySide& x, const StraySide& y, double epsilon, float s,
                          float commit_weight, SumsForecast* next, cudaStream_t stream) {
  strays_commit_kernel<<<kStrayBlocks, kStrayThreads, 0, stream>>>(
      strays, x, y, static_cast<float>(epsilon * 0.6931471805599453), s, commit_weight, next);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace flashot::detail::cuda
