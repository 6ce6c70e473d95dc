#pragma once
// Certified block lists of the multiscale solver (docs/multiscale.md, "The bound"). Private to the engine.
//
// For potentials (f, g) at ε and clusters with centres c, radii r: every entry of a cluster pair (I, J) satisfies
//   f_i + g_j − C_ij ≤ U_IJ = max_I f + max_J g − s·(max(0, ‖c_I − c_J‖ − r_I − r_J))²
//   f_i + g_j − C_ij ≥ L_IJ = min_I f + min_J g − s·(‖c_I − c_J‖ + r_I + r_J)²
// A pair is dropped when U_IJ ≤ min(−ε·(τ + log M), R_I − ε·τ, K_J − ε·τ), with M = max(1, Σa, Σb) and R_I, K_J
// lower bounds of the largest f_i + g_j − C_ij of every row of I and every column of J (the largest L over the
// pairs examined). Then every dropped entry has P_ij ≤ e^{−τ}·a_i·b_j/M and is ≤ e^{−τ} times its row's and its
// column's largest entry. Descending the two trees together, a dropped pair's children are never examined (their
// bounds are tighter: child balls lie inside their parent's).

#include <cstddef>
#include <memory>
#include <span>

#include "block_pattern.hpp"
#include "multiscale_tree.hpp"

namespace flashot::detail {

struct PatternRequest {
  double epsilon = 0;
  double cost_scale = 1;
  double truncation = 20;      // τ
  double mass = 1;             // M = max(1, Σa, Σb)
  /// Give up (return no pattern: run dense) when more than this many block pairs would be listed, at any level.
  std::size_t max_pairs = 0;
};

struct PatternResult {
  std::shared_ptr<const BlockPattern> pattern;  // null: over max_pairs (dense)
  unsigned long long kept_pairs = 0;            // leaf pairs listed (0 when null)
  double kept_fraction = 1;                     // share of the n·m point pairs inside listed block pairs
};

/// Lists for potentials f (n), g (m) given in the trees' (permuted) order. Trees must have block == kBlockSize.
PatternResult certified_pattern(const ClusterTree& tx, const ClusterTree& ty, std::span<const float> f,
                                std::span<const float> g, const PatternRequest& request);

/// True when every pair listed in `inner` is listed in `outer`.
bool pattern_contains(const BlockPattern& outer, const BlockPattern& inner);
/// The pairs listed in either.
std::shared_ptr<const BlockPattern> pattern_union(const BlockPattern& p, const BlockPattern& q);

}  // namespace flashot::detail
