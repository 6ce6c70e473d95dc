// Derivatives of OT_ε from solved potentials (docs/differentiation.md), every plan product a streaming Backend::apply.
//
// With F(f, g; x) the dual objective (differentiation.hpp), K = −ε·∂²F/∂(f,g)² and R v = ε·∂²F/∂(f,g)∂x · v:
//   K = [[D_f, P], [Pᵀ, D_g]],  D_f = r + (ε/ρ_x)·a⊙e^{−f/ρ_x},  D_g = c + (ε/ρ_y)·b⊙e^{−g/ρ_y}   (balanced: D = r, c)
//   (R v)_f,i = 2s·⟨r_i x_i − (PY)_i, v_i⟩,   (R v)_g,j = 2s·Σ_i P_ij ⟨x_i − y_j, v_i⟩
// The implicit function theorem on ∂F/∂(f,g) = 0 gives the tangent (δf, δg) = K⁺ R v, and
//   ∇²_x OT · v = E v + (1/ε)·Rᵀ(δf, δg),
//   (E v)_i  = 2s·r_i v_i − (4s²/ε)·Σ_j P_ij (x_i − y_j)⟨x_i − y_j, v_i⟩,
//   (Rᵀμ)_i  = 2s·[μf_i (r_i x_i − (PY)_i) + Σ_j P_ij μg_j (x_i − y_j)].
// K is solved through its Schur complement on g, S = D_g − Pᵀ D_f⁻¹ P (PSD; balanced: null vector 1), by
// Jacobi-preconditioned CG.
#include "flashot/differentiation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "backend.hpp"
#include "point_order.hpp"
#include "sinkhorn.hpp"
#include "validation.hpp"

namespace flashot {

namespace {

using detail::show;
using detail::validate_points;

/// Weights as given or uniform, validated (validation.hpp).
std::vector<float> checked_weights(std::span<const float> w, std::size_t n, const std::string& name) {
  detail::validate_weights(w, n, name, name == "a" ? "x" : "y");
  return detail::weights_or_uniform(w, n);
}

void validate_cg(const CgOptions& o) {
  if (!(o.tolerance > 0 && o.tolerance < 1))
    throw std::invalid_argument("cg.tolerance must be in (0, 1) (got " + show(o.tolerance) + ")");
  if (o.max_iterations < 1)
    throw std::invalid_argument("cg.max_iterations must be ≥ 1 (got " + std::to_string(o.max_iterations) + ")");
}

void validate_vector(std::span<const float> v, std::size_t size, const std::string& name, const std::string& shape) {
  if (v.size() != size)
    throw std::invalid_argument(name + " must hold " + shape + " = " + std::to_string(size) + " values (got " +
                                std::to_string(v.size()) + ")");
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      throw std::invalid_argument(name + "[" + std::to_string(i) + "] must be finite (got " + show(v[i]) + ")");
}

double dot(const std::vector<double>& u, const std::vector<double>& v) {
  double s = 0;
  for (std::size_t i = 0; i < u.size(); ++i) s += u[i] * v[i];
  return s;
}

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

}  // namespace

struct TransportDerivatives::Impl {
  std::size_t n = 0, m = 0, d = 0;
  std::vector<float> x, y;  // centred copies (the cost is translation-invariant; small coordinates keep fp32 dots exact)
  std::vector<float> a, b;
  double mass_a = 0, mass_b = 0;
  std::vector<float> f, g;
  double eps = 0, s = 1, rho_x = 0, rho_y = 0;
  detail::PlanParams plan;
  std::unique_ptr<detail::Backend> backend;
  // Quantities of the solution that every derivative reads, computed once.
  std::vector<double> r, c;         // (n) P·1, (m) Pᵀ·1
  std::vector<float> py, ptx;       // (n×d) P·Y, (m×d) Pᵀ·X
  std::vector<double> inv_df, inv_dg;  // 1/D_f, 1/D_g (0 where a row or column carries no mass)
  double plan_mass = 0;

  std::vector<float> apply(Side rows, std::span<const float> v, std::size_t k) const {
    std::vector<float> out((rows == Side::kSource ? n : m) * k);
    backend->apply(plan, rows, v, k, false, out);
    return out;
  }

