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
/// A node's projections run in tasks of this many points (one task below it).
constexpr std::size_t kProjectionChunk = 1 << 15;
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

/// Sums over a point's d coordinates run this many points at a time: each point's sum is the same sequence of
/// roundings as alone (nothing is reassociated, so every result is bit for bit what one point at a time gives), but
/// the points' sums are independent and overlap in the pipeline instead of each add waiting on the one before
/// (at d = 50 the adds' latency, not their count, set the hierarchy's time).
constexpr std::size_t kRowsAtATime = 4;

/// Rows this far ahead are prefetched where rows are gathered through the order (the points of a node or a leaf lie
/// anywhere in the caller's array: each row is a cache miss, and the sums would wait on memory, not on the adds).
constexpr std::size_t kPrefetchRows = 16;

/// Asks for the cache lines of a row of d values.
template <class T>
void prefetch_row(const T* x, std::size_t d) {
  const char* first = reinterpret_cast<const char*>(x);
  const char* last = reinterpret_cast<const char*>(x + d) - 1;
  for (const char* line = first; line <= last; line += 64) __builtin_prefetch(line);
  __builtin_prefetch(last);
}

/// out[k] = Σ_c term(row(k)[c], c), summed in the order of c, for k < count: `row(k)` points to the point's d values,
/// `term` gives a double. kRowsAtATime points at a time (above), the rows kPrefetchRows ahead prefetched.
template <class Row, class Term>
void row_sums(std::size_t count, std::size_t d, Row row, Term term, double* out) {
  std::size_t k = 0;
  for (std::size_t r = 0; r < std::min(count, kPrefetchRows); ++r) prefetch_row(row(r), d);
  for (; k + kRowsAtATime <= count; k += kRowsAtATime) {
    for (std::size_t r = k + kPrefetchRows; r < std::min(count, k + kPrefetchRows + kRowsAtATime); ++r)
      prefetch_row(row(r), d);
    const auto *x0 = row(k), *x1 = row(k + 1), *x2 = row(k + 2), *x3 = row(k + 3);
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (std::size_t c = 0; c < d; ++c) {
      s0 += term(x0[c], c);
      s1 += term(x1[c], c);
      s2 += term(x2[c], c);
      s3 += term(x3[c], c);
    }
    out[k] = s0;
    out[k + 1] = s1;
    out[k + 2] = s2;
    out[k + 3] = s3;
  }
  for (; k < count; ++k) {
    const auto* x = row(k);
    double sum = 0;
    for (std::size_t c = 0; c < d; ++c) sum += term(x[c], c);
    out[k] = sum;
  }
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
    const std::size_t samples = (count + stride - 1) / stride;
    const auto point = [&](std::size_t s) { return p.data.data() + std::size_t{idx[s]} * d; };
    std::vector<double> mean(d, 0.0);
    for (std::size_t s = b; s < e; s += stride)
      for (std::size_t c = 0; c < d; ++c) mean[c] += point(s)[c];
    for (double& v : mean) v /= static_cast<double>(samples);
    // The sample's offsets from its mean, gathered once for the power iteration's 2·kPowerSteps passes.
    std::vector<double> u(samples * d);
    for (std::size_t j = 0; j < samples; ++j)
      for (std::size_t c = 0; c < d; ++c) u[j * d + c] = point(b + j * stride)[c] - mean[c];
    std::vector<double> v(d), next(d), dot(kRowsAtATime);
    std::uint64_t state = mix(seed ^ mix((static_cast<std::uint64_t>(level) << 40) ^ k));
    for (std::size_t c = 0; c < d; ++c) {
      state = mix(state);
      v[c] = static_cast<double>(state >> 11) * 0x1p-53 - 0.5;
    }
    for (int step = 0; step < kPowerSteps; ++step) {
      // next = Σ_j ⟨u_j, v⟩ u_j over the samples in order (each next[c] the same sum as one sample at a time).
      std::fill(next.begin(), next.end(), 0.0);
      for (std::size_t j0 = 0; j0 < samples; j0 += kRowsAtATime) {
        const std::size_t rows = std::min(kRowsAtATime, samples - j0);
        row_sums(
            rows, d, [&](std::size_t r) { return u.data() + (j0 + r) * d; },
            [&](double x, std::size_t c) { return x * v[c]; }, dot.data());
        for (std::size_t r = 0; r < rows; ++r) {
          const double* uj = u.data() + (j0 + r) * d;
          for (std::size_t c = 0; c < d; ++c) next[c] += dot[r] * uj[c];
        }
      }
      double norm = 0;
      for (double w : next) norm += w * w;
      norm = std::sqrt(norm);
      if (!(norm > 0)) break;  // all sampled points coincide: keep the current direction
      for (std::size_t c = 0; c < d; ++c) v[c] = next[c] / norm;
    }
    // Every point's projection; a large node's in tasks (the points are independent: the same values whatever the
    // threads), so that the top splits, one node each, do not run on one thread while the others wait.
    std::vector<double> along(count);
    std::vector<std::pair<double, std::uint32_t>> proj(count);
    const std::size_t chunks = (count + kProjectionChunk - 1) / kProjectionChunk;
#pragma omp taskloop if (chunks > 1) grainsize(1) default(shared)
    for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
      const std::size_t s0 = chunk * kProjectionChunk, s1 = std::min(count, s0 + kProjectionChunk);
      row_sums(
          s1 - s0, d, [&](std::size_t r) { return point(b + s0 + r); },
          [&](float x, std::size_t c) { return x * v[c]; }, along.data() + s0);
      for (std::size_t s = s0; s < s1; ++s) proj[s] = {along[s], idx[b + s]};
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

/// dist[s − b] = ‖x_s − c‖² for the points at positions [b, e), summed as one point at a time would.
void squared_distances(PointsView p, const std::uint32_t* order, std::size_t b, std::size_t e, const double* c,
                       double* dist) {
  const std::size_t d = p.d;
  row_sums(
      e - b, d, [&](std::size_t r) { return p.data.data() + std::size_t{order[b + r]} * d; },
      [&](float x, std::size_t q) {
        const double u = x - c[q];
        return u * u;
      },
      dist);
}

Part measure_part(PointsView p, std::span<const float> w, const std::uint32_t* order, std::size_t b, std::size_t e) {
  const std::size_t d = p.d;
  Part part{b, e, std::vector<double>(d, 0.0)};
  for (std::size_t s = b; s < e; ++s) part.mass += w[order[s]];
  const auto row = [&](std::size_t s) { return p.data.data() + std::size_t{order[s]} * d; };
  for (std::size_t s = b; s < std::min(e, b + kPrefetchRows); ++s) prefetch_row(row(s), d);
  for (std::size_t s = b; s < e; ++s) {
    if (s + kPrefetchRows < e) prefetch_row(row(s + kPrefetchRows), d);
    const double ws = part.mass > 0 ? w[order[s]] / part.mass : 1.0 / static_cast<double>(e - b);
    for (std::size_t q = 0; q < d; ++q) part.centre[q] += ws * p.data[std::size_t{order[s]} * d + q];
  }
  std::vector<double> dist(e - b);
  squared_distances(p, order, b, e, part.centre.data(), dist.data());
  double r2 = 0;
  for (const double v : dist) r2 = std::max(r2, v);
  part.radius = std::sqrt(r2);
  return part;
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
  std::vector<double> dist(count);
  const auto farthest = [&](const double* from) {
    squared_distances(p, order, b, e, from, dist.data());
    std::size_t far = b;
    double best = -1;
    for (std::size_t s = b; s < e; ++s)
      if (dist[s - b] > best) best = dist[s - b], far = s;
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
    row_sums(
        count, d, [&](std::size_t r) { return at(b + r); },
        [&](float x, std::size_t q) { return (x - seed[q]) * axis[q]; }, dist.data());
    for (std::size_t s = b; s < e; ++s)
      if (s != first && s != second) along.push_back(dist[s - b]);
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
  squared_distances(p, order, b, e, seed.data(), nearest.data());
  const double reach = *std::max_element(nearest.begin(), nearest.end());  // squared
  std::size_t seeds = 1;
  for (; seeds < kMaxSeeds; ++seeds) {
    const auto far = static_cast<std::size_t>(std::max_element(nearest.begin(), nearest.end()) - nearest.begin());
    if (!(nearest[far] > 0.25 * reach)) break;
    seed.assign(at(b + far), at(b + far) + d);
    squared_distances(p, order, b, e, seed.data(), dist.data());
    for (std::size_t s = 0; s < count; ++s)
      if (dist[s] < nearest[s]) {
        nearest[s] = dist[s];
        group[s] = static_cast<std::uint8_t>(seeds);
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

/// Leaf k's centre, radius and mass (`whole`: its measurement, when the leaf is one part and so measured on its final
/// order; null: measured here), the Cholesky factor of its offsets' Gram matrix, its two principal directions and
/// its three extents (ClusterTree::leaf_gram, leaf_axes, leaf_extent). Each sum runs in the order it always has.
void measure_leaf(ClusterTree& t, PointsView p, std::span<const float> w, std::size_t k, const Part* whole) {
  const std::size_t d = p.d, b = t.begin(t.height, k), e = t.end(t.height, k), count = e - b;
  const int H = t.height;
  const Part measured = whole ? Part{} : measure_part(p, w, t.order.data(), b, e);
  const Part& leaf = whole ? *whole : measured;
  double* c = t.centre[H].data() + k * d;
  std::copy(leaf.centre.begin(), leaf.centre.end(), c);
  t.radius[H][k] = leaf.radius;
  t.mass[H][k] = leaf.mass;
  // The offsets u = x − c, once (every use below computed them anew: the same doubles).
  std::vector<double> offsets(count * d);
  for (std::size_t s = 0; s < count; ++s) {
    const float* x = p.data.data() + std::size_t{t.order[b + s]} * d;
    for (std::size_t i = 0; i < d; ++i) offsets[s * d + i] = x[i] - c[i];
  }
  // Gram matrix of the offsets (lower triangle), then its Cholesky factor in place. The ridge keeps it positive
  // definite for blocks flatter than d (surfaces, low intrinsic dimension): the fit then ignores the empty
  // directions. Four points per sweep of the matrix, each entry's terms added in the points' order.
  double* G = t.leaf_gram.data() + k * d * d;
  std::size_t s = 0;
  for (; s + 4 <= count; s += 4) {
    const double *u0 = offsets.data() + s * d, *u1 = u0 + d, *u2 = u1 + d, *u3 = u2 + d;
    for (std::size_t i = 0; i < d; ++i) {
      double* Gi = G + i * d;
      const double a0 = u0[i], a1 = u1[i], a2 = u2[i], a3 = u3[i];
      for (std::size_t j = 0; j <= i; ++j) {
        double g = Gi[j];
        g += a0 * u0[j];
        g += a1 * u1[j];
        g += a2 * u2[j];
        g += a3 * u3[j];
        Gi[j] = g;
      }
    }
  }
  for (; s < count; ++s) {
    const double* u = offsets.data() + s * d;
    for (std::size_t i = 0; i < d; ++i)
      for (std::size_t j = 0; j <= i; ++j) G[i * d + j] += u[i] * u[j];
  }
  {
    // Two principal directions of the offsets (power iteration on the Gram matrix, the second deflated), then the
    // block's extents along them and across both. The product runs column by column over the full symmetric matrix:
    // each entry of G·v still the sum over j in order.
    std::vector<double> S(d * d);
    for (std::size_t i = 0; i < d; ++i)
      for (std::size_t j = 0; j <= i; ++j) S[i * d + j] = S[j * d + i] = G[i * d + j];
    double* axes = t.leaf_axes.data() + k * 2 * d;
    std::vector<double> v(d), gv(d);
    // v minus its component along q₁ (the first axis), and v's Euclidean norm: each used twice below.
    const auto remove_q1 = [&] {
      double dot = 0;
      for (std::size_t i = 0; i < d; ++i) dot += v[i] * axes[i];
      for (std::size_t i = 0; i < d; ++i) v[i] -= dot * axes[i];
    };
    const auto norm_of_v = [&] {
      double norm = 0;
      for (std::size_t i = 0; i < d; ++i) norm += v[i] * v[i];
      return std::sqrt(norm);
    };
    for (int a = 0; a < std::min<int>(2, static_cast<int>(d)); ++a) {
      double* qa = axes + a * d;
      for (std::size_t i = 0; i < d; ++i) v[i] = 1.0 + 0.618 * static_cast<double>((i * 7 + a * 3) % 11);
      for (int it = 0; it < 30; ++it) {
        if (a == 1) remove_q1();  // stay orthogonal to q₁
        const double norm = norm_of_v();
        if (!(norm > 0)) break;
        for (std::size_t i = 0; i < d; ++i) v[i] /= norm;
        if (it == 29) break;
        // gv[i] = Σ_j S_ij v_j, j in order: four columns of S per sweep over gv.
        double* __restrict out = gv.data();
        const double* __restrict in = v.data();
        std::fill(gv.begin(), gv.end(), 0.0);
        std::size_t j = 0;
        for (; j + 4 <= d; j += 4) {
          const double *S0 = S.data() + j * d, *S1 = S0 + d, *S2 = S1 + d, *S3 = S2 + d;
          const double v0 = in[j], v1 = in[j + 1], v2 = in[j + 2], v3 = in[j + 3];
          for (std::size_t i = 0; i < d; ++i) {
            double g = out[i];
            g += S0[i] * v0;
            g += S1[i] * v1;
            g += S2[i] * v2;
            g += S3[i] * v3;
            out[i] = g;
          }
        }
        for (; j < d; ++j) {
          const double vj = in[j], *Sj = S.data() + j * d;
          for (std::size_t i = 0; i < d; ++i) out[i] += Sj[i] * vj;
        }
        v.swap(gv);
      }
      if (a == 1) remove_q1();  // exactly orthonormal to q₁ (rounding of the last step)
      const double norm = norm_of_v();
      if (norm > 0)
        for (std::size_t i = 0; i < d; ++i) qa[i] = v[i] / norm;
    }
    double* h = t.leaf_extent.data() + k * 3;
    const auto extend = [&](double p1, double p2, double u2) {
      h[0] = std::max(h[0], std::abs(p1));
      h[1] = std::max(h[1], std::abs(p2));
      h[2] = std::max(h[2], std::sqrt(std::max(0.0, u2 - p1 * p1 - p2 * p2)));
    };
    std::size_t r = 0;
    for (; r + 2 <= count; r += 2) {  // two points at a time (six independent sums), extended in order
      const double *ua = offsets.data() + r * d, *ub = ua + d;
      double p1a = 0, p2a = 0, u2a = 0, p1b = 0, p2b = 0, u2b = 0;
      for (std::size_t i = 0; i < d; ++i) {
        p1a += ua[i] * axes[i];
        p2a += ua[i] * axes[d + i];
        u2a += ua[i] * ua[i];
        p1b += ub[i] * axes[i];
        p2b += ub[i] * axes[d + i];
        u2b += ub[i] * ub[i];
      }
      extend(p1a, p2a, u2a);
      extend(p1b, p2b, u2b);
    }
    for (; r < count; ++r) {
      const double* u = offsets.data() + r * d;
      double p1 = 0, p2 = 0, u2 = 0;
      for (std::size_t i = 0; i < d; ++i) {
        p1 += u[i] * axes[i];
        p2 += u[i] * axes[d + i];
        u2 += u[i] * u[i];
      }
      extend(p1, p2, u2);
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
    const double* Gj = G + j * d;
    std::size_t i = j + 1;
    for (; i + 4 <= d; i += 4) {  // four rows at a time, each its own sum over q in order
      double *G0 = G + i * d, *G1 = G0 + d, *G2 = G1 + d, *G3 = G2 + d;
      double v0 = G0[j], v1 = G1[j], v2 = G2[j], v3 = G3[j];
      for (std::size_t q = 0; q < j; ++q) {
        v0 -= G0[q] * Gj[q];
        v1 -= G1[q] * Gj[q];
        v2 -= G2[q] * Gj[q];
        v3 -= G3[q] * Gj[q];
      }
      G0[j] = v0 / diag;
      G1[j] = v1 / diag;
      G2[j] = v2 / diag;
      G3[j] = v3 / diag;
    }
    for (; i < d; ++i) {
      double v = G[i * d + j];
      for (std::size_t q = 0; q < j; ++q) v -= G[i * d + q] * Gj[q];
      G[i * d + j] = v / diag;
    }
  }
}

/// Centres, radii and masses of the inner levels, from the leaves up.
void measure_inner(ClusterTree& t) {
  const std::size_t d = t.d;
  for (int level = t.height - 1; level >= 0; --level) {
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
}

}  // namespace

int ClusterTree::level_with_at_most(std::size_t limit) const {
  int level = 0;
  while (level < height && count(level + 1) <= limit) ++level;
  return level;
}

std::vector<ClusterTree> build_cluster_trees(std::span<const TreeInput> clouds, std::size_t block, TreeOrder order) {
  for (const TreeInput& cloud : clouds)
    if (order == TreeOrder::kMorton && cloud.points.d > kMortonMaxDim)
      throw std::invalid_argument("cluster tree: Morton order needs d ≤ " + std::to_string(kMortonMaxDim) +
                                  " (got " + std::to_string(cloud.points.d) + ")");
  if (block == 0) throw std::invalid_argument("cluster tree: block must be ≥ 1 (got 0)");
  for (const TreeInput& cloud : clouds)
    if (cloud.points.n >= (std::size_t{1} << 32))
      throw std::invalid_argument("multiscale: at most 2^32 − 1 points per cloud (got " +
                                  std::to_string(cloud.points.n) + ")");
  std::vector<ClusterTree> trees(clouds.size());
  for (std::size_t i = 0; i < clouds.size(); ++i) {
    ClusterTree& t = trees[i];
    const PointsView p = clouds[i].points;
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
      for (std::size_t j = 0; j < p.n; ++j) t.order[j] = static_cast<std::uint32_t>(j);
    }
  }
  if (order == TreeOrder::kPca) {
    // One team for all the trees: each root split is one task, so the top of one tree, a node or two at a time,
    // leaves the threads to the other's.
    std::vector<PcaSplitter> splitters;
    splitters.reserve(clouds.size());
    for (std::size_t i = 0; i < clouds.size(); ++i)
      splitters.push_back({clouds[i].points, trees[i], clouds[i].seed, trees[i].order.data()});
#pragma omp parallel
#pragma omp single
    for (std::size_t i = 0; i < splitters.size(); ++i) {
#pragma omp task firstprivate(i) shared(splitters)
      splitters[i].split(0, 0);
    }
  }
  // Every leaf of every tree: its parts (its positions reordered so that they are runs), then its measurements, in
  // one pass while its points are in cache; the parts are flattened afterwards, in the leaves' order.
  std::vector<std::size_t> first(clouds.size() + 1, 0);
  std::vector<std::vector<std::vector<Part>>> parts(clouds.size());
  for (std::size_t i = 0; i < clouds.size(); ++i) {
    ClusterTree& t = trees[i];
    const std::size_t nb = t.blocks, d = t.d;
    const int H = t.height;
    first[i + 1] = first[i] + nb;
    parts[i].resize(nb);
    t.centre.resize(H + 1);
    t.radius.resize(H + 1);
    t.mass.resize(H + 1);
    t.centre[H].assign(nb * d, 0.0);
    t.radius[H].assign(nb, 0.0);
    t.mass[H].assign(nb, 0.0);
    t.leaf_gram.assign(nb * d * d, 0.0);
    t.leaf_axes.assign(nb * 2 * d, 0.0);
    t.leaf_extent.assign(nb * 3, 0.0);
  }
#pragma omp parallel for schedule(dynamic, 16)
  for (std::size_t g = 0; g < first.back(); ++g) {
    const std::size_t i = static_cast<std::size_t>(std::upper_bound(first.begin(), first.end(), g) - first.begin()) - 1;
    const std::size_t k = g - first[i];
    ClusterTree& t = trees[i];
    const TreeInput& cloud = clouds[i];
    std::vector<Part>& leaf = parts[i][k];
    leaf = leaf_parts(cloud.points, cloud.weights, t.order.data(), t.begin(t.height, k), t.end(t.height, k));
    measure_leaf(t, cloud.points, cloud.weights, k, leaf.size() == 1 ? &leaf[0] : nullptr);
  }
  for (std::size_t i = 0; i < clouds.size(); ++i) {
    ClusterTree& t = trees[i];
    t.part_offset.assign(1, 0);
    for (const auto& leaf : parts[i]) {
      for (const Part& part : leaf) {
        t.part_begin.push_back(static_cast<std::uint32_t>(part.b));
        t.part_end.push_back(static_cast<std::uint32_t>(part.e));
        t.part_centre.insert(t.part_centre.end(), part.centre.begin(), part.centre.end());
        t.part_radius.push_back(part.radius);
        t.part_mass.push_back(part.mass);
      }
      t.part_offset.push_back(static_cast<std::uint32_t>(t.part_begin.size()));
    }
    measure_inner(t);
  }
  return trees;
}

ClusterTree build_cluster_tree(PointsView p, std::span<const float> w, std::size_t block, std::uint64_t seed,
                               TreeOrder order) {
  const TreeInput cloud{p, w, seed};
  return std::move(build_cluster_trees({&cloud, 1}, block, order).front());
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
