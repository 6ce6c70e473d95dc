#pragma once
// Shared pieces of the flashot extension module: the options as Python sees them (with the Python callables they
// hold), keyword-argument handling and the GIL-releasing call pattern.

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "flashot/flashot.hpp"

namespace flashot::python {

namespace nb = nanobind;

/// A Python callable that C++ may copy without the GIL (a shared_ptr) and that drops its reference under the GIL.
struct PyCallable {
  nb::object fn;
  explicit PyCallable(nb::object f) : fn(std::move(f)) {}
  ~PyCallable() {
    if (fn.is_valid()) {
      nb::gil_scoped_acquire gil;
      fn = nb::object();
    }
  }
};

/// SolveOptions with its progress callable as a Python object.
struct PySolveOptions : SolveOptions {
  nb::object progress_fn;  // None or a callable(Progress) -> bool | None
};

/// BackendOptions with its broadcast callable as a Python object.
struct PyBackendOptions : BackendOptions {
  nb::object broadcast_fn;  // None or a callable(memoryview) filling the buffer from rank 0
  /// The engine's options: broadcast wrapped so that it takes the GIL.
  BackendOptions engine() const;
};

/// Sets each keyword of `kwargs` on `target` (a bound options object) as an attribute; an unknown keyword raises
/// TypeError naming it and the ones `what` takes.
void apply_kwargs(nb::handle target, nb::handle kwargs, const char* what);

/// Splits keyword arguments between solve options and backend options (their names do not overlap).
void route_kwargs(nb::handle kwargs, nb::handle solve, nb::handle backend);

/// Watches a solve: calls the Python progress callable (under the GIL) and checks for Ctrl-C at every marginal
/// check; an exception raised there cancels the solve and is raised again by finish().
class SolveWatch {
 public:
  /// `fn` None: only signals are checked, and only when the solve checks its marginals anyway (tolerance > 0), so
  /// the watch never changes what a solve computes.
  SolveWatch(nb::object fn, const SolveOptions& options);
  ProgressCallback callback();
  /// Raises the exception the callable raised (or KeyboardInterrupt), if any. Call with the GIL held.
  void finish();

 private:
  bool call(const Progress& p);
  nb::object fn_;
  bool active_ = false;
  std::exception_ptr error_;
};

/// Engine-side options from a Python options object (a copy made with the GIL held) with the watch installed.
SolveOptions engine_options(const PySolveOptions& options, SolveWatch& watch);

void bind_engine(nb::module_& m);
void bind_derivatives(nb::module_& m);
#if defined(FLASHOT_PYTHON_IO)
void bind_workflow(nb::module_& m);
#endif

}  // namespace flashot::python
