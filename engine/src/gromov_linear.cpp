// The linearized fused GW cost's algebra (docs/gromov-wasserstein.md §2–§3), apart from any backend.
#include "gromov_linear.hpp"

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
