#pragma once
// fp64 dense derivatives of OT_ε (engine/include/flashot/differentiation.hpp) from given potentials: the cost, the
// four gradients, the dense implicit system and the dense Hessian ∇²_x OT_ε (n·d × n·d). O(n·m + (n·d)²) memory,
// obviously correct and slow; shares no code with the engine. Its implementation is compiled into the engine test
// executable (tests/engine/differentiation_reference.cpp).

#include <cstddef>
#include <span>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot::test {

/// The inputs of one OT problem at fixed ε, owned.
struct DenseTransport {
  std::size_t n = 0, m = 0, d = 0;
  std::vector<double> x, y, a, b;  // a, b never empty (uniform filled in)
  double epsilon = 0;
  double cost_scale = 1;           // s in C = s·‖x − y‖²
  double rho_x = 0, rho_y = 0;     // KL penalties ρ = reach² (0 = balanced side)
};

/// Balanced on both sides: b is rescaled to a's fp64 mass (fp32 weights each summing to 1 differ by ~1e-8 in fp64).
DenseTransport dense_transport(PointsView x, PointsView y, std::span<const float> a, std::span<const float> b,
                               double epsilon, Cost cost, double rho_x, double rho_y);

/// The potentials of a tight fp64 alternating Sinkhorn solve at the transport's fixed ε (marginal error ≤ 1e-12,
/// or the iteration budget). `converged` reports which.
struct DensePotentials {
  std::vector<double> f, g;
  bool converged = false;
};
DensePotentials dense_solve(const DenseTransport& t);

/// Derivatives at given potentials.
class DenseDerivatives {
 public:
  DenseDerivatives(const DenseTransport& t, std::vector<double> f, std::vector<double> g);

  /// OT_ε = Σ a φ_x(f) + Σ b φ_y(g) − ε(⟨P,1⟩ − |a||b|).
  double cost() const;
  std::vector<double> gradient_x() const;  // (n×d)
  std::vector<double> gradient_y() const;  // (m×d)
  /// ∂F/∂a_i = φ_x(f_i) − ε(Σ_j b_j e^{(f_i+g_j−C_ij)/ε} − |b|), evaluated with the sum itself (no fixed-point shortcut).
  std::vector<double> gradient_a() const;
  std::vector<double> gradient_b() const;
  /// (n·d × n·d) row-major: E + (1/ε)·Rᵀ K⁺ R, the implicit system solved densely by Gaussian elimination.
  std::vector<double> hessian_x() const;
  /// (n + m) × (n·d): the tangent map v ↦ (δf, δg) = K⁺ R v, in the representative orthogonal to K's null space.
  std::vector<double> potential_jacobian() const;

 private:
  std::vector<double> solve_k(const std::vector<double>& rhs, std::size_t columns) const;
  std::vector<double> r_matrix() const;  // (n + m) × (n·d)

  DenseTransport t_;
  std::vector<double> f_, g_;
  std::vector<double> p_;  // (n×m)
  std::vector<double> r_, c_;
};

/// Dense matrix (rows × cols) times vector.
std::vector<double> dense_times(const std::vector<double>& matrix, std::size_t rows, std::size_t cols,
                                std::span<const float> v);

}  // namespace flashot::test
