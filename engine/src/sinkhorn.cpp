// The ε-scaling Sinkhorn loop (docs/design.md §1), once for every backend: the schedule, the iterations, the
// marginal-error checks, the stop reasons and the report. The backend only iterates and computes soft c-transforms.
#include "sinkhorn.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "validation.hpp"

namespace flashot::detail {

namespace {

/// ρ of one side: its own reach if set, else the common one; ρ = reach² (0 = balanced side).
double side_rho(double common, double own) {
  const double reach = own > 0 ? own : common;
  return reach * reach;
}

double damping(double epsilon, double rho) { return rho > 0 ? 1.0 / (1.0 + epsilon / rho) : 1.0; }

struct Potentials {
  std::vector<float> f;
  std::vector<float> g;
};

/// ‖P1 − a⊙e^{−f/ρ_x}‖₁ + ‖Pᵀ1 − b⊙e^{−g/ρ_y}‖₁ over the total mass of a (SolveResult::marginal_error), with
/// P1_i = a_i·exp((f_i − f̂_i)/ε), f̂ = softmin_rows(g), and likewise for the columns.
double marginal_error(const Backend& backend, const SolveInputs& in, const Potentials& p, double epsilon, double s,
                      double rho_x, double rho_y, double mass_a) {
  std::vector<float> fh(p.f.size()), gh(p.g.size());
  const PlanParams pp{epsilon, s};
  backend.softmin(pp, Side::kSource, fh);
  backend.softmin(pp, Side::kTarget, gh);
  const auto side = [epsilon](std::span<const float> w, const std::vector<float>& h, const std::vector<float>& hh,
                              double rho) {
    double err = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (!(w[i] > 0)) continue;
      const double mass = w[i] * std::exp((static_cast<double>(h[i]) - hh[i]) / epsilon);
      const double target = rho > 0 ? w[i] * std::exp(-static_cast<double>(h[i]) / rho) : w[i];
      err += std::abs(mass - target);
    }
    return err;
  };
  return (side(in.a, p.f, fh, rho_x) + side(in.b, p.g, gh, rho_y)) / mass_a;
}

}  // namespace

double dual_term(std::span<const float> w, std::span<const float> h, double rho) {
  double sum = 0;
  for (std::size_t i = 0; i < w.size(); ++i)
    sum += rho > 0 ? w[i] * rho * (1.0 - std::exp(-static_cast<double>(h[i]) / rho)) : w[i] * static_cast<double>(h[i]);
  return sum;
}

double cost_scale(Cost cost) { return cost == Cost::kHalfSquaredEuclidean ? 0.5 : 1.0; }

double final_blur(const SolveOptions& o, double diameter) {
  return o.blur_relative > 0 ? o.blur_relative * diameter : o.blur;
}

std::vector<double> epsilon_schedule(const SolveOptions& o, double diameter) {
  if (o.epsilon > 0) return {o.epsilon};
  const double blur = final_blur(o, diameter);
  const double target = blur * blur;
  std::vector<double> eps;
  for (double e = cost_scale(o.cost) * diameter * diameter; e > target; e *= o.scaling * o.scaling) eps.push_back(e);
  eps.push_back(target);
  return eps;
}

