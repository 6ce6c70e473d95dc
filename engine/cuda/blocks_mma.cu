// The block-sparse log-sum-exp on the tensor cores (docs/block-sparse.md): lse_mma_kernel's dense path (split fp16
// operands, mma.sync, the pipeline of mma_tile.cuh) with its tiles taken from the row block's listed ranges and its
// scalars from the row block's segment. A thread block's 128 rows lie in one row block (kPatternBlock = 256). The
// dense kernels (lse_mma.cuh, instances/) are untouched: this is a separate kernel, one instantiation per KS here.

#include <stdexcept>

#include "block_tiles.cuh"
#include "blocks.cuh"
#include "error.hpp"
#include "mma_launch.cuh"
#include "mma_site.cuh"
#include "mma_tile.cuh"

namespace flashot::detail::cuda {
namespace {

static_assert(kPatternBlock % kMmaBlockRows == 0 && kPatternBlock % kMmaTile == 0, "blocks hold whole mma tiles");

template <int KS>
__global__ void __launch_bounds__(kMmaThreads) block_lse_mma_kernel(PointSet rows, PointSet cols, MmaOperands rop,
                                                                    MmaOperands cop, const float* __restrict__ h,
                                                                    float operand_inv, BlockLists lists,
                                                                    const SegmentScale* __restrict__ seg,
                                                                    float2* __restrict__ partials) {
  using Core = MmaTileCore<KS, 3, false, true>;
  extern __shared__ __align__(16) std::uint16_t smem[];  // (2 stages, arrays, BN, DP + 8)
  __shared__ __align__(8) float vtile[2][kMmaThreads];  // (2 tiles, BN used of 128) column biases
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * kMmaBlockRows + warp * kWarpRows;
  const int rb = int(blockIdx.x) * kMmaBlockRows / kPatternBlock;
  const SegmentScale ss = seg[lists.segment[rb]];
  const float alpha = ss.alpha * operand_inv;
  Core core;
  core.load_rows(rop, row0, rows.count);
  float run_max[2][2], run_sum[2][2];  // (m16 subtile, row g / g+8)
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) run_max[mt][hh] = kNoMax, run_sum[mt][hh] = 0.f;

  const int total = listed_tiles(lists, rb, cols.count);
  const int per = (total + int(gridDim.y) - 1) / int(gridDim.y);
  const int t_begin = int(blockIdx.y) * per;
  const int tiles = max(0, min(total, t_begin + per) - t_begin);
  const int j_end = cols.count;  // ranges end on tile boundaries (or at the end): the end masks every tile
  TileCursor cursor;
  const auto tile_start = [&](int it) { return cursor.at(lists, rb, cols.count, t_begin + it, j_end); };
  const auto bias_at = [&](int j) { return ss.c1 * (h[j] - ss.s * cols.norm2[j]) + kLog2e * cols.logw[j]; };
  const auto epilogue = [&](float (&s)[2][8][4], const float* vt, int, int, const std::uint16_t*) {
    float bias[8][2];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float2 b2 = *reinterpret_cast<const float2*>(&vt[nt * 8 + 2 * t]);
      bias[nt][0] = b2.x;
      bias[nt][1] = b2.y;
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
            const float v = fmaf(alpha, s[mt][nt][2 * hh + q], bias[nt][q]);
            s[mt][nt][2 * hh + q] = v;
            top = fmaxf(top, v);
          }
        online_lse_row(
            top, [&](int e) { return s[mt][e / 2][2 * hh + e % 2]; }, run_max[mt][hh], run_sum[mt][hh]);
      }
  };
  core.template run_site_tiles<false, true>(smem, vtile, cop, tiles, j_end, tile_start, bias_at, epilogue,
                                            [](int, int) {});
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sum = quad_sum(run_sum[mt][hh]);
      const int r = row0 + mt * 16 + g + hh * 8;
      if (t == 0 && r < rows.count)
        partials[std::size_t(blockIdx.y) * rows.count + r] = make_float2(run_max[mt][hh], sum);
    }
}

template <int KS>
void launch_ks(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
               const float* h, const BlockLists& lists, const SegmentScale* seg, int splits, float2* partials,
               cudaStream_t stream) {
  const dim3 grid(div_up(rows.count, kMmaBlockRows), splits);
  const float operand_inv = 1.0f / (rop.scale * cop.scale);
  launch_kernel<block_lse_mma_kernel<KS>>(grid, kMmaThreads, mma_shared_bytes(KS, 3), stream, rows, cols, rop, cop,
                                          h, operand_inv, lists, seg, partials);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool block_mma_serves(const MmaOperands& rop) {
  return rop.mode == MmaMode::kSplitFp16 && rop.padded_d >= 16 && rop.padded_d <= 128 && rop.padded_d % 16 == 0;
}

void launch_block_lse_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
                          const float* h, const BlockLists& lists, const SegmentScale* seg, int splits,
                          float2* partials, cudaStream_t stream) {
  if (rows.count == 0) return;
  switch (rop.padded_d / 16) {
    case 1: return launch_ks<1>(rows, cols, rop, cop, h, lists, seg, splits, partials, stream);
    case 2: return launch_ks<2>(rows, cols, rop, cop, h, lists, seg, splits, partials, stream);
    case 3: return launch_ks<3>(rows, cols, rop, cop, h, lists, seg, splits, partials, stream);
    case 4: return launch_ks<4>(rows, cols, rop, cop, h, lists, seg, splits, partials, stream);
    case 5: return launch_ks<5>(rows, cols, rop, cop, h, lists, seg, splits, partials, stream);
    case 6: return launch_ks<6>(rows, cols, rop, cop, h, lists, seg, splits, partials, stream);
    case 7: return launch_ks<7>(rows, cols, rop, cop, h, lists, seg, splits, partials, stream);
    case 8: return launch_ks<8>(rows, cols, rop, cop, h, lists, seg, splits, partials, stream);
    default: throw std::logic_error("block-sparse tensor-core LSE asked for padded d = " + std::to_string(rop.padded_d));
  }
}

}  // namespace flashot::detail::cuda
