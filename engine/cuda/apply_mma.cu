// Tensor-core plan application (see apply_mma.cuh). One block of 4 warps owns 64 rows (16 per warp, one m16 tile)
// and streams 64-column tiles of the other side: scores (16 × 64 per warp) from mma.sync, plan weights in fp32
// registers, then the weight tile — already laid out as the A fragment of the next product, as in FlashAttention —
// times the tile of V on the tensor cores into a (16 × up to 128) accumulator. The weights keep the numerics of
// apply.cu: exp2(score − lse2_i) ∈ [0, 1] whatever the potentials, the row's mass restored by launch_apply_scale.

#include <cmath>
#include <stdexcept>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "apply_mma.cuh"
#include "blocks.cuh"
#include "device_common.cuh"
#include "error.hpp"
#include "mma_device.cuh"

namespace flashot::detail::cuda {
namespace {

constexpr int kApThreads = 128;      // 4 warps
constexpr int kApRows = 64;          // (BM) 16 rows per warp
constexpr int kApTile = 64;          // (BN) columns per tile: eight n8 score subtiles, four k16 steps of P·V
constexpr int kApChunk = 128;        // (KC) value columns per block at most: sixteen n8 subtiles
constexpr int kApVStride = kApTile + 8;  // halves per shared row of the V tile (+16 bytes: conflict-free fragments)
// Weights are formed as exp2(score − lse2_i + kWeightShift) ∈ [0, 2^14]: fp16 keeps them normal down to 2^−28 of the
// row's total and far from its overflow (65504).
constexpr float kWeightShift = 14.f;

/// Shared-memory layout of one block, in halves: x rows, y tile, [u rows, w tile,] V tile.
struct ApplyLayout {
  int x_stride, e_stride, arrays, x_rows, y_tile, u_rows, w_tile, v_tile, total;
  __host__ __device__ ApplyLayout(int padded_d, int padded_e, int terms, bool bilinear, int value_rows) {
    x_stride = padded_d + 8;
    e_stride = padded_e + 8;
    arrays = terms == 3 ? 2 : 1;
    x_rows = 0;
    y_tile = x_rows + arrays * kApRows * x_stride;
    u_rows = y_tile + arrays * kApTile * x_stride;
    w_tile = u_rows + (bilinear ? 2 * kApRows * e_stride : 0);
    v_tile = w_tile + (bilinear ? 2 * kApTile * e_stride : 0);
    total = v_tile + 2 * value_rows * kApVStride;
  }
};

/// Copies `count` rows [first, first + count) of a 16-bit operand (rows of `width` halves) into shared rows of
/// `stride` halves; rows at or beyond `end` become zeros. Does not wait.
__device__ __forceinline__ void load_rows(std::uint16_t* dst, int stride, const std::uint16_t* src, int width,
                                          int first, int count, int end) {
  const int vecs = count * (width / 8);
  for (int e = threadIdx.x; e < vecs; e += kApThreads) {
    const int r = e / (width / 8), k8 = e % (width / 8), j = first + r;
    const bool ok = j < end;
    copy_async16(dst + r * stride + k8 * 8, src + std::size_t(ok ? j : 0) * width + k8 * 8, ok);
  }
}

/// s (16 × 64, C fragments of eight n8 subtiles) = A rows [row0, row0 + 16) · B rows [0, 64) over ks k16 steps,
/// from shared memory. TERMS = 3 adds hi·lo + lo·hi.
template <int TERMS, bool BF16>
__device__ __forceinline__ void tile_products(float (&s)[8][4], const std::uint16_t* a_hi, const std::uint16_t* a_lo,
                                              const std::uint16_t* b_hi, const std::uint16_t* b_lo, int stride,
                                              int row0, int ks_count) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int q = 0; q < 4; ++q) s[nt][q] = 0.f;
#pragma unroll 1
  for (int ks = 0; ks < ks_count; ++ks) {
    std::uint32_t a[4], al[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int o = (row0 + g + (q & 1) * 8) * stride + ks * 16 + 2 * t + (q >> 1) * 8;
      a[q] = *reinterpret_cast<const std::uint32_t*>(a_hi + o);
      if constexpr (TERMS == 3) al[q] = *reinterpret_cast<const std::uint32_t*>(a_lo + o);
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int o = (nt * 8 + g) * stride + ks * 16 + 2 * t;
      const std::uint32_t b0 = *reinterpret_cast<const std::uint32_t*>(b_hi + o);
      const std::uint32_t b1 = *reinterpret_cast<const std::uint32_t*>(b_hi + o + 8);
      mma_16816(s[nt], a, b0, b1, BF16);
      if constexpr (TERMS == 3) {
        const std::uint32_t l0 = *reinterpret_cast<const std::uint32_t*>(b_lo + o);
        const std::uint32_t l1 = *reinterpret_cast<const std::uint32_t*>(b_lo + o + 8);
        mma_16816(s[nt], a, l0, l1, BF16);
        mma_16816(s[nt], al, b0, b1, BF16);
      }
    }
  }
}

