// Cluster hierarchies of the multiscale solver: Morton order (d ≤ 4) or a PCA tree (d > 4), then the centre,
// radius and mass of every node of the implicit tree over blocks (docs/multiscale.md, "Hierarchy").
#include "multiscale_tree.hpp"

#include <omp.h>
#include <parallel/algorithm>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

namespace flashot::detail {

namespace {

/// Morton codes interleave 63/d bits per axis: beyond this dimension the cells get too coarse.
constexpr std::size_t kMortonMaxDim = 4;
/// Points of a node used to find its principal direction: kPcaSampleValues / d of them, between kPcaSampleMin and
/// 2048 (2048 for d ≤ 3). The power iteration costs 2·kPowerSteps passes over the sample per node, which at d = 50
/// and 2048 points paid for the leaf parts (docs/multiscale.md, "Blocks across clusters").
constexpr std::size_t kPcaSampleValues = 6144, kPcaSampleMin = 256;
constexpr int kPowerSteps = 6;
/// Nodes with more points than this split their children as separate OpenMP tasks.
constexpr std::size_t kTaskPoints = 1 << 14;
/// Seeds of the farthest-first traversal that groups a leaf block's points (ClusterTree::part_offset): at most
/// this many parts.
constexpr std::size_t kMaxSeeds = 16;
/// A leaf block is searched for parts only when its points, projected on the line through two far apart members,
/// leave an empty gap of at least this share of their range.
constexpr double kProjectionGap = 0.1;
constexpr std::size_t kProjectionBins = 64;
/// Two halves of a part become parts of their own when their centres lie at least this many times the sum of their
/// radii apart: groups that lie apart (two clusters in one block, an outlier), never the two halves of one compact
/// or elongated group (a segment's halves lie exactly the sum of their radii apart, a disc's or a blob's closer).
constexpr double kPartGap = 1.25;

std::uint64_t mix(std::uint64_t z) {  // splitmix64 finaliser
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int ceil_log2(std::size_t v) {
  int h = 0;
  while ((std::size_t{1} << h) < v) ++h;
  return h;
}

std::vector<std::uint32_t> morton_order(PointsView p) {
  const std::size_t n = p.n, d = p.d;
  const int bits = static_cast<int>(std::min<std::size_t>(31, 63 / d));
  std::vector<double> lo(d, std::numeric_limits<double>::infinity()), hi(d, -std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < d; ++c) {
      lo[c] = std::min<double>(lo[c], p.data[i * d + c]);
      hi[c] = std::max<double>(hi[c], p.data[i * d + c]);
    }
  // One scale for every axis keeps the curve's cells cubes (an anisotropic cloud is not stretched).
  double extent = 0;
  for (std::size_t c = 0; c < d; ++c) extent = std::max(extent, hi[c] - lo[c]);
  const double cells = std::ldexp(1.0, bits) - 1;
  const double scale = extent > 0 ? cells / extent : 0;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> keys(n);
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t code = 0;
    for (std::size_t c = 0; c < d; ++c) {
      const auto q = static_cast<std::uint64_t>(std::clamp((p.data[i * d + c] - lo[c]) * scale, 0.0, cells));
      for (int b = 0; b < bits; ++b) code |= ((q >> b) & 1u) << (b * d + c);
    }
    keys[i] = {code, static_cast<std::uint32_t>(i)};
  }
  __gnu_parallel::sort(keys.begin(), keys.end());
  std::vector<std::uint32_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = keys[i].second;
  return order;
}

struct PcaSplitter {
  PointsView p;
  const ClusterTree& t;
  std::uint64_t seed;
  std::uint32_t* idx;

  void split(int level, std::size_t k) const {
    if (level == t.height) return;
    const std::size_t b = t.begin(level, k), e = t.end(level, k);
    const std::size_t mid = t.end(level + 1, 2 * k);
    if (mid < e && e - b > 1) partition(level, k, b, mid, e);
    const bool big = e - b > kTaskPoints;
#pragma omp task if (big) firstprivate(level, k)
    split(level + 1, 2 * k);
    if (mid < e) {
#pragma omp task if (big) firstprivate(level, k)
      split(level + 1, 2 * k + 1);
    }
#pragma omp taskwait
  }

