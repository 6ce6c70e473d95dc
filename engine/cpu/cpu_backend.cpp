// The CPU backend: every operation is a streaming reduction over tiles of (query rows × key columns), threaded
// over fixed blocks of query rows. Each row is reduced by one thread over the keys in a fixed order, so results
// are bitwise independent of the thread count. Memory: O((n + m)·d) plus O(rows·k) per thread, never n×m.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "kernels.hpp"

namespace flashot::detail {

namespace {

using cpu::kKeyPad;
using cpu::kTileCols;
using cpu::kTileRows;
using cpu::kValueChunk;

constexpr double kLog2e = std::numbers::log2e;
constexpr double kLn2 = std::numbers::ln2;
/// Query rows per threaded task: a fixed partition, so no result depends on how tasks meet threads.
constexpr std::size_t kTaskRows = 64;
/// Keys are streamed in chunks that stay in a core's L2 cache while every row of a task reads them.
constexpr std::size_t kKeyChunkBytes = 512 * 1024;
/// Column-sum buffers of the fused symmetric update: at most this many bytes (fewer row groups for a huge m).
constexpr std::size_t kColumnBudget = std::size_t{256} << 20;
/// Range of the fused update's row and column sums (≈ 1 near the fixed point) outside which it is not trusted.
/// Its exponents are clamped to ±100 (log2): within this range the clamped terms change a sum by at most
/// m·2^−36 relative, and no entry that matters reaches the upper clamp while its weight is above 2^−36.
constexpr double kFusedLow = 0x1p-64;
constexpr double kFusedHigh = 0x1p64;
/// The fused update is tried when the potentials are within this many ε of their soft c-transforms: its sums are
/// then within e^{±40} ≈ 2^{±58}, inside the range above.
constexpr double kFusedGap = 40;

std::size_t padded(std::size_t n) { return (n + kKeyPad - 1) / kKeyPad * kKeyPad; }

/// One side of the problem, in the layouts the kernels read.
struct Cloud {
  std::size_t n = 0;
  std::size_t d = 0;
  std::size_t ld = 0;
  std::vector<float> x;       // (n × d) row-major, as given (already centred by the engine)
  std::vector<float> t;       // (ld × d) in panels of kKeyPad keys (cpu::KeySet::t), zero padding
  std::vector<double> norm;   // (n) ‖x_i‖²
  std::vector<double> log2w;  // (n) log2 of the weights, −∞ for a zero weight
  std::vector<float> w;       // (n) weights

  Cloud(PointsView p, std::span<const float> weights)
      : n(p.n), d(p.d), ld(padded(p.n)), x(p.data.begin(), p.data.end()), t(p.d * padded(p.n), 0.0f),
        norm(p.n), log2w(p.n), w(weights.begin(), weights.end()) {
    for (std::size_t i = 0; i < n; ++i) {
      double s = 0;
      for (std::size_t c = 0; c < d; ++c) {
        const float v = x[i * d + c];
        t[(i / kKeyPad) * d * kKeyPad + c * kKeyPad + i % kKeyPad] = v;
        s += static_cast<double>(v) * v;
      }
      norm[i] = s;
      log2w[i] = w[i] > 0 ? std::log2(static_cast<double>(w[i])) : -std::numeric_limits<double>::infinity();
    }
  }

  cpu::QuerySet queries() const { return {x.data(), n, d}; }
  cpu::KeySet keys() const { return {t.data(), n, ld, d}; }
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(const BackendOptions& options, const ProblemData& data)
      : x_(data.x, data.a), y_(data.y, data.b), f_(data.x.n, 0.0), g_(data.y.n, 0.0),
        kernels_(&cpu::select_kernels(options.cpu_isa)),
        threads_(options.threads > 0 ? options.threads : std::max(1, omp_get_num_procs())) {}

  std::string name() const override { return "cpu"; }
  std::string device() const override {
    return std::to_string(threads_) + (threads_ == 1 ? " thread, " : " threads, ") + kernels_->name;
  }

