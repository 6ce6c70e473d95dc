// Tensor-core log-sum-exp (d up to 128): the score tile 2⟨x_i, y_j⟩ comes from mma.sync m16n8k16 with fp32
// accumulation; the online max and the exp2 stay in fp32. The default precision splits every coordinate into two
// fp16 terms (x = x_hi + x_lo) and sums x_hi·y_hi + x_hi·y_lo + x_lo·y_hi: 22 bits of mantissa, fp32-class dot
// products at the tensor-core rate. Single-term fp16 / bf16 are the faster, coarser options (Precision::kTf32 /
// kBf16). Coordinates are scaled by a power of two so that fp16 neither overflows nor goes subnormal.

#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "device_common.cuh"
#include "error.hpp"
#include "mma.cuh"
#include "mma_device.cuh"

namespace flashot::detail::cuda {
namespace {

constexpr int kMmaThreads = 128;                   // 4 warps
constexpr int kWarpRows = 32;                      // two m16 subtiles per warp
constexpr int kMmaBlockRows = 4 * kWarpRows;       // (BM) 128
constexpr int kMmaTile = 64;                       // (BN) columns per shared-memory tile: eight n8 subtiles

/// Dynamic shared memory of one kernel instantiation: two stages of the column tile.
constexpr int mma_shared_bytes(int ks, int terms) {
  return 2 * (terms == 3 ? 2 : 1) * kMmaTile * (16 * ks + 8) * 2;
}

/// The operands of one warp's 32 rows and the double-buffered column tiles, shared by the LSE and the one-pass sums
/// kernels. KS = padded d / 16; TERMS = 1 (one operand type) or 3 (hi·hi + hi·lo + lo·hi).
template <int KS, int TERMS, bool BF16>
struct MmaTileCore {
  static constexpr int DP = 16 * KS;      // padded dimension (halves per point)
  static constexpr int kStride = DP + 8;  // halves per shared row: +16 bytes keeps the fragment loads conflict-free
  static constexpr int kArrays = TERMS == 3 ? 2 : 1;
  static constexpr int kStage = kArrays * kMmaTile * kStride;  // halves per pipeline stage

  // A fragments of this warp's 32 rows, kept in registers for the whole column range: (2 m16, KS k16, 4 regs).
  std::uint32_t a_hi[2][KS][4], a_lo[TERMS == 3 ? 2 : 1][KS][4];

  __device__ __forceinline__ void load_rows(const MmaOperands& rop, int row0, int count) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int ks = 0; ks < KS; ++ks)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int r = row0 + mt * 16 + g + (q & 1) * 8;
          const int k = ks * 16 + 2 * t + (q >> 1) * 8;
          const bool ok = r < count;
          a_hi[mt][ks][q] = ok ? *reinterpret_cast<const std::uint32_t*>(rop.hi + std::size_t(r) * DP + k) : 0u;
          if constexpr (TERMS == 3)
            a_lo[mt][ks][q] = ok ? *reinterpret_cast<const std::uint32_t*>(rop.lo + std::size_t(r) * DP + k) : 0u;
        }
  }

  /// Starts the asynchronous copy of columns [j0, j0 + BN) ∩ [.., j_end) into `stage` (zeros beyond j_end).
  static __device__ __forceinline__ void load_tile(std::uint16_t* smem, const MmaOperands& cop, int stage, int j0,
                                                   int j_end) {
    constexpr int kVecs = kMmaTile * DP / 8;  // 16-byte vectors per array
    std::uint16_t* base = smem + stage * kStage;
    for (int e = threadIdx.x; e < kVecs; e += kMmaThreads) {
      const int c = e / (DP / 8), k8 = e % (DP / 8), j = j0 + c;
      const bool ok = j < j_end;
      const std::size_t src = std::size_t(ok ? j : 0) * DP + k8 * 8;
      copy_async16(base + c * kStride + k8 * 8, cop.hi + src, ok);
      if constexpr (TERMS == 3) copy_async16(base + kMmaTile * kStride + c * kStride + k8 * 8, cop.lo + src, ok);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  }

  /// s = ⟨row, column⟩ (scaled operands) of the warp's 32 × 64 tile: (m16, n8, C fragment).
  __device__ __forceinline__ void scores(const std::uint16_t* stage_base, float (&s)[2][8][4]) const {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const std::uint16_t* ytile_hi = stage_base;
    const std::uint16_t* ytile_lo = stage_base + kMmaTile * kStride;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int q = 0; q < 4; ++q) s[mt][nt][q] = 0.f;
      const int base = (nt * 8 + g) * kStride + 2 * t;
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        const std::uint32_t b0 = *reinterpret_cast<const std::uint32_t*>(&ytile_hi[base + ks * 16]);
        const std::uint32_t b1 = *reinterpret_cast<const std::uint32_t*>(&ytile_hi[base + ks * 16 + 8]);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) mma_16816(s[mt][nt], a_hi[mt][ks], b0, b1, BF16);
        if constexpr (TERMS == 3) {
          const std::uint32_t l0 = *reinterpret_cast<const std::uint32_t*>(&ytile_lo[base + ks * 16]);
          const std::uint32_t l1 = *reinterpret_cast<const std::uint32_t*>(&ytile_lo[base + ks * 16 + 8]);
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            mma_16816(s[mt][nt], a_hi[mt][ks], l0, l1, BF16);
            mma_16816(s[mt][nt], a_lo[mt][ks], b0, b1, BF16);
          }
        }
      }
    }
  }
};