void validate_solve_options(const SolveOptions& o, std::size_t n, std::size_t m, double mass_a, double mass_b,
                            double data_diameter) {
  require(o.cost == Cost::kSquaredEuclidean || o.cost == Cost::kHalfSquaredEuclidean, "cost must be a Cost value",
          static_cast<double>(o.cost));
  require(o.scheme == Scheme::kSymmetric || o.scheme == Scheme::kAlternating, "scheme must be a Scheme value",
          static_cast<double>(o.scheme));
  require(std::isfinite(o.epsilon) && o.epsilon >= 0, "epsilon must be > 0, or 0 for ε-scaling", o.epsilon);
  require(std::isfinite(o.blur_relative) && o.blur_relative >= 0, "blur_relative must be ≥ 0 (0 = use blur)",
          o.blur_relative);
  if (o.epsilon == 0 && o.blur_relative == 0) require(std::isfinite(o.blur) && o.blur > 0, "blur must be > 0", o.blur);
  require(o.scaling > 0 && o.scaling < 1, "scaling must be in (0, 1)", o.scaling);
  require(std::isfinite(o.diameter) && o.diameter >= 0, "diameter must be ≥ 0 (0 = from the data)", o.diameter);
  require(o.stage_iterations >= 1, "stage_iterations must be ≥ 1", o.stage_iterations);
  require(std::isfinite(o.tolerance) && o.tolerance >= 0, "tolerance must be ≥ 0", o.tolerance);
  require(o.check_every >= 1, "check_every must be ≥ 1", o.check_every);
  require(o.max_iterations >= 0, "max_iterations must be ≥ 0", o.max_iterations);
  require(std::isfinite(o.reach) && o.reach >= 0, "reach must be ≥ 0 (0 = balanced)", o.reach);
  require(std::isfinite(o.reach_source) && o.reach_source >= 0, "reach_source must be ≥ 0", o.reach_source);
  require(std::isfinite(o.reach_target) && o.reach_target >= 0, "reach_target must be ≥ 0", o.reach_target);
  if (!o.initial_f.empty())
    require(o.initial_f.size() == n, "initial_f must be empty or have n = " + std::to_string(n) + " values",
            static_cast<double>(o.initial_f.size()));
  if (!o.initial_g.empty())
    require(o.initial_g.size() == m, "initial_g must be empty or have m = " + std::to_string(m) + " values",
            static_cast<double>(o.initial_g.size()));
  for (std::size_t i = 0; i < o.initial_f.size(); ++i)
    require(std::isfinite(o.initial_f[i]), "initial_f[" + std::to_string(i) + "] must be finite", o.initial_f[i]);
  for (std::size_t j = 0; j < o.initial_g.size(); ++j)
    require(std::isfinite(o.initial_g[j]), "initial_g[" + std::to_string(j) + "] must be finite", o.initial_g[j]);
  if (o.epsilon == 0 && o.blur_relative > 0 && !(o.diameter > 0) && !(data_diameter > 0))
    throw std::invalid_argument("blur_relative needs data of non-zero extent, but every point coincides (diameter " +
                                show(data_diameter) + "): give blur or diameter instead");
  const bool balanced = side_rho(o.reach, o.reach_source) == 0 && side_rho(o.reach, o.reach_target) == 0;
  if (balanced && std::abs(mass_a - mass_b) > 1e-3 * std::max(mass_a, mass_b))
    throw std::invalid_argument("balanced OT needs equal total weights: sum(a) = " + show(mass_a) +
                                " and sum(b) = " + show(mass_b) + " (normalize them, or set reach)");
}

