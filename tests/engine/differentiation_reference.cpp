// The fp64 dense derivative reference declared in tests/support/differentiation_reference.hpp. It lives beside the
// engine tests so the engine test executable's source glob compiles it.
#include "differentiation_reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

namespace flashot::test {

namespace {

double log_or_minus_inf(double w) { return w > 0 ? std::log(w) : -std::numeric_limits<double>::infinity(); }

double phi(double h, double rho) { return rho > 0 ? rho * (1 - std::exp(-h / rho)) : h; }

double total(const std::vector<double>& w) {
  double s = 0;
  for (double v : w) s += v;
  return s;
}

std::vector<double> cost_matrix(const DenseTransport& t) {
  std::vector<double> c(t.n * t.m);
  for (std::size_t i = 0; i < t.n; ++i)
    for (std::size_t j = 0; j < t.m; ++j) {
      double s = 0;
      for (std::size_t k = 0; k < t.d; ++k) s += (t.x[i * t.d + k] - t.y[j * t.d + k]) * (t.x[i * t.d + k] - t.y[j * t.d + k]);
      c[i * t.m + j] = t.cost_scale * s;
    }
  return c;
}

}  // namespace

DenseTransport dense_transport(PointsView x, PointsView y, std::span<const float> a, std::span<const float> b,
                               double epsilon, Cost cost, double rho_x, double rho_y) {
  DenseTransport t;
  t.n = x.n;
  t.m = y.n;
  t.d = x.d;
  t.x.assign(x.data.begin(), x.data.end());
  t.y.assign(y.data.begin(), y.data.end());
  t.a = a.empty() ? std::vector<double>(t.n, 1.0 / static_cast<double>(t.n)) : std::vector<double>(a.begin(), a.end());
  t.b = b.empty() ? std::vector<double>(t.m, 1.0 / static_cast<double>(t.m)) : std::vector<double>(b.begin(), b.end());
  // fp32 weights that each sum to 1 differ in their fp64 sums by ~1e-8, and a balanced problem with unequal masses
  // has no solution: rescale b to a's mass so the tight solve below can converge.
  if (rho_x == 0 && rho_y == 0) {
    const double ratio = total(t.a) / total(t.b);
    for (double& w : t.b) w *= ratio;
  }
  t.epsilon = epsilon;
  t.cost_scale = cost == Cost::kHalfSquaredEuclidean ? 0.5 : 1.0;
  t.rho_x = rho_x;
  t.rho_y = rho_y;
  return t;
}

DensePotentials dense_solve(const DenseTransport& t) {
  constexpr double kTolerance = 1e-12;
  constexpr int kBudget = 200000;
  const std::vector<double> c = cost_matrix(t);
  const double e = t.epsilon;
  const double lx = t.rho_x > 0 ? 1 / (1 + e / t.rho_x) : 1.0;
  const double ly = t.rho_y > 0 ? 1 / (1 + e / t.rho_y) : 1.0;
  DensePotentials p;
  p.f.assign(t.n, 0.0);
  p.g.assign(t.m, 0.0);
  std::vector<double> z(std::max(t.n, t.m));
  // softmin over the other side, damped: the alternating (Sinkhorn) update of one side.
  const auto update = [&](bool rows) {
    const std::size_t count = rows ? t.n : t.m, other = rows ? t.m : t.n;
    const std::vector<double>& w = rows ? t.b : t.a;
    const std::vector<double>& h = rows ? p.g : p.f;
    std::vector<double>& out = rows ? p.f : p.g;
    for (std::size_t i = 0; i < count; ++i) {
      double mx = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < other; ++j) {
        const double cij = rows ? c[i * t.m + j] : c[j * t.m + i];
        z[j] = log_or_minus_inf(w[j]) + (h[j] - cij) / e;
        mx = std::max(mx, z[j]);
      }
      double s = 0;
      for (std::size_t j = 0; j < other; ++j) s += std::exp(z[j] - mx);
      out[i] = (rows ? lx : ly) * (-e * (mx + std::log(s)));
    }
  };
  const double mass_a = total(t.a);
  // A self-transport (same points, weights and ρ on both sides) has f = g at its optimum; alternating updates then
  // converge very slowly, while the averaged symmetric update f ← ½(f + T(f)) converges fast (GeomLoss).
  const bool self = t.x == t.y && t.a == t.b && t.rho_x == t.rho_y;
  for (int it = 1; it <= kBudget; ++it) {
    if (self) {
      const std::vector<double> old = p.f;
      p.g = p.f;
      update(true);
      for (std::size_t i = 0; i < t.n; ++i) p.f[i] = 0.5 * (old[i] + p.f[i]);
      p.g = p.f;
    } else {
      update(true);
      update(false);
    }
    if (it % 10 != 0) continue;
    std::vector<double> row(t.n, 0.0), col(t.m, 0.0);
    for (std::size_t i = 0; i < t.n; ++i)
      for (std::size_t j = 0; j < t.m; ++j) {
        const double pij = t.a[i] * t.b[j] * std::exp((p.f[i] + p.g[j] - c[i * t.m + j]) / e);
        row[i] += pij;
        col[j] += pij;
      }
    double err = 0;
    for (std::size_t i = 0; i < t.n; ++i)
      err += std::abs(row[i] - (t.rho_x > 0 ? t.a[i] * std::exp(-p.f[i] / t.rho_x) : t.a[i]));
    for (std::size_t j = 0; j < t.m; ++j)
      err += std::abs(col[j] - (t.rho_y > 0 ? t.b[j] * std::exp(-p.g[j] / t.rho_y) : t.b[j]));
    if (err / mass_a <= kTolerance) {
      p.converged = true;
      break;
    }
  }
  return p;
}

