// Certified block lists: the two cluster trees descended together, pairs dropped by the bound of
// docs/multiscale.md ("The bound"). Work and memory are proportional to the pairs examined, never to all pairs.
#include "multiscale_pattern.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace flashot::detail {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
/// Leaf supports are used up to this dimension (beyond it the pair loop would pay O(d) more per pair for little:
/// the two principal directions of a block in high dimension hold a small share of its extent).
constexpr std::size_t kMaxSupportDim = 64;
/// Part pairs of two leaves whose centre gaps are summed together (squared_gaps).
constexpr std::size_t kPartsAtATime = 16;

/// Per level and node: the smallest and largest potential over the node's points (lo, hi), a gradient z fitted to
/// the potential over the node, and the extremes of h_i − ⟨z, x_i − c⟩ over the node (flat_lo, flat_hi): the
/// potential with its linear part removed (docs/multiscale.md, "The bound").
struct PotentialBounds {
  std::vector<std::vector<double>> lo, hi, flat_lo, flat_hi, z;
  std::vector<double> part_hi;  // per part of a leaf (ClusterTree::part_offset): the largest potential over it
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
    {
      double* __restrict zs = z.data();  // (no alias with c: the coordinates run in vector lanes, each sum in order)
      for (std::size_t p = p0; p < p1; ++p) {
        const float* x = pts.data() + p * d;
        const double hp = h[p] - mean;
        for (std::size_t q = 0; q < d; ++q) zs[q] += (x[q] - c[q]) * hp;
      }
    }
    const double* L = t.leaf_gram.data() + k * d * d;
    for (std::size_t i = 0; i < d; ++i) {  // forward: L y = rhs
      for (std::size_t q = 0; q < i; ++q) z[i] -= L[i * d + q] * z[q];
      z[i] /= L[i * d + i];
    }
    for (std::size_t i = d; i-- > 0;) {  // backward: Lᵀ z = y
      for (std::size_t q = i + 1; q < d; ++q) z[i] -= L[q * d + i] * z[q];
      z[i] /= L[i * d + i];
    }
    // h_p − ⟨z, x_p − c⟩, four points at a time (each the same subtractions in order as alone).
    double flo = kInf, fhi = -kInf;
    const auto extend = [&](double v) {
      flo = std::min(flo, v);
      fhi = std::max(fhi, v);
    };
    std::size_t p = p0;
    for (; p + 4 <= p1; p += 4) {
      const float *x0 = pts.data() + p * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;
      double v0 = h[p], v1 = h[p + 1], v2 = h[p + 2], v3 = h[p + 3];
      for (std::size_t q = 0; q < d; ++q) {
        v0 -= z[q] * (x0[q] - c[q]);
        v1 -= z[q] * (x1[q] - c[q]);
        v2 -= z[q] * (x2[q] - c[q]);
        v3 -= z[q] * (x3[q] - c[q]);
      }
      extend(v0);
      extend(v1);
      extend(v2);
      extend(v3);
    }
    for (; p < p1; ++p) {
      double v = h[p];
      for (std::size_t q = 0; q < d; ++q) v -= z[q] * (pts[p * d + q] - c[q]);
      extend(v);
    }
    b.lo[H][k] = lo;
    b.hi[H][k] = hi;
    b.flat_lo[H][k] = flo;
    b.flat_hi[H][k] = fhi;
    std::copy(z.begin(), z.end(), b.z[H].begin() + static_cast<std::ptrdiff_t>(k * d));
  }
  b.part_hi.assign(t.parts(), -kInf);
#pragma omp parallel for schedule(static)
  for (std::size_t k = 0; k < t.parts(); ++k)
    for (std::size_t p = t.part_begin[k]; p < t.part_end[k]; ++p) b.part_hi[k] = std::max<double>(b.part_hi[k], h[p]);
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

/// The largest ⟨u, e⟩ over the offsets u of leaf block k, e = v/norm for a vector v of length norm > 0 given by its
/// projections v1 = ⟨v, q₁⟩, v2 = ⟨v, q₂⟩ on the block's principal directions: the extents along them and across them
/// (ClusterTree::leaf_extent), never above its radius.
double leaf_support(const ClusterTree& t, std::size_t k, double v1, double v2, double norm) {
  const double* h = t.leaf_extent.data() + k * 3;
  const double e1 = v1 / norm, e2 = v2 / norm;
  const double across = std::sqrt(std::max(0.0, 1 - e1 * e1 - e2 * e2) + 1e-12);
  return std::min(t.radius[t.height][k], h[0] * std::abs(e1) + h[1] * std::abs(e2) + h[2] * across);
}

