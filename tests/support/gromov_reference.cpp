#include "gromov_reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace flashot::test {

namespace {

std::vector<double> squared_distances(std::span<const float> x, std::size_t n, std::size_t d) {
  std::vector<double> D(n * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < n; ++k) {
      double s = 0;
      for (std::size_t c = 0; c < d; ++c) {
        const double t = static_cast<double>(x[i * d + c]) - x[k * d + c];
        s += t * t;
      }
      D[i * n + k] = s;
    }
  return D;
}

}  // namespace

std::vector<double> dense_sinkhorn(std::span<const double> cost, std::span<const float> a, std::span<const float> b,
                                   double eps, double rho_x, double rho_y, std::vector<double>* f_io,
                                   std::vector<double>* g_io) {
  const std::size_t n = a.size(), m = b.size();
  const double lx = rho_x > 0 ? rho_x / (rho_x + eps) : 1.0;
  const double ly = rho_y > 0 ? rho_y / (rho_y + eps) : 1.0;
  std::vector<double> f(n, 0.0), g(m, 0.0);
  if (f_io && f_io->size() == n) f = *f_io;
  if (g_io && g_io->size() == m) g = *g_io;
  // Scaling form around the current potentials: K_ij = a_i b_j exp((f_i + g_j − C_ij)/ε), re-absorbed into f, g
  // whenever the scalings leave [e^−30, e^30] (stabilized Sinkhorn, Schmitzer 2019), so every step is a plain
  // matrix–vector product in fp64 and no entry under- or overflows in the range these tests use.
  std::vector<double> K(n * m), u(n, 1.0), v(m, 1.0);
  const auto absorb = [&] {
    for (std::size_t i = 0; i < n; ++i) f[i] += eps * std::log(u[i]);
    for (std::size_t j = 0; j < m; ++j) g[j] += eps * std::log(v[j]);
    std::fill(u.begin(), u.end(), 1.0);
    std::fill(v.begin(), v.end(), 1.0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < m; ++j)
        K[i * m + j] = std::exp((f[i] + g[j] - cost[i * m + j]) / eps);
  };
  // The balanced updates are u = 1/(K v) with weights folded into the products: row i of the plan is
  // a_i b_j K_ij u_i v_j, so (P1)_i = a_i u_i Σ_j b_j K_ij v_j must equal a_i (balanced) or a_i e^{−f_i/ρ} (KL).
  absorb();
  for (int it = 0; it < 100000; ++it) {
    double moved = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double s = 0;
      for (std::size_t j = 0; j < m; ++j) s += b[j] * K[i * m + j] * v[j];
      // Unbalanced: f_new = λ·softmin ⇒ u_new = (1/s)^λ · e^{(λ−1) f_i/ε}.
      const double un = lx == 1.0 ? 1.0 / s : std::pow(s, -lx) * std::exp((lx - 1.0) * f[i] / eps);
      moved = std::max(moved, std::abs(std::log(un / u[i])));
      u[i] = un;
    }
    for (std::size_t j = 0; j < m; ++j) {
      double s = 0;
      for (std::size_t i = 0; i < n; ++i) s += a[i] * K[i * m + j] * u[i];
      const double vn = ly == 1.0 ? 1.0 / s : std::pow(s, -ly) * std::exp((ly - 1.0) * g[j] / eps);
      moved = std::max(moved, std::abs(std::log(vn / v[j])));
      v[j] = vn;
    }
    if (moved <= 1e-9) break;  // potentials move by < 1e-9·ε
    bool out_of_range = false;
    for (double w : u) out_of_range = out_of_range || w > 1e30 || w < 1e-30;
    for (double w : v) out_of_range = out_of_range || w > 1e30 || w < 1e-30;
    if (out_of_range) absorb();
  }
  absorb();
  std::vector<double> P(n * m);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) P[i * m + j] = static_cast<double>(a[i]) * b[j] * K[i * m + j];
  if (f_io) *f_io = f;
  if (g_io) *g_io = g;
  return P;
}

