#pragma once
// Certified block lists of the multiscale solver (docs/multiscale.md, "The bound"). Private to the engine.
//
// For potentials (f, g) at ε and clusters with centres c, radii r: every entry of a cluster pair (I, J) satisfies
//   f_i + g_j − C_ij ≤ U_IJ = min( max_I f + max_J g − s·(max(0, ‖c_I − c_J‖ − r_I − r_J))²,
//                                  F_I + G_J − s‖w‖² + r_I‖z_I − 2s·w‖ + r_J‖z_J + 2s·w‖ )
//   with w = c_I − c_J, z_I a gradient fitted to f over I, F_I = max_{i∈I} f_i − ⟨z_I, x_i − c_I⟩ (likewise G_J),
// and a third form with the pair's common slope ζ = (z_I − z_J)/2 taken out of both sides together; on leaf blocks
// the radii become the blocks' supports along the gap (docs/multiscale.md, "The bound", derives all three).
// A pair is dropped when U_IJ ≤ −ε·(τ + log M), M = max(1, Σa, Σb): then every entry in it has
// P_ij = a_i b_j e^{(f_i + g_j − C_ij)/ε} ≤ e^{−τ}·a_i·b_j/M, so a row loses at most e^{−τ}·a_i of mass. Descending
// the two trees together, a dropped pair's children are never examined. Every row and column node keeps at least
// its pair of largest U (potentials far below their fixed point are never cut off from every column).

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

/// Lists for points x (n×d), y (m×d) and potentials f (n), g (m), all in the trees' (permuted) order. Trees
/// must have block == kBlockSize.
PatternResult certified_pattern(const ClusterTree& tx, const ClusterTree& ty, std::span<const float> x,
                                std::span<const float> y, std::span<const float> f, std::span<const float> g,
                                const PatternRequest& request);

/// True when every pair listed in `inner` is listed in `outer`.
bool pattern_contains(const BlockPattern& outer, const BlockPattern& inner);
/// The pairs listed in either.
std::shared_ptr<const BlockPattern> pattern_union(const BlockPattern& p, const BlockPattern& q);

}  // namespace flashot::detail
