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
/// Leaf supports are used up to this dimension (beyond it the pair loop would pay O(d) more per pair for little:
/// the two principal directions of a block in high dimension hold a small share of its extent).
constexpr std::size_t kMaxSupportDim = 64;

/// Per level and node: the smallest and largest potential over the node's points (lo, hi), a gradient z fitted to
/// the potential over the node, and the extremes of h_i − ⟨z, x_i − c⟩ over the node (flat_lo, flat_hi): the
/// potential with its linear part removed (docs/multiscale.md, "The bound").
struct PotentialBounds {
  std::vector<std::vector<double>> lo, hi, flat_lo, flat_hi, z;
};

PotentialBounds potential_bounds(const ClusterTree& t, std::span<const float> pts, std::span<const float> h) {
  PotentialBounds b;
  const int H = t.height;
  const std::size_t d = t.d;
  for (auto* v : {&b.lo, &b.hi, &b.flat_lo, &b.flat_hi, &b.z}) v->resize(H + 1);
  b.lo[H].assign(t.blocks, kInf);
  b.hi[H].assign(t.blocks, -kInf);
  b.flat_lo[H].assign(t.blocks, kInf);
  b.flat_hi[H].assign(t.blocks, -kInf);
  b.z[H].assign(t.blocks * d, 0.0);
#pragma omp parallel for schedule(static)
  for (std::size_t k = 0; k < t.blocks; ++k) {
    const std::size_t p0 = t.begin(H, k), p1 = t.end(H, k);
    const double* c = t.centre[H].data() + k * d;
    double lo = kInf, hi = -kInf, mean = 0;
    for (std::size_t p = p0; p < p1; ++p) {
      lo = std::min<double>(lo, h[p]);
      hi = std::max<double>(hi, h[p]);
      mean += h[p];
    }
    mean /= static_cast<double>(p1 - p0);
    // Least-squares gradient: (Σ u uᵀ + λI) z = Σ u (h − mean), through the tree's Cholesky factor.
    std::vector<double> z(d, 0.0);
    for (std::size_t p = p0; p < p1; ++p)
      for (std::size_t q = 0; q < d; ++q) z[q] += (pts[p * d + q] - c[q]) * (h[p] - mean);
    const double* L = t.leaf_gram.data() + k * d * d;
    for (std::size_t i = 0; i < d; ++i) {  // forward: L y = rhs
      for (std::size_t q = 0; q < i; ++q) z[i] -= L[i * d + q] * z[q];
      z[i] /= L[i * d + i];
    }
    for (std::size_t i = d; i-- > 0;) {  // backward: Lᵀ z = y
      for (std::size_t q = i + 1; q < d; ++q) z[i] -= L[q * d + i] * z[q];
      z[i] /= L[i * d + i];
    }
    double flo = kInf, fhi = -kInf;
    for (std::size_t p = p0; p < p1; ++p) {
      double v = h[p];
      for (std::size_t q = 0; q < d; ++q) v -= z[q] * (pts[p * d + q] - c[q]);
      flo = std::min(flo, v);
      fhi = std::max(fhi, v);
    }
    b.lo[H][k] = lo;
    b.hi[H][k] = hi;
    b.flat_lo[H][k] = flo;
    b.flat_hi[H][k] = fhi;
    std::copy(z.begin(), z.end(), b.z[H].begin() + static_cast<std::ptrdiff_t>(k * d));
  }
  for (int level = H - 1; level >= 0; --level) {
    const std::size_t nc = t.count(level), below = t.count(level + 1);
    b.lo[level].assign(nc, kInf);
    b.hi[level].assign(nc, -kInf);
    b.flat_lo[level].assign(nc, kInf);
    b.flat_hi[level].assign(nc, -kInf);
    b.z[level].assign(nc * d, 0.0);
#pragma omp parallel for schedule(static) if (nc > 256)
    for (std::size_t k = 0; k < nc; ++k) {
      const std::size_t c0 = 2 * k, c1 = std::min(2 * k + 2, below);
      double* zp = b.z[level].data() + k * d;
      for (std::size_t c = c0; c < c1; ++c) {
        b.lo[level][k] = std::min(b.lo[level][k], b.lo[level + 1][c]);
        b.hi[level][k] = std::max(b.hi[level][k], b.hi[level + 1][c]);
        for (std::size_t q = 0; q < d; ++q) zp[q] += b.z[level + 1][c * d + q] / static_cast<double>(c1 - c0);
      }
      // For i in child c: h_i − ⟨z_P, x_i − c_P⟩ = (h_i − ⟨z_c, x_i − c_c⟩) + ⟨z_c − z_P, x_i − c_c⟩ − ⟨z_P, c_c − c_P⟩.
      const double* cp = t.centre[level].data() + k * d;
      for (std::size_t c = c0; c < c1; ++c) {
        const double* zc = b.z[level + 1].data() + c * d;
        const double* cc = t.centre[level + 1].data() + c * d;
        double dz = 0, shift = 0;
        for (std::size_t q = 0; q < d; ++q) {
          dz += (zc[q] - zp[q]) * (zc[q] - zp[q]);
          shift += zp[q] * (cc[q] - cp[q]);
        }
        const double spread = t.radius[level + 1][c] * std::sqrt(dz);
        b.flat_hi[level][k] = std::max(b.flat_hi[level][k], b.flat_hi[level + 1][c] + spread - shift);
        b.flat_lo[level][k] = std::min(b.flat_lo[level][k], b.flat_lo[level + 1][c] - spread - shift);
      }
    }
  }
  return b;
}