/// Two fp32 values (consecutive columns) → their fp16 hi and lo halves, packed as one A-fragment register each.
__device__ __forceinline__ void split_pair(float a, float b, std::uint32_t& hi, std::uint32_t& lo) {
  const __half2 h = __floats2half2_rn(a, b);
  const float2 back = __half22float2(h);
  const __half2 l = __floats2half2_rn(a - back.x, b - back.y);
  hi = *reinterpret_cast<const std::uint32_t*>(&h);
  lo = *reinterpret_cast<const std::uint32_t*>(&l);
}

struct ApplyArgs {
  PointSet rows, cols;
  MmaOperands rop, cop;  // scores
  MmaOperands uop, wop;  // bilinear only
  MmaValues values;
  const float* h;
  const float* lse2;
  Scale sc;
  float alpha;           // α over the operands' scales
  float bilinear_scale;  // ⟨u, w⟩ of the stored operands → [−1, 1]
  float out_scale;       // undoes 2^kWeightShift (and the bilinear scales)
  float wsum_scale;      // undoes 2^kWeightShift
  int cols_per_split;
  float* out;
  float* wsum;
  // Block lists (LISTS): the row block's listed column ranges instead of a split of all columns, and its segment's
  // scales; alpha is then the segment's α times operand_inverse.
  BlockLists lists;
  const SegmentScale* seg;
  float operand_inverse;  // 1 / (rop.scale · cop.scale)
};

/// TERMS / BF16: the scores' operands (mma.cuh). BILINEAR: weights times ⟨u_i, w_j⟩ (split fp16, three products).
/// LISTS: the columns are the listed ranges of the block's row block (blocks.cuh), with its segment's scales.
template <int TERMS, bool BF16, bool BILINEAR, bool LISTS = false>
__global__ void __launch_bounds__(kApThreads) apply_mma_kernel(ApplyArgs args) {
  extern __shared__ __align__(16) std::uint16_t smem[];
  __shared__ __align__(8) float bias_s[kApTile];  // (BN) column biases of the current tile
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int dp = args.rop.padded_d, ep = BILINEAR ? args.uop.padded_d : 0;
  const int i0 = blockIdx.x * kApRows;
  const int kc0 = blockIdx.z * kApChunk;
  const int kc = min(kApChunk, args.values.rows - kc0);  // value columns of this block, a multiple of 8
  const ApplyLayout L(dp, ep, TERMS, BILINEAR, min(kApChunk, args.values.rows));
  const int arr = kApRows * L.x_stride, tarr = kApTile * L.x_stride;
  const int uarr = kApRows * L.e_stride, warr = kApTile * L.e_stride, varr = kc * kApVStride;

  // This block's rows of the operands stay in shared memory for the whole column range: (arrays, BM, DP + 8).
  load_rows(smem + L.x_rows, L.x_stride, args.rop.hi, dp, i0, kApRows, args.rows.count);
  if constexpr (TERMS == 3) load_rows(smem + L.x_rows + arr, L.x_stride, args.rop.lo, dp, i0, kApRows, args.rows.count);
  if constexpr (BILINEAR) {
    load_rows(smem + L.u_rows, L.e_stride, args.uop.hi, ep, i0, kApRows, args.rows.count);
    load_rows(smem + L.u_rows + uarr, L.e_stride, args.uop.lo, ep, i0, kApRows, args.rows.count);
  }
  asm volatile("cp.async.commit_group;\n" ::);

  float shift[2], total[2] = {0.f, 0.f};  // rows g and g + 8 of the warp's m16 tile
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int i = i0 + warp * 16 + g + hh * 8;
    shift[hh] = i < args.rows.count ? args.lse2[i] - kWeightShift : INFINITY;
  }
  float acc[kApChunk / 8][4];  // (KC / 8 n8 subtiles, C fragment) of the warp's 16 rows
