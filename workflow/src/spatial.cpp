// Spatial alignment of two tissue slices (workflow/spatial.hpp): normalization, fused GW, transform fit.
#include "flashot/workflow/spatial.hpp"

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace flashot::workflow {
namespace {

/// Σ‖p_i − p̄‖²/n and the mean p̄.
double variance(PointsView p, std::vector<double>& mean) {
  mean.assign(p.d, 0.0);
  for (std::size_t i = 0; i < p.n; ++i)
    for (std::size_t c = 0; c < p.d; ++c) mean[c] += p.data[i * p.d + c];
  for (double& v : mean) v /= static_cast<double>(p.n);
  double s = 0;
  for (std::size_t i = 0; i < p.n; ++i)
    for (std::size_t c = 0; c < p.d; ++c) s += std::pow(p.data[i * p.d + c] - mean[c], 2);
  return s / static_cast<double>(p.n);
}

std::vector<float> scaled(PointsView p, double factor) {
  std::vector<float> out(p.data.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(p.data[i] * factor);
  return out;
}

}  // namespace

std::string to_string(SpatialModel model) {
  switch (model) {
    case SpatialModel::kRigid: return "rigid";
    case SpatialModel::kAffine: return "affine";
    case SpatialModel::kNonrigid: return "nonrigid";
  }
  return "rigid";
}

SpatialModel parse_spatial_model(const std::string& text) {
  if (text == "rigid") return SpatialModel::kRigid;
  if (text == "affine") return SpatialModel::kAffine;
  if (text == "nonrigid") return SpatialModel::kNonrigid;
  throw std::invalid_argument("--model must be rigid, affine or nonrigid (got '" + text + "')");
}

SpatialAlignment align_slices(PointsView x, PointsView y, PointsView u, PointsView v, const SpatialOptions& o) {
  if (o.model != SpatialModel::kNonrigid && x.d != y.d)
    throw std::invalid_argument("a " + to_string(o.model) + " model maps coordinates of one dimension onto the same: " +
                                "the source has " + std::to_string(x.d) + " and the target " + std::to_string(y.d) +
                                " (use --model nonrigid)");
  if (!(o.blur > 0) || !std::isfinite(o.blur))
    throw std::invalid_argument("blur must be > 0 (got " + std::to_string(o.blur) + ")");
  SpatialAlignment out;
  std::vector<double> mx, my;
  const double vx = variance(x, mx), vy = variance(y, my);
  if (!(vx + vy > 0)) throw std::invalid_argument("all cells of both slices lie at one point: no scale to align by");
  out.scales.coordinates = 1.0 / std::sqrt(vx + vy);
  const std::vector<float> xs = scaled(x, out.scales.coordinates), ys = scaled(y, out.scales.coordinates);
  std::vector<float> us, vs;
  const bool features = u.n > 0;
  if (features) {
    std::vector<double> mu, mv;
    const double vu = variance(u, mu), vv = variance(v, mv);
    double gap = 0;
    for (std::size_t c = 0; c < mu.size() && c < mv.size(); ++c) gap += (mu[c] - mv[c]) * (mu[c] - mv[c]);
    const double mean_cost = vu + vv + gap;
    out.scales.features = mean_cost > 0 ? 1.0 / std::sqrt(mean_cost) : 1.0;
    us = scaled(u, out.scales.features);
    vs = scaled(v, out.scales.features);
  }
  GromovData data{{xs, x.n, x.d}, {ys, y.n, y.d}, {}, {}, {}, {}};
  if (features) {
    data.u = {us, u.n, u.d};
    data.v = {vs, v.n, v.d};
  }
  out.problem = std::make_unique<GromovProblem>(data, o.backend);
  GromovOptions go;
  go.alpha = features ? o.alpha : 1.0;
  go.epsilon = o.blur * o.blur;
  go.reach = o.reach;
  go.max_outer = o.max_outer;
  go.outer_tolerance = o.outer_tolerance;
  go.inner_tolerance = o.inner_tolerance;
  go.inner_max_iterations = o.inner_max_iterations;
  go.scheme = o.scheme;
  go.progress = o.progress;
  out.result = out.problem->solve(go);
  if (out.result.reason == StopReason::kNonFinite || out.result.reason == StopReason::kCancelled) return out;

  // Barycentric images back in the caller's units.
  out.mapped = out.problem->map_coordinates(out.result);
  for (float& c : out.mapped) c = static_cast<float>(c / out.scales.coordinates);
  const std::vector<float> mass = out.problem->problem().row_marginal(out.result.plan);
  const std::size_t n = x.n, p = x.d, q = y.d;
  std::vector<double> w(n, 0.0);
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    bool finite = true;
    for (std::size_t c = 0; c < q; ++c) finite = finite && std::isfinite(out.mapped[i * q + c]);
    // r_i·(r_i/a_i)³ (uniform a_i = 1/n): the row mass relative to the cell's weight is the plan's evidence that
    // the cell has a counterpart; unbalanced plans leave cells without one a fraction of it, and their barycentric
    // images on the other slice's edge would bias the fit (docs/gromov-wasserstein.md §5). Balanced: ∝ r_i.
    const double relative = static_cast<double>(mass[i]) * static_cast<double>(n);
    w[i] = finite && mass[i] > 0 ? mass[i] * relative * relative * relative : 0.0;
    total += w[i];
  }
  if (!(total > 0)) throw std::runtime_error("the plan carries no mass from any source cell: nothing to fit");
  out.aligned.assign(n * q, 0.0f);
  if (o.model == SpatialModel::kNonrigid) {
    // Rows with no mass stay where they are (there is no image to take them to).
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < q; ++c)
        out.aligned[i * q + c] = w[i] > 0 ? out.mapped[i * q + c] : (c < p ? x.data[i * p + c] : 0.0f);
  } else {
    // Weighted least squares of the barycentric images: Umeyama/Kabsch (rigid, reflection excluded) or the
    // normal equations of [x 1] (affine).
    Eigen::VectorXd mean_x = Eigen::VectorXd::Zero(p), mean_t = Eigen::VectorXd::Zero(q);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < p; ++c) {
        mean_x[c] += w[i] * x.data[i * p + c];
        mean_t[c] += w[i] * out.mapped[i * q + c];
      }
    mean_x /= total;
    mean_t /= total;
    Eigen::MatrixXd cov = Eigen::MatrixXd::Zero(q, p), sxx = Eigen::MatrixXd::Zero(p, p);
    for (std::size_t i = 0; i < n; ++i) {
      if (!(w[i] > 0)) continue;
      Eigen::VectorXd a(p), b(q);
      for (std::size_t c = 0; c < p; ++c) a[c] = x.data[i * p + c] - mean_x[c];
      for (std::size_t c = 0; c < q; ++c) b[c] = out.mapped[i * q + c] - mean_t[c];
      cov += w[i] * b * a.transpose();
      sxx += w[i] * a * a.transpose();
    }
    Eigen::MatrixXd linear;
    if (o.model == SpatialModel::kRigid) {
      Eigen::JacobiSVD<Eigen::MatrixXd> svd(cov, Eigen::ComputeFullU | Eigen::ComputeFullV);
      Eigen::MatrixXd fix = Eigen::MatrixXd::Identity(q, p);
      if ((svd.matrixU() * svd.matrixV().transpose()).determinant() < 0) fix(q - 1, p - 1) = -1;
      linear = svd.matrixU() * fix * svd.matrixV().transpose();
      if (p == 2) {
        out.rotation_degrees = std::atan2(linear(1, 0), linear(0, 0)) * 180.0 / M_PI;
      } else {
        out.rotation_degrees = std::acos(std::clamp((linear.trace() - 1) / 2, -1.0, 1.0)) * 180.0 / M_PI;
      }
    } else {
      linear = cov * sxx.completeOrthogonalDecomposition().pseudoInverse();
    }
    const Eigen::VectorXd t = mean_t - linear * mean_x;
    out.linear.assign(linear.data(), linear.data() + q * p);
    for (std::size_t r = 0; r < q; ++r)
      for (std::size_t c = 0; c < p; ++c) out.linear[r * p + c] = linear(r, c);
    out.translation.assign(t.data(), t.data() + q);
    double sq = 0;
    for (std::size_t i = 0; i < n; ++i) {
      Eigen::VectorXd a(p);
      for (std::size_t c = 0; c < p; ++c) a[c] = x.data[i * p + c];
      const Eigen::VectorXd b = linear * a + t;
      for (std::size_t c = 0; c < q; ++c) {
        out.aligned[i * q + c] = static_cast<float>(b[c]);
        if (w[i] > 0) sq += w[i] * std::pow(b[c] - out.mapped[i * q + c], 2);
      }
    }
    out.rms = std::sqrt(sq / total);
  }
  return out;
}

}  // namespace flashot::workflow
