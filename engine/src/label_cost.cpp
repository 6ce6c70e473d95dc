// The label-augmented cost C_ij = s‖x_i − y_j‖² + λ·W[l_i, l_j] as an ordinary Problem on augmented points
// (flashot/label_cost.hpp; docs/engine.md, "Label-augmented cost").
//
// The label term is written as s‖Φ_a − Ψ_b‖² + A_a + B_b for classes a = l_i, b = l_j, and the points become
// [x_i | Φ_{l_i}] and [y_j | Ψ_{l_j}] (L more coordinates), so s‖x̃_i − ỹ_j‖² + A_{l_i} + B_{l_j} = C_ij exactly:
//  * the default W = 1 − δ: λ(1 − δ_ab) = (λ/2)‖e_a − e_b‖², so Φ_a = Ψ_a = √(λ/(2s))·e_a and A = B = 0;
//  * any W: −2s⟨Φ_a, Ψ_b⟩ = λW_ab with Φ_a = c·e_a, Ψ_b = −λ/(2sc)·W[·, b] (the exact rank-≤L factorization
//    W = I·W), and A_a = −s‖Φ_a‖², B_b = −s‖Ψ_b‖²; c² = λ·rms_b‖W[·, b]‖/(2s) gives both sides the same scale.
// The separable A, B move into the potentials (balanced side) or the weights (unbalanced side) exactly as for fused
// Gromov–Wasserstein (separable.hpp, docs/gromov-wasserstein.md §4).
#include "flashot/label_cost.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "separable.hpp"
#include "sinkhorn.hpp"
#include "validation.hpp"

namespace flashot {

using detail::show;

struct LabelCostProblem::Impl {
  std::size_t n = 0, m = 0, d = 0, classes = 0;
  std::vector<float> x, y, a, b;
  std::vector<std::int32_t> lx, ly;
  std::vector<double> table;  // empty: the default 1 − δ
  double lambda = 0;
  double diameter = 0;
  double mass_a = 0, mass_b = 0;
  BackendOptions backend;

  // The augmented problem and what it was made for: the cost scale, and on an unbalanced side ε and ρ (its weights).
  std::unique_ptr<Problem> problem;
  double made_s = -1, made_eps = -1, made_rho_x = -1, made_rho_y = -1;
  std::vector<double> sep_a, sep_b;  // (n), (m) the separable terms A_{l_i}, B_{l_j} (balanced by a constant)
  double share_x = 1, share_y = 1;   // f = f^E + share·A

  std::size_t label_columns() const { return lambda > 0 ? classes : 0; }

