// The hard c-transform kernels (c_transform.cuh; docs/engine.md, "Hard c-transform").
//
// Scores t_ij = 2s⟨p_i, q_j⟩ + bias_j, bias_j = fp32(h_j − s‖q_j‖²), are maximised: max_j t_ij = s‖p_i‖² − value_i.
// Pass 1: d ≤ 16, the register kernel (rows' coordinates in registers, columns broadcast from shared memory, fp32
// FMA, as small_d.cuh's kernels); d > 16, the tiled fp32 kernel (tile_dots of device_common.cuh, the kTiled path's
// 64 × 64 tile). Each keeps per row and column split a candidate list (CtList, c_transform.cuh): the K = kCtCand
// best scores with their columns and the best score of every other column (the rest), at one comparison per score
// (a score that beats the list's rest, which is rare once the list has settled, takes the insertion).
// Wherever the problem has split-fp16 tensor-core operands (its solver's kernel family is the tensor one: d = 6–16
// at most sizes by the dispatch table, every d from 17 to 128): c_transform_wg.cu (wgmma, Hopper) or
// c_transform_mma.cu (mma.sync).
//
// Exactness of the argmin: every fp32 score is within E_i = (d + 4)·2^−23·(2s‖p_i‖·max‖q‖ + max|bias|) of the exact
// one (twice the standard γ_{d+2} bound of the dot product, the scaled coordinates and the bias's rounding). The
// split-fp16 tensor-core scores: P = scale·p is held as hi + lo, both fp16, with |P − hi − lo| ≤ 2^−22|P| + 2^−25
// (lo's rounding, and fp16's subnormal spacing); the dropped lo·lo product and the two roundings add at most
// 3·2^−22·|P_k||Q_k| + 2^−25(|P_k| + |Q_k|) per coordinate, and the tensor core's fp32 accumulation of 3d products
// (which may truncate rather than round) at most 3d·2^−22 of Σ|P_k Q_k|; so E_i = (3d + 8)·2^−22·2s‖p_i‖·max‖q‖ +
// 2^−25·√d·2s·(‖p_i‖/scale_q + max‖q‖/scale_p) + (d + 4)·2^−23·max|bias| bounds them (the 1% margin in ct_bound
// covers the bound's own rounding). Every bound adds 2^−22·s·max‖q‖² for the bias's rounding: ‖q‖² is rounded from
// fp64, then s‖q‖², each by 2^−24 of s‖q‖², which the bias need not be of the size of (h_j may cancel it).
// The cascade's first pass (on warpgroups, c_transform_wg.cu) takes hi·hi alone: hi = fp16(P), |P − hi| ≤
// 2^−11|P| + 2^−25 (u = 2^−11, η = 2^−25), so per coordinate |PQ − hi_P hi_Q| ≤ |P||Q − hi_Q| + |hi_Q||P − hi_P| ≤
// (2u + u²)|P||Q| + (1 + u)η(|P| + |Q|) + η²; the products hi_P hi_Q (11 × 11 bits) are exact in fp32, their fp32
// accumulation adds d·2^−22·Σ|hi_P hi_Q| ≤ d·2^−22·((1 + u)²Σ|P_k Q_k| + …), the final FMA 2^−24 of the score;
// with Σ|P_k Q_k| ≤ ‖P‖‖Q‖, Σ|P_k| ≤ √d‖P‖ and the factor α = 2s/(scale_p·scale_q): E_i = (2^−10 + (d + 8)·2^−22)·
// 2s‖p_i‖·max‖q‖ + 1.001·2^−25·√d·2s·(‖p_i‖/scale_q + max‖q‖/scale_p) + 1.001·d·2^−50·2s/(scale_p·scale_q) +
// (d + 4)·2^−23·max|bias| + 2^−22·s·max‖q‖² (engine/src/ct_bound.hpp holds all three bounds' coefficients; host
// tests emulate the passes against them). The rows that bound leaves undecided are scored again with the three
// split products (their own pass over those rows only), certified with the split bound, and only what remains is
// re-scanned. When best − rest > 2E_i, the true argmax is one of the K candidates (any other
// column's exact score is < rest + E_i < best − E_i ≤ the exact score of the best candidate): the candidates whose
// score is ≥ best − 3E_i are evaluated as s·‖p_i − q_j‖² − h_j in fp64 and the smallest wins, the lowest index on an
// exact tie (merge kernel). Otherwise (K + 1 scores within 2E_i: exact ties, duplicated points) the row is
// re-decided over all its columns: every column whose fp32 score (refine kernel, error ≤ the fp32 E_i ≤ E_i) is
// ≥ best − 3E_i is evaluated the same way (four listed rows per block, column tiles through shared memory). The value of
// every row is that fp64 direct difference at its argmin; so the argmins and values do not depend on which pass
// (or variant) decided a row. The refinement's floor is best − 3E_i with the bound of the pass that gave `best` (the
// split or fp32 one; both ≥ the refinement's own fp32 error). With K = 1 this is a best/second test, which on
// the benchmark's Gaussian data at n = m = 100k, d = 64 left enough rows to the full re-scan (then one warp per row)
// for it to take 36 ms of 40 on the H200; with K = 3 a row goes there only when four scores lie within 2E_i, which
// random data makes rarer by orders of magnitude (a near tie has probability ~ρ per row, four of them ~ρ³/6).

#include <algorithm>
#include <cmath>

#include "c_transform.cuh"
#include "ct_bound.hpp"
#include "device_common.cuh"
#include "error.hpp"
#include "mma_launch.cuh"

