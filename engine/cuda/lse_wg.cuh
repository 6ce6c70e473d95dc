#pragma once
// The log-sum-exp of split operands on warpgroups (lse_wg_kernel, lse_wg_site_kernel; the pipeline: wg_tile.cuh) and
// their launcher, which engine/cuda/instances/lse_wg_ks*.cu instantiate for each KS (mma_launch.cuh has the pattern).

#include <algorithm>

#include "mma_site.cuh"
#include "wg_tile.cuh"

namespace flashot::detail::cuda {
namespace {

/// The log-sum-exp of split operands on warpgroups, 256 rows per block (128 past KS = 8:
/// wg_wide): lse_mma_kernel<KS, 3, false, SCREEN>'s
/// contract (SCREEN: each warp screens its 16 × 64 tile; otherwise every entry is summed, three wgmma products).
/// SPLIT (dense, MT = 2; kWhole: not split): each tile's subtiles are waited for and summed one at a time
/// (WgWait::kSubtiles, or kSubtilesAcross, the next tile's subtile 0 multiplied during subtile 1's epilogue); every
/// row's running max and sum see the same entries in the same order, so they are the same bit for bit.
template <int KS, bool SCREEN, int MT, WgWait SPLIT = WgWait::kWhole>
__device__ __forceinline__ void lse_wg_body(PointSet rows, PointSet cols, MmaOperands rop, MmaOperands cop,
                                            const float* __restrict__ h, Scale sc, float alpha, int cols_per_split,
                                            float2* __restrict__ partials, int* seeds, ScreenState* screen,
                                            float cut) {
  using Core = WgTileCore<KS, SCREEN, MT>;
  extern __shared__ __align__(128) std::uint8_t wg_smem[];
  TileCounts counts;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int block_row0 = blockIdx.x * Core::kBlockRows;
  Core core;
  core.load_rows(wg_smem, rop, block_row0, rows.count);
  // (m16, row g / g + 8). Screened: running max seeded at the row's best column of the last screened pass
  // (lse_mma_kernel has the reasons).
  float run_max[MT][2], run_sum[MT][2], best[MT][2];
  int best_col[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      run_max[mt][hh] = SCREEN ? seeded_max(rows, cols, h, sc, seeds, block_row0 + Core::subtile_row(mt) + g + hh * 8, t)
                               : kNoMax;
      run_sum[mt][hh] = 0.f;
      best[mt][hh] = -INFINITY;
      best_col[mt][hh] = -1;
    }
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(cols.count, j_begin + cols_per_split);
  const int tiles = (j_end - j_begin + kMmaTile - 1) / kMmaTile;
  const auto tile_start = [&](int it) { return j_begin + it * kMmaTile; };
  const auto epilogue = [&](float (&s)[MT][8][4], const float* vt, int, int it, const std::uint8_t* stage,
                            auto part) {
    constexpr int kFirst = decltype(part)::kFirst, kLast = decltype(part)::kLast;
    if constexpr (SCREEN) {
      float floor[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) floor[mt][0] = run_max[mt][0] - cut, floor[mt][1] = run_max[mt][1] - cut;
      const bool keep = screen_keeps(s, vt, alpha, floor);
      counts.add(keep);
      if (!keep) return;
      core.add_cross(stage, wg_smem, s);
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float2 b2 = *reinterpret_cast<const float2*>(&vt[nt * 8 + 2 * t]);
#pragma unroll
      for (int mt = kFirst; mt < kLast; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          s[mt][nt][2 * hh] = fmaf(alpha, s[mt][nt][2 * hh], b2.x);
          s[mt][nt][2 * hh + 1] = fmaf(alpha, s[mt][nt][2 * hh + 1], b2.y);
        }
    }
#pragma unroll
    for (int mt = kFirst; mt < kLast; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float top = kNoMax;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const float v = s[mt][nt][2 * hh + q];
            if (SCREEN && v > best[mt][hh]) best[mt][hh] = v, best_col[mt][hh] = tile_start(it) + nt * 8 + 2 * t + q;
            top = fmaxf(top, v);
          }
        online_lse_row(top, [&](int e) { return s[mt][e / 2][2 * hh + e % 2]; }, run_max[mt][hh], run_sum[mt][hh]);
      }
  };
  static_assert(SPLIT == WgWait::kWhole || (!SCREEN && MT == 2), "split waits: the dense body of two subtiles");
  constexpr WgWait kWait = SPLIT != WgWait::kWhole               ? SPLIT
                           : !SCREEN && KS <= 4 && MT == 1 ? WgWait::kNextTile
                                                             : WgWait::kWhole;
  core.template run<kWait>(wg_smem, cop, tiles, tile_start, epilogue, [](int, int) {});
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sum = quad_sum(run_sum[mt][hh]);
      const int r = block_row0 + Core::subtile_row(mt) + g + hh * 8;
      if (t == 0 && r < rows.count)
        partials[std::size_t(blockIdx.y) * rows.count + r] = make_float2(run_max[mt][hh], sum);
      if constexpr (SCREEN) store_seed(best[mt][hh], best_col[mt][hh], r, rows.count, t, seeds);
    }
  close_site<SCREEN>(screen, true, counts);
}