  void set_potentials(std::span<const float> f, std::span<const float> g) override {
    std::copy(f.begin(), f.end(), f_.begin());
    std::copy(g.begin(), g.end(), g_.begin());
    gap_ = std::numeric_limits<double>::infinity();
  }
  void get_potentials(std::span<float> f, std::span<float> g) const override {
    std::transform(f_.begin(), f_.end(), f.begin(), [](double v) { return static_cast<float>(v); });
    std::transform(g_.begin(), g_.end(), g.begin(), [](double v) { return static_cast<float>(v); });
  }
  WeightedSums weighted_sums(Side side, std::size_t offset, std::span<const float> h, std::span<const float> hh,
                             double epsilon, double rho) const override {
    const std::vector<float>& w = side == Side::kSource ? x_.w : y_.w;
    if (offset > w.size() || h.size() > w.size() - offset || (!hh.empty() && hh.size() != h.size()))
      throw std::invalid_argument("weighted_sums: points [" + std::to_string(offset) + ", " +
                                  std::to_string(offset + h.size()) + ") of a side of " + std::to_string(w.size()));
    return detail::weighted_sums(std::span<const float>(w).subspan(offset, h.size()), h, hh, epsilon, rho);
  }

  void set_pattern(std::shared_ptr<const BlockPattern> pattern) override {
    if (pattern && (pattern->rows() != x_.n || pattern->cols() != y_.n))
      throw std::invalid_argument("block pattern of " + std::to_string(pattern->rows()) + " × " +
                                  std::to_string(pattern->cols()) + " points for a problem of " +
                                  std::to_string(x_.n) + " × " + std::to_string(y_.n));
    pattern_ = std::move(pattern);
    gap_ = std::numeric_limits<double>::infinity();
  }

  bool iterate(const IterationParams& p, int count) override {
    if (pattern_) return iterate_blocks(p, count);
    const PlanParams pp{p.epsilon, p.cost_scale};
    if (p.epsilon != gap_epsilon_) {
      gap_ = std::numeric_limits<double>::infinity();  // the bound below holds for one ε only
      gap_epsilon_ = p.epsilon;
    }
    std::vector<double> fn(x_.n), gn(y_.n);
    const double t = relax_weight(p.scheme, p.relaxation);
    for (int it = 0; it < count; ++it) {
      if (p.scheme == Scheme::kAlternating) {
        softmin_into(pp, x_, y_, g_, fn, Walk());
        for (std::size_t i = 0; i < x_.n; ++i) f_[i] = relax(f_[i], p.damping_f * fn[i], t);
        softmin_into(pp, y_, x_, f_, gn, Walk());
        for (std::size_t j = 0; j < y_.n; ++j) g_[j] = relax(g_[j], p.damping_g * gn[j], t);
      } else {
        if (!(gap_ <= kFusedGap * p.epsilon && symmetric_fused(p, fn, gn))) {
          softmin_into(pp, x_, y_, g_, fn, Walk());
          softmin_into(pp, y_, x_, f_, gn, Walk());
        }
        // Bound for the next update: softmin is 1-Lipschitz in the sup norm, so
        // |f' − softmin_rows(g')| ≤ |f' − softmin_rows(g)| + |g' − g|, and likewise for g.
        double df = 0, dg = 0, step_f = 0, step_g = 0;
        for (std::size_t i = 0; i < x_.n; ++i) {
          const double f = relax(f_[i], p.damping_f * fn[i], t);
          step_f = std::max(step_f, std::abs(f - f_[i]));
          df = std::max(df, std::abs(f - fn[i]));
          f_[i] = f;
        }
        for (std::size_t j = 0; j < y_.n; ++j) {
          const double g = relax(g_[j], p.damping_g * gn[j], t);
          step_g = std::max(step_g, std::abs(g - g_[j]));
          dg = std::max(dg, std::abs(g - gn[j]));
          g_[j] = g;
        }
        gap_ = std::max(df + step_g, dg + step_f);
      }
      if (!all_finite(f_) || !all_finite(g_)) return false;
    }
    return true;
  }

  void softmin(const PlanParams& p, Side rows, std::span<float> out) const override {
    check_segments(p.segments.size());

    std::vector<double> v(rows == Side::kSource ? x_.n : y_.n);
    if (rows == Side::kSource)
      softmin_into(p, x_, y_, g_, v, make_walk(p, true));
    else
      softmin_into(p, y_, x_, f_, v, make_walk(p, false));
    std::transform(v.begin(), v.end(), out.begin(), [](double e) { return static_cast<float>(e); });
  }

