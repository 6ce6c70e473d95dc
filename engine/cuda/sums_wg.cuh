#pragma once
// The one-pass sums of split operands on warpgroups (sums_wg_kernel, sums_wg_site_kernel; the pipeline:
// wg_tile.cuh) and their launcher, which engine/cuda/instances/sums_wg_ks*.cu instantiate for each KS
// (mma_launch.cuh has the pattern).

#include <algorithm>

#include "mma_site.cuh"
#include "wg_tile.cuh"

namespace flashot::detail::cuda {
namespace {

/// The one-pass sums of split operands on warpgroups, 256 rows per block (128 past KS = 8:
/// wg_wide): sums_mma_kernel<KS, 3, false, SCREEN>'s
/// contract. SPLIT (dense, MT = 2; kWhole: not split): each tile's subtiles are waited for and summed one at a time
/// (WgWait::kSubtiles, or kSubtilesAcross, the next tile's subtile 0 multiplied during subtile 1's sums), with the
/// same sums bit for bit.
template <int KS, bool SCREEN, int MT, WgWait SPLIT = WgWait::kWhole>
__device__ __forceinline__ void sums_wg_body(PointSet x, PointSet y, MmaOperands xop, MmaOperands yop,
                                             const float* __restrict__ f, const float* __restrict__ g, Scale sc,
                                             float alpha, int cols_per_split, float* __restrict__ rsum,
                                             float* __restrict__ csum, float shift, ScreenState* screen,
                                             float cut) {
  using Core = WgTileCore<KS, SCREEN, MT>;
  extern __shared__ __align__(128) std::uint8_t wg_smem[];
  // (stage, warp, BN): each warp's column sums of the stage's tile (store_column_sums), added up by drain.
  __shared__ __align__(16) float colslots[Core::kStages][Core::kWarps][kMmaTile];
  TileCounts counts;
  const int lane = threadIdx.x % 32, gr = lane / 4, t = lane % 4;
  const int block_row0 = blockIdx.x * Core::kBlockRows;
  Core core;
  core.load_rows(wg_smem, xop, block_row0, x.count);
  float u[MT][2], ar[MT][2], rs[MT][2] = {};  // (m16, row g / g + 8)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int i = block_row0 + Core::subtile_row(mt) + gr + hh * 8;
      const bool valid = i < x.count;
      u[mt][hh] = valid ? sc.c1 * (f[i] - sc.s * x.norm2[i]) + shift : -INFINITY;
      ar[mt][hh] = valid ? x.weight[i] : 0.f;
    }
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(y.count, j_begin + cols_per_split);
  const int tiles = (j_end - j_begin + kMmaTile - 1) / kMmaTile;
  const auto tile_start = [&](int it) { return j_begin + ((it + blockIdx.x) % tiles) * kMmaTile; };
  float col[16];  // (n8, 2): Σ over this lane's 2·MT rows of a_i E_ij, columns nt·8 + 2t + q (one tile's)
  const auto epilogue = [&](float (&s)[MT][8][4], const float* vt, int slot, int, const std::uint8_t* stage,
                            auto part) {
    constexpr int kFirst = decltype(part)::kFirst, kLast = decltype(part)::kLast;
    if constexpr (SCREEN) {
      float floor[MT][2];  // an invalid row (u = −∞) is never kept
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) floor[mt][0] = -cut - u[mt][0], floor[mt][1] = -cut - u[mt][1];
      const bool keep = screen_keeps(s, vt, alpha, floor);
      counts.add(keep);
      if (!keep) {
        store_column_sums(colslots[slot], 0.f, 0.f);
        return;
      }
      core.add_cross(stage, wg_smem, s);
    }
    if constexpr (kFirst == 0)
#pragma unroll
      for (int c = 0; c < 16; ++c) col[c] = 0.f;
    add_entries<MT, kFirst, kLast>(s, vt, alpha, u, ar, rs, col);
    if constexpr (kLast < MT) return;  // the tile's other subtile follows
    total_column_sums(col);
    store_column_sums(colslots[slot], col[0], col[1]);
  };
  const auto drain = [&](int stage, int it) { drain_column_slots(colslots[stage], tile_start(it), j_end, csum); };
  static_assert(SPLIT == WgWait::kWhole || (!SCREEN && MT == 2), "split waits: the dense body of two subtiles");
  constexpr WgWait kWait = SPLIT != WgWait::kWhole               ? SPLIT
                           : !SCREEN && KS <= 4 && MT == 1 ? WgWait::kNextTile
                                                             : WgWait::kWhole;
  core.template run<kWait>(wg_smem, yop, tiles, tile_start, epilogue, drain);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sum = quad_sum(rs[mt][hh]);
      const int i = block_row0 + Core::subtile_row(mt) + gr + hh * 8;
      if (t == 0 && i < x.count) atomicAdd(&rsum[i], sum);
    }
  close_site<SCREEN>(screen, true, counts);
}

