// The linearized fused GW cost's algebra (docs/gromov-wasserstein.md §2–§3), apart from any backend.
#include "gromov_linear.hpp"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace flashot::detail {

namespace {

/// Index of y_a·y_b (a ≤ b) among the q(q+1)/2 products, in row order.
std::size_t pair_index(std::size_t a, std::size_t b, std::size_t q) { return a * q - a * (a - 1) / 2 + (b - a); }

template <typename T>
PlanMoments reduce(std::span<const double> x, std::size_t n, std::size_t p, std::span<const T> rh,
                   std::size_t stride, std::size_t q) {
  PlanMoments mo;
  mo.p = p;
  mo.q = q;
  mo.xbar.assign(p, 0);
  mo.ybar.assign(q, 0);
  mo.cross.assign(p * q, 0);
  mo.w.assign(p, 0);
  mo.z.assign(q, 0);
  mo.sx.assign(p * p, 0);
  mo.x3.assign(p, 0);
  mo.sy.assign(q * q, 0);
  mo.y3.assign(q, 0);
  const std::size_t c_y = 1, c_ny = 1 + q, c_nyy = 2 + q, c_ny2 = 2 + 2 * q, c_yy = 3 + 2 * q;
  for (std::size_t i = 0; i < n; ++i) {
    const double* xi = x.data() + i * p;
    const T* h = rh.data() + i * stride;
    double nx = 0;
    for (std::size_t a = 0; a < p; ++a) nx += xi[a] * xi[a];
    const double r = h[0];
    mo.mass += r;
    mo.r_nx += r * nx;
    mo.x4 += r * nx * nx;
    mo.c_ny += h[c_ny];
    mo.k += nx * h[c_ny];
    mo.y4 += h[c_ny2];
    for (std::size_t a = 0; a < p; ++a) {
      mo.xbar[a] += r * xi[a];
      mo.w[a] += xi[a] * h[c_ny];
      mo.x3[a] += r * nx * xi[a];
      for (std::size_t b = 0; b < p; ++b) mo.sx[a * p + b] += r * xi[a] * xi[b];
      for (std::size_t b = 0; b < q; ++b) mo.cross[a * q + b] += xi[a] * h[c_y + b];
    }
    for (std::size_t b = 0; b < q; ++b) {
      mo.ybar[b] += h[c_y + b];
      mo.z[b] += nx * h[c_y + b];
      mo.y3[b] += h[c_nyy + b];
      for (std::size_t e = b; e < q; ++e) mo.sy[b * q + e] += h[c_yy + pair_index(b, e, q)];
    }
  }
  for (std::size_t b = 0; b < q; ++b)
    for (std::size_t e = 0; e < b; ++e) mo.sy[b * q + e] = mo.sy[e * q + b];
  return mo;
}

double dot(const double* a, const double* b, std::size_t d) {
  double s = 0;
  for (std::size_t c = 0; c < d; ++c) s += a[c] * b[c];
  return s;
}

/// Σ_ik r_i r_k ‖x_i − x_k‖⁴ from the moments of r: 2μ·Σr‖x‖⁴ + 4‖Σ r x xᵀ‖_F² − 8 x̄·Σ r‖x‖²x + 2(Σ r‖x‖²)².
double self_quartic(double mass, const std::vector<double>& s, const std::vector<double>& m1,
                    const std::vector<double>& m3, double mn, double m4) {
  double frob = 0;
  for (double v : s) frob += v * v;
  return 2 * mass * m4 + 4 * frob - 8 * dot(m1.data(), m3.data(), m1.size()) + 2 * mn * mn;
}

/// Σ_k r_k ‖x_i − x_k‖⁴ = μ‖x_i‖⁴ + 4x_iᵀ S x_i + Σr‖x‖⁴ − 4‖x_i‖²(x_i·x̄) + 2‖x_i‖²Σr‖x‖² − 4 x_i·Σr‖x‖²x.
double quartic(const double* xi, std::size_t p, double mass, const std::vector<double>& s,
               const std::vector<double>& m1, const std::vector<double>& m3, double mn, double m4) {
  const double nx = dot(xi, xi, p);
  double quad = 0;
  for (std::size_t a = 0; a < p; ++a)
    for (std::size_t b = 0; b < p; ++b) quad += xi[a] * s[a * p + b] * xi[b];
  return mass * nx * nx + 4 * quad + m4 - 4 * nx * dot(xi, m1.data(), p) + 2 * nx * mn - 4 * dot(xi, m3.data(), p);
}

}  // namespace