/// The dense kernel of a site that is not screened (a screened site launches lse_wg_site_kernel). SPLIT:
/// lse_wg_body's (KS = 1).
template <int KS, WgWait SPLIT = WgWait::kWhole>
__global__ void __launch_bounds__(wg_threads(KS), wg_blocks_per_sm(KS))
    lse_wg_kernel(PointSet rows, PointSet cols, MmaOperands rop, MmaOperands cop, const float* __restrict__ h, Scale sc,
                  float alpha, int cols_per_split, float2* __restrict__ partials, const int* guard, int* seeds,
                  ScreenState* screen, float cut) {
  if (guard != nullptr && *guard == 0) return;
  lse_wg_body<KS, false, wg_subtiles(KS), SPLIT>(rows, cols, rop, cop, h, sc, alpha, cols_per_split, partials,
                                                 seeds, screen, cut);
}

/// A screened site in one launch (rather than a screened and a dense launch of which one returns at once): the
/// screened or the dense body, as the site's state says; the decision for the next launch is taken at the end of
/// either (close_site). SPLIT: the dense body's (KS = 1).
template <int KS, WgWait SPLIT = WgWait::kWhole>
__global__ void __launch_bounds__(wg_threads(KS), wg_blocks_per_sm(KS))
    lse_wg_site_kernel(PointSet rows, PointSet cols, MmaOperands rop, MmaOperands cop, const float* __restrict__ h,
                       Scale sc, float alpha, int cols_per_split, float2* __restrict__ partials, const int* guard,
                       int* seeds, ScreenState* screen, float cut) {
  if (guard != nullptr && *guard == 0) return;
  if (site_runs<true>(screen)) {
    lse_wg_body<KS, true, wg_subtiles(KS)>(rows, cols, rop, cop, h, sc, alpha, cols_per_split, partials, seeds,
                                                screen, cut);
    close_site<false>(screen, false, TileCounts{});
  } else {
    lse_wg_body<KS, false, wg_subtiles(KS), SPLIT>(rows, cols, rop, cop, h, sc, alpha, cols_per_split, partials,
                                                        seeds, screen, cut);
  }
}

}  // namespace

namespace {

template <int KS, bool SITE, WgWait SPLIT>
void launch_lse_wg_variant(const SiteLaunch& at, const LseSiteArgs& a) {
  constexpr int kMt = wg_subtiles(KS);
  if constexpr (SITE) {
    launch_kernel<lse_wg_site_kernel<KS, SPLIT>>(
        at.grid, wg_threads(KS),
        std::max(WgTileCore<KS, true, kMt>::kSharedBytes, WgTileCore<KS, false, kMt>::kSharedBytes),
        at.stream, a.rows, a.cols, a.rop, a.cop, a.h, a.scale, a.alpha, a.cols_per_split, a.partials, a.guard,
        a.seeds, at.screen, at.cut);
  } else {
    launch_kernel<lse_wg_kernel<KS, SPLIT>>(at.grid, wg_threads(KS), WgTileCore<KS, false, kMt>::kSharedBytes,
                                            at.stream, a.rows, a.cols, a.rop, a.cop, a.h, a.scale, a.alpha,
                                            a.cols_per_split, a.partials, a.guard, a.seeds, at.screen, at.cut);
  }
}

}  // namespace

template <int KS, bool SITE>
void launch_lse_wg_kernel(const SiteLaunch& at, const LseSiteArgs& a) {
  // Split waits where a warpgroup has two subtiles and the operands ask for them (MmaOperands::subtile_overlap).
  if constexpr (wg_subtiles(KS) == 2) {
    switch (a.rop.subtile_overlap) {
      case SubtileOverlap::kWithinTile:
        return launch_lse_wg_variant<KS, SITE, WgWait::kSubtiles>(at, a);
      case SubtileOverlap::kAcrossTiles:
        return launch_lse_wg_variant<KS, SITE, WgWait::kSubtilesAcross>(at, a);
      case SubtileOverlap::kOff:
        break;
    }
  }
  launch_lse_wg_variant<KS, SITE, WgWait::kWhole>(at, a);
}

}  // namespace flashot::detail::cuda
