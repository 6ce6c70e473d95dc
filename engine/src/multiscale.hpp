#pragma once
// The multiscale block-sparse solver (docs/multiscale.md). Private to the engine.
//
// A chain of levels: level 0 holds the problem's points permuted by their cluster trees (multiscale_tree.hpp);
// level k+1 holds the centres of level k's leaf blocks, weighted by the blocks' masses, until a level is small
// enough to run dense. The ε schedule runs coarse to fine: a level takes the stages whose ε is still large
// against its blocks' radii, settles at the finer level's first ε, hands its potentials down (the coarse
// solution's soft c-transform at every point: carried_softmin), and the finer level runs the rest on certified
// block lists (multiscale_pattern.hpp), re-derived at every stage and every marginal check. Results are returned
// in the caller's order.

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "backend.hpp"
#include "multiscale_pattern.hpp"
#include "multiscale_tree.hpp"
#include "sinkhorn.hpp"

namespace flashot::detail {

struct MultiscaleLevel;

/// The truncation level τ of a solve: SolveOptions::multiscale_truncation, or where that is 0 (automatic)
/// clamp(ln(10³ / tolerance), 10, 20), 20 for tolerance 0: a row skips at most e^{−τ} of its mass, a thousandth of
/// the tolerance (docs/multiscale.md, "Truncation").
double multiscale_truncation(const SolveOptions& options);

/// What carried_softmin did: over certified block lists (`sparse`, with the listed pairs of the second pass and the
/// share of point pairs they cover) or dense.
struct CarryReport {
  bool sparse = false;
  unsigned long long pairs = 0;
  double kept_fraction = 1;
};

/// The soft c-transform of a coarser level's potentials h (on `centres`, weights `centre_weights`) at every point:
///   out_i = −ε·LSE_J [log w_J + (h_J − s‖p_i − c_J‖²)/ε]
/// (docs/multiscale.md, "Carrying the potentials down"). With both trees (points and centres, each in its own tree
/// order) it runs over certified block lists: lists for the estimate `guess` (n values), one softmin on them, whose
/// result is never below the exact one (a sum over fewer terms is smaller), then lists certified for that result
/// and the softmin again on those: every entry they leave out is ≤ e^{−τ}·w_J/M of the row's exact sum, so
/// exact ≤ out ≤ exact − ε·log(1 − e^{−τ}). Dense (one pass over n × n_c) when a tree is missing, when `guess` is
/// empty, or where the first lists cover more than half of `dense_fraction` of the point pairs (two passes would
/// not pay) or the second more than `dense_fraction`. A temporary backend of
/// `options`' kind; O(n + n_c) memory besides the lists.
CarryReport carried_softmin(const BackendOptions& options, PointsView points, std::span<const float> weights,
                            const ClusterTree* points_tree, PointsView centres, std::span<const float> centre_weights,
                            const ClusterTree* centres_tree, std::span<const float> h, std::span<const float> guess,
                            double epsilon, double cost_scale, double truncation, double mass, double dense_fraction,
                            std::span<float> out);

class MultiscaleSolver {
 public:
  /// x (n×d), y (m×d) already centred; a, b the weights. Builds the hierarchies (threaded) and the backends.
  MultiscaleSolver(const BackendOptions& options, PointsView x, PointsView y, std::span<const float> a,
                   std::span<const float> b, std::uint64_t seed);
  ~MultiscaleSolver();

  std::uint64_t seed() const { return seed_; }
  /// Whether level 0 prunes at all (false: the problem is too small for block lists; the solve runs dense).
  bool pruned() const;

  /// The ε-scaling solve. options validated; diameter the problem's. f, g in the caller's order.
  SolveResult solve(const SolveOptions& options, double diameter);

  /// A backend in the caller's order over level 0 whose operations visit the certified block pairs of the loaded
  /// potentials (re-derived when the potentials or ε change) with truncation τ; dense where pruning does not pay.
  Backend& plan_backend(double truncation, double dense_fraction);

 private:
  std::uint64_t seed_;
  std::unique_ptr<MultiscaleLevel> top_;
  std::unique_ptr<Backend> plan_;
  double hierarchy_seconds_ = 0;
};

}  // namespace flashot::detail
