#pragma once
// Device code shared by the tensor-core kernels of a launch site, mma.sync and wgmma alike: the screen of a warp's
// tile (screen_keeps), the one-pass sums' entries and column transpose-sums, the online log-sum-exp row step and its
// seed, and the protocol by which a screened site's kernels take turns (site_runs, close_site; ScreenState in
// mma.cuh). docs/engine.md, "Where the kernels live", lists the kernels that include it.

#include <cstdint>

#include "device_common.cuh"
#include "mma_launch.cuh"

namespace flashot::detail::cuda {
namespace {


/// The sum of v over the four lanes that hold one row of an mma C fragment (lanes 4g .. 4g + 3), on each of them.
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/// The screen of a warp's tile (MT m16 subtiles × 64 columns) from its hi·hi scores s: whether some entry reaches
/// its row's floor, α·s + v_j ≥ floor (cut, margin included, is already in the floor; NaN counts as reaching).
/// Warp-uniform.
template <int MT>
__device__ __forceinline__ bool screen_keeps(const float (&s)[MT][8][4], const float* vt, float alpha,
                                             const float (&floor)[MT][2]) {
  const int t = threadIdx.x % 4;
  float top[MT][2];  // (m16, row g / g + 8)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) top[mt][0] = top[mt][1] = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const float2 b2 = *reinterpret_cast<const float2*>(&vt[nt * 8 + 2 * t]);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        top[mt][hh] = fmaxf(top[mt][hh], fmaf(alpha, s[mt][nt][2 * hh], b2.x));
        top[mt][hh] = fmaxf(top[mt][hh], fmaf(alpha, s[mt][nt][2 * hh + 1], b2.y));
      }
  }
  bool near = false;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) near |= !(top[mt][hh] < floor[mt][hh]);
  return __any_sync(0xffffffffu, near);
}

/// The one-pass step's entries of a warp's tile (MT m16 subtiles × 64 columns, this lane's rows g, g + 8 of each):
/// E = exp2(α·s + v_j + u) per entry, added to the rows' sums rs and, weighted by the rows' a, to this lane's column
/// sums col[2·nt + q] (columns nt·8 + 2t + q). Subtiles FIRST .. LAST − 1 alone (the others' s are not read): the
/// entries of subtiles (0, 1) then (1, 2) are added in the order of (0, 2)'s, so the sums are the same bit for bit.
template <int MT, int FIRST = 0, int LAST = MT>
__device__ __forceinline__ void add_entries(const float (&s)[MT][8][4], const float* vt, float alpha,
                                            const float (&u)[MT][2], const float (&a)[MT][2], float (&rs)[MT][2],
                                            float (&col)[16]) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const float2 b2 = *reinterpret_cast<const float2*>(&vt[nt * 8 + 2 * t]);
#pragma unroll
    for (int mt = FIRST; mt < LAST; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float p0 = fmaf(alpha, s[mt][nt][2 * hh], b2.x + u[mt][hh]);
        const float p1 = fmaf(alpha, s[mt][nt][2 * hh + 1], b2.y + u[mt][hh]);
        const float e0 = fast_exp2(p0), e1 = fast_exp2(p1);
        rs[mt][hh] += e0 + e1;
        col[2 * nt] = fmaf(a[mt][hh], e0, col[2 * nt]);
        col[2 * nt + 1] = fmaf(a[mt][hh], e1, col[2 * nt + 1]);
      }
  }
}

/// Warp tiles kept / looked at by one warp of a screened site (lane-uniform: every count follows a warp vote).
struct TileCounts {
  unsigned kept = 0, seen = 0;
  __device__ __forceinline__ void add(bool kept_tile) {
    ++seen;
    kept += kept_tile ? 1u : 0u;
  }
};

/// Whether a block of the SCREEN (or dense) kernel of a site runs: without a state only the dense kernel exists;
/// with one, the kernel that `use` names. `use` changes only in the dense launch's last block, after every block
/// of that launch has read it, and the screened launch of a pair always precedes the dense one.
template <bool SCREEN>
__device__ __forceinline__ bool site_runs(const ScreenState* st) {
  if (st == nullptr) return !SCREEN;
  return (*reinterpret_cast<const volatile int*>(&st->use) != 0) == SCREEN;
}

