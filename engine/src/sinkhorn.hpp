#pragma once
// The Sinkhorn loop, written once over detail::Backend (docs/design.md §1). Private to the engine.

#include <cstddef>
#include <cstdint>
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
  /// The weights live only on the backend (a device-input Problem): a and b are empty, n, m and mass_a (a's total)
  /// say what they would, and the loop's weighted reductions (marginal error, dual cost) are the backend's
  /// Backend::batch_weighted_sums. A device-input Problem and a device batch (solve_batch_on_device) take it; the
  /// multiscale loop does not.
  bool resident = false;
  std::size_t n = 0, m = 0;
  double mass_a = 0;
};

/// Runs the schedule on the backend's resident potentials (starting from zero or the warm start) and fills every
/// field of the result except primal_cost, which needs plan applications (the caller adds it).
/// Options must have been validated.
SolveResult run_sinkhorn(Backend& backend, const SolveInputs& inputs, const SolveOptions& options);

/// Where the problems of a batch lie in one concatenated backend problem (engine/src/batch.cpp): problem q owns
/// rows [row_begin[q], row_begin[q] + n_q) and columns [col_begin[q], col_begin[q] + m_q), each starting on a block
/// boundary, followed by zero-weight padding up to the next one; row_blocks / col_blocks hold the block starts
/// (problems + 1 entries, BlockPattern::block_diagonal's). rows, cols: the totals, padding included.
struct BatchLayout {
  std::vector<std::size_t> row_begin, col_begin;
  std::vector<std::int32_t> row_blocks, col_blocks;
  std::size_t rows = 0, cols = 0;
};

/// The same loop for several problems at once: problem q with inputs[q] (its own a, b) and *options[q] (its own
/// schedule, tolerance, warm start, callback; the scheme must be common). layout null: one problem filling the
/// backend, dense (run_sinkhorn). Otherwise the backend holds the concatenation and runs the block-diagonal pattern
/// of the problems still running with each problem's ε, cost scale and damping as its segment's parameters; a
/// problem that finishes (converged, budget, cancelled, non-finite) leaves the lists. Every problem gets its own
/// report, as run_sinkhorn's. On return the pattern lists every problem (for plan operations).
std::vector<SolveResult> run_sinkhorn_batch(Backend& backend, std::span<const SolveInputs> inputs,
                                            std::span<const SolveOptions* const> options, const BatchLayout* layout);

/// The pieces of run_sinkhorn that the multiscale loop (engine/src/multiscale.cpp) shares: the marginal error of
/// SolveResult::marginal_error for potentials f, g (the backend's order), the dual cost, ρ of a side, λ = 1/(1+ε/ρ).
double solve_marginal_error(const Backend& backend, const SolveInputs& in, const std::vector<float>& f,
                            const std::vector<float>& g, double epsilon, double s, double rho_x, double rho_y,
                            double mass_a);
double solve_dual_cost(const SolveInputs& in, const std::vector<float>& f, const std::vector<float>& g, double rho_x,
                       double rho_y);
double solve_damping(double epsilon, double rho);

}  // namespace flashot::detail