  /// (n) P·z for z (m), and (m) Pᵀ·z for z (n).
  std::vector<double> apply_vector(Side rows, const std::vector<double>& z) const {
    const std::vector<float> out = apply(rows, to_float(z), 1);
    return {out.begin(), out.end()};
  }

  void prepare() {
    const auto with_ones = [this](const std::vector<float>& pts, std::size_t count) {
      std::vector<float> v(count * (d + 1));
      for (std::size_t i = 0; i < count; ++i) {
        std::copy_n(pts.begin() + static_cast<std::ptrdiff_t>(i * d), d, v.begin() + static_cast<std::ptrdiff_t>(i * (d + 1)));
        v[i * (d + 1) + d] = 1.0f;
      }
      return v;
    };
    const std::vector<float> rows = apply(Side::kSource, with_ones(y, m), d + 1);
    const std::vector<float> cols = apply(Side::kTarget, with_ones(x, n), d + 1);
    r.resize(n);
    c.resize(m);
    py.resize(n * d);
    ptx.resize(m * d);
    for (std::size_t i = 0; i < n; ++i) {
      std::copy_n(rows.begin() + static_cast<std::ptrdiff_t>(i * (d + 1)), d, py.begin() + static_cast<std::ptrdiff_t>(i * d));
      r[i] = rows[i * (d + 1) + d];
    }
    for (std::size_t j = 0; j < m; ++j) {
      std::copy_n(cols.begin() + static_cast<std::ptrdiff_t>(j * (d + 1)), d, ptx.begin() + static_cast<std::ptrdiff_t>(j * d));
      c[j] = cols[j * (d + 1) + d];
    }
    plan_mass = 0;
    for (double v : r) plan_mass += v;
    // A row with no plan mass (a_i = 0) has no equation in K: its δf is 0 and it contributes nothing.
    const auto inverse_diagonal = [this](const std::vector<double>& marg, const std::vector<float>& w,
                                         const std::vector<float>& h, double rho) {
      std::vector<double> inv(marg.size(), 0.0);
      double largest = 0;
      for (double v : marg) largest = std::max(largest, v);
      const double floor = largest * 1e-30;
      for (std::size_t i = 0; i < marg.size(); ++i) {
        double diag = marg[i];
        if (rho > 0) diag += (eps / rho) * w[i] * std::exp(-static_cast<double>(h[i]) / rho);
        if (diag > floor) inv[i] = 1.0 / diag;
      }
      return inv;
    };
    inv_df = inverse_diagonal(r, a, f, rho_x);
    inv_dg = inverse_diagonal(c, b, g, rho_y);
  }

  bool both_balanced() const { return rho_x == 0 && rho_y == 0; }

  /// Removes the component along the null vector of S (1 on the columns that carry mass) in the balanced case.
  void project(std::vector<double>& v) const {
    if (!both_balanced()) return;
    double sum = 0;
    std::size_t active = 0;
    for (std::size_t j = 0; j < m; ++j)
      if (inv_dg[j] > 0) {
        sum += v[j];
        ++active;
      }
    if (active == 0) return;
    const double mean = sum / static_cast<double>(active);
    for (std::size_t j = 0; j < m; ++j) v[j] = inv_dg[j] > 0 ? v[j] - mean : 0.0;
  }

  /// S z = D_g z − Pᵀ D_f⁻¹ P z: two streaming passes.
  std::vector<double> schur(const std::vector<double>& z) const {
    std::vector<double> t = apply_vector(Side::kSource, z);
    for (std::size_t i = 0; i < n; ++i) t[i] *= inv_df[i];
    const std::vector<double> back = apply_vector(Side::kTarget, t);
    std::vector<double> out(m);
    for (std::size_t j = 0; j < m; ++j) out[j] = inv_dg[j] > 0 ? z[j] / inv_dg[j] - back[j] : 0.0;
    return out;
  }

