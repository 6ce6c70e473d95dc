#include "flashot/workflow/registration.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "flashot/workflow/dataset.hpp"

namespace flashot::workflow {
namespace {

using Matrix3 = Eigen::Matrix3d;
using Vector3 = Eigen::Vector3d;

Vector3 row(std::span<const float> points, std::size_t i) {
  return {points[3 * i], points[3 * i + 1], points[3 * i + 2]};
}

}  // namespace

std::string to_string(TransformModel model) {
  switch (model) {
    case TransformModel::kRigid: return "rigid";
    case TransformModel::kSimilarity: return "similarity";
    case TransformModel::kAffine: return "affine";
  }
  return "rigid";
}

TransformModel parse_transform_model(const std::string& text) {
  if (text == "rigid") return TransformModel::kRigid;
  if (text == "similarity") return TransformModel::kSimilarity;
  if (text == "affine") return TransformModel::kAffine;
  throw std::invalid_argument("model must be rigid, similarity or affine (got '" + text + "')");
}

std::vector<float> Transform::apply(std::span<const float> points) const {
  std::vector<float> out(points.size());
  for (std::size_t i = 0; i + 2 < points.size(); i += 3) {
    for (std::size_t r = 0; r < 3; ++r) {
      out[i + r] = float(linear[3 * r] * points[i] + linear[3 * r + 1] * points[i + 1] +
                         linear[3 * r + 2] * points[i + 2] + translation[r]);
    }
  }
  return out;
}

double Transform::rotation_degrees() const {
  const Matrix3 a = Eigen::Map<const Eigen::Matrix<double, 3, 3, Eigen::RowMajor>>(linear.data());
  Eigen::JacobiSVD<Matrix3> svd(a, Eigen::ComputeFullU | Eigen::ComputeFullV);
  const Matrix3 rotation = svd.matrixU() * svd.matrixV().transpose();
  const double cosine = std::clamp((rotation.trace() - 1) / 2, -1.0, 1.0);
  return std::acos(cosine) * 180.0 / M_PI;
}

std::array<double, 3> Transform::rotation_axis() const {
  const Matrix3 a = Eigen::Map<const Eigen::Matrix<double, 3, 3, Eigen::RowMajor>>(linear.data());
  Eigen::JacobiSVD<Matrix3> svd(a, Eigen::ComputeFullU | Eigen::ComputeFullV);
  Matrix3 rotation = svd.matrixU() * svd.matrixV().transpose();
  if (rotation.determinant() < 0) rotation = -rotation;  // an affine reflection: the axis of its rotation part
  const Eigen::AngleAxisd angle_axis(rotation);
  if (!(angle_axis.angle() > 1e-12)) return {0, 0, 1};
  const Vector3 axis = angle_axis.axis().normalized();
  return {axis.x(), axis.y(), axis.z()};
}

Transform fit_transform(std::span<const float> from, std::span<const float> to, std::span<const float> weights,
                        TransformModel model) {
  const std::size_t n = weights.size();
  if (from.size() != 3 * n || to.size() != 3 * n) {
    throw std::invalid_argument("fit_transform: " + std::to_string(n) + " weights but " +
                                std::to_string(from.size()) + " and " + std::to_string(to.size()) +
                                " coordinates (expected 3 per weight)");
  }
  double total = 0;
  Vector3 mean_from = Vector3::Zero(), mean_to = Vector3::Zero();
  for (std::size_t i = 0; i < n; ++i) {
    total += weights[i];
    mean_from += weights[i] * row(from, i);
    mean_to += weights[i] * row(to, i);
  }
  if (!(total > 0)) throw std::invalid_argument("fit_transform: the weights sum to " + std::to_string(total));
  mean_from /= total;
  mean_to /= total;
  // Weighted covariances (Umeyama 1991, eq. 36–42): cross = Σ w (y−μy)(x−μx)ᵀ, spread = Σ w (x−μx)(x−μx)ᵀ.
  Matrix3 cross = Matrix3::Zero(), spread = Matrix3::Zero();
  for (std::size_t i = 0; i < n; ++i) {
    const Vector3 x = row(from, i) - mean_from, y = row(to, i) - mean_to;
    cross += weights[i] * y * x.transpose();
    spread += weights[i] * x * x.transpose();
  }
  cross /= total;
  spread /= total;
  Matrix3 linear;
  double scale = 1;
  if (model == TransformModel::kAffine) {
    linear = cross * spread.inverse();
    scale = std::cbrt(std::abs(linear.determinant()));
  } else {
    Eigen::JacobiSVD<Matrix3> svd(cross, Eigen::ComputeFullU | Eigen::ComputeFullV);
    Vector3 signs(1, 1, (svd.matrixU() * svd.matrixV().transpose()).determinant() < 0 ? -1 : 1);
    linear = svd.matrixU() * signs.asDiagonal() * svd.matrixV().transpose();
    if (model == TransformModel::kSimilarity) {
      scale = svd.singularValues().dot(signs) / spread.trace();
      linear *= scale;
    }
  }
  Transform t;
  const Vector3 translation = mean_to - linear * mean_from;
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) t.linear[std::size_t(3 * r + c)] = linear(r, c);
    t.translation[std::size_t(r)] = translation[r];
  }
  t.scale = scale;
  return t;
}