/// End of every block of a screened site's kernels: the screened launch's warps add their counts; the dense
/// launch's last block (whichever kernel ran) chooses the kernel of the next launch. After a screened launch: keep
/// screening while at most pays_percent of the warp tiles were kept — and, at an LSE site, once more after a first
/// launch that kept at most three quarters, whose seeds were column 0 — else run dense for `backoff` launches (8,
/// doubling up to kProbeMost while the screen keeps not paying) and then screen once again to re-measure (the plan
/// sharpens as ε falls). A state with siblings (the rows' LSE, the first site a cold solve screens) that decides
/// against its screen sends those that have not screened yet straight to dense as well (at n = 10k, d = 64 each
/// screened launch that keeps 60% of its tiles costs ≈ 50 µs more than the dense one). The dense kernels count
/// nothing: their running max is not seeded, so their count would not predict the screened kernel's.
inline constexpr int kProbeAfter = 8, kProbeMost = 64;

template <bool SCREEN>
__device__ __forceinline__ void close_site(ScreenState* st, bool ran, const TileCounts& counts) {
  if (st == nullptr) return;
  if (SCREEN && ran && threadIdx.x % 32 == 0 && counts.seen > 0) {
    atomicAdd(&st->kept, static_cast<unsigned long long>(counts.kept));
    atomicAdd(&st->seen, static_cast<unsigned long long>(counts.seen));
    __threadfence();  // before the block's end count (a site kernel decides in the same launch)
  }
  if constexpr (!SCREEN) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      if (atomicAdd(&st->done, 1u) == gridDim.x * gridDim.y - 1) {
        __threadfence();
        const unsigned long long kept = atomicAdd(&st->kept, 0ull), seen = atomicAdd(&st->seen, 0ull);
        st->last_low = seen > 0 && st->paid != 0 ? 1 : 0;  // the cut this launch's blocks read (paid changes here)
        if (st->pinned == 0) {
          if (seen > 0) {  // the screened kernel ran
            ++st->screened_runs;
            // The first launch's seeds were column 0, so it may keep more than the next would; but one that kept
            // over three quarters of its tiles is dense enough not to be tried again at once (n = 10k, d = 64).
            const bool pays = 100 * kept <= static_cast<unsigned long long>(st->pays_percent) * seen ||
                              (st->seeded != 0 && st->screened_runs == 1 && 4 * kept <= 3 * seen);
            st->use = pays ? 1 : 0;
            st->paid = pays ? 1 : 0;
            if (pays) {
              st->dense_left = 0;
              st->backoff = kProbeAfter;
            } else {
              st->dense_left = st->backoff;
              st->backoff = min(2 * st->backoff, kProbeMost);
              for (int k = 1; k <= st->siblings; ++k) {
                if (st[k].pinned == 0 && st[k].screened_runs == 0) {
                  st[k].use = 0;
                  st[k].dense_left = kProbeAfter;
                  st[k].next_low = 0;
                }
              }
            }
          } else if (st->use == 0 && --st->dense_left <= 0) {
            st->use = 1;
          }
        }
        st->next_low = st->use != 0 && st->paid != 0 ? 1 : 0;
        st->kept_total += kept;
        st->seen_total += seen;
        st->kept = 0;
        st->seen = 0;
        st->done = 0;
      }
    }
  }
}

/// The screened LSE's first running max of row r (lse_mma_kernel has the reasons): the score of column seeds[r], the
/// best column a screened pass last found for the row (any column is valid; 0 at first), by an fp32 dot product over
/// the row's quad of lanes, less one for the rounding between it and the tensor cores'.
__device__ __forceinline__ float seeded_max(const PointSet& rows, const PointSet& cols, const float* h,
                                            const Scale& sc, const int* seeds, int r, int t) {
  const int j = r < rows.count ? min(max(seeds[r], 0), cols.count - 1) : 0;
  float dot = 0.f;
  if (r < rows.count)
    for (int k = t; k < sc.d; k += 4)
      dot = fmaf(rows.points[std::size_t(r) * sc.d + k], cols.points[std::size_t(j) * sc.d + k], dot);
  dot += __shfl_xor_sync(0xffffffffu, dot, 1);
  dot += __shfl_xor_sync(0xffffffffu, dot, 2);
  return fmaxf(fmaf(sc.alpha, dot, column_bias(cols, h, sc, j)) - 1.f, kNoMax);
}

