#pragma once
// A dense fp64 fused Gromov–Wasserstein solver: n×m matrices, O(n²m + nm²) per outer iteration, obviously
// correct and slow — the oracle for engine/src/gromov.cpp. It shares no code with the engine: the cost is built
// from the pairwise distance matrices, ∇E(P) = 2[D_x²·r ⊕ D_y²·c] − 4·D_x P D_y, and each linearized problem is
// solved by an fp64 alternating Sinkhorn (unbalanced sides damped by ρ/(ρ + ε)) to a tight tolerance.

#include <cstddef>
#include <span>
#include <vector>

namespace flashot::test {

struct DenseGromovOptions {
  double alpha = 0.5;
  double epsilon = 0.01;
  double rho_x = 0;  // ρ = reach², 0 = balanced
  double rho_y = 0;
  int max_outer = 500;
  double outer_tolerance = 1e-9;   // on the relative objective change
};

struct DenseGromovResult {
  std::vector<double> plan;  // (n×m)
  double objective = 0;      // (1 − α)⟨P, ‖u − v‖²⟩ + α E(P)
  double feature_cost = 0;
  double gw_cost = 0;
  int outer_iterations = 0;
};

/// x (n×p), y (m×q) coordinates; u (n×e), v (m×e) features (e = 0: none); a, b weights. From P_0 = a bᵀ.
DenseGromovResult dense_fused_gw(std::span<const float> x, std::size_t n, std::size_t p, std::span<const float> y,
                                 std::size_t m, std::size_t q, std::span<const float> u, std::span<const float> v,
                                 std::size_t e, std::span<const float> a, std::span<const float> b,
                                 const DenseGromovOptions& options);

/// ∇E(P) (n×m) for a dense plan P, and E(P), straight from the definition's sums.
std::vector<double> dense_gw_gradient(std::span<const float> x, std::size_t n, std::size_t p, std::span<const float> y,
                                      std::size_t m, std::size_t q, std::span<const double> plan);
double dense_gw_energy(std::span<const float> x, std::size_t n, std::size_t p, std::span<const float> y,
                       std::size_t m, std::size_t q, std::span<const double> plan);

/// Dense fp64 entropic OT with an arbitrary cost matrix C (n×m), KL(P | a⊗b) regularization and KL marginal
/// penalties ρ (0 = balanced): alternating Sinkhorn updates in stabilized scaling form from f = g = 0 (or the
/// given start) until no potential moves by more than 10⁻⁹·ε in an iteration (or 100000 iterations). Returns the
/// plan (n×m). f, g (optional): the start on entry (when sized n, m), the potentials on return.
std::vector<double> dense_sinkhorn(std::span<const double> cost, std::span<const float> a, std::span<const float> b,
                                   double epsilon, double rho_x, double rho_y, std::vector<double>* f = nullptr,
                                   std::vector<double>* g = nullptr);

}  // namespace flashot::test