#pragma unroll
  for (int nv = 0; nv < kApChunk / 8; ++nv)
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[nv][q] = 0.f;

  Scale sc = args.sc;
  float alpha = args.alpha;
  if constexpr (LISTS) {
    static_assert(kPatternBlock % kApRows == 0, "a block's rows lie in one row block of the lists");
    const SegmentScale ss = args.seg[args.lists.segment[i0 / kPatternBlock]];
    sc.c1 = ss.c1;
    sc.s = ss.s;
    alpha = ss.alpha * args.operand_inverse;
  }
  // One 64-column tile [j0, j0 + 64) of the columns below j_end.
  auto tile = [&](const int j0, const int j_end) {
    __syncthreads();  // the previous tile is consumed
    load_rows(smem + L.y_tile, L.x_stride, args.cop.hi, dp, j0, kApTile, j_end);
    if constexpr (TERMS == 3) load_rows(smem + L.y_tile + tarr, L.x_stride, args.cop.lo, dp, j0, kApTile, j_end);
    if constexpr (BILINEAR) {
      load_rows(smem + L.w_tile, L.e_stride, args.wop.hi, ep, j0, kApTile, j_end);
      load_rows(smem + L.w_tile + warr, L.e_stride, args.wop.lo, ep, j0, kApTile, j_end);
    }
    // (2, KC, BN + 8): rows c of the transposed values, columns j0 .. j0 + 63; a vector past j_end reads zeros
    // (j_end is a multiple of the tile, or the column count, past which the values are zero-padded).
    for (int e = threadIdx.x; e < kc * (kApTile / 8); e += kApThreads) {
      const int c = e / (kApTile / 8), v8 = e % (kApTile / 8);
      const bool ok = j0 + v8 * 8 < j_end;
      const std::size_t src = std::size_t(kc0 + c) * args.values.stride + (ok ? j0 + v8 * 8 : 0);
      copy_async16(smem + L.v_tile + c * kApVStride + v8 * 8, args.values.hi + src, ok);
      copy_async16(smem + L.v_tile + varr + c * kApVStride + v8 * 8, args.values.lo + src, ok);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    if (threadIdx.x < kApTile) {
      const int j = j0 + threadIdx.x;
      bias_s[threadIdx.x] = j < j_end ? column_bias(args.cols, args.h, sc, j) : -INFINITY;
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();

    float s[8][4];  // (n8, C fragment) scores, then weights, of the warp's 16 × 64 tile
    tile_products<TERMS, BF16>(s, smem + L.x_rows, smem + L.x_rows + arr, smem + L.y_tile, smem + L.y_tile + tarr,
                               L.x_stride, warp * 16, dp / 16);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float2 b2 = *reinterpret_cast<const float2*>(&bias_s[nt * 8 + 2 * t]);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float p = fast_exp2(fmaf(alpha, s[nt][q], q & 1 ? b2.y : b2.x) - shift[q >> 1]);
        total[q >> 1] += p;
        s[nt][q] = p;
      }
    }
    if constexpr (BILINEAR) {
      float uw[8][4];  // (n8, C fragment) ⟨u_i, w_j⟩ of the stored operands
      tile_products<3, false>(uw, smem + L.u_rows, smem + L.u_rows + uarr, smem + L.w_tile, smem + L.w_tile + warr,
                              L.e_stride, warp * 16, ep / 16);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int q = 0; q < 4; ++q) s[nt][q] *= uw[nt][q] * args.bilinear_scale;
    }
    // Weights × values: the C fragments of score subtiles 2kk and 2kk + 1 are the A fragment of k16 step kk.
    const std::uint16_t* v_hi = smem + L.v_tile;
    const std::uint16_t* v_lo = v_hi + varr;
