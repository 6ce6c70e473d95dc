#pragma once
// A cost ‖Φ_i − Ψ_j‖² + A_i + B_j solved as the engine's squared-Euclidean cost between augmented points Φ, Ψ: the
// separable terms A, B go into the potentials on a balanced side and into the weights on an unbalanced one
// (docs/gromov-wasserstein.md §4). Shared by fused Gromov–Wasserstein (gromov.cpp) and the label-augmented cost
// (label_cost.cpp). Private to the engine.

#include <span>
#include <vector>

namespace flashot::detail {

/// Side rho of a reach option pair: the side's own reach, else the common one, squared (0 = balanced).
double side_rho(double common, double own);

struct SeparableTerms {
  /// ε the weights are made for (the final one) and ρ per side (0 = balanced).
  SeparableTerms(double epsilon, double rho_x, double rho_y);

  double epsilon = 0;
  /// κ = 1/(ε + ρ) on an unbalanced side, 0 on a balanced one: ã_i = a_i·e^{−κA_i}.
  double kappa_x = 0, kappa_y = 0;

  /// Moves a constant between A and B (the cost is unchanged) so that the largest weight factor e^{−κA} equals the
  /// largest e^{−κB} (1 on a lone unbalanced side), far from fp32 overflow. Nothing on a balanced problem.
  void balance(std::vector<double>& a_terms, std::vector<double>& b_terms) const;
  /// The engine's weights ã = a·e^{−κ_x A} (source) and b̃ = b·e^{−κ_y B} (target).
  std::vector<float> source_weights(std::span<const float> a, std::span<const double> a_terms) const;
  std::vector<float> target_weights(std::span<const float> b, std::span<const double> b_terms) const;
  /// The share of A that stays in the potential: f = f^E + (1 − εκ)·A (1 on a balanced side).
  double source_share() const { return 1 - epsilon * kappa_x; }
  double target_share() const { return 1 - epsilon * kappa_y; }
};

}  // namespace flashot::detail
