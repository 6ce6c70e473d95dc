// flashot::Problem: validation at the API edge, the common centring of both clouds, and every public operation
// written on top of the backend's streaming primitives.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "backend.hpp"
#include "flashot/flashot.hpp"
#include "multiscale.hpp"
#include "point_order.hpp"
#include "sinkhorn.hpp"
#include "validation.hpp"

namespace flashot {

using detail::show;
using detail::validate_points;
using detail::validate_weights;
using detail::weights_or_uniform;

struct Problem::Impl {
  std::size_t n = 0, m = 0, d = 0;
  std::vector<double> centre;  // (d) subtracted from both clouds: the cost is translation-invariant
  std::vector<float> x, y;     // centred copies
  std::vector<float> a, b;  // host weights; for Problem::on_device only a side given none (uniform), else empty
  double diameter = 0;
  double mass_a = 0, mass_b = 0;
  std::unique_ptr<detail::Backend> backend;
  // Problem::on_device: x and y above stay empty; the operations that read points use the backend's resident ones.
  bool device_input = false;
  unsigned long long input_host_bytes = 0;  // EngineStatistics::input_host_bytes
  BackendOptions options;
  /// Built at the first multiscale solve (docs/multiscale.md): the hierarchies and a backend on permuted points.
  mutable std::unique_ptr<detail::MultiscaleSolver> multiscale;
  /// What the plan operations of the loaded result use: `backend`, or the multiscale plan backend (the certified
  /// block pairs of a multiscale result's potentials, in the caller's order).
  mutable detail::Backend* active = nullptr;
  /// The row pass of the last solve's diagnostics (docs/multiscale.md, "After the solve"): P·[Y | ‖y‖² | 1] of
  /// that solve's result gives its primal cost and, with no further pass, its barycentric projection of the
  /// source, plan row masses and source gradient. Kept for the result whose plan it is (same f, g, ε, cost and
  /// multiscale lists) until the next solve; empty (no f) when no solve computed it or a row mass was not a
  /// positive normal float (a zero-weight row: its projection is the normalized pass's, not 0/0).
  struct RowPass {
    std::vector<float> f, g;
    double epsilon = 0;
    Cost cost = Cost::kSquaredEuclidean;
    bool multiscale = false;
    double truncation = 0, dense_fraction = 0;
    std::vector<float> mean;  // (n×d) T_i = (PY)_i / r_i, centred coordinates
    std::vector<float> mass;  // (n) r_i = (P1)_i
  } row_pass;

  /// The stored row pass when `s` is the result it belongs to (the plan the operations of `s` would load).
  const RowPass* row_pass_of(const SolveResult& s) const {
    const RowPass& c = row_pass;
    if (c.f.empty() || s.epsilon != c.epsilon || s.cost != c.cost || s.multiscale.used != c.multiscale) return nullptr;
    if (c.multiscale && (s.multiscale.truncation != c.truncation || s.multiscale.dense_fraction != c.dense_fraction))
      return nullptr;
    if (s.f != c.f || s.g != c.g) return nullptr;
    return &c;
  }

  detail::MultiscaleSolver& multiscale_solver(std::uint64_t seed) const {
    if (!multiscale || multiscale->seed() != seed)
      multiscale = std::make_unique<detail::MultiscaleSolver>(options, PointsView{x, n, d}, PointsView{y, m, d}, a, b,
                                                              seed);
    return *multiscale;
  }

  detail::PlanParams load(const SolveResult& s) const {
    if (s.f.size() != n || s.g.size() != m)
      throw std::invalid_argument("result must come from this problem: f and g must have n = " + std::to_string(n) +
                                  " and m = " + std::to_string(m) + " values (got " + std::to_string(s.f.size()) +
                                  " and " + std::to_string(s.g.size()) + ")");
    if (!(s.epsilon > 0) || !std::isfinite(s.epsilon))
      throw std::invalid_argument("result.epsilon must be > 0 (got " + show(s.epsilon) + ")");
    if (s.multiscale.used && device_input)
      throw std::invalid_argument("result.multiscale.used is true, but this Problem::on_device problem solves dense "
                                  "only: the result must come from a dense solve");
    if (s.multiscale.used) {
      if (!(s.multiscale.truncation > 0) || !(s.multiscale.dense_fraction > 0))
        throw std::invalid_argument("result.multiscale must come from a multiscale solve: truncation " +
                                    show(s.multiscale.truncation) + " and dense_fraction " +
                                    show(s.multiscale.dense_fraction) + " must be > 0");
      // Any hierarchy certifies the lists of the result's potentials; the solve's own is reused when present.
      detail::MultiscaleSolver& ms = multiscale ? *multiscale : multiscale_solver(0);
      active = &ms.plan_backend(s.multiscale.truncation, s.multiscale.dense_fraction);
    } else {
      active = backend.get();
    }
    active->set_potentials(s.f, s.g);
    return {s.epsilon, detail::cost_scale(s.cost)};
  }

