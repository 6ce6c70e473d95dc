#pragma once
// The tensor-core log-sum-exp on mma.sync (lse_mma_kernel; the pipeline: mma_tile.cuh) and its launcher, which
// engine/cuda/instances/lse_mma_ks*.cu instantiate for each KS (mma_launch.cuh has the pattern).

#include "mma_site.cuh"
#include "mma_tile.cuh"

namespace flashot::detail::cuda {
namespace {

/// SCREEN (split operands only): each tile's scores start as hi·hi alone; a warp keeps the tile — adds the cross
/// products and sums it — only if some entry, raised by the hi·hi error bound, reaches within `cut` (log2 units) of
/// its row's running max (so a dropped tile adds less than 2^-cut of the max per entry; ScreenState). The dense
/// kernel of a screened site counts nothing (close_site).
template <int KS, int TERMS, bool BF16, bool SCREEN>
__global__ void __launch_bounds__(kMmaThreads) lse_mma_kernel(PointSet rows, PointSet cols, MmaOperands rop,
                                                              MmaOperands cop, const float* __restrict__ h,
                                                              Scale sc, float alpha, int cols_per_split,
                                                              float2* __restrict__ partials, const int* guard,
                                                              int* seeds, ScreenState* screen, float cut) {
  static_assert(!SCREEN || TERMS == 3, "only split operands are screened");
  if (guard != nullptr && *guard == 0) return;
  using Core = MmaTileCore<KS, TERMS, BF16, !SCREEN>;
  extern __shared__ __align__(16) std::uint16_t smem[];  // (2 stages, arrays, BN, DP + 8)
  __shared__ __align__(8) float vtile[2][kMmaThreads];  // (2 tiles, BN used of 128) column biases
  const bool runs = site_runs<SCREEN>(screen);
  TileCounts counts;
  if (runs) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int row0 = blockIdx.x * kMmaBlockRows + warp * kWarpRows;
    Core core;
    core.load_rows(rop, row0, rows.count);

    float run_max[2][2], run_sum[2][2];  // (m16 subtile, row g / g+8)
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) run_max[mt][hh] = kNoMax, run_sum[mt][hh] = 0.f;
    // Screened: each row's running max starts at an actual entry of its row (seeded_max). Without it the first
    // tiles would set the max, and a warp would keep every tile in which one of its 32 rows meets a new near-maximum.
    float best[2][2];  // (m16, row) best score among the kept tiles, and its column
    int best_col[2][2];
    if constexpr (SCREEN) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          best[mt][hh] = -INFINITY;
          best_col[mt][hh] = -1;
          run_max[mt][hh] = seeded_max(rows, cols, h, sc, seeds, row0 + mt * 16 + g + hh * 8, t);
        }
    }

    const int j_begin = blockIdx.y * cols_per_split;
    const int j_end = min(cols.count, j_begin + cols_per_split);
    const int tiles = (j_end - j_begin + kMmaTile - 1) / kMmaTile;
    const auto tile_start = [&](int it) { return j_begin + it * kMmaTile; };
    const auto bias_at = [&](int j) { return column_bias(cols, h, sc, j); };
    // Online log-sum-exp of rows g and g + 8 of each m16 subtile; the 4 lanes of a row share its max.
    const auto epilogue = [&](float (&s)[2][8][4], const float* vt, int, int it, const std::uint16_t* stage) {
      if constexpr (SCREEN) {
        float floor[2][2];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) floor[mt][hh] = run_max[mt][hh] - cut;
        const bool keep = screen_keeps(s, vt, alpha, floor);
        counts.add(keep);
        if (!keep) return;
        core.add_cross(stage, rop.lo, row0, rows.count, s);
      }
      // Scores v = α·s + v_j in place, then per row the tile's max, the rescaled running sum, the exponentials.
      // Screened: the biases are read per n8 subtile (all 16 held beside the cross products' operands cost that
      // kernel 40 registers: 208 instead of 168, two blocks per SM instead of three).
      float bias[SCREEN ? 1 : 8][2];  // (n8, 2) this lane's columns nt·8 + 2t + q
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const float2 b2 = *reinterpret_cast<const float2*>(&vt[nt * 8 + 2 * t]);
        if constexpr (SCREEN) {
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              s[mt][nt][2 * hh] = fmaf(alpha, s[mt][nt][2 * hh], b2.x);
              s[mt][nt][2 * hh + 1] = fmaf(alpha, s[mt][nt][2 * hh + 1], b2.y);
            }
        } else {
          bias[nt][0] = b2.x;
          bias[nt][1] = b2.y;
        }
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float top = kNoMax;
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              float v = s[mt][nt][2 * hh + q];
              if constexpr (SCREEN) {
                if (v > best[mt][hh]) best[mt][hh] = v, best_col[mt][hh] = tile_start(it) + nt * 8 + 2 * t + q;
              } else {
                v = fmaf(alpha, v, bias[nt][q]);
                s[mt][nt][2 * hh + q] = v;
              }
              top = fmaxf(top, v);
            }
          online_lse_row(
              top, [&](int e) { return s[mt][e / 2][2 * hh + e % 2]; }, run_max[mt][hh], run_sum[mt][hh]);
        }
    };
    core.template run_site_tiles<SCREEN, true>(smem, vtile, cop, tiles, j_end, tile_start, bias_at, epilogue,
                                               [](int, int) {});
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float sum = quad_sum(run_sum[mt][hh]);
        const int r = row0 + mt * 16 + g + hh * 8;
        if (t == 0 && r < rows.count)
          partials[std::size_t(blockIdx.y) * rows.count + r] = make_float2(run_max[mt][hh], sum);
        if constexpr (SCREEN) store_seed(best[mt][hh], best_col[mt][hh], r, rows.count, t, seeds);
      }
  }
  close_site<SCREEN>(screen, runs, counts);
}

}  // namespace

template <int KS, int TERMS, bool BF16, bool SCREEN>
void launch_lse_mma_kernel(const SiteLaunch& at, const LseSiteArgs& a) {
  launch_kernel<lse_mma_kernel<KS, TERMS, BF16, SCREEN>>(
      at.grid, kMmaThreads, mma_shared_bytes(KS, TERMS), at.stream, a.rows, a.cols, a.rop, a.cop, a.h, a.scale,
      a.alpha, a.cols_per_split, a.partials, a.guard, a.seeds, at.screen, at.cut);
}

}  // namespace flashot::detail::cuda