#pragma unroll
    for (int kk = 0; kk < kApTile / 16; ++kk) {
      std::uint32_t ph[4], pl[4];
      split_pair(s[2 * kk][0], s[2 * kk][1], ph[0], pl[0]);
      split_pair(s[2 * kk][2], s[2 * kk][3], ph[1], pl[1]);
      split_pair(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[2], pl[2]);
      split_pair(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[3], pl[3]);
#pragma unroll
      for (int nv = 0; nv < kApChunk / 8; ++nv) {
        if (nv * 8 >= kc) break;
        const int o = (nv * 8 + g) * kApVStride + kk * 16 + 2 * t;
        const std::uint32_t b0 = *reinterpret_cast<const std::uint32_t*>(v_hi + o);
        const std::uint32_t b1 = *reinterpret_cast<const std::uint32_t*>(v_hi + o + 8);
        const std::uint32_t l0 = *reinterpret_cast<const std::uint32_t*>(v_lo + o);
        const std::uint32_t l1 = *reinterpret_cast<const std::uint32_t*>(v_lo + o + 8);
        // The k16 step's three products into a fresh fragment, then added to the running sum in fp32 (round to
        // nearest). Accumulating every step on the tensor cores instead biased the sums low: their fp32 adds do
        // not round to nearest, and each row's sum takes 12 adds a tile, ≈ 1.3·10⁻³ relative at 60 000 columns
        // (docs/multiscale.md, "Primal cost at d = 50").
        float step[4] = {0.f, 0.f, 0.f, 0.f};
        mma_16816(step, ph, b0, b1, false);
        mma_16816(step, ph, l0, l1, false);
        mma_16816(step, pl, b0, b1, false);
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[nv][q] += step[q];
      }
    }
  };
  if constexpr (LISTS) {
    const int rb = i0 / kPatternBlock;
    for (int q = args.lists.offsets[rb]; q < args.lists.offsets[rb + 1]; ++q) {
      const int2 range = args.lists.ranges[q];
      const int j_hi = min(args.cols.count, range.y * kPatternBlock);
      for (int j0 = range.x * kPatternBlock; j0 < j_hi; j0 += kApTile) tile(j0, j_hi);
    }
  } else {
    const int j_begin = blockIdx.y * args.cols_per_split;
    const int j_end = min(args.cols.count, j_begin + args.cols_per_split);
    for (int j0 = j_begin; j0 < j_end; j0 += kApTile) tile(j0, j_end);
  }
  asm volatile("cp.async.wait_group 0;\n" ::);  // an empty column range leaves the row copies in flight

  const int k = args.values.k;
#pragma unroll
  for (int nv = 0; nv < kApChunk / 8; ++nv) {
    if (nv * 8 >= kc) break;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int i = i0 + warp * 16 + g + (q >> 1) * 8;
      const int c = kc0 + nv * 8 + 2 * t + (q & 1);
      if (i < args.rows.count && c < k)
        atomicAdd(&args.out[std::size_t(i) * k + c], acc[nv][q] * args.out_scale * args.values.inverse_scale[c]);
    }
  }
  if (blockIdx.z == 0) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float sum = total[hh];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int i = i0 + warp * 16 + g + hh * 8;
      if (t == 0 && i < args.rows.count) atomicAdd(&args.wsum[i], sum * args.wsum_scale);
    }
  }
}

template <int TERMS, bool BF16, bool BILINEAR, bool LISTS = false>
void launch_apply_kernel(const ApplyArgs& args, dim3 grid, cudaStream_t stream) {
  const ApplyLayout L(args.rop.padded_d, BILINEAR ? args.uop.padded_d : 0, TERMS, BILINEAR,
                      std::min(kApChunk, args.values.rows));
  const int bytes = L.total * 2;
  allow_shared_bytes<apply_mma_kernel<TERMS, BF16, BILINEAR, LISTS>>(ApplyLayout(128, 128, 3, true, kApChunk).total *
                                                                     2);
  apply_mma_kernel<TERMS, BF16, BILINEAR, LISTS><<<grid, kApThreads, bytes, stream>>>(args);
}

// ---- operand preparation ----------------------------------------------------------------------------------------
constexpr int kPrepThreads = 256;

