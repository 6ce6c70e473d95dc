#pragma once
// Cluster hierarchies for the multiscale solver (docs/multiscale.md). Private to the engine.
//
// One cloud is permuted so that every cluster is a contiguous run of points: the leaves are blocks of `block`
// consecutive points (the last one may be shorter), and the tree over them is implicit — node k of level ℓ covers
// the blocks [k·2^{H−ℓ}, min((k+1)·2^{H−ℓ}, blocks)), H = ⌈log₂ blocks⌉, so its children are nodes 2k and 2k+1 of
// level ℓ+1 (the second may not exist). Two orders: a PCA tree — every node's points are split at the node's
// middle block boundary along their principal direction (seeded power iteration on a sample), which follows the
// data's intrinsic dimension (surfaces, single-cell embeddings) rather than the ambient one; or, for d ≤ 4, the
// Morton (Z-order) curve, every node a run of the curve. The solver uses the PCA tree in every dimension: runs of
// the Morton curve jump across octree cells, and its blocks came out 1.2–1.8× wider (docs/multiscale.md).
//
// Every node carries a centre, a radius r (every member lies within r of the centre) and a mass. Leaf radii are
// exact; a parent's radius is max over its children of ‖c_parent − c_child‖ + r_child, so every child's ball lies
// inside its parent's: the pair bounds of docs/multiscale.md only tighten going down the tree.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot::detail {

struct ClusterTree {
  std::size_t n = 0, d = 0;
  std::size_t block = 0;   // points per leaf block
  std::size_t blocks = 0;  // ⌈n / block⌉
  int height = 0;          // H: level H holds the leaves
  std::string kind;        // "pca-tree" or "morton"
  /// order[p] = the caller's index of the point at permuted position p.
  std::vector<std::uint32_t> order;
  /// Per level ℓ = 0..H: centre (count(ℓ) × d), radius, mass (sum of weights).
  std::vector<std::vector<double>> centre, radius, mass;
  /// Per leaf block: the Cholesky factor (lower, d × d, row-major) of Σ_i u_i u_iᵀ + λI over its points,
  /// u_i = x_i − centre: the block's least-squares fit of a potential's gradient (multiscale_pattern.cpp).
  std::vector<double> leaf_gram;
  /// Per leaf block: two orthonormal principal directions q₁, q₂ of its offsets (blocks × 2 × d; zero where d < 2)
  /// and three extents (blocks × 3): h₁ = max |⟨u, q₁⟩|, h₂ = max |⟨u, q₂⟩|, h₃ = max ‖u − ⟨u, q₁⟩q₁ − ⟨u, q₂⟩q₂‖.
  /// The block's support in a unit direction e is then ≤ h₁|⟨e, q₁⟩| + h₂|⟨e, q₂⟩| + h₃·√(1 − ⟨e, q₁⟩² − ⟨e, q₂⟩²),
  /// far below the radius across a flat or elongated block (docs/multiscale.md, "The bound").
  std::vector<double> leaf_axes, leaf_extent;
  /// Per leaf block: its parts — groups of its points that lie apart from each other (a block whose 256 points
  /// fall in two or more separated clusters, which blocks of a fixed size cannot avoid at cluster boundaries).
  /// Leaf k's parts are [part_offset[k], part_offset[k + 1]) (part_offset has blocks + 1 entries); part p holds the
  /// permuted points [part_begin[p], part_end[p]), contiguous inside its leaf; a compact leaf is one part, equal to
  /// the leaf. Per part: centre (parts × d, mass-weighted like the leaf's), radius (exact) and mass. The pair bounds
  /// of a leaf block take the largest over its parts (multiscale_pattern.cpp), and the coarser level of the solver
  /// holds one point per part (multiscale.cpp), so a straddling block is neither wide in the lists nor a centre
  /// between clusters where none of its points is (docs/multiscale.md, "Blocks across clusters").
  std::vector<std::uint32_t> part_offset, part_begin, part_end;
  std::vector<double> part_centre, part_radius, part_mass;

  /// Nodes of level ℓ.
  std::size_t count(int level) const { return blocks == 0 ? 0 : ((blocks - 1) >> (height - level)) + 1; }
  /// Permuted point range [begin, end) of node k at level ℓ.
  std::size_t begin(int level, std::size_t k) const { return std::min(n, (k << (height - level)) * block); }
  std::size_t end(int level, std::size_t k) const { return std::min(n, ((k + 1) << (height - level)) * block); }
  /// Parts of all leaves.
  std::size_t parts() const { return part_begin.size(); }
  /// The deepest level with at most `limit` nodes.
  int level_with_at_most(std::size_t limit) const;
};

/// Builds the hierarchy of points (n×d) with weights w (n). `block` ≥ 1. Threaded (OpenMP), O(n·log n·d) work,
/// deterministic in `seed` whatever the thread count. n must be < 2³².
enum class TreeOrder { kPca, kMorton };
ClusterTree build_cluster_tree(PointsView points, std::span<const float> w, std::size_t block, std::uint64_t seed,
                               TreeOrder order = TreeOrder::kPca);

/// One cloud of build_cluster_trees: its points (n×d), weights (n) and seed.
struct TreeInput {
  PointsView points;
  std::span<const float> weights;
  std::uint64_t seed = 0;
};
/// The hierarchies of several clouds at once (the solver's x and y), each bit for bit what build_cluster_tree gives
/// for that cloud, with the work of all of them shared by the threads: the top splits of one tree are one task at a
/// time, and the other trees' tasks fill the threads it leaves idle. Throws as build_cluster_tree, before any work.
std::vector<ClusterTree> build_cluster_trees(std::span<const TreeInput> clouds, std::size_t block,
                                             TreeOrder order = TreeOrder::kPca);

/// Rows of `points` (n×d) in the tree's order: out[p] = points[order[p]].
std::vector<float> permute_rows(std::span<const float> points, std::size_t d, const std::vector<std::uint32_t>& order);

}  // namespace flashot::detail

namespace flashot::detail {

/// The leaf order of the hierarchy alone: ClusterTree::order as build_cluster_tree computes it first (the PCA tree's
/// splits, or the Morton curve), without the nodes' centres, radii, fits or the leaves' parts, so every run of
/// `block` consecutive positions from 0 is one leaf. For callers that want only a locality order of the points
/// (engine/src/point_order.cpp). Deterministic in `seed` whatever the thread count; n must be < 2³².
std::vector<std::uint32_t> cluster_order(PointsView points, std::size_t block, std::uint64_t seed,
                                         TreeOrder order = TreeOrder::kPca);

}  // namespace flashot::detail