  void apply(const PlanParams& p, Side rows, std::span<const float> v, std::size_t k, bool normalized,
             std::span<float> out) const override {
    check_segments(p.segments.size());
    const bool src = rows == Side::kSource;
    const Cloud& q = src ? x_ : y_;
    const Cloud& keys = src ? y_ : x_;
    const std::vector<double>& hq = src ? f_ : g_;
    const std::vector<double>& hk = src ? g_ : f_;
    const Walk walk = make_walk(p, src);
    const std::vector<float> bias = make_bias(p, keys, hk, true, walk.key_segment);
    const cpu::ScoreSpec spec{q.queries(), keys.keys(), bias.data(), score_scale(p)};
    const std::vector<double> lse2 = row_lse2(spec, walk);
    weighted_into(spec, lse2, v, k, out, walk);
    if (normalized) return;
    // Row mass r_i = w_i·exp((h_i − ĥ_i)/ε), ĥ the soft c-transform: Σ_j P_ij = r_i · Σ_j 2^{t_ij − lse2_i}.
    for (std::size_t i = 0; i < q.n; ++i) {
      const double mass = row_mass(walk.row_params(p, i), q, hq[i], lse2[i], i);
      for (std::size_t c = 0; c < k; ++c) out[i * k + c] = static_cast<float>(out[i * k + c] * mass);
    }
  }

  void apply_queries(const PlanParams& p, Side from, PointsView q, std::span<const float> v, std::size_t k,
                     std::span<float> out) const override {
    const Cloud& keys = from == Side::kSource ? y_ : x_;
    const std::vector<double>& hk = from == Side::kSource ? g_ : f_;
    const std::vector<float> bias = make_bias(p, keys, hk);
    const cpu::ScoreSpec spec{{q.data.data(), q.n, q.d}, keys.keys(), bias.data(), score_scale(p)};
    const Walk dense;
    weighted_into(spec, row_lse2(spec, dense), v, k, out, dense);
  }

  void top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns,
             std::span<float> values) const override {
    check_segments(p.segments.size());
    const Walk walk = make_walk(p, true);
    const std::vector<float> bias = make_bias(p, y_, g_, true, walk.key_segment);
    const cpu::ScoreSpec full{x_.queries(), y_.keys(), bias.data(), score_scale(p)};
    const std::vector<double> lse2 = row_lse2(full, walk);
    const std::int64_t tasks = static_cast<std::int64_t>((x_.n + kTaskRows - 1) / kTaskRows);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
    for (std::int64_t task = 0; task < tasks; ++task) {
      std::vector<float> tile(kTileRows * kTileCols);
      // Per row a min-heap of (score, column) holding the k best so far; a score beats the heap's root to enter.
      std::vector<std::vector<std::pair<float, std::int32_t>>> heaps(kTileRows);
      const auto worse = [](const std::pair<float, std::int32_t>& l, const std::pair<float, std::int32_t>& r) {
        return l.first > r.first || (l.first == r.first && l.second < r.second);
      };
      const std::size_t begin = static_cast<std::size_t>(task) * kTaskRows;
      const std::size_t end = std::min(x_.n, begin + kTaskRows);
      const cpu::ScoreSpec spec = walk.spec(full, begin);
      const auto spans = walk.key_spans(begin, y_.ld);
      for (std::size_t i0 = begin; i0 < end; i0 += kTileRows) {
        const std::size_t rows = std::min(kTileRows, end - i0);
        for (auto& h : heaps) h.clear();
        for (const auto& [kb, ke] : spans)
        for (std::size_t j0 = kb; j0 < ke; j0 += kTileCols) {
          const std::size_t cols = std::min(kTileCols, ke - j0);
          kernels_->scores(spec, i0, rows, j0, cols, tile.data());
          const std::size_t real = std::min(cols, y_.n - std::min(y_.n, j0));
          for (std::size_t r = 0; r < rows; ++r) {
            auto& h = heaps[r];
            for (std::size_t j = 0; j < real; ++j) {
              const std::pair<float, std::int32_t> e{tile[r * kTileCols + j], static_cast<std::int32_t>(j0 + j)};
              if (h.size() < k) {
                h.push_back(e);
                std::push_heap(h.begin(), h.end(), worse);
              } else if (e.first > h.front().first) {
                std::pop_heap(h.begin(), h.end(), worse);
                h.back() = e;
                std::push_heap(h.begin(), h.end(), worse);
              }
            }
          }
        }
        for (std::size_t r = 0; r < rows; ++r) {
          const std::size_t i = i0 + r;
          auto& h = heaps[r];
          std::sort_heap(h.begin(), h.end(), worse);
          const double mass = row_mass(walk.row_params(p, i), x_, f_[i], lse2[i], i);
          for (std::size_t c = 0; c < k; ++c) {
            if (c >= h.size()) {  // fewer listed columns than k (block-sparse pattern)
              columns[i * k + c] = -1;
              values[i * k + c] = 0.0f;
              continue;
            }
            columns[i * k + c] = h[c].second;
            values[i * k + c] = static_cast<float>(mass * std::exp2(h[c].first - lse2[i]));
          }
        }
      }
    }
  }