/// The dense kernel of a sums site that is not screened (a screened one launches sums_wg_site_kernel). SPLIT:
/// sums_wg_body's (KS = 1).
template <int KS, WgWait SPLIT = WgWait::kWhole>
__global__ void __launch_bounds__(wg_threads(KS), wg_blocks_per_sm(KS))
    sums_wg_kernel(PointSet x, PointSet y, MmaOperands xop, MmaOperands yop, const float* __restrict__ f,
                   const float* __restrict__ g, Scale sc, float alpha, int cols_per_split, float* __restrict__ rsum,
                   float* __restrict__ csum, const SumsForecast* forecast, ScreenState* screen, float cut) {
  const SumsStep step = forecast != nullptr ? sums_step(*forecast) : SumsStep{};
  if (step.skip != 0) return;
  const float shift = step.shift;
  sums_wg_body<KS, false, wg_subtiles(KS), SPLIT>(x, y, xop, yop, f, g, sc, alpha, cols_per_split, rsum, csum,
                                                  shift, screen, cut);
}

/// The sums of a screened site in one launch (lse_wg_site_kernel). SPLIT: its dense body's (KS = 1).
template <int KS, WgWait SPLIT = WgWait::kWhole>
__global__ void __launch_bounds__(wg_threads(KS), wg_blocks_per_sm(KS))
    sums_wg_site_kernel(PointSet x, PointSet y, MmaOperands xop, MmaOperands yop, const float* __restrict__ f,
                        const float* __restrict__ g, Scale sc, float alpha, int cols_per_split,
                        float* __restrict__ rsum, float* __restrict__ csum, const SumsForecast* forecast,
                        ScreenState* screen, float cut) {
  const SumsStep step = forecast != nullptr ? sums_step(*forecast) : SumsStep{};
  if (step.skip != 0) return;
  const float shift = step.shift;
  if (site_runs<true>(screen)) {
    if (screen->paid == 0) cut += screen->floor_gap;  // ScreenState::paid
    sums_wg_body<KS, true, wg_subtiles(KS)>(x, y, xop, yop, f, g, sc, alpha, cols_per_split, rsum, csum,
                                                 shift, screen, cut);
    close_site<false>(screen, false, TileCounts{});
  } else {
    sums_wg_body<KS, false, wg_subtiles(KS), SPLIT>(x, y, xop, yop, f, g, sc, alpha, cols_per_split, rsum, csum,
                                                         shift, screen, cut);
  }
}

}  // namespace

namespace {

template <int KS, bool SITE, WgWait SPLIT>
void launch_sums_wg_variant(const SiteLaunch& at, const SumsSiteArgs& a) {
  constexpr int kMt = wg_subtiles(KS);
  if constexpr (SITE) {
    launch_kernel<sums_wg_site_kernel<KS, SPLIT>>(
        at.grid, wg_threads(KS),
        std::max(WgTileCore<KS, true, kMt>::kSharedBytes, WgTileCore<KS, false, kMt>::kSharedBytes),
        at.stream, a.x, a.y, a.xop, a.yop, a.f, a.g, a.scale, a.alpha, a.cols_per_split, a.rsum, a.csum,
        a.forecast, at.screen, at.cut);
  } else {
    launch_kernel<sums_wg_kernel<KS, SPLIT>>(at.grid, wg_threads(KS), WgTileCore<KS, false, kMt>::kSharedBytes,
                                             at.stream, a.x, a.y, a.xop, a.yop, a.f, a.g, a.scale, a.alpha,
                                             a.cols_per_split, a.rsum, a.csum, a.forecast, at.screen, at.cut);
  }
}

}  // namespace

template <int KS, bool SITE>
void launch_sums_wg_kernel(const SiteLaunch& at, const SumsSiteArgs& a) {
  // Split waits where a warpgroup has two subtiles and the operands ask for them (MmaOperands::subtile_overlap).
  if constexpr (wg_subtiles(KS) == 2) {
    switch (a.xop.subtile_overlap) {
      case SubtileOverlap::kWithinTile:
        return launch_sums_wg_variant<KS, SITE, WgWait::kSubtiles>(at, a);
      case SubtileOverlap::kAcrossTiles:
        return launch_sums_wg_variant<KS, SITE, WgWait::kSubtilesAcross>(at, a);
      case SubtileOverlap::kOff:
        break;
    }
  }
  launch_sums_wg_variant<KS, SITE, WgWait::kWhole>(at, a);
}

}  // namespace flashot::detail::cuda
