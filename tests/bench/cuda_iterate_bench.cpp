// Times the CUDA backend's operations alone (no solve bookkeeping): `iterate(p, K)` as one CUDA graph, one
// softmin, P·V with k = d + 2 (what the primal cost needs) and k = 64, and the Hessian's bilinear application, on
// the problem `flashot bench` uses (seeded N(0,1) points, weights U(0,1) + 0.1). Prints one line per (n, d, scheme)
// with the median of the repeats, and the symmetric step from warm potentials (where the one-pass step is not
// redone).
// usage: cuda_iterate_bench [n ...] -- [d ...]   (defaults: n = 10000 100000, d = 3 64)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend.hpp"

using namespace flashot;

namespace {

template <class F>
double median_ms(F&& f, int repeats) {
  f();
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes, dims;
  bool after = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") after = true;
    else (after ? dims : sizes).push_back(std::stoul(a));
  }
  if (sizes.empty()) sizes = {10000, 100000};
  if (dims.empty()) dims = {3, 64};
  const int iters = 10;
  for (std::size_t d : dims)
    for (std::size_t n : sizes) {
      std::mt19937_64 rng(0);
      std::normal_distribution<float> normal(0.f, 1.f);
      std::uniform_real_distribution<float> uniform(0.f, 1.f);
      std::vector<float> x(n * d), y(n * d), a(n), b(n);
      for (float& v : x) v = normal(rng);
      for (float& v : y) v = normal(rng);
      double sa = 0, sb = 0;
      for (float& v : a) sa += v = uniform(rng) + 0.1f;
      for (float& v : b) sb += v = uniform(rng) + 0.1f;
      for (float& v : a) v = float(v / sa);
      for (float& v : b) v = float(v / sb);
      const detail::ProblemData data{{x, n, d}, {y, n, d}, a, b};
      std::vector<Precision> precisions{Precision::kDefault};
      if (d >= 16) precisions = {Precision::kDefault, Precision::kFp32, Precision::kTf32, Precision::kBf16};
      for (Precision precision : precisions) {
      BackendOptions options;
      options.precision = precision;
      auto backend = detail::make_cuda_backend(options, data);
      std::printf("-- %s\n", backend->device().c_str());
      std::vector<float> zeros(n, 0.f), out(n), outk(n * (d + 2)), v(n * (d + 2), 1.f);
      for (Scheme scheme : {Scheme::kSymmetric, Scheme::kAlternating}) {
        const detail::IterationParams ip{0.1, 1.0, scheme, 1.0, 1.0};
        bool finite = true;
        const double ms = median_ms([&] {
          backend->set_potentials(zeros, zeros);
          finite = backend->iterate(ip, iters) && finite;
        }, 10);
        std::printf("iterate n=%zu d=%zu %s: %.3f ms for %d iterations (%.4f ms/it)%s\n", n, d,
                    to_string(scheme).c_str(), ms, iters, ms / iters, finite ? "" : " NON-FINITE");
      }
      {
        // Warm: 10 symmetric iterations from potentials 100 iterations into the solve (where an ε-scaling solve
        // spends most of its iterations), so that the one-pass step is not redone with the two-pass reductions.
        const detail::IterationParams ip{0.1, 1.0, Scheme::kSymmetric, 1.0, 1.0};
        std::vector<float> wf(n), wg(n);
        backend->set_potentials(zeros, zeros);
        backend->iterate(ip, 100);
        backend->get_potentials(wf, wg);
        bool finite = true;
        const double ms = median_ms([&] {
          backend->set_potentials(wf, wg);
          finite = backend->iterate(ip, iters) && finite;
        }, 10);
        std::printf("iterate n=%zu d=%zu symmetric warm: %.3f ms for %d iterations (%.4f ms/it)%s\n", n, d, ms,
                    iters, ms / iters, finite ? "" : " NON-FINITE");
      }
      const detail::PlanParams pp{0.1, 1.0};
      const double sm = median_ms([&] { backend->softmin(pp, Side::kSource, out); }, 10);
      const double ap = median_ms([&] { backend->apply(pp, Side::kSource, v, d + 2, false, outk); }, 5);
      std::vector<float> v64(n * 64, 1.f), out64(n * 64);
      const double ap64 = median_ms([&] { backend->apply(pp, Side::kSource, v64, 64, false, out64); }, 5);
      std::printf("ops n=%zu d=%zu: softmin %.3f ms, apply k=%zu %.3f ms, apply k=64 %.3f ms\n", n, d, sm, d + 2,
                  ap, ap64);
      // The Hessian's second moment (e = k = d, w = v = y). With fp32 scores at d > 16 it is the default
      // Backend::apply_bilinear (d(d+1)/2 applied columns): not timed there.
      if (precision != Precision::kFp32 || d <= 16) {
        std::vector<float> u(n * d, 0.5f), moment(n * d);
        const double bl = median_ms([&] { backend->apply_bilinear(pp, Side::kSource, u, y, d, y, d, moment); }, 5);
        std::printf("ops n=%zu d=%zu: apply_bilinear e=k=%zu %.3f ms\n", n, d, d, bl);
      }
      std::fflush(stdout);
      }
    }
  return 0;
}
