#pragma once
// Entropic OT with a label-augmented cost (docs/engine.md, "Label-augmented cost"):
//   C_ij = s·‖x_i − y_j‖² + λ·W[l_i, l_j],
// l_i ∈ [0, L) the class of source point i, l_j that of target point j, W an L×L table (any, asymmetric allowed;
// default 0 on the diagonal and 1 off it). OTDD-style dataset distances, supervised alignment when both sides carry
// labels. Nothing of size n×m exists: the label term becomes L extra coordinates of every point (an exact
// factorization of W), so every backend (CPU, CUDA, sharded) runs it unchanged; the separable part of the
// factorization goes into the potentials (balanced side) or the weights (unbalanced side), as for fused
// Gromov–Wasserstein (docs/gromov-wasserstein.md §3–4). Plain C++20, like flashot.hpp.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot {

struct LabelCost {
  std::vector<std::int32_t> source;  ///< (n) class of every source point, in [0, classes)
  std::vector<std::int32_t> target;  ///< (m) class of every target point, in [0, classes); a class may be empty
  std::size_t classes = 0;           ///< L ≥ 1
  /// (L × L) row-major: W[a·L + b] is the cost of moving class a (source) to class b (target); finite. Empty: the
  /// default, 0 for a = b and 1 otherwise.
  std::vector<double> table;
  double weight = 0;  ///< λ ≥ 0 (cost units); 0 gives the plain problem exactly
};

/// An OT problem with the label-augmented cost. It holds an ordinary Problem on the augmented points (made again by
/// solve() when an unbalanced side's weights change with ε or ρ); every result it returns or takes carries the true
/// cost's potentials: f, g solve the problem with C above, and a warm start (SolveOptions::initial_f/g) is given
/// in the same terms, e.g. a saved result. Not thread-safe; movable, not copyable.
class LabelCostProblem {
 public:
  /// x (n×d), y (m×d), a, b as for Problem. Throws std::invalid_argument as Problem does, and naming the input and
  /// value for: label vectors of the wrong size, a label outside [0, classes), classes = 0, a table that is not
  /// L×L or holds a non-finite value, a negative or non-finite weight.
  LabelCostProblem(PointsView x, PointsView y, std::span<const float> a, std::span<const float> b,
                   const LabelCost& labels, const BackendOptions& backend = {});
  ~LabelCostProblem();
  LabelCostProblem(LabelCostProblem&&) noexcept;
  LabelCostProblem& operator=(LabelCostProblem&&) noexcept;
  LabelCostProblem(const LabelCostProblem&) = delete;
  LabelCostProblem& operator=(const LabelCostProblem&) = delete;

  std::size_t n() const;
  std::size_t m() const;
  std::size_t d() const;
  /// Coordinates of the augmented points the engine solves on: d + L (d when λ = 0).
  std::size_t augmented_d() const;
  /// Diagonal of the bounding box of the points (data coordinates only, as Problem::diameter): what
  /// SolveOptions::blur_relative is relative to, so λ = 0 gives the plain problem's ε.
  double diameter() const;
  std::string backend_name() const;
  std::string device_name() const;

  /// Problem::solve for the label cost. The ε schedule starts from the augmented points' diameter (the label term
  /// widens the cost's range) unless SolveOptions::diameter is given; blur_relative is relative to diameter().
  /// The result's f, g, dual_cost and primal_cost are the true cost's; SolveResult::diameter is the schedule's.
  SolveResult solve(const SolveOptions& options);

  // ---- Plan operations with a result of solve() (or one saved from it): streaming, as Problem's. --------------
  std::vector<float> apply_plan(const SolveResult& s, std::span<const float> v, std::size_t k) const;
  std::vector<float> apply_plan_transpose(const SolveResult& s, std::span<const float> u, std::size_t k) const;
  std::vector<float> row_marginal(const SolveResult& s) const;
  std::vector<float> column_marginal(const SolveResult& s) const;
  /// Barycentric projection in the data coordinates (count × d).
  std::vector<float> barycentric(const SolveResult& s, Side from) const;
  LabelTransfer transfer_labels(const SolveResult& s, Side labels_on, std::span<const std::int32_t> labels,
                                std::size_t classes) const;
  TopKCoupling top_k(const SolveResult& s, std::size_t k) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashot
