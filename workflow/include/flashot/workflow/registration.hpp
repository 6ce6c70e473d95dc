#pragma once
// Point-cloud registration by optimal transport: like ICP, but every round's correspondences are the barycentric
// targets T(x_i) = (P Y)_i / (P 1)_i of an entropic plan between the moved source and the target, weighted by the
// mass each source point sends (P 1)_i, and the transform is the weighted Procrustes fit to them. ε is annealed
// from the clouds' scale down to blur², so the first rounds match the clouds' overall mass distribution and the
// last ones their fine detail; an unbalanced plan (reach) lets points without a partner drop out (partial overlap).

#include <array>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot::workflow {

enum class TransformModel { kRigid, kSimilarity, kAffine };
std::string to_string(TransformModel);
/// "rigid", "similarity", "affine"; throws std::invalid_argument naming the text.
TransformModel parse_transform_model(const std::string& text);

/// y = linear · x + translation (3-D). `linear` is row-major 3×3.
struct Transform {
  std::array<double, 9> linear{1, 0, 0, 0, 1, 0, 0, 0, 1};
  std::array<double, 3> translation{0, 0, 0};
  double scale = 1;  ///< the similarity scale (cube root of |det| for affine)
  std::vector<float> apply(std::span<const float> points) const;  ///< (n×3) → (n×3)
  /// Angle of the rotation part (polar decomposition of `linear`), degrees in [0, 180].
  double rotation_degrees() const;
  /// Unit axis of that rotation (right-handed with rotation_degrees); (0, 0, 1) when the angle is 0.
  std::array<double, 3> rotation_axis() const;
};

/// Weighted least-squares fit of `model` mapping `from` (n×3) onto `to` (n×3), weights (n) ≥ 0 with a positive
/// sum (Umeyama's method for rigid/similarity; normal equations for affine). A reflection is never returned for
/// rigid/similarity. Throws std::invalid_argument for sizes that disagree or zero total weight.
Transform fit_transform(std::span<const float> from, std::span<const float> to, std::span<const float> weights,
                        TransformModel model);

/// `progress(round, check)` at every marginal-error check of a round's solve (1-based round); false stops it.
using SolveProgress = std::function<bool(int, const Progress&)>;

struct RegistrationOptions {
  TransformModel model = TransformModel::kRigid;
  double blur = 0;          ///< final blur (data units); 0 = 0.01 × the clouds' diameter
  double start_blur = 0;    ///< first round's blur; 0 = 0.5 × diameter
  double anneal = 0.7;      ///< blur factor between rounds, in (0, 1)
  int max_rounds = 60;
  /// Stop once at the final blur and the transform moves points by less than this × diameter in a round.
  double tolerance = 1e-4;
  /// Sinkhorn iteration budget of each round: a round needs correspondences, not a converged plan, because the
  /// next round moves the points anyway.
  int round_iterations = 200;
  Cost cost = Cost::kSquaredEuclidean;
  double reach = 0, reach_source = 0, reach_target = 0;  ///< data units, as SolveOptions (ρ = reach²)
  /// When reach, reach_source and reach_target are all 0: TARGET's reach = this × the clouds' diameter, SOURCE
  /// balanced; 0 = balanced on both sides. A scan is usually a part of the model: balanced OT must spread the
  /// scan's mass over the whole model, which pulls the fit towards the missing parts (samples: 32.4° found for
  /// a 30° rotation, 5.5° off), while an unbalanced TARGET lets the model's unmatched parts go (0.1° off at
  /// 0.02 × diameter; docs/cli.md has the measurements).
  double reach_target_relative = kDefaultReachTargetRelative;
  static constexpr double kDefaultReachTargetRelative = 0.02;
  Scheme scheme = Scheme::kAlternating;
  BackendOptions backend;
  /// The rounds' solves (SolveOptions::multiscale, docs/multiscale.md): kAuto lets the engine pick by n·m and the
  /// backend (multiscale from 10¹⁰ pairs on the CPU, 10¹² on GPUs), kOn and kOff force it.
  Multiscale multiscale = Multiscale::kAuto;
  /// Called at every marginal-error check of every round's solve (SolveOptions::progress), on the calling thread,
  /// with the 1-based round; a multiscale solve's coarser level reports too (Progress::coarse). Returning false
  /// stops that solve at that check and ends the registration (RegistrationResult::cancelled). Empty: no calls.
  SolveProgress solve_progress;
};

struct RegistrationRound {
  double epsilon = 0;
  int iterations = 0;       ///< Sinkhorn iterations of this round
  double rms = 0;           ///< weighted RMS distance from the moved source to its barycentric targets
  double displacement = 0;  ///< largest change of a moved source point against the previous round
  bool converged = false;   ///< the round's Sinkhorn solve converged
  bool multiscale = false;  ///< the round's solve ran the multiscale solver (SolveResult::multiscale.used)
};

struct RegistrationResult {
  Transform transform;
  std::vector<RegistrationRound> rounds;
  double rms = 0;
  double diameter = 0;
  double final_blur = 0;          ///< data units
  double reach_source = 0;        ///< the reaches used (data units; 0 = balanced side)
  double reach_target = 0;
  /// Share of the source's mass the final plan transports (1 when SOURCE is balanced): low values mean most of
  /// the scan found no partner and the fit rests on a few points.
  double transported_mass = 1;
  bool converged = false;  ///< the transform settled at the final blur within max_rounds
  /// A round's solve was stopped by solve_progress: `transform` and `rounds` are those of the rounds completed
  /// before it (the identity and none when the first round stopped); `last_solve` is the stopped solve.
  bool cancelled = false;
  SolveResult last_solve;  ///< the final round's solve (ε, cost, marginal error, stop reason)
  int iterations = 0;      ///< Sinkhorn iterations, all rounds together
  std::string backend, device;
  double seconds = 0;
};

/// What looks wrong with a registration, one sentence each (empty when nothing does): an RMS to the
/// correspondences above kRmsWarningFraction × diameter (the samples: 0.004–0.007 × diameter when right, 0.019 and
/// more when 2° or more off), under half the source's mass transported, or not settled within max_rounds.
std::vector<std::string> registration_warnings(const RegistrationResult& result);
inline constexpr double kRmsWarningFraction = 0.01;
inline constexpr double kTransportedMassWarning = 0.5;

/// `progress(round, rounds_max, epsilon, rms)` after each round; return false to stop early.
using RegistrationProgress = std::function<bool(int, int, double, double)>;

/// Registers `source` (n×3) onto `target` (m×3). Throws std::invalid_argument for d ≠ 3 or bad options, as
/// Problem for bad points.
RegistrationResult register_clouds(PointsView source, PointsView target, const RegistrationOptions& options,
                                   const RegistrationProgress& progress = {});

}  // namespace flashot::workflow
