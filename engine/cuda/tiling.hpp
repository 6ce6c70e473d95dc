#pragma once
// Host-only tiling heuristics of the CUDA backend (no CUDA types: unit-tested without a GPU).
//
// A reduction over the columns of an (rows × cols) kernel matrix is cut into row blocks (one thread block each)
// and, when the row blocks alone cannot fill the device (n = 10k gives ~10 blocks of 1024 rows for 132 SMs),
// into column splits whose partial (max, sum) pairs are merged afterwards (split-K, as FlashDecoding does).

#include <algorithm>
#include <cstdint>

namespace flashot::detail::cuda {

struct ReductionPlan {
  int row_blocks = 1;      ///< thread blocks along the rows
  int splits = 1;          ///< column ranges reduced separately, merged afterwards
  int cols_per_split = 0;  ///< a multiple of the column tile, so every split but the last is full
};

/// rows/cols > 0, rows_per_block/cols_per_tile > 0, resident_blocks = blocks the device runs at once (≥ 1).
/// Aims at ~2 waves of blocks so that the tail of the last wave stays small.
inline ReductionPlan plan_reduction(std::int64_t rows, std::int64_t cols, int rows_per_block, int cols_per_tile,
                                    int resident_blocks) {
  ReductionPlan plan;
  const std::int64_t row_blocks = (rows + rows_per_block - 1) / rows_per_block;
  const std::int64_t col_tiles = (cols + cols_per_tile - 1) / cols_per_tile;
  const std::int64_t wanted = 2 * std::int64_t(std::max(resident_blocks, 1));
  std::int64_t splits = std::clamp<std::int64_t>((wanted + row_blocks - 1) / row_blocks, 1, col_tiles);
  const std::int64_t tiles_per_split = (col_tiles + splits - 1) / splits;
  splits = (col_tiles + tiles_per_split - 1) / tiles_per_split;
  plan.row_blocks = static_cast<int>(row_blocks);
  plan.splits = static_cast<int>(splits);
  plan.cols_per_split = static_cast<int>(tiles_per_split * cols_per_tile);
  return plan;
}

/// A plan for kernels that run one block per SM (`concurrent` blocks at once; the warpgroup kernels): every block
/// costs its tiles plus a fixed `overhead_tiles` (loading its rows, filling the pipeline, writing partials), and
/// the blocks run in waves of `concurrent`; the plan takes the splits with the least waves × (tiles per split +
/// overhead), the fewest splits among equals. plan_reduction's "about two waves" is poor here: at n = 10k, 40 row
/// blocks of 256 rows × 14 splits make 4.2 waves of 132, i.e. five, where 3 splits make one.
inline ReductionPlan plan_waves(std::int64_t rows, std::int64_t cols, int rows_per_block, int cols_per_tile,
                                int concurrent, int overhead_tiles) {
  const std::int64_t row_blocks = (rows + rows_per_block - 1) / rows_per_block;
  const std::int64_t col_tiles = (cols + cols_per_tile - 1) / cols_per_tile;
  const std::int64_t slots = std::max(concurrent, 1);
  std::int64_t best_splits = 1, best_tiles = col_tiles, best_cost = -1;
  // Beyond 16 waves' worth of blocks per row block nothing improves (each block would hold ≤ 1/16 of a wave's work).
  const std::int64_t most = std::min<std::int64_t>(col_tiles, 16 * slots);
  for (std::int64_t wanted = 1; wanted <= most; ++wanted) {
    const std::int64_t tiles_per_split = (col_tiles + wanted - 1) / wanted;
    const std::int64_t splits = (col_tiles + tiles_per_split - 1) / tiles_per_split;
    const std::int64_t waves = (row_blocks * splits + slots - 1) / slots;
    const std::int64_t cost = waves * (tiles_per_split + overhead_tiles);
    if (best_cost < 0 || cost < best_cost) best_cost = cost, best_splits = splits, best_tiles = tiles_per_split;
  }
  ReductionPlan plan;
  plan.row_blocks = static_cast<int>(row_blocks);
  plan.splits = static_cast<int>(best_splits);
  plan.cols_per_split = static_cast<int>(best_tiles * cols_per_tile);
  return plan;
}

/// A plan for throughput-bound kernels that run several blocks per SM (the small-d one-pass sums, bound by the SM's
/// exponential unit): an SM's time is the work of the blocks it holds. While every block is resident at once
/// (blocks ≤ sms · resident_per_sm) the busiest SM holds ⌈blocks / sms⌉ of them; beyond that the blocks are
/// handed out as SMs free up and the work spreads evenly, plus one block's tail. Each block costs its column chunks
/// plus `overhead_chunks` (its rows, its partial sums). Among splits that give every SM at least `min_per_sm`
/// blocks (latency hiding) where the columns allow it, the plan takes the least time, the fewest splits among
/// equals. plan_reduction's "about two waves" of whole 256-column tiles gives n = 10k, d = 3 400 blocks on 132 SMs:
/// four SMs hold four blocks while the rest hold three, and the kernel lasts as long as those four.
inline ReductionPlan plan_balanced(std::int64_t rows, std::int64_t cols, int rows_per_block, int cols_per_chunk,
                                   int sms, int resident_per_sm, int min_per_sm, int overhead_chunks) {
  const std::int64_t row_blocks = (rows + rows_per_block - 1) / rows_per_block;
  const std::int64_t chunks = (cols + cols_per_chunk - 1) / cols_per_chunk;
  const std::int64_t s = std::max(sms, 1), slots = s * std::max(resident_per_sm, 1);
  std::int64_t best_splits = 1, best_chunks = chunks, best_cost = -1;
  bool best_busy = false;  // the best so far gives every SM min_per_sm blocks
  const std::int64_t most = std::min<std::int64_t>(chunks, 64 * s);
  for (std::int64_t wanted = 1; wanted <= most; ++wanted) {
    const std::int64_t per_split = (chunks + wanted - 1) / wanted;
    const std::int64_t splits = (chunks + per_split - 1) / per_split;
    const std::int64_t blocks = row_blocks * splits, work = per_split + overhead_chunks;
    const std::int64_t cost = blocks <= slots ? (blocks + s - 1) / s * work : (blocks * work + s - 1) / s + work;
    const bool busy = blocks >= s * min_per_sm;
    if (best_cost < 0 || (busy && !best_busy) || (busy == best_busy && cost < best_cost)) {
      best_cost = cost, best_splits = splits, best_chunks = per_split, best_busy = busy;
    }
  }
  ReductionPlan plan;
  plan.row_blocks = static_cast<int>(row_blocks);
  plan.splits = static_cast<int>(best_splits);
  plan.cols_per_split = static_cast<int>(best_chunks * cols_per_chunk);
  return plan;
}

/// Columns of V handled per pass of the plan-application kernel: k is cut into chunks of this many.
inline constexpr int kApplyChunk = 64;

/// Number of passes over the kernel matrix that P·V with k value columns costs.
inline int apply_chunks(std::int64_t k) { return static_cast<int>((k + kApplyChunk - 1) / kApplyChunk); }

}  // namespace flashot::detail::cuda
