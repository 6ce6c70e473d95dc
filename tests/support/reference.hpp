#pragma once
// An fp64 dense log-domain Sinkhorn solver and dense plan operations: slow (O(n·m) memory) and obviously
// correct, the oracle every backend is compared with. It reads the same SolveOptions as the engine but shares no
// code with it, and works on the points as given (no centring).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot::test {

struct ReferenceResult {
  std::vector<double> f;  // (n)
  std::vector<double> g;  // (m)
  double epsilon = 0;     // final ε
  double dual_cost = 0;
  double primal_cost = 0;
  double marginal_error = 0;
  int iterations = 0;
  bool converged = false;
  std::vector<double> stage_epsilons;
};

/// Solves with the options' schedule, schemes, damping, checks and tolerance (progress callbacks are ignored).
/// a, b empty = uniform.
ReferenceResult reference_solve(PointsView x, PointsView y, std::span<const float> a, std::span<const float> b,
                                const SolveOptions& options);

/// The dense plan P_ij = a_i b_j exp((f_i + g_j − C_ij)/ε) of given potentials, and what the engine computes from it.
class ReferencePlan {
 public:
  ReferencePlan(PointsView x, PointsView y, std::span<const float> a, std::span<const float> b,
                std::span<const double> f, std::span<const double> g, double epsilon, Cost cost);
  /// Same, from the engine's float potentials.
  ReferencePlan(PointsView x, PointsView y, std::span<const float> a, std::span<const float> b,
                const SolveResult& s);

  double at(std::size_t i, std::size_t j) const { return p_[i * m_ + j]; }
  std::size_t n() const { return n_; }
  std::size_t m() const { return m_; }

  std::vector<double> apply(std::span<const float> v, std::size_t k) const;            // P·V, V (m×k)
  std::vector<double> apply_transpose(std::span<const float> u, std::size_t k) const;  // Pᵀ·U, U (n×k)
  std::vector<double> row_marginal() const;
  std::vector<double> column_marginal() const;
  std::vector<double> barycentric(Side from) const;
  std::vector<double> gradient(Side wrt) const;  // 2s(r_i x_i − (PY)_i)
  double primal_cost() const;                    // ⟨P, C⟩
  /// Class probabilities (points × classes) on the other side, rows normalized (zero rows stay zero).
  std::vector<double> label_probabilities(Side labels_on, std::span<const std::int32_t> labels,
                                          std::size_t classes) const;
  /// Out-of-sample map of query points through the other side's potential (softmax over the other side).
  std::vector<double> map_points(PointsView queries, Side from) const;

 private:
  void build(std::span<const double> f, std::span<const double> g);

  std::size_t n_, m_, d_;
  std::vector<double> x_, y_, a_, b_;
  std::vector<double> f_, g_;
  double eps_, s_;
  std::vector<double> p_;  // (n × m)
};

/// Dual cost of potentials (balanced / unbalanced per side), as SolveResult::dual_cost defines it.
double reference_dual_cost(std::span<const float> a, std::span<const float> b, std::span<const double> f,
                           std::span<const double> g, double rho_x, double rho_y);

}  // namespace flashot::test
