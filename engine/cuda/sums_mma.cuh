#pragma once
// The one-pass symmetric sums on mma.sync (sums_mma_kernel; the pipeline: mma_tile.cuh) and its launcher, which
// engine/cuda/instances/sums_mma_ks*.cu instantiate for each KS (mma_launch.cuh has the pattern).

#include "mma_site.cuh"
#include "mma_tile.cuh"

namespace flashot::detail::cuda {
namespace {

/// The one-pass symmetric step on tensor cores (symmetric.cu has the contract and the fp32 kernels): each plan
/// entry E_ij = exp2(α⟨x_i,y_j⟩ + u_i + v_j) is evaluated once and feeds both the row sum Σ_j E_ij and the column
/// sum Σ_i a_i E_ij. SCREEN as for lse_mma_kernel, with the fixed bound 2^-cut on every entry in place of the
/// running max (the sums are kept down to 2^-70, so cut covers that, the count of terms and the weights).
template <int KS, int TERMS, bool BF16, bool SCREEN>
__global__ void __launch_bounds__(kMmaThreads) sums_mma_kernel(PointSet x, PointSet y, MmaOperands xop,
                                                               MmaOperands yop, const float* __restrict__ f,
                                                               const float* __restrict__ g, Scale sc, float alpha,
                                                               int cols_per_split, float* __restrict__ rsum,
                                                               float* __restrict__ csum, const SumsForecast* forecast,
                                                               ScreenState* screen, float cut) {
  static_assert(!SCREEN || TERMS == 3, "only split operands are screened");
  const SumsStep step = forecast != nullptr ? sums_step(*forecast) : SumsStep{};
  if (step.skip != 0) return;
  const float shift = step.shift;
  if (SCREEN && screen != nullptr && screen->paid == 0) cut += screen->floor_gap;  // ScreenState::paid
  using Core = MmaTileCore<KS, TERMS, BF16, !SCREEN>;
  extern __shared__ __align__(16) std::uint16_t smem[];                 // (2 stages, arrays, BN, DP + 8)
  __shared__ __align__(8) float vtile[2][kMmaThreads];                  // (2 tiles, BN used of 128) biases v_j
  __shared__ __align__(8) float colbuf[2][kMmaThreads / 32][kMmaTile];  // (2 tiles, warps, BN) column sums
  const bool runs = site_runs<SCREEN>(screen);
  TileCounts counts;
  if (runs) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gr = lane / 4, t = lane % 4;
    const int row0 = blockIdx.x * kMmaBlockRows + warp * kWarpRows;
    Core core;
    core.load_rows(xop, row0, x.count);

    float u[2][2], ar[2][2], rs[2][2];  // (m16 subtile, row g / g+8)
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = row0 + mt * 16 + gr + hh * 8;
        const bool valid = i < x.count;
        u[mt][hh] = valid ? sc.c1 * (f[i] - sc.s * x.norm2[i]) + shift : -INFINITY;
        ar[mt][hh] = valid ? x.weight[i] : 0.f;
        rs[mt][hh] = 0.f;
      }

    const int j_begin = blockIdx.y * cols_per_split;
    const int j_end = min(y.count, j_begin + cols_per_split);
    const int tiles = (j_end - j_begin + kMmaTile - 1) / kMmaTile;
    // Blocks of one split start at different tiles so that their column atomics do not all hit one address range.
    const auto tile_start = [&](int it) { return j_begin + ((it + blockIdx.x) % tiles) * kMmaTile; };
    const auto bias_at = [&](int j) { return column_bias(y, g, sc, j); };
    const auto epilogue = [&](float (&s)[2][8][4], const float* vt, int parity, int, const std::uint16_t* stage) {
      if constexpr (SCREEN) {
        float floor[2][2];  // an invalid row (u = −∞) has floor +∞: never kept
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) floor[mt][hh] = -cut - u[mt][hh];
        const bool keep = screen_keeps(s, vt, alpha, floor);
        counts.add(keep);
        if (!keep) {
          *reinterpret_cast<float2*>(&colbuf[parity][warp][gr * 8 + 2 * t]) = make_float2(0.f, 0.f);
          return;
        }
        core.add_cross(stage, xop.lo, row0, x.count, s);
      }
      float col[16];  // (n8, 2): Σ over this lane's four rows of a_i E_ij, columns nt·8 + 2t + q
#pragma unroll
      for (int c = 0; c < 16; ++c) col[c] = 0.f;
      add_entries(s, vt, alpha, u, ar, rs, col);
      total_column_sums(col);
      *reinterpret_cast<float2*>(&colbuf[parity][warp][gr * 8 + 2 * t]) = make_float2(col[0], col[1]);
    };
    const auto drain = [&](int parity, int it) { drain_column_sums(colbuf[parity], tile_start, it, j_end, csum); };
    core.template run_site_tiles<SCREEN, false>(smem, vtile, yop, tiles, j_end, tile_start, bias_at, epilogue,
                                                drain);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float sum = quad_sum(rs[mt][hh]);
        const int i = row0 + mt * 16 + gr + hh * 8;
        if (t == 0 && i < x.count) atomicAdd(&rsum[i], sum);
      }
  }
  close_site<SCREEN>(screen, runs, counts);
}

}  // namespace

template <int KS, int TERMS, bool BF16, bool SCREEN>
void launch_sums_mma_kernel(const SiteLaunch& at, const SumsSiteArgs& a) {
  launch_kernel<sums_mma_kernel<KS, TERMS, BF16, SCREEN>>(
      at.grid, kMmaThreads, mma_shared_bytes(KS, TERMS), at.stream, a.x, a.y, a.xop, a.yop, a.f, a.g, a.scale,
      a.alpha, a.cols_per_split, a.rsum, a.csum, a.forecast, at.screen, at.cut);
}

}  // namespace flashot::detail::cuda
