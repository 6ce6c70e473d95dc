#pragma once
// The one-pass sums with the biases on the tensor cores (sums_bias_wg_kernel; the pipeline: wg_tile.cuh) and its
// launcher, which engine/cuda/instances/sums_bias_wg.cu instantiates for KS = 1, 2 (mma_launch.cuh has the pattern).
//
// Why (issue 21): at KS = 1 the dense sums kernel (sums_wg.cuh) is bound by instruction issue, not by the tensor
// cores or the exponential unit (docs/benchmarks.md, "Every d"). Here the operands carry, in the K slots that the
// padding of d leaves free, the row bias u_i, the column bias v_j and the factor α (launch_bias_operands,
// docs/engine.md "Biases on the tensor cores" has the layout and the error bound), so that the accumulator holds the
// exponent itself: an entry costs one exponential, one add (the row sum) and one FMA (the weighted column sum).

#include "mma_site.cuh"
#include "wg_tile.cuh"

namespace flashot::detail::cuda {
namespace {

/// E = exp2(p) of a warp's tile whose accumulator p already is the exponent (MT m16 subtiles × 64 columns, this
/// lane's rows g, g + 8 of each): added to the rows' sums rs and, weighted by the rows' a, to this lane's column sums
/// col[2·nt + q] (columns nt·8 + 2t + q). add_entries' contract without the biases (subtiles FIRST .. LAST − 1).
template <int MT, int FIRST = 0, int LAST = MT>
__device__ __forceinline__ void add_exponentials(const float (&p)[MT][8][4], const float (&a)[MT][2],
                                                 float (&rs)[MT][2], float (&col)[16]) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int mt = FIRST; mt < LAST; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float e0 = fast_exp2(p[mt][nt][2 * hh]), e1 = fast_exp2(p[mt][nt][2 * hh + 1]);
        rs[mt][hh] += e0 + e1;
        col[2 * nt] = fmaf(a[mt][hh], e0, col[2 * nt]);
        col[2 * nt + 1] = fmaf(a[mt][hh], e1, col[2 * nt + 1]);
      }
}

/// sums_bias_wg_kernel's body (MT subtiles per warpgroup).
template <int KS, int MT, WgWait SPLIT>
__device__ __forceinline__ void sums_bias_wg_body(PointSet x, int cols_count, MmaOperands rop, MmaOperands cop,
                                                  int cols_per_split, float* __restrict__ rsum,
                                                  float* __restrict__ csum) {
  using Core = WgTileCore<KS, false, MT>;
  extern __shared__ __align__(128) std::uint8_t wg_smem[];
  // (stage, warp, BN): each warp's column sums of the stage's tile (store_column_sums), added up by drain.
  __shared__ __align__(16) float colslots[Core::kStages][Core::kWarps][kMmaTile];
  const int lane = threadIdx.x % 32, gr = lane / 4, t = lane % 4;
  const int block_row0 = blockIdx.x * kWgBlockRows;
  Core core;
  core.load_rows(wg_smem, rop, block_row0, x.count);
  float ar[MT][2], rs[MT][2] = {};  // (m16, row g / g + 8)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int i = block_row0 + Core::subtile_row(mt) + gr + hh * 8;
      ar[mt][hh] = i < x.count ? x.weight[i] : 0.f;
    }
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(cols_count, j_begin + cols_per_split);
  const int tiles = (j_end - j_begin + kMmaTile - 1) / kMmaTile;
  const auto tile_start = [&](int it) { return j_begin + ((it + blockIdx.x) % tiles) * kMmaTile; };
  float col[16];  // (n8, 2): Σ over this lane's 2·MT rows of a_i E_ij, columns nt·8 + 2t + q (one tile's)
  const auto epilogue = [&](float (&p)[MT][8][4], const float*, int slot, int, const std::uint8_t*, auto part) {
    constexpr int kFirst = decltype(part)::kFirst, kLast = decltype(part)::kLast;
    if constexpr (kFirst == 0)
#pragma unroll
      for (int c = 0; c < 16; ++c) col[c] = 0.f;
    add_exponentials<MT, kFirst, kLast>(p, ar, rs, col);
    if constexpr (kLast < MT) return;  // the tile's other subtile follows
    total_column_sums(col);
    store_column_sums(colslots[slot], col[0], col[1]);
  };
  const auto drain = [&](int stage, int it) { drain_column_slots(colslots[stage], tile_start(it), j_end, csum); };
  static_assert(SPLIT == WgWait::kWhole || MT == 2, "split waits serve two subtiles");
  constexpr WgWait kWait = SPLIT != WgWait::kWhole ? SPLIT : MT == 1 ? WgWait::kNextTile : WgWait::kWhole;
  core.template run<kWait>(wg_smem, cop, tiles, tile_start, epilogue, drain);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sum = quad_sum(rs[mt][hh]);
      const int i = block_row0 + Core::subtile_row(mt) + gr + hh * 8;
      if (t == 0 && i < x.count) atomicAdd(&rsum[i], sum);
    }
}