  /// The augmented problem for cost scale s, final ε and ρ per side (made again only when they change it).
  void ensure(double s, double eps, double rho_x, double rho_y) {
    const bool unbalanced = rho_x > 0 || rho_y > 0;
    if (problem && made_s == s && (!unbalanced || (made_eps == eps && made_rho_x == rho_x && made_rho_y == rho_y)) &&
        (unbalanced || (made_rho_x == 0 && made_rho_y == 0)))
      return;
    const std::size_t L = label_columns();
    const std::size_t dim = d + L;
    // Class coordinates Φ (L × L), Ψ (L × L) and separable terms per class.
    std::vector<double> phi(L * L, 0.0), psi(L * L, 0.0), class_a(classes, 0.0), class_b(classes, 0.0);
    if (L > 0) {
      if (table.empty()) {
        const double v = std::sqrt(lambda / (2 * s));
        for (std::size_t c = 0; c < L; ++c) phi[c * L + c] = psi[c * L + c] = v;
      } else {
        double rms = 0;
        for (std::size_t bcl = 0; bcl < L; ++bcl)
          for (std::size_t acl = 0; acl < L; ++acl) rms += table[acl * L + bcl] * table[acl * L + bcl];
        rms = std::sqrt(rms / static_cast<double>(L));
        if (rms > 0) {
          const double c = std::sqrt(lambda * rms / (2 * s));
          for (std::size_t acl = 0; acl < L; ++acl) {
            phi[acl * L + acl] = c;
            class_a[acl] = -s * c * c;
          }
          for (std::size_t bcl = 0; bcl < L; ++bcl) {
            double norm = 0;
            for (std::size_t acl = 0; acl < L; ++acl) {
              const double v = -lambda / (2 * s * c) * table[acl * L + bcl];
              psi[bcl * L + acl] = v;
              norm += static_cast<double>(static_cast<float>(v)) * static_cast<float>(v);
            }
            class_b[bcl] = -s * norm;
          }
          // A uses the fp32 coordinates too, so that A + B + s‖Φ − Ψ‖² is λW up to the points' own rounding.
          for (std::size_t acl = 0; acl < L; ++acl) {
            const double f = static_cast<float>(c);
            class_a[acl] = -s * f * f;
          }
        }
      }
    }
    std::vector<float> xa(n * dim), ya(m * dim);
    sep_a.assign(n, 0.0);
    sep_b.assign(m, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      std::copy_n(x.begin() + i * d, d, xa.begin() + i * dim);
      for (std::size_t c = 0; c < L; ++c) xa[i * dim + d + c] = static_cast<float>(phi[lx[i] * L + c]);
      if (L > 0) sep_a[i] = class_a[lx[i]];
    }
    for (std::size_t j = 0; j < m; ++j) {
      std::copy_n(y.begin() + j * d, d, ya.begin() + j * dim);
      for (std::size_t c = 0; c < L; ++c) ya[j * dim + d + c] = static_cast<float>(psi[ly[j] * L + c]);
      if (L > 0) sep_b[j] = class_b[ly[j]];
    }
    const detail::SeparableTerms separable(eps, rho_x, rho_y);
    separable.balance(sep_a, sep_b);
    share_x = separable.source_share();
    share_y = separable.target_share();
    const std::vector<float> wa = separable.source_weights(a, sep_a);
    const std::vector<float> wb = separable.target_weights(b, sep_b);
    problem.reset();  // the previous problem's device memory goes before the next one's is taken
    problem = std::make_unique<Problem>(PointsView{xa, n, dim}, PointsView{ya, m, dim}, wa, wb, backend);
    made_s = s;
    made_eps = eps;
    made_rho_x = rho_x;
    made_rho_y = rho_y;
  }

