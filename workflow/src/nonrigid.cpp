// Non-rigid OT registration (nonrigid.hpp): Gaussian-kernel displacement field over farthest-point control points,
// fitted each round to the barycentric targets of an entropic plan.
#include "flashot/workflow/nonrigid.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "flashot/workflow/checks.hpp"
#include "flashot/workflow/dataset.hpp"

namespace flashot::workflow {

namespace {

double squared_distance(const float* p, const float* q) {
  double s = 0;
  for (int k = 0; k < 3; ++k) s += (static_cast<double>(p[k]) - q[k]) * (static_cast<double>(p[k]) - q[k]);
  return s;
}

/// K well-spread source points: greedy farthest-point sampling from the point nearest the centroid (deterministic).
std::vector<float> farthest_points(const std::vector<float>& x, std::size_t n, std::size_t k) {
  double centre[3] = {0, 0, 0};
  for (std::size_t i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) centre[c] += x[i * 3 + c] / static_cast<double>(n);
  const float cf[3] = {static_cast<float>(centre[0]), static_cast<float>(centre[1]), static_cast<float>(centre[2])};
  std::size_t pick = 0;
  for (std::size_t i = 1; i < n; ++i)
    if (squared_distance(&x[i * 3], cf) < squared_distance(&x[pick * 3], cf)) pick = i;
  std::vector<double> nearest(n, std::numeric_limits<double>::infinity());
  std::vector<float> out;
  out.reserve(k * 3);
  for (std::size_t c = 0; c < k; ++c) {
    out.insert(out.end(), x.begin() + static_cast<std::ptrdiff_t>(pick * 3),
               x.begin() + static_cast<std::ptrdiff_t>(pick * 3 + 3));
    std::size_t next = 0;
    double far = -1;
    for (std::size_t i = 0; i < n; ++i) {
      nearest[i] = std::min(nearest[i], squared_distance(&x[i * 3], &x[pick * 3]));
      if (nearest[i] > far) far = nearest[i], next = i;
    }
    pick = next;
  }
  return out;
}

/// (rows × K) kernel matrix G(p_i, c_k), row-major.
std::vector<float> kernel(const std::vector<float>& p, std::size_t rows, const std::vector<float>& c, std::size_t k,
                          double beta) {
  std::vector<float> g(rows * k);
  const double scale = -0.5 / (beta * beta);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < k; ++j) g[i * k + j] = static_cast<float>(std::exp(scale * squared_distance(&p[i * 3], &c[j * 3])));
  return g;
}

/// p + G w for the rows of a kernel matrix.
std::vector<float> displaced(const std::vector<float>& p, const std::vector<float>& g, const std::vector<double>& w,
                             std::size_t rows, std::size_t k) {
  std::vector<float> out(rows * 3);
  for (std::size_t i = 0; i < rows; ++i) {
    double v[3] = {0, 0, 0};
    for (std::size_t j = 0; j < k; ++j)
      for (int c = 0; c < 3; ++c) v[c] += g[i * k + j] * w[j * 3 + c];
    for (int c = 0; c < 3; ++c) out[i * 3 + c] = static_cast<float>(p[i * 3 + c] + v[c]);
  }
  return out;
}

/// Solves M w = rhs (M symmetric positive definite, K×K; rhs K×3) by Cholesky, in place.
void cholesky_solve(std::vector<double>& m, std::vector<double>& rhs, std::size_t k) {
  for (std::size_t j = 0; j < k; ++j) {
    double diag = m[j * k + j];
    for (std::size_t q = 0; q < j; ++q) diag -= m[j * k + q] * m[j * k + q];
    if (!(diag > 0)) throw std::runtime_error("the non-rigid kernel system is singular at control point " +
                                              std::to_string(j) + ": raise --regularization or --kernel-width");
    const double l = std::sqrt(diag);
    m[j * k + j] = l;
    for (std::size_t i = j + 1; i < k; ++i) {
      double v = m[i * k + j];
      for (std::size_t q = 0; q < j; ++q) v -= m[i * k + q] * m[j * k + q];
      m[i * k + j] = v / l;
    }
  }
  for (int c = 0; c < 3; ++c) {
    for (std::size_t i = 0; i < k; ++i) {
      double v = rhs[i * 3 + c];
      for (std::size_t q = 0; q < i; ++q) v -= m[i * k + q] * rhs[q * 3 + c];
      rhs[i * 3 + c] = v / m[i * k + i];
    }
    for (std::size_t i = k; i-- > 0;) {
      double v = rhs[i * 3 + c];
      for (std::size_t q = i + 1; q < k; ++q) v -= m[q * k + i] * rhs[q * 3 + c];
      rhs[i * 3 + c] = v / m[i * k + i];
    }
  }
}

}  // namespace