  std::size_t count(Side side) const { return side == Side::kSource ? n : m; }
  const std::vector<float>& points(Side side) const { return side == Side::kSource ? x : y; }
  static Side other(Side side) { return side == Side::kSource ? Side::kTarget : Side::kSource; }

  /// Plan mass of every row (rows = kSource) or column: P·1 or Pᵀ·1.
  std::vector<float> marginal(const detail::PlanParams& p, Side rows) const {
    const std::vector<float> ones(count(other(rows)), 1.0f);
    std::vector<float> out(count(rows));
    active->apply(p, rows, ones, 1, false, out);
    return out;
  }

  void uncentre(std::vector<float>& pts) const {
    // Row by row (no i % d per value: at 10⁶ × 50 values the division alone took ≈ 0.3 s), rows in parallel.
    const auto rows = static_cast<std::int64_t>(d > 0 ? pts.size() / d : 0);
#pragma omp parallel for schedule(static) if (rows * static_cast<std::int64_t>(d) > (std::int64_t{1} << 18))
    for (std::int64_t i = 0; i < rows; ++i) {
      float* row = pts.data() + static_cast<std::size_t>(i) * d;
      for (std::size_t c = 0; c < d; ++c) row[c] = static_cast<float>(row[c] + centre[c]);
    }
  }