namespace flashot::detail::cuda {
namespace {

constexpr int kCtThreads = 128;
constexpr int kRefineThreads = 256;  // the refinement's columns per tile (one per thread)
constexpr int kRefineRows = 4;       // listed rows per refinement block: a column tile is read once for them
/// Floats per column in the refinement's shared-memory stage of C coordinates: 16-byte rows whose float4 reads by
/// 8 consecutive threads (one shared-memory phase) fall in 8 distinct 4-bank groups.
constexpr int ct_refine_stride(int c) { return c % 8 == 0 ? c + 4 : c; }

/// One tile of ct_small_kernel: columns [j0, min(j0 + TC, j_end)) staged in shared memory (coordinates, then the
/// bias; −∞ past j_end), then scored against the thread's R rows into their lists.
template <int D, int R, int U, int TC>
__device__ __forceinline__ void ct_small_tile(const CTransformSides& sd, const float* __restrict__ h, float s, int j0,
                                              int j_end, float (&tile)[TC][D + 1], const float (&xr)[R][D],
                                              CtList (&list)[R]) {
  __syncthreads();
  for (int e = threadIdx.x; e < TC * (D + 1); e += kCtThreads) {
    const int jj = e / (D + 1), k = e % (D + 1), j = j0 + jj;
    float v;
    if (k < D)
      v = (j < j_end && k < sd.d) ? sd.cols[std::size_t(j) * sd.d + k] : 0.f;
    else
      v = j < j_end ? h[j] - s * sd.cols_norm2[j] : -INFINITY;
    tile[jj][k] = v;
  }
  __syncthreads();
  const int ncol = min(TC, j_end - j0);
  for (int jj = 0; jj < ncol; jj += U) {
    float q[U][D + 1];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if constexpr ((D + 1) % 4 == 0) {  // whole float4 loads (D = 3: one 128-bit broadcast per column)
#pragma unroll
        for (int k = 0; k <= D; k += 4) {
          const float4 v = *reinterpret_cast<const float4*>(&tile[jj + u][k]);
          q[u][k] = v.x, q[u][k + 1] = v.y, q[u][k + 2] = v.z, q[u][k + 3] = v.w;
        }
      } else {
#pragma unroll
        for (int k = 0; k <= D; ++k) q[u][k] = tile[jj + u][k];
      }
    }
    // All U·R scores first, then one test whether any beats its row's rest: per score D FMA and, per row, U − 1
    // maxima and one comparison; the insertions (rare once the lists have settled) sit behind one branch.
    float t[U][R];
    bool any = false;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float top = -INFINITY;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        t[u][r] = q[u][D];
#pragma unroll
        for (int k = 0; k < D; ++k) t[u][r] = fmaf(xr[r][k], q[u][k], t[u][r]);
        top = u == 0 ? t[u][r] : fmaxf(top, t[u][r]);
      }
      any |= top > list[r].s[CtList::K];
    }
    if (any) {
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r) list[r].push(t[u][r], j0 + jj + u);
    }
  }
}

/// U: columns per test of the lists. U = 1: per column the R scores and one test whether any beats its row's rest.
/// U = 2, 4: the scores of U columns, per row their maximum, one test for the U·R scores; the columns past the split
/// in the last tile score −∞ (their bias), so groups of U never straddle it. Fewer tests, branches and loop steps
/// per column, more scores in flight per shared-memory load; a test that fires pushes the group's U columns in order.
///
/// TILES (the tile pass, c_transform_tiles.cu: both sides in Morton order, `box` the column tiles' boxes, `homes`
/// each row block's home tile): the block visits its split's tiles from the one nearest its home outwards, and skips
/// a tile when no row can score above its rest there (ct::ct_tile_below, engine/src/ct_bound.hpp: the box's bound
/// on the exact scores, with its rounding margin). A skipped
/// column's exact score is then below the rest, so the merge's certificate (every column outside the candidates
/// scores exactly < rest + E) holds as if it had been scored. A block whose home tile lies in another split scans
/// that tile first to seed its rests (its candidates dropped): the split that owns the home tile scans it first and
/// in full, so after the merge the rest is at least that tile's (K + 1)-th score, the seed, and every column a seeded
/// list dropped or skipped stays below it.
template <int D, int R, int U, bool TILES>
__global__ void __launch_bounds__(kCtThreads) ct_small_kernel(CTransformSides sd, const float* __restrict__ h, float s,
                                                              int cols_per_split, const float* __restrict__ box,
                                                              const int* __restrict__ homes, float* __restrict__ best,
                                                              int* __restrict__ arg) {
  constexpr int TC = TILES ? kCtBoxTile : kCtTile;  // columns per tile
  static_assert(TC % U == 0, "groups of U columns fill a tile");
  __shared__ __align__(16) float tile[TC][D + 1];  // coordinates, then the bias
  const int i_base = blockIdx.x * (kCtThreads * R) + threadIdx.x;
  const float two_s = 2.f * s;
  float xr[R][D];
  float xn[R];  // ‖x‖² (TILES)
  CtList list[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = i_base + r * kCtThreads;
    xn[r] = 0.f;
#pragma unroll
    for (int k = 0; k < D; ++k) {
      xr[r][k] = (i < sd.nrows && k < sd.d) ? two_s * sd.rows[std::size_t(i) * sd.d + k] : 0.f;
      if constexpr (TILES) xn[r] = fmaf(xr[r][k], xr[r][k], xn[r]);
    }
    list[r].init();
  }
  if constexpr (!TILES) {
    const int j_begin = blockIdx.y * cols_per_split;
    const int j_end = min(sd.ncols, j_begin + cols_per_split);
    for (int j0 = j_begin; j0 < j_end; j0 += TC) ct_small_tile<D, R, U, TC>(sd, h, s, j0, j_end, tile, xr, list);
  } else {
    // Split y takes tiles y, y + splits, y + 2·splits, … (count of them), so every split holds a share of the tiles
    // near the home; it visits its own from the one nearest the home (`centre`, a position in that sequence)
    // outwards. seed: the home is another split's.
    const float four_s = 4.f * s;  // exact
    const int first = blockIdx.y, stride = gridDim.y;
    const int count = ((sd.ncols + TC - 1) / TC - first + stride - 1) / stride;
    const int home = homes[blockIdx.x];
    const int centre = min(max((home - first + stride / 2) / stride, 0), count - 1);
    const int steps = 2 * max(centre, count - 1 - centre) + 1;
    const bool seed = first + centre * stride != home;
    for (int step = seed ? -1 : 0; step < steps; ++step) {
      const int pos = centre + ((step & 1) != 0 ? (step + 1) / 2 : -(step / 2));
      if (step >= 0 && (pos < 0 || pos >= count)) continue;
      const int at = step < 0 ? home : first + pos * stride;  // the tile
      if (step > 0) {
        const float* b = box + std::size_t(at) * kCtBoxStride;
        const float hmax = b[kCtBoxStride - 1];
        bool skip = true;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float rest = list[r].s[CtList::K];
          const bool below = ct::ct_tile_below(xr[r], xn[r], b, b + kCtBoxStride / 2, hmax, four_s, rest);
          skip = skip && (below || i_base + r * kCtThreads >= sd.nrows);
        }
        if (__syncthreads_and(skip)) continue;
      }
      ct_small_tile<D, R, U, TC>(sd, h, s, at * TC, sd.ncols, tile, xr, list);
      if (step < 0) {  // the seed: keep the rests, drop the candidates (another split owns them)
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float rest = list[r].s[CtList::K];
          list[r].init();
          list[r].s[CtList::K] = rest;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = i_base + r * kCtThreads;
    if (i < sd.nrows) list[r].store(best, arg, blockIdx.y, sd.nrows, i);
  }
}

__global__ void __launch_bounds__(kTileThreads) ct_tiled_kernel(CTransformSides sd, const float* __restrict__ h,
                                                                float s, int cols_per_split, float* __restrict__ best,
                                                                int* __restrict__ arg) {
  __shared__ TileStage<> st;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int i0 = blockIdx.x * kTileRows;
  const float two_s = 2.f * s;
  CtList list[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) list[r].init();
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(sd.ncols, j_begin + cols_per_split);
  for (int j0 = j_begin; j0 < j_end; j0 += kTileCols) {
    float acc[4][4];
    tile_dots(sd.rows, sd.nrows, i0, sd.cols, j_end, j0, sd.d, st, acc);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = j0 + tx + 16 * c;
      const float bias = j < j_end ? h[j] - s * sd.cols_norm2[j] : -INFINITY;
#pragma unroll
      for (int r = 0; r < 4; ++r) list[r].push(fmaf(two_s, acc[r][c], bias), j);
    }
  }
  // The 16 lanes that share a row (tid = 16·ty + tx) merge their columns.
#pragma unroll
  for (int r = 0; r < 4; ++r) {
#pragma unroll
    for (int offset = 8; offset > 0; offset /= 2) list[r].merge_lane(offset);
    const int i = i0 + ty + 16 * r;
    if (tx == 0 && i < sd.nrows) list[r].store(best, arg, blockIdx.y, sd.nrows, i);
  }
}

