#include "reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace flashot::test {

namespace {

std::vector<double> to_double(std::span<const float> v) { return {v.begin(), v.end()}; }

std::vector<double> weights(std::span<const float> w, std::size_t n) {
  if (w.empty()) return std::vector<double>(n, 1.0 / static_cast<double>(n));
  return to_double(w);
}

double scale_of(Cost c) { return c == Cost::kHalfSquaredEuclidean ? 0.5 : 1.0; }

double sqdist(const double* p, const double* q, std::size_t d) {
  double s = 0;
  for (std::size_t c = 0; c < d; ++c) s += (p[c] - q[c]) * (p[c] - q[c]);
  return s;
}

double log_or_minus_inf(double w) { return w > 0 ? std::log(w) : -std::numeric_limits<double>::infinity(); }

/// −ε·LSE_j [log w_j + (h_j − C_ij)/ε] for every row i of c (rows × cols), or of cᵀ when transpose is set.
std::vector<double> softmin(const std::vector<double>& c, std::size_t rows, std::size_t cols, bool transpose,
                            const std::vector<double>& w, const std::vector<double>& h, double eps) {
  std::vector<double> out(rows);
  std::vector<double> z(cols);
  for (std::size_t i = 0; i < rows; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < cols; ++j) {
      const double cij = transpose ? c[j * rows + i] : c[i * cols + j];
      z[j] = log_or_minus_inf(w[j]) + (h[j] - cij) / eps;
      mx = std::max(mx, z[j]);
    }
    double s = 0;
    for (std::size_t j = 0; j < cols; ++j) s += std::exp(z[j] - mx);
    out[i] = -eps * (mx + std::log(s));
  }
  return out;
}

}  // namespace

double reference_dual_cost(std::span<const float> a, std::span<const float> b, std::span<const double> f,
                           std::span<const double> g, double rho_x, double rho_y) {
  const auto term = [](std::span<const float> w, std::span<const double> h, double rho) {
    double s = 0;
    for (std::size_t i = 0; i < h.size(); ++i) {
      const double wi = w.empty() ? 1.0 / static_cast<double>(h.size()) : w[i];
      s += rho > 0 ? wi * rho * (1 - std::exp(-h[i] / rho)) : wi * h[i];
    }
    return s;
  };
  return term(a, f, rho_x) + term(b, g, rho_y);
}