  /// The engine's potentials of a true-cost result (the augmented problem made for it first).
  SolveResult engine(const SolveResult& s) {
    if (s.f.size() != n || s.g.size() != m)
      throw std::invalid_argument("result must come from this problem: f and g must have n = " + std::to_string(n) +
                                  " and m = " + std::to_string(m) + " values (got " + std::to_string(s.f.size()) +
                                  " and " + std::to_string(s.g.size()) + ")");
    if (!(s.epsilon > 0) || !std::isfinite(s.epsilon))
      throw std::invalid_argument("result.epsilon must be > 0 (got " + show(s.epsilon) + ")");
    ensure(detail::cost_scale(s.cost), s.epsilon, s.reach_source, s.reach_target);
    SolveResult e = s;
    for (std::size_t i = 0; i < n; ++i) e.f[i] = static_cast<float>(s.f[i] - share_x * sep_a[i]);
    for (std::size_t j = 0; j < m; ++j) e.g[j] = static_cast<float>(s.g[j] - share_y * sep_b[j]);
    return e;
  }
};

namespace {

void check_labels(std::span<const std::int32_t> labels, std::size_t count, std::size_t classes,
                  const std::string& name, const std::string& points) {
  if (labels.size() != count)
    throw std::invalid_argument("labels." + name + " must hold one class per point of " + points + ", " +
                                std::to_string(count) + " (got " + std::to_string(labels.size()) + ")");
  for (std::size_t i = 0; i < count; ++i)
    if (labels[i] < 0 || static_cast<std::size_t>(labels[i]) >= classes)
      throw std::invalid_argument("labels." + name + "[" + std::to_string(i) + "] must be in [0, classes = " +
                                  std::to_string(classes) + ") (got " + std::to_string(labels[i]) + ")");
}

}  // namespace

LabelCostProblem::LabelCostProblem(PointsView x, PointsView y, std::span<const float> a, std::span<const float> b,
                                   const LabelCost& labels, const BackendOptions& backend)
    : impl_(std::make_unique<Impl>()) {
  detail::validate_points(x, "x");
  detail::validate_points(y, "y");
  if (x.d != y.d)
    throw std::invalid_argument("x.d and y.d must match (got " + std::to_string(x.d) + " and " + std::to_string(y.d) +
                                ")");
  detail::validate_weights(a, x.n, "a", "x");
  detail::validate_weights(b, y.n, "b", "y");
  if (labels.classes == 0) throw std::invalid_argument("labels.classes must be ≥ 1 (got 0)");
  check_labels(labels.source, x.n, labels.classes, "source", "x");
  check_labels(labels.target, y.n, labels.classes, "target", "y");
  if (!(labels.weight >= 0) || !std::isfinite(labels.weight))
    throw std::invalid_argument("labels.weight (λ) must be finite and ≥ 0 (got " + show(labels.weight) + ")");
  const std::size_t L = labels.classes;
  if (!labels.table.empty()) {
    if (labels.table.size() != L * L)
      throw std::invalid_argument("labels.table must hold classes² = " + std::to_string(L * L) +
                                  " values, or none for the default (got " + std::to_string(labels.table.size()) + ")");
    for (std::size_t k = 0; k < labels.table.size(); ++k)
      if (!std::isfinite(labels.table[k]))
        throw std::invalid_argument("labels.table[" + std::to_string(k / L) + ", " + std::to_string(k % L) +
                                    "] must be finite (got " + show(labels.table[k]) + ")");
  }
  Impl& p = *impl_;
  p.n = x.n;
  p.m = y.n;
  p.d = x.d;
  p.classes = L;
  p.x.assign(x.data.begin(), x.data.end());
  p.y.assign(y.data.begin(), y.data.end());
  p.a = detail::weights_or_uniform(a, p.n);
  p.b = detail::weights_or_uniform(b, p.m);
  for (float w : p.a) p.mass_a += w;
  for (float w : p.b) p.mass_b += w;
  p.lx = labels.source;
  p.ly = labels.target;
  p.lambda = labels.weight;
  p.backend = backend;
  // A table equal to the default takes the default's route (no separable terms).
  bool is_default = true;
  for (std::size_t k = 0; k < labels.table.size() && is_default; ++k)
    is_default = labels.table[k] == (k / L == k % L ? 0.0 : 1.0);
  if (!is_default) p.table = labels.table;
  // The points' own diameter (Problem::diameter's rule), for blur_relative.
  double diam2 = 0;
  for (std::size_t c = 0; c < p.d; ++c) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const auto* cloud : {&p.x, &p.y})
      for (std::size_t i = 0; i < cloud->size() / p.d; ++i) {
        lo = std::min<double>(lo, (*cloud)[i * p.d + c]);
        hi = std::max<double>(hi, (*cloud)[i * p.d + c]);
      }
    diam2 += (hi - lo) * (hi - lo);
  }
  p.diameter = std::sqrt(diam2);
  // The balanced problem for the default cost now, so that a bad backend is refused here as Problem does.
  p.ensure(1.0, 1.0, 0.0, 0.0);
}

LabelCostProblem::~LabelCostProblem() = default;
LabelCostProblem::LabelCostProblem(LabelCostProblem&&) noexcept = default;
LabelCostProblem& LabelCostProblem::operator=(LabelCostProblem&&) noexcept = default;

std::size_t LabelCostProblem::n() const { return impl_->n; }
std::size_t LabelCostProblem::m() const { return impl_->m; }
std::size_t LabelCostProblem::d() const { return impl_->d; }
std::size_t LabelCostProblem::augmented_d() const { return impl_->d + impl_->label_columns(); }
double LabelCostProblem::diameter() const { return impl_->diameter; }
std::string LabelCostProblem::backend_name() const { return impl_->problem->backend_name(); }
std::string LabelCostProblem::device_name() const { return impl_->problem->device_name(); }