/// Solves `k`×`k` G γ = rhs in place (Gaussian elimination with partial pivoting); false when singular.
bool solve_small(std::vector<double>& g, std::vector<double>& rhs, std::size_t k) {
  for (std::size_t c = 0; c < k; ++c) {
    std::size_t piv = c;
    for (std::size_t r = c + 1; r < k; ++r)
      if (std::abs(g[r * k + c]) > std::abs(g[piv * k + c])) piv = r;
    if (!(std::abs(g[piv * k + c]) > 0)) return false;
    if (piv != c) {
      for (std::size_t j = 0; j < k; ++j) std::swap(g[c * k + j], g[piv * k + j]);
      std::swap(rhs[c], rhs[piv]);
    }
    for (std::size_t r = c + 1; r < k; ++r) {
      const double f = g[r * k + c] / g[c * k + c];
      for (std::size_t j = c; j < k; ++j) g[r * k + j] -= f * g[c * k + j];
      rhs[r] -= f * rhs[c];
    }
  }
  for (std::size_t c = k; c-- > 0;) {
    for (std::size_t j = c + 1; j < k; ++j) rhs[c] -= g[c * k + j] * rhs[j];
    rhs[c] /= g[c * k + c];
  }
  return true;
}

std::size_t moment_columns(std::size_t q) { return 2 * q + 3 + q * (q + 1) / 2; }

std::vector<double> moment_values(std::span<const double> y, std::size_t m, std::size_t q) {
  const std::size_t k = moment_columns(q);
  std::vector<double> h(m * k);
  for (std::size_t j = 0; j < m; ++j) {
    const double* yj = y.data() + j * q;
    double* row = h.data() + j * k;
    const double ny = dot(yj, yj, q);
    row[0] = 1;
    for (std::size_t b = 0; b < q; ++b) {
      row[1 + b] = yj[b];
      row[2 + q + b] = ny * yj[b];
      for (std::size_t e = b; e < q; ++e) row[3 + 2 * q + pair_index(b, e, q)] = yj[b] * yj[e];
    }
    row[1 + q] = ny;
    row[2 + 2 * q] = ny * ny;
  }
  return h;
}

PlanMoments reduce_moments(std::span<const double> x, std::size_t n, std::size_t p, std::span<const float> r_h,
                           std::size_t stride, std::size_t q) {
  return reduce<float>(x, n, p, r_h, stride, q);
}

PlanMoments reduce_moments(std::span<const double> x, std::size_t n, std::size_t p, std::span<const double> r_h,
                           std::size_t stride, std::size_t q) {
  return reduce<double>(x, n, p, r_h, stride, q);
}

std::vector<double> flatten_moments(const PlanMoments& mo) {
  std::vector<double> v{mo.mass};
  const auto add = [&v](const std::vector<double>& part) { v.insert(v.end(), part.begin(), part.end()); };
  add(mo.xbar);
  add(mo.ybar);
  add(mo.cross);
  v.push_back(mo.c_ny);
  v.push_back(mo.r_nx);
  add(mo.w);
  add(mo.z);
  v.push_back(mo.k);
  add(mo.sx);
  add(mo.x3);
  v.push_back(mo.x4);
  add(mo.sy);
  add(mo.y3);
  v.push_back(mo.y4);
  return v;
}