/// column_max (k) = bits of max_j |v_jc| (non-negative floats order as their bit patterns).
__global__ void column_max_kernel(const float* __restrict__ v, int count, int k, unsigned* __restrict__ column_max) {
  const int c = blockIdx.y * 32 + threadIdx.x;
  if (c >= k) return;
  float m = 0.f;
  for (int j = blockIdx.x * 256 + threadIdx.y; j < min(count, blockIdx.x * 256 + 256); j += 8)
    m = fmaxf(m, fabsf(v[std::size_t(j) * k + c]));
  atomicMax(&column_max[c], __float_as_uint(m));
}

__device__ __forceinline__ float column_scale(unsigned max_bits) {
  const float m = __uint_as_float(max_bits);
  return m > 0.f && m < INFINITY ? exp2f(float(7 - ilogbf(m))) : 1.f;
}

__global__ void split_values_kernel(const float* __restrict__ v, int count, int k, int rows, int stride,
                                    const unsigned* __restrict__ column_max, std::uint16_t* __restrict__ hi,
                                    std::uint16_t* __restrict__ lo, float* __restrict__ inverse_scale) {
  const std::size_t total = std::size_t(rows) * stride;
  for (std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += std::size_t(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(e / stride), j = static_cast<int>(e % stride);
    const float scale = c < k ? column_scale(column_max[c]) : 1.f;
    const float x = (c < k && j < count) ? v[std::size_t(j) * k + c] * scale : 0.f;
    const __half h = __float2half_rn(x);
    const __half l = __float2half_rn(x - __half2float(h));
    hi[e] = __half_as_ushort(h);
    lo[e] = __half_as_ushort(l);
    if (j == 0) inverse_scale[c] = 1.f / scale;
  }
}

__global__ void split_rows_kernel(const float* __restrict__ src, int count, int width, int padded, float scale,
                                  MmaMode mode, std::uint16_t* __restrict__ hi, std::uint16_t* __restrict__ lo) {
  const std::size_t total = std::size_t(count) * padded;
  for (std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t i = e / padded;
    const int c = static_cast<int>(e % padded);
    const float x = c < width ? src[i * width + c] * scale : 0.f;
    if (mode == MmaMode::kBf16) {
      hi[e] = __bfloat16_as_ushort(__float2bfloat16_rn(x));
      continue;
    }
    const __half h = __float2half_rn(x);
    hi[e] = __half_as_ushort(h);
    if (mode == MmaMode::kSplitFp16) lo[e] = __half_as_ushort(__float2half_rn(x - __half2float(h)));
  }
}

int prep_blocks(std::size_t elements) {
  return static_cast<int>(std::min<std::size_t>((elements + kPrepThreads - 1) / kPrepThreads, 65535));
}

// ---- fp32 FMA bilinear application (small d and e) -------------------------------------------------------------
constexpr int kBfThreads = 128;  // one row per thread
constexpr int kBfTile = 64;

/// M bounds d, e and the value columns of one block (grid.z chunks k by M).
template <int M>
__global__ void __launch_bounds__(kBfThreads) bilinear_fma_kernel(PointSet rows, PointSet cols,
                                                                  const float* __restrict__ h, Scale sc,
                                                                  const float* __restrict__ lse2,
                                                                  const float* __restrict__ u,
                                                                  const float* __restrict__ w, int e,
                                                                  const float* __restrict__ v, int k,
                                                                  int cols_per_split, float* __restrict__ out,
                                                                  float* __restrict__ wsum) {
  __shared__ float yt[kBfTile][M], wt[kBfTile][M], vt[kBfTile][M], bt[kBfTile];  // (BN, M) / (BN)
  const int d = sc.d;
  const int i = blockIdx.x * kBfThreads + threadIdx.x;
  const bool valid = i < rows.count;
  const int kc0 = blockIdx.z * M;
  float xr[M], ur[M], acc[M];
#pragma unroll
  for (int q = 0; q < M; ++q) {
    xr[q] = valid && q < d ? rows.points[std::size_t(i) * d + q] : 0.f;
    ur[q] = valid && q < e ? u[std::size_t(i) * e + q] : 0.f;
    acc[q] = 0.f;
  }
  const float shift = valid ? lse2[i] : INFINITY;
  float total = 0.f;
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(cols.count, j_begin + cols_per_split);
  for (int t0 = j_begin; t0 < j_end; t0 += kBfTile) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < kBfTile * M; idx += kBfThreads) {
      const int c = idx / M, q = idx % M, j = t0 + c;
      const bool in = j < j_end;
      yt[c][q] = in && q < d ? cols.points[std::size_t(j) * d + q] : 0.f;
      wt[c][q] = in && q < e ? w[std::size_t(j) * e + q] : 0.f;
      vt[c][q] = in && kc0 + q < k ? v[std::size_t(j) * k + kc0 + q] : 0.f;
    }
    if (threadIdx.x < kBfTile) {
      const int j = t0 + threadIdx.x;
      bt[threadIdx.x] = j < j_end ? column_bias(cols, h, sc, j) : -INFINITY;
    }
    __syncthreads();
    const int ncols = min(kBfTile, j_end - t0);
    for (int c = 0; c < ncols; ++c) {
      // The dot product unscaled, then one rounding of α·dot + bias (as apply.cu's small kernel).
      float dot = 0.f, uw = 0.f;
#pragma unroll
      for (int q = 0; q < M; ++q) {
        dot = fmaf(xr[q], yt[c][q], dot);
        uw = fmaf(ur[q], wt[c][q], uw);
      }
      const float p = fast_exp2(fmaf(sc.alpha, dot, bt[c]) - shift);
      total += p;
      const float pw = p * uw;
#pragma unroll
      for (int q = 0; q < M; ++q) acc[q] = fmaf(pw, vt[c][q], acc[q]);
    }
  }
  if (!valid) return;
  if (blockIdx.z == 0) atomicAdd(&wsum[i], total);
