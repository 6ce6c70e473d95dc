// Block-sparse kernels (docs/block-sparse.md, blocks.cuh): the tiled fp32 kernels of softmin.cu, apply.cu and
// top_k.cu with the column loop walking the row block's listed ranges, and each thread block's scalars read from
// its row block's segment (a listed pair's two blocks share one segment, so the column biases use it too).
// A thread block's 64 rows lie in one row block (kPatternBlock is a multiple of kTileRows).

#include <cmath>

#include "block_tiles.cuh"
#include "blocks.cuh"
#include "device_common.cuh"
#include "error.hpp"

namespace flashot::detail::cuda {
namespace {

static_assert(kPatternBlock % kTileRows == 0 && kPatternBlock % kTileCols == 0, "blocks hold whole tiles");
static_assert(kTileCols == kMmaTile, "listed_tiles (block_tiles.cuh) counts the fp32 kernels' tiles too");

/// Calls body(j0, j_end) for every 64-column tile of row block rb's lists, tiles [t_begin, t_end) of the flattened
/// sequence (j_end: the end of the tile's range, for masking).
template <class Body>
__device__ __forceinline__ void walk_tiles(const BlockLists& lists, int rb, int cols_count, int t_begin, int t_end,
                                           Body&& body) {
  int t = 0;
  for (int q = lists.offsets[rb]; q < lists.offsets[rb + 1] && t < t_end; ++q) {
    const int2 r = lists.ranges[q];
    const int jb = r.x * kPatternBlock, je = min(r.y * kPatternBlock, cols_count);
    const int nt = (je - jb + kTileCols - 1) / kTileCols;
    const int lo = max(t_begin - t, 0), hi = min(t_end - t, nt);
    for (int tt = lo; tt < hi; ++tt) body(jb + tt * kTileCols, je);
    t += nt;
  }
}

__device__ __forceinline__ float bias_of(const PointSet& cols, const float* h, const SegmentScale& sc, int j) {
  return sc.c1 * (h[j] - sc.s * cols.norm2[j]) + kLog2e * cols.logw[j];
}

template <int DK>
__global__ void __launch_bounds__(kTileThreads) block_lse_kernel(PointSet rows, PointSet cols, const float* __restrict__ h,
                                                                 int d, BlockLists lists,
                                                                 const SegmentScale* __restrict__ seg,
                                                                 float2* __restrict__ partials) {
  __shared__ TileStage<DK> st;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int i0 = blockIdx.x * kTileRows;
  const int rb = i0 / kPatternBlock;
  const SegmentScale sc = seg[lists.segment[rb]];
  const int tiles = listed_tiles(lists, rb, cols.count);
  const int per = (tiles + gridDim.y - 1) / gridDim.y;
  const int t_begin = blockIdx.y * per, t_end = min(tiles, t_begin + per);
  float run_max[4], run_sum[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) run_max[r] = kNoMax, run_sum[r] = 0.f;
  walk_tiles(lists, rb, cols.count, t_begin, t_end, [&](int j0, int j_end) {
    float acc[4][4];
    tile_dots<DK>(rows.points, rows.count, i0, cols.points, j_end, j0, d, st, acc);
    float v[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = j0 + tx + 16 * c;
      v[c] = j < j_end ? bias_of(cols, h, sc, j) : -INFINITY;
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
  });
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

// ---- Small d (d ≤ 4): the register kernel of small_d.cuh (lse_small_kernel, D ≤ 4) on one row block per thread
// block: 64 threads × 4 rows in registers (coordinates pre-multiplied by the segment's α), a 256-column block of
// columns at a time in shared memory (one float4 per column), the row block's listed column blocks split evenly over
// gridDim.y.
constexpr int kBlockSmallThreads = 64;
constexpr int kBlockSmallRows = kPatternBlock / kBlockSmallThreads;  // 4

/// Number of column blocks row block rb lists.
__device__ __forceinline__ int list_blocks(const BlockLists& lists, int rb) {
  int t = 0;
  for (int q = lists.offsets[rb]; q < lists.offsets[rb + 1]; ++q) t += lists.ranges[q].y - lists.ranges[q].x;
  return t;
}

/// SHIFTED (launch_block_lse with the rows' own potential `self`): every exponent is taken against the row's
/// predicted log2-sum M_i = c1·(s‖x_i‖² − self_i) instead of a running maximum — the LSE the row's current
/// potential implies, exact at the fixed point — so an entry costs its score, one subtraction and one exponential
/// (no maximum, no rescaling); block_shift_check_kernel then flags the row blocks whose merged sum left
/// [2^kSumsMinLog2, 2^kSumsMaxLog2], and the plain kernel (redo: only those blocks) recomputes them.
template <int D, bool SHIFTED>
__global__ void __launch_bounds__(kBlockSmallThreads) block_lse_small_kernel(PointSet rows, PointSet cols,
                                                                             const float* __restrict__ h,
                                                                             BlockLists lists,
                                                                             const SegmentScale* __restrict__ seg,
                                                                             float2* __restrict__ partials,
                                                                             const float* __restrict__ self,
                                                                             const int* __restrict__ redo) {
  static_assert(D >= 1 && D <= 4, "register block kernel: d ≤ 4");
  __shared__ float4 tile[kPatternBlock];  // (BN): (q0, q1, q2, v) for D ≤ 3, (q0..q3) for D = 4
  __shared__ float vtile[kPatternBlock];  // (BN): v for D = 4
  const int rb = blockIdx.x;
  if (!SHIFTED && redo != nullptr && redo[rb] == 0) return;  // the shifted pass stood for this block
  const SegmentScale sc = seg[lists.segment[rb]];
  const int i_base = rb * kPatternBlock + threadIdx.x;
  float xr[kBlockSmallRows][D];
  float run_max[kBlockSmallRows], run_sum[kBlockSmallRows];
#pragma unroll
  for (int r = 0; r < kBlockSmallRows; ++r) {
    const int i = i_base + r * kBlockSmallThreads;
#pragma unroll
    for (int k = 0; k < D; ++k) xr[r][k] = i < rows.count ? sc.alpha * rows.points[std::size_t(i) * D + k] : 0.f;
    run_max[r] = kNoMax;
    if constexpr (SHIFTED) {
      if (i < rows.count) run_max[r] = sc.c1 * (sc.s * rows.norm2[i] - self[i]);
    }
    run_sum[r] = 0.f;
  }
  const int total = list_blocks(lists, rb);
  const int per = (total + int(gridDim.y) - 1) / int(gridDim.y);
  const int t_begin = int(blockIdx.y) * per, t_end = min(total, t_begin + per);
  int t = 0;
  for (int q = lists.offsets[rb]; q < lists.offsets[rb + 1] && t < t_end; ++q) {
    const int2 range = lists.ranges[q];
    for (int cb = range.x; cb < range.y; ++cb, ++t) {
      if (t < t_begin || t >= t_end) continue;
      const int t0 = cb * kPatternBlock, j_end = min(cols.count, t0 + kPatternBlock);
      __syncthreads();
      for (int c = threadIdx.x; c < kPatternBlock; c += kBlockSmallThreads) {
        const int j = t0 + c;
        float qv[4] = {0.f, 0.f, 0.f, 0.f};
        float v = -INFINITY;
        if (j < j_end) {
#pragma unroll
          for (int k = 0; k < D; ++k) qv[k] = cols.points[std::size_t(j) * D + k];
          v = bias_of(cols, h, sc, j);
        }
        if constexpr (D <= 3) {
          tile[c] = make_float4(qv[0], qv[1], qv[2], v);
        } else {
          tile[c] = make_float4(qv[0], qv[1], qv[2], qv[3]);
          vtile[c] = v;
        }
      }
      __syncthreads();
      const int ncols = j_end - t0;
      for (int c0 = 0; c0 < ncols; c0 += 8) {
        float s[kBlockSmallRows][8];
#pragma unroll
        for (int cc = 0; cc < 8; ++cc) {
          const float4 qq = tile[c0 + cc];
          const float v = D <= 3 ? qq.w : vtile[c0 + cc];
#pragma unroll
          for (int r = 0; r < kBlockSmallRows; ++r) {
            float e = v;
            e = fmaf(xr[r][0], qq.x, e);
            if constexpr (D > 1) e = fmaf(xr[r][1], qq.y, e);
            if constexpr (D > 2) e = fmaf(xr[r][2], qq.z, e);
            if constexpr (D > 3) e = fmaf(xr[r][3], qq.w, e);
            s[r][cc] = e;
          }
        }
#pragma unroll
        for (int r = 0; r < kBlockSmallRows; ++r) {
          if constexpr (!SHIFTED) {
            float top = s[r][0];
#pragma unroll
            for (int cc = 1; cc < 8; ++cc) top = fmaxf(top, s[r][cc]);
            if (top > run_max[r]) {
              run_sum[r] *= fast_exp2(run_max[r] - top);
              run_max[r] = top;
            }
          }
          float sum = 0.f;
#pragma unroll
          for (int cc = 0; cc < 8; ++cc) sum += fast_exp2(s[r][cc] - run_max[r]);
          run_sum[r] += sum;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kBlockSmallRows; ++r) {
    const int i = i_base + r * kBlockSmallThreads;
    if (i < rows.count) partials[std::size_t(blockIdx.y) * rows.count + i] = make_float2(run_max[r], run_sum[r]);
  }
}

/// P·V for d ≤ 4 and k ≤ KV (KV = 4 or 8: the barycentric projection of 3-D points, k = 3, and the row pass
/// P·[Y | ‖y‖² | 1] after a solve, k = d + 2 ≤ 6), on the register kernel's layout: one row block per thread block,
/// 64 threads × 4 rows in registers, a column block of coordinates, biases and V rows in shared memory; each entry
/// is its score, one exponential against the row's log-normaliser and KV + 1 FMAs. (The tiled kernel below
/// multiplies a 64-wide chunk of V, which at k = 3 is 21 times the work.)
template <int D, int KV>
__global__ void __launch_bounds__(kBlockSmallThreads) block_apply_small_kernel(PointSet rows, PointSet cols,
                                                                               const float* __restrict__ h,
                                                                               BlockLists lists,
                                                                               const SegmentScale* __restrict__ seg,
                                                                               const float* __restrict__ lse2,
                                                                               const float* __restrict__ v, int k,
                                                                               float* __restrict__ out,
                                                                               float* __restrict__ wsum) {
  static_assert(D >= 1 && D <= 4, "register block kernel: d ≤ 4");
  static_assert(KV == 4 || KV == 8, "register block kernel: V in one or two float4 per column");
  constexpr int kQuads = KV / 4;
  __shared__ float4 tile[kPatternBlock];         // (BN): (q0, q1, q2, bias) for D ≤ 3, (q0..q3) for D = 4
  __shared__ float vtile[kPatternBlock];         // (BN): bias for D = 4
  __shared__ float4 vals[kQuads][kPatternBlock];  // (KV / 4, BN): the columns' rows of V, zeros past k
  const int rb = blockIdx.x;
  const SegmentScale sc = seg[lists.segment[rb]];
  const int i_base = rb * kPatternBlock + threadIdx.x;
  float xr[kBlockSmallRows][D], shift[kBlockSmallRows], total[kBlockSmallRows];
  float4 acc[kBlockSmallRows][kQuads];
#pragma unroll
  for (int r = 0; r < kBlockSmallRows; ++r) {
    const int i = i_base + r * kBlockSmallThreads;
#pragma unroll
    for (int c = 0; c < D; ++c) xr[r][c] = i < rows.count ? sc.alpha * rows.points[std::size_t(i) * D + c] : 0.f;
    shift[r] = i < rows.count ? lse2[i] : INFINITY;
    total[r] = 0.f;
#pragma unroll
    for (int u = 0; u < kQuads; ++u) acc[r][u] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  for (int q = lists.offsets[rb]; q < lists.offsets[rb + 1]; ++q) {
    const int2 range = lists.ranges[q];
    for (int cb = range.x; cb < range.y; ++cb) {
      const int t0 = cb * kPatternBlock, j_end = min(cols.count, t0 + kPatternBlock);
      __syncthreads();
      for (int c = threadIdx.x; c < kPatternBlock; c += kBlockSmallThreads) {
        const int j = t0 + c;
        float qv[4] = {0.f, 0.f, 0.f, 0.f}, vv[KV];
#pragma unroll
        for (int e = 0; e < KV; ++e) vv[e] = 0.f;
        float bias = -INFINITY;
        if (j < j_end) {
#pragma unroll
          for (int e = 0; e < D; ++e) qv[e] = cols.points[std::size_t(j) * D + e];
          bias = bias_of(cols, h, sc, j);
#pragma unroll
          for (int e = 0; e < KV; ++e)
            if (e < k) vv[e] = v[std::size_t(j) * k + e];
        }
        if constexpr (D <= 3) {
          tile[c] = make_float4(qv[0], qv[1], qv[2], bias);
        } else {
          tile[c] = make_float4(qv[0], qv[1], qv[2], qv[3]);
          vtile[c] = bias;
        }
#pragma unroll
        for (int u = 0; u < kQuads; ++u)
          vals[u][c] = make_float4(vv[4 * u], vv[4 * u + 1], vv[4 * u + 2], vv[4 * u + 3]);
      }
      __syncthreads();
      const int ncols = j_end - t0;
      for (int c = 0; c < ncols; ++c) {
        const float4 qq = tile[c];
        const float bias = D <= 3 ? qq.w : vtile[c];
        float4 vv[kQuads];
#pragma unroll
        for (int u = 0; u < kQuads; ++u) vv[u] = vals[u][c];
#pragma unroll
        for (int r = 0; r < kBlockSmallRows; ++r) {
          float e = bias - shift[r];
          e = fmaf(xr[r][0], qq.x, e);
          if constexpr (D > 1) e = fmaf(xr[r][1], qq.y, e);
          if constexpr (D > 2) e = fmaf(xr[r][2], qq.z, e);
          if constexpr (D > 3) e = fmaf(xr[r][3], qq.w, e);
          const float w = fast_exp2(e);
          total[r] += w;
#pragma unroll
          for (int u = 0; u < kQuads; ++u) {
            acc[r][u].x = fmaf(w, vv[u].x, acc[r][u].x);
            acc[r][u].y = fmaf(w, vv[u].y, acc[r][u].y);
            acc[r][u].z = fmaf(w, vv[u].z, acc[r][u].z);
            acc[r][u].w = fmaf(w, vv[u].w, acc[r][u].w);
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kBlockSmallRows; ++r) {
    const int i = i_base + r * kBlockSmallThreads;
    if (i >= rows.count) continue;
#pragma unroll
    for (int u = 0; u < kQuads; ++u) {
      const float a[4] = {acc[r][u].x, acc[r][u].y, acc[r][u].z, acc[r][u].w};
#pragma unroll
      for (int c = 0; c < 4; ++c)
        if (4 * u + c < k) out[std::size_t(i) * k + 4 * u + c] = a[c];
    }
    wsum[i] = total[r];
  }
}

/// One thread per row of an active row block: the splits' shifted partials merged; a sum outside the trusted range
/// (kSumsMinLog2 .. kSumsMaxLog2 of one_pass.hpp: below it the flushed entries may exceed rounding, above it the
/// sum nears overflow; NaN too) flags the row's block for the plain kernel. redo is cleared before the pass.
__global__ void block_shift_check_kernel(const float2* __restrict__ partials, int splits, int count, BlockLists lists,
                                         int* __restrict__ redo) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const int rb = i / kPatternBlock;
  if (lists.offsets[rb] == lists.offsets[rb + 1]) return;  // inactive: finalize writes it whatever the sums
  float m = kNoMax, sum = 0.f;
  for (int k = 0; k < splits; ++k) {
    const float2 p = partials[std::size_t(k) * count + i];
    merge_lse<true>(m, sum, p.x, p.y);
  }
  if (!(sum >= 0x1p-70f && sum <= 0x1p100f)) redo[rb] = 1;
}

__global__ void block_finalize_kernel(Finalize mode, const float2* __restrict__ partials, int splits, PointSet rows,
                                      BlockLists lists, const SegmentScale* __restrict__ seg, bool source,
                                      float* __restrict__ out, int* nonfinite) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows.count) return;
  const int rb = i / kPatternBlock;
  if (lists.offsets[rb] == lists.offsets[rb + 1]) {  // an inactive block
    if (mode == Finalize::kSoftmin) out[i] = INFINITY;
    if (mode == Finalize::kLse2) out[i] = -INFINITY;
    return;
  }
  const SegmentScale sc = seg[lists.segment[rb]];
  float m = kNoMax, sum = 0.f;
  for (int k = 0; k < splits; ++k) {
    const float2 p = partials[std::size_t(k) * rows.count + i];
    merge_lse<true>(m, sum, p.x, p.y);
  }
  const float lse2 = m + log2f(sum);
  const float softmin = sc.s * rows.norm2[i] - sc.epsilon_ln2 * lse2;
  const float lambda = source ? sc.lambda_f : sc.lambda_g;
  float result;
  switch (mode) {
    case Finalize::kLse2: result = lse2; break;
    case Finalize::kSoftmin: result = softmin; break;
    case Finalize::kAlternating: result = relax_blend(out[i], lambda * softmin, sc.omega); break;
    default: result = relax_blend(out[i], lambda * softmin, 0.5f * sc.omega); break;
  }
  out[i] = result;
  if (!isfinite(result) && nonfinite != nullptr) *nonfinite = 1;
}

template <int DK>
__global__ void __launch_bounds__(kTileThreads) block_apply_kernel(PointSet rows, PointSet cols, const float* __restrict__ h,
                                                                   int d, BlockLists lists,
                                                                   const SegmentScale* __restrict__ seg,
                                                                   const float* __restrict__ lse2,
                                                                   const float* __restrict__ v, int k,
                                                                   float* __restrict__ out, float* __restrict__ wsum) {
  __shared__ TileStage<DK> st;
  __shared__ float w[kTileRows][kTileCols + 4];       // (BM, BN) plan weights of the tile
  __shared__ float vals[kTileCols][kApplyChunk + 4];  // (BN, KC) the tile's rows of V
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int i0 = blockIdx.x * kTileRows;
  const int rb = i0 / kPatternBlock;
  const int kc0 = blockIdx.z * kApplyChunk;
  const SegmentScale sc = seg[lists.segment[rb]];
  float shift[4], total[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = i0 + ty + 16 * r;
    shift[r] = i < rows.count ? lse2[i] : INFINITY;
    total[r] = 0.f;
  }
  float result[4][4] = {};
  walk_tiles(lists, rb, cols.count, 0, 1 << 30, [&](int j0, int j_end) {
    float acc[4][4];
    tile_dots<DK>(rows.points, rows.count, i0, cols.points, j_end, j0, d, st, acc);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = j0 + tx + 16 * c;
      const float bias = j < j_end ? bias_of(cols, h, sc, j) : -INFINITY;
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
  });
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = i0 + ty + 16 * r;
    if (i >= rows.count) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int col = kc0 + tx + 16 * c;
      if (col < k) out[std::size_t(i) * k + col] = result[r][c];
    }
  }
  if (blockIdx.z == 0) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      float t = total[r];
#pragma unroll
      for (int offset = 1; offset < 16; offset <<= 1) t += __shfl_xor_sync(0xffffffffu, t, offset);
      const int i = i0 + ty + 16 * r;
      if (tx == 0 && i < rows.count) wsum[i] = t;
    }
  }
}

__global__ void block_apply_scale_kernel(PointSet rows, BlockLists lists, const SegmentScale* __restrict__ seg,
                                         const float* __restrict__ pot, const float* __restrict__ lse2,
                                         const float* __restrict__ wsum, int k, bool normalized,
                                         float* __restrict__ out) {
  const std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= std::size_t(rows.count) * k) return;
  const int i = static_cast<int>(e / k);
  const float total = wsum[i];
  if (!(total > 0.f)) {
    out[e] = 0.f;
    return;
  }
  float mass = 1.f;
  if (!normalized) {
    const SegmentScale sc = seg[lists.segment[i / kPatternBlock]];
    mass = exp2f(sc.c1 * (pot[i] - sc.s * rows.norm2[i]) + kLog2e * rows.logw[i] + lse2[i]);
  }
  out[e] = out[e] * (mass / total);
}

__global__ void __launch_bounds__(kTileThreads) block_top_k_kernel(PointSet x, PointSet y, const float* __restrict__ f,
                                                                   const float* __restrict__ g, int d, BlockLists lists,
                                                                   const SegmentScale* __restrict__ seg, int k,
                                                                   std::int32_t* __restrict__ columns,
                                                                   float* __restrict__ values) {
  __shared__ TileStage<> st;
  __shared__ float scores[kTileRows][kTileCols + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int i0 = blockIdx.x * kTileRows;
  const int rb = i0 / kPatternBlock;
  const SegmentScale sc = seg[lists.segment[rb]];
  const int own = i0 + threadIdx.x;
  const bool owner = threadIdx.x < kTileRows && own < x.count;
  float* row_values = values + std::size_t(own) * k;
  std::int32_t* row_columns = columns + std::size_t(own) * k;
  if (owner) {
    for (int t = 0; t < k; ++t) row_values[t] = -INFINITY, row_columns[t] = -1;
  }
  float kth = -INFINITY;
  walk_tiles(lists, rb, y.count, 0, 1 << 30, [&](int j0, int j_end) {
    float acc[4][4];
    tile_dots(x.points, x.count, i0, y.points, j_end, j0, d, st, acc);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = j0 + tx + 16 * c;
      const float bias = j < j_end ? bias_of(y, g, sc, j) : -INFINITY;
#pragma unroll
      for (int r = 0; r < 4; ++r) scores[ty + 16 * r][tx + 16 * c] = fmaf(sc.alpha, acc[r][c], bias);
    }
    __syncthreads();
    if (owner) {
      const int ncols = min(kTileCols, j_end - j0);
      for (int jj = 0; jj < ncols; ++jj) {
        const float s = scores[threadIdx.x][jj];
        if (!(s > kth)) continue;
        int pos = k - 1;
        while (pos > 0 && row_values[pos - 1] < s) {
          row_values[pos] = row_values[pos - 1];
          row_columns[pos] = row_columns[pos - 1];
          --pos;
        }
        row_values[pos] = s;
        row_columns[pos] = j0 + jj;
        kth = row_values[k - 1];
      }
    }
  });
  if (!owner) return;
  const float* xi = x.points + std::size_t(own) * d;
  const float epsilon = sc.epsilon_ln2 / kLn2;
  for (int t = 0; t < k; ++t) {
    const int j = row_columns[t];
    if (j < 0 || !(row_values[t] > -INFINITY)) {
      row_columns[t] = -1;
      row_values[t] = 0.f;
      continue;
    }
    const float* yj = y.points + std::size_t(j) * d;
    float cost = 0.f;
    for (int q = 0; q < d; ++q) {
      const float diff = xi[q] - yj[q];
      cost = fmaf(diff, diff, cost);
    }
    row_values[t] = x.weight[own] * y.weight[j] * expf((f[own] + g[j] - sc.s * cost) / epsilon);
  }
}

}  // namespace

namespace {

template <int D>
void launch_small(const dim3& grid, cudaStream_t stream, const PointSet& rows, const PointSet& cols, const float* h,
                  const BlockLists& lists, const SegmentScale* seg, float2* partials, const float* self, int* redo) {
  if (self == nullptr) {
    block_lse_small_kernel<D, false><<<grid, kBlockSmallThreads, 0, stream>>>(rows, cols, h, lists, seg, partials,
                                                                              nullptr, nullptr);
    FLASHOT_CUDA_CHECK_LAUNCH();
    return;
  }
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(redo, 0, sizeof(int) * grid.x, stream));
  block_lse_small_kernel<D, true><<<grid, kBlockSmallThreads, 0, stream>>>(rows, cols, h, lists, seg, partials, self,
                                                                           nullptr);
  FLASHOT_CUDA_CHECK_LAUNCH();
  block_shift_check_kernel<<<div_up(rows.count, 256), 256, 0, stream>>>(partials, grid.y, rows.count, lists, redo);
  FLASHOT_CUDA_CHECK_LAUNCH();
  block_lse_small_kernel<D, false><<<grid, kBlockSmallThreads, 0, stream>>>(rows, cols, h, lists, seg, partials,
                                                                            nullptr, redo);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_block_lse(const PointSet& rows, const PointSet& cols, const float* h, int d, const BlockLists& lists,
                      const SegmentScale* seg, int splits, float2* partials, cudaStream_t stream, const float* self,
                      int* redo) {
  if (rows.count == 0) return;
  if (d <= 4) {  // the register kernel: one row block per thread block
    const dim3 small(div_up(rows.count, kPatternBlock), splits);
    switch (d) {
      case 1: launch_small<1>(small, stream, rows, cols, h, lists, seg, partials, self, redo); break;
      case 2: launch_small<2>(small, stream, rows, cols, h, lists, seg, partials, self, redo); break;
      case 3: launch_small<3>(small, stream, rows, cols, h, lists, seg, partials, self, redo); break;
      default: launch_small<4>(small, stream, rows, cols, h, lists, seg, partials, self, redo); break;
    }
    return;
  }
  const dim3 grid(div_up(rows.count, kTileRows), splits);
  if (d <= 4)
    block_lse_kernel<4><<<grid, kTileThreads, 0, stream>>>(rows, cols, h, d, lists, seg, partials);
  else
    block_lse_kernel<kTileDepth><<<grid, kTileThreads, 0, stream>>>(rows, cols, h, d, lists, seg, partials);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_block_finalize(Finalize mode, const float2* partials, int splits, const PointSet& rows,
                           const BlockLists& lists, const SegmentScale* seg, bool source, float* out, int* nonfinite,
                           cudaStream_t stream) {
  constexpr int kThreads = 256;
  if (rows.count == 0) return;
  block_finalize_kernel<<<div_up(rows.count, kThreads), kThreads, 0, stream>>>(mode, partials, splits, rows, lists,
                                                                               seg, source, out, nonfinite);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

namespace {

template <int KV>
void launch_apply_small(const PointSet& rows, const PointSet& cols, const float* h, int d, const BlockLists& lists,
                        const SegmentScale* seg, const float* lse2, const float* v, int k, float* out, float* wsum,
                        cudaStream_t stream) {
  const dim3 grid(div_up(rows.count, kPatternBlock));
  switch (d) {
    case 1: block_apply_small_kernel<1, KV><<<grid, kBlockSmallThreads, 0, stream>>>(rows, cols, h, lists, seg, lse2, v, k, out, wsum); break;
    case 2: block_apply_small_kernel<2, KV><<<grid, kBlockSmallThreads, 0, stream>>>(rows, cols, h, lists, seg, lse2, v, k, out, wsum); break;
    case 3: block_apply_small_kernel<3, KV><<<grid, kBlockSmallThreads, 0, stream>>>(rows, cols, h, lists, seg, lse2, v, k, out, wsum); break;
    default: block_apply_small_kernel<4, KV><<<grid, kBlockSmallThreads, 0, stream>>>(rows, cols, h, lists, seg, lse2, v, k, out, wsum); break;
  }
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_block_apply(const PointSet& rows, const PointSet& cols, const float* h, int d, const BlockLists& lists,
                        const SegmentScale* seg, const float* lse2, const float* v, int k, float* out, float* wsum,
                        cudaStream_t stream) {
  if (rows.count == 0 || k == 0) return;
  if (d <= 4 && k <= 8) {  // the register kernel: one row block per thread block
    if (k <= 4)
      launch_apply_small<4>(rows, cols, h, d, lists, seg, lse2, v, k, out, wsum, stream);
    else
      launch_apply_small<8>(rows, cols, h, d, lists, seg, lse2, v, k, out, wsum, stream);
    return;
  }
  const dim3 grid(div_up(rows.count, kTileRows), 1, div_up(k, kApplyChunk));
  if (d <= 4)
    block_apply_kernel<4><<<grid, kTileThreads, 0, stream>>>(rows, cols, h, d, lists, seg, lse2, v, k, out, wsum);
  else
    block_apply_kernel<kTileDepth><<<grid, kTileThreads, 0, stream>>>(rows, cols, h, d, lists, seg, lse2, v, k, out,
                                                                      wsum);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_block_apply_scale(const PointSet& rows, const BlockLists& lists, const SegmentScale* seg,
                              const float* pot, const float* lse2, const float* wsum, int k, bool normalized,
                              float* out, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const std::int64_t elements = std::int64_t(rows.count) * k;
  if (elements == 0) return;
  block_apply_scale_kernel<<<div_up(elements, kThreads), kThreads, 0, stream>>>(rows, lists, seg, pot, lse2, wsum, k,
                                                                                normalized, out);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_block_top_k(const PointSet& x, const PointSet& y, const float* f, const float* g, int d,
                        const BlockLists& lists, const SegmentScale* seg, int k, std::int32_t* columns,
                        float* values, cudaStream_t stream) {
  if (x.count == 0) return;
  block_top_k_kernel<<<div_up(x.count, kTileRows), kTileThreads, 0, stream>>>(x, y, f, g, d, lists, seg, k, columns,
                                                                              values);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace flashot::detail::cuda