ReferenceResult reference_solve(PointsView x, PointsView y, std::span<const float> af, std::span<const float> bf,
                                const SolveOptions& o) {
  const std::size_t n = x.n, m = y.n, d = x.d;
  const double s = scale_of(o.cost);
  const std::vector<double> a = weights(af, n), b = weights(bf, m);
  std::vector<double> c(n * m);
  const std::vector<double> xd = to_double(x.data), yd = to_double(y.data);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) c[i * m + j] = s * sqdist(&xd[i * d], &yd[j * d], d);

  // Schedule: from s·diameter² (bounding box of both clouds) down to blur², by scaling² per stage.
  std::vector<double> eps;
  if (o.epsilon > 0) {
    eps = {o.epsilon};
  } else {
    double diameter = o.diameter;
    if (diameter == 0) {
      double d2 = 0;
      for (std::size_t k = 0; k < d; ++k) {
        double lo = std::numeric_limits<double>::infinity(), hi = -lo;
        for (std::size_t i = 0; i < n; ++i) lo = std::min(lo, xd[i * d + k]), hi = std::max(hi, xd[i * d + k]);
        for (std::size_t j = 0; j < m; ++j) lo = std::min(lo, yd[j * d + k]), hi = std::max(hi, yd[j * d + k]);
        d2 += (hi - lo) * (hi - lo);
      }
      diameter = std::sqrt(d2);
    }
    for (double e = s * diameter * diameter; e > o.blur * o.blur; e *= o.scaling * o.scaling) eps.push_back(e);
    eps.push_back(o.blur * o.blur);
  }
  const double rho_x = std::pow(o.reach_source > 0 ? o.reach_source : o.reach, 2);
  const double rho_y = std::pow(o.reach_target > 0 ? o.reach_target : o.reach, 2);
  double mass_a = 0;
  for (double w : a) mass_a += w;

  ReferenceResult r;
  r.stage_epsilons = eps;
  r.f = o.initial_f.empty() ? std::vector<double>(n, 0.0) : to_double(o.initial_f);
  r.g = o.initial_g.empty() ? std::vector<double>(m, 0.0) : to_double(o.initial_g);

  const auto step = [&](double e) {
    const double lx = rho_x > 0 ? 1 / (1 + e / rho_x) : 1.0;
    const double ly = rho_y > 0 ? 1 / (1 + e / rho_y) : 1.0;
    if (o.scheme == Scheme::kSymmetric) {
      const std::vector<double> fn = softmin(c, n, m, false, b, r.g, e);
      const std::vector<double> gn = softmin(c, m, n, true, a, r.f, e);
      for (std::size_t i = 0; i < n; ++i) r.f[i] = 0.5 * (r.f[i] + lx * fn[i]);
      for (std::size_t j = 0; j < m; ++j) r.g[j] = 0.5 * (r.g[j] + ly * gn[j]);
    } else {
      const std::vector<double> fn = softmin(c, n, m, false, b, r.g, e);
      for (std::size_t i = 0; i < n; ++i) r.f[i] = lx * fn[i];
      const std::vector<double> gn = softmin(c, m, n, true, a, r.f, e);
      for (std::size_t j = 0; j < m; ++j) r.g[j] = ly * gn[j];
    }
    ++r.iterations;
  };
  // Marginal error from the dense plan: ‖P1 − a e^{−f/ρ}‖₁ + ‖Pᵀ1 − b e^{−g/ρ}‖₁ over Σa.
  const auto error = [&](double e) {
    std::vector<double> row(n, 0.0), col(m, 0.0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < m; ++j) {
        if (!(a[i] > 0 && b[j] > 0)) continue;
        const double p = a[i] * b[j] * std::exp((r.f[i] + r.g[j] - c[i * m + j]) / e);
        row[i] += p;
        col[j] += p;
      }
    double err = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (a[i] > 0) err += std::abs(row[i] - (rho_x > 0 ? a[i] * std::exp(-r.f[i] / rho_x) : a[i]));
    for (std::size_t j = 0; j < m; ++j)
      if (b[j] > 0) err += std::abs(col[j] - (rho_y > 0 ? b[j] * std::exp(-r.g[j] / rho_y) : b[j]));
    return err / mass_a;
  };

  for (std::size_t k = 0; k + 1 < eps.size(); ++k)
    for (int it = 0; it < o.stage_iterations; ++it) step(eps[k]);
  const double e = eps.back();
  const bool checking = o.tolerance > 0;
  for (int done = 0; done < o.max_iterations;) {
    const int chunk = checking ? std::min(o.check_every, o.max_iterations - done) : o.max_iterations - done;
    for (int it = 0; it < chunk; ++it) step(e);
    done += chunk;
    if (checking && error(e) <= o.tolerance) {
      r.converged = true;
      break;
    }
  }
  r.epsilon = e;
  r.marginal_error = error(e);
  r.dual_cost = reference_dual_cost(af, bf, r.f, r.g, rho_x, rho_y);
  r.primal_cost = ReferencePlan(x, y, af, bf, r.f, r.g, e, o.cost).primal_cost();
  return r;
}

ReferencePlan::ReferencePlan(PointsView x, PointsView y, std::span<const float> a, std::span<const float> b,
                             std::span<const double> f, std::span<const double> g, double epsilon, Cost cost)
    : n_(x.n), m_(y.n), d_(x.d), x_(to_double(x.data)), y_(to_double(y.data)), a_(weights(a, x.n)),
      b_(weights(b, y.n)), eps_(epsilon), s_(scale_of(cost)) {
  build(f, g);
}

ReferencePlan::ReferencePlan(PointsView x, PointsView y, std::span<const float> a, std::span<const float> b,
                             const SolveResult& s)
    : n_(x.n), m_(y.n), d_(x.d), x_(to_double(x.data)), y_(to_double(y.data)), a_(weights(a, x.n)),
      b_(weights(b, y.n)), eps_(s.epsilon), s_(scale_of(s.cost)) {
  const std::vector<double> f = to_double(s.f), g = to_double(s.g);
  build(f, g);
}

void ReferencePlan::build(std::span<const double> f, std::span<const double> g) {
  f_.assign(f.begin(), f.end());
  g_.assign(g.begin(), g.end());
  p_.assign(n_ * m_, 0.0);
  for (std::size_t i = 0; i < n_; ++i)
    for (std::size_t j = 0; j < m_; ++j)
      if (a_[i] > 0 && b_[j] > 0)
        p_[i * m_ + j] =
            a_[i] * b_[j] * std::exp((f_[i] + g_[j] - s_ * sqdist(&x_[i * d_], &y_[j * d_], d_)) / eps_);
}

std::vector<double> ReferencePlan::apply(std::span<const float> v, std::size_t k) const {
  std::vector<double> out(n_ * k, 0.0);
  for (std::size_t i = 0; i < n_; ++i)
    for (std::size_t j = 0; j < m_; ++j)
      for (std::size_t c = 0; c < k; ++c) out[i * k + c] += p_[i * m_ + j] * v[j * k + c];
  return out;
}

