#pragma once
// The Sinkhorn loop, written once over detail::Backend (docs/design.md §1). Private to the engine.

#include <cstddef>
#include <span>
#include <vector>

#include "backend.hpp"

namespace flashot::detail {

/// Factor s in C = s·‖x − y‖².
double cost_scale(Cost cost);

/// ⟨w, h⟩ on a balanced side (ρ = 0), ⟨w, ρ(1 − e^{−h/ρ})⟩ on an unbalanced one: one side's SolveResult::dual_cost.
double dual_term(std::span<const float> w, std::span<const float> h, double rho);

/// The final blur: blur_relative · diameter when blur_relative > 0, else blur (data units; ε = blur²).
double final_blur(const SolveOptions& options, double diameter);
/// The ε of every stage: {ε} for a fixed ε; else ε_0 = s·diameter², ε_{k+1} = ε_k·scaling², while above blur²,
/// then blur² itself (the last stage), blur = final_blur(options, diameter).
std::vector<double> epsilon_schedule(const SolveOptions& options, double diameter);

/// Throws std::invalid_argument naming the option and its value; n, m size the warm start; mass_a, mass_b are
/// the total weights (a balanced problem needs them equal); data_diameter is the problem's own (blur_relative
/// needs a positive diameter, given or the data's).
void validate_solve_options(const SolveOptions& options, std::size_t n, std::size_t m, double mass_a,
                            double mass_b, double data_diameter);

struct SolveInputs {
  std::span<const float> a;  // (n) weights
  std::span<const float> b;  // (m)
  double diameter = 0;       // of the union of both clouds' bounding box, for the ε schedule
};

/// Runs the schedule on the backend's resident potentials (starting from zero or the warm start) and fills every
/// field of the result except primal_cost, which needs plan applications (the caller adds it).
/// Options must have been validated.
SolveResult run_sinkhorn(Backend& backend, const SolveInputs& inputs, const SolveOptions& options);

}  // namespace flashot::detail
