// The ε-scaling Sinkhorn loop (docs/design.md §1), once for every backend: the schedule, the iterations, the
// marginal-error checks, the stop reasons and the report. The backend only iterates and computes soft c-transforms.
#include "sinkhorn.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "relaxation.hpp"
#include "separable.hpp"
#include "validation.hpp"

namespace flashot::detail {

namespace {

double damping(double epsilon, double rho) { return rho > 0 ? 1.0 / (1.0 + epsilon / rho) : 1.0; }

/// ‖P1 − a⊙e^{−f/ρ_x}‖₁ + ‖Pᵀ1 − b⊙e^{−g/ρ_y}‖₁ over the total mass of a (SolveResult::marginal_error), with
/// P1_i = a_i·exp((f_i − f̂_i)/ε), f̂ = softmin_rows(g), and likewise for the columns. f, fh (g, gh): the problem's
/// potentials and their soft c-transforms; r0, c0: where they start in the backend (resident weights).
double marginal_error(const Backend& backend, const SolveInputs& in, std::size_t r0, std::size_t c0,
                      std::span<const float> f, std::span<const float> fh, std::span<const float> g,
                      std::span<const float> gh, double epsilon, double rho_x, double rho_y, double mass_a) {
  if (in.resident)
    return (backend.weighted_sums(Side::kSource, r0, f, fh, epsilon, rho_x).marginal +
            backend.weighted_sums(Side::kTarget, c0, g, gh, epsilon, rho_y).marginal) /
           mass_a;
  return (weighted_sums(in.a, f, fh, epsilon, rho_x).marginal + weighted_sums(in.b, g, gh, epsilon, rho_y).marginal) /
         mass_a;
}

/// SolveResult::dual_cost from host weights: dual_term of each side (resident weights: run_sinkhorn_batch's
/// Backend::batch_weighted_sums).
double dual_cost(const SolveInputs& in, std::span<const float> f, std::span<const float> g, double rho_x,
                 double rho_y) {
  return dual_term(in.a, f, rho_x) + dual_term(in.b, g, rho_y);
}

}  // namespace

WeightedSums weighted_sums(std::span<const float> w, std::span<const float> h, std::span<const float> hh,
                           double epsilon, double rho) {
  WeightedSums s;
  if (hh.empty()) {
    s.dual = dual_term(w, h, rho);
    return s;
  }
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (!(w[i] > 0)) continue;
    const double mass = w[i] * std::exp((static_cast<double>(h[i]) - hh[i]) / epsilon);
    const double target = rho > 0 ? w[i] * std::exp(-static_cast<double>(h[i]) / rho) : w[i];
    s.marginal += std::abs(mass - target);
  }
  return s;
}

/// ⟨a,f⟩ on a balanced side, ⟨a, ρ(1 − e^{−f/ρ})⟩ on an unbalanced one.
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
  require(o.overrelaxation == kOverrelaxationAuto || (o.overrelaxation >= 1 && o.overrelaxation < 2),
          "overrelaxation must be 0 (auto), 1 (off) or in (1, 2)", o.overrelaxation);
  require(o.overrelaxation_start >= 1 && o.overrelaxation_start < 2, "overrelaxation_start must be in [1, 2)",
          o.overrelaxation_start);
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

namespace {

/// One problem's run through the loop: its schedule, where it stands, and its report.
struct Run {
  const SolveInputs* in = nullptr;
  const SolveOptions* o = nullptr;
  std::size_t n = 0, m = 0, r0 = 0, c0 = 0;  // sizes; offsets of its rows and columns in the backend
  double s = 1, rho_x = 0, rho_y = 0, mass_a = 0;
  std::vector<double> eps;
  int stage_count = 0, total_budget = 0;
  bool checking = false;
  int k = 0;             // the stage it is in
  int in_stage = 0;      // iterations done in stage k
  int reached = 0;       // the stage whose ε the potentials belong to
  int target = 0;        // in_stage at which it next needs attention
  bool finished = false;  // left the loop
  bool error_current = false;  // r.marginal_error belongs to the current potentials
  Relaxation relax{1, Scheme::kSymmetric};  // the final stage's ω (SolveOptions::overrelaxation)
  int last_check = 0;                       // in_stage at the previous check of the final stage
  SolveResult r;