  /// μg of K (μf, μg) = (bf, bg), by PCG on the Schur complement S μg = bg − Pᵀ D_f⁻¹ bf. `back` is Pᵀ D_f⁻¹ bf when
  /// the caller has it from a pass of its own (else empty: one pass computes it). μf = D_f⁻¹ (bf − P μg).
  std::vector<double> solve_g(const std::vector<double>& bf, const std::vector<double>& bg,
                              std::vector<double> back, const CgOptions& o, CgReport& report) const {
    if (back.empty()) {
      std::vector<double> scaled(n);
      for (std::size_t i = 0; i < n; ++i) scaled[i] = bf[i] * inv_df[i];
      back = apply_vector(Side::kTarget, scaled);
    }
    std::vector<double> rhs(m);
    for (std::size_t j = 0; j < m; ++j) rhs[j] = inv_dg[j] > 0 ? bg[j] - back[j] : 0.0;
    project(rhs);
    std::vector<double> mg(m, 0.0);
    const double rhs_norm = std::sqrt(dot(rhs, rhs));
    report = CgReport{};
    report.initial_residual = rhs_norm;
    if (rhs_norm > 0) {
      // The true residual rhs − S·x, projected like the right-hand side.
      const auto true_residual = [&]() {
        std::vector<double> t = schur(mg);
        for (std::size_t j = 0; j < m; ++j) t[j] = rhs[j] - t[j];
        project(t);
        return t;
      };
      std::vector<double> res = rhs;
      std::vector<double> z(m);
      for (std::size_t j = 0; j < m; ++j) z[j] = res[j] * inv_dg[j];
      std::vector<double> p = z;
      double rz = dot(res, z);
      double rel = 1;
      bool confirmed = false;
      double last_true = std::numeric_limits<double>::infinity();
      bool stagnated = false;  // rel then already holds the true residual
      while (report.iterations < o.max_iterations) {
        const std::vector<double> q = schur(p);
        const double pq = dot(p, q);
        // S is PSD and p lies in its range: pq ≤ 0 means the remaining residual is rounding noise.
        if (!(pq > 0)) break;
        const double alpha = rz / pq;
        for (std::size_t j = 0; j < m; ++j) {
          mg[j] += alpha * p[j];
          res[j] -= alpha * q[j];
        }
        project(res);
        ++report.iterations;
        rel = std::sqrt(dot(res, res)) / rhs_norm;
        bool restart = false;
        if (rel <= o.tolerance) {
          // The recursive residual drifts in floating point: confirm on the true one, and restart from it if the
          // two disagree.
          res = true_residual();
          rel = std::sqrt(dot(res, res)) / rhs_norm;
          if (rel <= o.tolerance) {
            confirmed = true;
            break;
          }
          // fp32 plan applications put a floor under the true residual: stop once restarts no longer halve it.
          if (rel >= 0.5 * last_true) {
            stagnated = true;
            break;
          }
          last_true = rel;
          restart = true;
        }
        for (std::size_t j = 0; j < m; ++j) z[j] = res[j] * inv_dg[j];
        const double rz_next = dot(res, z);
        const double beta = restart ? 0.0 : rz_next / rz;
        rz = rz_next;
        for (std::size_t j = 0; j < m; ++j) p[j] = z[j] + beta * p[j];
      }
      if (!confirmed && !stagnated) {
        const std::vector<double> t = true_residual();
        rel = std::sqrt(dot(t, t)) / rhs_norm;
      }
      report.residual = rel;
      report.converged = rel <= o.tolerance;
    } else {
      report.converged = true;
    }
    return mg;
  }

  /// μf = D_f⁻¹ (bf − P μg): one pass.
  std::vector<double> back_solve(const std::vector<double>& bf, const std::vector<double>& mg) const {
    const std::vector<double> pg = apply_vector(Side::kSource, mg);
    std::vector<double> mf(n);
    for (std::size_t i = 0; i < n; ++i) mf[i] = inv_df[i] * (bf[i] - pg[i]);
    return mf;
  }

