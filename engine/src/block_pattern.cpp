// Block-sparse visiting lists: building, checking and slicing (docs/block-sparse.md).
#include "block_pattern.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <stdexcept>

#include "backend.hpp"

namespace flashot::detail {

namespace {

std::size_t blocks_of(std::size_t points) { return (points + kBlockSize - 1) / kBlockSize; }

/// Sorted, merged, non-empty ranges.
std::vector<BlockRange> normalized(std::vector<BlockRange> list) {
  std::erase_if(list, [](const BlockRange& r) { return r.end <= r.begin; });
  std::sort(list.begin(), list.end(), [](const BlockRange& a, const BlockRange& b) { return a.begin < b.begin; });
  std::vector<BlockRange> out;
  for (const BlockRange& r : list) {
    if (!out.empty() && r.begin <= out.back().end)
      out.back().end = std::max(out.back().end, r.end);
    else
      out.push_back(r);
  }
  return out;
}

}  // namespace

BlockPattern::BlockPattern(std::size_t rows, std::size_t cols, const std::vector<std::vector<BlockRange>>& lists,
                           std::vector<std::int32_t> row_segment, std::vector<std::int32_t> col_segment)
    : rows_(rows), cols_(cols), row_segment_(std::move(row_segment)), col_segment_(std::move(col_segment)) {
  const std::size_t rb = blocks_of(rows), cb = blocks_of(cols);
  if (lists.size() != rb)
    throw std::invalid_argument("block pattern: " + std::to_string(lists.size()) + " row lists for " +
                                std::to_string(rb) + " row blocks of " + std::to_string(kBlockSize) + " rows (n = " +
                                std::to_string(rows) + ")");
  for (std::size_t r = 0; r < rb; ++r)
    for (const BlockRange& range : lists[r])
      if (range.end > range.begin && (range.begin < 0 || static_cast<std::size_t>(range.end) > cb))
        throw std::invalid_argument("block pattern: row block " + std::to_string(r) + " lists column blocks [" +
                                    std::to_string(range.begin) + ", " + std::to_string(range.end) +
                                    "), outside [0, " + std::to_string(cb) + ")");
  // Every row's list sorted and merged (in parallel: 390 625 row blocks at 10⁸ points), then laid out in order.
  std::vector<std::vector<BlockRange>> merged(rb);
#pragma omp parallel for schedule(dynamic, 256)
  for (std::size_t r = 0; r < rb; ++r) merged[r] = normalized(lists[r]);
  flatten(merged, row_ranges_, row_offsets_, "row");
  finish();
}

void BlockPattern::finish() {
  const std::size_t rb = row_offsets_.size() - 1, cb = blocks_of(cols_);
  if (row_segment_.empty() && col_segment_.empty()) {
    row_segment_.assign(rb, 0);
    col_segment_.assign(cb, 0);
  }
  if (row_segment_.size() != rb || col_segment_.size() != cb)
    throw std::invalid_argument("block pattern: " + std::to_string(row_segment_.size()) + " row-block and " +
                                std::to_string(col_segment_.size()) + " column-block segment ids for " +
                                std::to_string(rb) + " row blocks and " + std::to_string(cb) + " column blocks");
  std::int32_t most = 0;
  for (std::size_t r = 0; r < rb; ++r) {
    if (row_segment_[r] < 0)
      throw std::invalid_argument("block pattern: row block " + std::to_string(r) + " has segment " +
                                  std::to_string(row_segment_[r]) + " (must be ≥ 0)");
    most = std::max(most, row_segment_[r]);
  }
  for (std::size_t c = 0; c < cb; ++c) {
    if (col_segment_[c] < 0)
      throw std::invalid_argument("block pattern: column block " + std::to_string(c) + " has segment " +
                                  std::to_string(col_segment_[c]) + " (must be ≥ 0)");
    most = std::max(most, col_segment_[c]);
  }
  segments_ = static_cast<std::size_t>(most) + 1;
  if (segments_ == 1) {
    transpose_one_segment();
    return;
  }
  // Transpose: count the pairs of every column block, then fill the row blocks in increasing order and merge.
  std::vector<std::vector<BlockRange>> by_col(cb);
  pairs_ = 0;
  for (std::size_t r = 0; r < rb; ++r) {
    for (const BlockRange& range : row_list(r)) {
      pairs_ += static_cast<std::size_t>(range.end - range.begin);
      for (std::int32_t c = range.begin; c < range.end; ++c) {
        if (col_segment_[c] != row_segment_[r])
          throw std::invalid_argument("block pattern: row block " + std::to_string(r) + " (segment " +
                                      std::to_string(row_segment_[r]) + ") lists column block " + std::to_string(c) +
                                      " (segment " + std::to_string(col_segment_[c]) +
                                      "): a listed pair must lie in one segment");
        auto& list = by_col[c];
        const auto ri = static_cast<std::int32_t>(r);
        if (!list.empty() && list.back().end == ri)
          ++list.back().end;
        else
          list.push_back({ri, ri + 1});
      }
    }
  }
  flatten(by_col, col_ranges_, col_offsets_, "column");
}

void BlockPattern::transpose_one_segment() {
  // One segment: no pair to check. The column blocks are cut into stripes, each transposed by one thread scanning
  // every row's ranges from the first that reaches the stripe (a binary search): the work is the ranges, the
  // pairs, and rows × stripes × log(ranges per row), in parallel, the same whatever the thread count (each column
  // block's list is built from the rows in order). At 10⁸ points: ≈ 1.4·10⁹ pairs, 390 625 blocks a side.
  const std::size_t rb = row_offsets_.size() - 1, cb = blocks_of(cols_);
  std::vector<std::size_t> row_pairs(rb, 0);
#pragma omp parallel for schedule(static)
  for (std::size_t r = 0; r < rb; ++r)
    for (const BlockRange& range : row_list(r)) row_pairs[r] += static_cast<std::size_t>(range.end - range.begin);
  pairs_ = 0;
  for (std::size_t v : row_pairs) pairs_ += v;
  const std::size_t stripes = std::min<std::size_t>(cb, 256);
  std::vector<std::vector<BlockRange>> by_col(cb);
#pragma omp parallel for schedule(dynamic, 1)
  for (std::size_t stripe = 0; stripe < stripes; ++stripe) {
    const auto c0 = static_cast<std::int32_t>(stripe * cb / stripes);
    const auto c1 = static_cast<std::int32_t>((stripe + 1) * cb / stripes);
    for (std::size_t r = 0; r < rb; ++r) {
      const auto list = row_list(r);
      auto it = std::lower_bound(list.begin(), list.end(), c0,
                                 [](const BlockRange& range, std::int32_t c) { return range.end <= c; });
      const auto ri = static_cast<std::int32_t>(r);
      for (; it != list.end() && it->begin < c1; ++it) {
        for (std::int32_t c = std::max(it->begin, c0); c < std::min(it->end, c1); ++c) {
          auto& out = by_col[static_cast<std::size_t>(c)];
          if (!out.empty() && out.back().end == ri)
            ++out.back().end;
          else
            out.push_back({ri, ri + 1});
        }
      }
    }
  }
  flatten(by_col, col_ranges_, col_offsets_, "column");
}

void BlockPattern::flatten(std::vector<std::vector<BlockRange>>& lists, std::vector<BlockRange>& ranges,
                           std::vector<std::int32_t>& offsets, const char* side) {
  // One block's list after another (each list freed once copied), in parallel; offsets checked against int32.
  const std::size_t count = lists.size();
  std::vector<std::size_t> at(count + 1, 0);
  for (std::size_t b = 0; b < count; ++b) at[b + 1] = at[b] + lists[b].size();
  check_offset(at[count], side);
  ranges.resize(at[count]);
  offsets.resize(count + 1);
#pragma omp parallel for schedule(dynamic, 256)
  for (std::size_t b = 0; b < count; ++b) {
    std::copy(lists[b].begin(), lists[b].end(), ranges.begin() + static_cast<std::ptrdiff_t>(at[b]));
    std::vector<BlockRange>().swap(lists[b]);
  }
  for (std::size_t b = 0; b <= count; ++b) offsets[b] = static_cast<std::int32_t>(at[b]);
}

void BlockPattern::check_offset(std::size_t ranges, const char* side) {
  if (ranges > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw std::length_error(std::string("block pattern: ") + std::to_string(ranges) + " " + side +
                            " ranges, over the 32-bit offsets of the lists (2^31 − 1)");
}

BlockPattern BlockPattern::block_diagonal(std::size_t rows, std::size_t cols, std::span<const std::int32_t> row_starts,
                                          std::span<const std::int32_t> col_starts, const std::vector<bool>& active) {
  const std::size_t rb = blocks_of(rows), cb = blocks_of(cols);
  if (row_starts.size() < 2 || row_starts.size() != col_starts.size())
    throw std::invalid_argument("block pattern: a block-diagonal pattern needs segments + 1 ≥ 2 row and column "
                                "starts (got " + std::to_string(row_starts.size()) + " and " +
                                std::to_string(col_starts.size()) + ")");
  const std::size_t segments = row_starts.size() - 1;
  const auto check = [&](std::span<const std::int32_t> starts, std::size_t blocks, const char* side) {
    if (starts.front() != 0 || static_cast<std::size_t>(starts.back()) != blocks)
      throw std::invalid_argument(std::string("block pattern: ") + side + " starts must run from 0 to " +
                                  std::to_string(blocks) + " (got " + std::to_string(starts.front()) + " to " +
                                  std::to_string(starts.back()) + ")");
    for (std::size_t s = 0; s < segments; ++s)
      if (starts[s + 1] < starts[s])
        throw std::invalid_argument(std::string("block pattern: ") + side + " starts decrease at segment " +
                                    std::to_string(s));
  };
  check(row_starts, rb, "row");
  check(col_starts, cb, "column");
  BlockPattern p;
  p.rows_ = rows;
  p.cols_ = cols;
  p.row_segment_.resize(rb);
  p.col_segment_.resize(cb);
  p.row_offsets_.assign(1, 0);
  for (std::size_t s = 0; s < segments; ++s) {
    const bool on = active.empty() || (s < active.size() && active[s]);
    for (std::int32_t c = col_starts[s]; c < col_starts[s + 1]; ++c) p.col_segment_[c] = static_cast<std::int32_t>(s);
    for (std::int32_t r = row_starts[s]; r < row_starts[s + 1]; ++r) {
      p.row_segment_[r] = static_cast<std::int32_t>(s);
      if (on && col_starts[s + 1] > col_starts[s]) p.row_ranges_.push_back({col_starts[s], col_starts[s + 1]});
      p.row_offsets_.push_back(static_cast<std::int32_t>(p.row_ranges_.size()));
    }
  }
  p.finish();
  return p;
}

BlockPattern BlockPattern::dense(std::size_t rows, std::size_t cols) {
  const std::size_t rb = blocks_of(rows), cb = blocks_of(cols);
  return BlockPattern(rows, cols,
                      std::vector<std::vector<BlockRange>>(rb, {BlockRange{0, static_cast<std::int32_t>(cb)}}));
}

double BlockPattern::kept_fraction() const {
  const double all = static_cast<double>(row_blocks()) * static_cast<double>(col_blocks());
  return all > 0 ? static_cast<double>(pairs_) / all : 0.0;
}

BlockPattern BlockPattern::row_slice(std::size_t row_begin, std::size_t row_end) const {
  if (row_begin % kBlockSize != 0 || (row_end % kBlockSize != 0 && row_end != rows_) || row_end > rows_ ||
      row_begin > row_end)
    throw std::invalid_argument("block pattern: rows [" + std::to_string(row_begin) + ", " + std::to_string(row_end) +
                                ") do not cut whole blocks of " + std::to_string(kBlockSize));
  BlockPattern p;
  p.rows_ = row_end - row_begin;
  p.cols_ = cols_;
  const std::size_t b0 = row_begin / kBlockSize, b1 = blocks_of(row_end);
  p.row_offsets_.assign(1, 0);
  for (std::size_t r = b0; r < b1; ++r) {
    const auto list = row_list(r);
    p.row_ranges_.insert(p.row_ranges_.end(), list.begin(), list.end());
    p.row_offsets_.push_back(static_cast<std::int32_t>(p.row_ranges_.size()));
  }
  p.row_segment_.assign(row_segment_.begin() + b0, row_segment_.begin() + b1);
  p.col_segment_ = col_segment_;
  p.finish();
  p.segments_ = segments_;  // a slice keeps the parameter table's indexing
  return p;
}

std::string BlockPattern::describe() const {
  const double pct = 100.0 * kept_fraction();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", pct);
  return "B = " + std::to_string(kBlockSize) + ", " + std::to_string(row_blocks()) + " × " +
         std::to_string(col_blocks()) + " blocks, " + std::to_string(pairs_) + " pairs listed (" + buf + " %), " +
         std::to_string(segments_) + (segments_ == 1 ? " segment" : " segments");
}

void Backend::set_pattern(std::shared_ptr<const BlockPattern> pattern) {
  if (pattern)
    throw std::runtime_error("the " + name() + " backend does not run block-sparse patterns (docs/block-sparse.md)");
  pattern_ = nullptr;
}

}  // namespace flashot::detail