  void c_transform(double s, Side rows, std::span<const float> h, std::span<double> values,
                   std::span<std::int32_t> index) const override {
    const Cloud& q = rows == Side::kSource ? x_ : y_;
    const Cloud& k = rows == Side::kSource ? y_ : x_;
    // Scores to maximise: t_ij = 2s⟨q_i, k_j⟩ + (h_j − s‖k_j‖²) = s‖q_i‖² − (s‖q_i − k_j‖² − h_j).
    std::vector<float> bias(k.ld, -std::numeric_limits<float>::infinity());
    double kmax = 0, bmax = 0;
    for (std::size_t j = 0; j < k.n; ++j) {
      bias[j] = static_cast<float>(h[j] - s * k.norm[j]);
      kmax = std::max(kmax, std::sqrt(k.norm[j]));
      bmax = std::max(bmax, std::abs(static_cast<double>(bias[j])));
    }
    const cpu::ScoreSpec spec{q.queries(), k.keys(), bias.data(), static_cast<float>(2 * s)};
    // |fp32 score − exact score| ≤ γ·(2s‖q_i‖·max‖k‖ + max|bias|): the scaled query (one rounding), the d FMAs and
    // the bias's own rounding; (d + 4)·2^−23 is twice the standard γ_{d+2} bound.
    const double unit = static_cast<double>(q.d + 4) * 0x1p-23;
    const std::int64_t tasks = static_cast<std::int64_t>((q.n + kTaskRows - 1) / kTaskRows);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
    for (std::int64_t task = 0; task < tasks; ++task) {
      std::vector<float> tile(kTileRows * kTileCols);
      const std::size_t begin = static_cast<std::size_t>(task) * kTaskRows;
      const std::size_t end = std::min(q.n, begin + kTaskRows);
      for (std::size_t i0 = begin; i0 < end; i0 += kTileRows) {
        const std::size_t count = std::min(kTileRows, end - i0);
        float best[kTileRows], second[kTileRows];
        std::int32_t arg[kTileRows];
        for (std::size_t r = 0; r < kTileRows; ++r) {
          best[r] = second[r] = -std::numeric_limits<float>::infinity();
          arg[r] = 0;
        }
        for (std::size_t j0 = 0; j0 < k.ld; j0 += kTileCols) {
          const std::size_t cols = std::min(kTileCols, k.ld - j0);
          kernels_->scores(spec, i0, count, j0, cols, tile.data());
          const std::size_t real = std::min(cols, k.n - std::min(k.n, j0));
          for (std::size_t r = 0; r < count; ++r) {
            const float* t = tile.data() + r * kTileCols;
            float b1 = best[r], b2 = second[r];
            std::int32_t a1 = arg[r];
            for (std::size_t j = 0; j < real; ++j) {
              const float v = t[j];
              if (v > b1) {
                b2 = b1;
                b1 = v;
                a1 = static_cast<std::int32_t>(j0 + j);
              } else if (v > b2) {
                b2 = v;
              }
            }
            best[r] = b1;
            second[r] = b2;
            arg[r] = a1;
          }
        }
        for (std::size_t r = 0; r < count; ++r) {
          const std::size_t i = i0 + r;
          const double bound = unit * (2 * s * std::sqrt(q.norm[i]) * kmax + bmax);
          if (static_cast<double>(best[r]) - second[r] > 2 * bound) {
            index[i] = arg[r];
            values[i] = direct_value(s, q, i, k, arg[r], h);
            continue;
          }
          // A near tie: every column whose score may be the true best is re-decided from fp64 differences.
          const double floor = static_cast<double>(best[r]) - 3 * bound;
          double v_best = std::numeric_limits<double>::infinity();
          std::int32_t j_best = arg[r];
          for (std::size_t j0 = 0; j0 < k.ld; j0 += kTileCols) {
            const std::size_t cols = std::min(kTileCols, k.ld - j0);
            kernels_->scores(spec, i, 1, j0, cols, tile.data());
            const std::size_t real = std::min(cols, k.n - std::min(k.n, j0));
            for (std::size_t j = 0; j < real; ++j) {
              if (!(tile[j] >= floor)) continue;
              const double v = direct_value(s, q, i, k, j0 + j, h);
              if (v < v_best) {
                v_best = v;
                j_best = static_cast<std::int32_t>(j0 + j);
              }
            }
          }
          index[i] = j_best;
          values[i] = v_best;
        }
      }
    }
  }