  /// ⟨P, C⟩ = s·Σ_i r_i·(‖x_i − T_i‖² + E_i‖y‖² − ‖T_i‖²), T_i = (PY)_i / r_i and E_i‖y‖² = (P‖y‖²)_i / r_i:
  /// one pass with V = [y | ‖y‖² | 1]. The variance form keeps the cancellation to the spread of each row.
  /// `result` (the loaded one, host points only): T and r are kept in row_pass for its later plan operations.
  double primal_cost(const detail::PlanParams& p, const SolveResult* result = nullptr) {
    if (device_input) {
      std::vector<double> terms(n);
      backend->resident_primal_terms(p, terms);
      double cost = 0;
      for (const double t : terms) cost += t;  // row order, as below
      return p.cost_scale * cost;
    }
    const std::size_t k = d + 2;
    std::vector<float> v(m * k);
#pragma omp parallel for schedule(static) if (m * k > (std::size_t{1} << 18))
    for (std::int64_t jj = 0; jj < static_cast<std::int64_t>(m); ++jj) {
      const auto j = static_cast<std::size_t>(jj);
      double norm = 0;
      for (std::size_t c = 0; c < d; ++c) {
        v[j * k + c] = y[j * d + c];
        norm += static_cast<double>(y[j * d + c]) * y[j * d + c];
      }
      v[j * k + d] = static_cast<float>(norm);
      v[j * k + d + 1] = 1.0f;
    }
    std::vector<float> out(n * k);
    active->apply(p, Side::kSource, v, k, false, out);
    v = {};
    RowPass keep;
    bool usable = result != nullptr;
    if (usable) {
      keep.mean.resize(n * d);
      keep.mass.resize(n);
    }
    // Each row's term in parallel, then their sum in row order (the same sum whatever the threads).
    std::vector<double> terms(n, 0.0);
    bool normal = true;  // every row mass a positive normal float
    const bool keeping = usable;
#pragma omp parallel for schedule(static) reduction(&& : normal) if (n * d > (std::size_t{1} << 18))
    for (std::int64_t ii = 0; ii < static_cast<std::int64_t>(n); ++ii) {
      const auto i = static_cast<std::size_t>(ii);
      const double r = out[i * k + d + 1];
      // A row mass that is not a positive normal float: the normalized pass decides that row's projection.
      normal = normal && r >= std::numeric_limits<float>::min() && std::isfinite(r);
      if (!(r > 0)) continue;
      double dist = 0, tnorm = 0;
      for (std::size_t c = 0; c < d; ++c) {
        const double t = out[i * k + c] / r;
        if (keeping) keep.mean[i * d + c] = static_cast<float>(t);
        dist += (x[i * d + c] - t) * (x[i * d + c] - t);
        tnorm += t * t;
      }
      if (keeping) keep.mass[i] = out[i * k + d + 1];
      terms[i] = r * (dist + std::max(0.0, out[i * k + d] / r - tnorm));
    }
    usable = usable && normal;
    double cost = 0;
    for (const double term : terms) cost += term;  // rows without mass left their term at 0
    if (usable) {
      out = {};
      const SolveResult& s = *result;
      keep.f = s.f;
      keep.g = s.g;
      keep.epsilon = s.epsilon;
      keep.cost = s.cost;
      keep.multiscale = s.multiscale.used;
      keep.truncation = s.multiscale.truncation;
      keep.dense_fraction = s.multiscale.dense_fraction;
      row_pass = std::move(keep);
    }
    return p.cost_scale * cost;
  }
};

Problem::Problem(PointsView x, PointsView y, std::span<const float> a, std::span<const float> b,
                 const BackendOptions& options)
    : impl_(std::make_unique<Impl>()) {
  validate_points(x, "x");
  validate_points(y, "y");
  if (x.d != y.d)
    throw std::invalid_argument("x.d and y.d must match (got " + std::to_string(x.d) + " and " + std::to_string(y.d) +
                                ")");
  validate_weights(a, x.n, "a", "x");
  validate_weights(b, y.n, "b", "y");
  if (options.threads < 0)
    throw std::invalid_argument("threads must be ≥ 0, 0 = all hardware threads (got " +
                                std::to_string(options.threads) + ")");
  detail::validate_cuda_tuning(options.cuda);
  detail::validate_point_order(options.point_order, false);
  Impl& p = *impl_;
  p.n = x.n;
  p.m = y.n;
  p.d = x.d;
  // Centre on the middle of the union's bounding box: the cost is translation-invariant, and small coordinates
  // keep 2⟨x,y⟩ accurate in fp32 at small ε.
  std::vector<double> lo(p.d, std::numeric_limits<double>::infinity());
  std::vector<double> hi(p.d, -std::numeric_limits<double>::infinity());
  for (const PointsView* cloud : {&x, &y})
    for (std::size_t i = 0; i < cloud->n; ++i)
      for (std::size_t c = 0; c < p.d; ++c) {
        lo[c] = std::min<double>(lo[c], cloud->data[i * p.d + c]);
        hi[c] = std::max<double>(hi[c], cloud->data[i * p.d + c]);
      }
  p.centre.resize(p.d);
  double diam2 = 0;
  for (std::size_t c = 0; c < p.d; ++c) {
    p.centre[c] = 0.5 * (lo[c] + hi[c]);
    diam2 += (hi[c] - lo[c]) * (hi[c] - lo[c]);
  }
  p.diameter = std::sqrt(diam2);
  const auto centred = [&](const PointsView& v) {
    std::vector<float> out(v.data.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(v.data[i] - p.centre[i % p.d]);
    return out;
  };
  p.x = centred(x);
  p.y = centred(y);
  p.a = weights_or_uniform(a, p.n);
  p.b = weights_or_uniform(b, p.m);
  for (float w : p.a) p.mass_a += w;
  for (float w : p.b) p.mass_b += w;
  p.input_host_bytes = (p.n + p.m) * p.d * sizeof(float) + (a.size() + b.size()) * sizeof(float);
  const detail::ProblemData data{{p.x, p.n, p.d}, {p.y, p.m, p.d}, p.a, p.b};
  // The one place where the caller's order of the points meets the backend's (docs/engine.md, "Point order").
  p.backend = detail::make_problem_backend(options, data);
  p.active = p.backend.get();
  p.options = options;
}

Problem Problem::on_device(DevicePointsView x, DevicePointsView y, DeviceWeights a, DeviceWeights b,
                           const BackendOptions& options) {
  const auto shape = [](const DevicePointsView& v, const std::string& name) {
    if (v.n == 0) throw std::invalid_argument(name + " must not be empty (got " + name + ".n = 0)");
    if (v.d == 0) throw std::invalid_argument(name + ".d must be ≥ 1 (got 0)");
    if (v.data == nullptr)
      throw std::invalid_argument(name + ".data must point to " + name + ".n·" + name + ".d = " +
                                  std::to_string(v.n * v.d) + " values on the device (got a null pointer)");
  };
  shape(x, "x");
  shape(y, "y");
  if (x.d != y.d)
    throw std::invalid_argument("x.d and y.d must match (got " + std::to_string(x.d) + " and " + std::to_string(y.d) +
                                ")");
  if (y.device != x.device)
    throw std::invalid_argument("x and y must be on the same CUDA device (x is on cuda:" + std::to_string(x.device) +
                                ", y on cuda:" + std::to_string(y.device) + ")");
  const auto weight_shape = [&](const DeviceWeights& w, std::size_t n, const std::string& name,
                                const std::string& points) {
    if (w.data == nullptr) return;
    if (w.n != n)
      throw std::invalid_argument(name + " must be empty (uniform) or hold " + points + ".n = " + std::to_string(n) +
                                  " weights (got " + std::to_string(w.n) + ")");
    if (w.device != x.device)
      throw std::invalid_argument(name + " must be on the points' CUDA device cuda:" + std::to_string(x.device) +
                                  " (got cuda:" + std::to_string(w.device) + ")");
  };
  weight_shape(a, x.n, "a", "x");
  weight_shape(b, y.n, "b", "y");
  if (options.threads < 0)
    throw std::invalid_argument("threads must be ≥ 0, 0 = all hardware threads (got " +
                                std::to_string(options.threads) + ")");
  detail::validate_cuda_tuning(options.cuda);
  detail::validate_point_order(options.point_order, true);
  // Refusals that need no device (the CPU backend, several GPUs, a build without CUDA) come before any device call.
  detail::refuse_device_input(options, x.device);

  Problem problem;
  problem.impl_ = std::make_unique<Impl>();
  Impl& p = *problem.impl_;
  p.n = x.n;
  p.m = y.n;
  p.d = x.d;
  p.device_input = true;
  // Finite check and the union's bounding box on the device: only the 2·d bounds come back (and, on the error
  // path, the offending row), so the centre and diameter are computed from exactly the values the host path uses.
  detail::DeviceScan scan;
  scan.lo.assign(p.d, std::numeric_limits<float>::infinity());
  scan.hi.assign(p.d, -std::numeric_limits<float>::infinity());
  for (const auto& [view, name] : {std::pair{&x, "x"}, std::pair{&y, "y"}}) {
    detail::scan_device_points(*view, name, scan);
    if (scan.bad_row >= 0)
      for (std::size_t c = 0; c < p.d; ++c)
        if (!std::isfinite(scan.row[c]))
          throw std::invalid_argument(detail::non_finite_message(name, std::size_t(scan.bad_row), c, scan.row[c]));
  }
  // Device weights never pass through host memory: a scan on the device checks them (finite, ≥ 0, positive total:
  // validate_weights' checks and messages; only an offending value is read back, for its message) and gives the
  // total and the smallest weight; the Sinkhorn loop's weighted sums are the backend's (SolveInputs::resident).
  // A side given no weights is uniform, filled in here as on the host path.
  detail::DeviceWeightScan wa, wb;
  for (const auto& [w, scan_of, name] : {std::tuple{&a, &wa, "a"}, std::tuple{&b, &wb, "b"}}) {
    if (w->data == nullptr) continue;
    *scan_of = detail::scan_device_weights(*w, name);
    if (scan_of->bad_index >= 0)
      throw std::invalid_argument(std::string(name) + "[" + std::to_string(scan_of->bad_index) +
                                  "] must be a finite weight ≥ 0 (got " + show(scan_of->bad_value) + ")");
    if (!(scan_of->total > 0))
      throw std::invalid_argument(std::string(name) + " must have a positive total mass (got " +
                                  show(scan_of->total) + ")");
  }
  p.centre.resize(p.d);
  double diam2 = 0;
  for (std::size_t c = 0; c < p.d; ++c) {
    const double lo = scan.lo[c], hi = scan.hi[c];
    p.centre[c] = 0.5 * (lo + hi);
    diam2 += (hi - lo) * (hi - lo);
  }
  p.diameter = std::sqrt(diam2);
  if (a.data == nullptr) p.a = weights_or_uniform({}, p.n);
  if (b.data == nullptr) p.b = weights_or_uniform({}, p.m);
  p.mass_a = wa.total;
  p.mass_b = wb.total;
  for (float w : p.a) p.mass_a += w;
  for (float w : p.b) p.mass_b += w;
  detail::ProblemData data{{{}, p.n, p.d}, {{}, p.m, p.d}, p.a, p.b};
  data.device_x = x.data;
  data.device_y = y.data;
  data.device = x.device;
  data.centre = p.centre;
  data.device_a = a.data;
  data.device_b = b.data;
  data.min_a = wa.smallest;
  data.min_b = wb.smallest;
  p.backend = detail::make_problem_backend(options, data);
  p.active = p.backend.get();
  p.options = options;
  return problem;
}

Problem::~Problem() = default;
Problem::Problem(Problem&&) noexcept = default;
Problem& Problem::operator=(Problem&&) noexcept = default;

std::size_t Problem::n() const { return impl_->n; }
std::size_t Problem::m() const { return impl_->m; }
std::size_t Problem::d() const { return impl_->d; }
std::string Problem::backend_name() const { return impl_->backend->name(); }
std::string Problem::device_name() const { return impl_->backend->device(); }
EngineStatistics Problem::statistics() const {
  EngineStatistics s = impl_->backend->statistics();
  s.input_host_bytes = impl_->input_host_bytes;
  return s;
}
double Problem::diameter() const { return impl_->diameter; }

SolveResult Problem::solve(const SolveOptions& options) {
  const Impl& p = *impl_;
  detail::validate_solve_options(options, p.n, p.m, p.mass_a, p.mass_b, p.diameter);
  detail::require(options.multiscale == Multiscale::kAuto || options.multiscale == Multiscale::kOn ||
                      options.multiscale == Multiscale::kOff,
                  "multiscale must be a Multiscale value", static_cast<double>(options.multiscale));
  detail::require(std::isfinite(options.multiscale_truncation) && options.multiscale_truncation >= 0,
                  "multiscale_truncation must be > 0, or 0 for automatic", options.multiscale_truncation);
  detail::require(options.multiscale_dense_fraction > 0 && options.multiscale_dense_fraction <= 1,
                  "multiscale_dense_fraction must be in (0, 1]", options.multiscale_dense_fraction);
  const auto start = std::chrono::steady_clock::now();
  const double pairs = static_cast<double>(p.n) * static_cast<double>(p.m);
  // A device-input problem keeps no host copy of the points, which the hierarchy is built from: kOn is refused
  // before any work, kAuto stays dense.
  if (p.device_input && options.multiscale == Multiscale::kOn)
    throw std::invalid_argument(
        "multiscale = on needs the points on the host; a Problem::on_device problem solves dense (got multiscale = on "
        "for n·m = " + show(pairs) + ")");
  // kAuto: from the backend's threshold up, and only for a solve that stops on its tolerance — a fixed count of
  // iterations at one ε (tolerance 0, the benchmark mode) is by definition the dense solver's.
  const double threshold = p.backend->name() == "cpu" ? kMultiscaleAutoPairs : kMultiscaleAutoPairsCuda;
  const bool automatic = options.multiscale == Multiscale::kAuto;
  const bool multiscale = !p.device_input && (options.multiscale == Multiscale::kOn ||
                                              (automatic && pairs >= threshold && options.tolerance > 0));
  impl_->row_pass = {};  // belongs to the previous solve's result
  SolveResult r;
  if (multiscale) {
    r = p.multiscale_solver(options.multiscale_seed).solve(options, p.diameter);
    r.multiscale.reason = automatic ? "auto: n·m = " + show(pairs) + " ≥ " + show(threshold) : "multiscale on";
  } else {
    p.backend->set_pattern(nullptr);
    detail::SolveInputs in{p.a, p.b, p.diameter};
    if (p.device_input) {  // the weights are the backend's (device weights never come to the host)
      in = {{}, {}, p.diameter, true, p.n, p.m, p.mass_a};
    }
    r = detail::run_sinkhorn(*p.backend, in, options);
    r.multiscale.reason = !automatic         ? "multiscale off"
                          : p.device_input   ? "auto: device input (no host copy of the points)"
                          : pairs < threshold ? "auto: n·m = " + show(pairs) + " < " + show(threshold)
                                              : "auto: tolerance 0 (a fixed number of iterations)";
  }
  r.primal_cost = std::numeric_limits<double>::quiet_NaN();
  if (r.reason != StopReason::kNonFinite && options.diagnostics) {
    // One row pass P·[Y | ‖y‖² | 1]: the primal cost now, the source's barycentric projection, row masses and
    // gradient of this result later (row_pass; docs/multiscale.md, "After the solve").
    r.primal_cost = impl_->primal_cost(p.load(r), p.device_input ? nullptr : &r);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::vector<float> Problem::apply_plan(const SolveResult& s, std::span<const float> v, std::size_t k) const {
  const detail::PlanParams pp = impl_->load(s);
  if (k == 0) throw std::invalid_argument("k must be ≥ 1 (got 0)");
  if (v.size() != impl_->m * k)
    throw std::invalid_argument("v must hold m·k = " + std::to_string(impl_->m * k) + " values (got " +
                                std::to_string(v.size()) + ")");
  std::vector<float> out(impl_->n * k);
  impl_->active->apply(pp, Side::kSource, v, k, false, out);
  return out;
}

std::vector<float> Problem::apply_plan_transpose(const SolveResult& s, std::span<const float> u,
                                                 std::size_t k) const {
  const detail::PlanParams pp = impl_->load(s);
  if (k == 0) throw std::invalid_argument("k must be ≥ 1 (got 0)");
  if (u.size() != impl_->n * k)
    throw std::invalid_argument("u must hold n·k = " + std::to_string(impl_->n * k) + " values (got " +
                                std::to_string(u.size()) + ")");
  std::vector<float> out(impl_->m * k);
  impl_->active->apply(pp, Side::kTarget, u, k, false, out);
  return out;
}

std::vector<float> Problem::row_marginal(const SolveResult& s) const {
  if (const Impl::RowPass* c = impl_->row_pass_of(s)) return c->mass;
  return impl_->marginal(impl_->load(s), Side::kSource);
}

std::vector<float> Problem::column_marginal(const SolveResult& s) const {
  return impl_->marginal(impl_->load(s), Side::kTarget);
}

std::vector<float> Problem::barycentric(const SolveResult& s, Side from) const {
  const Impl& p = *impl_;
  if (const Impl::RowPass* c = from == Side::kSource ? p.row_pass_of(s) : nullptr) {
    std::vector<float> out = c->mean;  // the diagnostics' row pass: (PY)_i / (P1)_i
    p.uncentre(out);
    return out;
  }
  const detail::PlanParams pp = p.load(s);
  std::vector<float> out(p.count(from) * p.d);
  if (p.device_input)
    p.backend->apply_points(pp, from, true, out);
  else
    p.active->apply(pp, from, p.points(Impl::other(from)), p.d, true, out);
  p.uncentre(out);
  return out;
}

std::vector<float> Problem::map_points(const SolveResult& s, PointsView queries, Side from) const {
  const Impl& p = *impl_;
  const detail::PlanParams pp = p.load(s);
  if (queries.n == 0) return {};
  validate_points(queries, "queries");
  if (queries.d != p.d)
    throw std::invalid_argument("queries.d must equal the problem's d = " + std::to_string(p.d) + " (got " +
                                std::to_string(queries.d) + ")");
  std::vector<float> q(queries.data.size());
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(queries.data[i] - p.centre[i % p.d]);
  std::vector<float> out(queries.n * p.d);
  if (p.device_input)
    p.backend->map_resident(pp, from, {q, queries.n, p.d}, out);
  else
    p.active->apply_queries(pp, from, {q, queries.n, p.d}, p.points(Impl::other(from)), p.d, out);
  p.uncentre(out);
  return out;
}

LabelTransfer Problem::transfer_labels(const SolveResult& s, Side labels_on, std::span<const std::int32_t> labels,
                                       std::size_t classes) const {
  const Impl& p = *impl_;
  const detail::PlanParams pp = p.load(s);
  const std::size_t src = p.count(labels_on);
  const std::size_t dst = p.count(Impl::other(labels_on));
  const std::string side = labels_on == Side::kSource ? "n" : "m";
  if (labels.size() != src)
    throw std::invalid_argument("labels must hold one label per point, " + side + " = " + std::to_string(src) +
                                " (got " + std::to_string(labels.size()) + ")");
  if (classes == 0) throw std::invalid_argument("classes must be ≥ 1 (got 0)");
  for (std::size_t i = 0; i < src; ++i)
    if (labels[i] < -1 || (labels[i] >= 0 && static_cast<std::size_t>(labels[i]) >= classes))
      throw std::invalid_argument("labels[" + std::to_string(i) + "] must be in [0, classes = " +
                                  std::to_string(classes) + ") or −1 for missing (got " + std::to_string(labels[i]) +
                                  ")");
  LabelTransfer t;
  t.points = dst;
  t.classes = classes;
  t.probabilities.assign(dst * classes, 0.0f);
  // Classes are transported a chunk at a time, so the one-hot input never holds more than src × kChunk values.
  constexpr std::size_t kChunk = 32;
  const Side rows = Impl::other(labels_on);
  for (std::size_t c0 = 0; c0 < classes; c0 += kChunk) {
    const std::size_t kc = std::min(kChunk, classes - c0);
    std::vector<float> onehot(src * kc, 0.0f);
    bool any = false;
    for (std::size_t i = 0; i < src; ++i) {
      const std::int32_t l = labels[i];
      if (l >= 0 && static_cast<std::size_t>(l) >= c0 && static_cast<std::size_t>(l) < c0 + kc) {
        onehot[i * kc + (l - c0)] = 1.0f;
        any = true;
      }
    }
    if (!any) continue;
    std::vector<float> mass(dst * kc);
    p.active->apply(pp, rows, onehot, kc, false, mass);
    for (std::size_t j = 0; j < dst; ++j)
      for (std::size_t c = 0; c < kc; ++c) t.probabilities[j * classes + c0 + c] = mass[j * kc + c];
  }
  t.label.assign(dst, -1);
  t.confidence.assign(dst, 0.0f);
  t.entropy.assign(dst, 0.0f);
  for (std::size_t j = 0; j < dst; ++j) {
    float* row = t.probabilities.data() + j * classes;
    double total = 0;
    for (std::size_t c = 0; c < classes; ++c) total += row[c];
    if (!(total > 0)) {
      std::fill(row, row + classes, 0.0f);
      continue;
    }
    double entropy = 0;
    std::size_t best = 0;
    for (std::size_t c = 0; c < classes; ++c) {
      const double q = row[c] / total;
      row[c] = static_cast<float>(q);
      if (q > 0) entropy -= q * std::log(q);
      if (row[c] > row[best]) best = c;
    }
    t.label[j] = static_cast<std::int32_t>(best);
    t.confidence[j] = row[best];
    t.entropy[j] = static_cast<float>(entropy);
  }
  return t;
}

std::vector<float> Problem::gradient(const SolveResult& s, Side wrt) const {
  const Impl& p = *impl_;
  // The diagnostics' row pass of this result (never kept for device points) answers the source side: no load.
  const Impl::RowPass* c = wrt == Side::kSource ? p.row_pass_of(s) : nullptr;
  const detail::PlanParams pp = c ? detail::PlanParams{s.epsilon, detail::cost_scale(s.cost)} : p.load(s);
  // ∇ = 2s·r_i·(x_i − T(x_i)): the same as 2s(r_i x_i − (PY)_i), written so the difference is taken between points
  // (and independent of the centring).
  const std::size_t count = p.count(wrt);
  if (p.device_input) {  // the same formula on the device, over the backend's resident points
    std::vector<float> g(count * p.d);
    p.backend->points_gradient(pp, wrt, g);
    return g;
  }
  std::vector<float> t, r;
  if (c) {
    t = c->mean;
    r = c->mass;
  } else {
    t.resize(count * p.d);
    p.active->apply(pp, wrt, p.points(Impl::other(wrt)), p.d, true, t);
    r = p.marginal(pp, wrt);
  }
  const std::vector<float>& pts = p.points(wrt);
  std::vector<float> g(count * p.d);
  for (std::size_t i = 0; i < count; ++i)
    for (std::size_t c = 0; c < p.d; ++c)
      g[i * p.d + c] = static_cast<float>(2.0 * pp.cost_scale * r[i] *
                                          (static_cast<double>(pts[i * p.d + c]) - t[i * p.d + c]));
  return g;
}

TopKCoupling Problem::top_k(const SolveResult& s, std::size_t k) const {
  const Impl& p = *impl_;
  const detail::PlanParams pp = p.load(s);
  if (k == 0) throw std::invalid_argument("k must be ≥ 1 (got 0)");
  TopKCoupling t;
  t.rows = p.n;
  t.k = std::min(k, p.m);
  t.columns.resize(t.rows * t.k);
  t.values.resize(t.rows * t.k);
  p.active->top_k(pp, t.k, t.columns, t.values);
  return t;
}

CTransform Problem::c_transform(Side rows, std::span<const float> h, Cost cost) const {
  const Impl& p = *impl_;
  const std::size_t count = p.count(rows);
  const std::size_t other = p.count(Impl::other(rows));
  const std::string name = rows == Side::kSource ? "g" : "f";
  if (h.size() != other)
    throw std::invalid_argument("the potential " + name + " must hold " + std::to_string(other) +
                                " values, one per point of the other side (got " + std::to_string(h.size()) + ")");
  // One branch-free pass (it vectorises) says whether any value is not finite; only then is the first one looked for.
  unsigned not_finite = 0;  // an all-ones exponent: ±∞ or NaN
  for (const float v : h) not_finite |= unsigned((std::bit_cast<std::uint32_t>(v) & 0x7f800000u) == 0x7f800000u);
  if (not_finite != 0)
    for (std::size_t j = 0; j < h.size(); ++j)
      if (!std::isfinite(h[j]))
        throw std::invalid_argument("the potential " + name + "[" + std::to_string(j) + "] must be finite (got " +
                                    show(h[j]) + ")");
  CTransform t;
  t.rows = rows;
  t.cost = cost;
  p.backend->c_transform_rounded(detail::cost_scale(cost), rows, h, count, t.values, t.index);
  return t;
}

CTransform Problem::c_transform(const SolveResult& s, Side rows) const {
  const Impl& p = *impl_;
  if (s.f.size() != p.n || s.g.size() != p.m)
    throw std::invalid_argument("result must come from this problem: f and g must have n = " + std::to_string(p.n) +
                                " and m = " + std::to_string(p.m) + " values (got " + std::to_string(s.f.size()) +
                                " and " + std::to_string(s.g.size()) + ")");
  return c_transform(rows, rows == Side::kSource ? std::span<const float>(s.g) : std::span<const float>(s.f), s.cost);
}

CTransformGradient Problem::c_transform_gradient(const CTransform& t, std::span<const float> w) const {
  const Impl& p = *impl_;
  const std::size_t count = p.count(t.rows);
  const std::size_t other = p.count(Impl::other(t.rows));
  if (t.index.size() != count || t.values.size() != count)
    throw std::invalid_argument("the c-transform must come from this problem: " + std::to_string(count) +
                                " values and indices (got " + std::to_string(t.values.size()) + " and " +
                                std::to_string(t.index.size()) + ")");
  if (!w.empty() && w.size() != count)
    throw std::invalid_argument("the cotangent w must hold " + std::to_string(count) + " values or none (got " +
                                std::to_string(w.size()) + ")");
  if (p.device_input)
    throw std::invalid_argument("c_transform_gradient reads the points on the host; this Problem::on_device problem "
                                "keeps them on cuda:" + std::to_string(p.options.device) +
                                " only (build the Problem from host arrays for the gradient)");
  const double s = detail::cost_scale(t.cost);
  const std::vector<float>& pts = p.points(t.rows);
  const std::vector<float>& qts = p.points(Impl::other(t.rows));
  CTransformGradient g;
  g.points.assign(count * p.d, 0.0f);
  g.other.assign(other * p.d, 0.0f);
  std::vector<double> pot(other, 0.0), oth(other * p.d, 0.0);
  for (std::size_t i = 0; i < count; ++i) {
    const std::int32_t j = t.index[i];
    if (j < 0 || static_cast<std::size_t>(j) >= other)
      throw std::invalid_argument("the c-transform's index[" + std::to_string(i) + "] must be in [0, " +
                                  std::to_string(other) + ") (got " + std::to_string(j) + ")");
    const double wi = w.empty() ? 1.0 : w[i];
    pot[j] -= wi;
    for (std::size_t c = 0; c < p.d; ++c) {
      const double grad = wi * 2 * s * (static_cast<double>(pts[i * p.d + c]) - qts[j * p.d + c]);
      g.points[i * p.d + c] = static_cast<float>(grad);
      oth[j * p.d + c] -= grad;
    }
  }
  g.potential.assign(pot.begin(), pot.end());
  g.other.assign(oth.begin(), oth.end());
  return g;
}

namespace {
/// The three solves of the debiased divergence and their combination, for either kind of input.
DivergenceResult divergence_of(Problem& xy, Problem& xx, Problem& yy, const SolveOptions& options) {
  // The warm start sizes belong to the x–y problem; the symmetric problems start from zero.
  SolveOptions self = options;
  self.initial_f.clear();
  self.initial_g.clear();
  // One ε for all three terms, or the debiasing is wrong: a relative blur is taken against the x–y diameter.
  if (options.blur_relative > 0 && options.diameter == 0) self.diameter = xy.diameter();
  DivergenceResult r;
  r.xy = xy.solve(options);
  r.xx = xx.solve(self);
  r.yy = yy.solve(self);
  r.divergence = r.xy.dual_cost - 0.5 * r.xx.dual_cost - 0.5 * r.yy.dual_cost;
  return r;
}
}  // namespace

DivergenceResult sinkhorn_divergence(PointsView x, PointsView y, std::span<const float> a, std::span<const float> b,
                                     const SolveOptions& options, const BackendOptions& backend) {
  Problem xy(x, y, a, b, backend);
  Problem xx(x, x, a, a, backend);
  Problem yy(y, y, b, b, backend);
  return divergence_of(xy, xx, yy, options);
}

DivergenceResult sinkhorn_divergence_on_device(DevicePointsView x, DevicePointsView y, DeviceWeights a,
                                               DeviceWeights b, const SolveOptions& options,
                                               const BackendOptions& backend) {
  Problem xy = Problem::on_device(x, y, a, b, backend);
  Problem xx = Problem::on_device(x, x, a, a, backend);
  Problem yy = Problem::on_device(y, y, b, b, backend);
  return divergence_of(xy, xx, yy, options);
}

}  // namespace flashot
