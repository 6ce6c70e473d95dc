#pragma once
// The log-sum-exp of split operands on warpgroups (lse_wg_kernel, lse_wg_site_kernel; the pipeline: wg_tile.cuh) and
// their launcher, which engine/cuda/instances/lse_wg_ks*.cu instantiate for each KS (mma_launch.cuh has the pattern).

#include <algorithm>

#include "mma_site.cuh"
#include "wg_tile.cuh"

namespace flashot::detail::cuda {
namespace {

/// The log-sum-exp of split operands on warpgroups, 256 rows per block: lse_mma_kernel<KS, 3, false, SCREEN>'s
/// contract (SCREEN: each warp screens its 16 × 64 tile; otherwise every entry is summed, three wgmma products).
template <int KS, bool SCREEN>
__device__ __forceinline__ void lse_wg_body(PointSet rows, PointSet cols, MmaOperands rop, MmaOperands cop,
                                            const float* __restrict__ h, Scale sc, float alpha, int cols_per_split,
                                            float2* __restrict__ partials, int* seeds, ScreenState* screen,
                                            float cut) {
  using Core = WgTileCore<KS, SCREEN>;
  extern __shared__ __align__(128) std::uint8_t wg_smem[];
  TileCounts counts;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * kWgBlockRows + warp * 16;
  Core core;
  core.load_rows(wg_smem, rop, blockIdx.x * kWgBlockRows, rows.count);
  // Screened: running max seeded at the row's best column of the last screened pass (lse_mma_kernel has the
  // reasons).
  float run_max[2] = {kNoMax, kNoMax}, run_sum[2] = {0.f, 0.f}, best[2] = {-INFINITY, -INFINITY};
  int best_col[2] = {-1, -1};
#pragma unroll
  for (int hh = 0; hh < 2 && SCREEN; ++hh) run_max[hh] = seeded_max(rows, cols, h, sc, seeds, row0 + g + hh * 8, t);
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(cols.count, j_begin + cols_per_split);
  const int tiles = (j_end - j_begin + kMmaTile - 1) / kMmaTile;
  const auto tile_start = [&](int it) { return j_begin + it * kMmaTile; };
  const auto epilogue = [&](float (&s)[1][8][4], const float* vt, int, int it, const std::uint8_t* stage) {
    if constexpr (SCREEN) {
      const float floor[1][2] = {{run_max[0] - cut, run_max[1] - cut}};
      const bool keep = screen_keeps(s, vt, alpha, floor);
      counts.add(keep);
      if (!keep) return;
      core.add_cross(stage, wg_smem, s);
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float2 b2 = *reinterpret_cast<const float2*>(&vt[nt * 8 + 2 * t]);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        s[0][nt][2 * hh] = fmaf(alpha, s[0][nt][2 * hh], b2.x);
        s[0][nt][2 * hh + 1] = fmaf(alpha, s[0][nt][2 * hh + 1], b2.y);
      }
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float top = kNoMax;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const float v = s[0][nt][2 * hh + q];
          if (SCREEN && v > best[hh]) best[hh] = v, best_col[hh] = tile_start(it) + nt * 8 + 2 * t + q;
          top = fmaxf(top, v);
        }
      online_lse_row(top, [&](int e) { return s[0][e / 2][2 * hh + e % 2]; }, run_max[hh], run_sum[hh]);
    }
  };
  core.template run<!SCREEN && KS <= 4>(wg_smem, cop, tiles, tile_start, epilogue, [](int, int) {});
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float sum = quad_sum(run_sum[hh]);
    const int r = row0 + g + hh * 8;
    if (t == 0 && r < rows.count)
      partials[std::size_t(blockIdx.y) * rows.count + r] = make_float2(run_max[hh], sum);
    if constexpr (SCREEN) store_seed(best[hh], best_col[hh], r, rows.count, t, seeds);
  }
  close_site<SCREEN>(screen, true, counts);
}

/// The dense kernel of a site that is not screened (a screened site launches lse_wg_site_kernel).
template <int KS>
__global__ void __launch_bounds__(kWgThreads, 1)
    lse_wg_kernel(PointSet rows, PointSet cols, MmaOperands rop, MmaOperands cop, const float* __restrict__ h, Scale sc,
                  float alpha, int cols_per_split, float2* __restrict__ partials, const int* guard, int* seeds,
                  ScreenState* screen, float cut) {
  if (guard != nullptr && *guard == 0) return;
  lse_wg_body<KS, false>(rows, cols, rop, cop, h, sc, alpha, cols_per_split, partials, seeds, screen, cut);
}

/// A screened site in one launch (rather than a screened and a dense launch of which one returns at once): the
/// screened or the dense body, as the site's state says; the decision for the next launch is taken at the end of
/// either (close_site).
template <int KS>
__global__ void __launch_bounds__(kWgThreads, 1)
    lse_wg_site_kernel(PointSet rows, PointSet cols, MmaOperands rop, MmaOperands cop, const float* __restrict__ h,
                       Scale sc, float alpha, int cols_per_split, float2* __restrict__ partials, const int* guard,
                       int* seeds, ScreenState* screen, float cut) {
  if (guard != nullptr && *guard == 0) return;
  if (site_runs<true>(screen)) {
    lse_wg_body<KS, true>(rows, cols, rop, cop, h, sc, alpha, cols_per_split, partials, seeds, screen, cut);
    close_site<false>(screen, false, TileCounts{});
  } else {
    lse_wg_body<KS, false>(rows, cols, rop, cop, h, sc, alpha, cols_per_split, partials, seeds, screen, cut);
  }
}

}  // namespace

template <int KS, bool SITE>
void launch_lse_wg_kernel(const SiteLaunch& at, const LseSiteArgs& a) {
  if constexpr (SITE) {
    launch_kernel<lse_wg_site_kernel<KS>>(
        at.grid, kWgThreads, std::max(WgTileCore<KS, true>::kSharedBytes, WgTileCore<KS, false>::kSharedBytes),
        at.stream, a.rows, a.cols, a.rop, a.cop, a.h, a.scale, a.alpha, a.cols_per_split, a.partials, a.guard,
        a.seeds, at.screen, at.cut);
  } else {
    launch_kernel<lse_wg_kernel<KS>>(at.grid, kWgThreads, WgTileCore<KS, false>::kSharedBytes, at.stream, a.rows,
                                     a.cols, a.rop, a.cop, a.h, a.scale, a.alpha, a.cols_per_split, a.partials,
                                     a.guard, a.seeds, at.screen, at.cut);
  }
}

}  // namespace flashot::detail::cuda