 private:
  /// How a pass over one side's rows (the queries) walks the keys: densely (no pattern) or over the pattern's
  /// lists, with each block's segment parameters. A task of kTaskRows rows lies in one block (kBlockSize is a
  /// multiple of kTaskRows), so the score scale is constant over a task.
  struct Walk {
    const BlockPattern* pattern = nullptr;
    bool rows = true;                                        // queries are x (row lists) or y (column lists)
    const std::vector<std::int32_t>* query_segment = nullptr;  // by query block; null: one segment
    const std::vector<std::int32_t>* key_segment = nullptr;    // by key block
    std::vector<float> scale;                                // by query block (pattern only)

    std::size_t segment(std::size_t i) const { return query_segment ? (*query_segment)[i / kBlockSize] : 0; }
    SegmentParams row_params(const PlanParams& p, std::size_t i) const { return segment_params(p, segment(i)); }
    cpu::ScoreSpec spec(const cpu::ScoreSpec& s, std::size_t begin) const {
      cpu::ScoreSpec out = s;
      if (pattern) out.scale = scale[begin / kBlockSize];
      return out;
    }
    /// Key columns [begin, end) that the task starting at query row `begin` visits (ld: the padded key count).
    std::vector<std::pair<std::size_t, std::size_t>> key_spans(std::size_t begin, std::size_t ld) const {
      if (!pattern) return {{0, ld}};
      std::vector<std::pair<std::size_t, std::size_t>> out;
      for (const BlockRange& r : pattern->list(rows, begin / kBlockSize))
        out.emplace_back(static_cast<std::size_t>(r.begin) * kBlockSize,
                         std::min(ld, static_cast<std::size_t>(r.end) * kBlockSize));
      return out;
    }
  };

  Walk make_walk(const PlanParams& p, bool rows) const {
    Walk w;
    if (!pattern_) return w;
    w.pattern = pattern_.get();
    w.rows = rows;
    w.query_segment = rows ? &pattern_->row_segment() : &pattern_->col_segment();
    w.key_segment = rows ? &pattern_->col_segment() : &pattern_->row_segment();
    w.scale.resize(w.query_segment->size());
    for (std::size_t b = 0; b < w.scale.size(); ++b) {
      const SegmentParams sp = segment_params(p, (*w.query_segment)[b]);
      w.scale[b] = score_scale(PlanParams{sp.epsilon, sp.cost_scale});
    }
    return w;
  }

  /// Throws std::invalid_argument when a pattern's segments have no parameters (given ones must cover them).
  void check_segments(std::size_t given) const {
    if (pattern_ && given > 0 && given < pattern_->segments())
      throw std::invalid_argument(std::to_string(given) + " segment parameters for a block pattern of " +
                                  std::to_string(pattern_->segments()) + " segments");
  }