DenseDerivatives::DenseDerivatives(const DenseTransport& t, std::vector<double> f, std::vector<double> g)
    : t_(t), f_(std::move(f)), g_(std::move(g)) {
  const std::vector<double> c = cost_matrix(t_);
  p_.resize(t_.n * t_.m);
  r_.assign(t_.n, 0.0);
  c_.assign(t_.m, 0.0);
  for (std::size_t i = 0; i < t_.n; ++i)
    for (std::size_t j = 0; j < t_.m; ++j) {
      const double pij = t_.a[i] * t_.b[j] * std::exp((f_[i] + g_[j] - c[i * t_.m + j]) / t_.epsilon);
      p_[i * t_.m + j] = pij;
      r_[i] += pij;
      c_[j] += pij;
    }
}

double DenseDerivatives::cost() const {
  double s = 0;
  for (std::size_t i = 0; i < t_.n; ++i) s += t_.a[i] * phi(f_[i], t_.rho_x);
  for (std::size_t j = 0; j < t_.m; ++j) s += t_.b[j] * phi(g_[j], t_.rho_y);
  return s - t_.epsilon * (total(r_) - total(t_.a) * total(t_.b));
}

std::vector<double> DenseDerivatives::gradient_x() const {
  std::vector<double> out(t_.n * t_.d, 0.0);
  for (std::size_t i = 0; i < t_.n; ++i)
    for (std::size_t j = 0; j < t_.m; ++j)
      for (std::size_t k = 0; k < t_.d; ++k)
        out[i * t_.d + k] += 2 * t_.cost_scale * p_[i * t_.m + j] * (t_.x[i * t_.d + k] - t_.y[j * t_.d + k]);
  return out;
}

std::vector<double> DenseDerivatives::gradient_y() const {
  std::vector<double> out(t_.m * t_.d, 0.0);
  for (std::size_t i = 0; i < t_.n; ++i)
    for (std::size_t j = 0; j < t_.m; ++j)
      for (std::size_t k = 0; k < t_.d; ++k)
        out[j * t_.d + k] += 2 * t_.cost_scale * p_[i * t_.m + j] * (t_.y[j * t_.d + k] - t_.x[i * t_.d + k]);
  return out;
}

std::vector<double> DenseDerivatives::gradient_a() const {
  std::vector<double> out(t_.n);
  const double mass_b = total(t_.b);
  const std::vector<double> c = cost_matrix(t_);
  for (std::size_t i = 0; i < t_.n; ++i) {
    double sum = 0;
    for (std::size_t j = 0; j < t_.m; ++j) sum += t_.b[j] * std::exp((f_[i] + g_[j] - c[i * t_.m + j]) / t_.epsilon);
    out[i] = phi(f_[i], t_.rho_x) - t_.epsilon * (sum - mass_b);
  }
  return out;
}

std::vector<double> DenseDerivatives::gradient_b() const {
  std::vector<double> out(t_.m);
  const double mass_a = total(t_.a);
  const std::vector<double> c = cost_matrix(t_);
  for (std::size_t j = 0; j < t_.m; ++j) {
    double sum = 0;
    for (std::size_t i = 0; i < t_.n; ++i) sum += t_.a[i] * std::exp((f_[i] + g_[j] - c[i * t_.m + j]) / t_.epsilon);
    out[j] = phi(g_[j], t_.rho_y) - t_.epsilon * (sum - mass_a);
  }
  return out;
}

std::vector<double> DenseDerivatives::r_matrix() const {
  const std::size_t n = t_.n, m = t_.m, d = t_.d, nd = n * d;
  std::vector<double> r((n + m) * nd, 0.0);
  const double s2 = 2 * t_.cost_scale;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j)
      for (std::size_t k = 0; k < d; ++k) {
        const double term = s2 * p_[i * m + j] * (t_.x[i * d + k] - t_.y[j * d + k]);
        r[i * nd + i * d + k] += term;        // ∂(Rv)_f,i / ∂v_ik
        r[(n + j) * nd + i * d + k] += term;  // ∂(Rv)_g,j / ∂v_ik
      }
  return r;
}