  bool final_stage() const { return k == stage_count - 1; }
  /// Iterations until this problem next needs attention (end of its stage, a check, its budget).
  int next_step() const {
    if (!final_stage()) return o->stage_iterations - in_stage;
    const int left = o->max_iterations - in_stage;  // checks every check_every iterations of the final stage
    return checking ? std::min(o->check_every - in_stage % o->check_every, left) : left;
  }
  std::string stage_text(int stage) const {
    return "ε stage " + std::to_string(stage + 1) + " of " + std::to_string(stage_count) + " (ε = " +
           show(eps[stage]) + ")";
  }
  void non_finite(int stage) {
    r.reason = StopReason::kNonFinite;
    r.message = "a potential or marginal became non-finite at " + stage_text(stage) + " after " +
                std::to_string(r.iterations) + " iterations";
    finished = true;
  }
  void end_stage() { r.stages.push_back(StageReport{eps[k], in_stage}); }
  std::span<const float> f_of(const std::vector<float>& all) const { return {all.data() + r0, n}; }
  std::span<const float> g_of(const std::vector<float>& all) const { return {all.data() + c0, m}; }
  SegmentParams params(int stage) const {
    return {eps[stage], s, damping(eps[stage], rho_x), damping(eps[stage], rho_y),
            stage == stage_count - 1 ? relax.omega() : 1.0};
  }
};

bool all_finite(std::span<const float> v) {
  return std::all_of(v.begin(), v.end(), [](float e) { return std::isfinite(e); });
}

}  // namespace