  /// The block-sparse update (either scheme, per-segment ε, cost scale and damping): two soft c-transforms that
  /// walk the lists; the potentials of inactive blocks stay as they are.
  bool iterate_blocks(const IterationParams& p, int count) {
    check_segments(p.segments.size());
    const BlockPattern& pat = *pattern_;
    const PlanParams pp{p.epsilon, p.cost_scale, p.segments};
    const Walk wx = make_walk(pp, true), wy = make_walk(pp, false);
    const auto active = [&](bool rows, std::size_t i) { return !pat.list(rows, i / kBlockSize).empty(); };
    std::vector<double> fn(x_.n), gn(y_.n);
    for (int it = 0; it < count; ++it) {
      const bool alternating = p.scheme == Scheme::kAlternating;
      softmin_into(pp, x_, y_, g_, fn, wx);
      if (alternating) {
        for (std::size_t i = 0; i < x_.n; ++i)
          if (active(true, i)) {
            const SegmentParams sp = segment_params(p, wx.segment(i));
            f_[i] = relax(f_[i], sp.damping_f * fn[i], relax_weight(p.scheme, sp.relaxation));
          }
      }
      softmin_into(pp, y_, x_, f_, gn, wy);
      if (!alternating) {
        for (std::size_t i = 0; i < x_.n; ++i)
          if (active(true, i)) {
            const SegmentParams sp = segment_params(p, wx.segment(i));
            f_[i] = relax(f_[i], sp.damping_f * fn[i], relax_weight(p.scheme, sp.relaxation));
          }
      }
      for (std::size_t j = 0; j < y_.n; ++j) {
        if (!active(false, j)) continue;
        const SegmentParams sp = segment_params(p, wy.segment(j));
        g_[j] = relax(g_[j], sp.damping_g * gn[j], relax_weight(p.scheme, sp.relaxation));
      }
      if (!all_finite(f_) || !all_finite(g_)) return false;
    }
    return true;
  }

  /// The symmetric update from one exponential per plan entry (docs/design.md §2): with E_ij = exp((f_i + g_j − C_ij)/ε),
  /// softmin_rows(g)_i = f_i − ε·ln Σ_j b_j E_ij and softmin_cols(f)_j = g_j − ε·ln Σ_i a_i E_ij, exactly. Rows are
  /// split into a fixed number of groups (set by n and m only, never by the thread count), each with its own
  /// column-sum buffer, added in a fixed order: the result is bitwise independent of the thread count.
  /// Tried only when the potentials are provably near their fixed point (gap_ below), so the sums stay near 1;
  /// returns false when a sum still falls outside [2^−64, 2^64], and the caller takes the two-pass way.
  /// fn, gn receive softmin_rows(g) and softmin_cols(f).
  bool symmetric_fused(const IterationParams& p, std::vector<double>& fn, std::vector<double>& gn) {
    const PlanParams pp{p.epsilon, p.cost_scale};
    const std::size_t n = x_.n, m = y_.n, ld = y_.ld;
    const std::vector<float> beta = make_bias(pp, y_, g_, false);
    std::vector<float> alpha(n);
    for (std::size_t i = 0; i < n; ++i)
      alpha[i] = static_cast<float>((f_[i] - p.cost_scale * x_.norm[i]) / p.epsilon * kLog2e);
    std::vector<float> wk(ld, 0.0f);
    std::copy(y_.w.begin(), y_.w.end(), wk.begin());
    const cpu::ScoreSpec spec{x_.queries(), y_.keys(), beta.data(), score_scale(pp)};

    const std::size_t groups = std::min(std::max<std::size_t>(1, (n + 511) / 512),
                                        std::max<std::size_t>(1, std::min<std::size_t>(64, kColumnBudget / (8 * ld))));
    column_parts_.assign(groups * ld, 0.0);
    row_sums_.assign(n, 0.0);
    const std::size_t chunk = key_chunk(x_.d);
    const std::int64_t group_count = static_cast<std::int64_t>(groups);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
    for (std::int64_t grp = 0; grp < group_count; ++grp) {
      const std::size_t gb = n * static_cast<std::size_t>(grp) / groups;
      const std::size_t ge = n * static_cast<std::size_t>(grp + 1) / groups;
      double* cols = column_parts_.data() + static_cast<std::size_t>(grp) * ld;
      for (std::size_t rb = gb; rb < ge; rb += kTaskRows) {
        const std::size_t re = std::min(ge, rb + kTaskRows);
        for (std::size_t kb = 0; kb < ld; kb += chunk)
          kernels_->fused(spec, rb, re, kb, std::min(ld, kb + chunk), alpha.data(), x_.w.data(), wk.data(),
                          row_sums_.data(), cols);
      }
    }
    std::vector<double> col_sums(m, 0.0);
    for (std::size_t grp = 0; grp < groups; ++grp)
      for (std::size_t j = 0; j < m; ++j) col_sums[j] += column_parts_[grp * ld + j];

    const auto in_range = [](double v) { return v >= kFusedLow && v <= kFusedHigh; };
    if (!std::all_of(row_sums_.begin(), row_sums_.end(), in_range) ||
        !std::all_of(col_sums.begin(), col_sums.end(), in_range))
      return false;
    for (std::size_t i = 0; i < n; ++i) fn[i] = f_[i] - p.epsilon * std::log(row_sums_[i]);
    for (std::size_t j = 0; j < m; ++j) gn[j] = g_[j] - p.epsilon * std::log(col_sums[j]);
    return true;
  }

