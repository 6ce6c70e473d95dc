#pragma once
// Block-sparse visiting lists (docs/block-sparse.md). Private to the engine.
//
// Points are grouped in blocks of kBlockSize consecutive rows (x) and columns (y); the last block of a side may be
// partial. A BlockPattern lists, for every row block, the column blocks whose (row block, column block) pairs the
// backends visit, as sorted, disjoint, non-empty half-open ranges of column-block indices (CSR), and the transpose
// (for every column block, its row-block ranges) for column passes. Unlisted pairs are exactly zero plan entries:
// no operation evaluates them. A null pattern (Backend::set_pattern(nullptr)) is the dense problem, today's code
// path and speed.
//
// Segments: every row block and every column block belongs to one segment; a listed pair's row and column block
// belong to the same one. Each segment has its own parameters (SegmentParams: ε, cost scale, damping), indexed by
// segment id in IterationParams / PlanParams, so that several independent problems (batches, engine/src/batch.cpp)
// or several ε-stages run in one launch. One segment (the default) reads the scalar parameters.
//
// Inactive blocks: a row block with no listed range takes no part. iterate leaves its potentials unchanged,
// softmin writes +∞ there (the soft c-transform over nothing), apply writes zero rows, top_k writes column −1 and
// value 0. Likewise a column block with no listed range on the column side.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace flashot::detail {

/// Rows (columns) per block: a multiple of every kernel's row tile and column tile — CPU: 64-row tasks,
/// 256-column tiles; CUDA: 64 (tiled), 128 (mma.sync), 256 (warpgroup) rows per thread block and 64/256-column
/// tiles — so that a thread block's rows lie in one row block and its column tiles in whole blocks. 256 rather than
/// 512 or 1024: padding a ragged batch to whole blocks wastes < 256 points per problem, and multiscale clusters of
/// ~256 points prune finely enough (docs/block-sparse.md, "Block size").
inline constexpr std::size_t kBlockSize = 256;

/// Half-open range [begin, end) of block indices.
struct BlockRange {
  std::int32_t begin = 0;
  std::int32_t end = 0;
};

/// Per-segment parameters: what IterationParams / PlanParams hold as scalars, one entry per segment.
struct SegmentParams {
  double epsilon = 0;
  double cost_scale = 1;  // s in C = s·‖x−y‖²
  double damping_f = 1;   // λ_x (iterate only)
  double damping_g = 1;   // λ_y
  double relaxation = 1;  // ω (iterate only; IterationParams::relaxation)
};

class BlockPattern {
 public:
  /// Blocks of `rows` × `cols` points: ⌈rows / kBlockSize⌉ row blocks, ⌈cols / kBlockSize⌉ column blocks.
  /// `lists[r]`: row block r's column-block ranges (any order, may touch or overlap: they are sorted and merged;
  /// empty ranges are dropped). `row_segment` (one per row block) and `col_segment` (one per column block): each
  /// block's segment, or both empty for one segment 0. Builds the transpose. Throws std::invalid_argument naming
  /// the block and the value for a range outside [0, column blocks), a segment id < 0, or a listed pair whose two
  /// blocks belong to different segments.
  BlockPattern(std::size_t rows, std::size_t cols, const std::vector<std::vector<BlockRange>>& lists,
               std::vector<std::int32_t> row_segment = {}, std::vector<std::int32_t> col_segment = {});

  /// The block-diagonal pattern of a batch: segment s owns row blocks [row_starts[s], row_starts[s + 1]) and
  /// column blocks [col_starts[s], col_starts[s + 1]) (block indices; both arrays have segments + 1 entries, start at
  /// 0, end at the side's block count, never decrease). `active[s]` false (or shorter `active`) leaves segment s out of
  /// the lists: its blocks become inactive (converged problems of a batch). Empty `active`: every segment listed.
  static BlockPattern block_diagonal(std::size_t rows, std::size_t cols, std::span<const std::int32_t> row_starts,
                                     std::span<const std::int32_t> col_starts, const std::vector<bool>& active = {});