/// w2[k] = ‖c − column(k)‖² for k < count (column(k): d values), four at a time: each the same sum over the
/// coordinates in order as alone, but four independent sums in flight instead of one add waiting on the one before
/// (in 50 dimensions this sum is most of the work of a pair that bound 1 drops).
template <class Column>
void squared_gaps(const double* c, std::size_t d, std::size_t count, Column column, double* w2) {
  std::size_t k = 0;
  for (; k + 4 <= count; k += 4) {
    const double *c0 = column(k), *c1 = column(k + 1), *c2 = column(k + 2), *c3 = column(k + 3);
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (std::size_t q = 0; q < d; ++q) {
      s0 += (c[q] - c0[q]) * (c[q] - c0[q]);
      s1 += (c[q] - c1[q]) * (c[q] - c1[q]);
      s2 += (c[q] - c2[q]) * (c[q] - c2[q]);
      s3 += (c[q] - c3[q]) * (c[q] - c3[q]);
    }
    w2[k] = s0;
    w2[k + 1] = s1;
    w2[k + 2] = s2;
    w2[k + 3] = s3;
  }
  for (; k < count; ++k) {
    const double* cj = column(k);
    double sum = 0;
    for (std::size_t q = 0; q < d; ++q) sum += (c[q] - cj[q]) * (c[q] - cj[q]);
    w2[k] = sum;
  }
}

/// One level of the descent: for every row node, the column nodes of its kept pairs in increasing order. Stored in
/// chunks of kChunkRows row nodes, each with its own arrays: chunks are built in parallel, each by one thread, so the
/// result does not depend on the thread count (nor on kChunkRows), and no array is ever the size of all candidates.
/// 4 bytes per pair. 16 rows: the 3 907 leaf rows of 10⁶ points are 245 chunks, enough to balance 16 threads whose
/// rows list very different counts (blocks across clusters list more); 64 made 61.
constexpr std::size_t kChunkRows = 16;
/// A level of the descent runs in parallel when its parent level kept more pairs than this.
constexpr std::size_t kParallelPairs = 1 << 14;

struct LevelPairs {
  struct Chunk {
    std::vector<std::uint32_t> offsets;  // kChunkRows + 1 (fewer in the last chunk): into cols
    std::vector<std::uint32_t> cols;
  };
  std::vector<Chunk> chunks;

  explicit LevelPairs(std::size_t rows) : chunks((rows + kChunkRows - 1) / kChunkRows) {}
  std::span<const std::uint32_t> list(std::size_t i) const {
    const Chunk& c = chunks[i / kChunkRows];
    const std::size_t k = i % kChunkRows;
    return {c.cols.data() + c.offsets[k], c.cols.data() + c.offsets[k + 1]};
  }
  std::size_t pairs() const {
    std::size_t total = 0;
    for (const Chunk& c : chunks) total += c.cols.size();
    return total;
  }
};

/// A column node's best candidate so far: the largest bound, ties to the smallest row (so the choice does not depend
/// on which thread saw which row).
struct ColumnBest {
  double upper = -kInf;
  std::uint32_t row = UINT32_MAX;
  bool kept = false;
  void offer(double u, std::uint32_t i) {
    if (u > upper || (u == upper && i < row)) upper = u, row = i;
  }
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