  /// s·‖q_i − k_j‖² − h_j in fp64 from the direct differences.
  static double direct_value(double s, const Cloud& q, std::size_t i, const Cloud& k, std::size_t j,
                             std::span<const float> h) {
    double dist = 0;
    for (std::size_t c = 0; c < q.d; ++c) {
      const double diff = static_cast<double>(q.x[i * q.d + c]) - k.x[j * k.d + c];
      dist += diff * diff;
    }
    return s * dist - h[j];
  }

  static bool all_finite(const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double e) { return std::isfinite(e); });
  }

  /// log2(e)·2s/ε: the factor of ⟨q, k⟩ in the score (C = s‖q‖² + s‖k‖² − 2s⟨q,k⟩).
  static float score_scale(const PlanParams& p) {
    return static_cast<float>(2.0 * p.cost_scale / p.epsilon * kLog2e);
  }

  /// bias_j = log2 w_j + (h_j − s‖k_j‖²)/ε · log2(e), −∞ for zero weights and the padding; without the log2 w_j
  /// term when `with_weights` is false.
  /// key_segment (by key block, pattern only): each key takes its segment's ε and cost scale.
  static std::vector<float> make_bias(const PlanParams& p, const Cloud& keys, const std::vector<double>& h,
                                      bool with_weights = true,
                                      const std::vector<std::int32_t>* key_segment = nullptr) {
    std::vector<float> bias(keys.ld, -std::numeric_limits<float>::infinity());
    if (key_segment == nullptr) {
      for (std::size_t j = 0; j < keys.n; ++j)
        bias[j] = static_cast<float>((with_weights ? keys.log2w[j] : 0.0) +
                                     (h[j] - p.cost_scale * keys.norm[j]) / p.epsilon * kLog2e);
      return bias;
    }
    for (std::size_t j = 0; j < keys.n; ++j) {
      const SegmentParams sp = segment_params(p, (*key_segment)[j / kBlockSize]);
      bias[j] = static_cast<float>((with_weights ? keys.log2w[j] : 0.0) +
                                   (h[j] - sp.cost_scale * keys.norm[j]) / sp.epsilon * kLog2e);
    }
    return bias;
  }

  /// r_i = w_i·exp((h_i − s‖q_i‖²)/ε)·2^{lse2_i}, the plan mass of row i (computed in the log domain).
  static double row_mass(const SegmentParams& p, const Cloud& q, double h, double lse2, std::size_t i) {
    if (!(q.w[i] > 0)) return 0;
    return std::exp2(q.log2w[i] + (h - p.cost_scale * q.norm[i]) / p.epsilon * kLog2e + lse2);
  }

  std::size_t key_chunk(std::size_t d) const {
    const std::size_t cols = kKeyChunkBytes / (sizeof(float) * std::max<std::size_t>(d, 1));
    return std::max(kTileCols, cols / kTileCols * kTileCols);
  }

  /// lse2_i = log2 Σ_j 2^{t_ij} for every query row.
  std::vector<double> row_lse2(const cpu::ScoreSpec& spec, const Walk& walk) const {
    const std::size_t n = spec.queries.count;
    std::vector<float> mx(n, -std::numeric_limits<float>::infinity());
    std::vector<double> sm(n, 0.0);
    const std::size_t chunk = key_chunk(spec.keys.d);
    const std::int64_t tasks = static_cast<std::int64_t>((n + kTaskRows - 1) / kTaskRows);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
    for (std::int64_t task = 0; task < tasks; ++task) {
      const std::size_t begin = static_cast<std::size_t>(task) * kTaskRows;
      const std::size_t end = std::min(n, begin + kTaskRows);
      const cpu::ScoreSpec s = walk.spec(spec, begin);
      for (const auto& [kb0, ke] : walk.key_spans(begin, spec.keys.ld))
        for (std::size_t kb = kb0; kb < ke; kb += chunk)
          kernels_->lse(s, begin, end, kb, std::min(ke, kb + chunk), mx.data(), sm.data());
    }
    std::vector<double> lse2(n);
    for (std::size_t i = 0; i < n; ++i) lse2[i] = mx[i] + std::log2(sm[i]);
    return lse2;
  }

  /// out (queries × k) = Σ_j 2^{t_ij − lse2_i} V_j, V (keys × k) row-major; chunked over value columns.
  void weighted_into(const cpu::ScoreSpec& spec, const std::vector<double>& lse2, std::span<const float> v,
                     std::size_t k, std::span<float> out, const Walk& walk) const {
    const std::size_t n = spec.queries.count;
    const std::size_t nk = spec.keys.count;
    const std::size_t ld = spec.keys.ld;
    const std::size_t chunk = key_chunk(spec.keys.d);
    const std::int64_t tasks = static_cast<std::int64_t>((n + kTaskRows - 1) / kTaskRows);
    std::vector<float> vt;
    for (std::size_t c0 = 0; c0 < k; c0 += kValueChunk) {
      const std::size_t kc = std::min(kValueChunk, k - c0);
      vt.assign(kc * ld, 0.0f);  // (kc × ld): this chunk of V, transposed
      for (std::size_t j = 0; j < nk; ++j)
        for (std::size_t c = 0; c < kc; ++c) vt[c * ld + j] = v[j * k + c0 + c];
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
      for (std::int64_t task = 0; task < tasks; ++task) {
        const std::size_t begin = static_cast<std::size_t>(task) * kTaskRows;
        const std::size_t end = std::min(n, begin + kTaskRows);
        std::vector<double> acc((end - begin) * kc, 0.0);
        const cpu::ScoreSpec s = walk.spec(spec, begin);
        for (const auto& [kb0, ke] : walk.key_spans(begin, ld))
          for (std::size_t kb = kb0; kb < ke; kb += chunk)
            kernels_->weighted(s, begin, end, kb, std::min(ke, kb + chunk), lse2.data(), vt.data(), kc, acc.data(),
                               kc);
        for (std::size_t i = begin; i < end; ++i)
          for (std::size_t c = 0; c < kc; ++c) out[i * k + c0 + c] = static_cast<float>(acc[(i - begin) * kc + c]);
      }
    }
  }

  /// out_i = s‖q_i‖² − ε·LSE_j[log w_j + (h_j − C_ij)/ε]: the soft c-transform of the keys' potential h.
  void softmin_into(const PlanParams& p, const Cloud& q, const Cloud& keys, const std::vector<double>& h,
                    std::vector<double>& out, const Walk& walk) const {
    const std::vector<float> bias = make_bias(p, keys, h, true, walk.key_segment);
    const cpu::ScoreSpec spec{q.queries(), keys.keys(), bias.data(), score_scale(p)};
    const std::vector<double> lse2 = row_lse2(spec, walk);
    if (!walk.pattern) {
      for (std::size_t i = 0; i < q.n; ++i) out[i] = p.cost_scale * q.norm[i] - p.epsilon * kLn2 * lse2[i];
      return;
    }
    for (std::size_t i = 0; i < q.n; ++i) {
      const SegmentParams sp = walk.row_params(p, i);
      out[i] = sp.cost_scale * q.norm[i] - sp.epsilon * kLn2 * lse2[i];  // +∞ for an inactive block
    }
  }

  Cloud x_;
  Cloud y_;
  std::vector<double> f_;
  std::vector<double> g_;
  std::vector<double> column_parts_;  // (groups × y.ld) column sums of the fused update, one buffer per row group
  std::vector<double> row_sums_;      // (n)
  // Bound on max(|f − softmin_rows(g)|, |g − softmin_cols(f)|) for the resident potentials at ε = gap_epsilon_.
  double gap_ = std::numeric_limits<double>::infinity();
  double gap_epsilon_ = 0;
  const cpu::IsaKernels* kernels_;
  int threads_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options, const ProblemData& data) {
  return std::make_unique<CpuBackend>(options, data);
}

}  // namespace flashot::detail
