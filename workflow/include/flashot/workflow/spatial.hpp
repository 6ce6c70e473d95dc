#pragma once
// Spatial alignment of two tissue slices by fused Gromov–Wasserstein (docs/gromov-wasserstein.md): the units the
// CLI and the GUI put the data in, the solve, and the transform fitted to the plan. `flashot align --spatial`.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flashot/flashot.hpp"
#include "flashot/gromov.hpp"

namespace flashot::workflow {

/// How the source slice's coordinates are carried into the target's frame: the best rigid motion (rotation +
/// translation, no reflection) or affine map fitted to the plan's barycentric images (weighted by each cell's
/// plan mass), or the barycentric images themselves (non-rigid).
enum class SpatialModel { kRigid, kAffine, kNonrigid };
std::string to_string(SpatialModel);
/// "rigid", "affine", "nonrigid"; throws std::invalid_argument naming the text.
SpatialModel parse_spatial_model(const std::string& text);

struct SpatialOptions {
  double alpha = 0.5;          ///< weight of the GW (spatial) term; 1 − α weighs the embedding
  /// ε = blur² in the normalized units below (both cost terms have mean ~1 over the product plan).
  double blur = 0.05;
  /// Unbalanced (slices of different extent or density): ρ = reach² in the same units; 0 = balanced.
  double reach = 0;
  SpatialModel model = SpatialModel::kRigid;
  int max_outer = 100;
  double outer_tolerance = 1e-5;
  double inner_tolerance = 1e-4;
  int inner_max_iterations = 2000;
  Scheme scheme = Scheme::kAlternating;
  BackendOptions backend;
  GromovProgressCallback progress;
};

/// The units the problem is solved in: coordinates × coordinate_scale (one factor for both slices, so that the
/// mean squared distance between two cells of a slice, averaged over the slices, is 1), embeddings ×
/// feature_scale (the mean of ‖u_i − v_j‖² over all pairs is 1).
struct SpatialScales {
  double coordinates = 1;
  double features = 1;
};

struct SpatialAlignment {
  GromovResult result;
  SpatialScales scales;
  std::vector<float> mapped;   ///< (n×q) barycentric images in the target's coordinates (NaN rows: no mass)
  std::vector<float> aligned;  ///< (n×p) the source coordinates moved by `model` into the target's frame
  std::vector<double> linear;  ///< (q×p) row-major, rigid / affine; empty for non-rigid
  std::vector<double> translation;  ///< (q)
  double rotation_degrees = 0;      ///< of the rigid fit, 2-D: signed angle; 3-D: angle of the rotation
  double rms = 0;                   ///< mass-weighted RMS distance from `aligned` to `mapped`
  /// The solved problem: its plan operations (labels, top-k) take result.plan.
  std::unique_ptr<GromovProblem> problem;
};

/// Aligns source (x: n×p coordinates, u: n×e embedding or empty) onto target (y: m×q, v: m×e). Throws
/// std::invalid_argument for a rigid/affine model with p ≠ q, for coordinates that all coincide, and as
/// GromovProblem / solve for bad data or options.
SpatialAlignment align_slices(PointsView x, PointsView y, PointsView u, PointsView v, const SpatialOptions& options);

}  // namespace flashot::workflow