#pragma unroll
  for (int q = 0; q < M; ++q)
    if (kc0 + q < k) atomicAdd(&out[std::size_t(i) * k + kc0 + q], acc[q]);
}

/// The arguments both applications share; the caller adds the scales and the column split (or the lists).
ApplyArgs apply_args(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
                     const float* h, const float* lse2, const MmaValues& values, float* out, float* wsum) {
  ApplyArgs args{};
  args.rows = rows;
  args.cols = cols;
  args.rop = rop;
  args.cop = cop;
  args.values = values;
  args.h = h;
  args.lse2 = lse2;
  args.operand_inverse = 1.f / (rop.scale * cop.scale);
  args.wsum_scale = std::exp2(-kWeightShift);
  args.out_scale = args.wsum_scale;
  args.out = out;
  args.wsum = wsum;
  return args;
}

}  // namespace

int mma_values_rows(int k) { return (k + 7) / 8 * 8; }
int mma_values_stride(int count) { return (count + kApTile - 1) / kApTile * kApTile; }

MmaValues launch_split_values(const float* v, int count, int k, std::uint16_t* hi, std::uint16_t* lo,
                              float* inverse_scale, unsigned* column_max, cudaStream_t stream) {
  MmaValues out{hi, lo, inverse_scale, k, mma_values_rows(k), mma_values_stride(count)};
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(column_max, 0, sizeof(unsigned) * k, stream));
  column_max_kernel<<<dim3(div_up(count, 256), div_up(k, 32)), dim3(32, 8), 0, stream>>>(v, count, k, column_max);
  FLASHOT_CUDA_CHECK_LAUNCH();
  split_values_kernel<<<prep_blocks(std::size_t(out.rows) * out.stride), kPrepThreads, 0, stream>>>(
      v, count, k, out.rows, out.stride, column_max, hi, lo, inverse_scale);
  FLASHOT_CUDA_CHECK_LAUNCH();
  return out;
}