std::vector<SolveResult> run_sinkhorn_batch(Backend& backend, std::span<const SolveInputs> inputs,
                                            std::span<const SolveOptions* const> options, const BatchLayout* layout) {
  const auto start = std::chrono::steady_clock::now();
  const std::size_t count = inputs.size();
  if (count != options.size() || count == 0 || (layout == nullptr && count != 1))
    throw std::logic_error("run_sinkhorn_batch: inconsistent problems and layout");
  const auto n_of = [](const SolveInputs& in) { return in.resident ? in.n : in.a.size(); };
  const auto m_of = [](const SolveInputs& in) { return in.resident ? in.m : in.b.size(); };
  const std::size_t rows = layout ? layout->rows : n_of(inputs[0]);
  const std::size_t cols = layout ? layout->cols : m_of(inputs[0]);

  std::vector<Run> runs(count);
  std::vector<float> F(rows, 0.0f), G(cols, 0.0f);
  for (std::size_t q = 0; q < count; ++q) {
    Run& u = runs[q];
    const SolveOptions& o = *options[q];
    u.in = &inputs[q];
    u.o = &o;
    u.n = n_of(inputs[q]);
    u.m = m_of(inputs[q]);
    u.r0 = layout ? layout->row_begin[q] : 0;
    u.c0 = layout ? layout->col_begin[q] : 0;
    u.s = cost_scale(o.cost);
    u.rho_x = side_rho(o.reach, o.reach_source);
    u.rho_y = side_rho(o.reach, o.reach_target);
    if (inputs[q].resident)
      u.mass_a = inputs[q].mass_a;
    else
      for (float w : inputs[q].a) u.mass_a += w;
    const double diameter = o.diameter > 0 ? o.diameter : inputs[q].diameter;
    u.eps = epsilon_schedule(o, diameter);
    u.stage_count = static_cast<int>(u.eps.size());
    u.total_budget = (u.stage_count - 1) * o.stage_iterations + o.max_iterations;
    // Marginal errors are computed when the tolerance needs them or someone watches; a fixed-ε run with
    // tolerance 0 and no callback iterates without them (benchmark mode).
    u.checking = o.tolerance > 0 || static_cast<bool>(o.progress);
    u.relax = Relaxation(o.overrelaxation, o.scheme, o.overrelaxation_start);
    u.r.cost = o.cost;
    u.r.epsilon = u.eps.back();
    u.r.diameter = diameter;
    u.r.reach_source = u.rho_x;
    u.r.reach_target = u.rho_y;
    u.r.backend = backend.name();
    u.r.device = backend.device();
    u.r.reason = StopReason::kIterationBudget;
    if (!o.initial_f.empty()) std::copy(o.initial_f.begin(), o.initial_f.end(), F.begin() + u.r0);
    if (!o.initial_g.empty()) std::copy(o.initial_g.begin(), o.initial_g.end(), G.begin() + u.c0);
  }
  backend.set_potentials(F, G);

  // A batch lists the blocks of the problems still running (block-diagonal); a finished problem leaves the lists
  // and its potentials stay as they are.
  std::vector<bool> listed(count, true);
  const auto relist = [&](const std::vector<bool>& want) {
    if (!layout || want == listed) return;
    listed = want;
    backend.set_pattern(std::make_shared<const BlockPattern>(
        BlockPattern::block_diagonal(rows, cols, layout->row_blocks, layout->col_blocks, listed)));
  };
  if (layout) {
    listed.assign(count, false);
    relist(std::vector<bool>(count, true));
  }
  const auto running = [&] {
    std::vector<bool> on(count);
    for (std::size_t q = 0; q < count; ++q) on[q] = !runs[q].finished;
    return on;
  };
  std::vector<SegmentParams> segments(count);
  std::vector<float> fh(rows), gh(cols);
  // The marginal errors of `list` at ε eps_of(run), from F, G, fh, gh: on the host from host weights, and for the
  // problems whose weights are resident (a device batch, Problem::on_device) from the backend's, every such problem
  // in one Backend::batch_weighted_sums call per side.
  const auto marginal_errors = [&](const std::vector<Run*>& list, const std::function<double(const Run&)>& eps_of) {
    std::vector<double> out(list.size());
    std::vector<WeightedRange> xr, yr;
    std::vector<std::size_t> at;
    for (std::size_t k = 0; k < list.size(); ++k) {
      const Run& u = *list[k];
      if (u.in->resident) {
        xr.push_back({u.r0, u.n, eps_of(u), u.rho_x});
        yr.push_back({u.c0, u.m, eps_of(u), u.rho_y});
        at.push_back(k);
      } else {
        out[k] = marginal_error(backend, *u.in, u.r0, u.c0, u.f_of(F), u.f_of(fh), u.g_of(G), u.g_of(gh), eps_of(u),
                                u.rho_x, u.rho_y, u.mass_a);
      }
    }
    if (at.empty()) return out;
    std::vector<WeightedSums> sx(at.size()), sy(at.size());
    backend.batch_weighted_sums(Side::kSource, xr, F, fh, sx);
    backend.batch_weighted_sums(Side::kTarget, yr, G, gh, sy);
    for (std::size_t i = 0; i < at.size(); ++i) out[at[i]] = (sx[i].marginal + sy[i].marginal) / list[at[i]]->mass_a;
    return out;
  };
  // Soft c-transforms of every listed problem at the ε of stage stage_of(q), one pass per side for all of them.
  // columns_current: the last iteration was a plain alternating one (f, then g = softmin_cols(f)) on balanced
  // target sides, so softmin_cols(f) is g itself and its pass is not run (gh = g; docs/engine.md, "Checks").
  const auto transforms = [&](const std::function<int(std::size_t)>& stage_of, bool columns_current) {
    for (std::size_t q = 0; q < count; ++q) segments[q] = runs[q].params(stage_of(q));
    PlanParams pp{segments[0].epsilon, segments[0].cost_scale};
    if (layout) pp.segments = segments;
    backend.softmin(pp, Side::kSource, fh);
    if (columns_current)
      std::copy(G.begin(), G.end(), gh.begin());
    else
      backend.softmin(pp, Side::kTarget, gh);
  };

  while (true) {
    // A final stage with no budget left ends before any iteration (max_iterations = 0).
    for (Run& u : runs)
      if (!u.finished && u.final_stage() && u.next_step() == 0) {
        u.reached = u.k;
        u.end_stage();
        u.finished = true;
      }
    relist(running());
    int step = std::numeric_limits<int>::max();
    for (Run& u : runs) {
      if (u.finished) continue;
      u.target = u.in_stage + u.next_step();
      step = std::min(step, u.next_step());
    }
    if (step == std::numeric_limits<int>::max()) break;

    for (std::size_t q = 0; q < count; ++q) segments[q] = runs[q].params(runs[q].k);
    // The iteration before a check runs plain (relaxation.hpp): an over-relaxed iterate's marginal
    // error carries (ω − 1) times its last step, a plain one only the distance to the fixed point.
    std::vector<SegmentParams> last = segments;
    bool split = false;
    for (std::size_t q = 0; q < count; ++q) {
      const Run& u = runs[q];
      if (u.finished || !u.final_stage() || !u.checking || u.in_stage + step != u.target) continue;
      if (last[q].relaxation != 1) last[q].relaxation = 1, split = true;
    }
    const auto iterate = [&](const std::vector<SegmentParams>& seg, int count_now) {
      IterationParams ip{seg[0].epsilon, seg[0].cost_scale, runs[0].o->scheme, seg[0].damping_f, seg[0].damping_g,
                         seg[0].relaxation};
      if (layout) ip.segments = seg;
      return backend.iterate(ip, count_now);
    };
    const bool ok = split ? iterate(segments, step - 1) && iterate(last, 1) : iterate(segments, step);
    std::vector<Run*> stepped;
    for (Run& u : runs) {
      if (u.finished) continue;
      u.in_stage += step;
      u.r.iterations += step;
      u.reached = u.k;
      u.error_current = false;
      stepped.push_back(&u);
    }
    if (!ok) {
      // Problems never share a pair: the non-finite values belong to the problems that hold them (all of them
      // when none can be found, e.g. in padding).
      backend.get_potentials(F, G);
      bool found = false;
      for (Run* u : stepped) found |= !all_finite(u->f_of(F)) || !all_finite(u->g_of(G));
      for (Run* u : stepped) {
        if (found && all_finite(u->f_of(F)) && all_finite(u->g_of(G))) continue;
        u->end_stage();
        u->non_finite(u->k);
      }
    }
    std::vector<Run*> to_check;
    for (Run* u : stepped) {
      if (u->finished || u->in_stage < u->target) continue;
      if (!u->final_stage()) {
        u->end_stage();
        // Intermediate stages are not checked (their fixed point is not the answer); the callback still sees them
        // so a long schedule can be cancelled. marginal_error is NaN there: not computed.
        if (u->o->progress && !u->o->progress(Progress{u->k, u->stage_count, u->eps[u->k], u->r.iterations,
                                                       u->total_budget, std::numeric_limits<double>::quiet_NaN()})) {
          u->r.reason = StopReason::kCancelled;
          u->r.message = "cancelled by the progress callback after " + u->stage_text(u->k);
          u->finished = true;
          continue;
        }
        ++u->k;
        u->in_stage = 0;
        continue;
      }
      if (u->checking) {
        to_check.push_back(u);
      } else if (u->in_stage >= u->o->max_iterations) {
        u->end_stage();
        u->finished = true;
      }
    }
    if (to_check.empty()) continue;
    backend.get_potentials(F, G);
    // Every checked problem's last iteration ran plain (`last` above); alternating, it ended with g =
    // softmin_cols(f) exactly where the target side is balanced (damping 1).
    bool columns_current = runs[0].o->scheme == Scheme::kAlternating;
    for (const Run* u : to_check) columns_current = columns_current && u->rho_y == 0;
    transforms([&](std::size_t q) { return runs[q].k; }, columns_current);
    const std::vector<double> errors = marginal_errors(to_check, [](const Run& u) { return u.eps[u.k]; });
    for (std::size_t c = 0; c < to_check.size(); ++c) {
      Run* u = to_check[c];
      SolveResult& r = u->r;
      const SolveOptions& o = *u->o;
      const int k = u->k;
      r.marginal_error = errors[c];
      u->error_current = true;
      r.checks.push_back(MarginalCheck{r.iterations, u->eps[k], r.marginal_error, u->relax.omega()});
      u->relax.observe(u->in_stage - u->last_check, r.marginal_error);
      u->last_check = u->in_stage;
      if (!std::isfinite(r.marginal_error)) {
        u->end_stage();
        u->non_finite(k);
        continue;
      }
      const bool converged = o.tolerance > 0 && r.marginal_error <= o.tolerance;
      const bool go_on = !o.progress || o.progress(Progress{k, u->stage_count, u->eps[k], r.iterations,
                                                            u->total_budget, r.marginal_error});
      if (converged) {
        r.converged = true;
        r.reason = StopReason::kTolerance;
        r.message = "converged: marginal error " + show(r.marginal_error) + " ≤ tolerance " + show(o.tolerance) +
                    " after " + std::to_string(r.iterations) + " iterations";
      } else if (!go_on) {
        r.reason = StopReason::kCancelled;
        r.message = "cancelled by the progress callback at " + u->stage_text(k) + " after " +
                    std::to_string(r.iterations) + " iterations";
      } else if (u->in_stage < o.max_iterations) {
        continue;
      }
      u->end_stage();
      u->finished = true;
    }
  }

  backend.get_potentials(F, G);
  // The final diagnostics: one more pair of soft c-transforms for the problems whose error is not current.
  std::vector<bool> need(count, false);
  bool any_need = false;
  for (std::size_t q = 0; q < count; ++q) {
    Run& u = runs[q];
    SolveResult& r = u.r;
    if (r.reason != StopReason::kNonFinite && r.reason != StopReason::kCancelled && !r.converged) {
      if (u.o->tolerance == 0) {
        r.reason = StopReason::kFixedIterations;
        r.message = "ran the " + std::to_string(r.iterations) + " iterations asked for (tolerance 0: no check)";
      } else {
        r.reason = StopReason::kIterationBudget;
      }
    }
    // A solve cancelled (or stopped) at an intermediate stage reports the ε its potentials belong to, so that plan
    // operations on the result use the matching plan.
    r.epsilon = u.eps[u.reached];
    if (!u.o->diagnostics && !u.error_current) {
      r.marginal_error = std::numeric_limits<double>::quiet_NaN();
    } else if (!u.error_current && r.reason != StopReason::kNonFinite) {
      need[q] = any_need = true;
    }
  }
  if (any_need) {
    relist(need);
    transforms([&](std::size_t q) { return runs[q].reached; }, false);
    std::vector<Run*> list;
    for (std::size_t q = 0; q < count; ++q)
      if (need[q]) list.push_back(&runs[q]);
    const std::vector<double> errors = marginal_errors(list, [](const Run& u) { return u.r.epsilon; });
    for (std::size_t c = 0; c < list.size(); ++c) {
      Run& u = *list[c];
      u.r.marginal_error = errors[c];
      if (!std::isfinite(u.r.marginal_error)) u.non_finite(u.reached);
    }
  }
  // The dual costs of the problems whose weights are resident, every one in one call per side (dual_cost's).
  std::vector<WeightedRange> xr, yr;
  for (const Run& u : runs)
    if (u.in->resident) {
      xr.push_back({u.r0, u.n, 0, u.rho_x});
      yr.push_back({u.c0, u.m, 0, u.rho_y});
    }
  std::vector<WeightedSums> dual_x(xr.size()), dual_y(yr.size());
  if (!xr.empty()) {
    backend.batch_weighted_sums(Side::kSource, xr, F, {}, dual_x);
    backend.batch_weighted_sums(Side::kTarget, yr, G, {}, dual_y);
  }
  std::size_t resident_index = 0;
  relist(std::vector<bool>(count, true));  // plan operations on the batch see every problem
  std::vector<SolveResult> out;
  out.reserve(count);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (Run& u : runs) {
    SolveResult& r = u.r;
    if (r.reason == StopReason::kIterationBudget)
      r.message = "not converged: marginal error " + show(r.marginal_error) + " > tolerance " +
                  show(u.o->tolerance) + " after max_iterations = " + std::to_string(u.o->max_iterations) +
                  " at the final ε = " + show(r.epsilon);
    const std::span<const float> f = u.f_of(F), g = u.g_of(G);
    if (u.in->resident) {
      r.dual_cost = dual_x[resident_index].dual + dual_y[resident_index].dual;
      ++resident_index;
    } else {
      r.dual_cost = dual_cost(*u.in, f, g, u.rho_x, u.rho_y);
    }
    r.overrelaxation = u.reached == u.stage_count - 1 ? u.relax.omega() : 1.0;
    r.f.assign(f.begin(), f.end());
    r.g.assign(g.begin(), g.end());
    r.seconds = seconds;
    out.push_back(std::move(r));
  }
  return out;
}