PlanMoments unflatten_moments(std::span<const double> v, std::size_t p, std::size_t q) {
  const std::size_t size = 1 + p + q + p * q + 2 + p + q + 1 + p * p + p + 1 + q * q + q + 1;
  if (v.size() != size)
    throw std::invalid_argument("unflatten_moments: expected " + std::to_string(size) + " numbers for p = " +
                                std::to_string(p) + ", q = " + std::to_string(q) + " (got " +
                                std::to_string(v.size()) + ")");
  PlanMoments mo;
  mo.p = p;
  mo.q = q;
  std::size_t at = 0;
  const auto take = [&](std::size_t count) {
    std::vector<double> part(v.begin() + static_cast<std::ptrdiff_t>(at),
                             v.begin() + static_cast<std::ptrdiff_t>(at + count));
    at += count;
    return part;
  };
  mo.mass = v[at++];
  mo.xbar = take(p);
  mo.ybar = take(q);
  mo.cross = take(p * q);
  mo.c_ny = v[at++];
  mo.r_nx = v[at++];
  mo.w = take(p);
  mo.z = take(q);
  mo.k = v[at++];
  mo.sx = take(p * p);
  mo.x3 = take(p);
  mo.x4 = v[at++];
  mo.sy = take(q * q);
  mo.y3 = take(q);
  mo.y4 = v[at++];
  return mo;
}

void MomentAnderson::reset() {
  f_.clear();
  g_.clear();
  norms_.clear();
  extrapolated_ = false;
}

std::vector<double> MomentAnderson::step(std::span<const double> m, std::span<const double> g) {
  const std::size_t d = g.size();
  std::vector<double> f(d);
  for (std::size_t c = 0; c < d; ++c) f[c] = g[c] - m[c];
  const double norm = std::sqrt(dot(f.data(), f.data(), d));
  const bool after_mix = extrapolated_;
  extrapolated_ = false;
  if (after_mix && !norms_.empty() && !(norm < norms_.back())) reset();  // the mix did not bring the residual down
  f_.push_back(f);
  g_.emplace_back(g.begin(), g.end());
  norms_.push_back(norm);
  while (f_.size() > static_cast<std::size_t>(memory_) + 1) {
    f_.erase(f_.begin());
    g_.erase(g_.begin());
    norms_.erase(norms_.begin());
  }
  const std::size_t k = f_.size() - 1;  // differences held
  bool contracting = k >= 2;
  for (std::size_t j = 0; j + 1 < norms_.size(); ++j) contracting &= norms_[j + 1] < norms_[j];
  if (memory_ < 1 || !contracting) return {g.begin(), g.end()};
  // ΔF_j = f_{j+1} − f_j; normal equations (ΔFᵀΔF + λI)γ = ΔFᵀ f_t, λ a 10⁻¹⁰ share of the trace (the residuals of
  // an outer loop near its fixed point are nearly collinear).
  std::vector<std::vector<double>> df(k, std::vector<double>(d));
  for (std::size_t j = 0; j < k; ++j)
    for (std::size_t c = 0; c < d; ++c) df[j][c] = f_[j + 1][c] - f_[j][c];
  std::vector<double> a(k * k), rhs(k);
  double trace = 0;
  for (std::size_t i = 0; i < k; ++i) {
    for (std::size_t j = 0; j < k; ++j) a[i * k + j] = dot(df[i].data(), df[j].data(), d);
    rhs[i] = dot(df[i].data(), f.data(), d);
    trace += a[i * k + i];
  }
  for (std::size_t i = 0; i < k; ++i) a[i * k + i] += 1e-10 * trace + 1e-300;
  std::vector<double> gamma = rhs;
  const bool ok = trace > 0 && std::isfinite(trace) && solve_small(a, gamma, k);
  std::vector<double> next(g.begin(), g.end());
  double step2 = 0, f2 = 0;
  for (std::size_t c = 0; c < d && ok; ++c) {
    double mix = 0;
    for (std::size_t j = 0; j < k; ++j) mix += gamma[j] * (g_[j + 1][c] - g_[j][c]);
    next[c] -= mix;
    step2 += mix * mix;
    f2 += f[c] * f[c];
  }
  if (!ok || !std::isfinite(step2) || step2 > kMaxStep * kMaxStep * f2) {
    // Not a usable extrapolation: the plain image, and the memory restarts from this pair.
    f_.erase(f_.begin(), f_.end() - 1);
    g_.erase(g_.begin(), g_.end() - 1);
    norms_.erase(norms_.begin(), norms_.end() - 1);
    return {g.begin(), g.end()};
  }
  extrapolated_ = true;
  return next;
}