void launch_split_rows(const float* src, int count, int width, int padded, float scale, MmaMode mode,
                       std::uint16_t* hi, std::uint16_t* lo, cudaStream_t stream) {
  if (count == 0) return;
  split_rows_kernel<<<prep_blocks(std::size_t(count) * padded), kPrepThreads, 0, stream>>>(src, count, width, padded,
                                                                                           scale, mode, hi, lo);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

ReductionPlan plan_apply_mma(const PointSet& rows, const PointSet& cols, int resident_blocks) {
  return plan_reduction(rows.count, cols.count, kApRows, kApTile, resident_blocks);
}

void launch_apply_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
                      const float* h, const Scale& scale, const float* lse2, const MmaValues& values,
                      const MmaBilinear* bilinear, const ReductionPlan& plan, float* out, float* wsum,
                      cudaStream_t stream) {
  if (!mma_supports(rop.padded_d) || (bilinear != nullptr && !mma_supports(bilinear->u.padded_d)))
    throw std::logic_error("tensor-core plan application asked for a dimension outside 16..128");
  ApplyArgs args = apply_args(rows, cols, rop, cop, h, lse2, values, out, wsum);
  args.sc = scale;
  args.alpha = scale.alpha / (rop.scale * cop.scale);
  args.cols_per_split = plan.cols_per_split;
  if (bilinear != nullptr) {
    args.uop = bilinear->u;
    args.wop = bilinear->w;
    args.bilinear_scale = bilinear->scale;
    args.out_scale /= bilinear->scale * bilinear->u.scale * bilinear->w.scale;
  }
  const dim3 grid(plan.row_blocks, plan.splits, (values.rows + kApChunk - 1) / kApChunk);
  const bool bil = bilinear != nullptr;
  if (rop.mode == MmaMode::kSplitFp16) {
    if (bil) launch_apply_kernel<3, false, true>(args, grid, stream);
    else launch_apply_kernel<3, false, false>(args, grid, stream);
  } else if (rop.mode == MmaMode::kFp16) {
    if (bil) launch_apply_kernel<1, false, true>(args, grid, stream);
    else launch_apply_kernel<1, false, false>(args, grid, stream);
  } else {
    if (bil) launch_apply_kernel<1, true, true>(args, grid, stream);
    else launch_apply_kernel<1, true, false>(args, grid, stream);
  }
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_block_apply_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& rop,
                            const MmaOperands& cop, const float* h, const BlockLists& lists, const SegmentScale* seg,
                            const float* lse2, const MmaValues& values, float* out, float* wsum,
                            cudaStream_t stream) {
  if (!mma_supports(rop.padded_d))
    throw std::logic_error("tensor-core block application asked for a dimension outside 16..128");
  if (rows.count == 0) return;
  ApplyArgs args = apply_args(rows, cols, rop, cop, h, lse2, values, out, wsum);
  args.cols_per_split = cols.count;
  args.lists = lists;
  args.seg = seg;
  const dim3 grid(div_up(rows.count, kApRows), 1, (values.rows + kApChunk - 1) / kApChunk);
  if (rop.mode == MmaMode::kSplitFp16) launch_apply_kernel<3, false, false, true>(args, grid, stream);
  else if (rop.mode == MmaMode::kFp16) launch_apply_kernel<1, false, false, true>(args, grid, stream);
  else launch_apply_kernel<1, true, false, true>(args, grid, stream);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

ReductionPlan plan_apply_bilinear_fma(const PointSet& rows, const PointSet& cols, int resident_blocks) {
  return plan_reduction(rows.count, cols.count, kBfThreads, kBfTile, resident_blocks);
}

void launch_apply_bilinear_fma(const PointSet& rows, const PointSet& cols, const float* h, const Scale& scale,
                               const float* lse2, const float* u, const float* w, int e, const float* v, int k,
                               const ReductionPlan& plan, float* out, float* wsum, cudaStream_t stream) {
  if (!bilinear_fma_supports(scale.d, e))
    throw std::logic_error("fp32 bilinear application asked for d or e above 16");
  const int cps = plan.cols_per_split;
  if (scale.d <= 4 && e <= 4) {
    const dim3 grid(plan.row_blocks, plan.splits, div_up(k, 4));
    bilinear_fma_kernel<4><<<grid, kBfThreads, 0, stream>>>(rows, cols, h, scale, lse2, u, w, e, v, k, cps, out, wsum);
  } else {
    const dim3 grid(plan.row_blocks, plan.splits, div_up(k, 16));
    bilinear_fma_kernel<16><<<grid, kBfThreads, 0, stream>>>(rows, cols, h, scale, lse2, u, w, e, v, k, cps, out,
                                                             wsum);
  }
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace flashot::detail::cuda