SolveResult run_sinkhorn(Backend& backend, const SolveInputs& in, const SolveOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const std::size_t n = in.a.size();
  const std::size_t m = in.b.size();
  const double s = cost_scale(o.cost);
  const double rho_x = side_rho(o.reach, o.reach_source);
  const double rho_y = side_rho(o.reach, o.reach_target);
  double mass_a = 0;
  for (float w : in.a) mass_a += w;

  Potentials p{o.initial_f.empty() ? std::vector<float>(n, 0.0f) : o.initial_f,
               o.initial_g.empty() ? std::vector<float>(m, 0.0f) : o.initial_g};
  backend.set_potentials(p.f, p.g);

  const double diameter = o.diameter > 0 ? o.diameter : in.diameter;
  const std::vector<double> eps = epsilon_schedule(o, diameter);
  const int stage_count = static_cast<int>(eps.size());
  const int total_budget = (stage_count - 1) * o.stage_iterations + o.max_iterations;

  SolveResult r;
  r.cost = o.cost;
  r.epsilon = eps.back();
  r.diameter = diameter;
  r.reach_source = rho_x;
  r.reach_target = rho_y;
  r.backend = backend.name();
  r.device = backend.device();
  r.reason = StopReason::kIterationBudget;

  // Marginal errors are computed when the tolerance needs them or someone watches; a fixed-ε run with
  // tolerance 0 and no callback iterates without them (benchmark mode).
  const bool checking = o.tolerance > 0 || static_cast<bool>(o.progress);
  bool stopped = false;
  bool error_current = false;  // r.marginal_error belongs to the current potentials
  const auto stage_text = [&](int k) {
    return "ε stage " + std::to_string(k + 1) + " of " + std::to_string(stage_count) + " (ε = " + show(eps[k]) + ")";
  };
  const auto non_finite = [&](int k) {
    r.reason = StopReason::kNonFinite;
    r.message = "a potential or marginal became non-finite at " + stage_text(k) + " after " +
                std::to_string(r.iterations) + " iterations";
    stopped = true;
  };

  int reached = 0;  // the stage whose ε the potentials belong to
  for (int k = 0; k < stage_count && !stopped; ++k) {
    reached = k;
    const bool final_stage = k == stage_count - 1;
    const IterationParams ip{eps[k], s, o.scheme, damping(eps[k], rho_x), damping(eps[k], rho_y)};
    StageReport stage{eps[k], 0};
    if (!final_stage) {
      const bool ok = backend.iterate(ip, o.stage_iterations);
      stage.iterations = o.stage_iterations;
      r.iterations += o.stage_iterations;
      r.stages.push_back(stage);
      if (!ok) {
        non_finite(k);
        break;
      }
      // Intermediate stages are not checked (their fixed point is not the answer); the callback still sees them
      // so a long schedule can be cancelled. marginal_error is NaN there: not computed.
      if (o.progress && !o.progress(Progress{k, stage_count, eps[k], r.iterations, total_budget,
                                             std::numeric_limits<double>::quiet_NaN()})) {
        r.reason = StopReason::kCancelled;
        r.message = "cancelled by the progress callback after " + stage_text(k);
        stopped = true;
      }
      continue;
    }
    int done = 0;
    while (done < o.max_iterations) {
      const int step = checking ? std::min(o.check_every, o.max_iterations - done) : o.max_iterations - done;
      const bool ok = backend.iterate(ip, step);
      done += step;
      r.iterations += step;
      error_current = false;
      if (!ok) {
        non_finite(k);
        break;
      }
      if (!checking) continue;
      backend.get_potentials(p.f, p.g);
      r.marginal_error = marginal_error(backend, in, p, eps[k], s, rho_x, rho_y, mass_a);
      error_current = true;
      r.checks.push_back(MarginalCheck{r.iterations, eps[k], r.marginal_error});
      if (!std::isfinite(r.marginal_error)) {
        non_finite(k);
        break;
      }
      const bool converged = o.tolerance > 0 && r.marginal_error <= o.tolerance;
      const bool go_on =
          !o.progress || o.progress(Progress{k, stage_count, eps[k], r.iterations, total_budget, r.marginal_error});
      if (converged) {
        r.converged = true;
        r.reason = StopReason::kTolerance;
        r.message = "converged: marginal error " + show(r.marginal_error) + " ≤ tolerance " + show(o.tolerance) +
                    " after " + std::to_string(r.iterations) + " iterations";
        break;
      }
      if (!go_on) {
        r.reason = StopReason::kCancelled;
        r.message = "cancelled by the progress callback at " + stage_text(k) + " after " +
                    std::to_string(r.iterations) + " iterations";
        break;
      }
    }
    stage.iterations = done;
    r.stages.push_back(stage);
    stopped = true;
  }

  backend.get_potentials(p.f, p.g);
  if (r.reason != StopReason::kNonFinite && r.reason != StopReason::kCancelled && !r.converged) {
    if (o.tolerance == 0) {
      r.reason = StopReason::kFixedIterations;
      r.message = "ran the " + std::to_string(r.iterations) + " iterations asked for (tolerance 0: no check)";
    } else {
      r.reason = StopReason::kIterationBudget;
    }
  }
  // A solve cancelled (or stopped) at an intermediate stage reports the ε its potentials belong to, so that plan
  // operations on the result use the matching plan.
  r.epsilon = eps[reached];
  if (!o.diagnostics && !error_current) {
    r.marginal_error = std::numeric_limits<double>::quiet_NaN();
  } else if (!error_current && r.reason != StopReason::kNonFinite) {
    r.marginal_error = marginal_error(backend, in, p, r.epsilon, s, rho_x, rho_y, mass_a);
    if (!std::isfinite(r.marginal_error)) non_finite(reached);
  }
  if (r.reason == StopReason::kIterationBudget)
    r.message = "not converged: marginal error " + show(r.marginal_error) + " > tolerance " + show(o.tolerance) +
                " after max_iterations = " + std::to_string(o.max_iterations) + " at the final ε = " + show(r.epsilon);
  r.dual_cost = dual_term(in.a, p.f, rho_x) + dual_term(in.b, p.g, rho_y);
  r.f = std::move(p.f);
  r.g = std::move(p.g);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace flashot::detail