  int lx = 0, ly = 0;
  // 2s is 1 or 2 (cost_scale(): ½‖x − y‖² or ‖x − y‖²), a power of two: dividing by it is multiplying by its inverse,
  // exactly (both round the same real number), and a multiplication does not stall the pair loop as a division does.
  int exponent = 0;
  const bool power_of_two = std::frexp(2 * s, &exponent) == 0.5;
  const double inverse_2s = 1 / (2 * s);
  const auto over_2s = [&](double v) { return power_of_two ? v * inverse_2s : v / (2 * s); };
  // The pair bound of row node pi and column node pj at the current levels, given w2 = ‖c_I − c_J‖² (computed for
  // several pairs at a time by the caller: squared_gaps).
  const auto bound = [&](std::uint32_t pi, std::uint32_t pj, double w2) {
    const double* ci = tx.centre[lx].data() + std::size_t{pi} * d;
    const double* cj = ty.centre[ly].data() + std::size_t{pj} * d;
    const double* zi = bf.z[lx].data() + std::size_t{pi} * d;
    const double* zj = bg.z[ly].data() + std::size_t{pj} * d;
    // w = c_I − c_J; ‖z_I − 2s·w‖ and ‖z_J + 2s·w‖ bound the linear parts the flat extremes left out (bound 2);
    // ζ = (z_I − z_J)/2 is the common slope of the pair, a = ζ/(2s) the shift it stands for (bound 3).
    {
      // Bound 1 with the balls' radii (never below the one with supports, below): a pair it drops is dropped
      // whatever the others say, and most pairs examined in many dimensions lie far apart (d = 50 mixture: ≈ 99 %),
      // so the other bounds (≈ 10 passes over d) are evaluated only for the rest. The value returned for a dropped
      // pair only ranks it among a node's pairs when none is kept.
      const double dist = std::sqrt(w2), ri = tx.radius[lx][pi], rj = ty.radius[ly][pj];
      const double gap = std::max(0.0, dist - ri - rj - 1e-6 * (dist + ri + rj));
      const double ball = bf.hi[lx][pi] + bg.hi[ly][pj] - s * gap * gap;
      if (ball <= absolute) return ball;
    }
    double ai = 0, bj = 0, wa2 = 0, wz = 0, z2 = 0, sum2 = 0;
    for (std::size_t c = 0; c < d; ++c) {
      const double w = ci[c] - cj[c];
      const double zeta = 0.5 * (zi[c] - zj[c]);
      ai += (zi[c] - 2 * s * w) * (zi[c] - 2 * s * w);
      bj += (zj[c] + 2 * s * w) * (zj[c] + 2 * s * w);
      wa2 += (w - over_2s(zeta)) * (w - over_2s(zeta));
      wz += w * zeta;
      z2 += zeta * zeta;
      sum2 += (zi[c] + zj[c]) * (zi[c] + zj[c]);
    }
    const double dist = std::sqrt(w2), wa = std::sqrt(wa2);
    const double ri = tx.radius[lx][pi], rj = ty.radius[ly][pj];
    // A relative slack on the radii covers the fp32 rounding of the backend's cost (docs/multiscale.md).
    const double slack = 1e-6 * (dist + ri + rj);
    const double linear = (ri + slack) * std::sqrt(ai) + (rj + slack) * std::sqrt(bj);
    const double flat = bf.flat_hi[lx][pi] + bg.flat_hi[ly][pj];
    const double reach = ri + rj + 2 * slack;
    // How far the two blocks reach towards each other along the direction of the gap: the balls' radii, or on leaf
    // blocks their supports in that direction (‖w + δ‖ ≥ ⟨w + δ, e⟩ = ‖w‖ + ⟨u, e⟩ − ⟨v, e⟩ for δ = u − v).
    double toward = ri + rj, toward_shifted = ri + rj;
    if (lx == tx.height && ly == ty.height && d <= kMaxSupportDim) {
      // The two blocks' supports along e = w/‖w‖ and along w − a: the eight projections on their principal
      // directions in one pass (each the same sum over c as alone).
      const double* qi = tx.leaf_axes.data() + std::size_t{pi} * 2 * d;
      const double* qj = ty.leaf_axes.data() + std::size_t{pj} * 2 * d;
      double dots[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (std::size_t c = 0; c < d; ++c) {
        const double e = ci[c] - cj[c];
        const double ea = e - over_2s(0.5 * (zi[c] - zj[c]));
        dots[0] += e * qi[c];
        dots[1] += e * qi[d + c];
        dots[2] += e * qj[c];
        dots[3] += e * qj[d + c];
        dots[4] += ea * qi[c];
        dots[5] += ea * qi[d + c];
        dots[6] += ea * qj[c];
        dots[7] += ea * qj[d + c];
      }
      if (dist > 0)
        toward = leaf_support(tx, pi, dots[0], dots[1], dist) + leaf_support(ty, pj, dots[2], dots[3], dist);
      if (wa > 0)
        toward_shifted = leaf_support(tx, pi, dots[4], dots[5], wa) + leaf_support(ty, pj, dots[6], dots[7], wa);
    }
    const double gap = std::max(0.0, dist - toward - slack);
    const double shifted = std::max(0.0, wa - toward_shifted - 2 * slack);
    // Three valid bounds (docs/multiscale.md, "The bound"): centre distance alone; the fitted linear parts taken out
    // one side at a time; the common slope taken out of both sides together (tight for a translated block).
    const double upper = std::min({bf.hi[lx][pi] + bg.hi[ly][pj] - s * gap * gap, flat - s * w2 + linear,
                                   flat + 0.5 * reach * std::sqrt(sum2) - s * shifted * shifted - wz + z2 / (4 * s)});
    if (lx != tx.height || ly != ty.height) return upper;
    const std::uint32_t p0 = tx.part_offset[pi], p1 = tx.part_offset[pi + 1];
    const std::uint32_t q0 = ty.part_offset[pj], q1 = ty.part_offset[pj + 1];
    if (p1 - p0 == 1 && q1 - q0 == 1) return upper;  // both compact: the part is the block
    // A block across clusters (docs/multiscale.md, "Blocks across clusters"): every entry lies in one pair of parts,
    // so the largest of the parts' centre-distance bounds bounds the pair too.
    double parts = -kInf;
    double gaps2[kPartsAtATime];
    for (std::uint32_t a = p0; a < p1; ++a) {
      const double* ca = tx.part_centre.data() + std::size_t{a} * d;
      for (std::uint32_t b0 = q0; b0 < q1; b0 += kPartsAtATime) {
        const std::uint32_t b1 = std::min<std::uint32_t>(q1, b0 + kPartsAtATime);
        squared_gaps(
            ca, d, b1 - b0, [&](std::size_t k) { return ty.part_centre.data() + (b0 + k) * d; }, gaps2);
        for (std::uint32_t b = b0; b < b1; ++b) {
          const double v = std::sqrt(gaps2[b - b0]), ra = tx.part_radius[a], rb = ty.part_radius[b];
          const double part_gap = std::max(0.0, v - ra - rb - 1e-6 * (v + ra + rb));
          parts = std::max(parts, bf.part_hi[a] + bg.part_hi[b] - s * part_gap * part_gap);
        }
      }
    }
    return std::min(upper, parts);
  };

  // The root pair, then level by level: the children of every kept pair are examined (never materialised as a
  // list: each row node walks its parent's kept columns), a dropped pair's never are.
  LevelPairs kept(1);
  kept.chunks[0].offsets = {0, 1};
  kept.chunks[0].cols = {0};
  const int threads = omp_get_max_threads();
  for (int step = 1; step <= steps; ++step) {
    const bool down_x = lx < tx.height, down_y = ly < ty.height;
    const int nx = lx + (down_x ? 1 : 0), ny = ly + (down_y ? 1 : 0);
    const std::size_t cx = tx.count(nx), cy = ty.count(ny);
    lx = nx;
    ly = ny;
    LevelPairs next(cx);
    // Per thread, every column node's best candidate and whether a pair of it passed the threshold.
    // Small levels (the top of the trees) run on one thread: a parallel region costs more than their work.
    const bool wide = kept.pairs() > kParallelPairs;
    std::vector<std::vector<ColumnBest>> columns(static_cast<std::size_t>(wide ? threads : 1));
#pragma omp parallel if (wide)
    {
      std::vector<ColumnBest>& mine = columns[static_cast<std::size_t>(omp_get_thread_num())];
      mine.assign(cy, ColumnBest{});
      std::vector<std::uint32_t> candidates;  // a row node's candidate columns, in the order they are examined
      std::vector<double> gaps;               // their ‖c_I − c_J‖²
#pragma omp for schedule(dynamic, 1)
      for (std::size_t chunk = 0; chunk < next.chunks.size(); ++chunk) {
        LevelPairs::Chunk& out = next.chunks[chunk];
        const std::size_t i0 = chunk * kChunkRows, i1 = std::min(cx, i0 + kChunkRows);
        out.offsets.assign(1, 0);
        for (std::size_t i = i0; i < i1; ++i) {
          const auto row = static_cast<std::uint32_t>(i);
          const std::size_t start = out.cols.size();
          double best = -kInf;
          std::uint32_t best_j = 0;
          candidates.clear();
          for (const std::uint32_t j : kept.list(down_x ? i / 2 : i)) {
            const std::uint32_t j0 = down_y ? 2 * j : j;
            const std::uint32_t j1 = down_y ? static_cast<std::uint32_t>(std::min<std::size_t>(2 * std::size_t{j} + 2, cy)) : j + 1;
            for (std::uint32_t jj = j0; jj < j1; ++jj) candidates.push_back(jj);
          }
          gaps.resize(candidates.size());
          const double* centres = ty.centre[ly].data();
          squared_gaps(
              tx.centre[lx].data() + i * d, d, candidates.size(),
              [&](std::size_t k) { return centres + std::size_t{candidates[k]} * d; }, gaps.data());
          for (std::size_t k = 0; k < candidates.size(); ++k) {
            const std::uint32_t jj = candidates[k];
            const double u = bound(row, jj, gaps[k]);
            mine[jj].offer(u, row);
            if (u > best) best = u, best_j = jj;
            if (u > absolute) {
              out.cols.push_back(jj);
              mine[jj].kept = true;
            }
          }
          // Every node keeps at least its most promising pair: a row (column) whose potentials are still far below
          // their fixed point is not cut off; the next update raises them and the next check lists more.
          if (out.cols.size() == start && best > -kInf) out.cols.push_back(best_j);
          out.offsets.push_back(static_cast<std::uint32_t>(out.cols.size()));
        }
        out.cols.shrink_to_fit();
      }
    }
    // Columns without a pair over the threshold keep their best candidate (deterministic: the largest bound, ties
    // to the smallest row, whichever thread saw it).
    std::vector<std::vector<std::uint32_t>> extra(next.chunks.size());  // per chunk: (row, column) interleaved
#pragma omp parallel for schedule(static) if (wide)
    for (std::size_t j = 0; j < cy; ++j) {
      ColumnBest all;
      for (const auto& t : columns) {
        all.kept = all.kept || t[j].kept;
        if (t[j].row != UINT32_MAX) all.offer(t[j].upper, t[j].row);
      }
      columns[0][j] = all;
    }
    for (std::size_t j = 0; j < cy; ++j) {
      const ColumnBest& c = columns[0][j];
      if (!c.kept && c.row != UINT32_MAX) {
        extra[c.row / kChunkRows].push_back(c.row);
        extra[c.row / kChunkRows].push_back(static_cast<std::uint32_t>(j));
      }
    }
    columns.clear();
#pragma omp parallel for schedule(dynamic, 4) if (wide)
    for (std::size_t chunk = 0; chunk < next.chunks.size(); ++chunk) {
      if (extra[chunk].empty()) continue;
      LevelPairs::Chunk& c = next.chunks[chunk];
      const std::size_t i0 = chunk * kChunkRows;
      std::vector<std::vector<std::uint32_t>> rows(c.offsets.size() - 1);
      for (std::size_t k = 0; k + 1 < c.offsets.size(); ++k)
        rows[k].assign(c.cols.begin() + c.offsets[k], c.cols.begin() + c.offsets[k + 1]);
      for (std::size_t e = 0; e < extra[chunk].size(); e += 2) rows[extra[chunk][e] - i0].push_back(extra[chunk][e + 1]);
      c.cols.clear();
      c.offsets.assign(1, 0);
      for (auto& list : rows) {
        std::sort(list.begin(), list.end());
        list.erase(std::unique(list.begin(), list.end()), list.end());
        c.cols.insert(c.cols.end(), list.begin(), list.end());
        c.offsets.push_back(static_cast<std::uint32_t>(c.cols.size()));
      }
    }
    kept = std::move(next);
    // Over the budget at any level: the lists would not pay (the leaf level lists at least what a coarser level
    // keeps, up to the pairs its children drop; coarser levels hold ≤ ¼ of the next level's pairs in all).
    if (kept.pairs() > q.max_pairs) return {};
  }

  // Ranges of consecutive column blocks, row block by row block (in parallel, each row its own list), and the
  // points inside the listed pairs (integers: the sum does not depend on the order).
  std::vector<std::vector<BlockRange>> lists(tx.blocks);
  std::vector<unsigned long long> points(kept.chunks.size(), 0);
#pragma omp parallel for schedule(dynamic, 4)
  for (std::size_t chunk = 0; chunk < kept.chunks.size(); ++chunk) {
    const std::size_t i0 = chunk * kChunkRows, i1 = std::min(tx.blocks, i0 + kChunkRows);
    for (std::size_t i = i0; i < i1; ++i) {
      auto& list = lists[i];
      unsigned long long columns_points = 0;
      for (const std::uint32_t jj : kept.list(i)) {
        const auto j = static_cast<std::int32_t>(jj);
        if (!list.empty() && list.back().end == j)
          ++list.back().end;
        else
          list.push_back({j, j + 1});
        columns_points += ty.end(ty.height, jj) - ty.begin(ty.height, jj);
      }
      points[chunk] += columns_points * (tx.end(tx.height, i) - tx.begin(tx.height, i));
    }
  }
  PatternResult r;
  r.kept_pairs = kept.pairs();
  kept = LevelPairs(0);
  r.pattern = std::make_shared<const BlockPattern>(tx.n, ty.n, lists);
  unsigned long long inside = 0;
  for (unsigned long long p : points) inside += p;
  r.kept_fraction = static_cast<double>(inside) / (static_cast<double>(tx.n) * static_cast<double>(ty.n));
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
