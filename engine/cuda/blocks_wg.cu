// The block-sparse log-sum-exp on warpgroups (docs/block-sparse.md): lse_wg.cuh's dense body (WgTileCore, split
// fp16 operands, all three products by wgmma, 256 rows per thread block = one row block) with its column tiles taken
// from the row block's listed ranges (block_tiles.cuh, as blocks_mma.cu) and its scalars from the segments: the
// rows' from the row block's segment, each column's bias from its column block's segment (one bias array per pass,
// launch_block_column_biases, read by the tile pipeline's bulk copies as the dense kernels read theirs). A separate
// kernel: the dense instances (instances/lse_wg_ks*.cu) are untouched.

#include <stdexcept>
#include <string>

#include "block_tiles.cuh"
#include "blocks.cuh"
#include "error.hpp"
#include "mma_launch.cuh"
#include "mma_site.cuh"
#include "wg_tile.cuh"

namespace flashot::detail::cuda {
namespace {

static_assert(kPatternBlock == kWgBlockRows, "a warpgroup thread block's rows are one row block");
static_assert(kPatternBlock % kMmaTile == 0, "blocks hold whole column tiles");

/// out[j] (j < column_tiles(cols.count) · 64) = column j's bias with its column block's segment scalars (as
/// column_bias and blocks_mma.cu's bias_at), −∞ past cols.count.
__global__ void block_column_biases_kernel(PointSet cols, const float* __restrict__ h,
                                           const int* __restrict__ col_segment, const SegmentScale* __restrict__ seg,
                                           float* __restrict__ out, int padded) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= padded) return;
  if (j >= cols.count) {
    out[j] = -INFINITY;
    return;
  }
  const SegmentScale ss = seg[col_segment[j / kPatternBlock]];
  out[j] = ss.c1 * (h[j] - ss.s * cols.norm2[j]) + kLog2e * cols.logw[j];
}

/// block_lse_mma_kernel's contract on warpgroups: partials (gridDim.y × rows.count) of each row over split
/// blockIdx.y's share of its row block's listed tiles; cop.bias holds the pass's column biases.
template <int KS>
__global__ void __launch_bounds__(kWgThreads / wg_subtiles(KS), wg_subtiles(KS))
    block_lse_wg_kernel(PointSet rows, PointSet cols, MmaOperands rop, MmaOperands cop, float operand_inv,
                        BlockLists lists, const SegmentScale* __restrict__ seg, float2* __restrict__ partials) {
  constexpr int MT = wg_subtiles(KS);
  using Core = WgTileCore<KS, false, MT>;
  extern __shared__ __align__(128) std::uint8_t wg_smem[];
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int rb = blockIdx.x;
  const int block_row0 = rb * kWgBlockRows;
  const float alpha = seg[lists.segment[rb]].alpha * operand_inv;
  Core core;
  core.load_rows(wg_smem, rop, block_row0, rows.count);
  float run_max[MT][2], run_sum[MT][2];  // (m64 subtile, row g / g + 8)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) run_max[mt][hh] = kNoMax, run_sum[mt][hh] = 0.f;

  const int total = listed_tiles(lists, rb, cols.count);
  const int per = (total + int(gridDim.y) - 1) / int(gridDim.y);
  const int t_begin = int(blockIdx.y) * per;
  const int tiles = max(0, min(total, t_begin + per) - t_begin);
  // Each thread that fetches (thread 0, then whichever warp leader frees a stage) walks with its own cursor.
  TileCursor cursor;
  const auto tile_start = [&](int it) { return cursor.at(lists, rb, cols.count, t_begin + it, cols.count); };
  // Every subtile at once (WgWait::kWhole or kNextTile).
  const auto epilogue = [&](float (&s)[MT][8][4], const float* vt, int, int, const std::uint8_t*,
                            WgSubtiles<0, MT>) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float2 b2 = *reinterpret_cast<const float2*>(&vt[nt * 8 + 2 * t]);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          s[mt][nt][2 * hh] = fmaf(alpha, s[mt][nt][2 * hh], b2.x);
          s[mt][nt][2 * hh + 1] = fmaf(alpha, s[mt][nt][2 * hh + 1], b2.y);
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float top = kNoMax;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int q = 0; q < 2; ++q) top = fmaxf(top, s[mt][nt][2 * hh + q]);
        online_lse_row(top, [&](int e) { return s[mt][e / 2][2 * hh + e % 2]; }, run_max[mt][hh], run_sum[mt][hh]);
      }
  };
  constexpr WgWait kWait = KS <= 4 && MT == 1 ? WgWait::kNextTile : WgWait::kWhole;
  core.template run<kWait>(wg_smem, cop, tiles, tile_start, epilogue, [](int, int) {});
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sum = quad_sum(run_sum[mt][hh]);
      const int r = block_row0 + Core::subtile_row(mt) + g + hh * 8;
      if (t == 0 && r < rows.count)
        partials[std::size_t(blockIdx.y) * rows.count + r] = make_float2(run_max[mt][hh], sum);
    }
}

template <int KS>
void launch_ks(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
               const BlockLists& lists, const SegmentScale* seg, int splits, float2* partials, cudaStream_t stream) {
  constexpr int kMt = wg_subtiles(KS);
  const dim3 grid(div_up(rows.count, kWgBlockRows), splits);
  const float operand_inv = 1.0f / (rop.scale * cop.scale);
  launch_kernel<block_lse_wg_kernel<KS>>(grid, kWgThreads / kMt, WgTileCore<KS, false, kMt>::kSharedBytes, stream,
                                         rows, cols, rop, cop, operand_inv, lists, seg, partials);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool block_wg_serves(const MmaOperands& rop, const MmaOperands& cop) {
  return block_mma_serves(rop) && block_mma_serves(cop) && rop.warpgroup && cop.warpgroup && cop.tiles != nullptr &&
         cop.bias != nullptr;
}

void launch_block_lse_wg(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
                         const float* h, const BlockLists& lists, const int* col_segment, const SegmentScale* seg,
                         float* bias, int splits, float2* partials, cudaStream_t stream) {
  if (rows.count == 0) return;
  if (bias != cop.bias) throw std::logic_error("launch_block_lse_wg: the bias buffer is not the column side's");
  const int padded = column_tiles(cols.count) * kMmaTile;
  if (padded > 0) {
    block_column_biases_kernel<<<div_up(padded, 256), 256, 0, stream>>>(cols, h, col_segment, seg, bias, padded);
    FLASHOT_CUDA_CHECK_LAUNCH();
  }
  switch (rop.padded_d / 16) {
    case 1: return launch_ks<1>(rows, cols, rop, cop, lists, seg, splits, partials, stream);
    case 2: return launch_ks<2>(rows, cols, rop, cop, lists, seg, splits, partials, stream);
    case 3: return launch_ks<3>(rows, cols, rop, cop, lists, seg, splits, partials, stream);
    case 4: return launch_ks<4>(rows, cols, rop, cop, lists, seg, splits, partials, stream);
    case 5: return launch_ks<5>(rows, cols, rop, cop, lists, seg, splits, partials, stream);
    case 6: return launch_ks<6>(rows, cols, rop, cop, lists, seg, splits, partials, stream);
    case 7: return launch_ks<7>(rows, cols, rop, cop, lists, seg, splits, partials, stream);
    case 8: return launch_ks<8>(rows, cols, rop, cop, lists, seg, splits, partials, stream);
    default:
      throw std::logic_error("block-sparse warpgroup LSE asked for padded d = " + std::to_string(rop.padded_d));
  }
}

}  // namespace flashot::detail::cuda