  /// Reorders idx[b, e) so that idx[b, mid) are the points of lowest projection on the principal direction.
  void partition(int level, std::size_t k, std::size_t b, std::size_t mid, std::size_t e) const {
    const std::size_t d = p.d, count = e - b;
    const std::size_t sample = std::clamp(kPcaSampleValues / d, kPcaSampleMin, kPcaSampleValues / 3);
    const std::size_t stride = std::max<std::size_t>(1, count / sample);
    std::vector<double> mean(d, 0.0);
    std::size_t samples = 0;
    for (std::size_t s = b; s < e; s += stride, ++samples)
      for (std::size_t c = 0; c < d; ++c) mean[c] += p.data[idx[s] * d + c];
    for (double& v : mean) v /= static_cast<double>(samples);
    std::vector<double> v(d), next(d);
    std::uint64_t state = mix(seed ^ mix((static_cast<std::uint64_t>(level) << 40) ^ k));
    for (std::size_t c = 0; c < d; ++c) {
      state = mix(state);
      v[c] = static_cast<double>(state >> 11) * 0x1p-53 - 0.5;
    }
    for (int step = 0; step < kPowerSteps; ++step) {
      std::fill(next.begin(), next.end(), 0.0);
      for (std::size_t s = b; s < e; s += stride) {
        const float* x = p.data.data() + std::size_t{idx[s]} * d;
        double dot = 0;
        for (std::size_t c = 0; c < d; ++c) dot += (x[c] - mean[c]) * v[c];
        for (std::size_t c = 0; c < d; ++c) next[c] += dot * (x[c] - mean[c]);
      }
      double norm = 0;
      for (double u : next) norm += u * u;
      norm = std::sqrt(norm);
      if (!(norm > 0)) break;  // all sampled points coincide: keep the current direction
      for (std::size_t c = 0; c < d; ++c) v[c] = next[c] / norm;
    }
    std::vector<std::pair<double, std::uint32_t>> proj(count);
    for (std::size_t s = 0; s < count; ++s) {
      const float* x = p.data.data() + std::size_t{idx[b + s]} * d;
      double dot = 0;
      for (std::size_t c = 0; c < d; ++c) dot += x[c] * v[c];
      proj[s] = {dot, idx[b + s]};
    }
    std::nth_element(proj.begin(), proj.begin() + static_cast<std::ptrdiff_t>(mid - b), proj.end());
    for (std::size_t s = 0; s < count; ++s) idx[b + s] = proj[s].second;
  }
};

/// A run of a leaf's points in the order (positions [b, e)) with its mass-weighted centre and exact radius.
struct Part {
  std::size_t b = 0, e = 0;
  std::vector<double> centre;
  double radius = 0, mass = 0;
};

Part measure_part(PointsView p, std::span<const float> w, const std::uint32_t* order, std::size_t b, std::size_t e) {
  const std::size_t d = p.d;
  Part part{b, e, std::vector<double>(d, 0.0)};
  for (std::size_t s = b; s < e; ++s) part.mass += w[order[s]];
  for (std::size_t s = b; s < e; ++s) {
    const double ws = part.mass > 0 ? w[order[s]] / part.mass : 1.0 / static_cast<double>(e - b);
    for (std::size_t q = 0; q < d; ++q) part.centre[q] += ws * p.data[std::size_t{order[s]} * d + q];
  }
  double r2 = 0;
  for (std::size_t s = b; s < e; ++s) {
    double dist = 0;
    for (std::size_t q = 0; q < d; ++q) {
      const double u = p.data[std::size_t{order[s]} * d + q] - part.centre[q];
      dist += u * u;
    }
    r2 = std::max(r2, dist);
  }
  part.radius = std::sqrt(r2);
  return part;
}

double squared_distance(const float* x, const double* c, std::size_t d) {
  double dist = 0;
  for (std::size_t q = 0; q < d; ++q) dist += (x[q] - c[q]) * (x[q] - c[q]);
  return dist;
}

/// Groups a leaf's points (positions [b, e)) into parts that lie apart. First a cheap test: projected on the line
/// through the point farthest from the centre and the point farthest from that one, the other points must leave an
/// empty gap of at least kProjectionGap of their range (a compact or elongated leaf fills its range; separate
/// clusters leave one between the clusters of those two points). Then seeds by farthest-first traversal, each point
/// in the group of its nearest seed, until every point lies within half the first seed's reach of a seed or
/// kMaxSeeds seeds; the groups are measured, any two that do not lie apart (kPartGap) are merged (and measured
/// again) until all do. Two or more groups left: the positions are reordered so that each is a run (each in its
/// previous order) and they are returned; else the run stays whole.
std::vector<Part> leaf_parts(PointsView p, std::span<const float> w, std::uint32_t* order, std::size_t b,
                             std::size_t e) {
  const std::size_t d = p.d, count = e - b;
  Part whole = measure_part(p, w, order, b, e);
  if (count < 3 || !(whole.radius > 0)) return {whole};
  const auto at = [&](std::size_t s) { return p.data.data() + std::size_t{order[s]} * d; };
  const auto farthest = [&](const double* from) {
    std::size_t far = b;
    double best = -1;
    for (std::size_t s = b; s < e; ++s)
      if (const double v = squared_distance(at(s), from, d); v > best) best = v, far = s;
    return far;
  };
  const std::size_t first = farthest(whole.centre.data());
  std::vector<double> seed(at(first), at(first) + d);
  const std::size_t second = farthest(seed.data());
  {
    // The two far points themselves are left out: in many dimensions a point far from the centre lies far out on
    // its own direction whatever the shape of the rest.
    std::vector<double> axis(d), along;
    for (std::size_t q = 0; q < d; ++q) axis[q] = static_cast<double>(at(second)[q]) - seed[q];
    for (std::size_t s = b; s < e; ++s) {
      if (s == first || s == second) continue;
      double v = 0;
      for (std::size_t q = 0; q < d; ++q) v += (at(s)[q] - seed[q]) * axis[q];
      along.push_back(v);
    }
    // An empty gap of a share kProjectionGap of the range holds ⌊kProjectionBins·kProjectionGap⌋ − 1 whole empty
    // bins of kProjectionBins: that many in a row pass (a histogram, not a sort: this runs for every leaf).
    const auto [lo, hi] = std::minmax_element(along.begin(), along.end());
    const double low = *lo, range = *hi - *lo;
    if (!(range > 0)) return {whole};
    std::array<bool, kProjectionBins> filled{};
    for (const double v : along)
      filled[std::min(kProjectionBins - 1, static_cast<std::size_t>((v - low) / range * kProjectionBins))] = true;
    const auto needed = static_cast<std::size_t>(kProjectionBins * kProjectionGap) - 1;
    std::size_t run = 0, longest = 0;
    for (const bool f : filled) longest = std::max(longest, run = f ? 0 : run + 1);
    if (longest < needed) return {whole};
  }
  std::vector<double> nearest(count);
  std::vector<std::uint8_t> group(count, 0);
  for (std::size_t s = b; s < e; ++s) nearest[s - b] = squared_distance(at(s), seed.data(), d);
  const double reach = *std::max_element(nearest.begin(), nearest.end());  // squared
  std::size_t seeds = 1;
  for (; seeds < kMaxSeeds; ++seeds) {
    const auto far = static_cast<std::size_t>(std::max_element(nearest.begin(), nearest.end()) - nearest.begin());
    if (!(nearest[far] > 0.25 * reach)) break;
    seed.assign(at(b + far), at(b + far) + d);
    for (std::size_t s = b; s < e; ++s)
      if (const double v = squared_distance(at(s), seed.data(), d); v < nearest[s - b]) {
        nearest[s - b] = v;
        group[s - b] = static_cast<std::uint8_t>(seeds);
      }
  }
  // Merge groups that do not lie apart, until every pair does.
  const std::vector<std::uint32_t> saved(order + b, order + e);
  std::vector<std::size_t> from(count);  // position − b → index into `saved`
  const auto measure = [&](std::size_t groups) {
    std::vector<Part> parts;
    std::size_t next = b;
    for (std::size_t c = 0; c < groups; ++c) {
      const std::size_t start = next;
      for (std::size_t s = 0; s < count; ++s)
        if (group[s] == c) {
          from[next - b] = s;
          order[next++] = saved[s];
        }
      if (next > start) parts.push_back(measure_part(p, w, order, start, next));
    }
    // Labels again from 0, the c-th non-empty group c.
    for (std::size_t c = 0; c < parts.size(); ++c)
      for (std::size_t s = parts[c].b; s < parts[c].e; ++s) group[from[s - b]] = static_cast<std::uint8_t>(c);
    return parts;
  };
  std::vector<Part> parts = measure(seeds);
  for (bool merged = true; merged && parts.size() > 1;) {
    merged = false;
    for (std::size_t i = 0; i < parts.size() && !merged; ++i)
      for (std::size_t j = i + 1; j < parts.size() && !merged; ++j) {
        double gap = 0;
        for (std::size_t q = 0; q < d; ++q)
          gap += (parts[i].centre[q] - parts[j].centre[q]) * (parts[i].centre[q] - parts[j].centre[q]);
        if (std::sqrt(gap) >= kPartGap * (parts[i].radius + parts[j].radius)) continue;
        for (std::size_t s = 0; s < count; ++s)
          if (group[s] == j) group[s] = static_cast<std::uint8_t>(i);
        merged = true;
      }
    if (merged) parts = measure(parts.size());
  }
  if (parts.size() > 1) return parts;
  std::copy(saved.begin(), saved.end(), order + b);
  return {whole};
}

}  // namespace

int ClusterTree::level_with_at_most(std::size_t limit) const {
  int level = 0;
  while (level < height && count(level + 1) <= limit) ++level;
  return level;
}

ClusterTree build_cluster_tree(PointsView p, std::span<const float> w, std::size_t block, std::uint64_t seed,
                               TreeOrder order) {
  if (order == TreeOrder::kMorton && p.d > kMortonMaxDim)
    throw std::invalid_argument("cluster tree: Morton order needs d ≤ " + std::to_string(kMortonMaxDim) + " (got " +
                                std::to_string(p.d) + ")");
  if (block == 0) throw std::invalid_argument("cluster tree: block must be ≥ 1 (got 0)");
  if (p.n >= (std::size_t{1} << 32))
    throw std::invalid_argument("multiscale: at most 2^32 − 1 points per cloud (got " + std::to_string(p.n) + ")");
  ClusterTree t;
  t.n = p.n;
  t.d = p.d;
  t.block = block;
  t.blocks = (p.n + block - 1) / block;
  t.height = ceil_log2(std::max<std::size_t>(1, t.blocks));
  if (order == TreeOrder::kMorton) {
    t.kind = "morton";
    t.order = morton_order(p);
  } else {
    t.kind = "pca-tree";
    t.order.resize(p.n);
    for (std::size_t i = 0; i < p.n; ++i) t.order[i] = static_cast<std::uint32_t>(i);
    const PcaSplitter splitter{p, t, seed, t.order.data()};
#pragma omp parallel
#pragma omp single
    splitter.split(0, 0);
  }

  const std::size_t d = p.d;
  const int H = t.height;
  {
    // Parts of every leaf (each leaf's positions reordered so that its parts are runs), in parallel, then flattened.
    std::vector<std::vector<Part>> parts(t.blocks);
#pragma omp parallel for schedule(dynamic, 16)
    for (std::size_t k = 0; k < t.blocks; ++k) parts[k] = leaf_parts(p, w, t.order.data(), t.begin(H, k), t.end(H, k));
    t.part_offset.assign(1, 0);
    for (const auto& leaf : parts) {
      for (const Part& part : leaf) {
        t.part_begin.push_back(static_cast<std::uint32_t>(part.b));
        t.part_end.push_back(static_cast<std::uint32_t>(part.e));
        t.part_centre.insert(t.part_centre.end(), part.centre.begin(), part.centre.end());
        t.part_radius.push_back(part.radius);
        t.part_mass.push_back(part.mass);
      }
      t.part_offset.push_back(static_cast<std::uint32_t>(t.part_begin.size()));
    }
  }
  t.centre.resize(H + 1);
  t.radius.resize(H + 1);
  t.mass.resize(H + 1);
  {
    const std::size_t nb = t.blocks;
    t.centre[H].assign(nb * d, 0.0);
    t.radius[H].assign(nb, 0.0);
    t.mass[H].assign(nb, 0.0);
    t.leaf_gram.assign(nb * d * d, 0.0);
    t.leaf_axes.assign(nb * 2 * d, 0.0);
    t.leaf_extent.assign(nb * 3, 0.0);
#pragma omp parallel for schedule(static)
    for (std::size_t k = 0; k < nb; ++k) {
      const std::size_t b = t.begin(H, k), e = t.end(H, k);
      double mass = 0;
      for (std::size_t s = b; s < e; ++s) mass += w[t.order[s]];
      double* c = t.centre[H].data() + k * d;
      for (std::size_t s = b; s < e; ++s) {
        const double ws = mass > 0 ? w[t.order[s]] / mass : 1.0 / static_cast<double>(e - b);
        for (std::size_t q = 0; q < d; ++q) c[q] += ws * p.data[std::size_t{t.order[s]} * d + q];
      }
      double r2 = 0;
      for (std::size_t s = b; s < e; ++s) {
        double dist = 0;
        for (std::size_t q = 0; q < d; ++q) {
          const double u = p.data[std::size_t{t.order[s]} * d + q] - c[q];
          dist += u * u;
        }
        r2 = std::max(r2, dist);
      }
      t.radius[H][k] = std::sqrt(r2);
      t.mass[H][k] = mass;
      // Gram matrix of the offsets, then its Cholesky factor in place. The ridge keeps it positive definite for
      // blocks flatter than d (surfaces, low intrinsic dimension): the fit then ignores the empty directions.
      double* G = t.leaf_gram.data() + k * d * d;
      for (std::size_t s = b; s < e; ++s) {
        const float* x = p.data.data() + std::size_t{t.order[s]} * d;
        for (std::size_t i = 0; i < d; ++i)
          for (std::size_t j = 0; j <= i; ++j) G[i * d + j] += (x[i] - c[i]) * (x[j] - c[j]);
      }
      {
        // Two principal directions of the offsets (power iteration on the Gram matrix, the second deflated), then
        // the block's extents along them and across both.
        double* axes = t.leaf_axes.data() + k * 2 * d;
        const auto gram = [&](std::size_t i, std::size_t j) { return i >= j ? G[i * d + j] : G[j * d + i]; };
        std::vector<double> v(d), gv(d);
        for (int a = 0; a < std::min<int>(2, static_cast<int>(d)); ++a) {
          double* qa = axes + a * d;
          for (std::size_t i = 0; i < d; ++i) v[i] = 1.0 + 0.618 * static_cast<double>((i * 7 + a * 3) % 11);
          for (int it = 0; it < 30; ++it) {
            if (a == 1) {  // stay orthogonal to q₁
              double dot = 0;
              for (std::size_t i = 0; i < d; ++i) dot += v[i] * axes[i];
              for (std::size_t i = 0; i < d; ++i) v[i] -= dot * axes[i];
            }
            double norm = 0;
            for (std::size_t i = 0; i < d; ++i) norm += v[i] * v[i];
            norm = std::sqrt(norm);
            if (!(norm > 0)) break;
            for (std::size_t i = 0; i < d; ++i) v[i] /= norm;
            for (std::size_t i = 0; i < d; ++i) {
              gv[i] = 0;
              for (std::size_t j = 0; j < d; ++j) gv[i] += gram(i, j) * v[j];
            }
            if (it == 29) break;
            v.swap(gv);
          }
          if (a == 1) {  // exactly orthonormal to q₁ (rounding of the last step)
            double dot = 0;
            for (std::size_t i = 0; i < d; ++i) dot += v[i] * axes[i];
            for (std::size_t i = 0; i < d; ++i) v[i] -= dot * axes[i];
          }
          double norm = 0;
          for (std::size_t i = 0; i < d; ++i) norm += v[i] * v[i];
          norm = std::sqrt(norm);
          if (norm > 0)
            for (std::size_t i = 0; i < d; ++i) qa[i] = v[i] / norm;
        }
        double* h = t.leaf_extent.data() + k * 3;
        for (std::size_t s = b; s < e; ++s) {
          const float* x = p.data.data() + std::size_t{t.order[s]} * d;
          double p1 = 0, p2 = 0, u2 = 0;
          for (std::size_t i = 0; i < d; ++i) {
            const double u = x[i] - c[i];
            p1 += u * axes[i];
            p2 += u * axes[d + i];
            u2 += u * u;
          }
          h[0] = std::max(h[0], std::abs(p1));
          h[1] = std::max(h[1], std::abs(p2));
          h[2] = std::max(h[2], std::sqrt(std::max(0.0, u2 - p1 * p1 - p2 * p2)));
        }
        // The orthogonality of q₁, q₂ holds to rounding: the slack keeps the across-extent a bound.
        h[2] = std::min(t.radius[H][k], h[2] * (1 + 1e-9) + 1e-7 * t.radius[H][k]);
      }
      double trace = 0;
      for (std::size_t i = 0; i < d; ++i) trace += G[i * d + i];
      const double ridge = 1e-6 * trace / static_cast<double>(d) + 1e-30;
      for (std::size_t i = 0; i < d; ++i) G[i * d + i] += ridge;
      for (std::size_t j = 0; j < d; ++j) {
        double diag = G[j * d + j];
        for (std::size_t q = 0; q < j; ++q) diag -= G[j * d + q] * G[j * d + q];
        diag = std::sqrt(std::max(diag, ridge));
        G[j * d + j] = diag;
        for (std::size_t i = j + 1; i < d; ++i) {
          double v = G[i * d + j];
          for (std::size_t q = 0; q < j; ++q) v -= G[i * d + q] * G[j * d + q];
          G[i * d + j] = v / diag;
        }
      }
    }
  }
  for (int level = H - 1; level >= 0; --level) {
    const std::size_t nc = t.count(level);
    t.centre[level].assign(nc * d, 0.0);
    t.radius[level].assign(nc, 0.0);
    t.mass[level].assign(nc, 0.0);
    const std::size_t below = t.count(level + 1);
    for (std::size_t k = 0; k < nc; ++k) {
      const std::size_t c0 = 2 * k, c1 = std::min(2 * k + 2, below);
      double mass = 0, pts = 0;
      for (std::size_t c = c0; c < c1; ++c) {
        mass += t.mass[level + 1][c];
        pts += static_cast<double>(t.end(level + 1, c) - t.begin(level + 1, c));
      }
      double* centre = t.centre[level].data() + k * d;
      for (std::size_t c = c0; c < c1; ++c) {
        const double share = mass > 0 ? t.mass[level + 1][c] / mass
                                      : static_cast<double>(t.end(level + 1, c) - t.begin(level + 1, c)) / pts;
        for (std::size_t q = 0; q < d; ++q) centre[q] += share * t.centre[level + 1][c * d + q];
      }
      double r = 0;
      for (std::size_t c = c0; c < c1; ++c) {
        double dist = 0;
        for (std::size_t q = 0; q < d; ++q) {
          const double u = centre[q] - t.centre[level + 1][c * d + q];
          dist += u * u;
        }
        r = std::max(r, std::sqrt(dist) + t.radius[level + 1][c]);
      }
      t.radius[level][k] = r;
      t.mass[level][k] = mass;
    }
  }
  return t;
}

std::vector<float> permute_rows(std::span<const float> points, std::size_t d, const std::vector<std::uint32_t>& order) {
  std::vector<float> out(order.size() * d);
#pragma omp parallel for schedule(static)
  for (std::size_t p = 0; p < order.size(); ++p)
    std::copy_n(points.data() + std::size_t{order[p]} * d, d, out.data() + p * d);
  return out;
}

}  // namespace flashot::detail