template <int KS, int TERMS, bool BF16>
__global__ void __launch_bounds__(kMmaThreads) lse_mma_kernel(PointSet rows, PointSet cols, MmaOperands rop,
                                                              MmaOperands cop, const float* __restrict__ h,
                                                              Scale sc, float alpha, int cols_per_split,
                                                              float2* __restrict__ partials, const int* guard) {
  if (guard != nullptr && *guard == 0) return;
  using Core = MmaTileCore<KS, TERMS, BF16>;
  // Two stages: the next column tile streams in (cp.async) while the tensor cores work on this one.
  extern __shared__ __align__(16) std::uint16_t smem[];  // (2 stages, arrays, BN, DP + 8)
  __shared__ __align__(8) float vtile[2][kMmaTile];     // (2 stages, BN) column biases
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * kMmaBlockRows + warp * kWarpRows;
  Core core;
  core.load_rows(rop, row0, rows.count);

  float run_max[2][2], run_sum[2][2];  // (m16 subtile, row g / g+8)
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) run_max[mt][hh] = kNoMax, run_sum[mt][hh] = 0.f;

  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(cols.count, j_begin + cols_per_split);
  if (j_begin < j_end) Core::load_tile(smem, cop, 0, j_begin, j_end);
  for (int j0 = j_begin, it = 0; j0 < j_end; j0 += kMmaTile, ++it) {
    const int cur = it & 1;
    if (j0 + kMmaTile < j_end) {
      Core::load_tile(smem, cop, cur ^ 1, j0 + kMmaTile, j_end);
      asm volatile("cp.async.wait_group 1;\n" ::);
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);
    }
    if (threadIdx.x < kMmaTile) {
      const int j = j0 + threadIdx.x;
      vtile[cur][threadIdx.x] = j < j_end ? column_bias(cols, h, sc, j) : -INFINITY;
    }
    __syncthreads();
    float s[2][8][4];
    core.scores(smem + cur * Core::kStage, s);
    float bias[8][2];  // (n8, 2) this lane's columns nt·8 + 2t + q
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float2 b2 = *reinterpret_cast<const float2*>(&vtile[cur][nt * 8 + 2 * t]);
      bias[nt][0] = b2.x;
      bias[nt][1] = b2.y;
    }
    // Online log-sum-exp of rows g and g + 8 of each m16 subtile; the 4 lanes of a row share its max.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float top = kNoMax;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const float v = fmaf(alpha, s[mt][nt][2 * hh + q], bias[nt][q]);
            s[mt][nt][2 * hh + q] = v;
            top = fmaxf(top, v);
          }
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
        if (top > run_max[mt][hh]) {
          run_sum[mt][hh] *= fast_exp2(run_max[mt][hh] - top);
          run_max[mt][hh] = top;
        }
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int q = 0; q < 2; ++q) sum += fast_exp2(s[mt][nt][2 * hh + q] - run_max[mt][hh]);
        run_sum[mt][hh] += sum;
      }
    __syncthreads();  // the next iteration's copies overwrite the stage read here
  }
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float sum = run_sum[mt][hh];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int r = row0 + mt * 16 + g + hh * 8;
      if (t == 0 && r < rows.count)
        partials[std::size_t(blockIdx.y) * rows.count + r] = make_float2(run_max[mt][hh], sum);
    }
}

