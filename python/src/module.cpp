// flashot._flashot: the extension module behind the `flashot` Python package (python/flashot, docs/python.md).
#include <nanobind/nanobind.h>

#include "bindings.hpp"
#if defined(FLASHOT_PYTHON_IO)
#include "flashot/io/errors.hpp"
#endif

NB_MODULE(_flashot, m) {
  namespace nb = nanobind;
  m.doc() = "flashot: entropic optimal transport (the C++ engine's API; docs/python.md)";
#if defined(FLASHOT_PYTHON_IO)
  // A malformed file is a ValueError, an unreadable one an OSError, both with the io library's message.
  nb::exception<flashot::io::FormatError>(m, "FormatError", PyExc_ValueError);
  nb::exception<flashot::io::IoError>(m, "IoError", PyExc_OSError);
  m.attr("io_compiled") = true;
#else
  m.attr("io_compiled") = false;
#endif
#if defined(FLASHOT_PYTHON_CUDA)
  m.attr("cuda_compiled") = true;
#else
  m.attr("cuda_compiled") = false;
#endif
  flashot::python::bind_engine(m);
  flashot::python::bind_derivatives(m);
#if defined(FLASHOT_PYTHON_IO)
  flashot::python::bind_workflow(m);
#endif
}