std::vector<double> dense_gw_gradient(std::span<const float> x, std::size_t n, std::size_t p, std::span<const float> y,
                                      std::size_t m, std::size_t q, std::span<const double> P) {
  const std::vector<double> Dx = squared_distances(x, n, p), Dy = squared_distances(y, m, q);
  std::vector<double> r(n, 0.0), c(m, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      r[i] += P[i * m + j];
      c[j] += P[i * m + j];
    }
  // T = D_x P (n×m), then D_x P D_y.
  std::vector<double> T(n * m, 0.0), G(n * m, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t l = 0; l < m; ++l) T[i * m + l] += Dx[i * n + k] * P[k * m + l];
  std::vector<double> sx(n, 0.0), sy(m, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < n; ++k) sx[i] += Dx[i * n + k] * Dx[i * n + k] * r[k];
  for (std::size_t j = 0; j < m; ++j)
    for (std::size_t l = 0; l < m; ++l) sy[j] += Dy[j * m + l] * Dy[j * m + l] * c[l];
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      double cross = 0;
      for (std::size_t l = 0; l < m; ++l) cross += T[i * m + l] * Dy[j * m + l];
      G[i * m + j] = 2 * (sx[i] + sy[j]) - 4 * cross;
    }
  return G;
}

double dense_gw_energy(std::span<const float> x, std::size_t n, std::size_t p, std::span<const float> y,
                       std::size_t m, std::size_t q, std::span<const double> P) {
  const std::vector<double> Dx = squared_distances(x, n, p), Dy = squared_distances(y, m, q);
  double e = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      if (P[i * m + j] == 0) continue;
      double s = 0;
      for (std::size_t k = 0; k < n; ++k)
        for (std::size_t l = 0; l < m; ++l) {
          const double t = Dx[i * n + k] - Dy[j * m + l];
          s += t * t * P[k * m + l];
        }
      e += s * P[i * m + j];
    }
  return e;
}

DenseGromovResult dense_fused_gw(std::span<const float> x, std::size_t n, std::size_t p, std::span<const float> y,
                                 std::size_t m, std::size_t q, std::span<const float> u, std::span<const float> v,
                                 std::size_t e, std::span<const float> a, std::span<const float> b,
                                 const DenseGromovOptions& o) {
  std::vector<double> feat(n * m, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      double s = 0;
      for (std::size_t c = 0; c < e; ++c) {
        const double t = static_cast<double>(u[i * e + c]) - v[j * e + c];
        s += t * t;
      }
      feat[i * m + j] = s;
    }
  DenseGromovResult r;
  r.plan.resize(n * m);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) r.plan[i * m + j] = static_cast<double>(a[i]) * b[j];
  const auto evaluate = [&](const std::vector<double>& P) {
    double fc = 0;
    for (std::size_t t = 0; t < n * m; ++t) fc += P[t] * feat[t];
    r.feature_cost = fc;
    r.gw_cost = o.alpha > 0 ? dense_gw_energy(x, n, p, y, m, q, P) : 0.0;
    return (1 - o.alpha) * r.feature_cost + o.alpha * r.gw_cost;
  };
  double previous = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> f, g;  // carried between outer iterations: a faster start to the same unique fixed point
  for (int t = 1; t <= o.max_outer; ++t) {
    const std::vector<double> G = dense_gw_gradient(x, n, p, y, m, q, r.plan);
    std::vector<double> cost(n * m);
    for (std::size_t k = 0; k < n * m; ++k) cost[k] = (1 - o.alpha) * feat[k] + o.alpha * G[k];
    r.plan = dense_sinkhorn(cost, a, b, o.epsilon, o.rho_x, o.rho_y, &f, &g);
    r.objective = evaluate(r.plan);
    r.outer_iterations = t;
    if (std::isfinite(previous) && std::abs(r.objective - previous) <= o.outer_tolerance * std::abs(r.objective))
      break;
    previous = r.objective;
  }
  return r;
}

}  // namespace flashot::test