std::vector<double> ReferencePlan::apply_transpose(std::span<const float> u, std::size_t k) const {
  std::vector<double> out(m_ * k, 0.0);
  for (std::size_t i = 0; i < n_; ++i)
    for (std::size_t j = 0; j < m_; ++j)
      for (std::size_t c = 0; c < k; ++c) out[j * k + c] += p_[i * m_ + j] * u[i * k + c];
  return out;
}

std::vector<double> ReferencePlan::row_marginal() const {
  std::vector<double> r(n_, 0.0);
  for (std::size_t i = 0; i < n_; ++i)
    for (std::size_t j = 0; j < m_; ++j) r[i] += p_[i * m_ + j];
  return r;
}

std::vector<double> ReferencePlan::column_marginal() const {
  std::vector<double> c(m_, 0.0);
  for (std::size_t i = 0; i < n_; ++i)
    for (std::size_t j = 0; j < m_; ++j) c[j] += p_[i * m_ + j];
  return c;
}

std::vector<double> ReferencePlan::barycentric(Side from) const {
  const bool src = from == Side::kSource;
  const std::size_t rows = src ? n_ : m_;
  std::vector<double> out(rows * d_, 0.0), mass(rows, 0.0);
  for (std::size_t i = 0; i < n_; ++i)
    for (std::size_t j = 0; j < m_; ++j) {
      const double p = p_[i * m_ + j];
      const std::size_t row = src ? i : j;
      const double* other = src ? &y_[j * d_] : &x_[i * d_];
      mass[row] += p;
      for (std::size_t c = 0; c < d_; ++c) out[row * d_ + c] += p * other[c];
    }
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < d_; ++c) out[r * d_ + c] /= mass[r];
  return out;
}

std::vector<double> ReferencePlan::gradient(Side wrt) const {
  const bool src = wrt == Side::kSource;
  const std::size_t rows = src ? n_ : m_;
  std::vector<double> out(rows * d_, 0.0);
  for (std::size_t i = 0; i < n_; ++i)
    for (std::size_t j = 0; j < m_; ++j) {
      const double p = p_[i * m_ + j];
      const std::size_t row = src ? i : j;
      const double* self = src ? &x_[i * d_] : &y_[j * d_];
      const double* other = src ? &y_[j * d_] : &x_[i * d_];
      for (std::size_t c = 0; c < d_; ++c) out[row * d_ + c] += 2 * s_ * p * (self[c] - other[c]);
    }
  return out;
}

double ReferencePlan::primal_cost() const {
  double cost = 0;
  for (std::size_t i = 0; i < n_; ++i)
    for (std::size_t j = 0; j < m_; ++j) cost += p_[i * m_ + j] * s_ * sqdist(&x_[i * d_], &y_[j * d_], d_);
  return cost;
}

std::vector<double> ReferencePlan::label_probabilities(Side labels_on, std::span<const std::int32_t> labels,
                                                       std::size_t classes) const {
  const bool src = labels_on == Side::kSource;
  const std::size_t rows = src ? m_ : n_;
  std::vector<double> out(rows * classes, 0.0);
  for (std::size_t i = 0; i < n_; ++i)
    for (std::size_t j = 0; j < m_; ++j) {
      const std::int32_t l = src ? labels[i] : labels[j];
      if (l < 0) continue;
      out[(src ? j : i) * classes + l] += p_[i * m_ + j];
    }
  for (std::size_t r = 0; r < rows; ++r) {
    double t = 0;
    for (std::size_t c = 0; c < classes; ++c) t += out[r * classes + c];
    if (t > 0)
      for (std::size_t c = 0; c < classes; ++c) out[r * classes + c] /= t;
  }
  return out;
}

std::vector<double> ReferencePlan::map_points(PointsView q, Side from) const {
  const bool src = from == Side::kSource;
  const std::size_t others = src ? m_ : n_;
  const std::vector<double>& pts = src ? y_ : x_;
  const std::vector<double>& w = src ? b_ : a_;
  const std::vector<double>& h = src ? g_ : f_;
  std::vector<double> out(q.n * d_, 0.0), z(others);
  std::vector<double> qd(q.data.begin(), q.data.end());
  for (std::size_t i = 0; i < q.n; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < others; ++j) {
      z[j] = log_or_minus_inf(w[j]) + (h[j] - s_ * sqdist(&qd[i * d_], &pts[j * d_], d_)) / eps_;
      mx = std::max(mx, z[j]);
    }
    double total = 0;
    for (std::size_t j = 0; j < others; ++j) {
      const double e = std::exp(z[j] - mx);
      total += e;
      for (std::size_t c = 0; c < d_; ++c) out[i * d_ + c] += e * pts[j * d_ + c];
    }
    for (std::size_t c = 0; c < d_; ++c) out[i * d_ + c] /= total;
  }
  return out;
}

}  // namespace flashot::test
