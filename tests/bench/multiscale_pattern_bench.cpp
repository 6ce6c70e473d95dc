// Time and memory of the two PCA trees and of one certified list derivation (docs/multiscale.md, "Lists at 10⁸",
// "Blocks across clusters"): the sphere / deformed pair of `flashot bench --data sphere --pair deformed` (d = 3), or
// the mixture / matched pair of `flashot bench --data mixture --pair matched` (any d: 256 clusters at 10⁶ points, y
// the deformation of x point for point), its two trees, and lists for zero potentials at the ε of a relative blur
// (zero potentials keep the pairs within √(ε(τ + log M)) of each other: about the share the converged potentials
// keep, ≈ 1 % of the block pairs at 1 % blur once the blocks are small). With FOLDER, the problem and potentials of
// `flashot bench --end-to-end … --save-points FOLDER --save-potentials FOLDER` instead (x, y, a, b, f, g .npy; the
// lists of a solved problem, N and DATA then unused): the lists a solve derives. Prints figures; never a test.
//
//   flashot_multiscale_pattern_bench N [BLUR_RELATIVE=0.01] [REPEATS=3] [DATA=sphere|mixture] [D=3] [TRUNCATION=20]
//                                    [FOLDER]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>
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

/// A float32 .npy file's values (C order); throws naming the path.
std::vector<float> read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8];
  if (!in.read(magic, 8) || std::string(magic + 1, 5) != "NUMPY") throw std::runtime_error(path + ": not a .npy file");
  std::size_t header = 0;
  if (magic[6] == 1) {
    unsigned char two[2];
    in.read(reinterpret_cast<char*>(two), 2);
    header = two[0] | (std::size_t{two[1]} << 8);
  } else {
    unsigned char four[4];
    in.read(reinterpret_cast<char*>(four), 4);
    header = four[0] | (std::size_t{four[1]} << 8) | (std::size_t{four[2]} << 16) | (std::size_t{four[3]} << 24);
  }
  std::string dict(header, ' ');
  in.read(dict.data(), static_cast<std::streamsize>(header));
  if (dict.find("'<f4'") == std::string::npos || dict.find("'fortran_order': False") == std::string::npos)
    throw std::runtime_error(path + ": expected float32 in C order (header " + dict + ")");
  std::vector<float> v;
  float value;
  while (in.read(reinterpret_cast<char*>(&value), sizeof value)) v.push_back(value);
  return v;
}

/// Resets the peak resident size to the current one (Linux: /proc/self/clear_refs, "5").
void reset_peak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s N [BLUR_RELATIVE=0.01] [REPEATS=3] [DATA=sphere|mixture] [D=3] [TRUNCATION=20] "
                 "[FOLDER]\n", argv[0]);
    return 2;
  }
  std::size_t n = std::stoul(argv[1]);
  const double blur_relative = argc > 2 ? std::stod(argv[2]) : 0.01;
  const int repeats = argc > 3 ? std::stoi(argv[3]) : 3;
  const std::string data = argc > 4 ? argv[4] : "sphere";
  const std::size_t d = argc > 5 ? std::stoul(argv[5]) : 3;
  const double truncation = argc > 6 ? std::stod(argv[6]) : 20;
  const std::string folder = argc > 7 ? argv[7] : "";
  if (data != "sphere" && data != "mixture") {
    std::fprintf(stderr, "DATA must be sphere or mixture (got '%s')\n", data.c_str());
    return 2;
  }
  if (data == "sphere" && d != 3) {
    std::fprintf(stderr, "sphere needs D = 3 (got %zu)\n", d);
    return 2;
  }
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> x, y, a, b, f0, g0;
  if (!folder.empty()) {
    x = read_npy(folder + "/x.npy");
    y = read_npy(folder + "/y.npy");
    a = read_npy(folder + "/a.npy");
    b = read_npy(folder + "/b.npy");
    f0 = read_npy(folder + "/f.npy");
    g0 = read_npy(folder + "/g.npy");
    n = a.size();
    if (x.size() != n * d || y.size() != n * d || b.size() != n || f0.size() != n || g0.size() != n) {
      std::fprintf(stderr, "%s: expected x, y of n x %zu and a, b, f, g of n = m = %zu values\n", folder.c_str(), d, n);
      return 2;
    }
  } else if (data == "sphere") {
    x = synthetic::generate(synthetic::Shape::kSphere, n, d, 0, 0, 0);
    y = synthetic::deform(synthetic::generate(synthetic::Shape::kSphere, n, d, 0, 0, 1), d, 2);
  } else {  // as apps/bench.cpp's mixture / matched pair with seed 0
    const std::size_t components = std::min<std::size_t>(256, std::max<std::size_t>(8, n / 2000));
    x = synthetic::generate(synthetic::Shape::kClusters, n, d, 0, components, 0);
    y = synthetic::deform(x, d, 2);
  }
  const double generate = seconds_since(t0);
  std::vector<double> lo(d, 1e30), hi(d, -1e30);
  for (const auto* p : {&x, &y})
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < d; ++c) {
        lo[c] = std::min<double>(lo[c], (*p)[i * d + c]);
        hi[c] = std::max<double>(hi[c], (*p)[i * d + c]);
      }
  double diameter = 0;
  for (std::size_t c = 0; c < d; ++c) diameter += (hi[c] - lo[c]) * (hi[c] - lo[c]);
  diameter = std::sqrt(diameter);
  if (folder.empty()) {
    a.assign(n, 1.0f / static_cast<float>(n));
    b = a;
    f0.assign(n, 0.0f);
    g0.assign(n, 0.0f);
  }
  t0 = std::chrono::steady_clock::now();
  const detail::TreeInput clouds[2] = {{{x, n, d}, a, 1}, {{y, n, d}, b, 2}};
  auto both = detail::build_cluster_trees(clouds, detail::kBlockSize);  // as the solver builds them
  const double trees = seconds_since(t0);
  const detail::ClusterTree &tx = both[0], &ty = both[1];
  const auto xp = detail::permute_rows(x, d, tx.order), yp = detail::permute_rows(y, d, ty.order);
  std::vector<float> f(n), g(n);
  for (std::size_t p = 0; p < n; ++p) {
    f[p] = f0[tx.order[p]];
    g[p] = g0[ty.order[p]];
  }
  detail::PatternRequest q;
  q.epsilon = (blur_relative * diameter) * (blur_relative * diameter);
  q.truncation = truncation;
  q.mass = 1;
  q.max_pairs = static_cast<std::size_t>(0.5 * double(tx.blocks) * double(ty.blocks));
  std::printf("n = m = %zu, d = %zu, %s, %d threads; generate %.3f s, trees %.3f s; %zu x %zu blocks (%zu x %zu "
              "parts), eps %.4g (blur %.4g)\n",
              n, d, !folder.empty() ? folder.c_str() : data == "sphere" ? "sphere / deformed" : "mixture / matched",
              omp_get_max_threads(), generate,
              trees, tx.blocks, ty.blocks, tx.parts(), ty.parts(), q.epsilon, blur_relative * diameter);
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
