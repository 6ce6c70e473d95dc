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
};

/// Weighted least-squares fit of `model` mapping `from` (n×3) onto `to` (n×3), weights (n) ≥ 0 with a positive
/// sum (Umeyama's method for rigid/similarity; normal equations for affine). A reflection is never returned for
/// rigid/similarity. Throws std::invalid_argument for sizes that disagree or zero total weight.
Transform fit_transform(std::span<const float> from, std::span<const float> to, std::span<const float> weights,
                        TransformModel model);

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
  Scheme scheme = Scheme::kAlternating;
  BackendOptions backend;
};

struct RegistrationRound {
  double epsilon = 0;
  int iterations = 0;       ///< Sinkhorn iterations of this round
  double rms = 0;           ///< weighted RMS distance from the moved source to its barycentric targets
  double displacement = 0;  ///< largest change of a moved source point against the previous round
  bool converged = false;   ///< the round's Sinkhorn solve converged
};

struct RegistrationResult {
  Transform transform;
  std::vector<RegistrationRound> rounds;
  double rms = 0;
  double diameter = 0;
  bool converged = false;  ///< the transform settled at the final blur within max_rounds
  SolveResult last_solve;  ///< the final round's solve (ε, cost, marginal error, stop reason)
  int iterations = 0;      ///< Sinkhorn iterations, all rounds together
  std::string backend, device;
  double seconds = 0;
};

/// `progress(round, rounds_max, epsilon, rms)` after each round; return false to stop early.
using RegistrationProgress = std::function<bool(int, int, double, double)>;

/// Registers `source` (n×3) onto `target` (m×3). Throws std::invalid_argument for d ≠ 3 or bad options, as
/// Problem for bad points.
RegistrationResult register_clouds(PointsView source, PointsView target, const RegistrationOptions& options,
                                   const RegistrationProgress& progress = {});

}  // namespace flashot::workflow
