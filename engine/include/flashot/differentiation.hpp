#pragma once
// First- and second-order derivatives of the entropic OT cost, from solved potentials (docs/differentiation.md).
//
// Plain C++20, like flashot.hpp. Notation as there: x (n×d), y (m×d), a (n), b (m), ε, cost C_ij = s·‖x_i − y_j‖²,
// plan P_ij = a_i b_j exp((f_i + g_j − C_ij)/ε), r = P·1, c = Pᵀ·1, ρ_x, ρ_y the KL penalties (0 = balanced side).
//
// The differentiated function is the dual objective at its maximiser (f, g):
//   OT_ε(x, a; y, b) = Σ_i a_i φ_x(f_i) + Σ_j b_j φ_y(g_j) − ε·(⟨P, 1⟩ − |a|·|b|),
//   φ(h) = h (balanced side) or ρ·(1 − e^{−h/ρ}) (unbalanced side).
// With unit masses and a converged balanced solve this equals SolveResult::dual_cost. Nothing is differentiated
// through the Sinkhorn iterations: first derivatives come from the envelope theorem, second derivatives from the
// implicit function theorem on the optimality conditions ∂F/∂f = 0, ∂F/∂g = 0. Every product with P or Pᵀ is a
// streaming plan application: memory stays O((n + m)·d), never n×m.

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot {

/// Preconditioned conjugate gradient on the implicit system (Schur complement on the target potential, Jacobi
/// preconditioner). Convergence is decided on the true residual (one extra product with S to confirm).
struct CgOptions {
  /// Stop when ‖residual‖₂ ≤ tolerance·‖right-hand side‖₂. In (0, 1).
  double tolerance = 1e-6;
  int max_iterations = 300;
};

/// How a conjugate-gradient solve ended. Not converging is reported here, never thrown.
struct CgReport {
  bool converged = false;
  int iterations = 0;
  /// Final true residual ‖rhs − S·x‖₂ / ‖rhs‖₂ (recomputed, not the recursively updated one; 0 when rhs = 0).
  double residual = 0;
  double initial_residual = 0;  ///< ‖right-hand side‖₂, absolute
};

/// Gradients of OT_ε at the solution.
struct TransportGradient {
  double cost = 0;        ///< OT_ε (see the header comment)
  std::vector<float> x;   ///< (n×d) ∇_x = 2s·(r_i x_i − (P·Y)_i)
  std::vector<float> y;   ///< (m×d) ∇_y = 2s·(c_j y_j − (Pᵀ·X)_j)
  /// (n) ∇_a = φ_x(f) − ε·(e^{−f/ρ_x} − |b|) (e^{…} = 1 on a balanced side), i.e. f + ε·(|b| − 1) when balanced:
  /// f itself for unit masses. A balanced problem fixes f only up to a constant (f + k, g − k), so only directions
  /// with Σ δa_i = 0 (which keep the masses equal) are meaningful there.
  std::vector<float> a;
  std::vector<float> b;  ///< (m) ∇_b, likewise with g, ρ_y and |a|
};

/// A Hessian-vector product ∇²_x OT_ε · v (v and the product n×d) and the CG solve behind it.
struct HessianProduct {
  std::vector<float> product;  ///< (n×d)
  CgReport cg;
};

/// Derivatives of the potentials along a displacement δx = v of the source points (implicit function theorem).
struct PotentialTangent {
  std::vector<float> f;  ///< (n) δf
  std::vector<float> g;  ///< (m) δg; balanced: (δf, δg) is fixed up to (−k, +k), this is one representative
  CgReport cg;
};

/// An implicit gradient: ∇_x of L(f(x), g(x)) given ∂L/∂f and ∂L/∂g.
struct ImplicitGradient {
  std::vector<float> x;  ///< (n×d)
  CgReport cg;
};

/// Derivatives of OT_ε at one solution, computed on a backend of its own (the Problem's backend is private).
/// Not thread-safe; movable, not copyable.
class TransportDerivatives {
 public:
  /// x, y, a, b: the inputs the solved Problem was built from (copied; a, b empty = uniform); solution: that
  /// Problem's SolveResult (its f, g, ε, cost and ρ are copied). Throws std::invalid_argument like Problem's
  /// constructor for bad inputs, and when the solution's sizes do not match (naming both), when it holds
  /// non-finite potentials (a kNonFinite solve) or ε ≤ 0. Throws std::runtime_error for an unavailable backend.
  TransportDerivatives(PointsView x, PointsView y, std::span<const float> a, std::span<const float> b,
                       const SolveResult& solution, const BackendOptions& backend = {});
  ~TransportDerivatives();
  TransportDerivatives(TransportDerivatives&&) noexcept;
  TransportDerivatives& operator=(TransportDerivatives&&) noexcept;
  TransportDerivatives(const TransportDerivatives&) = delete;
  TransportDerivatives& operator=(const TransportDerivatives&) = delete;

  std::size_t n() const;
  std::size_t m() const;
  std::size_t d() const;

  /// OT_ε (see the header comment).
  double cost() const;
  /// All four gradients and the cost.
  TransportGradient gradient() const;
  /// ∇²_x OT_ε · v, v (n×d) row-major. Throws std::invalid_argument for a wrong size or non-finite entries, and
  /// for bad CG options (naming the value).
  HessianProduct hessian_product(std::span<const float> v, const CgOptions& cg = {}) const;
  /// (δf, δg) = d(f, g)/dx · v. Throws as hessian_product.
  PotentialTangent potential_tangent(std::span<const float> v, const CgOptions& cg = {}) const;
  /// ∇_x L for a loss L(f, g) of the potentials with ∂L/∂f = df (n) and ∂L/∂g = dg (m). On a balanced problem only
  /// the part of (df, dg) that sees f and g through f ⊕ g is defined (Σdf = Σdg); the rest is projected out.
  ImplicitGradient implicit_gradient(std::span<const float> df, std::span<const float> dg,
                                     const CgOptions& cg = {}) const;

  std::string backend_name() const;
  std::string device_name() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Gradients of the debiased Sinkhorn divergence S = OT_ε(a,b) − ½OT_ε(a,a) − ½OT_ε(b,b) from the three solves
/// of flashot::sinkhorn_divergence (same inputs): ∇_x S = ∇_x OT(a,b) − ½(∇_x of OT(a,a) through both of its
/// arguments), and likewise for y, a, b. `divergence` is S from the three OT_ε values. Throws as
/// TransportDerivatives.
struct DivergenceGradient {
  double divergence = 0;
  std::vector<float> x;  ///< (n×d)
  std::vector<float> y;  ///< (m×d)
  std::vector<float> a;  ///< (n)
  std::vector<float> b;  ///< (m)
};
DivergenceGradient sinkhorn_divergence_gradient(PointsView x, PointsView y, std::span<const float> a,
                                                std::span<const float> b, const DivergenceResult& solves,
                                                const BackendOptions& backend = {});

}  // namespace flashot
