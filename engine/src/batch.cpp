// Batches of problems (flashot/batch.hpp, docs/engine.md "Batches"): one concatenated problem, each problem's
// points centred on its own bounding box's middle (as Problem does) and padded to whole blocks with zero-weight
// points at the origin, a block-diagonal pattern with one segment per problem, and the Sinkhorn loop of
// sinkhorn.cpp run for all of them at once.
//
// Padding: a padded column has weight 0, so its bias is −∞ and it adds nothing to any soft c-transform or plan
// entry; a padded row has weight 0, so it carries no plan mass (its potential is computed, then dropped). Reports
// read only each problem's real rows and columns (SolveInputs hold their weights; Run slices f and g).
#include "flashot/batch.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <omp.h>

#include "backend.hpp"
#include "block_pattern.hpp"
#include "sinkhorn.hpp"
#include "validation.hpp"

namespace flashot {

namespace {

std::size_t round_up(std::size_t n) { return (n + detail::kBlockSize - 1) / detail::kBlockSize * detail::kBlockSize; }

/// Prefixes an engine error with the problem it belongs to.
template <class F>
void for_problem(std::size_t q, F&& check) {
  try {
    check();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("batch problem " + std::to_string(q) + ": " + e.what());
  }
}

/// A cloud pair's bounding box in float (the min and max of floats are floats: the same box as in double).
struct Box {
  std::vector<float> lo, hi;
  explicit Box(std::size_t d)
      : lo(d, std::numeric_limits<float>::infinity()), hi(d, -std::numeric_limits<float>::infinity()) {}
  /// Widens the box by the points; false when a coordinate is not finite (the box is then meaningless).
  bool add(const PointsView& p) {
    const std::size_t d = p.d;
    const float* v = p.data.data();
    float* __restrict__ l = lo.data();
    float* __restrict__ h = hi.data();
    unsigned bad = 0;  // v − v is 0 for every finite v and NaN for ±∞ and NaN
    for (std::size_t i = 0; i < p.n; ++i, v += d)
      for (std::size_t c = 0; c < d; ++c) {
        l[c] = v[c] < l[c] ? v[c] : l[c];
        h[c] = v[c] > h[c] ? v[c] : h[c];
        bad |= !(v[c] - v[c] == 0.0f);
      }
    return bad == 0;
  }
};

/// out (round_up(p.n) × d) = p − centre as (float)((double)v − centre[c]), then zero rows (padding).
void centred(const PointsView& p, const std::vector<double>& centre, std::span<float> out) {
  const std::size_t d = p.d;
  const float* v = p.data.data();
  float* o = out.data();
  const double* m = centre.data();
  for (std::size_t i = 0; i < p.n; ++i, v += d, o += d)
    for (std::size_t c = 0; c < d; ++c) o[c] = static_cast<float>(static_cast<double>(v[c]) - m[c]);
  std::fill(out.begin() + p.n * d, out.end(), 0.0f);
}

/// The batch's primal costs ⟨P, C⟩ from per-row terms (the backend's rows; `terms` fills them when some problem
/// asks for diagnostics), each problem's rows summed in order and scaled by its cost scale: results[q].primal_cost,
/// NaN where not asked for or non-finite.
template <class Terms>
void add_primal_costs(const detail::BatchLayout& layout, std::span<const std::size_t> n,
                      const std::vector<bool>& diagnostics, std::vector<SolveResult>& results, Terms&& terms) {
  bool any = false;
  std::vector<detail::SegmentParams> seg(results.size());
  for (std::size_t q = 0; q < results.size(); ++q) {
    results[q].primal_cost = std::numeric_limits<double>::quiet_NaN();
    seg[q] = {results[q].epsilon, detail::cost_scale(results[q].cost), 1, 1};
    any |= diagnostics[q] && results[q].reason != StopReason::kNonFinite;
  }
  if (!any) return;
  detail::PlanParams pp{seg[0].epsilon, seg[0].cost_scale};
  pp.segments = seg;
  const std::vector<double> t = terms(pp);
  for (std::size_t q = 0; q < results.size(); ++q) {
    if (!diagnostics[q] || results[q].reason == StopReason::kNonFinite) continue;
    double cost = 0;
    for (std::size_t i = layout.row_begin[q]; i < layout.row_begin[q] + n[q]; ++i) cost += t[i];
    results[q].primal_cost = seg[q].cost_scale * cost;
  }
}

/// Both entry points' end: the Sinkhorn loop over the concatenation, the primal costs of the problems that ask
/// for diagnostics (`terms`, as add_primal_costs), and the wall time since `start` in every result.
template <class Problem, class Terms>
std::vector<SolveResult> run_and_cost(std::span<const Problem> problems, detail::Backend& backend,
                                      std::span<const detail::SolveInputs> inputs, const detail::BatchLayout& layout,
                                      std::chrono::steady_clock::time_point start, Terms&& terms) {
  const std::size_t count = problems.size();
  std::vector<const SolveOptions*> opts(count);
  std::vector<std::size_t> rows_of(count);
  std::vector<bool> diagnostics(count);
  for (std::size_t q = 0; q < count; ++q) {
    opts[q] = &problems[q].options;
    rows_of[q] = problems[q].x.n;
    diagnostics[q] = problems[q].options.diagnostics;
  }
  std::vector<SolveResult> results = detail::run_sinkhorn_batch(backend, inputs, opts, &layout);
  add_primal_costs(layout, rows_of, diagnostics, results, std::forward<Terms>(terms));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (SolveResult& r : results) r.seconds = seconds;
  return results;
}

}  // namespace

std::vector<SolveResult> solve_batch(std::span<const BatchProblem> problems, const BackendOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (problems.empty()) throw std::invalid_argument("solve_batch needs at least one problem (got none)");
  // Shards combined on the host take the lists (their boundaries fall on blocks once the batch has 1024 rows per
  // shard); NCCL-combined CUDA shards and several processes do not yet.
  if (options.ranks > 1 || (options.devices.size() > 1 && options.nccl && options.backend != BackendKind::kCpu))
    throw std::runtime_error("solve_batch runs on one process and, on several GPUs, only with nccl = false (shards "
                             "combined on the host): got ranks = " + std::to_string(options.ranks) + ", " +
                             std::to_string(options.devices.size()) + " devices with nccl on (docs/engine.md, "
                             "\"Batches\")");
  const std::size_t count = problems.size();
  const std::size_t d = problems[0].x.d;
  detail::BatchLayout layout;
  layout.row_blocks.push_back(0);
  layout.col_blocks.push_back(0);
  for (std::size_t q = 0; q < count; ++q) {
    const BatchProblem& p = problems[q];
    if (p.x.n == 0 || p.y.n == 0)
      throw std::invalid_argument("batch problem " + std::to_string(q) + " is empty: its source has " +
                                  std::to_string(p.x.n) + " points and its target " + std::to_string(p.y.n) +
                                  " (every problem needs at least one point on each side)");
    // Shapes here; the points' finiteness in the one pass over them below (Box::add).
    for_problem(q, [&] {
      detail::validate_point_shape(p.x, "x");
      detail::validate_point_shape(p.y, "y");
      detail::validate_weights(p.a, p.x.n, "a", "x");
      detail::validate_weights(p.b, p.y.n, "b", "y");
    });
    if (p.x.d != d || p.y.d != d)
      throw std::invalid_argument("batch problem " + std::to_string(q) + " has dimension x.d = " +
                                  std::to_string(p.x.d) + ", y.d = " + std::to_string(p.y.d) +
                                  " but problem 0 has d = " + std::to_string(d) + " (a batch shares one d)");
    if (p.options.scheme != problems[0].options.scheme)
      throw std::invalid_argument("batch problem " + std::to_string(q) + " asks for the " +
                                  to_string(p.options.scheme) + " scheme but problem 0 for " +
                                  to_string(problems[0].options.scheme) + " (a batch shares one scheme)");
    layout.row_begin.push_back(layout.rows);
    layout.col_begin.push_back(layout.cols);
    layout.rows += round_up(p.x.n);
    layout.cols += round_up(p.y.n);
    layout.row_blocks.push_back(static_cast<std::int32_t>(layout.rows / detail::kBlockSize));
    layout.col_blocks.push_back(static_cast<std::int32_t>(layout.cols / detail::kBlockSize));
  }

  // The concatenation: each problem centred on its own bounding box's middle, padding at the origin, weight 0.
  // One read of each cloud for its box (and finiteness), one for the centred copy, problems in parallel on the
  // host threads (BackendOptions::threads): this is the host's whole share of a batch's points (docs/engine.md,
  // "Batches"). Each problem's values do not depend on the threads.
  // x and y uninitialised: every value (points and padding) is written once, by the thread of its problem.
  const std::unique_ptr<float[]> xbuf(new float[layout.rows * d]), ybuf(new float[layout.cols * d]);
  const std::span<float> x(xbuf.get(), layout.rows * d), y(ybuf.get(), layout.cols * d);
  std::vector<float> a(layout.rows, 0.0f), b(layout.cols, 0.0f);
  std::vector<detail::SolveInputs> inputs(count);
  std::vector<std::exception_ptr> errors(count);
  const int threads = options.threads > 0 ? options.threads : omp_get_num_procs();
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (std::size_t q = 0; q < count; ++q) {
    try {
      const BatchProblem& p = problems[q];
      Box box(d);
      if (!box.add(p.x) || !box.add(p.y)) {
        // A non-finite coordinate: the validation's message (which cloud, row, column and value).
        for_problem(q, [&] {
          detail::validate_points(p.x, "x");
          detail::validate_points(p.y, "y");
        });
      }
      std::vector<double> centre(d);
      double diam2 = 0;
      for (std::size_t c = 0; c < d; ++c) {
        const double lo = box.lo[c], hi = box.hi[c];
        centre[c] = 0.5 * (lo + hi);
        diam2 += (hi - lo) * (hi - lo);
      }
      const std::size_t r0 = layout.row_begin[q], c0 = layout.col_begin[q];
      centred(p.x, centre, x.subspan(r0 * d, round_up(p.x.n) * d));
      centred(p.y, centre, y.subspan(c0 * d, round_up(p.y.n) * d));
      if (p.a.empty())
        std::fill_n(a.begin() + r0, p.x.n, static_cast<float>(1.0 / static_cast<double>(p.x.n)));
      else
        std::copy(p.a.begin(), p.a.end(), a.begin() + r0);
      if (p.b.empty())
        std::fill_n(b.begin() + c0, p.y.n, static_cast<float>(1.0 / static_cast<double>(p.y.n)));
      else
        std::copy(p.b.begin(), p.b.end(), b.begin() + c0);
      inputs[q].diameter = std::sqrt(diam2);
    } catch (...) {
      errors[q] = std::current_exception();
    }
  }
  for (const std::exception_ptr& e : errors)  // the first problem's error, as a serial pass would throw it
    if (e) std::rethrow_exception(e);
  for (std::size_t q = 0; q < count; ++q) {
    const BatchProblem& p = problems[q];
    inputs[q].a = std::span<const float>(a).subspan(layout.row_begin[q], p.x.n);
    inputs[q].b = std::span<const float>(b).subspan(layout.col_begin[q], p.y.n);
    double ma = 0, mb = 0;
    for (float w : inputs[q].a) ma += w;
    for (float w : inputs[q].b) mb += w;
    for_problem(q, [&] {
      detail::validate_solve_options(p.options, p.x.n, p.y.n, ma, mb, inputs[q].diameter);
    });
  }

  const detail::ProblemData data{{x, layout.rows, d}, {y, layout.cols, d}, a, b};
  const std::unique_ptr<detail::Backend> backend = detail::make_backend(options, data);
  // Primal costs ⟨P, C⟩ of the problems that ask for diagnostics, in one pass: V = [y | ‖y‖² | 1] (Problem's).
  return run_and_cost(problems, *backend, inputs, layout, start, [&](const detail::PlanParams& pp) {
    const std::size_t k = d + 2;
    std::vector<float> v(layout.cols * k, 0.0f);
    for (std::size_t j = 0; j < layout.cols; ++j) {
      double norm = 0;
      for (std::size_t c = 0; c < d; ++c) {
        v[j * k + c] = y[j * d + c];
        norm += static_cast<double>(y[j * d + c]) * y[j * d + c];
      }
      v[j * k + d] = static_cast<float>(norm);
      v[j * k + d + 1] = 1.0f;
    }
    std::vector<float> out(layout.rows * k);
    backend->apply(pp, Side::kSource, v, k, false, out);
    std::vector<double> terms(layout.rows, 0.0);
    for (std::size_t i = 0; i < layout.rows; ++i) {
      const double r = out[i * k + d + 1];
      if (!(r > 0)) continue;
      double dist = 0, tnorm = 0;
      for (std::size_t c = 0; c < d; ++c) {
        const double t = out[i * k + c] / r;
        dist += (x[i * d + c] - t) * (x[i * d + c] - t);
        tnorm += t * t;
      }
      terms[i] = r * (dist + std::max(0.0, out[i * k + d] / r - tnorm));
    }
    return terms;
  });
}

std::vector<SolveResult> solve_batch_on_device(std::span<const DeviceBatchProblem> problems,
                                               const BackendOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (problems.empty()) throw std::invalid_argument("solve_batch_on_device needs at least one problem (got none)");
  const std::size_t count = problems.size();
  const std::size_t d = problems[0].x.d;
  const int device = problems[0].x.device;
  // Shapes, pointers and devices first, with no device call (Problem::on_device's checks, solve_batch's messages).
  detail::BatchLayout layout;
  layout.row_blocks.push_back(0);
  layout.col_blocks.push_back(0);
  for (std::size_t q = 0; q < count; ++q) {
    const DeviceBatchProblem& p = problems[q];
    if (p.x.n == 0 || p.y.n == 0)
      throw std::invalid_argument("batch problem " + std::to_string(q) + " is empty: its source has " +
                                  std::to_string(p.x.n) + " points and its target " + std::to_string(p.y.n) +
                                  " (every problem needs at least one point on each side)");
    if (p.x.d != d || p.y.d != d || d == 0)
      throw std::invalid_argument("batch problem " + std::to_string(q) + " has dimension x.d = " +
                                  std::to_string(p.x.d) + ", y.d = " + std::to_string(p.y.d) +
                                  " but problem 0 has d = " + std::to_string(d) + " (a batch shares one d ≥ 1)");
    for_problem(q, [&] {
      for (const auto& [view, name] : {std::pair{&p.x, "x"}, std::pair{&p.y, "y"}})
        if (view->data == nullptr)
          throw std::invalid_argument(std::string(name) + ".data must point to " + name + ".n·" + name + ".d = " +
                                      std::to_string(view->n * view->d) + " values on the device (got a null "
                                      "pointer)");
      for (const auto& [w, n, name, points] : {std::tuple{&p.a, p.x.n, "a", "x"}, std::tuple{&p.b, p.y.n, "b", "y"}})
        if (w->data != nullptr && w->n != n)
          throw std::invalid_argument(std::string(name) + " must be empty (uniform) or hold " + points + ".n = " +
                                      std::to_string(n) + " weights (got " + std::to_string(w->n) + ")");
    });
    const auto on = [](int dev) { return "cuda:" + std::to_string(dev); };
    for (const auto& [where, name] : {std::pair{p.x.device, "x"}, std::pair{p.y.device, "y"},
                                      std::pair{p.a.data != nullptr ? p.a.device : device, "a"},
                                      std::pair{p.b.data != nullptr ? p.b.device : device, "b"}})
      if (where != device)
        throw std::invalid_argument("batch problem " + std::to_string(q) + ": " + name + " is on " + on(where) +
                                    " but problem 0's x on " + on(device) + " (a batch runs on one device)");
    if (p.options.scheme != problems[0].options.scheme)
      throw std::invalid_argument("batch problem " + std::to_string(q) + " asks for the " +
                                  to_string(p.options.scheme) + " scheme but problem 0 for " +
                                  to_string(problems[0].options.scheme) + " (a batch shares one scheme)");
    layout.row_begin.push_back(layout.rows);
    layout.col_begin.push_back(layout.cols);
    layout.rows += round_up(p.x.n);
    layout.cols += round_up(p.y.n);
    layout.row_blocks.push_back(static_cast<std::int32_t>(layout.rows / detail::kBlockSize));
    layout.col_blocks.push_back(static_cast<std::int32_t>(layout.cols / detail::kBlockSize));
  }
  if (options.backend == BackendKind::kCpu)
    throw std::runtime_error("solve_batch_on_device needs the CUDA backend (the batch is on cuda:" +
                             std::to_string(device) + "); solve_batch takes host arrays for the CPU backend");
  // Several devices, shards or ranks, a build without CUDA, no device, another BackendOptions::device.
  detail::refuse_device_input(options, device);

  // Validation, bounds, centring and the padded concatenation on the device (engine/cuda/device_input.cu).
  std::vector<detail::DeviceBatchInput> in(count);
  for (std::size_t q = 0; q < count; ++q)
    in[q] = {problems[q].x, problems[q].y, problems[q].a, problems[q].b, layout.row_begin[q], layout.col_begin[q]};
  detail::DeviceBatch batch = detail::prepare_device_batch(in, layout.rows, layout.cols, d, device);
  // The weights live on the backend only: the loop's sums are Backend::batch_weighted_sums (SolveInputs::resident).
  std::vector<detail::SolveInputs> inputs(count);
  for (std::size_t q = 0; q < count; ++q) {
    const DeviceBatchProblem& p = problems[q];
    inputs[q] = {{}, {}, batch.diameter[q], true, p.x.n, p.y.n, batch.mass_a[q]};
    for_problem(q, [&] {
      detail::validate_solve_options(p.options, p.x.n, p.y.n, batch.mass_a[q], batch.mass_b[q], batch.diameter[q]);
    });
  }
  detail::ProblemData data{{{}, layout.rows, d}, {{}, layout.cols, d}, {}, {}};
  data.device_x = batch.x;
  data.device_y = batch.y;
  data.device = device;
  data.device_a = batch.a;
  data.device_b = batch.b;
  data.min_a = batch.min_a;
  data.min_b = batch.min_b;
  const std::unique_ptr<detail::Backend> backend = detail::make_backend(options, data);
  batch.memory.reset();  // the backend holds its own copy
  // Primal costs from the resident points (Backend::resident_primal_terms: V = [y | ‖y‖² | 1] built on the device).
  return run_and_cost(problems, *backend, inputs, layout, start, [&](const detail::PlanParams& pp) {
    std::vector<double> terms(layout.rows);
    backend->resident_primal_terms(pp, terms);
    return terms;
  });
}

}  // namespace flashot