/// maxima[0] = max‖q_j‖, maxima[1] = max|fp32(h_j − s‖q_j‖²)|, as the bits of non-negative floats (ordered as
/// unsigned integers).
__global__ void ct_maxima_kernel(CTransformSides sd, const float* __restrict__ h, float s, unsigned* maxima) {
  float norm = 0.f, bias = 0.f;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < sd.ncols; j += gridDim.x * blockDim.x) {
    norm = fmaxf(norm, sqrtf(sd.cols_norm2[j]));
    bias = fmaxf(bias, fabsf(h[j] - s * sd.cols_norm2[j]));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    norm = fmaxf(norm, __shfl_xor_sync(0xffffffffu, norm, offset));
    bias = fmaxf(bias, __shfl_xor_sync(0xffffffffu, bias, offset));
  }
  if (threadIdx.x % 32 == 0) {
    atomicMax(&maxima[0], __float_as_uint(norm));
    atomicMax(&maxima[1], __float_as_uint(bias));
  }
}

/// s·‖p_i − q_j‖² − h_j in fp64, the squares summed in coordinate order (every pass calls this one function, so a
/// row's value does not depend on the pass that decided it). d a multiple of 4: the coordinates by 16-byte loads
/// (rows of 4k floats from cudaMalloc'd bases are 16-byte aligned), four independent loads ahead of the chain; the
/// order of the sum is the same.
__device__ __forceinline__ double ct_direct(const CTransformSides& sd, const float* h, double s, int i, int j) {
  const float* p = sd.rows + std::size_t(i) * sd.d;
  const float* q = sd.cols + std::size_t(j) * sd.d;
  double dist = 0;
  const auto add = [&](float a, float b) {
    const double diff = double(a) - double(b);
    dist = fma(diff, diff, dist);
  };
  if (sd.d % 4 == 0) {
    const float4* p4 = reinterpret_cast<const float4*>(p);
    const float4* q4 = reinterpret_cast<const float4*>(q);
#pragma unroll 4
    for (int k = 0; k < sd.d / 4; ++k) {
      const float4 a = p4[k], b = q4[k];
      add(a.x, b.x);
      add(a.y, b.y);
      add(a.z, b.z);
      add(a.w, b.w);
    }
  } else {
    for (int k = 0; k < sd.d; ++k) add(p[k], q[k]);
  }
  return s * dist - double(h[j]);
}

using ct::ScoreBound;

__device__ __forceinline__ float ct_bound(const CTransformSides& sd, const unsigned* maxima, float s, int i,
                                          const ScoreBound& b) {
  return ct::score_bound(b, s, sqrtf(sd.rows_norm2[i]), __uint_as_float(maxima[0]), __uint_as_float(maxima[1]));
}

