// Certified block lists: the two cluster trees descended together, pairs dropped by the bound of
// docs/multiscale.md ("The bound"). Work and memory are proportional to the pairs examined, never to all pairs.
#include "multiscale_pattern.hpp"

#include <omp.h>
#include <parallel/algorithm>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace flashot::detail {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// Per level: the smallest and largest potential over every node's points.
struct PotentialBounds {
  std::vector<std::vector<double>> lo, hi;
};

PotentialBounds potential_bounds(const ClusterTree& t, std::span<const float> h) {
  PotentialBounds b;
  const int H = t.height;
  b.lo.resize(H + 1);
  b.hi.resize(H + 1);
  b.lo[H].assign(t.blocks, kInf);
  b.hi[H].assign(t.blocks, -kInf);
#pragma omp parallel for schedule(static)
  for (std::size_t k = 0; k < t.blocks; ++k) {
    double lo = kInf, hi = -kInf;
    for (std::size_t p = t.begin(H, k); p < t.end(H, k); ++p) {
      lo = std::min<double>(lo, h[p]);
      hi = std::max<double>(hi, h[p]);
    }
    b.lo[H][k] = lo;
    b.hi[H][k] = hi;
  }
  for (int level = H - 1; level >= 0; --level) {
    const std::size_t nc = t.count(level), below = t.count(level + 1);
    b.lo[level].assign(nc, kInf);
    b.hi[level].assign(nc, -kInf);
    for (std::size_t k = 0; k < nc; ++k)
      for (std::size_t c = 2 * k; c < std::min(2 * k + 2, below); ++c) {
        b.lo[level][k] = std::min(b.lo[level][k], b.lo[level + 1][c]);
        b.hi[level][k] = std::max(b.hi[level][k], b.hi[level + 1][c]);
      }
  }
  return b;
}