/// One online log-sum-exp step of a row held by a quad of lanes: top is this lane's max of the tile's 16 scores
/// value(0 .. 15); the quad's max rescales the running sum, then the exponentials are added.
template <typename Value>
__device__ __forceinline__ void online_lse_row(float top, Value value, float& run_max, float& run_sum) {
  top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
  top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
  if (top > run_max) {
    run_sum *= fast_exp2(run_max - top);
    run_max = top;
  }
  float sum = 0.f;
#pragma unroll
  for (int e = 0; e < 16; ++e) sum += fast_exp2(value(e) - run_max);
  run_sum += sum;
}

/// The row's best column for the next pass, from the quad's (score, column) pairs, stored by lane t = 0. Column
/// splits of one row race to store theirs: whichever lands, it is a column of that row, which is all a seed must be.
__device__ __forceinline__ void store_seed(float b, int c, int r, int count, int t, int* seeds) {
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, b, off);
    const int oc = __shfl_xor_sync(0xffffffffu, c, off);
    if (ob > b) b = ob, c = oc;
  }
  if (t == 0 && r < count && c >= 0) seeds[r] = c;
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

/// The warp's column sums of one tile: the 8 lanes g = 0..7 with the same t hold partial sums of the same 16 columns;
/// halving over lane bits 4, 3, 2 leaves lane (g, t) with the totals of columns g·8 + 2t + {0, 1} in col[0], col[1].
__device__ __forceinline__ void total_column_sums(float (&col)[16]) {
  const int lane = threadIdx.x % 32;
  column_halving<8, 16>(col, lane & 16);
  column_halving<4, 8>(col, lane & 8);
  column_halving<2, 4>(col, lane & 4);
}

/// This warp's column totals of one tile (total_column_sums: lane (g, t) holds columns g·8 + 2t + {0, 1}) into its own
/// row of the stage's slots, one 8-byte store a lane and no shared atomics; the stage's last warp adds the rows up
/// (drain_column_slots). A warp whose screen drops the tile stores zeros.
template <int WARPS>
__device__ __forceinline__ void store_column_sums(float (&slots)[WARPS][kMmaTile], float c0, float c1) {
  const int lane = threadIdx.x % 32;
  *reinterpret_cast<float2*>(&slots[threadIdx.x / 32][(lane / 4) * 8 + 2 * (lane % 4)]) = make_float2(c0, c1);
}

/// By the last warp done with a stage: the WARPS warps' column totals of its tile (store_column_sums) added in warp
/// order, so the sums do not depend on the schedule; lane L takes columns L and L + 32 of the tile starting at j0,
/// one global atomic per column below j_end that has mass.
template <int WARPS>
__device__ __forceinline__ void drain_column_slots(const float (&slots)[WARPS][kMmaTile], int j0, int j_end,
                                                   float* csum) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int c = lane + 32 * h, j = j0 + c;
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) total += slots[w][c];
    if (j < j_end && total != 0.f) atomicAdd(&csum[j], total);
  }
}

/// After the tile's barrier: the WARPS warps' column sums of tile it (buf) added up by
/// threads 0 .. BN − 1, one atomic per column (from tile_start(it)) that has mass.
template <int WARPS, typename TileStart>
__device__ __forceinline__ void drain_column_sums(const float (&buf)[WARPS][kMmaTile], TileStart tile_start, int it,
                                                  int j_end, float* csum) {
  if (threadIdx.x < kMmaTile) {
    const int j = tile_start(it) + threadIdx.x;
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) total += buf[w][threadIdx.x];
    if (j < j_end && total != 0.f) atomicAdd(&csum[j], total);
  }
}

}  // namespace
}  // namespace flashot::detail::cuda