/// The caller's index of column j: col_ids[j] where the columns were sorted (the tile pass), else j. Exact ties go
/// to the lowest caller's index, whatever order the pass saw the columns in.
__device__ __forceinline__ int ct_caller_column(const int* col_ids, int j) {
  return col_ids != nullptr ? col_ids[j] : j;
}

/// Decides row i from its merged list c: when its best beats the rest by more than 2E (bound), from the candidates
/// (fp64) into values / index (the caller's column, ct_caller_column); otherwise lists it (out_list, out_count) with
/// its best score in top[i].
__device__ __forceinline__ void ct_decide(const CTransformSides& sd, const float* h, float s, const ScoreBound& sb,
                                          const unsigned* maxima, const int* col_ids, const CtList& c, int i,
                                          float* top, double* values, int* index, int* out_list, int* out_count) {
  const float bound = ct_bound(sd, maxima, s, i, sb);
  if (c.s[0] - c.s[CtList::K] > 2.f * bound) {
    const float floor = c.s[0] - 3.f * bound;
    double v_best = INFINITY;
    int j_best = 0x7fffffff;
#pragma unroll
    for (int k = 0; k < CtList::K; ++k) {
      if (c.a[k] < 0 || !(c.s[k] >= floor)) continue;
      const double v = ct_direct(sd, h, s, i, c.a[k]);
      const int j = ct_caller_column(col_ids, c.a[k]);
      if (v < v_best || (v == v_best && j < j_best)) v_best = v, j_best = j;
    }
    values[i] = v_best;
    index[i] = j_best;
    return;
  }
  // The best score seen: the rest may exceed every candidate. A tile-pass split that seeded its rest from another
  // split's home tile keeps no candidate at or below that rest; where the home tile's best scores tie (duplicated
  // points, lattices) the seed equals them, the owner's tied candidates do not beat it in the merge, and the merged
  // list holds the rest alone. The re-scan's floor must be a score some column has, never −∞ (which would let it
  // evaluate every column, the padding past the last included).
  top[i] = fmaxf(c.s[0], c.s[CtList::K]);
  out_list[atomicAdd(out_count, 1)] = i;
  values[i] = NAN;  // marks a listed row
}

/// One thread per row: the splits' lists merged, the row decided (ct_decide; col_ids: null, or the tile pass's map to
/// the caller's columns).
__global__ void ct_merge_kernel(CTransformSides sd, const float* __restrict__ h, float s, int splits, ScoreBound sb,
                                const unsigned* __restrict__ maxima, const int* __restrict__ col_ids,
                                const float* __restrict__ best,
                                const int* __restrict__ arg, float* __restrict__ top, double* __restrict__ values,
                                int* __restrict__ index, int* __restrict__ out_list, int* __restrict__ out_count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= sd.nrows) return;
  CtList c;
  c.load(best, arg, 0, sd.nrows, i);
  for (int p = 1; p < splits; ++p) {
    CtList o;
    o.load(best, arg, p, sd.nrows, i);
    c.merge(o.s, o.a);
  }
  ct_decide(sd, h, s, sb, maxima, col_ids, c, i, top, values, index, out_list, out_count);
}

/// The cascade's second merge: one warp per listed row w < *count (row list[w]), its lists of the second pass
/// (ct_listed_splits of them, row stride *count) merged over the lanes, then decided by lane 0 (ct_decide).
__global__ void ct_merge_listed_kernel(CTransformSides sd, const float* __restrict__ h, float s, int slots,
                                       ScoreBound sb, const unsigned* __restrict__ maxima,
                                       const float* __restrict__ best, const int* __restrict__ arg,
                                       const int* __restrict__ list, const int* __restrict__ count,
                                       float* __restrict__ top, double* __restrict__ values, int* __restrict__ index,
                                       int* __restrict__ out_list, int* __restrict__ out_count) {
  const int rows = *count;
  const int splits = ct_listed_splits((rows + kWgBlockRows - 1) / kWgBlockRows, column_tiles(sd.ncols), slots);
  const int lane = threadIdx.x % 32, warps = gridDim.x * (blockDim.x / 32);
  for (int w = (blockIdx.x * blockDim.x + threadIdx.x) / 32; w < rows; w += warps) {
    CtList c;
    c.init();
    for (int p = lane; p < splits; p += 32) {
      CtList o;
      o.load(best, arg, p, rows, w);
      c.merge(o.s, o.a);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) c.merge_lane(offset);
    if (lane == 0) ct_decide(sd, h, s, sb, maxima, nullptr, c, list[w], top, values, index, out_list, out_count);
  }
}