/// The largest ⟨u, e⟩ over the offsets u of leaf block k (e a unit vector, given with its length `norm` > 0 unscaled):
/// the extents along the block's two principal directions and across them (ClusterTree::leaf_extent), never above
/// its radius.
double leaf_support(const ClusterTree& t, std::size_t k, const double* e, double norm) {
  const std::size_t d = t.d;
  const double* q = t.leaf_axes.data() + k * 2 * d;
  const double* h = t.leaf_extent.data() + k * 3;
  double e1 = 0, e2 = 0;
  for (std::size_t c = 0; c < d; ++c) {
    e1 += e[c] * q[c];
    e2 += e[c] * q[d + c];
  }
  e1 /= norm;
  e2 /= norm;
  const double across = std::sqrt(std::max(0.0, 1 - e1 * e1 - e2 * e2) + 1e-12);
  return std::min(t.radius[t.height][k], h[0] * std::abs(e1) + h[1] * std::abs(e2) + h[2] * across);
}

struct Pair {
  std::uint32_t i, j;
};

}  // namespace

PatternResult certified_pattern(const ClusterTree& tx, const ClusterTree& ty, std::span<const float> x,
                                std::span<const float> y, std::span<const float> f, std::span<const float> g,
                                const PatternRequest& q) {
  const std::size_t d = tx.d;
  const double s = q.cost_scale;
  const double absolute = -q.epsilon * (q.truncation + std::log(std::max(1.0, q.mass)));
  const PotentialBounds bf = potential_bounds(tx, x, f), bg = potential_bounds(ty, y, g);
  const int steps = std::max(tx.height, ty.height);

  std::vector<Pair> kept{{0, 0}};
  int lx = 0, ly = 0;
  const auto bound = [&](const Pair& pr) {
    const double* ci = tx.centre[lx].data() + std::size_t{pr.i} * d;
    const double* cj = ty.centre[ly].data() + std::size_t{pr.j} * d;
    const double* zi = bf.z[lx].data() + std::size_t{pr.i} * d;
    const double* zj = bg.z[ly].data() + std::size_t{pr.j} * d;
    // w = c_I − c_J; ‖z_I − 2s·w‖ and ‖z_J + 2s·w‖ bound the linear parts the flat extremes left out (bound 2);
    // ζ = (z_I − z_J)/2 is the common slope of the pair, a = ζ/(2s) the shift it stands for (bound 3).
    double w2 = 0, ai = 0, bj = 0, wa2 = 0, wz = 0, z2 = 0, sum2 = 0;
    for (std::size_t c = 0; c < d; ++c) {
      const double w = ci[c] - cj[c];
      const double zeta = 0.5 * (zi[c] - zj[c]);
      w2 += w * w;
      ai += (zi[c] - 2 * s * w) * (zi[c] - 2 * s * w);
      bj += (zj[c] + 2 * s * w) * (zj[c] + 2 * s * w);
      wa2 += (w - zeta / (2 * s)) * (w - zeta / (2 * s));
      wz += w * zeta;
      z2 += zeta * zeta;
      sum2 += (zi[c] + zj[c]) * (zi[c] + zj[c]);
    }
    const double dist = std::sqrt(w2), wa = std::sqrt(wa2);
    const double ri = tx.radius[lx][pr.i], rj = ty.radius[ly][pr.j];
    // A relative slack on the radii covers the fp32 rounding of the backend's cost (docs/multiscale.md).
    const double slack = 1e-6 * (dist + ri + rj);
    const double linear = (ri + slack) * std::sqrt(ai) + (rj + slack) * std::sqrt(bj);
    const double flat = bf.flat_hi[lx][pr.i] + bg.flat_hi[ly][pr.j];
    const double reach = ri + rj + 2 * slack;
    // How far the two blocks reach towards each other along the direction of the gap: the balls' radii, or on leaf
    // blocks their supports in that direction (‖w + δ‖ ≥ ⟨w + δ, e⟩ = ‖w‖ + ⟨u, e⟩ − ⟨v, e⟩ for δ = u − v).
    double toward = ri + rj, toward_shifted = ri + rj;
    if (lx == tx.height && ly == ty.height) {
      double e[kMaxSupportDim], ea[kMaxSupportDim];
      if (d <= kMaxSupportDim) {
        for (std::size_t c = 0; c < d; ++c) {
          e[c] = ci[c] - cj[c];
          ea[c] = e[c] - 0.5 * (zi[c] - zj[c]) / (2 * s);
        }
        if (dist > 0) toward = leaf_support(tx, pr.i, e, dist) + leaf_support(ty, pr.j, e, dist);
        if (wa > 0) toward_shifted = leaf_support(tx, pr.i, ea, wa) + leaf_support(ty, pr.j, ea, wa);
      }
    }
    const double gap = std::max(0.0, dist - toward - slack);
    const double shifted = std::max(0.0, wa - toward_shifted - 2 * slack);
    // Three valid bounds (docs/multiscale.md, "The bound"): centre distance alone; the fitted linear parts taken out
    // one side at a time; the common slope taken out of both sides together (tight for a translated block).
    return std::min({bf.hi[lx][pr.i] + bg.hi[ly][pr.j] - s * gap * gap, flat - s * w2 + linear,
                     flat + 0.5 * reach * std::sqrt(sum2) - s * shifted * shifted - wz + z2 / (4 * s)});
  };
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
    // The candidates (children of kept pairs) are up to 4× what the level keeps: only the final count decides
    // dense (a budget of 4·max_pairs here bounds the memory; comparing them with max_pairs itself ran stages dense
    // whose lists held a third of the pairs).
    if (offsets.back() > 4 * q.max_pairs) return {};
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
    lx = nx;
    ly = ny;
    upper.resize(cand.size());
#pragma omp parallel for schedule(static)
    for (std::size_t p = 0; p < cand.size(); ++p) upper[p] = bound(cand[p]);
    // Every node keeps at least its most promising pair: a row (column) whose potentials are still far below
    // their fixed point is not cut off; the next update raises them and the next check lists more.
    std::vector<std::uint8_t> keep(cand.size());
    std::vector<std::size_t> row_best(cx, SIZE_MAX), col_best(cy, SIZE_MAX);
    std::vector<std::uint8_t> row_has(cx, 0), col_has(cy, 0);
    for (std::size_t p = 0; p < cand.size(); ++p) {
      const Pair pr = cand[p];
      keep[p] = upper[p] > absolute ? 1 : 0;
      row_has[pr.i] |= keep[p];
      col_has[pr.j] |= keep[p];
      if (row_best[pr.i] == SIZE_MAX || upper[p] > upper[row_best[pr.i]]) row_best[pr.i] = p;
      if (col_best[pr.j] == SIZE_MAX || upper[p] > upper[col_best[pr.j]]) col_best[pr.j] = p;
    }
    for (std::size_t i = 0; i < cx; ++i)
      if (!row_has[i] && row_best[i] != SIZE_MAX) keep[row_best[i]] = 1;
    for (std::size_t j = 0; j < cy; ++j)
      if (!col_has[j] && col_best[j] != SIZE_MAX) keep[col_best[j]] = 1;
    kept.clear();
    for (std::size_t p = 0; p < cand.size(); ++p)
      if (keep[p]) kept.push_back(cand[p]);
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
