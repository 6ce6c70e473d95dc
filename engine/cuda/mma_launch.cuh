#pragma once
// The launch template of the tensor-core sites (the LSE and the one-pass sums on mma.sync or wgmma). Each kernel
// family has one header that holds its kernels and a host launcher template (lse_mma.cuh: launch_lse_mma_kernel,
// sums_mma.cuh, lse_wg.cuh, sums_wg.cuh); engine/cuda/instances/<family>_ks<KS>.cu instantiates the launcher for one
// KS = padded d / 16 with the macros below, so each instantiation compiles in its own translation unit (in parallel)
// and mma_launch.cu — the launch policy, which picks the kernels of a site — sees only the declarations here. The
// pattern is ggml-cuda's template-instances folder; docs/engine.md, "Where the kernels live", has the map.
//
// Adding a variant: a template parameter on the launcher, a line in its family's macro; a new KS: a file in
// instances/ (CMake globs them).

#include <cuda_runtime.h>

#include "kernels.cuh"
#include "mma.cuh"
#include "mma_device.cuh"

namespace flashot::detail::cuda {
namespace {

// mma.sync kernels (mma_tile.cuh).
constexpr int kMmaThreads = 128;                   // 4 warps
constexpr int kWarpRows = 32;                      // two m16 subtiles per warp
constexpr int kMmaBlockRows = 4 * kWarpRows;       // (BM) 128
constexpr int kMmaTile = 64;                       // (BN) columns per shared-memory tile: eight n8 subtiles

/// Dynamic shared memory of one kernel instantiation: two stages of the column tile (hi and lo arrays for split
/// operands, screened or not).
constexpr int mma_shared_bytes(int ks, int terms) {
  return 2 * (terms == 3 ? 2 : 1) * kMmaTile * (16 * ks + 8) * 2;
}

// Warpgroup kernels (wg_tile.cuh).
constexpr int kWgThreads = 512;           // four warpgroups
constexpr int kWgBlockRows = 256;         // 16 rows per warp
constexpr int kWgWarps = kWgThreads / 32;
/// m64 subtiles per warpgroup of the warpgroup kernels (WgTileCore's MT; the LSE and the one-pass sums alike): two
/// at d <= 16 (KS = 1), whose per-entry work is the exponential and its sums alone, so that a tile's fixed costs
/// and the sums' column transpose-sum serve twice the entries (issue 21: 100k, d = 8, ncu, one sums pass 6.95 ->
/// 5.01 ms, 10.3 -> 7.7 instructions per entry; before, 2.0 issued per cycle with 4 warps per scheduler, 0.9 of them
/// eligible); their blocks have kWgThreads / 2 threads and two share an SM. One beyond KS = 1, where the rows' A
/// fragments of two subtiles would not fit the 128 registers that two blocks per SM leave.
constexpr int wg_subtiles(int ks) { return ks == 1 ? 2 : 1; }
/// m64 subtiles per warpgroup of the biased sums (sums_bias.cuh): two at KS = 1 and 2 (d + 2 bias slots ≤ 32). Their
/// dense body keeps no rows' lo halves in registers beyond the biased operands' and no screen, so two subtiles of
/// KS = 2 fit the 128 registers of two blocks per SM (cuobjdump: 128, no local memory), and a tile's fixed costs
/// serve twice the entries: 100k², ε = 0.1, 10 iterations, H200, d = 17 / 20 / 24 68.1 / 64.9 / 61.9 →
/// 52.4 / 57.4 / 54.1 ms (docs/benchmarks.md, "Two subtiles at KS = 2"). The LSE and the screened sums at KS = 2
/// lost 3–7 % with two (d = 20 tensor 71.2 → 75.8 ms), so they keep one (wg_subtiles).
constexpr int wg_bias_subtiles(int ks) { return ks <= 2 ? 2 : 1; }
/// Past padded d = 128 (KS = 12, 16: the "wide" LSE and one-pass sums; docs/engine.md, "Past d = 128") a warp's A
/// fragments alone take 64 registers a half at KS = 16, and a 64-column stage of hi and lo 64 KB of shared memory:
/// blocks of two warpgroups (128 rows, 256 threads), one per SM, so that a thread may have 255 registers and the
/// block about 200 KB of stages. Below, the blocks above (kWgThreads / wg_subtiles threads, kWgBlockRows rows).
constexpr bool wg_wide(int ks) { return ks > 8; }
constexpr int wg_threads(int ks) { return wg_wide(ks) ? 256 : kWgThreads / wg_subtiles(ks); }
constexpr int wg_block_rows(int ks) { return wg_wide(ks) ? 128 : kWgBlockRows; }
constexpr int wg_blocks_per_sm(int ks) { return wg_wide(ks) ? 1 : wg_subtiles(ks); }

}  // namespace

/// The arguments every kernel of an LSE site takes before (screen, cut), in the kernels' order.
struct LseSiteArgs {
  PointSet rows, cols;
  MmaOperands rop, cop;
  const float* h;
  Scale scale;
  float alpha;
  int cols_per_split;
  float2* partials;
  const int* guard;
  int* seeds;
};

/// The arguments every kernel of a one-pass sums site takes before (screen, cut), in the kernels' order.
struct SumsSiteArgs {
  PointSet x, y;
  MmaOperands xop, yop;
  const float* f;
  const float* g;
  Scale scale;
  float alpha;
  int cols_per_split;
  float* rsum;
  float* csum;
  const SumsForecast* forecast;
};

/// The arguments of the one-pass sums with the biases on the tensor cores (sums_bias.cuh).
struct BiasSumsArgs {
  PointSet x;      // the rows (their weights and count)
  int cols_count;  // y.count
  MmaOperands rop, cop;  // launch_bias_operands' rows and column tiles
  int cols_per_split;
  float* rsum;
  float* csum;
  const SumsForecast* forecast;
};

/// One launch of a site's kernel: its grid (the site's plan), stream, screen state (null: none) and cut.
struct SiteLaunch {
  dim3 grid;
  cudaStream_t stream;
  ScreenState* screen;
  float cut;
};

/// Launches Kernel with `bytes` of dynamic shared memory (raising its limit first, once per device).
template <auto Kernel, typename... Args>
void launch_kernel(dim3 grid, int threads, int bytes, cudaStream_t stream, Args... args) {
  allow_shared_bytes<Kernel>(bytes);
  Kernel<<<grid, threads, bytes, stream>>>(args...);
}

/// lse_mma_kernel<KS, TERMS, BF16, SCREEN> (lse_mma.cuh).
template <int KS, int TERMS, bool BF16, bool SCREEN>
void launch_lse_mma_kernel(const SiteLaunch& at, const LseSiteArgs& args);
/// sums_mma_kernel<KS, TERMS, BF16, SCREEN> (sums_mma.cuh).
template <int KS, int TERMS, bool BF16, bool SCREEN>
void launch_sums_mma_kernel(const SiteLaunch& at, const SumsSiteArgs& args);
/// SITE: lse_wg_site_kernel<KS> (a screened site); else lse_wg_kernel<KS> (lse_wg.cuh).
template <int KS, bool SITE>
void launch_lse_wg_kernel(const SiteLaunch& at, const LseSiteArgs& args);
/// SITE: sums_wg_site_kernel<KS>; else sums_wg_kernel<KS> (sums_wg.cuh).
template <int KS, bool SITE>
void launch_sums_wg_kernel(const SiteLaunch& at, const SumsSiteArgs& args);

/// sums_bias_wg_kernel<KS> (sums_bias.cuh; KS = 1, 2).
template <int KS>
void launch_sums_bias_wg_kernel(const SiteLaunch& at, const BiasSumsArgs& args);

// The variants launch_site (mma_launch.cu) launches for one KS: split fp16 screened and dense, single fp16, single
// bf16 (mma.sync); site and dense (warpgroup, split fp16 only).
#define FLASHOT_MMA_INSTANCES(FAMILY, ARGS, KS)                                            \
  template void launch_##FAMILY##_mma_kernel<KS, 3, false, true>(const SiteLaunch&, const ARGS&);  \
  template void launch_##FAMILY##_mma_kernel<KS, 3, false, false>(const SiteLaunch&, const ARGS&); \
  template void launch_##FAMILY##_mma_kernel<KS, 1, false, false>(const SiteLaunch&, const ARGS&); \
  template void launch_##FAMILY##_mma_kernel<KS, 1, true, false>(const SiteLaunch&, const ARGS&)
#define FLASHOT_WG_INSTANCES(FAMILY, ARGS, KS)                                    \
  template void launch_##FAMILY##_wg_kernel<KS, true>(const SiteLaunch&, const ARGS&); \
  template void launch_##FAMILY##_wg_kernel<KS, false>(const SiteLaunch&, const ARGS&)

}  // namespace flashot::detail::cuda