double gw_energy(const PlanMoments& mo) {
  // E = Σ_ik r_i r_k D^x_ik² + Σ_jl c_j c_l D^y_jl² − 2 Σ_ijkl D^x_ik D^y_jl P_ij P_kl, the last from the nine terms
  // of (‖x_i‖² − 2x_i·x_k + ‖x_k‖²)(‖y_j‖² − 2y_j·y_l + ‖y_l‖²): 2μK − 4ȳ·z − 4x̄·w + 2⟨r,‖x‖²⟩⟨c,‖y‖²⟩ + 4‖M‖².
  const double ex = self_quartic(mo.mass, mo.sx, mo.xbar, mo.x3, mo.r_nx, mo.x4);
  const double ey = self_quartic(mo.mass, mo.sy, mo.ybar, mo.y3, mo.c_ny, mo.y4);
  double frob = 0;
  for (double v : mo.cross) frob += v * v;
  const double xy = 2 * mo.mass * mo.k - 4 * dot(mo.ybar.data(), mo.z.data(), mo.q) -
                    4 * dot(mo.xbar.data(), mo.w.data(), mo.p) + 2 * mo.r_nx * mo.c_ny + 4 * frob;
  return ex + ey - 2 * xy;
}

GwLinearization linearize_gw(std::span<const double> x, std::size_t n, std::span<const double> y, std::size_t m,
                             const PlanMoments& mo) {
  const std::size_t p = mo.p, q = mo.q;
  GwLinearization L;
  L.width = p + 1;
  L.phi.resize(n * L.width);
  L.psi.resize(m * L.width);
  L.sep_x.resize(n);
  L.sep_y.resize(m);
  // Σ_kl D^x_ik D^y_jl P_kl = ⟨φ_i, ψ_j⟩ + ξ_i + η_j with
  //   ξ_i = ‖x_i‖²⟨c,‖y‖²⟩ − 2x_i·w,   η_j = ‖y_j‖²⟨r,‖x‖²⟩ − 2y_j·z + K,
  // and ∇E_ij = 2[Σ_k D^x_ik² r_k + Σ_l D^y_jl² c_l] − 4Σ_kl D^x_ik D^y_jl P_kl.
  for (std::size_t i = 0; i < n; ++i) {
    const double* xi = x.data() + i * p;
    const double nx = dot(xi, xi, p);
    double* phi = L.phi.data() + i * L.width;
    phi[0] = nx;
    for (std::size_t a = 0; a < p; ++a) phi[1 + a] = xi[a];
    const double xi_term = nx * mo.c_ny - 2 * dot(xi, mo.w.data(), p);
    L.sep_x[i] = 2 * quartic(xi, p, mo.mass, mo.sx, mo.xbar, mo.x3, mo.r_nx, mo.x4) - 4 * xi_term;
  }
  for (std::size_t j = 0; j < m; ++j) {
    const double* yj = y.data() + j * q;
    const double ny = dot(yj, yj, q);
    double* psi = L.psi.data() + j * L.width;
    psi[0] = mo.mass * ny - 2 * dot(mo.ybar.data(), yj, q);
    for (std::size_t a = 0; a < p; ++a) psi[1 + a] = 4 * dot(mo.cross.data() + a * q, yj, q) - 2 * mo.xbar[a] * ny;
    const double eta = ny * mo.r_nx - 2 * dot(yj, mo.z.data(), q) + mo.k;
    L.sep_y[j] = 2 * quartic(yj, q, mo.mass, mo.sy, mo.ybar, mo.y3, mo.c_ny, mo.y4) - 4 * eta;
  }
  return L;
}

}  // namespace flashot::detail
