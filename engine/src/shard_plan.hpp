#pragma once
// Sharding one problem over several devices (docs/design.md §5, docs/multi-gpu.md): which rows of x each shard holds,
// how many shards BackendOptions asks for, and the exact host-side combination of per-shard soft c-transforms.
// Host-only, unit-tested without a GPU (tests/engine/shard_plan_test.cpp).

#include <cstddef>
#include <span>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot::detail {

/// Rows [begin, end) of x held by one shard.
struct ShardRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
  bool operator==(const ShardRange&) const = default;
};

/// Rows per block that shard boundaries fall on when every shard can have whole blocks: a multiple of the
/// backends' row blocks (CPU tasks of 64 rows, CUDA thread blocks of up to 1024 rows), so that only the last shard
/// ends in a partial block.
inline constexpr std::size_t kShardRowAlign = 1024;

/// Rows per row block of the block-sparse lists (block_pattern.hpp's kBlockSize): a sharded multiscale solve cuts
/// its lists by shard (ShardBackend::set_pattern), so shard boundaries must fall on these blocks.
inline constexpr std::size_t kShardListAlign = 256;

/// The block of rows that plan_shards cuts whole: `align` when rows ≥ shards·align; else kShardListAlign when it
/// divides `align` and rows ≥ shards·kShardListAlign; else 1.
std::size_t shard_unit(std::size_t rows, int shards, std::size_t align = kShardRowAlign);

/// `shards` contiguous, non-empty ranges covering [0, rows) in order. Balanced: the boundaries are multiples of
/// shard_unit(rows, shards, align) and sizes differ by at most that unit.
/// Throws std::invalid_argument for shards < 1, align < 1, or shards > rows (naming both).
std::vector<ShardRange> plan_shards(std::size_t rows, int shards, std::size_t align = kShardRowAlign);

/// The number of shards of x's rows in this process that `options` asks for (1 = no sharding), after checking
/// that shards, devices, rank and ranks agree. Throws std::invalid_argument naming the field and its value.
int local_shard_count(const BackendOptions& options);

/// True when make_backend must build a sharded backend: several shards in this process, or several ranks.
bool wants_sharding(const BackendOptions& options);

/// The soft c-transform over the union of the shards' rows from the shards' own ones (cost units):
///   h = −ε·log Σ_s exp(−h_s/ε), stabilized by min_s h_s. +∞ when every h_s is +∞ (no mass); NaN propagates.
double combine_softmin(std::span<const double> per_shard, double epsilon);

/// Column-wise combination: partials[s] holds shard s's soft c-transform of every column (m values each);
/// out (m) receives the combination above for every column. Throws std::invalid_argument for size mismatches.
void combine_softmins(std::span<const std::span<const float>> partials, double epsilon, std::span<double> out);

/// The share of a column's plan mass held by each shard: weights (G) = softmax_s(−h_s/ε), summing to 1, or all 0
/// when no shard has mass. Combines shard-normalized results (barycentric projections, query maps) exactly.
void shard_mass_shares(std::span<const double> per_shard, double epsilon, std::span<double> weights);

}  // namespace flashot::detail