namespace flashot::detail {

std::vector<std::uint32_t> cluster_order(PointsView p, std::size_t block, std::uint64_t seed, TreeOrder order) {
  if (order == TreeOrder::kMorton && p.d > kMortonMaxDim)
    throw std::invalid_argument("cluster order: Morton order needs d ≤ " + std::to_string(kMortonMaxDim) + " (got " +
                                std::to_string(p.d) + ")");
  if (block == 0) throw std::invalid_argument("cluster order: block must be ≥ 1 (got 0)");
  if (p.n >= (std::size_t{1} << 32))
    throw std::invalid_argument("cluster order: at most 2^32 − 1 points per cloud (got " + std::to_string(p.n) + ")");
  if (order == TreeOrder::kMorton) return morton_order(p);
  // The skeleton the splitter reads (sizes and height), then its splits alone.
  ClusterTree t;
  t.n = p.n;
  t.d = p.d;
  t.block = block;
  t.blocks = (p.n + block - 1) / block;
  t.height = ceil_log2(std::max<std::size_t>(1, t.blocks));
  t.order.resize(p.n);
  for (std::size_t i = 0; i < p.n; ++i) t.order[i] = static_cast<std::uint32_t>(i);
  const PcaSplitter splitter{p, t, seed, t.order.data()};
#pragma omp parallel
#pragma omp single
  splitter.split(0, 0);
  return std::move(t.order);
}

}  // namespace flashot::detail