  /// R v (n) and (m), and Pᵀ D_f⁻¹ (R v)_f (m) for the Schur right-hand side, from one pass.
  struct RTimes {
    std::vector<double> rf, rg, back;
  };
  RTimes r_times(std::span<const float> v) const {
    RTimes out;
    out.rf.resize(n);
    const std::size_t w = d + 2;
    std::vector<float> vz(n * w);
    for (std::size_t i = 0; i < n; ++i) {
      double gv = 0, xv = 0;
      for (std::size_t k = 0; k < d; ++k) {
        const double vi = v[i * d + k];
        gv += (r[i] * x[i * d + k] - py[i * d + k]) * vi;
        xv += static_cast<double>(x[i * d + k]) * vi;
        vz[i * w + k] = v[i * d + k];
      }
      out.rf[i] = 2 * s * gv;
      vz[i * w + d] = static_cast<float>(xv);
      vz[i * w + d + 1] = static_cast<float>(out.rf[i] * inv_df[i]);
    }
    // (m, d+2): [Pᵀ V | Pᵀ z | Pᵀ D_f⁻¹ rf], z_i = ⟨x_i, v_i⟩
    const std::vector<float> t = apply(Side::kTarget, vz, w);
    out.rg.resize(m);
    out.back.resize(m);
    for (std::size_t j = 0; j < m; ++j) {
      double yv = 0;
      for (std::size_t k = 0; k < d; ++k) yv += static_cast<double>(y[j * d + k]) * t[j * w + k];
      out.rg[j] = 2 * s * (t[j * w + d] - yv);
      out.back[j] = t[j * w + d + 1];
    }
    return out;
  }

  /// Rᵀ (μf, μg) with μf = D_f⁻¹ (bf − P μg) (n×d, double): the pass P·[μg ⊙ Y | μg] also gives P μg.
  std::vector<double> r_transpose_times(const std::vector<double>& bf, const std::vector<double>& mg) const {
    // (m, d+1): [μg ⊙ Y | μg]
    std::vector<float> v(m * (d + 1));
    for (std::size_t j = 0; j < m; ++j) {
      for (std::size_t k = 0; k < d; ++k) v[j * (d + 1) + k] = static_cast<float>(mg[j] * y[j * d + k]);
      v[j * (d + 1) + d] = static_cast<float>(mg[j]);
    }
    const std::vector<float> t = apply(Side::kSource, v, d + 1);
    std::vector<double> out(n * d);
    for (std::size_t i = 0; i < n; ++i) {
      const double pg = t[i * (d + 1) + d];
      const double mf = inv_df[i] * (bf[i] - pg);
      for (std::size_t k = 0; k < d; ++k)
        out[i * d + k] = 2 * s * (mf * (r[i] * x[i * d + k] - py[i * d + k]) + pg * x[i * d + k] - t[i * (d + 1) + k]);
    }
    return out;
  }

  /// E v (n×d), in double.
  std::vector<double> e_times(std::span<const float> v) const {
    // (n, d): Σ_j P_ij y_j ⟨y_j, v_i⟩
    std::vector<float> moment(n * d);
    backend->apply_bilinear(plan, Side::kSource, v, y, d, y, d, moment);
    std::vector<double> out(n * d);
    for (std::size_t i = 0; i < n; ++i) {
      double xv = 0, pyv = 0;
      for (std::size_t k = 0; k < d; ++k) {
        xv += static_cast<double>(x[i * d + k]) * v[i * d + k];
        pyv += static_cast<double>(py[i * d + k]) * v[i * d + k];
      }
      for (std::size_t k = 0; k < d; ++k) {
        // Σ_j P_ij (x_i − y_j)⟨x_i − y_j, v_i⟩ expanded over the streamed moments.
        const double t = x[i * d + k] * (r[i] * xv - pyv) - py[i * d + k] * xv + moment[i * d + k];
        out[i * d + k] = 2 * s * r[i] * v[i * d + k] - (4 * s * s / eps) * t;
      }
    }
    return out;
  }

