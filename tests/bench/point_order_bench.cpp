// The locality order (BackendOptions::point_order, docs/engine.md "Point order") on `flashot bench`'s own data: what
// the sort costs on the host, and what the CUDA backend's rows' LSE screen would keep with and without it.
//   flashot_point_order_bench N D [clusters|normal] [STRIDE] [EPS] [ITERS]
// generates exactly `flashot bench --n N --m N --d D --data …`'s points and weights (apps/bench.cpp's generators,
// seed 0), times the locality order of x (median of 3, every thread), and with STRIDE keeps every STRIDE-th point of
// each side (weights renormalised), runs 1 and ITERS cold symmetric iterations at EPS (default 0.1, 10) on the CPU
// backend and prints the share of 16 × 64 tiles whose entries come within 2^-(26 + log2 m) of their row's sum (the
// tiles the screen must keep: tests/support/screen_estimate.hpp), as generated and in the locality order. fp64,
// O(n·m·d) per estimate.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "flashot/flashot.hpp"
#include "flashot/synthetic.hpp"
#include "point_order.hpp"
#include "screen_estimate.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: flashot_point_order_bench N D [clusters|normal] [STRIDE] [EPS] [ITERS]\n");
    return 2;
  }
  const long long nl = std::stoll(argv[1]), dl = std::stoll(argv[2]);
  const std::string data = argc > 3 ? argv[3] : "clusters";
  const long long stride_l = argc > 4 ? std::stoll(argv[4]) : 0;
  const double eps = argc > 5 ? std::stod(argv[5]) : 0.1;
  const int iters = argc > 6 ? std::stoi(argv[6]) : 10;
  if (nl < 1 || dl < 1 || stride_l < 0 || !(eps > 0) || iters < 1 || (data != "clusters" && data != "normal")) {
    std::fprintf(stderr, "N, D >= 1, STRIDE >= 0, EPS > 0, ITERS >= 1, data clusters or normal (got %lld %lld %s "
                         "%lld %g %d)\n", nl, dl, data.c_str(), stride_l, eps, iters);
    return 2;
  }
  const std::size_t N = std::size_t(nl), d = std::size_t(dl), stride = std::size_t(stride_l);
  std::mt19937_64 rng(0);
  const bool clusters = data == "clusters";
  const std::vector<float> X = clusters ? flashot::synthetic::bench_clusters(rng, N, d) : flashot::synthetic::bench_normal(rng, N * d);
  const std::vector<float> Y = clusters ? flashot::synthetic::bench_clusters(rng, N, d) : flashot::synthetic::bench_normal(rng, N * d);
  const std::vector<float> A = flashot::synthetic::bench_weights(rng, N),
                           B = flashot::synthetic::bench_weights(rng, N);

  std::vector<double> ms;
  for (int r = 0; r < 3; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<std::uint32_t> order = flashot::detail::locality_order({X, N, d});
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    if (order.size() != N) return 1;
  }
  std::sort(ms.begin(), ms.end());
  std::printf("%s, %zu points, d = %zu: locality order of one side %.1f ms (median of 3; min %.1f, max %.1f)\n",
              data.c_str(), N, d, ms[1], ms[0], ms[2]);
  const auto spread_start = std::chrono::steady_clock::now();
  const double spread_x = flashot::detail::leaf_spread({X, N, d}), spread_y = flashot::detail::leaf_spread({Y, N, d});
  const double spread_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - spread_start).count();
  std::printf("leaf spread (auto sorts at most %.2f): x %.4f, y %.4f (%.1f ms for both)\n",
              flashot::detail::kPointOrderAutoSpread, spread_x, spread_y, spread_ms);
  if (stride == 0) return 0;

  const std::size_t n = (N + stride - 1) / stride;
  std::vector<float> x(n * d), y(n * d), a(n), b(n);
  double sa = 0, sb = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::copy_n(X.data() + i * stride * d, d, x.data() + i * d);
    std::copy_n(Y.data() + i * stride * d, d, y.data() + i * d);
    sa += a[i] = A[i * stride];
    sb += b[i] = B[i * stride];
  }
  for (float& w : a) w = float(w / sa);
  for (float& w : b) w = float(w / sb);
  flashot::BackendOptions backend;
  backend.backend = flashot::BackendKind::kCpu;
  backend.point_order = flashot::PointOrder::kInput;
  flashot::Problem problem({x, n, d}, {y, n, d}, a, b, backend);
  const std::vector<std::uint32_t> ox = flashot::detail::locality_order({x, n, d});
  const std::vector<std::uint32_t> oy = flashot::detail::locality_order({y, n, d});
  for (const int k : {1, iters}) {
    flashot::SolveOptions o;
    o.epsilon = eps;
    o.tolerance = 0;
    o.max_iterations = k;
    o.diagnostics = false;
    const flashot::SolveResult r = problem.solve(o);
    const auto as_given = flashot::test::rows_screen_estimate({x, n, d}, {y, n, d}, b, r.g, eps, 1.0, {}, {});
    const auto sorted = flashot::test::rows_screen_estimate({x, n, d}, {y, n, d}, b, r.g, eps, 1.0, ox, oy);
    std::printf("every %zu-th point (%zu x %zu), eps %g, after %d cold symmetric iteration(s): the rows' screen keeps "
                "%.1f%% of 16 x 64 tiles as generated, %.1f%% in the locality order\n",
                stride, n, n, eps, k, 100 * as_given.fraction(), 100 * sorted.fraction());
  }
  return 0;
}
