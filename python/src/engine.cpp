// Bindings of the engine's public API (flashot/flashot.hpp): options, Problem and its plan operations, results,
// the Sinkhorn divergence, backends and the multi-process helpers (flashot/distributed.hpp).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "arrays.hpp"
#include "bindings.hpp"
#include "flashot/batch.hpp"
#include "flashot/distributed.hpp"

namespace flashot::python {

using namespace nb::literals;

namespace {

Cost parse_cost(const std::string& text) {
  if (text == "sqeuclidean") return Cost::kSquaredEuclidean;
  if (text == "half_sqeuclidean") return Cost::kHalfSquaredEuclidean;
  throw std::invalid_argument("cost must be 'sqeuclidean' or 'half_sqeuclidean' (got '" + text + "')");
}

Side parse_side(const std::string& text, const char* name) {
  if (text == "source") return Side::kSource;
  if (text == "target") return Side::kTarget;
  throw std::invalid_argument(std::string(name) + " must be 'source' or 'target' (got '" + text + "')");
}

/// A Problem with the lock that keeps two Python threads from using it at once (the engine's Problem is not
/// thread-safe, and its calls run without the GIL).
struct PyProblem {
  explicit PyProblem(Problem&& p) : problem(std::move(p)) {}
  Problem problem;
  std::mutex lock;
  std::string origin;      // where x came from: "host" or "cuda:N"
  bool on_device = false;  // built with Problem::on_device (zero-copy)
};

/// Whether Problem can take these inputs where they are (Problem::on_device): x and y, and each weight vector given,
/// float32 C-order CUDA arrays on one device, for one GPU (the CUDA or automatic backend, no devices list of
/// several, no shards or ranks). Anything else takes the copy route (docs/python.md, "CUDA arrays").
bool device_route(const FloatInput& x, const FloatInput& y, const FloatInput& a, const FloatInput& b,
                  const BackendOptions& o) {
  if (x.device_data() == nullptr || y.device_data() == nullptr || y.device() != x.device()) return false;
  for (const FloatInput* w : {&a, &b})
    if (w->rows() > 0 && (w->device_data() == nullptr || w->device() != x.device())) return false;
  return o.backend != BackendKind::kCpu && o.devices.size() <= 1 && o.shards <= 1 && o.ranks == 1;
}

/// Runs f(problem) with the GIL released, holding the problem's lock.
template <typename F>
auto released(PyProblem& p, F&& f) {
  nb::gil_scoped_release release;
  std::lock_guard<std::mutex> guard(p.lock);
  return f(p.problem);
}

FloatInput optional_weights(nb::handle w, const char* name, bool on_device = false) {
  if (w.is_none()) return {};
  return FloatInput::from(w, name, 1, 0, on_device);
}

/// One argument of solve_batch (x, y, a or b): a stacked array — (B, n, d) points, (B, n) weights — read as one
/// array (a CUDA one kept on its device, problem q at offset q·n·d), or a sequence of per-problem arrays ((n_q, d) or
/// (n_q); None entries: uniform weights), or None (weights only: all uniform). CUDA arrays are not waited for here:
/// solve_batch synchronizes each device once.
class BatchArgument {
 public:
  static BatchArgument from(nb::handle object, const char* name, bool weights) {
    BatchArgument out;
    out.name_ = name;
    out.weights_ = weights;
    if (object.is_none()) {
      if (!weights) throw std::invalid_argument(std::string(name) + " must be a (problems, rows, dimensions) array or "
                                                "a sequence of (rows, dimensions) arrays (got None)");
      out.none_ = true;
      return out;
    }
    if (!nb::isinstance<nb::list>(object) && !nb::isinstance<nb::tuple>(object) && nb::hasattr(object, "shape")) {
      out.whole_ = FloatInput::from(object, name, weights ? 2 : 3, 0, true, false);
      out.stacked_ = true;
      return out;
    }
    std::size_t q = 0;
    for (nb::handle item : nb::iter(object)) {
      out.names_.push_back(std::string(name) + "[" + std::to_string(q++) + "]");
      if (weights && item.is_none())
        out.parts_.emplace_back();
      else
        out.parts_.push_back(FloatInput::from(item, out.names_.back().c_str(), weights ? 1 : 2, 0, true, false));
    }
    return out;
  }
  bool none() const { return none_; }
  std::size_t count() const { return stacked_ ? whole_.rows() : parts_.size(); }
  /// Problem q's rows (points) or values (weights); 0 for uniform weights.
  std::size_t rows(std::size_t q) const {
    if (none_) return 0;
    return stacked_ ? whole_.cols() : parts_[q].rows();
  }
  std::size_t dims(std::size_t q) const { return stacked_ ? whole_.depth() : parts_[q].cols(); }
  std::size_t size(std::size_t q) const { return weights_ ? rows(q) : rows(q) * dims(q); }
  /// Problem q's values on its CUDA device (null: on the host, or uniform weights) and that device.
  const float* device_data(std::size_t q) const {
    if (none_ || rows(q) == 0) return nullptr;
    const FloatInput& in = stacked_ ? whole_ : parts_[q];
    if (in.device_data() == nullptr) return nullptr;
    return in.device_data() + (stacked_ ? q * size(q) : 0);
  }
  int device(std::size_t q) const {
    if (none_) return -1;
    return (stacked_ ? whole_ : parts_[q]).device();
  }
  std::span<const float> values(std::size_t q) const {
    if (none_ || rows(q) == 0) return {};
    return stacked_ ? whole_.values().subspan(q * size(q), size(q)) : parts_[q].values();
  }
  void stage_on_host() {
    whole_.stage_on_host(name_);
    for (std::size_t q = 0; q < parts_.size(); ++q) parts_[q].stage_on_host(names_[q].c_str());
  }