void atomic_max(double& target, double value) {
  std::atomic_ref<double> ref(target);
  double seen = ref.load(std::memory_order_relaxed);
  while (value > seen && !ref.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

struct Pair {
  std::uint32_t i, j;
};

}  // namespace

PatternResult certified_pattern(const ClusterTree& tx, const ClusterTree& ty, std::span<const float> f,
                                std::span<const float> g, const PatternRequest& q) {
  const std::size_t d = tx.d;
  const double s = q.cost_scale;
  const double absolute = -q.epsilon * (q.truncation + std::log(std::max(1.0, q.mass)));
  const double relative = q.epsilon * q.truncation;
  const PotentialBounds bf = potential_bounds(tx, f), bg = potential_bounds(ty, g);
  const int steps = std::max(tx.height, ty.height);

  std::vector<Pair> kept{{0, 0}};
  std::vector<double> row_best{-kInf}, col_best{-kInf};  // R_I, K_J of the current levels
  int lx = 0, ly = 0;
  const auto bounds = [&](const Pair& pr, double& upper, double& lower) {
    const double* ci = tx.centre[lx].data() + std::size_t{pr.i} * d;
    const double* cj = ty.centre[ly].data() + std::size_t{pr.j} * d;
    double dist = 0;
    for (std::size_t c = 0; c < d; ++c) dist += (ci[c] - cj[c]) * (ci[c] - cj[c]);
    dist = std::sqrt(dist);
    const double radii = tx.radius[lx][pr.i] + ty.radius[ly][pr.j];
    // A relative slack on the radii covers the fp32 rounding of the backend's cost (docs/multiscale.md).
    const double slack = 1e-6 * (dist + radii);
    const double gap = std::max(0.0, dist - radii - slack);
    const double far = dist + radii + slack;
    upper = bf.hi[lx][pr.i] + bg.hi[ly][pr.j] - s * gap * gap;
    lower = bf.lo[lx][pr.i] + bg.lo[ly][pr.j] - s * far * far;
  };
  {
    double u, l;
    bounds(kept[0], u, l);
    row_best[0] = l;
    col_best[0] = l;
  }
  std::vector<Pair> cand;
  std::vector<double> upper;
  for (int step = 1; step <= steps; ++step) {
    const bool down_x = lx < tx.height, down_y = ly < ty.height;
    const int nx = lx + (down_x ? 1 : 0), ny = ly + (down_y ? 1 : 0);
    const std::size_t cx = tx.count(nx), cy = ty.count(ny);
    // Children of every kept pair, in order (deterministic whatever the thread count).
    std::vector<std::size_t> offsets(kept.size() + 1, 0);
    for (std::size_t p = 0; p < kept.size(); ++p) {
      const std::size_t kx = down_x ? std::min<std::size_t>(2, cx - 2 * kept[p].i) : 1;
      const std::size_t ky = down_y ? std::min<std::size_t>(2, cy - 2 * kept[p].j) : 1;
      offsets[p + 1] = offsets[p] + kx * ky;
    }
    if (offsets.back() > q.max_pairs) return {};
    cand.resize(offsets.back());
#pragma omp parallel for schedule(static)
    for (std::size_t p = 0; p < kept.size(); ++p) {
      const std::uint32_t i0 = down_x ? 2 * kept[p].i : kept[p].i, j0 = down_y ? 2 * kept[p].j : kept[p].j;
      const std::uint32_t i1 = down_x ? static_cast<std::uint32_t>(std::min<std::size_t>(2 * kept[p].i + 2, cx)) : i0 + 1;
      const std::uint32_t j1 = down_y ? static_cast<std::uint32_t>(std::min<std::size_t>(2 * kept[p].j + 2, cy)) : j0 + 1;
      std::size_t o = offsets[p];
      for (std::uint32_t i = i0; i < i1; ++i)
        for (std::uint32_t j = j0; j < j1; ++j) cand[o++] = {i, j};
    }
    // A parent's row and column lower bounds hold for every child (its rows are the parent's rows).
    std::vector<double> rb(cx), kb(cy);
    for (std::size_t i = 0; i < cx; ++i) rb[i] = row_best[down_x ? i / 2 : i];
    for (std::size_t j = 0; j < cy; ++j) kb[j] = col_best[down_y ? j / 2 : j];
    lx = nx;
    ly = ny;
    upper.resize(cand.size());
#pragma omp parallel for schedule(static)
    for (std::size_t p = 0; p < cand.size(); ++p) {
      double l;
      bounds(cand[p], upper[p], l);
      atomic_max(rb[cand[p].i], l);
      atomic_max(kb[cand[p].j], l);
    }
    std::vector<std::uint8_t> keep(cand.size());
#pragma omp parallel for schedule(static)
    for (std::size_t p = 0; p < cand.size(); ++p) {
      const double threshold = std::min({absolute, rb[cand[p].i] - relative, kb[cand[p].j] - relative});
      keep[p] = upper[p] > threshold ? 1 : 0;
    }
    kept.clear();
    for (std::size_t p = 0; p < cand.size(); ++p)
      if (keep[p]) kept.push_back(cand[p]);
    row_best = std::move(rb);
    col_best = std::move(kb);
  }

  if (kept.size() > q.max_pairs) return {};
  __gnu_parallel::sort(kept.begin(), kept.end(),
                       [](const Pair& a, const Pair& b) { return a.i != b.i ? a.i < b.i : a.j < b.j; });
  std::vector<std::vector<BlockRange>> lists(tx.blocks);
  double points = 0;
  for (const Pair& pr : kept) {
    auto& list = lists[pr.i];
    const auto j = static_cast<std::int32_t>(pr.j);
    if (!list.empty() && list.back().end == j)
      ++list.back().end;
    else
      list.push_back({j, j + 1});
    points += static_cast<double>(tx.end(tx.height, pr.i) - tx.begin(tx.height, pr.i)) *
              static_cast<double>(ty.end(ty.height, pr.j) - ty.begin(ty.height, pr.j));
  }
  PatternResult r;
  r.pattern = std::make_shared<const BlockPattern>(tx.n, ty.n, lists);
  r.kept_pairs = kept.size();
  r.kept_fraction = points / (static_cast<double>(tx.n) * static_cast<double>(ty.n));
  return r;
}

bool pattern_contains(const BlockPattern& outer, const BlockPattern& inner) {
  if (outer.row_blocks() != inner.row_blocks()) return false;
  for (std::size_t r = 0; r < inner.row_blocks(); ++r) {
    const auto out = outer.row_list(r);
    std::size_t k = 0;
    for (const BlockRange& range : inner.row_list(r)) {
      while (k < out.size() && out[k].end < range.end) ++k;
      if (k == out.size() || out[k].begin > range.begin) return false;
    }
  }
  return true;
}

std::shared_ptr<const BlockPattern> pattern_union(const BlockPattern& p, const BlockPattern& q) {
  std::vector<std::vector<BlockRange>> lists(p.row_blocks());
  for (std::size_t r = 0; r < p.row_blocks(); ++r) {
    lists[r].assign(p.row_list(r).begin(), p.row_list(r).end());
    lists[r].insert(lists[r].end(), q.row_list(r).begin(), q.row_list(r).end());
  }
  return std::make_shared<const BlockPattern>(p.rows(), p.cols(), lists);
}

}  // namespace flashot::detail