SolveResult LabelCostProblem::solve(const SolveOptions& options) {
  Impl& p = *impl_;
  detail::validate_solve_options(options, p.n, p.m, p.mass_a, p.mass_b, p.diameter);
  SolveOptions o = options;
  // blur_relative is relative to the points' diameter (λ = 0 then gives the plain problem's ε); the schedule's
  // first ε comes from the augmented points unless a diameter is given.
  if (o.epsilon == 0 && o.blur_relative > 0) {
    o.blur = o.blur_relative * (o.diameter > 0 ? o.diameter : p.diameter);
    o.blur_relative = 0;
  }
  const double eps = o.epsilon > 0 ? o.epsilon : o.blur * o.blur;
  const double rho_x = detail::side_rho(o.reach, o.reach_source);
  const double rho_y = detail::side_rho(o.reach, o.reach_target);
  const double s = detail::cost_scale(o.cost);
  p.ensure(s, eps, rho_x, rho_y);
  // A warm start is given for the true cost: the engine's potentials are f − share·A.
  for (std::size_t i = 0; i < o.initial_f.size(); ++i)
    o.initial_f[i] = static_cast<float>(o.initial_f[i] - p.share_x * p.sep_a[i]);
  for (std::size_t j = 0; j < o.initial_g.size(); ++j)
    o.initial_g[j] = static_cast<float>(o.initial_g[j] - p.share_y * p.sep_b[j]);
  SolveResult r = p.problem->solve(o);
  const auto start = std::chrono::steady_clock::now();
  const bool separable = std::any_of(p.sep_a.begin(), p.sep_a.end(), [](double v) { return v != 0; }) ||
                         std::any_of(p.sep_b.begin(), p.sep_b.end(), [](double v) { return v != 0; });
  if (separable && std::isfinite(r.primal_cost)) {
    // ⟨P, C⟩ = ⟨P, s‖x̃ − ỹ‖²⟩ + ⟨P1, A⟩ + ⟨Pᵀ1, B⟩ (the constant moved between A and B cancels: Σ P1 = Σ Pᵀ1).
    const std::vector<float> rows = p.problem->row_marginal(r);
    const std::vector<float> cols = p.problem->column_marginal(r);
    double extra = 0;
    for (std::size_t i = 0; i < p.n; ++i) extra += static_cast<double>(rows[i]) * p.sep_a[i];
    for (std::size_t j = 0; j < p.m; ++j) extra += static_cast<double>(cols[j]) * p.sep_b[j];
    r.primal_cost += extra;
  }
  for (std::size_t i = 0; i < p.n; ++i) r.f[i] = static_cast<float>(r.f[i] + p.share_x * p.sep_a[i]);
  for (std::size_t j = 0; j < p.m; ++j) r.g[j] = static_cast<float>(r.g[j] + p.share_y * p.sep_b[j]);
  r.dual_cost = detail::dual_term(p.a, r.f, r.reach_source) + detail::dual_term(p.b, r.g, r.reach_target);
  r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::vector<float> LabelCostProblem::apply_plan(const SolveResult& s, std::span<const float> v, std::size_t k) const {
  return impl_->problem->apply_plan(impl_->engine(s), v, k);
}
std::vector<float> LabelCostProblem::apply_plan_transpose(const SolveResult& s, std::span<const float> u,
                                                          std::size_t k) const {
  return impl_->problem->apply_plan_transpose(impl_->engine(s), u, k);
}
std::vector<float> LabelCostProblem::row_marginal(const SolveResult& s) const {
  return impl_->problem->row_marginal(impl_->engine(s));
}
std::vector<float> LabelCostProblem::column_marginal(const SolveResult& s) const {
  return impl_->problem->column_marginal(impl_->engine(s));
}
std::vector<float> LabelCostProblem::barycentric(const SolveResult& s, Side from) const {
  const Impl& p = *impl_;
  const SolveResult e = impl_->engine(s);
  const std::size_t dim = p.d + p.label_columns();
  const std::vector<float> full = p.problem->barycentric(e, from);
  if (dim == p.d) return full;
  const std::size_t count = from == Side::kSource ? p.n : p.m;
  std::vector<float> out(count * p.d);
  for (std::size_t i = 0; i < count; ++i) std::copy_n(full.begin() + i * dim, p.d, out.begin() + i * p.d);
  return out;
}
LabelTransfer LabelCostProblem::transfer_labels(const SolveResult& s, Side labels_on,
                                                std::span<const std::int32_t> labels, std::size_t classes) const {
  return impl_->problem->transfer_labels(impl_->engine(s), labels_on, labels, classes);
}
TopKCoupling LabelCostProblem::top_k(const SolveResult& s, std::size_t k) const {
  return impl_->problem->top_k(impl_->engine(s), k);
}

}  // namespace flashot