SolveResult run_sinkhorn(Backend& backend, const SolveInputs& in, const SolveOptions& o) {
  const SolveOptions* options[] = {&o};
  return std::move(run_sinkhorn_batch(backend, {&in, 1}, options, nullptr)[0]);
}

// For the multiscale loop (engine/src/multiscale.cpp), which runs its stages on several backends.
double solve_marginal_error(const Backend& backend, const SolveInputs& in, const std::vector<float>& f,
                            const std::vector<float>& g, double epsilon, double s, double rho_x, double rho_y,
                            double mass_a) {
  // The soft c-transforms of the potentials the backend holds (f, g: the same, read back by the caller).
  std::vector<float> fh(f.size()), gh(g.size());
  const PlanParams pp{epsilon, s};
  backend.softmin(pp, Side::kSource, fh);
  backend.softmin(pp, Side::kTarget, gh);
  return marginal_error(backend, in, 0, 0, f, fh, g, gh, epsilon, rho_x, rho_y, mass_a);
}
double solve_dual_cost(const SolveInputs& in, const std::vector<float>& f, const std::vector<float>& g, double rho_x,
                       double rho_y) {
  if (in.resident) throw std::logic_error("solve_dual_cost: the multiscale loop reads host weights");
  return dual_term(in.a, f, rho_x) + dual_term(in.b, g, rho_y);
}
double solve_damping(double epsilon, double rho) { return damping(epsilon, rho); }

}  // namespace flashot::detail