/// kRefineRows listed rows per block (grid-stride over the list): every column whose fp32 score is within 3E of its
/// row's best is evaluated in fp64, the smallest value wins (the lowest column on an exact tie). The columns come in
/// tiles of kRefineThreads (one per thread) and chunks of C coordinates (4, 8, 16 or 32: d's, up to 32) through
/// shared memory, read from global memory in whole cache lines and once for all the block's rows; each thread
/// scores its column for every row (fp32 FMA in coordinate order, as the register pass: error ≤ the fp32 E_i). Before, one block per row had
/// each thread read its own column's coordinates (a cache line per lane per load) for one row: 2.5 s for 100k
/// re-scanned rows at n = m = 100k, d = 64 (H200, every target point four times). top[i]: the row's best score in the
/// pass whose bound sb is (E ≥ the fp32 E of the scores here). col_ids: as ct_merge_kernel's (index holds the caller's
/// columns, and ties go to the lowest of them).
template <int C>
__global__ void __launch_bounds__(kRefineThreads) ct_refine_kernel(CTransformSides sd, const float* __restrict__ h,
                                                                   float s, ScoreBound sb,
                                                                   const unsigned* __restrict__ maxima,
                                                                   const int* __restrict__ col_ids,
                                                                   const float* __restrict__ top,
                                                                   const int* __restrict__ list,
                                                                   const int* __restrict__ count,
                                                                   double* __restrict__ values,
                                                                   int* __restrict__ index) {
  __shared__ __align__(16) float tile[kRefineThreads][ct_refine_stride(C)];  // (columns, coordinates of the chunk)
  __shared__ __align__(16) float prow[kRefineRows][C];                      // 2s·p of the block's rows, this chunk
  __shared__ int rowi[kRefineRows];
  __shared__ double red_v[kRefineRows][kRefineThreads / 32];
  __shared__ int red_j[kRefineRows][kRefineThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float two_s = 2.f * s;
  const int rows = *count;
  for (int w0 = blockIdx.x * kRefineRows; w0 < rows; w0 += gridDim.x * kRefineRows) {
    const int here = min(kRefineRows, rows - w0);
    __syncthreads();  // rowi and red_* of the previous group are read
    if (threadIdx.x < kRefineRows) rowi[threadIdx.x] = list[w0 + min(int(threadIdx.x), here - 1)];
    __syncthreads();
    float floor[kRefineRows];
    double v_best[kRefineRows];
    int j_best[kRefineRows];
#pragma unroll
    for (int r = 0; r < kRefineRows; ++r) {
      floor[r] = top[rowi[r]] - 3.f * ct_bound(sd, maxima, s, rowi[r], sb);
      v_best[r] = INFINITY;
      j_best[r] = 0x7fffffff;
    }
    for (int j0 = 0; j0 < sd.ncols; j0 += kRefineThreads) {
      const int j = j0 + threadIdx.x;
      const float bias = j < sd.ncols ? h[j] - s * sd.cols_norm2[j] : -INFINITY;
      float t[kRefineRows];
#pragma unroll
      for (int r = 0; r < kRefineRows; ++r) t[r] = bias;
      for (int k0 = 0; k0 < sd.d; k0 += C) {
        __syncthreads();  // the previous chunk's reads are done
        // Consecutive threads read consecutive coordinates of consecutive columns: whole cache lines.
        for (int e = threadIdx.x; e < kRefineThreads * C; e += kRefineThreads) {
          const int jj = e / C, k = e % C, jc = j0 + jj, kc = k0 + k;
          tile[jj][k] = (jc < sd.ncols && kc < sd.d) ? sd.cols[std::size_t(jc) * sd.d + kc] : 0.f;
        }
        if (threadIdx.x < kRefineRows * C) {
          const int r = threadIdx.x / C, k = threadIdx.x % C, kc = k0 + k;
          prow[r][k] = kc < sd.d ? two_s * sd.rows[std::size_t(rowi[r]) * sd.d + kc] : 0.f;
        }
        __syncthreads();
        // Coordinates past d are 0 in both: their FMAs leave t unchanged.
#pragma unroll
        for (int k = 0; k < C; k += 4) {
          const float4 q = *reinterpret_cast<const float4*>(&tile[threadIdx.x][k]);
#pragma unroll
          for (int r = 0; r < kRefineRows; ++r) {
            const float4 p = *reinterpret_cast<const float4*>(&prow[r][k]);
            t[r] = fmaf(p.x, q.x, t[r]);
            t[r] = fmaf(p.y, q.y, t[r]);
            t[r] = fmaf(p.z, q.z, t[r]);
            t[r] = fmaf(p.w, q.w, t[r]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kRefineRows; ++r) {
        if (r >= here || j >= sd.ncols || !(t[r] >= floor[r])) continue;
        const double v = ct_direct(sd, h, s, rowi[r], j);
        if (!(v <= v_best[r])) continue;
        const int jc = ct_caller_column(col_ids, j);
        if (v < v_best[r] || jc < j_best[r]) v_best[r] = v, j_best[r] = jc;
      }
    }
#pragma unroll
    for (int r = 0; r < kRefineRows; ++r) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        const double ov = __shfl_xor_sync(0xffffffffu, v_best[r], offset);
        const int oj = __shfl_xor_sync(0xffffffffu, j_best[r], offset);
        if (ov < v_best[r] || (ov == v_best[r] && oj < j_best[r])) v_best[r] = ov, j_best[r] = oj;
      }
      if (lane == 0) red_v[r][warp] = v_best[r], red_j[r][warp] = j_best[r];
    }
    __syncthreads();
    if (threadIdx.x < here) {
      const int r = threadIdx.x;
      double vb = red_v[r][0];
      int jb = red_j[r][0];
      for (int o = 1; o < kRefineThreads / 32; ++o)
        if (red_v[r][o] < vb || (red_v[r][o] == vb && red_j[r][o] < jb)) vb = red_v[r][o], jb = red_j[r][o];
      values[rowi[r]] = vb;
      index[rowi[r]] = jb;
    }
  }
}

/// The smallest instantiated register width ≥ d (0: the tiled kernel).
int ct_width(int d) {
  for (int w : {1, 2, 3, 4, 6, 8, 12, 16})
    if (d <= w) return w;
  return 0;
}

template <int D>
constexpr int ct_rows() {
  return D <= 4 ? 8 : 4;
}

/// Resident blocks per multiprocessor of `kernel` (static shared memory only).
template <typename Kernel>
int ct_per_sm(Kernel kernel, int threads) {
  int n = 0;
  FLASHOT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, 0));
  return std::max(1, n);
}