 private:
  const char* name_ = "";
  bool weights_ = false, none_ = false, stacked_ = false;
  FloatInput whole_;
  std::vector<FloatInput> parts_;
  std::deque<std::string> names_;  // the parts' names (messages), stable addresses
};

/// solve_batch's results: a sequence of SolveResult, and the route the inputs took.
struct PyBatchResults {
  nb::list results;
  bool on_device = false;
  std::string input_device = "host";
};

std::string repr_result(const SolveResult& r) {
  std::ostringstream out;
  out << "SolveResult(epsilon=" << r.epsilon << ", dual_cost=" << r.dual_cost << ", converged="
      << (r.converged ? "True" : "False") << ", reason='" << to_string(r.reason) << "', iterations=" << r.iterations
      << ", marginal_error=" << r.marginal_error << ", backend='" << r.backend << "', seconds=" << r.seconds << ")";
  return out.str();
}

}  // namespace

// ---- options ---------------------------------------------------------------------------------------------------

BackendOptions PyBackendOptions::engine() const {
  BackendOptions o = *this;
  if (broadcast_fn.is_valid() && !broadcast_fn.is_none()) {
    auto holder = std::make_shared<PyCallable>(broadcast_fn);
    o.broadcast = [holder](void* bytes, std::size_t size) {
      nb::gil_scoped_acquire gil;
      nb::object view = nb::steal(PyMemoryView_FromMemory(static_cast<char*>(bytes), Py_ssize_t(size), PyBUF_WRITE));
      if (!view.is_valid()) throw nb::python_error();
      holder->fn(view);
    };
  }
  return o;
}

void apply_kwargs(nb::handle target, nb::handle kwargs, const char* what) {
  if (!kwargs.is_valid() || kwargs.is_none()) return;
  nb::handle type = target.type();
  for (auto [key, value] : nb::borrow<nb::dict>(kwargs)) {
    const std::string name = nb::cast<std::string>(key);
    if (name.empty() || name[0] == '_' || !nb::hasattr(type, name.c_str())) {
      std::string known;
      for (nb::handle attr : nb::borrow<nb::list>(nb::module_::import_("builtins").attr("dir")(type))) {
        const std::string a = nb::cast<std::string>(attr);
        if (!a.empty() && a[0] != '_') known += (known.empty() ? "" : ", ") + a;
      }
      throw nb::type_error(("unknown " + std::string(what) + " '" + name + "' (known: " + known + ")").c_str());
    }
    nb::setattr(target, key, value);
  }
}

void route_kwargs(nb::handle kwargs, nb::handle solve, nb::handle backend) {
  if (!kwargs.is_valid() || kwargs.is_none()) return;
  nb::dict to_solve, to_backend;
  for (auto [key, value] : nb::borrow<nb::dict>(kwargs)) {
    const std::string name = nb::cast<std::string>(key);
    if (!name.empty() && name[0] != '_' && nb::hasattr(backend.type(), name.c_str()))
      to_backend[key] = value;
    else
      to_solve[key] = value;
  }
  apply_kwargs(backend, to_backend, "backend option");
  apply_kwargs(solve, to_solve, "solve or backend option");
}

SolveWatch::SolveWatch(nb::object fn, const SolveOptions& options) : fn_(std::move(fn)) {
  const bool has_fn = fn_.is_valid() && !fn_.is_none();
  active_ = has_fn || options.tolerance > 0;
}

ProgressCallback SolveWatch::callback() {
  if (!active_) return {};
  return [this](const Progress& p) { return call(p); };
}

bool SolveWatch::call(const Progress& p) {
  nb::gil_scoped_acquire gil;
  try {
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
    if (fn_.is_valid() && !fn_.is_none()) {
      nb::object answer = fn_(p);
      if (!answer.is_none() && !nb::cast<bool>(nb::bool_(answer))) return false;
    }
    return true;
  } catch (...) {
    error_ = std::current_exception();
    return false;
  }
}

void SolveWatch::finish() {
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

SolveOptions engine_options(const PySolveOptions& options, SolveWatch& watch) {
  SolveOptions o = options;
  o.progress = watch.callback();
  return o;
}

namespace {

/// Copies `options` (or defaults) and applies keyword arguments, with the GIL held.
PySolveOptions solve_options(const PySolveOptions* options, nb::handle kwargs) {
  PySolveOptions o = options != nullptr ? *options : PySolveOptions{};
  nb::object handle = nb::cast(&o, nb::rv_policy::reference);
  apply_kwargs(handle, kwargs, "solve option");
  return o;
}

PyBackendOptions backend_options(const PyBackendOptions* options, nb::handle kwargs) {
  PyBackendOptions o = options != nullptr ? *options : PyBackendOptions{};
  nb::object handle = nb::cast(&o, nb::rv_policy::reference);
  apply_kwargs(handle, kwargs, "backend option");
  return o;
}

nb::object result_array(std::vector<float>&& v, std::size_t rows, const FloatInput& like) {
  const std::size_t k = rows == 0 ? 0 : v.size() / rows;
  if (like.ndim() == 1) return to_numpy(std::move(v), {rows});
  return to_numpy(std::move(v), {rows, k});
}

}  // namespace

void bind_engine(nb::module_& m) {
  nb::class_<Progress>(m, "Progress", "What a solve reports at every marginal-error check (and each ε stage).")
      .def_ro("stage", &Progress::stage, "0-based index of the ε stage")
      .def_ro("stage_count", &Progress::stage_count)
      .def_ro("epsilon", &Progress::epsilon, "ε of the current stage (cost units)")
      .def_ro("iteration", &Progress::iteration, "iterations so far, all stages together")
      .def_ro("max_iterations", &Progress::max_iterations, "upper bound of `iteration` for the whole solve")
      .def_ro("marginal_error", &Progress::marginal_error, "NaN at intermediate stages (not computed there)")
      .def_ro("coarse", &Progress::coarse,
              "True while a multiscale solve's coarser level settles at this ε (the error is that coarse problem's)")
      .def("__repr__", [](const Progress& p) {
        std::ostringstream out;
        out << "Progress(stage=" << p.stage << "/" << p.stage_count << ", epsilon=" << p.epsilon
            << ", iteration=" << p.iteration << "/" << p.max_iterations << ", marginal_error=" << p.marginal_error
            << (p.coarse ? ", coarse=True" : "") << ")";
        return out.str();
      });

  nb::class_<PySolveOptions>(m, "SolveOptions",
                             "Options of Problem.solve (flashot::SolveOptions). Keyword arguments set fields.")
      .def("__init__",
           [](PySolveOptions* self, nb::kwargs kwargs) {
             PySolveOptions made;
             apply_kwargs(nb::cast(&made, nb::rv_policy::reference), kwargs, "solve option");
             new (self) PySolveOptions(std::move(made));
           })
      .def_prop_rw(
          "cost", [](const PySolveOptions& o) { return to_string(o.cost); },
          [](PySolveOptions& o, const std::string& v) { o.cost = parse_cost(v); },
          "'sqeuclidean' (‖x−y‖²) or 'half_sqeuclidean' (‖x−y‖²/2)")
      .def_rw("blur", &SolveOptions::blur, "final ε = blur² (cost units); ignored when epsilon > 0 or blur_relative > 0")
      .def_rw("blur_relative", &SolveOptions::blur_relative,
              "> 0: blur = blur_relative × the diameter (the front ends use DEFAULT_BLUR_RELATIVE)")
      .def_rw("epsilon", &SolveOptions::epsilon, "> 0: fixed ε, no ε-scaling")
      .def_rw("scaling", &SolveOptions::scaling, "ε-scaling factor per stage, in (0, 1)")
      .def_rw("diameter", &SolveOptions::diameter, "0: the bounding-box diagonal of both clouds")
      .def_rw("stage_iterations", &SolveOptions::stage_iterations)
      .def_rw("tolerance", &SolveOptions::tolerance, "stop at this marginal error; 0 = run max_iterations")
      .def_rw("check_every", &SolveOptions::check_every)
      .def_rw("max_iterations", &SolveOptions::max_iterations, "iteration budget of the final stage")
      .def_rw("overrelaxation", &SolveOptions::overrelaxation,
              "over-relaxation ω of the final stage: 0 = auto (estimated from the checks), 1 = off, or fixed in (1, 2)")
      .def_prop_rw(
          "scheme", [](const PySolveOptions& o) { return to_string(o.scheme); },
          [](PySolveOptions& o, const std::string& v) { o.scheme = parse_scheme(v); }, "'symmetric' or 'alternating'")
      .def_rw("reach", &SolveOptions::reach, "unbalanced OT: ρ = reach² on both marginals; 0 = balanced")
      .def_rw("reach_source", &SolveOptions::reach_source)
      .def_rw("reach_target", &SolveOptions::reach_target)
      .def_prop_rw(
          "initial_f", [](const PySolveOptions& o) { return to_numpy(std::vector<float>(o.initial_f), {o.initial_f.size()}); },
          [](PySolveOptions& o, nb::handle v) {
            if (v.is_none()) return o.initial_f.clear();
            const FloatInput in = FloatInput::from(v, "initial_f", 1);
            o.initial_f.assign(in.values().begin(), in.values().end());
          },
          "warm start (n values), or empty")
      .def_prop_rw(
          "initial_g", [](const PySolveOptions& o) { return to_numpy(std::vector<float>(o.initial_g), {o.initial_g.size()}); },
          [](PySolveOptions& o, nb::handle v) {
            if (v.is_none()) return o.initial_g.clear();
            const FloatInput in = FloatInput::from(v, "initial_g", 1);
            o.initial_g.assign(in.values().begin(), in.values().end());
          },
          "warm start (m values), or empty")
      .def_prop_rw(
          "progress", [](const PySolveOptions& o) { return o.progress_fn.is_valid() ? o.progress_fn : nb::none(); },
          [](PySolveOptions& o, nb::object fn) {
            if (!fn.is_none() && !PyCallable_Check(fn.ptr()))
              throw nb::type_error("progress must be a callable(Progress) or None");
            o.progress_fn = std::move(fn);
          },
          nb::arg("fn").none(),
          "callable(Progress) called at every marginal check (under the GIL); returning False cancels the solve "
          "(reason 'cancelled'); an exception it raises stops the solve and is raised by solve()")
      .def_rw("diagnostics", &SolveOptions::diagnostics,
              "compute the final marginal error and the primal cost after the iterations")
      .def_prop_rw(
          "multiscale", [](const PySolveOptions& o) { return to_string(o.multiscale); },
          [](PySolveOptions& o, const std::string& v) { o.multiscale = parse_multiscale(v); },
          "'auto' (from n·m = 1e10 pairs on the CPU, 1e12 on GPUs, with a tolerance), 'on' or 'off': the multiscale "
          "block-sparse solver (docs/multiscale.md)")
      .def_rw("multiscale_truncation", &SolveOptions::multiscale_truncation,
              "τ: a block pair is skipped only when every entry is provably ≤ e^-τ·a_i·b_j / max(1, mass); "
              "0 (default): clamp(ln(1e3 / tolerance), 10, 20)")
      .def_rw("multiscale_dense_fraction", &SolveOptions::multiscale_dense_fraction,
              "a stage listing more than this share of the block pairs runs dense")
      .def_rw("multiscale_seed", &SolveOptions::multiscale_seed, "seed of the cluster hierarchies");

  nb::class_<PyBackendOptions>(m, "BackendOptions",
                               "Where a Problem lives (flashot::BackendOptions). Keyword arguments set fields.")
      .def("__init__",
           [](PyBackendOptions* self, nb::kwargs kwargs) {
             PyBackendOptions made;
             apply_kwargs(nb::cast(&made, nb::rv_policy::reference), kwargs, "backend option");
             new (self) PyBackendOptions(std::move(made));
           })
      .def_prop_rw(
          "backend", [](const PyBackendOptions& o) { return to_string(o.backend); },
          [](PyBackendOptions& o, const std::string& v) { o.backend = parse_backend(v); },
          "'auto' (CUDA when a device answers), 'cpu' or 'cuda'")
      .def_rw("threads", &BackendOptions::threads, "CPU threads; 0 = all hardware threads")
      .def_rw("device", &BackendOptions::device, "CUDA device ordinal")
      .def_prop_rw(
          "precision", [](const PyBackendOptions& o) { return to_string(o.precision); },
          [](PyBackendOptions& o, const std::string& v) { o.precision = parse_precision(v); },
          "CUDA score arithmetic: 'default', 'fp32', 'tf32', 'bf16'")
      .def_prop_rw(
          "screening", [](const PyBackendOptions& o) { return to_string(o.screening); },
          [](PyBackendOptions& o, const std::string& v) { o.screening = parse_screening(v); },
          "CUDA tile screening: 'auto', 'off', 'on'")
      .def_prop_rw(
          "point_order", [](const PyBackendOptions& o) { return to_string(o.point_order); },
          [](PyBackendOptions& o, const std::string& v) { o.point_order = parse_point_order(v); },
          "each side's internal order: 'auto' (locality for clustered data on CUDA from n·m = 1e9, d = 5), 'input', "
          "'locality' (sorted so that "
          "the CUDA tile screen skips far regions; results in the caller's order either way; docs/engine.md)")
      .def_rw("devices", &BackendOptions::devices, "CUDA devices to shard one problem over (docs/multi-gpu.md)")
      .def_rw("shards", &BackendOptions::shards, "shards of x's rows; 0 = one per device")
      .def_rw("nccl", &BackendOptions::nccl, "combine CUDA shards with NCCL (else on the host)")
      .def_rw("rank", &BackendOptions::rank, "this process's rank (multi-process runs)")
      .def_rw("ranks", &BackendOptions::ranks)
      .def_prop_rw(
          "broadcast",
          [](const PyBackendOptions& o) { return o.broadcast_fn.is_valid() ? o.broadcast_fn : nb::none(); },
          [](PyBackendOptions& o, nb::object fn) {
            if (!fn.is_none() && !PyCallable_Check(fn.ptr()))
              throw nb::type_error("broadcast must be a callable(memoryview) or None");
            o.broadcast_fn = std::move(fn);
          },
          nb::arg("fn").none(),
          "ranks > 1: callable(buffer: memoryview) that fills buffer on every rank from rank 0, e.g. "
          "lambda b: comm.Bcast(b, root=0) with mpi4py");

  nb::class_<SolveResult>(m, "SolveResult", "What a solve returns (flashot::SolveResult); f and g are numpy views.")
      .def("__init__",
           [](SolveResult* self, nb::handle f, nb::handle g, double epsilon, const std::string& cost,
              double reach_source, double reach_target) {
             const FloatInput fi = FloatInput::from(f, "f", 1);
             const FloatInput gi = FloatInput::from(g, "g", 1);
             new (self) SolveResult();
             self->f.assign(fi.values().begin(), fi.values().end());
             self->g.assign(gi.values().begin(), gi.values().end());
             self->epsilon = epsilon;
             self->cost = parse_cost(cost);
             self->reach_source = reach_source;
             self->reach_target = reach_target;
           },
           "f"_a, "g"_a, "epsilon"_a, "cost"_a = "sqeuclidean", "reach_source"_a = 0.0, "reach_target"_a = 0.0,
           "Potentials from elsewhere (a saved solution), for the plan operations.")
      .def_prop_ro("f", [](nb::handle self) {
        const SolveResult& r = nb::cast<const SolveResult&>(self);
        return view_numpy(r.f, {r.f.size()}, self);
      }, "(n) source potential, cost units")
      .def_prop_ro("g", [](nb::handle self) {
        const SolveResult& r = nb::cast<const SolveResult&>(self);
        return view_numpy(r.g, {r.g.size()}, self);
      }, "(m) target potential, cost units")
      .def_prop_ro("cost", [](const SolveResult& r) { return to_string(r.cost); })
      .def_ro("epsilon", &SolveResult::epsilon)
      .def_ro("diameter", &SolveResult::diameter, "the diameter the ε schedule and blur_relative used")
      .def_ro("reach_source", &SolveResult::reach_source)
      .def_ro("reach_target", &SolveResult::reach_target)
      .def_ro("dual_cost", &SolveResult::dual_cost)
      .def_ro("primal_cost", &SolveResult::primal_cost)
      .def_ro("converged", &SolveResult::converged)
      .def_prop_ro("reason", [](const SolveResult& r) { return to_string(r.reason); },
                   "'tolerance', 'iteration_budget', 'fixed_iterations', 'non_finite' or 'cancelled'")
      .def_ro("message", &SolveResult::message)
      .def_ro("marginal_error", &SolveResult::marginal_error)
      .def_ro("iterations", &SolveResult::iterations)
      .def_ro("overrelaxation", &SolveResult::overrelaxation)
      .def_prop_ro("stages", [](const SolveResult& r) {
        std::vector<std::pair<double, int>> out;
        for (const auto& s : r.stages) out.emplace_back(s.epsilon, s.iterations);
        return out;
      }, "[(epsilon, iterations)] per ε stage")
      .def_prop_ro("checks", [](const SolveResult& r) {
        std::vector<std::pair<int, double>> out;
        for (const auto& c : r.checks) out.emplace_back(c.iteration, c.error);
        return out;
      }, "[(iteration, marginal error)] per check")
      .def_prop_ro("multiscale", [](const SolveResult& r) {
        const MultiscaleReport& m = r.multiscale;
        nb::dict out;
        out["used"] = m.used;
        out["reason"] = m.reason;
        out["hierarchy"] = m.hierarchy;
        out["row_blocks"] = m.row_blocks;
        out["column_blocks"] = m.column_blocks;
        out["coarse_rows"] = m.coarse_rows;
        out["coarse_columns"] = m.coarse_columns;
        out["truncation"] = m.truncation;
        out["certified"] = m.certified;
        out["hierarchy_seconds"] = m.hierarchy_seconds;
        out["pattern_seconds"] = m.pattern_seconds;
        nb::list stages;
        for (const MultiscaleStage& st : m.stages) {
          nb::dict d;
          d["epsilon"] = st.epsilon;
          d["iterations"] = st.iterations;
          d["coarse"] = st.coarse;
          d["dense"] = st.dense;
          d["kept_pairs"] = st.kept_pairs;
          d["total_pairs"] = st.total_pairs;
          d["kept_fraction"] = st.kept_fraction;
          d["rechecks"] = st.rechecks;
          d["redone"] = st.redone;
          d["largest_rise"] = st.largest_rise;
          stages.append(d);
        }
        out["stages"] = stages;
        return out;
      }, "the multiscale solver's report (flashot::MultiscaleReport) as a dict; 'used' False for a dense solve")
      .def_ro("seconds", &SolveResult::seconds, "wall time of the solve inside the engine")
      .def_ro("backend", &SolveResult::backend)
      .def_ro("device", &SolveResult::device)
      .def("__repr__", &repr_result);

  nb::class_<LabelTransfer>(m, "LabelTransfer", "Labels transported through the plan (flashot::LabelTransfer).")
      .def_ro("points", &LabelTransfer::points)
      .def_ro("classes", &LabelTransfer::classes)
      .def_prop_ro("probabilities", [](nb::handle self) {
        const auto& t = nb::cast<const LabelTransfer&>(self);
        return view_numpy(t.probabilities, {t.points, t.classes}, self);
      }, "(points, classes), rows sum to 1 (0 where no labelled mass arrived)")
      .def_prop_ro("label", [](nb::handle self) {
        const auto& t = nb::cast<const LabelTransfer&>(self);
        return view_numpy(t.label, {t.points}, self);
      }, "argmax class, −1 where no labelled mass arrived")
      .def_prop_ro("confidence", [](nb::handle self) {
        const auto& t = nb::cast<const LabelTransfer&>(self);
        return view_numpy(t.confidence, {t.points}, self);
      })
      .def_prop_ro("entropy", [](nb::handle self) {
        const auto& t = nb::cast<const LabelTransfer&>(self);
        return view_numpy(t.entropy, {t.points}, self);
      }, "nats");

  nb::class_<TopKCoupling>(m, "TopKCoupling", "The k largest plan entries of every source row.")
      .def_ro("rows", &TopKCoupling::rows)
      .def_ro("k", &TopKCoupling::k)
      .def_prop_ro("columns", [](nb::handle self) {
        const auto& t = nb::cast<const TopKCoupling&>(self);
        return view_numpy(t.columns, {t.rows, t.k}, self);
      }, "(rows, k) target indices, by decreasing mass")
      .def_prop_ro("values", [](nb::handle self) {
        const auto& t = nb::cast<const TopKCoupling&>(self);
        return view_numpy(t.values, {t.rows, t.k}, self);
      }, "(rows, k) plan entries");

  nb::class_<PyProblem>(m, "Problem",
                        "An OT problem resident on one backend (flashot::Problem). x (n, d) and y (m, d) float32 "
                        "arrays (numpy or any DLPack/array-interface object; float32 C-order host arrays are read "
                        "without a copy), a (n) and b (m) weights or None for uniform. Keyword arguments are "
                        "BackendOptions fields.")
      .def("__init__",
           [](PyProblem* self, nb::handle x, nb::handle y, nb::handle a, nb::handle b,
              const PyBackendOptions* options, nb::kwargs kwargs) {
             const PyBackendOptions o = backend_options(options, kwargs);
             FloatInput xi = FloatInput::from(x, "x", 2, 0, true);
             FloatInput yi = FloatInput::from(y, "y", 2, 0, true);
             FloatInput ai = optional_weights(a, "a", true);
             FloatInput bi = optional_weights(b, "b", true);
             BackendOptions engine = o.engine();
             const bool on_device = device_route(xi, yi, ai, bi, engine);
             if (on_device) {
               // CUDA arrays run on their own device (a devices list of one must name it: the engine says so).
               engine.device = xi.device();
             } else {
               xi.stage_on_host("x");
               yi.stage_on_host("y");
               ai.stage_on_host("a");
               bi.stage_on_host("b");
             }
             {
               nb::gil_scoped_release release;
               if (on_device) {
                 new (self) PyProblem(Problem::on_device(xi.device_points(), yi.device_points(),
                                                         ai.rows() > 0 ? ai.device_weights() : DeviceWeights{},
                                                         bi.rows() > 0 ? bi.device_weights() : DeviceWeights{},
                                                         engine));
               } else {
                 new (self) PyProblem(Problem(xi.points(), yi.points(), ai.values(), bi.values(), engine));
               }
             }
             self->origin = xi.origin();
             self->on_device = on_device;
           },
           "x"_a, "y"_a, "a"_a.none() = nb::none(), "b"_a.none() = nb::none(), "options"_a.none() = nb::none(),
           "kwargs"_a)
      .def_prop_ro("n", [](PyProblem& p) { return p.problem.n(); })
      .def_prop_ro("m", [](PyProblem& p) { return p.problem.m(); })
      .def_prop_ro("d", [](PyProblem& p) { return p.problem.d(); })
      .def_prop_ro("backend", [](PyProblem& p) { return p.problem.backend_name(); }, "'cpu' or 'cuda'")
      .def_prop_ro("device", [](PyProblem& p) { return p.problem.device_name(); })
      .def_prop_ro("input_device", [](PyProblem& p) { return p.origin; },
                   "where x came from: 'host', or 'cuda:N' for a CUDA array")
      .def_prop_ro("on_device", [](PyProblem& p) { return p.on_device; },
                   "True when the problem was built from CUDA arrays in place (zero-copy, Problem::on_device); "
                   "False when its inputs were read on the host (host arrays, or the copy route of mixed "
                   "placements)")
      .def(
          "statistics",
          [](PyProblem& p) {
            const EngineStatistics s = released(p, [](Problem& q) { return q.statistics(); });
            nb::dict out;
            out["input_host_bytes"] = s.input_host_bytes;
            out["one_pass_steps"] = s.one_pass_steps;
            out["shifted_steps"] = s.shifted_steps;
            out["skipped_steps"] = s.skipped_steps;
            out["redone_steps"] = s.redone_steps;
            out["steps_with_strays"] = s.steps_with_strays;
            out["strays"] = s.strays;
            out["screened"] = s.screened;
            const auto site = [](const ScreenSiteStatistics& t) {
              nb::dict d;
              d["kept_tiles"] = t.kept_tiles;
              d["seen_tiles"] = t.seen_tiles;
              d["next_screened"] = t.next_screened;
              return d;
            };
            out["rows_lse"] = site(s.rows_lse);
            out["columns_lse"] = site(s.columns_lse);
            out["sums"] = site(s.sums);
            out["c_transform_rescored"] = s.c_transform_rescored;
            out["c_transform_rescanned"] = s.c_transform_rescanned;
            return out;
          },
          "What the engine did so far (flashot::EngineStatistics) as a dict: input_host_bytes (bytes of x, y and "
          "the given weights that passed through host memory: 0 for CUDA arrays taken in place), the one-pass "
          "step counts, the screened tiles and the last hard c-transform's rescored / re-scanned rows of the CUDA "
          "backend")
      .def(
          "solve",
          [](PyProblem& p, const PySolveOptions* options, nb::kwargs kwargs) {
            const PySolveOptions o = solve_options(options, kwargs);
            SolveWatch watch(o.progress_fn, o);
            const SolveOptions engine = engine_options(o, watch);
            SolveResult r = released(p, [&](Problem& problem) { return problem.solve(engine); });
            watch.finish();
            return r;
          },
          "options"_a.none() = nb::none(), "kwargs"_a,
          "Runs the ε-scaling (or fixed-ε) Sinkhorn loop without the GIL. Keyword arguments are SolveOptions "
          "fields. Bad options raise ValueError; not converging is reported in the result.")
      .def(
          "apply_plan",
          [](PyProblem& p, const SolveResult& s, nb::handle v) {
            const FloatInput vi = FloatInput::from(v, "v", -1);
            auto out = released(p, [&](Problem& q) { return q.apply_plan(s, vi.values(), vi.cols()); });
            return result_array(std::move(out), p.problem.n(), vi);
          },
          "result"_a, "v"_a, "P·V: v (m, k) or (m,), result (n, k) or (n,)")
      .def(
          "apply_plan_transpose",
          [](PyProblem& p, const SolveResult& s, nb::handle u) {
            const FloatInput ui = FloatInput::from(u, "u", -1);
            auto out = released(p, [&](Problem& q) { return q.apply_plan_transpose(s, ui.values(), ui.cols()); });
            return result_array(std::move(out), p.problem.m(), ui);
          },
          "result"_a, "u"_a, "Pᵀ·U: u (n, k) or (n,), result (m, k) or (m,)")
      .def(
          "row_marginal",
          [](PyProblem& p, const SolveResult& s) {
            auto out = released(p, [&](Problem& q) { return q.row_marginal(s); });
            const std::size_t n = out.size();
            return to_numpy(std::move(out), {n});
          },
          "result"_a, "P·1 (n)")
      .def(
          "column_marginal",
          [](PyProblem& p, const SolveResult& s) {
            auto out = released(p, [&](Problem& q) { return q.column_marginal(s); });
            const std::size_t m = out.size();
            return to_numpy(std::move(out), {m});
          },
          "result"_a, "Pᵀ·1 (m)")
      .def(
          "barycentric",
          [](PyProblem& p, const SolveResult& s, const std::string& from) {
            const Side side = parse_side(from, "from_");
            auto out = released(p, [&](Problem& q) { return q.barycentric(s, side); });
            const std::size_t rows = side == Side::kSource ? p.problem.n() : p.problem.m();
            return to_numpy(std::move(out), {rows, p.problem.d()});
          },
          "result"_a, "from_"_a = "source",
          "Barycentric projection: 'source' gives T(x_i) = (P Y)_i / (P 1)_i (n, d); 'target' the reverse (m, d)")
      .def(
          "map_points",
          [](PyProblem& p, const SolveResult& s, nb::handle queries, const std::string& from) {
            const Side side = parse_side(from, "from_");
            const FloatInput qi = FloatInput::from(queries, "queries", 2);
            auto out = released(p, [&](Problem& q) { return q.map_points(s, qi.points(), side); });
            return to_numpy(std::move(out), {qi.rows(), p.problem.d()});
          },
          "result"_a, "queries"_a, "from_"_a = "source",
          "Out-of-sample entropic map of new points (q, d) through the other side's potential, no re-solve")
      .def(
          "transfer_labels",
          [](PyProblem& p, const SolveResult& s, nb::handle labels, std::optional<std::size_t> classes,
             const std::string& labels_on) {
            const Side side = parse_side(labels_on, "labels_on");
            const std::vector<std::int32_t> codes = int_labels(labels, "labels");
            std::size_t k = 0;
            if (classes) {
              k = *classes;
            } else {
              for (std::int32_t c : codes) k = std::max<std::size_t>(k, std::size_t(c + 1));
            }
            return released(p, [&](Problem& q) { return q.transfer_labels(s, side, codes, k); });
          },
          "result"_a, "labels"_a, "classes"_a.none() = nb::none(), "labels_on"_a = "target",
          "Transports integer labels (−1 = missing) from side labels_on to the other side. classes defaults to "
          "max(labels) + 1.")
      .def(
          "gradient",
          [](PyProblem& p, const SolveResult& s, const std::string& wrt) {
            const Side side = parse_side(wrt, "wrt");
            auto out = released(p, [&](Problem& q) { return q.gradient(s, side); });
            const std::size_t rows = side == Side::kSource ? p.problem.n() : p.problem.m();
            return to_numpy(std::move(out), {rows, p.problem.d()});
          },
          "result"_a, "wrt"_a = "source", "∇_x (n, d) or ∇_y (m, d) of the regularized OT cost (Danskin)")
      .def(
          "top_k",
          [](PyProblem& p, const SolveResult& s, std::size_t k) {
            return released(p, [&](Problem& q) { return q.top_k(s, k); });
          },
          "result"_a, "k"_a, "The k largest plan entries of every source row");

  nb::class_<DivergenceResult>(m, "DivergenceResult")
      .def_ro("divergence", &DivergenceResult::divergence)
      .def_ro("xy", &DivergenceResult::xy)
      .def_ro("xx", &DivergenceResult::xx)
      .def_ro("yy", &DivergenceResult::yy)
      .def("__repr__", [](const DivergenceResult& r) {
        return "DivergenceResult(divergence=" + std::to_string(r.divergence) + ")";
      });

  m.def(
      "sinkhorn_divergence",
      [](nb::handle x, nb::handle y, nb::handle a, nb::handle b, const PySolveOptions* options,
         const PyBackendOptions* backend, nb::kwargs kwargs) {
        PySolveOptions so = options != nullptr ? *options : PySolveOptions{};
        PyBackendOptions bo = backend != nullptr ? *backend : PyBackendOptions{};
        route_kwargs(kwargs, nb::cast(&so, nb::rv_policy::reference), nb::cast(&bo, nb::rv_policy::reference));
        FloatInput xi = FloatInput::from(x, "x", 2, 0, true);
        FloatInput yi = FloatInput::from(y, "y", 2, 0, true);
        FloatInput ai = optional_weights(a, "a", true);
        FloatInput bi = optional_weights(b, "b", true);
        SolveWatch watch(so.progress_fn, so);
        const SolveOptions engine = engine_options(so, watch);
        BackendOptions engine_backend = bo.engine();
        // CUDA arrays on one device are taken in place, as by Problem; anything else is read on the host.
        const bool on_device = device_route(xi, yi, ai, bi, engine_backend);
        if (on_device) {
          engine_backend.device = xi.device();
        } else {
          xi.stage_on_host("x");
          yi.stage_on_host("y");
          ai.stage_on_host("a");
          bi.stage_on_host("b");
        }
        DivergenceResult r;
        {
          nb::gil_scoped_release release;
          if (on_device) {
            r = sinkhorn_divergence_on_device(xi.device_points(), yi.device_points(),
                                              ai.rows() > 0 ? ai.device_weights() : DeviceWeights{},
                                              bi.rows() > 0 ? bi.device_weights() : DeviceWeights{}, engine,
                                              engine_backend);
          } else {
            r = sinkhorn_divergence(xi.points(), yi.points(), ai.values(), bi.values(), engine, engine_backend);
          }
        }
        watch.finish();
        return r;
      },
      "x"_a, "y"_a, "a"_a.none() = nb::none(), "b"_a.none() = nb::none(), "options"_a.none() = nb::none(),
      "backend_options"_a.none() = nb::none(), "kwargs"_a,
      "Debiased Sinkhorn divergence S = OT(x,y) − ½OT(x,x) − ½OT(y,y), three solves. Keyword arguments are "
      "SolveOptions or BackendOptions fields.");

  nb::class_<PyBatchResults>(m, "BatchResults",
                              "What solve_batch returns: a sequence of SolveResult (one per problem, in order) and "
                              "the route its inputs took.")
      .def("__len__", [](const PyBatchResults& r) { return nb::len(r.results); })
      .def("__getitem__", [](const PyBatchResults& r, nb::handle i) { return r.results.attr("__getitem__")(i); })
      .def("__iter__", [](const PyBatchResults& r) { return r.results.attr("__iter__")(); })
      .def_ro("on_device", &PyBatchResults::on_device,
              "True when the batch was solved from CUDA arrays in place (zero-copy, solve_batch_on_device)")
      .def_ro("input_device", &PyBatchResults::input_device, "where x came from: 'host' or 'cuda:N'")
      .def("__repr__", [](const PyBatchResults& r) {
        return "BatchResults(" + std::to_string(nb::len(r.results)) + " problems, on_device=" +
               (r.on_device ? "True" : "False") + ")";
      });

  m.def(
      "solve_batch",
      [](nb::handle x, nb::handle y, nb::handle a, nb::handle b, nb::handle options, const PyBackendOptions* backend,
         nb::kwargs kwargs) {
        BatchArgument xs = BatchArgument::from(x, "x", false);
        BatchArgument ys = BatchArgument::from(y, "y", false);
        BatchArgument as = BatchArgument::from(a, "a", true);
        BatchArgument bs = BatchArgument::from(b, "b", true);
        const std::size_t count = xs.count();
        if (ys.count() != count)
          throw std::invalid_argument("x holds " + std::to_string(count) + " problems but y holds " +
                                      std::to_string(ys.count()) + " (one target per source)");
        for (const auto& [w, name] : {std::pair{&as, "a"}, std::pair{&bs, "b"}})
          if (!w->none() && w->count() != count)
            throw std::invalid_argument(std::string(name) + " holds " + std::to_string(w->count()) +
                                        " weight vectors for " + std::to_string(count) + " problems (None = uniform)");
        // Per-problem options: one SolveOptions for all, or a sequence of them; keyword arguments apply to each.
        PyBackendOptions bo = backend != nullptr ? *backend : PyBackendOptions{};
        std::vector<PySolveOptions> so(count);
        const bool listed = !options.is_none() && !nb::isinstance<PySolveOptions>(options);
        if (listed && nb::len(options) != count)
          throw std::invalid_argument("options holds " + std::to_string(nb::len(options)) + " SolveOptions for " +
                                      std::to_string(count) + " problems (or give one for all)");
        for (std::size_t q = 0; q < count; ++q) {
          if (listed)
            so[q] = nb::cast<PySolveOptions>(options[q]);
          else if (!options.is_none())
            so[q] = nb::cast<PySolveOptions>(options);
          route_kwargs(kwargs, nb::cast(&so[q], nb::rv_policy::reference), nb::cast(&bo, nb::rv_policy::reference));
        }
        if (count == 0) route_kwargs(kwargs, nb::cast(PySolveOptions{}), nb::cast(&bo, nb::rv_policy::reference));
        BackendOptions engine_backend = bo.engine();
        // CUDA arrays on one device, every weight given there too, one GPU: in place (solve_batch_on_device);
        // anything else is read on the host (solve_batch), as Problem routes its inputs.
        const int device = count > 0 ? xs.device(0) : -1;
        bool on_device = count > 0 && engine_backend.backend != BackendKind::kCpu &&
                         engine_backend.devices.size() <= 1 && engine_backend.shards <= 1 && engine_backend.ranks == 1;
        for (std::size_t q = 0; q < count && on_device; ++q) {
          on_device = xs.device_data(q) != nullptr && ys.device_data(q) != nullptr && xs.device(q) == device &&
                      ys.device(q) == device;
          for (const BatchArgument* w : {&as, &bs})
            if (w->rows(q) > 0 && (w->device_data(q) == nullptr || w->device(q) != device)) on_device = false;
        }
        std::vector<std::unique_ptr<SolveWatch>> watches;
        std::vector<SolveOptions> engine(count);
        for (std::size_t q = 0; q < count; ++q) {
          watches.push_back(std::make_unique<SolveWatch>(so[q].progress_fn, so[q]));
          engine[q] = engine_options(so[q], *watches.back());
        }
        PyBatchResults out;
        out.on_device = on_device;
        out.input_device = device >= 0 ? "cuda:" + std::to_string(device) : "host";
        std::vector<SolveResult> results;
        if (on_device) {
          engine_backend.device = device;
          synchronize_device(device, "x");  // the producers' pending writes, once for the whole batch
          std::vector<DeviceBatchProblem> problems(count);
          for (std::size_t q = 0; q < count; ++q) {
            const std::size_t d = xs.dims(q);
            problems[q] = {{xs.device_data(q), xs.rows(q), d, device}, {ys.device_data(q), ys.rows(q), ys.dims(q), device},
                           {as.device_data(q), as.rows(q), device}, {bs.device_data(q), bs.rows(q), device},
                           engine[q]};
          }
          nb::gil_scoped_release release;
          results = solve_batch_on_device(problems, engine_backend);
        } else {
          for (BatchArgument* arg : {&xs, &ys, &as, &bs}) arg->stage_on_host();
          std::vector<BatchProblem> problems(count);
          for (std::size_t q = 0; q < count; ++q)
            problems[q] = {{xs.values(q), xs.rows(q), xs.dims(q)}, {ys.values(q), ys.rows(q), ys.dims(q)},
                           as.values(q), bs.values(q), engine[q]};
          nb::gil_scoped_release release;
          results = solve_batch(problems, engine_backend);
        }
        for (auto& watch : watches) watch->finish();
        for (SolveResult& r : results) out.results.append(nb::cast(std::move(r)));
        return out;
      },
      "x"_a, "y"_a, "a"_a.none() = nb::none(), "b"_a.none() = nb::none(), "options"_a.none() = nb::none(),
      "backend_options"_a.none() = nb::none(), "kwargs"_a,
      "Solves B independent problems in one call (flashot::solve_batch, docs/python.md \"Batches\"). x, y: (B, n, d) "
      "and (B, m, d) arrays, or sequences of (n_q, d) and (m_q, d) arrays (ragged sizes); a, b: None (uniform), "
      "(B, n) / (B, m) arrays, or sequences of 1-D arrays or None. options: one SolveOptions for every problem or a "
      "sequence of them; keyword arguments are SolveOptions fields (applied to every problem) or BackendOptions "
      "fields. float32 C-order CUDA tensors on one device (and weights there or None) are taken in place "
      "(solve_batch_on_device: validated, centred and concatenated on the device); anything else is read on the "
      "host. Returns a BatchResults sequence of SolveResult.");

  m.def("available_backends", &available_backends, "'cpu', and 'cuda' when a device answers");
  m.def("cuda_available", &cuda_available, "CUDA compiled in and a device present");
  m.def("version", &version);
  m.def("device_memory", []() {
    const DeviceMemory d = device_memory();
    nb::dict out;
    out["current_bytes"] = d.current_bytes;
    out["peak_bytes"] = d.peak_bytes;
    return out;
  }, "Device memory the CUDA backend holds in this process: now and the peak");
  m.attr("cuda_copies") = cuda_copies();
  m.attr("DEFAULT_BLUR_RELATIVE") = kDefaultBlurRelative;

  nb::class_<ProcessGroup>(m, "ProcessGroup", "This process's place in a multi-process launch")
      .def(nb::init<>())
      .def_rw("rank", &ProcessGroup::rank)
      .def_rw("ranks", &ProcessGroup::ranks)
      .def_rw("local_rank", &ProcessGroup::local_rank);
  m.def("process_group_from_environment", &process_group_from_environment,
        "Rank, ranks and local rank from OpenMPI, MPICH/Hydra or Slurm variables; (0, 1, 0) otherwise");
  m.def(
      "rank_options",
      [](const ProcessGroup& group, nb::object broadcast, const PyBackendOptions* base) {
        PyBackendOptions b = base != nullptr ? *base : PyBackendOptions{};
        b.broadcast_fn = broadcast;
        const BackendOptions with_broadcast = b.engine();
        const BackendOptions engine = rank_options(group, with_broadcast.broadcast, with_broadcast);
        PyBackendOptions out;
        static_cast<BackendOptions&>(out) = engine;
        out.broadcast_fn = broadcast;
        return out;
      },
      "group"_a, "broadcast"_a.none(), "base"_a.none() = nb::none(),
      "BackendOptions for this rank: CUDA on device local_rank, NCCL bootstrapped through broadcast");
}

}  // namespace flashot::python
