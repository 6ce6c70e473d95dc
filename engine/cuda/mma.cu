// Tensor-core log-sum-exp (d up to 128): the score tile 2⟨x_i, y_j⟩ comes from mma.sync m16n8k16 with fp32
// accumulation; the online max and the exp2 stay in fp32. The default precision splits every coordinate into two
// fp16 terms (x = x_hi + x_lo) and sums x_hi·y_hi + x_hi·y_lo + x_lo·y_hi: 22 bits of mantissa, fp32-class dot
// products at the tensor-core rate. Single-term fp16 / bf16 are the faster, coarser options (Precision::kTf32 /
// kBf16). Coordinates are scaled by a power of two so that fp16 neither overflows nor goes subnormal.

#include <cmath>
#include <stdexcept>

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

/// Dynamic shared memory of one lse_mma_kernel instantiation: two stages of the column tile.
constexpr int mma_shared_bytes(int ks, int terms) {
  return 2 * (terms == 3 ? 2 : 1) * kMmaTile * (16 * ks + 8) * 2;
}

/// KS = padded d / 16; TERMS = 1 (one operand type) or 3 (hi·hi + hi·lo + lo·hi).
template <int KS, int TERMS, bool BF16>
__global__ void __launch_bounds__(kMmaThreads) lse_mma_kernel(PointSet rows, PointSet cols, MmaOperands rop,
                                                              MmaOperands cop, const float* __restrict__ h,
                                                              Scale sc, float alpha, int cols_per_split,
                                                              float2* __restrict__ partials, const int* guard) {
  if (guard != nullptr && *guard == 0) return;
  constexpr int DP = 16 * KS;        // padded dimension (halves per point)
  constexpr int kStride = DP + 8;    // halves per shared row: +16 bytes keeps the fragment loads conflict-free
  constexpr int kArrays = TERMS == 3 ? 2 : 1;
  constexpr int kStage = kArrays * kMmaTile * kStride;  // halves per pipeline stage
  // Two stages: the next column tile streams in (cp.async) while the tensor cores work on this one.
  extern __shared__ __align__(16) std::uint16_t smem[];  // (2 stages, arrays, BN, DP + 8)
  __shared__ __align__(8) float vtile[2][kMmaTile];     // (2 stages, BN) column biases
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * kMmaBlockRows + warp * kWarpRows;

  // A fragments of this warp's 32 rows, kept in registers for the whole column range: (2 m16, KS k16, 4 regs).
  std::uint32_t a_hi[2][KS][4], a_lo[TERMS == 3 ? 2 : 1][KS][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = row0 + mt * 16 + g + (q & 1) * 8;
        const int k = ks * 16 + 2 * t + (q >> 1) * 8;
        const bool ok = r < rows.count;
        a_hi[mt][ks][q] = ok ? *reinterpret_cast<const std::uint32_t*>(rop.hi + std::size_t(r) * DP + k) : 0u;
        if constexpr (TERMS == 3)
          a_lo[mt][ks][q] = ok ? *reinterpret_cast<const std::uint32_t*>(rop.lo + std::size_t(r) * DP + k) : 0u;
      }

  float run_max[2][2], run_sum[2][2];  // (m16 subtile, row g / g+8)
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) run_max[mt][hh] = kNoMax, run_sum[mt][hh] = 0.f;

  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(cols.count, j_begin + cols_per_split);
  const auto load_tile = [&](int stage, int j0) {
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
  };
  if (j_begin < j_end) load_tile(0, j_begin);
  for (int j0 = j_begin, it = 0; j0 < j_end; j0 += kMmaTile, ++it) {
    const int cur = it & 1;
    if (j0 + kMmaTile < j_end) {
      load_tile(cur ^ 1, j0 + kMmaTile);
      asm volatile("cp.async.wait_group 1;\n" ::);
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);
    }
    if (threadIdx.x < kMmaTile) {
      const int j = j0 + threadIdx.x;
      vtile[cur][threadIdx.x] = j < j_end ? column_bias(cols, h, sc, j) : -INFINITY;
    }
    __syncthreads();
    const std::uint16_t* ytile_hi = smem + cur * kStage;
    const std::uint16_t* ytile_lo = ytile_hi + kMmaTile * kStride;

    float s[2][8][4];  // (m16, n8, C fragment) scores of the warp's 32 × 64 tile
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

template <int TERMS, bool BF16>
void launch_mma_terms(int ks, dim3 grid, cudaStream_t stream, const PointSet& rows, const PointSet& cols,
                      const MmaOperands& rop, const MmaOperands& cop, const float* h, const Scale& sc, float alpha,
                      int cps, float2* partials, const int* guard) {
#define FLASHOT_MMA_CASE(K)                                                                                       \
  case K: {                                                                                                       \
    constexpr int bytes = mma_shared_bytes(K, TERMS);                                                             \
    allow_shared_bytes<lse_mma_kernel<K, TERMS, BF16>>(bytes);                                                    \
    lse_mma_kernel<K, TERMS, BF16><<<grid, kMmaThreads, bytes, stream>>>(rows, cols, rop, cop, h, sc, alpha, cps, \
                                                                         partials, guard);                        \
    break;                                                                                                        \
  }
  switch (ks) {
    FLASHOT_MMA_CASE(1)
    FLASHOT_MMA_CASE(2)
    FLASHOT_MMA_CASE(3)
    FLASHOT_MMA_CASE(4)
    FLASHOT_MMA_CASE(5)
    FLASHOT_MMA_CASE(6)
    FLASHOT_MMA_CASE(7)
    FLASHOT_MMA_CASE(8)
    default: throw std::logic_error("tensor-core path asked for d > 128");
  }
#undef FLASHOT_MMA_CASE
}

}  // namespace

ReductionPlan plan_lse_mma(const PointSet& rows, const PointSet& cols, int resident_blocks) {
  return plan_reduction(rows.count, cols.count, kMmaBlockRows, kMmaTile, resident_blocks);
}

void launch_lse_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
                    const float* h, const Scale& scale, const ReductionPlan& plan, float2* partials,
                    const int* guard, cudaStream_t stream) {
  const dim3 grid(plan.row_blocks, plan.splits);
  const int ks = rop.padded_d / 16;
  const float alpha = scale.alpha / (rop.scale * cop.scale);
  const int cps = plan.cols_per_split;
  if (rop.mode == MmaMode::kSplitFp16) {
    launch_mma_terms<3, false>(ks, grid, stream, rows, cols, rop, cop, h, scale, alpha, cps, partials, guard);
  } else if (rop.mode == MmaMode::kFp16) {
    launch_mma_terms<1, false>(ks, grid, stream, rows, cols, rop, cop, h, scale, alpha, cps, partials, guard);
  } else {
    launch_mma_terms<1, true>(ks, grid, stream, rows, cols, rop, cop, h, scale, alpha, cps, partials, guard);
  }
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace flashot::detail::cuda