template <int D, int U>
void launch_small_u(const CTransformSides& sd, const float* h, float s, int sms, CTransformScratch& sc, int& splits,
                    cudaStream_t stream) {
  constexpr int R = ct_rows<D>();
  const int blocks = div_up(sd.nrows, kCtThreads * R);
  // Whole waves of resident blocks, in whole tiles of columns per split.
  const int tiles = div_up(sd.ncols, kCtTile);
  splits = ct_splits(blocks, tiles, ct_per_sm(ct_small_kernel<D, R, U, false>, kCtThreads), sms);
  const int per = div_up(tiles, splits) * kCtTile;
  splits = div_up(sd.ncols, per);
  sc.best.reserve(std::size_t(splits) * (kCtCand + 1) * sd.nrows);
  sc.arg.reserve(std::size_t(splits) * kCtCand * sd.nrows);
  ct_small_kernel<D, R, U, false><<<dim3(blocks, splits), kCtThreads, 0, stream>>>(sd, h, s, per, nullptr, nullptr,
                                                                                   sc.best.get(), sc.arg.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
}

/// The tile pass (ct_small_kernel with TILES, U = 2) on the sorted problem `to` (prepare_ct_tiles with blocks of
/// kCtThreads·R rows). Splits as launch_small_u's: with the tiles dealt round-robin, every split of a row block holds
/// a like share of the tiles its rows keep, so the blocks' work stays even.
template <int D, int R>
void launch_small_tiles(const CtTileOrder& to, float s, int sms, CTransformScratch& sc, int& splits,
                        cudaStream_t stream) {
  const CTransformSides& sd = to.sides;
  const int blocks = div_up(sd.nrows, kCtThreads * R);
  const int tiles = div_up(sd.ncols, kCtBoxTile);
  splits = ct_splits(blocks, tiles, ct_per_sm(ct_small_kernel<D, R, 2, true>, kCtThreads), sms);
  sc.best.reserve(std::size_t(splits) * (kCtCand + 1) * sd.nrows);
  sc.arg.reserve(std::size_t(splits) * kCtCand * sd.nrows);
  ct_small_kernel<D, R, 2, true><<<dim3(blocks, splits), kCtThreads, 0, stream>>>(sd, to.h, s, 0, to.box, to.homes,
                                                                                  sc.best.get(), sc.arg.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
}

template <int D>
void launch_tiles(const CTransformSides& sd, const float* h, float s, int sms, int rows, CTransformScratch& sc,
                  CtTileOrder& to, int& splits, cudaStream_t stream) {
  const auto run = [&](auto r) {
    constexpr int R = decltype(r)::value;
    to = prepare_ct_tiles(sd, h, s, kCtThreads * R, sc, stream);
    launch_small_tiles<D, R>(to, s, sms, sc, splits, stream);
  };
  if (rows == 4) return run(std::integral_constant<int, 4>{});
  if (rows == 8) return run(std::integral_constant<int, 8>{});
  run(std::integral_constant<int, 2>{});
}

/// sorted row i's value and column (already the caller's) go to the caller's row row_ids[i].
__global__ void ct_unsort_kernel(int nrows, const int* __restrict__ row_ids, const double* __restrict__ values,
                                 const int* __restrict__ index, double* __restrict__ values_out,
                                 int* __restrict__ index_out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nrows) return;
  values_out[row_ids[i]] = values[i];
  index_out[row_ids[i]] = index[i];
}

/// columns: CTransformChoices::columns, used where R = 8 rows per thread (d ≤ 4); wider rows test every column.
template <int D>
void launch_small(const CTransformSides& sd, const float* h, float s, int sms, int columns, CTransformScratch& sc,
                  int& splits, cudaStream_t stream) {
  if constexpr (D <= 4) {
    if (columns == 2) return launch_small_u<D, 2>(sd, h, s, sms, sc, splits, stream);
    if (columns == 4) return launch_small_u<D, 4>(sd, h, s, sms, sc, splits, stream);
  }
  launch_small_u<D, 1>(sd, h, s, sms, sc, splits, stream);
}

void launch_tiled(const CTransformSides& sd, const float* h, float s, int sms, CTransformScratch& sc, int& splits,
                  cudaStream_t stream) {
  const int blocks = div_up(sd.nrows, kTileRows);
  const int tiles = div_up(sd.ncols, kTileCols);
  splits = ct_splits(blocks, tiles, ct_per_sm(ct_tiled_kernel, kTileThreads), sms);
  const int per = div_up(tiles, splits) * kTileCols;
  splits = div_up(sd.ncols, per);
  sc.best.reserve(std::size_t(splits) * (kCtCand + 1) * sd.nrows);
  sc.arg.reserve(std::size_t(splits) * kCtCand * sd.nrows);
  ct_tiled_kernel<<<dim3(blocks, splits), kTileThreads, 0, stream>>>(sd, h, s, per, sc.best.get(), sc.arg.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace

/// Column splits for `blocks` row blocks of a kernel of which `per_sm` blocks are resident per multiprocessor: the
/// fewest that keep ≥ 90 % of the device's resident blocks busy over whole waves (every block does the same work,
/// so a last wave of a few blocks costs as much as a full one), at most one per column tile. Fewer splits also
/// mean longer column streams per row, over which the candidate lists settle (fewer insertions).
int ct_splits(int blocks, int tiles, int per_sm, int sms) {
  const long long slots = std::max(1LL, static_cast<long long>(std::max(per_sm, 1)) * sms);
  const int most = static_cast<int>(std::max(1LL, std::min<long long>(tiles, (4 * slots + blocks - 1) / blocks)));
  int pick = 1;
  double pick_busy = 0;
  for (int s = 1; s <= most; ++s) {
    const long long total = static_cast<long long>(blocks) * s;
    const double busy = double(total) / double((total + slots - 1) / slots * slots);
    if (busy >= 0.9) return s;
    if (busy > pick_busy) pick = s, pick_busy = busy;
  }
  return pick;
}

CTransformCounts c_transform_counts(const CTransformScratch& sc, cudaStream_t stream) {
  CTransformCounts out;
  if (sc.counters.size() < 2) return out;
  int c[2] = {0, 0};
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(c, sc.counters.get(), sizeof c, cudaMemcpyDeviceToHost, stream));
  FLASHOT_CUDA_CHECK(cudaStreamSynchronize(stream));
  out.rescored = c[0];
  out.rescanned = c[1];
  return out;
}

namespace {

/// The device results of one c-transform (run_passes): values (fp64) and the caller's argmins, nrows each.
struct CtDeviceResult {
  const double* values = nullptr;
  const int* index = nullptr;
};

/// Every pass of one c-transform on `stream` (nrows, ncols ≥ 1); nothing is waited for. h_host goes up through the
/// page-locked scratch.host_h (one host copy, then an asynchronous transfer).
CtDeviceResult run_passes(const CTransformSides& sd, std::span<const float> h_host, double cost_scale, int sms,
                          const MmaOperands* rop, const MmaOperands* cop, const CTransformChoices& choices,
                          CTransformScratch& sc, cudaStream_t stream) {
  const float s = static_cast<float>(cost_scale);
  sc.host_h.reserve(std::size_t(sd.ncols));
  sc.h.reserve(std::size_t(sd.ncols));
  std::copy_n(h_host.data(), sd.ncols, sc.host_h.get());
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(sc.h.get(), sc.host_h.get(), sizeof(float) * std::size_t(sd.ncols),
                                     cudaMemcpyHostToDevice, stream));
  sc.maxima.reserve(2);
  sc.counters.reserve(2);
  sc.list.reserve(sd.nrows);
  sc.rescan.reserve(sd.nrows);
  sc.top.reserve(sd.nrows);
  sc.values.reserve(sd.nrows);
  sc.index.reserve(sd.nrows);
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(sc.maxima.get(), 0, 2 * sizeof(unsigned), stream));
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(sc.counters.get(), 0, 2 * sizeof(int), stream));
  ct_maxima_kernel<<<std::max(1, std::min(4 * sms, div_up(sd.ncols, 256))), 256, 0, stream>>>(sd, sc.h.get(), s,
                                                                                             sc.maxima.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
  int splits = 1;
  ScoreBound sb = ct::fp32_bound(sd.d);
  // The tensor cores wherever the problem's own kernel family uses them (the dispatch table's choice for the solver,
  // d = 6–16 included: at 100k, d = 16 the register pass took 11.8 ms, the tensor pass at d = 32 5.7 ms).
  const bool tensor = rop != nullptr && cop != nullptr && c_transform_mma_serves(*rop, *cop);
  const bool wg = tensor && c_transform_wg_serves(*rop, *cop);
  // The cascade wherever the warpgroup pass serves (d = 6–128 in the tensor family). On the benchmark's data
  // (N(0, 1), n = m = 100k, ψ ~ 0.1·N(0, 1); exact scores of sampled rows against all columns, on the host) the
  // hi·hi bound leaves 1.4 % of the rows undecided at d = 8, 0.3 % at d = 16, 0.2 % at d = 64 (and 21 % at d = 3,
  // which the register pass serves instead).
  const bool cascade = wg && choices.cascade;
  // The tile pass (d ≤ 4, the register family, more than one tile of columns): the passes below run on both sides
  // in Morton order (rsd, rh), the columns' indices mapped back to the caller's as they are decided (col_ids), the
  // rows at the end (ct_unsort_kernel).
  const bool tiled = !tensor && choices.tiles && ct_width(sd.d) >= 1 && ct_width(sd.d) <= 4 && sd.ncols > kCtBoxTile;
  CtTileOrder to;
  CTransformSides rsd = sd;
  const float* rh = sc.h.get();
  if (tensor) sb = ct::split_fp16_bound(sd.d, rop->scale, cop->scale);
  ScoreBound first = sb;
  if (cascade) {
    first = ct::hi_fp16_bound(sd.d, rop->scale, cop->scale);
    reserve_c_transform_wg_listed(sd, *rop, sms, sc);
  }
  if (wg) {
    launch_c_transform_wg(sd, *rop, *cop, sc.h.get(), s, sms, cascade, choices.wg_subtiles, first, sc.maxima.get(), sc,
                          splits, stream);
  } else if (tensor) {
    launch_c_transform_mma(sd, *rop, *cop, sc.h.get(), s, sms, sc, splits, stream);
  } else if (tiled) {
    switch (ct_width(sd.d)) {
      case 1: launch_tiles<1>(sd, sc.h.get(), s, sms, choices.tile_rows, sc, to, splits, stream); break;
      case 2: launch_tiles<2>(sd, sc.h.get(), s, sms, choices.tile_rows, sc, to, splits, stream); break;
      case 3: launch_tiles<3>(sd, sc.h.get(), s, sms, choices.tile_rows, sc, to, splits, stream); break;
      default: launch_tiles<4>(sd, sc.h.get(), s, sms, choices.tile_rows, sc, to, splits, stream); break;
    }
    rsd = to.sides;
    rh = to.h;
  } else {
    switch (ct_width(sd.d)) {
      case 1: launch_small<1>(sd, sc.h.get(), s, sms, choices.columns, sc, splits, stream); break;
      case 2: launch_small<2>(sd, sc.h.get(), s, sms, choices.columns, sc, splits, stream); break;
      case 3: launch_small<3>(sd, sc.h.get(), s, sms, choices.columns, sc, splits, stream); break;
      case 4: launch_small<4>(sd, sc.h.get(), s, sms, choices.columns, sc, splits, stream); break;
      case 6: launch_small<6>(sd, sc.h.get(), s, sms, choices.columns, sc, splits, stream); break;
      case 8: launch_small<8>(sd, sc.h.get(), s, sms, choices.columns, sc, splits, stream); break;
      case 12: launch_small<12>(sd, sc.h.get(), s, sms, choices.columns, sc, splits, stream); break;
      case 16: launch_small<16>(sd, sc.h.get(), s, sms, choices.columns, sc, splits, stream); break;
      default: launch_tiled(sd, sc.h.get(), s, sms, sc, splits, stream); break;
    }
  }
  // Without the cascade the undecided rows go straight to the re-scan (counters[1]); with it, to the second pass
  // (counters[0]), whose own undecided rows go to the re-scan.
  int* const undecided = cascade ? sc.list.get() : sc.rescan.get();
  int* const undecided_count = cascade ? sc.counters.get() : sc.counters.get() + 1;
  ct_merge_kernel<<<div_up(sd.nrows, 256), 256, 0, stream>>>(rsd, rh, s, splits, first, sc.maxima.get(), to.col_ids,
                                                              sc.best.get(), sc.arg.get(), sc.top.get(),
                                                              sc.values.get(), sc.index.get(), undecided,
                                                              undecided_count);
  FLASHOT_CUDA_CHECK_LAUNCH();
  if (cascade) {
    launch_c_transform_wg_listed(sd, *rop, *cop, s, sms, sc, stream);
    const int slots = wg_subtiles(rop->padded_d / 16) * sms;
    ct_merge_listed_kernel<<<std::max(1, std::min(8 * sms, div_up(sd.nrows, 8))), 256, 0, stream>>>(
        sd, sc.h.get(), s, slots, sb, sc.maxima.get(), sc.best.get(), sc.arg.get(), sc.list.get(),
        sc.counters.get(), sc.top.get(), sc.values.get(), sc.index.get(), sc.rescan.get(), sc.counters.get() + 1);
    FLASHOT_CUDA_CHECK_LAUNCH();
  }
  const auto refine = [&](auto kernel) {
    kernel<<<std::max(1, 4 * sms), kRefineThreads, 0, stream>>>(rsd, rh, s, sb, sc.maxima.get(), to.col_ids,
                                                               sc.top.get(), sc.rescan.get(), sc.counters.get() + 1,
                                                               sc.values.get(), sc.index.get());
    FLASHOT_CUDA_CHECK_LAUNCH();
  };
  if (sd.d <= 4)
    refine(ct_refine_kernel<4>);
  else if (sd.d <= 8)
    refine(ct_refine_kernel<8>);
  else if (sd.d <= 16)
    refine(ct_refine_kernel<16>);
  else
    refine(ct_refine_kernel<32>);
  double* out_values = sc.values.get();
  int* out_index = sc.index.get();
  if (tiled) {
    out_values = sc.order.values.get();
    out_index = sc.order.index.get();
    ct_unsort_kernel<<<div_up(sd.nrows, 256), 256, 0, stream>>>(sd.nrows, to.row_ids, sc.values.get(),
                                                                sc.index.get(), out_values, out_index);
    FLASHOT_CUDA_CHECK_LAUNCH();
  }
  return {out_values, out_index};
}

/// out[i] = fp32(values[i]), rounded to nearest (as static_cast<float> on the host).
__global__ void ct_round_kernel(int n, const double* __restrict__ values, float* __restrict__ out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __double2float_rn(values[i]);
}

}  // namespace