  PotentialTangent tangent(std::span<const float> v, const CgOptions& o) const {
    validate_vector(v, n * d, "v", "n·d");
    validate_cg(o);
    const RTimes rv = r_times(v);
    PotentialTangent t;
    const std::vector<double> dg = solve_g(rv.rf, rv.rg, rv.back, o, t.cg);
    t.f = to_float(back_solve(rv.rf, dg));
    t.g = to_float(dg);
    return t;
  }
};

TransportDerivatives::TransportDerivatives(PointsView x, PointsView y, std::span<const float> a,
                                           std::span<const float> b, const SolveResult& solution,
                                           const BackendOptions& backend)
    : impl_(std::make_unique<Impl>()) {
  validate_points(x, "x");
  validate_points(y, "y");
  if (x.d != y.d)
    throw std::invalid_argument("x.d and y.d must match (got " + std::to_string(x.d) + " and " + std::to_string(y.d) +
                                ")");
  detail::validate_point_order(backend.point_order, false);
  Impl& p = *impl_;
  p.n = x.n;
  p.m = y.n;
  p.d = x.d;
  p.a = checked_weights(a, p.n, "a");
  p.b = checked_weights(b, p.m, "b");
  for (float w : p.a) p.mass_a += w;
  for (float w : p.b) p.mass_b += w;
  if (solution.f.size() != p.n || solution.g.size() != p.m)
    throw std::invalid_argument("solution must come from a problem on these points: f and g must hold n = " +
                                std::to_string(p.n) + " and m = " + std::to_string(p.m) + " values (got " +
                                std::to_string(solution.f.size()) + " and " + std::to_string(solution.g.size()) + ")");
  if (!(solution.epsilon > 0) || !std::isfinite(solution.epsilon))
    throw std::invalid_argument("solution.epsilon must be > 0 (got " + show(solution.epsilon) + ")");
  for (const auto* h : {&solution.f, &solution.g})
    for (std::size_t i = 0; i < h->size(); ++i)
      if (!std::isfinite((*h)[i]))
        throw std::invalid_argument(std::string("solution.") + (h == &solution.f ? "f" : "g") + "[" +
                                    std::to_string(i) + "] is not finite (got " + show((*h)[i]) +
                                    "): the solve did not produce potentials");
  if (solution.reach_source < 0 || solution.reach_target < 0)
    throw std::invalid_argument("solution.reach_source and reach_target must be ≥ 0 (got " +
                                show(solution.reach_source) + " and " + show(solution.reach_target) + ")");
  p.f = solution.f;
  p.g = solution.g;
  p.eps = solution.epsilon;
  p.s = detail::cost_scale(solution.cost);
  p.rho_x = solution.reach_source;
  p.rho_y = solution.reach_target;
  p.plan = {p.eps, p.s};
  // The same centring as Problem: the middle of the union's bounding box.
  std::vector<double> lo(p.d, std::numeric_limits<double>::infinity());
  std::vector<double> hi(p.d, -std::numeric_limits<double>::infinity());
  for (const PointsView* cloud : {&x, &y})
    for (std::size_t i = 0; i < cloud->n; ++i)
      for (std::size_t k = 0; k < p.d; ++k) {
        lo[k] = std::min<double>(lo[k], cloud->data[i * p.d + k]);
        hi[k] = std::max<double>(hi[k], cloud->data[i * p.d + k]);
      }
  const auto centred = [&](const PointsView& v) {
    std::vector<float> out(v.data.size());
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = static_cast<float>(v.data[i] - 0.5 * (lo[i % p.d] + hi[i % p.d]));
    return out;
  };
  p.x = centred(x);
  p.y = centred(y);
  const detail::ProblemData data{{p.x, p.n, p.d}, {p.y, p.m, p.d}, p.a, p.b};
  p.backend = detail::make_problem_backend(backend, data);
  p.backend->set_potentials(p.f, p.g);
  p.prepare();
}

TransportDerivatives::~TransportDerivatives() = default;
TransportDerivatives::TransportDerivatives(TransportDerivatives&&) noexcept = default;
TransportDerivatives& TransportDerivatives::operator=(TransportDerivatives&&) noexcept = default;

std::size_t TransportDerivatives::n() const { return impl_->n; }
std::size_t TransportDerivatives::m() const { return impl_->m; }
std::size_t TransportDerivatives::d() const { return impl_->d; }
std::string TransportDerivatives::backend_name() const { return impl_->backend->name(); }
std::string TransportDerivatives::device_name() const { return impl_->backend->device(); }

double TransportDerivatives::cost() const {
  const Impl& p = *impl_;
  const auto term = [](const std::vector<float>& w, const std::vector<float>& h, double rho) {
    double sum = 0;
    for (std::size_t i = 0; i < w.size(); ++i)
      sum += w[i] * (rho > 0 ? rho * (1 - std::exp(-static_cast<double>(h[i]) / rho)) : static_cast<double>(h[i]));
    return sum;
  };
  return term(p.a, p.f, p.rho_x) + term(p.b, p.g, p.rho_y) - p.eps * (p.plan_mass - p.mass_a * p.mass_b);
}

TransportGradient TransportDerivatives::gradient() const {
  const Impl& p = *impl_;
  TransportGradient out;
  out.cost = cost();
  const auto points = [&p](const std::vector<float>& pts, const std::vector<double>& marg,
                           const std::vector<float>& bary, std::size_t count) {
    std::vector<float> grad(count * p.d);
    for (std::size_t i = 0; i < count; ++i)
      for (std::size_t k = 0; k < p.d; ++k)
        grad[i * p.d + k] = static_cast<float>(2 * p.s * (marg[i] * pts[i * p.d + k] - bary[i * p.d + k]));
    return grad;
  };
  out.x = points(p.x, p.r, p.py, p.n);
  out.y = points(p.y, p.c, p.ptx, p.m);
  // ∂F/∂a_i = φ(f_i) − ε(Σ_j b_j e^{(f_i+g_j−C_ij)/ε} − |b|), and that sum is e^{−f_i/ρ} at the fixed point.
  const auto weights = [&p](const std::vector<float>& h, double rho, double other_mass) {
    std::vector<float> grad(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) {
      const double hi = h[i];
      const double phi = rho > 0 ? rho * (1 - std::exp(-hi / rho)) : hi;
      const double sum = rho > 0 ? std::exp(-hi / rho) : 1.0;
      grad[i] = static_cast<float>(phi - p.eps * (sum - other_mass));
    }
    return grad;
  };
  out.a = weights(p.f, p.rho_x, p.mass_b);
  out.b = weights(p.g, p.rho_y, p.mass_a);
  return out;
}

HessianProduct TransportDerivatives::hessian_product(std::span<const float> v, const CgOptions& cg) const {
  const Impl& p = *impl_;
  validate_vector(v, p.n * p.d, "v", "n·d");
  validate_cg(cg);
  HessianProduct h;
  const Impl::RTimes rv = p.r_times(v);
  const std::vector<double> dg = p.solve_g(rv.rf, rv.rg, rv.back, cg, h.cg);
  const std::vector<double> implicit = p.r_transpose_times(rv.rf, dg);
  const std::vector<double> explicit_part = p.e_times(v);
  h.product.resize(p.n * p.d);
  for (std::size_t i = 0; i < h.product.size(); ++i)
    h.product[i] = static_cast<float>(explicit_part[i] + implicit[i] / p.eps);
  return h;
}

PotentialTangent TransportDerivatives::potential_tangent(std::span<const float> v, const CgOptions& cg) const {
  return impl_->tangent(v, cg);
}

ImplicitGradient TransportDerivatives::implicit_gradient(std::span<const float> df, std::span<const float> dg,
                                                         const CgOptions& cg) const {
  const Impl& p = *impl_;
  validate_vector(df, p.n, "df", "n");
  validate_vector(dg, p.m, "dg", "m");
  validate_cg(cg);
  ImplicitGradient out;
  const std::vector<double> bf(df.begin(), df.end());
  const std::vector<double> mg = p.solve_g(bf, {dg.begin(), dg.end()}, {}, cg, out.cg);
  out.x = to_float(p.r_transpose_times(bf, mg));
  return out;
}

DivergenceGradient sinkhorn_divergence_gradient(PointsView x, PointsView y, std::span<const float> a,
                                                std::span<const float> b, const DivergenceResult& solves,
                                                const BackendOptions& backend) {
  const TransportGradient xy = TransportDerivatives(x, y, a, b, solves.xy, backend).gradient();
  const TransportGradient xx = TransportDerivatives(x, x, a, a, solves.xx, backend).gradient();
  const TransportGradient yy = TransportDerivatives(y, y, b, b, solves.yy, backend).gradient();
  // A self-transport sees its points on both sides: its gradient is the sum of the source and target gradients.
  const auto combine = [](const std::vector<float>& cross, const std::vector<float>& self_src,
                          const std::vector<float>& self_tgt) {
    std::vector<float> out(cross.size());
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = static_cast<float>(cross[i] - 0.5 * (static_cast<double>(self_src[i]) + self_tgt[i]));
    return out;
  };
  DivergenceGradient out;
  out.divergence = xy.cost - 0.5 * xx.cost - 0.5 * yy.cost;
  out.x = combine(xy.x, xx.x, xx.y);
  out.y = combine(xy.y, yy.x, yy.y);
  out.a = combine(xy.a, xx.a, xx.b);
  out.b = combine(xy.b, yy.a, yy.b);
  return out;
}

}  // namespace flashot