/// The one-pass sums of the biased operands, 256 rows per block: rsum_i += Σ_j E_ij, csum_j += Σ_i a_i E_ij with
/// E_ij = exp2(⟨A_i, B_j⟩), A the rows' (rop: x.count × 16·KS, hi and lo) and B the columns' operands (cop.tiles;
/// cop.bias is copied with each tile and not read). Rows past x.count read zeros (E = 1, weight 0, no row sum
/// stored); columns past y.count carry a sentinel exponent (E = 0). forecast: the step's SumsStep; its shift is
/// already in the rows' operands, its skip returns here. SPLIT (KS = 1, 2: two subtiles, wg_bias_subtiles): kWhole,
/// or each tile's subtiles waited for and summed one at a time (WgWait::kSubtiles, kSubtilesAcross), with the same sums bit for bit.
template <int KS, WgWait SPLIT = WgWait::kWhole>
__global__ void __launch_bounds__(kWgThreads / wg_bias_subtiles(KS), wg_bias_subtiles(KS))
    sums_bias_wg_kernel(PointSet x, int cols_count, MmaOperands rop, MmaOperands cop, int cols_per_split,
                        float* __restrict__ rsum, float* __restrict__ csum, const SumsForecast* forecast) {
  if (forecast != nullptr && sums_step(*forecast).skip != 0) return;
  sums_bias_wg_body<KS, wg_bias_subtiles(KS), SPLIT>(x, cols_count, rop, cop, cols_per_split, rsum, csum);
}

}  // namespace

namespace {

template <int KS, WgWait SPLIT>
void launch_sums_bias_wg_variant(const SiteLaunch& at, const BiasSumsArgs& a) {
  constexpr int kMt = wg_bias_subtiles(KS);
  launch_kernel<sums_bias_wg_kernel<KS, SPLIT>>(at.grid, kWgThreads / kMt, WgTileCore<KS, false, kMt>::kSharedBytes,
                                                at.stream, a.x, a.cols_count, a.rop, a.cop, a.cols_per_split, a.rsum,
                                                a.csum, a.forecast);
}

}  // namespace

template <int KS>
void launch_sums_bias_wg_kernel(const SiteLaunch& at, const BiasSumsArgs& a) {
  // Split waits where a warpgroup has two subtiles and the operands ask for them (MmaOperands::subtile_overlap).
  if constexpr (wg_bias_subtiles(KS) == 2) {
    switch (a.rop.subtile_overlap) {
      case SubtileOverlap::kWithinTile:
        return launch_sums_bias_wg_variant<KS, WgWait::kSubtiles>(at, a);
      case SubtileOverlap::kAcrossTiles:
        return launch_sums_bias_wg_variant<KS, WgWait::kSubtilesAcross>(at, a);
      case SubtileOverlap::kOff:
        break;
    }
  }
  launch_sums_bias_wg_variant<KS, WgWait::kWhole>(at, a);
}

}  // namespace flashot::detail::cuda