/// One halving step of the column transpose-sum: of v[0, 2W) a lane keeps the upper half when `upper`, the lower
/// half otherwise, and adds the partner's copy (partner = lane ^ XOR). W is a template parameter so that every
/// index is a constant.
template <int W, int XOR>
__device__ __forceinline__ void column_halving(float (&v)[16], bool upper) {
#pragma unroll
  for (int k = 0; k < W; ++k) {
    const float lo = v[k], hi = v[k + W];
    v[k] = (upper ? hi : lo) + __shfl_xor_sync(0xffffffffu, upper ? lo : hi, XOR);
  }
}

/// The one-pass symmetric step on tensor cores (symmetric.cu has the contract and the fp32 kernels): each plan
/// entry E_ij = exp2(α⟨x_i,y_j⟩ + u_i + v_j) is evaluated once and feeds both the row sum Σ_j E_ij and the column
/// sum Σ_i a_i E_ij.
template <int KS, int TERMS, bool BF16>
__global__ void __launch_bounds__(kMmaThreads) sums_mma_kernel(PointSet x, PointSet y, MmaOperands xop,
                                                               MmaOperands yop, const float* __restrict__ f,
                                                               const float* __restrict__ g, Scale sc, float alpha,
                                                               int cols_per_split, float* __restrict__ rsum,
                                                               float* __restrict__ csum, const int* skip) {
  if (skip != nullptr && *skip != 0) return;
  using Core = MmaTileCore<KS, TERMS, BF16>;
  extern __shared__ __align__(16) std::uint16_t smem[];        // (2 stages, arrays, BN, DP + 8)
  __shared__ __align__(8) float vtile[2][kMmaTile];            // (2 stages, BN) column biases v_j
  __shared__ __align__(8) float colbuf[kMmaThreads / 32][kMmaTile];  // (warps, BN) per-warp column sums
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gr = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * kMmaBlockRows + warp * kWarpRows;
  Core core;
  core.load_rows(xop, row0, x.count);

  float u[2][2], ar[2][2], rs[2][2];  // (m16 subtile, row g / g+8)
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int i = row0 + mt * 16 + gr + hh * 8;
      const bool valid = i < x.count;
      u[mt][hh] = valid ? sc.c1 * (f[i] - sc.s * x.norm2[i]) : -INFINITY;
      ar[mt][hh] = valid ? x.weight[i] : 0.f;
      rs[mt][hh] = 0.f;
    }

  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(y.count, j_begin + cols_per_split);
  const int tiles = (j_end - j_begin + kMmaTile - 1) / kMmaTile;
  // Blocks of one split start at different tiles so that their column atomics do not all hit one address range.
  const auto tile_start = [&](int it) { return j_begin + ((it + blockIdx.x) % tiles) * kMmaTile; };
  if (tiles > 0) Core::load_tile(smem, yop, 0, tile_start(0), j_end);
  for (int it = 0; it < tiles; ++it) {
    const int cur = it & 1, j0 = tile_start(it);
    if (it + 1 < tiles) {
      Core::load_tile(smem, yop, cur ^ 1, tile_start(it + 1), j_end);
      asm volatile("cp.async.wait_group 1;\n" ::);
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);
    }
    if (threadIdx.x < kMmaTile) {
      const int j = j0 + threadIdx.x;
      vtile[cur][threadIdx.x] = j < j_end ? column_bias(y, g, sc, j) : -INFINITY;
    }
    __syncthreads();
    float s[2][8][4];
    core.scores(smem + cur * Core::kStage, s);
    float col[16];  // (n8, 2): Σ over this lane's four rows of a_i E_ij, columns nt·8 + 2t + q