  /// The dense pattern as an explicit list (every row block lists [0, column blocks)); tests compare it with null.
  static BlockPattern dense(std::size_t rows, std::size_t cols);

  std::size_t rows() const { return rows_; }
  std::size_t cols() const { return cols_; }
  std::size_t row_blocks() const { return row_offsets_.size() - 1; }
  std::size_t col_blocks() const { return col_offsets_.size() - 1; }
  std::size_t segments() const { return segments_; }

  /// CSR by row block: row block r lists row_ranges()[row_offsets()[r] .. row_offsets()[r + 1]) (column blocks),
  /// sorted, disjoint, non-empty, not touching (merged).
  const std::vector<std::int32_t>& row_offsets() const { return row_offsets_; }
  const std::vector<BlockRange>& row_ranges() const { return row_ranges_; }
  /// The transpose: column block c lists col_ranges()[col_offsets()[c] .. col_offsets()[c + 1]) (row blocks).
  const std::vector<std::int32_t>& col_offsets() const { return col_offsets_; }
  const std::vector<BlockRange>& col_ranges() const { return col_ranges_; }
  /// Segment of every row block / column block (never empty: all zero for one segment).
  const std::vector<std::int32_t>& row_segment() const { return row_segment_; }
  const std::vector<std::int32_t>& col_segment() const { return col_segment_; }

  std::span<const BlockRange> row_list(std::size_t r) const {
    return {row_ranges_.data() + row_offsets_[r], row_ranges_.data() + row_offsets_[r + 1]};
  }
  std::span<const BlockRange> col_list(std::size_t c) const {
    return {col_ranges_.data() + col_offsets_[c], col_ranges_.data() + col_offsets_[c + 1]};
  }
  /// The lists by side: rows = true gives row_list (column blocks of a row block), false col_list.
  std::span<const BlockRange> list(bool rows, std::size_t block) const { return rows ? row_list(block) : col_list(block); }

  /// Listed (row block, column block) pairs, and their share of all pairs (the kept fraction).
  std::size_t pairs() const { return pairs_; }
  double kept_fraction() const;
  /// Point ranges of block b on a side: [b·kBlockSize, min(points, (b+1)·kBlockSize)).
  static std::pair<std::size_t, std::size_t> block_points(std::size_t b, std::size_t points) {
    const std::size_t begin = b * kBlockSize;
    return {begin, begin + kBlockSize < points ? begin + kBlockSize : points};
  }
  /// The rows-side pattern of rows [row_begin, row_end) (a multiple of kBlockSize, or the end): what one shard
  /// of x's rows visits (its own transpose included). Segments are kept.
  BlockPattern row_slice(std::size_t row_begin, std::size_t row_end) const;
  /// One line for reports: "B = 256, 16 × 16 blocks, 32 pairs listed (12.5 %), 4 segments".
  std::string describe() const;

 private:
  BlockPattern() = default;
  void finish();  // builds the transpose and pairs_ from the row lists, checks segments
  void transpose_one_segment();  // finish's transpose where every block is in segment 0 (parallel)
  /// Throws std::length_error when a side's ranges overflow the int32 offsets (the CUDA lists are int, int2).
  static void check_offset(std::size_t ranges, const char* side);
  /// Lays per-block lists out as one range array with offsets (CSR), freeing each list once copied.
  static void flatten(std::vector<std::vector<BlockRange>>& lists, std::vector<BlockRange>& ranges,
                      std::vector<std::int32_t>& offsets, const char* side);

  std::size_t rows_ = 0, cols_ = 0, segments_ = 1, pairs_ = 0;
  std::vector<std::int32_t> row_offsets_{0}, col_offsets_{0};
  std::vector<BlockRange> row_ranges_, col_ranges_;
  std::vector<std::int32_t> row_segment_, col_segment_;
};

}  // namespace flashot::detail
