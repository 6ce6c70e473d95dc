// The hard c-transform's first pass on the tensor cores (c_transform.cuh, docs/engine.md "Hard c-transform"): the
// score tiles come from the engine's own mma.sync pipeline (MmaTileCore::run_tiles of mma_tile.cuh, split fp16
// operands: hi·hi + hi·lo + lo·hi with fp32 accumulation, the operands DeviceStep already holds for its soft
// c-transforms); the epilogue keeps each row's candidate list (CtList, c_transform.cuh) instead of a log-sum-exp. Error bound of these scores and the fp64 re-decision of near ties: c_transform.cu.

#include <algorithm>

#include "c_transform.cuh"
#include "error.hpp"
#include "mma_tile.cuh"

namespace flashot::detail::cuda {
namespace {

template <int KS>
__global__ void __launch_bounds__(kMmaThreads) ct_mma_kernel(CTransformSides sd, MmaOperands rop, MmaOperands cop,
                                                             const float* __restrict__ h, float s, float alpha,
                                                             int cols_per_split, float* __restrict__ best,
                                                             int* __restrict__ arg) {
  using Core = MmaTileCore<KS, 3, false, true>;
  extern __shared__ __align__(16) std::uint16_t smem[];  // (2 stages, hi and lo, BN, DP + 8)
  __shared__ __align__(8) float vtile[2][kMmaThreads];  // column biases of two tiles
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * kMmaBlockRows + warp * kWarpRows;
  Core core;
  core.load_rows(rop, row0, sd.nrows);
  CtList list[2][2];  // (m16 subtile, row g / g + 8)
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) list[mt][hh].init();
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(sd.ncols, j_begin + cols_per_split);
  const int tiles = (j_end - j_begin + kMmaTile - 1) / kMmaTile;
  const auto tile_start = [&](int it) { return j_begin + it * kMmaTile; };
  const auto bias_at = [&](int j) { return h[j] - s * sd.cols_norm2[j]; };
  const auto epilogue = [&](float (&sc)[2][8][4], const float* vt, int, int it, const std::uint16_t*) {
    const int base = tile_start(it);
    // Per 8-column subtile: the thread's 8 scores, one test whether any beats its row's rest, and the insertions
    // (rare once the lists have settled) behind that one branch.
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float2 bb = *reinterpret_cast<const float2*>(&vt[nt * 8 + 2 * t]);
      const int j = base + nt * 8 + 2 * t;
      bool any = false;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          sc[mt][nt][2 * hh] = fmaf(alpha, sc[mt][nt][2 * hh], bb.x);
          sc[mt][nt][2 * hh + 1] = fmaf(alpha, sc[mt][nt][2 * hh + 1], bb.y);
          any |= fmaxf(sc[mt][nt][2 * hh], sc[mt][nt][2 * hh + 1]) > list[mt][hh].s[CtList::K];
        }
      if (any) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            list[mt][hh].push(sc[mt][nt][2 * hh], j);
            list[mt][hh].push(sc[mt][nt][2 * hh + 1], j + 1);
          }
      }
    }
  };
  // One score array (no overlapped next-tile products): the epilogue has no exponentials to hide the products
  // behind, and the second array with the running best/second/column pushed KS = 4 to 255 registers and spills.
  core.template run_tiles<false, false>(smem, vtile, cop, tiles, j_end, tile_start, bias_at, epilogue,
                                        [](int, int) {});
  // The 4 lanes of a quad share a row: merge their columns (the lower column on an exact tie of the bests).
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
      for (int offset = 1; offset < 4; offset *= 2) list[mt][hh].merge_lane(offset);
      const int r = row0 + mt * 16 + g + hh * 8;
      if (t == 0 && r < sd.nrows) list[mt][hh].store(best, arg, blockIdx.y, sd.nrows, r);
    }
}

template <int KS>
void launch_ks(dim3 grid, cudaStream_t stream, const CTransformSides& sd, const MmaOperands& rop,
               const MmaOperands& cop, const float* h, float s, float alpha, int per, CTransformScratch& sc) {
  launch_kernel<ct_mma_kernel<KS>>(grid, kMmaThreads, mma_shared_bytes(KS, 3), stream, sd, rop, cop, h, s, alpha, per,
                                   sc.best.get(), sc.arg.get());
}

}  // namespace

bool c_transform_mma_serves(const MmaOperands& rop, const MmaOperands& cop) {
  return rop.mode == MmaMode::kSplitFp16 && cop.mode == MmaMode::kSplitFp16 && rop.lo != nullptr &&
         cop.lo != nullptr && rop.padded_d == cop.padded_d && rop.padded_d >= 16 && rop.padded_d <= 128;
}

void launch_c_transform_mma(const CTransformSides& sd, const MmaOperands& rop, const MmaOperands& cop,
                            const float* h, float s, int sms, CTransformScratch& sc, int& splits,
                            cudaStream_t stream) {
  const int blocks = div_up(sd.nrows, kMmaBlockRows);
  const int tiles = div_up(sd.ncols, kMmaTile);
  splits = std::max(1, std::min(tiles, div_up(4LL * sms, blocks)));
  const int per = div_up(tiles, splits) * kMmaTile;
  splits = div_up(sd.ncols, per);
  sc.best.reserve(std::size_t(splits) * (kCtCand + 1) * sd.nrows);
  sc.arg.reserve(std::size_t(splits) * kCtCand * sd.nrows);
  // The operands hold scale·p: ⟨p, q⟩ = ⟨P, Q⟩ / (scale_rows·scale_cols).
  const float alpha = 2.f * s / (rop.scale * cop.scale);
  const dim3 grid(blocks, splits);
  switch (rop.padded_d / 16) {
    case 1: launch_ks<1>(grid, stream, sd, rop, cop, h, s, alpha, per, sc); break;
    case 2: launch_ks<2>(grid, stream, sd, rop, cop, h, s, alpha, per, sc); break;
    case 3: launch_ks<3>(grid, stream, sd, rop, cop, h, s, alpha, per, sc); break;
    case 4: launch_ks<4>(grid, stream, sd, rop, cop, h, s, alpha, per, sc); break;
    case 5: launch_ks<5>(grid, stream, sd, rop, cop, h, s, alpha, per, sc); break;
    case 6: launch_ks<6>(grid, stream, sd, rop, cop, h, s, alpha, per, sc); break;
    case 7: launch_ks<7>(grid, stream, sd, rop, cop, h, s, alpha, per, sc); break;
    case 8: launch_ks<8>(grid, stream, sd, rop, cop, h, s, alpha, per, sc); break;
    default: throw std::invalid_argument("c_transform: no tensor-core kernel for padded d = " + std::to_string(rop.padded_d));
  }
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace flashot::detail::cuda
