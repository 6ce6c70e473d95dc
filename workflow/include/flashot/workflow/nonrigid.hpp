#pragma once
// Non-rigid point-cloud registration by optimal transport (`flashot register --model nonrigid`): a smooth
// displacement field v(x) = Σ_k G(x, c_k) w_k, G(x, c) = exp(−‖x − c‖² / (2β²)), over K control points c_k drawn from
// the source, fitted round after round to the OT correspondences — coherent point drift's M-step with the E-step
// replaced by an entropic plan between the moved source and the target (docs/differentiation.md).
//
// Each round: solve OT between T = X + v(X) and Y at the round's blur (annealed like the rigid registration), take
// the barycentric targets B_i = (P Y)_i / r_i with weights r_i = (P 1)_i, and minimise
//   Σ_i r_i ‖x_i + v(x_i) − B_i‖² + λ·|r|·Σ_kl w_kᵀ G(c_k, c_l) w_l
// (the RKHS norm of v), a K×K linear system solved by Cholesky. Memory O((n + m)·3 + n·K + K²).

#include <cstddef>
#include <string>
#include <vector>

#include "flashot/workflow/registration.hpp"
#include "flashot/flashot.hpp"

namespace flashot::workflow {

struct NonrigidOptions {
  double blur = 0;        ///< final blur (data units); 0 = 0.01 × the clouds' diameter
  double start_blur = 0;  ///< first round's blur; 0 = 0.5 × diameter
  double anneal = 0.7;    ///< blur factor between rounds, in (0, 1)
  int max_rounds = 60;
  /// Stop once at the final blur and no point moves by more than this × diameter in a round.
  double tolerance = 1e-4;
  double kernel_width = 0;       ///< β (data units): the displacement's smoothness scale; 0 = 0.1 × diameter
  double regularization = 1e-2;  ///< λ ≥ 0: weight of the field's RKHS norm against the fit
  std::size_t control_points = 200;  ///< K (at most n), chosen by farthest-point sampling of the source
  int round_iterations = 200;        ///< Sinkhorn budget of each round (warm-started)
  Cost cost = Cost::kSquaredEuclidean;
  double reach = 0, reach_source = 0, reach_target = 0;  ///< data units, as SolveOptions (ρ = reach²)
  BackendOptions backend;
  Multiscale multiscale = Multiscale::kAuto;  ///< the rounds' solves, as RegistrationOptions::multiscale
  SolveProgress solve_progress;               ///< as RegistrationOptions::solve_progress
};

struct NonrigidResult {
  std::vector<float> moved;           ///< (n×3) the source displaced by the field
  std::vector<float> control_points;  ///< (K×3) c_k, source coordinates
  std::vector<double> coefficients;   ///< (K×3) w_k
  double kernel_width = 0;            ///< β used
  std::vector<RegistrationRound> rounds;
  double rms = 0;  ///< r-weighted RMS distance from the moved source to its barycentric targets
  double diameter = 0;
  double transported_mass = 1;  ///< share of the source's mass the final plan transports (as RegistrationResult)
  bool converged = false;  ///< settled at the final blur within max_rounds
  /// A round's solve was stopped by solve_progress: the field is that of the rounds completed before it (zero and
  /// none when the first round stopped).
  bool cancelled = false;
  SolveResult last_solve;
  int iterations = 0;  ///< Sinkhorn iterations, all rounds together
  std::string backend, device;
  double seconds = 0;

  /// The fitted field applied to other points (n×3 → n×3): p + v(p).
  std::vector<float> apply(const std::vector<float>& points) const;
};

/// Registers `source` (n×3) onto `target` (m×3) non-rigidly. Throws std::invalid_argument for d ≠ 3 or bad options
/// (naming the option and value), as Problem for bad points; std::runtime_error if the kernel system is singular.
NonrigidResult register_nonrigid(PointsView source, PointsView target, const NonrigidOptions& options,
                                 const RegistrationProgress& progress = {});

}  // namespace flashot::workflow