std::vector<std::string> registration_warnings(const RegistrationResult& result) {
  std::vector<std::string> out;
  const auto text = [](double v) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.3g", v);
    return std::string(buffer);
  };
  if (result.rms > kRmsWarningFraction * result.diameter) {
    out.push_back("the RMS to the correspondences, " + text(result.rms) + ", is " +
                  text(result.rms / result.diameter) + " x the diameter (above " + text(kRmsWarningFraction) +
                  "): the clouds may not match well; for a partial scan give --reach-target (or --rel-reach)");
  }
  if (result.transported_mass < kTransportedMassWarning) {
    out.push_back("only " + text(100 * result.transported_mass) +
                  "% of SOURCE's mass found a partner: the fit rests on few points; try a larger reach");
  }
  if (!result.converged) {
    out.push_back("the transform did not settle within " + std::to_string(result.rounds.size()) +
                  " rounds (--max-rounds)");
  }
  return out;
}

RegistrationResult register_clouds(PointsView source, PointsView target, const RegistrationOptions& options,
                                   const RegistrationProgress& progress) {
  if (source.d != 3 || target.d != 3) {
    throw std::invalid_argument("registration needs 3-D points (got " + std::to_string(source.d) + "-d and " +
                                std::to_string(target.d) + "-d)");
  }
  if (!(options.anneal > 0 && options.anneal < 1)) {
    throw std::invalid_argument("anneal must be in (0, 1) (got " + std::to_string(options.anneal) + ")");
  }
  if (!(options.reach_target_relative >= 0) || !std::isfinite(options.reach_target_relative)) {
    throw std::invalid_argument("reach_target_relative must be >= 0 (got " + std::to_string(options.reach_target_relative) +
                                ")");
  }
  if (options.max_rounds < 1) {
    throw std::invalid_argument("max_rounds must be >= 1 (got " + std::to_string(options.max_rounds) + ")");
  }
  const auto start = std::chrono::steady_clock::now();
  RegistrationResult result;
  result.diameter = bounding_diameter(source, target);
  if (!(result.diameter > 0)) throw std::invalid_argument("the point clouds have zero extent");
  const double final_blur = options.blur > 0 ? options.blur : 0.01 * result.diameter;
  result.final_blur = final_blur;
  const bool reach_given = options.reach > 0 || options.reach_source > 0 || options.reach_target > 0;
  const double reach_source = reach_given ? (options.reach_source > 0 ? options.reach_source : options.reach) : 0;
  const double reach_target = reach_given ? (options.reach_target > 0 ? options.reach_target : options.reach)
                                          : options.reach_target_relative * result.diameter;
  result.reach_source = reach_source;
  result.reach_target = reach_target;
  double blur = std::max(options.start_blur > 0 ? options.start_blur : 0.5 * result.diameter, final_blur);

  std::vector<float> moved(source.data.begin(), source.data.end());
  std::vector<float> f, g;
  for (int round = 0; round < options.max_rounds; ++round) {
    Problem problem(PointsView{moved, source.n, 3}, target, {}, {}, options.backend);
    SolveOptions solve;
    solve.reach_source = reach_source;
    solve.reach_target = reach_target;
    solve.scheme = options.scheme;
    solve.max_iterations = options.round_iterations;
    solve.multiscale = options.multiscale;
    if (options.solve_progress) {
      solve.progress = [&options, round](const Progress& p) { return options.solve_progress(round + 1, p); };
    }
    if (round == 0) {
      solve.blur = blur;  // ε-scaling from the diameter down to the first blur
    } else {
      // Later rounds: fixed ε warm-started from the previous round's potentials; the points moved a little
      // and ε shrank by anneal², so the old pair is close to the new fixed point. A warm-started solve runs at its
      // ε alone, dense or multiscale (docs/multiscale.md, "Warm starts").
      solve.epsilon = blur * blur;  // the engine's rule: ε = blur² in cost units
      solve.initial_f = f;
      solve.initial_g = g;
    }
    solve.cost = options.cost;
    const SolveResult s = problem.solve(solve);
    if (s.reason == StopReason::kNonFinite) {
      throw std::runtime_error("round " + std::to_string(round + 1) + ": " + s.message);
    }
    if (s.reason == StopReason::kCancelled) {  // solve_progress said stop: keep the rounds completed before
      result.cancelled = true;
      result.last_solve = s;
      result.iterations += s.iterations;
      break;
    }
    f = s.f;
    g = s.g;
    const std::vector<float> matched = problem.barycentric(s, Side::kSource);
    std::vector<float> weights = problem.row_marginal(s);
    for (float& w : weights) w = std::isfinite(w) ? w : 0.0f;
    result.transform = fit_transform(source.data, matched, weights, options.model);
    result.backend = s.backend;
    result.device = s.device;

    const std::vector<float> next = result.transform.apply(source.data);
    RegistrationRound report;
    report.epsilon = s.epsilon;
    report.iterations = s.iterations;
    report.converged = s.converged;
    report.multiscale = s.multiscale.used;
    double squared = 0, total = 0;
    for (std::size_t i = 0; i < source.n; ++i) {
      double change = 0, residual = 0;
      for (std::size_t k = 0; k < 3; ++k) {
        change += std::pow(double(next[3 * i + k]) - moved[3 * i + k], 2);
        residual += std::pow(double(next[3 * i + k]) - matched[3 * i + k], 2);
      }
      report.displacement = std::max(report.displacement, std::sqrt(change));
      squared += weights[i] * residual;
      total += weights[i];
    }
    report.rms = total > 0 ? std::sqrt(squared / total) : 0;
    result.transported_mass = total;  // the source's weights are uniform and sum to 1
    result.rounds.push_back(report);
    result.iterations += s.iterations;
    result.last_solve = s;
    result.rms = report.rms;
    moved = next;
    const bool at_final = blur <= final_blur;
    if (progress && !progress(round + 1, options.max_rounds, s.epsilon, report.rms)) break;
    if (at_final && report.displacement < options.tolerance * result.diameter) {
      result.converged = true;
      break;
    }
    blur = std::max(blur * options.anneal, final_blur);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace flashot::workflow
