// Host-side sharding logic: the row plan, the option checks and the exact combination of per-shard soft
// c-transforms (the same arithmetic as the devices' NCCL combination, shard_math.hpp).
#include "shard_plan.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>

#include "shard_math.hpp"

namespace flashot::detail {

namespace {

/// −h/(ε·ln 2): a soft c-transform as a base-2 log-sum-exp, the form shard_math.hpp combines.
double to_lse2(double h, double epsilon) { return -h / (epsilon * std::numbers::ln2); }

}  // namespace

std::size_t shard_unit(std::size_t rows, int shards, std::size_t align) {
  // Whole blocks of `align` rows when every shard gets at least one; else whole row blocks of the block-sparse lists
  // (kShardListAlign, when it divides `align`), so that a multiscale solve can still cut its lists by shard; else
  // single rows. The last block may be partial.
  const auto g = static_cast<std::size_t>(std::max(shards, 1));
  if (rows >= g * align) return align;
  if (align % kShardListAlign == 0 && rows >= g * kShardListAlign) return kShardListAlign;
  return 1;
}

std::vector<ShardRange> plan_shards(std::size_t rows, int shards, std::size_t align) {
  if (shards < 1) throw std::invalid_argument("shards must be ≥ 1 (got " + std::to_string(shards) + ")");
  if (align < 1) throw std::invalid_argument("shard row alignment must be ≥ 1 (got 0)");
  const auto g = static_cast<std::size_t>(shards);
  if (g > rows)
    throw std::invalid_argument("shards must be ≤ the rows to cut, n = " + std::to_string(rows) + " (got " +
                                std::to_string(shards) + " shards)");
  const std::size_t unit = shard_unit(rows, shards, align);
  const std::size_t units = (rows + unit - 1) / unit;
  std::vector<ShardRange> plan(g);
  std::size_t begin = 0;
  for (std::size_t s = 0; s < g; ++s) {
    // The last units % g shards take one unit more: one of them holds the partial last block, so sizes stay
    // within one block of each other.
    const std::size_t take = units / g + (s >= g - units % g ? 1 : 0);
    const std::size_t end = std::min(rows, begin + take * unit);
    plan[s] = {begin, end};
    begin = end;
  }
  return plan;
}

int local_shard_count(const BackendOptions& o) {
  if (o.shards < 0)
    throw std::invalid_argument("shards must be ≥ 0, 0 = one per device (got " + std::to_string(o.shards) + ")");
  for (std::size_t i = 0; i < o.devices.size(); ++i)
    if (o.devices[i] < 0)
      throw std::invalid_argument("devices[" + std::to_string(i) + "] must be a CUDA device ordinal ≥ 0 (got " +
                                  std::to_string(o.devices[i]) + ")");
  const int listed = static_cast<int>(o.devices.size());
  if (listed > 1 && o.shards != 0 && o.shards != listed)
    throw std::invalid_argument("shards must be 0 or the number of devices, " + std::to_string(listed) + " (got " +
                                std::to_string(o.shards) + ")");
  if (o.ranks < 1) throw std::invalid_argument("ranks must be ≥ 1 (got " + std::to_string(o.ranks) + ")");
  if (o.rank < 0 || o.rank >= o.ranks)
    throw std::invalid_argument("rank must be in [0, ranks = " + std::to_string(o.ranks) + ") (got " +
                                std::to_string(o.rank) + ")");
  const int local = listed > 1 ? listed : std::max(o.shards, 1);
  if (o.ranks > 1 && local > 1)
    throw std::invalid_argument("a multi-process run has one shard (one GPU) per rank: with ranks = " +
                                std::to_string(o.ranks) + ", shards and devices must ask for one (got " +
                                std::to_string(local) + ")");
  return local;
}

bool wants_sharding(const BackendOptions& options) { return local_shard_count(options) > 1 || options.ranks > 1; }

double combine_softmin(std::span<const double> per_shard, double epsilon) {
  double top = -std::numeric_limits<double>::infinity();
  for (double h : per_shard) top = std::max(top, to_lse2(h, epsilon));
  double sum = 0;
  for (double h : per_shard) sum += shard::lse_share(to_lse2(h, epsilon), top);
  // std::max drops a NaN operand; the sum keeps it.
  return -epsilon * std::numbers::ln2 * shard::lse_total(top, sum);
}

void combine_softmins(std::span<const std::span<const float>> partials, double epsilon, std::span<double> out) {
  for (std::size_t s = 0; s < partials.size(); ++s)
    if (partials[s].size() != out.size())
      throw std::invalid_argument("shard " + std::to_string(s) + " gave " + std::to_string(partials[s].size()) +
                                  " column values, expected m = " + std::to_string(out.size()));
  std::vector<double> column(partials.size());
  for (std::size_t j = 0; j < out.size(); ++j) {
    for (std::size_t s = 0; s < partials.size(); ++s) column[s] = partials[s][j];
    out[j] = combine_softmin(column, epsilon);
  }
}

void shard_mass_shares(std::span<const double> per_shard, double epsilon, std::span<double> weights) {
  if (weights.size() != per_shard.size())
    throw std::invalid_argument("weights must hold one value per shard, " + std::to_string(per_shard.size()) +
                                " (got " + std::to_string(weights.size()) + ")");
  double top = -std::numeric_limits<double>::infinity();
  for (double h : per_shard) top = std::max(top, to_lse2(h, epsilon));
  double sum = 0;
  for (std::size_t s = 0; s < per_shard.size(); ++s) {
    weights[s] = shard::lse_share(to_lse2(per_shard[s], epsilon), top);
    sum += weights[s];
  }
  for (double& w : weights) w = sum > 0 ? w / sum : 0.0;
}

}  // namespace flashot::detail
