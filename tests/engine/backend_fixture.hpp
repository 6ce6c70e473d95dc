#pragma once
// Parametrization over the backends: every suite runs on "cpu" and on "cuda". A backend absent from
// available_backends() is skipped with the reason, except CUDA under FLASHOT_REQUIRE_CUDA=1, which fails, so a GPU
// run cannot pass by skipping.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot::test {

inline bool cuda_required() {
  const char* v = std::getenv("FLASHOT_REQUIRE_CUDA");
  return v != nullptr && std::string(v) == "1";
}

inline std::vector<std::string> backends_under_test() { return {"cpu", "cuda"}; }

/// Devices a GPU run promises for one-device-per-shard cases (FLASHOT_TEST_GPUS, default 1).
inline int gpus_promised() {
  const char* v = std::getenv("FLASHOT_TEST_GPUS");
  return v == nullptr ? 1 : std::atoi(v);
}

/// Call first in a test body: returns false (after skipping or failing) when the backend cannot run here.
#define FLASHOT_REQUIRE_BACKEND(name)                                                                      \
  do {                                                                                                     \
    const std::vector<std::string> present = ::flashot::available_backends();                             \
    if (std::find(present.begin(), present.end(), (name)) == present.end()) {                             \
      if ((name) == "cuda" && ::flashot::test::cuda_required())                                            \
        FAIL() << "FLASHOT_REQUIRE_CUDA=1 but the CUDA backend is not available (not compiled in, or no device)"; \
      GTEST_SKIP() << "backend '" << (name) << "' is not available here (not compiled in, or no device)";   \
    }                                                                                                      \
  } while (false)

inline BackendOptions backend_options(const std::string& name, int threads = 0) {
  BackendOptions o;
  o.backend = parse_backend(name);
  o.threads = threads;
  return o;
}

/// Largest |a_i − b_i| and largest |b_i| (for relative tolerances).
template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return m;
}
template <class A>
double max_abs(const A& a) {
  double m = 0;
  for (auto v : a) m = std::max(m, std::abs(static_cast<double>(v)));
  return m;
}

}  // namespace flashot::test
