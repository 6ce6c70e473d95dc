// Time and memory of one certified list derivation (docs/multiscale.md, "Lists at 10⁸"): the sphere / deformed
// pair of `flashot bench --data sphere --pair deformed`, its two PCA trees, and lists for zero potentials at the ε of
// a relative blur (zero potentials keep the pairs within √(ε(τ + log M)) of each other: about the share the
// converged potentials keep, ≈ 1 % of the block pairs at 1 % blur once the blocks are small). Prints figures;
// never a test.
//
//   flashot_multiscale_pattern_bench N [BLUR_RELATIVE=0.01] [REPEATS=3]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "flashot/synthetic.hpp"
#include "multiscale_pattern.hpp"
#include "multiscale_tree.hpp"

using namespace flashot;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// A field of /proc/self/status in bytes (VmRSS, VmHWM), or −1.
double status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return 1024.0 * std::stod(line.substr(key.size() + 1));
  return -1;
}

/// Resets the peak resident size to the current one (Linux: /proc/self/clear_refs, "5").
void reset_peak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s N [BLUR_RELATIVE=0.01] [REPEATS=3]\n", argv[0]);
    return 2;
  }
  const std::size_t n = std::stoul(argv[1]), d = 3;
  const double blur_relative = argc > 2 ? std::stod(argv[2]) : 0.01;
  const int repeats = argc > 3 ? std::stoi(argv[3]) : 3;
  auto t0 = std::chrono::steady_clock::now();
  const auto x = synthetic::generate(synthetic::Shape::kSphere, n, d, 0, 0, 0);
  const auto y = synthetic::deform(synthetic::generate(synthetic::Shape::kSphere, n, d, 0, 0, 1), d, 2);
  const double generate = seconds_since(t0);
  double lo[3] = {1e30, 1e30, 1e30}, hi[3] = {-1e30, -1e30, -1e30};
  for (const auto* p : {&x, &y})
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < d; ++c) {
        lo[c] = std::min<double>(lo[c], (*p)[i * d + c]);
        hi[c] = std::max<double>(hi[c], (*p)[i * d + c]);
      }
  const double diameter = std::hypot(hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]);
  const std::vector<float> w(n, 1.0f / static_cast<float>(n));
  t0 = std::chrono::steady_clock::now();
  const auto tx = detail::build_cluster_tree({x, n, d}, w, detail::kBlockSize, 1);
  const auto ty = detail::build_cluster_tree({y, n, d}, w, detail::kBlockSize, 2);
  const double trees = seconds_since(t0);
  const auto xp = detail::permute_rows(x, d, tx.order), yp = detail::permute_rows(y, d, ty.order);
  const std::vector<float> f(n, 0.0f), g(n, 0.0f);
  detail::PatternRequest q;
  q.epsilon = (blur_relative * diameter) * (blur_relative * diameter);
  q.truncation = 20;
  q.mass = 1;
  q.max_pairs = static_cast<std::size_t>(0.5 * double(tx.blocks) * double(ty.blocks));
  std::printf("n = m = %zu, d = 3, sphere / deformed, %d threads; generate %.3f s, trees %.3f s; %zu x %zu blocks, "
              "eps %.4g (blur %.4g)\n",
              n, omp_get_max_threads(), generate, trees, tx.blocks, ty.blocks, q.epsilon, blur_relative * diameter);
  for (int k = 0; k < repeats; ++k) {
    const double before = status_bytes("VmRSS");
    reset_peak();
    t0 = std::chrono::steady_clock::now();
    const detail::PatternResult r = detail::certified_pattern(tx, ty, xp, yp, f, g, q);
    const double seconds = seconds_since(t0);
    const double peak = status_bytes("VmHWM") - before;
    if (!r.pattern) {
      std::printf("dense (over the budget)\n");
      continue;
    }
    const double pairs = static_cast<double>(r.kept_pairs);
    const std::size_t ranges = r.pattern->row_ranges().size() + r.pattern->col_ranges().size();
    std::printf("lists: %.0f pairs (%.4g of the block pairs), %zu ranges (rows and columns), %.3f s = %.3f s per 1e8 "
                "pairs; peak resident above the inputs %.1f MB = %.2f bytes per pair\n",
                pairs, r.pattern->kept_fraction(), ranges, seconds, seconds / pairs * 1e8, peak / 1e6, peak / pairs);
  }
  return 0;
}