std::vector<float> NonrigidResult::apply(const std::vector<float>& points) const {
  const std::size_t k = control_points.size() / 3;
  if (points.size() % 3 != 0)
    throw std::invalid_argument("points must hold n×3 values (got " + std::to_string(points.size()) + ")");
  const std::size_t rows = points.size() / 3;
  return displaced(points, kernel(points, rows, control_points, k, kernel_width), coefficients, rows, k);
}

NonrigidResult register_nonrigid(PointsView source, PointsView target, const NonrigidOptions& o,
                                 const RegistrationProgress& progress) {
  require(source.d == 3 && target.d == 3, "non-rigid registration needs 3-D points (source.d = " +
                                              std::to_string(source.d) + ", target.d)", static_cast<double>(target.d));
  require(o.blur >= 0 && std::isfinite(o.blur), "blur must be ≥ 0 (0 = 1% of the diameter)", o.blur);
  require(o.start_blur >= 0 && std::isfinite(o.start_blur), "start_blur must be ≥ 0 (0 = half the diameter)",
          o.start_blur);
  require(o.anneal > 0 && o.anneal < 1, "anneal must be in (0, 1)", o.anneal);
  require(o.max_rounds >= 1, "max_rounds must be ≥ 1", o.max_rounds);
  require(o.tolerance >= 0 && std::isfinite(o.tolerance), "tolerance must be ≥ 0", o.tolerance);
  require(o.kernel_width >= 0 && std::isfinite(o.kernel_width), "kernel_width must be ≥ 0 (0 = 10% of the diameter)",
          o.kernel_width);
  require(o.regularization >= 0 && std::isfinite(o.regularization), "regularization must be ≥ 0", o.regularization);
  require(o.control_points >= 1, "control_points must be ≥ 1", static_cast<double>(o.control_points));
  require(o.round_iterations >= 1, "round_iterations must be ≥ 1", o.round_iterations);
  if (source.n == 0 || target.n == 0)
    throw std::invalid_argument("source and target must not be empty (got " + std::to_string(source.n) + " and " +
                                std::to_string(target.n) + " points)");
  const auto start = std::chrono::steady_clock::now();
  const std::size_t n = source.n;
  NonrigidResult result;
  result.diameter = bounding_diameter(source, target);
  require(result.diameter > 0, "the clouds must span some space: their diameter", result.diameter);
  const double final_blur = o.blur > 0 ? o.blur : 0.01 * result.diameter;
  double blur = std::max(final_blur, o.start_blur > 0 ? o.start_blur : 0.5 * result.diameter);
  result.kernel_width = o.kernel_width > 0 ? o.kernel_width : 0.1 * result.diameter;

  const std::vector<float> x(source.data.begin(), source.data.end());
  const std::size_t k = std::min(o.control_points, n);
  result.control_points = farthest_points(x, n, k);
  const std::vector<float> g = kernel(x, n, result.control_points, k, result.kernel_width);        // (n, K)
  const std::vector<float> gcc = kernel(result.control_points, k, result.control_points, k, result.kernel_width);  // (K, K)
  result.coefficients.assign(k * 3, 0.0);
  result.moved = x;

  std::vector<float> f, gpot;
  for (int round = 0; round < o.max_rounds; ++round) {
    Problem problem({result.moved, n, 3}, target, {}, {}, o.backend);
    SolveOptions so;
    so.cost = o.cost;
    so.epsilon = blur * blur;
    so.max_iterations = o.round_iterations;
    so.tolerance = 1e-3;
    so.reach = o.reach;
    so.reach_source = o.reach_source;
    so.reach_target = o.reach_target;
    so.scheme = Scheme::kAlternating;
    so.multiscale = o.multiscale;
    if (o.solve_progress) so.progress = [&o, round](const Progress& p) { return o.solve_progress(round + 1, p); };
    // The last round's potentials are a close start for the next blur (the points moved a little).
    so.initial_f = f;
    so.initial_g = gpot;
    SolveResult s = problem.solve(so);
    if (s.reason == StopReason::kNonFinite)
      throw std::runtime_error("non-rigid round " + std::to_string(round) + ": the OT solve failed: " + s.message);
    if (s.reason == StopReason::kCancelled) {  // solve_progress said stop: keep the rounds completed before
      result.cancelled = true;
      result.iterations += s.iterations;
      result.last_solve = std::move(s);
      break;
    }
    const std::vector<float> targets = problem.barycentric(s, Side::kSource);  // (n, 3)
    const std::vector<float> mass = problem.row_marginal(s);                  // (n)
    result.iterations += s.iterations;
    f = s.f;
    gpot = s.g;
    result.backend = problem.backend_name();
    result.device = problem.device_name();

    // Normal equations (Gᵀ R G + λ|r| G_cc) w = Gᵀ R (B − X).
    double total = 0;
    for (float r : mass) total += r;
    if (!(total > 0)) throw std::runtime_error("non-rigid round " + std::to_string(round) + ": the plan has no mass");
    std::vector<double> lhs(k * k, 0.0), rhs(k * 3, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      const double r = mass[i];
      if (!(r > 0)) continue;
      const float* gi = &g[i * k];
      for (std::size_t a = 0; a < k; ++a) {
        const double ra = r * gi[a];
        if (ra == 0) continue;
        for (std::size_t b = 0; b <= a; ++b) lhs[a * k + b] += ra * gi[b];
        for (int c = 0; c < 3; ++c) rhs[a * 3 + c] += ra * (static_cast<double>(targets[i * 3 + c]) - x[i * 3 + c]);
      }
    }
    double trace = 0;
    for (std::size_t a = 0; a < k; ++a) {
      for (std::size_t b = 0; b <= a; ++b) {
        lhs[a * k + b] += o.regularization * total * gcc[a * k + b];
        lhs[b * k + a] = lhs[a * k + b];
      }
      trace += lhs[a * k + a];
    }
    // A control point far from every massive source point has an all-but-zero row; a jitter far below the fit's
    // scale keeps the factorization defined without moving the solution.
    for (std::size_t a = 0; a < k; ++a) lhs[a * k + a] += 1e-10 * trace / static_cast<double>(k);
    cholesky_solve(lhs, rhs, k);
    result.coefficients = rhs;
    std::vector<float> moved = displaced(x, g, result.coefficients, n, k);

    RegistrationRound rr;
    rr.epsilon = s.epsilon;
    rr.iterations = s.iterations;
    rr.converged = s.converged;
    rr.multiscale = s.multiscale.used;
    double sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
      sum += mass[i] * squared_distance(&moved[i * 3], &targets[i * 3]);
      rr.displacement = std::max(rr.displacement, std::sqrt(squared_distance(&moved[i * 3], &result.moved[i * 3])));
    }
    rr.rms = std::sqrt(sum / total);
    result.moved = std::move(moved);
    result.rounds.push_back(rr);
    result.rms = rr.rms;
    result.transported_mass = total;  // the source's weights are uniform and sum to 1
    result.last_solve = std::move(s);
    const bool at_final = blur <= final_blur;
    if (progress && !progress(round + 1, o.max_rounds, rr.epsilon, rr.rms)) break;
    if (at_final && rr.displacement <= o.tolerance * result.diameter) {
      result.converged = true;
      break;
    }
    blur = std::max(final_blur, blur * o.anneal);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace flashot::workflow
