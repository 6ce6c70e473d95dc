#pragma once
// The listed 64-column tiles of a row block (docs/block-sparse.md), as the block-sparse tensor-core kernels walk
// them: blocks_mma.cu (mma.sync, 128-row thread blocks) and blocks_wg.cu (warpgroups, 256-row thread blocks);
// blocks.cu (the fp32 kernels) counts its tiles with listed_tiles too.

#include "blocks.cuh"
#include "mma_launch.cuh"

namespace flashot::detail::cuda {
namespace {

/// Start column of the t-th 64-column tile of a row block's lists, `past` beyond the last one. The pipeline asks
/// for t in (nearly) increasing order, so the cursor remembers the range it stopped in (range q starts at tile
/// `base`) and only walks back to the first range when asked for an earlier one: O(1) amortized per tile.
struct TileCursor {
  int q = 0, base = 0;
  __device__ __forceinline__ int at(const BlockLists& lists, int rb, int cols_count, int t, int past) {
    if (t < base || q < lists.offsets[rb]) q = lists.offsets[rb], base = 0;
    for (; q < lists.offsets[rb + 1]; ++q) {
      const int2 r = lists.ranges[q];
      const int jb = r.x * kPatternBlock, je = min(r.y * kPatternBlock, cols_count);
      const int nt = (je - jb + kMmaTile - 1) / kMmaTile;
      if (t < base + nt) return jb + (t - base) * kMmaTile;
      base += nt;
    }
    return past;
  }
};

__device__ __forceinline__ int listed_tiles(const BlockLists& lists, int rb, int cols_count) {
  int t = 0;
  for (int q = lists.offsets[rb]; q < lists.offsets[rb + 1]; ++q) {
    const int2 r = lists.ranges[q];
    const int jb = r.x * kPatternBlock, je = min(r.y * kPatternBlock, cols_count);
    t += (je - jb + kMmaTile - 1) / kMmaTile;
  }
  return t;
}

}  // namespace
}  // namespace flashot::detail::cuda