std::vector<double> DenseDerivatives::solve_k(const std::vector<double>& rhs, std::size_t columns) const {
  const std::size_t n = t_.n, m = t_.m, big = n + m;
  std::vector<double> k(big * big, 0.0);
  std::vector<bool> active(big, true);
  for (std::size_t i = 0; i < n; ++i) {
    k[i * big + i] = r_[i] + (t_.rho_x > 0 ? t_.epsilon / t_.rho_x * t_.a[i] * std::exp(-f_[i] / t_.rho_x) : 0.0);
    for (std::size_t j = 0; j < m; ++j) {
      k[i * big + n + j] = p_[i * m + j];
      k[(n + j) * big + i] = p_[i * m + j];
    }
  }
  for (std::size_t j = 0; j < m; ++j)
    k[(n + j) * big + n + j] = c_[j] + (t_.rho_y > 0 ? t_.epsilon / t_.rho_y * t_.b[j] * std::exp(-g_[j] / t_.rho_y) : 0.0);
  // Rows without mass have no equation: pin their unknown to 0 (their right-hand side is 0 too).
  for (std::size_t i = 0; i < big; ++i)
    if (!(k[i * big + i] > 0)) {
      active[i] = false;
      k[i * big + i] = 1;
    }
  // Balanced on both sides: K u = 0 for u = (1, −1) on the active entries; adding u uᵀ makes K invertible without
  // changing the solution of a consistent system (its right-hand side is orthogonal to u) except for fixing uᵀδ = 0.
  if (t_.rho_x == 0 && t_.rho_y == 0) {
    std::vector<double> u(big, 0.0);
    for (std::size_t i = 0; i < big; ++i)
      if (active[i]) u[i] = i < n ? 1.0 : -1.0;
    for (std::size_t i = 0; i < big; ++i)
      for (std::size_t j = 0; j < big; ++j) k[i * big + j] += u[i] * u[j];
  }
  std::vector<double> sol = rhs;  // (big × columns)
  for (std::size_t col = 0; col < big; ++col) {
    std::size_t piv = col;
    for (std::size_t i = col + 1; i < big; ++i)
      if (std::abs(k[i * big + col]) > std::abs(k[piv * big + col])) piv = i;
    if (k[piv * big + col] == 0) throw std::runtime_error("dense K is singular");
    if (piv != col) {
      for (std::size_t j = 0; j < big; ++j) std::swap(k[col * big + j], k[piv * big + j]);
      for (std::size_t j = 0; j < columns; ++j) std::swap(sol[col * columns + j], sol[piv * columns + j]);
    }
    for (std::size_t i = col + 1; i < big; ++i) {
      const double factor = k[i * big + col] / k[col * big + col];
      if (factor == 0) continue;
      for (std::size_t j = col; j < big; ++j) k[i * big + j] -= factor * k[col * big + j];
      for (std::size_t j = 0; j < columns; ++j) sol[i * columns + j] -= factor * sol[col * columns + j];
    }
  }
  for (std::size_t col = big; col-- > 0;) {
    for (std::size_t j = 0; j < columns; ++j) {
      double v = sol[col * columns + j];
      for (std::size_t q = col + 1; q < big; ++q) v -= k[col * big + q] * sol[q * columns + j];
      sol[col * columns + j] = v / k[col * big + col];
    }
  }
  return sol;
}

std::vector<double> DenseDerivatives::potential_jacobian() const { return solve_k(r_matrix(), t_.n * t_.d); }

std::vector<double> DenseDerivatives::hessian_x() const {
  const std::size_t n = t_.n, m = t_.m, d = t_.d, nd = n * d;
  const std::vector<double> r = r_matrix();
  const std::vector<double> z = solve_k(r, nd);
  std::vector<double> h(nd * nd, 0.0);
  // (1/ε)·Rᵀ Z
  for (std::size_t q = 0; q < n + m; ++q)
    for (std::size_t u = 0; u < nd; ++u) {
      const double ru = r[q * nd + u];
      if (ru == 0) continue;
      for (std::size_t v = 0; v < nd; ++v) h[u * nd + v] += ru * z[q * nd + v] / t_.epsilon;
    }
  // E: block diagonal, 2s·r_i·I − (4s²/ε)·Σ_j P_ij (x_i − y_j)(x_i − y_j)ᵀ
  const double s = t_.cost_scale;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < d; ++k) h[(i * d + k) * nd + i * d + k] += 2 * s * r_[i];
    for (std::size_t j = 0; j < m; ++j)
      for (std::size_t k = 0; k < d; ++k)
        for (std::size_t l = 0; l < d; ++l)
          h[(i * d + k) * nd + i * d + l] -= 4 * s * s / t_.epsilon * p_[i * m + j] *
                                             (t_.x[i * d + k] - t_.y[j * d + k]) * (t_.x[i * d + l] - t_.y[j * d + l]);
  }
  return h;
}

std::vector<double> dense_times(const std::vector<double>& matrix, std::size_t rows, std::size_t cols,
                                std::span<const float> v) {
  std::vector<double> out(rows, 0.0);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) out[i] += matrix[i * cols + j] * v[j];
  return out;
}

}  // namespace flashot::test