#pragma unroll
    for (int c = 0; c < 16; ++c) col[c] = 0.f;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float2 b2 = *reinterpret_cast<const float2*>(&vtile[cur][nt * 8 + 2 * t]);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float e0 = fast_exp2(fmaf(alpha, s[mt][nt][2 * hh], b2.x + u[mt][hh]));
          const float e1 = fast_exp2(fmaf(alpha, s[mt][nt][2 * hh + 1], b2.y + u[mt][hh]));
          rs[mt][hh] += e0 + e1;
          col[2 * nt] = fmaf(ar[mt][hh], e0, col[2 * nt]);
          col[2 * nt + 1] = fmaf(ar[mt][hh], e1, col[2 * nt + 1]);
        }
    }
    // The 8 lanes g = 0..7 with the same t hold the same 16 columns: halve over lane bits 4, 3, 2 so that lane
    // (g, t) ends with the totals of columns g·8 + 2t + {0, 1}.
    column_halving<8, 16>(col, lane & 16);
    column_halving<4, 8>(col, lane & 8);
    column_halving<2, 4>(col, lane & 4);
    *reinterpret_cast<float2*>(&colbuf[warp][gr * 8 + 2 * t]) = make_float2(col[0], col[1]);
    __syncthreads();
    if (threadIdx.x < kMmaTile) {
      const int j = j0 + threadIdx.x;
      float total = 0.f;
#pragma unroll
      for (int w = 0; w < kMmaThreads / 32; ++w) total += colbuf[w][threadIdx.x];
      if (j < j_end && total != 0.f) atomicAdd(&csum[j], total);
    }
    __syncthreads();  // the next iteration's copies overwrite the stage read here, and colbuf is rewritten
  }
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float sum = rs[mt][hh];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int i = row0 + mt * 16 + gr + hh * 8;
      if (t == 0 && i < x.count) atomicAdd(&rsum[i], sum);
    }
}

/// Calls fn(std::integral_constant<int, KS>{}) for the run-time KS = padded d / 16 (1..8).
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
    default: throw std::logic_error("tensor-core path asked for d > 128");
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

ReductionPlan plan_lse_mma(const PointSet& rows, const PointSet& cols, int resident_blocks) {
  return plan_reduction(rows.count, cols.count, kMmaBlockRows, kMmaTile, resident_blocks);
}

void launch_lse_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
                    const float* h, const Scale& scale, const ReductionPlan& plan, float2* partials,
                    const int* guard, cudaStream_t stream) {
  const dim3 grid(plan.row_blocks, plan.splits);
  const float alpha = scale.alpha / (rop.scale * cop.scale);
  dispatch_mode(rop.mode, [&](auto terms, auto bf16) {
    dispatch_ks(rop.padded_d / 16, [&](auto ks) {
      constexpr auto kernel = lse_mma_kernel<decltype(ks)::value, decltype(terms)::value, decltype(bf16)::value>;
      constexpr int bytes = mma_shared_bytes(decltype(ks)::value, decltype(terms)::value);
      allow_shared_bytes<kernel>(bytes);
      kernel<<<grid, kMmaThreads, bytes, stream>>>(rows, cols, rop, cop, h, scale, alpha, plan.cols_per_split,
                                                   partials, guard);
    });
  });
  FLASHOT_CUDA_CHECK_LAUNCH();
}

ReductionPlan plan_symmetric_mma(const PointSet& x, const PointSet& y, int resident_blocks) {
  return plan_reduction(x.count, y.count, kMmaBlockRows, kMmaTile, resident_blocks);
}

void launch_symmetric_sums_mma(const PointSet& x, const PointSet& y, const MmaOperands& xop, const MmaOperands& yop,
                               const float* f, const float* g, const Scale& scale, const ReductionPlan& plan,
                               float* rsum, float* csum, const int* skip, cudaStream_t stream) {
  const dim3 grid(plan.row_blocks, plan.splits);
  const float alpha = scale.alpha / (xop.scale * yop.scale);
  dispatch_mode(xop.mode, [&](auto terms, auto bf16) {
    dispatch_ks(xop.padded_d / 16, [&](auto ks) {
      constexpr auto kernel = sums_mma_kernel<decltype(ks)::value, decltype(terms)::value, decltype(bf16)::value>;
      constexpr int bytes = mma_shared_bytes(decltype(ks)::value, decltype(terms)::value);
      allow_shared_bytes<kernel>(bytes);
      kernel<<<grid, kMmaThreads, bytes, stream>>>(x, y, xop, yop, f, g, scale, alpha, plan.cols_per_split, rsum,
                                                   csum, skip);
    });
  });
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace flashot::detail::cuda