void run_c_transform(const CTransformSides& sd, std::span<const float> h_host, double cost_scale, int sms,
                     const MmaOperands* rop, const MmaOperands* cop, const CTransformChoices& choices,
                     std::span<double> values, std::span<std::int32_t> index, CTransformScratch& sc,
                     cudaStream_t stream) {
  if (sd.nrows == 0 || sd.ncols == 0) return;
  const CtDeviceResult r = run_passes(sd, h_host, cost_scale, sms, rop, cop, choices, sc, stream);
  // Both arrays down into page-locked memory (asynchronous, at the link's speed), then into the caller's.
  const std::size_t n = std::size_t(sd.nrows);
  sc.host_out.reserve(n * (sizeof(double) + sizeof(std::int32_t)));
  double* const v = reinterpret_cast<double*>(sc.host_out.get());
  std::int32_t* const j = reinterpret_cast<std::int32_t*>(v + n);
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(v, r.values, sizeof(double) * n, cudaMemcpyDeviceToHost, stream));
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(j, r.index, sizeof(std::int32_t) * n, cudaMemcpyDeviceToHost, stream));
  FLASHOT_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::copy_n(v, n, values.data());
  std::copy_n(j, n, index.data());
}

void run_c_transform_rounded(const CTransformSides& sd, std::span<const float> h_host, double cost_scale, int sms,
                             const MmaOperands* rop, const MmaOperands* cop, const CTransformChoices& choices,
                             std::vector<float>& values, std::vector<std::int32_t>& index, CTransformScratch& sc,
                             cudaStream_t stream) {
  const std::size_t n = std::size_t(std::max(sd.nrows, 0));
  if (sd.nrows == 0 || sd.ncols == 0) {  // as run_c_transform leaves zero-filled results
    values.assign(n, 0.f);
    index.assign(n, 0);
    return;
  }
  const CtDeviceResult r = run_passes(sd, h_host, cost_scale, sms, rop, cop, choices, sc, stream);
  sc.rounded.reserve(n);
  ct_round_kernel<<<div_up(sd.nrows, 256), 256, 0, stream>>>(sd.nrows, r.values, sc.rounded.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
  sc.host_out.reserve(n * (sizeof(float) + sizeof(std::int32_t)));
  float* const v = reinterpret_cast<float*>(sc.host_out.get());
  std::int32_t* const j = reinterpret_cast<std::int32_t*>(v + n);
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(v, sc.rounded.get(), sizeof(float) * n, cudaMemcpyDeviceToHost, stream));
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(j, r.index, sizeof(std::int32_t) * n, cudaMemcpyDeviceToHost, stream));
  // The result vectors are allocated (and their pages touched) while the device works; once it is done, one copy
  // each from the page-locked scratch.
  values.resize(n);
  index.resize(n);
  FLASHOT_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::copy_n(v, n, values.data());
  std::copy_n(j, n, index.data());
}

}  // namespace flashot::detail::cuda
