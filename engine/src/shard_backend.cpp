// The host-combined sharded backend: G child backends, each holding a contiguous range of x's rows and all of y,
// driven through the Backend interface and combined exactly on the host (docs/design.md §5, docs/multi-gpu.md).
#include "shard_backend.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shard_plan.hpp"

namespace flashot::detail {

static_assert(kShardListAlign == kBlockSize, "shard_plan.hpp and block_pattern.hpp agree on the lists' row blocks");

namespace {

/// Floats of partial column results held at once by the Pᵀ·U combination (G·m·columns), 256 MiB: larger k is
/// combined a chunk of columns at a time.
constexpr std::size_t kCombineFloats = std::size_t(64) << 20;

bool all_finite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double e) { return std::isfinite(e); });
}

/// The options a shard's own backend is made with: sharding cleared, the shard's device set.
BackendOptions child_options(const BackendOptions& options, std::size_t shard) {
  BackendOptions o = options;
  if (options.devices.size() > 1)
    o.device = options.devices[shard];
  else if (options.devices.size() == 1)
    o.device = options.devices.front();
  o.devices.clear();
  o.shards = 0;
  o.rank = 0;
  o.ranks = 1;
  return o;
}

class ShardedBackend final : public Backend {
 public:
  ShardedBackend(const BackendOptions& options, const ProblemData& data, BackendFactory make_child)
      : make_child_(std::move(make_child)), n_(data.x.n), m_(data.y.n), d_(data.x.d),
        x_(data.x.data.begin(), data.x.data.end()), a_(data.a.begin(), data.a.end()), f_(n_, 0.0), g_(m_, 0.0),
        fbuf_(n_, 0.0f), gbuf_(m_, 0.0f) {
    plan_ = plan_shards(n_, local_shard_count(options));
    for (std::size_t s = 0; s < plan_.size(); ++s) {
      options_.push_back(child_options(options, s));
      children_.push_back(make_child_(options_[s], ProblemData{x_rows(s), data.y, a_rows(s), data.b}));
    }
    // Children on devices run concurrently (each call blocks on its own stream); CPU children already use every
    // thread, so they run one after another.
    parallel_ = children_.front()->name() != "cpu";
  }

  std::string name() const override { return children_.front()->name(); }

  EngineStatistics statistics() const override {
    // The host combination never takes the children's one-pass steps: only their screened tiles add up.
    EngineStatistics total;
    for (const auto& c : children_) add_screening(total, c->statistics());
    return total;
  }

  std::string device() const override {
    std::string shards = std::to_string(plan_.size()) + " row shards";
    std::vector<std::string> names;
    for (const auto& c : children_)
      if (std::find(names.begin(), names.end(), c->device()) == names.end()) names.push_back(c->device());
    for (std::size_t i = 0; i < names.size(); ++i) shards += (i == 0 ? " on " : "; ") + names[i];
    if (options_.size() > 1 && name() != "cpu") {
      shards += " (devices";
      for (std::size_t s = 0; s < options_.size(); ++s) shards += (s == 0 ? " " : ", ") + std::to_string(options_[s].device);
      shards += ")";
    }
    return shards;
  }

  void set_potentials(std::span<const float> f, std::span<const float> g) override {
    std::copy(f.begin(), f.end(), f_.begin());
    std::copy(g.begin(), g.end(), g_.begin());
    pushed_ = false;
  }

  void get_potentials(std::span<float> f, std::span<float> g) const override {
    std::transform(f_.begin(), f_.end(), f.begin(), [](double v) { return static_cast<float>(v); });
    std::transform(g_.begin(), g_.end(), g.begin(), [](double v) { return static_cast<float>(v); });
  }

  /// Block-sparse lists (docs/block-sparse.md): each shard takes the rows of its own row blocks (row_slice), so its
  /// boundaries must fall on blocks; columns combine over the shards with each column's segment ε.
  void set_pattern(std::shared_ptr<const BlockPattern> pattern) override {
    if (pattern && (pattern->rows() != n_ || pattern->cols() != m_))
      throw std::invalid_argument("block pattern of " + std::to_string(pattern->rows()) + " × " +
                                  std::to_string(pattern->cols()) + " points for a problem of " + std::to_string(n_) +
                                  " × " + std::to_string(m_));
    if (pattern)
      for (const ShardRange& r : plan_)
        if (r.begin % kBlockSize != 0)
          throw std::runtime_error("block-sparse lists need shard boundaries on blocks of " +
                                   std::to_string(kBlockSize) + " rows, but a shard starts at row " +
                                   std::to_string(r.begin) + " (n = " + std::to_string(n_) + ", " +
                                   std::to_string(plan_.size()) + " shards: fewer shards, or more rows)");
    for (std::size_t s = 0; s < plan_.size(); ++s)
      children_[s]->set_pattern(pattern ? std::make_shared<const BlockPattern>(
                                              pattern->row_slice(plan_[s].begin, plan_[s].end))
                                        : nullptr);
    pattern_ = std::move(pattern);
  }

  bool iterate(const IterationParams& p, int count) override {
    if (pattern_) return iterate_blocks(p, count);
    const PlanParams pp{p.epsilon, p.cost_scale};
    std::vector<float> fh(n_);
    std::vector<std::vector<float>> partial(plan_.size(), std::vector<float>(m_));
    std::vector<double> gh(m_);
    const double t = relax_weight(p.scheme, p.relaxation);
    for (int it = 0; it < count; ++it) {
      push();
      if (p.scheme == Scheme::kSymmetric) {
        // f' from the old g (local), g' from the old f (combined over the shards), then both averaged.
        each_shard([&](std::size_t s) {
          children_[s]->softmin(pp, Side::kSource, rows_of(std::span<float>(fh), s, 1));
          children_[s]->softmin(pp, Side::kTarget, partial[s]);
        });
        combine(partial, p.epsilon, gh);
        for (std::size_t i = 0; i < n_; ++i) f_[i] = relax<double>(f_[i], p.damping_f * fh[i], t);
        for (std::size_t j = 0; j < m_; ++j) g_[j] = relax<double>(g_[j], p.damping_g * gh[j], t);
      } else {
        each_shard([&](std::size_t s) { children_[s]->softmin(pp, Side::kSource, rows_of(std::span<float>(fh), s, 1)); });
        for (std::size_t i = 0; i < n_; ++i) f_[i] = relax<double>(f_[i], p.damping_f * fh[i], t);
        pushed_ = false;
        push();
        each_shard([&](std::size_t s) { children_[s]->softmin(pp, Side::kTarget, partial[s]); });
        combine(partial, p.epsilon, gh);
        for (std::size_t j = 0; j < m_; ++j) g_[j] = relax<double>(g_[j], p.damping_g * gh[j], t);
      }
      pushed_ = false;
      if (!all_finite(f_) || !all_finite(g_)) return false;
    }
    return true;
  }

  void softmin(const PlanParams& p, Side rows, std::span<float> out) const override {
    push();
    if (rows == Side::kSource) {
      each_shard([&](std::size_t s) { children_[s]->softmin(p, Side::kSource, rows_of(out, s, 1)); });
      return;
    }
    std::vector<std::vector<float>> partial(plan_.size(), std::vector<float>(m_));
    each_shard([&](std::size_t s) { children_[s]->softmin(p, Side::kTarget, partial[s]); });
    std::vector<double> h(m_);
    combine(partial, p, h);
    std::transform(h.begin(), h.end(), out.begin(), [](double v) { return static_cast<float>(v); });
  }

  void apply(const PlanParams& p, Side rows, std::span<const float> v, std::size_t k, bool normalized,
             std::span<float> out) const override {
    push();
    if (rows == Side::kSource) {
      // P·V: every row of P lives on one shard, which holds all of V (one row per target point).
      each_shard([&](std::size_t s) { children_[s]->apply(p, rows, v, k, normalized, rows_of(out, s, k)); });
      return;
    }
    if (plan_.size() == 1) {
      children_.front()->apply(p, rows, v, k, normalized, out);
      return;
    }
    apply_columns(p, v, k, normalized, out);
  }

  void apply_queries(const PlanParams& p, Side from, PointsView q, std::span<const float> v, std::size_t k,
                     std::span<float> out) const override {
    if (q.n == 0 || k == 0) return;
    push();
    if (from == Side::kSource) {
      // Source-side queries are mapped through y and g, which every shard holds: the queries are shared out.
      const std::vector<ShardRange> parts = plan_shards(q.n, static_cast<int>(std::min(plan_.size(), q.n)), 1);
      for_each(parts.size(), [&](std::size_t s) {
        const ShardRange r = parts[s];
        children_[s]->apply_queries(p, Side::kSource, {q.data.subspan(r.begin * q.d, r.size() * q.d), r.size(), q.d},
                                    v, k, out.subspan(r.begin * k, r.size() * k));
      });
      return;
    }
    if (plan_.size() == 1) {
      children_.front()->apply_queries(p, from, q, v, k, out);
      return;
    }
    map_target_queries(p, q, v, k, out);
  }

  void top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns,
             std::span<float> values) const override {
    push();
    each_shard([&](std::size_t s) { children_[s]->top_k(p, k, rows_of(columns, s, k), rows_of(values, s, k)); });
  }

  void c_transform(double cost_scale, Side rows, std::span<const float> h, std::span<double> values,
                   std::span<std::int32_t> index) const override {
    if (rows == Side::kSource) {
      // Every row of x lives on one shard, which holds all of y.
      each_shard([&](std::size_t s) {
        children_[s]->c_transform(cost_scale, rows, h, rows_of(values, s, 1), rows_of(index, s, 1));
      });
      return;
    }
    // Columns: each shard minimises over its own rows of x; the smallest value wins, the lower shard (lower
    // global index) on an exact tie, which is what one device gives.
    std::vector<std::vector<double>> part(plan_.size(), std::vector<double>(m_));
    std::vector<std::vector<std::int32_t>> arg(plan_.size(), std::vector<std::int32_t>(m_));
    each_shard([&](std::size_t s) {
      children_[s]->c_transform(cost_scale, rows, h.subspan(plan_[s].begin, plan_[s].size()), part[s], arg[s]);
    });
    combine_c_transform(part, arg, values, index);
  }

 private:
  /// ε of column j: its segment's (pattern with segment parameters), else the common one.
  double column_epsilon(const PlanParams& p, std::size_t j) const {
    if (!pattern_ || p.segments.empty()) return p.epsilon;
    return segment_params(p, std::size_t(pattern_->col_segment()[j / kBlockSize])).epsilon;
  }

  /// The column combination with every column's own ε.
  void combine(const std::vector<std::vector<float>>& partial, const PlanParams& p, std::span<double> out) const {
    if (!pattern_ || p.segments.empty()) return combine(partial, p.epsilon, out);
    std::vector<double> column(partial.size());
    for (std::size_t j = 0; j < out.size(); ++j) {
      for (std::size_t s = 0; s < partial.size(); ++s) column[s] = partial[s][j];
      out[j] = combine_softmin(column, column_epsilon(p, j));
    }
  }

  /// Backend::iterate under a pattern: per-segment ε, cost scale and damping; inactive blocks keep their potentials.
  bool iterate_blocks(const IterationParams& p, int count) {
    const PlanParams pp{p.epsilon, p.cost_scale, p.segments};
    const BlockPattern& pat = *pattern_;
    const auto seg = [&](bool rows, std::size_t i) {
      return segment_params(p, std::size_t((rows ? pat.row_segment() : pat.col_segment())[i / kBlockSize]));
    };
    const auto active = [&](bool rows, std::size_t i) { return !pat.list(rows, i / kBlockSize).empty(); };
    const bool alternating = p.scheme == Scheme::kAlternating;
    const auto tw = [&](const SegmentParams& sp) { return relax_weight(p.scheme, sp.relaxation); };
    std::vector<float> fh(n_);
    std::vector<std::vector<float>> partial(plan_.size(), std::vector<float>(m_));
    std::vector<double> gh(m_);
    for (int it = 0; it < count; ++it) {
      push();
      each_shard([&](std::size_t s) { children_[s]->softmin(pp, Side::kSource, rows_of(std::span<float>(fh), s, 1)); });
      if (alternating) {
        for (std::size_t i = 0; i < n_; ++i)
          if (active(true, i)) f_[i] = relax<double>(f_[i], seg(true, i).damping_f * fh[i], tw(seg(true, i)));
        pushed_ = false;
        push();
      }
      each_shard([&](std::size_t s) { children_[s]->softmin(pp, Side::kTarget, partial[s]); });
      combine(partial, pp, gh);
      if (!alternating)
        for (std::size_t i = 0; i < n_; ++i)
          if (active(true, i)) f_[i] = relax<double>(f_[i], seg(true, i).damping_f * fh[i], tw(seg(true, i)));
      for (std::size_t j = 0; j < m_; ++j) {
        if (!active(false, j)) continue;
        const double v = seg(false, j).damping_g * gh[j];
        g_[j] = relax<double>(g_[j], v, tw(seg(false, j)));
      }
      pushed_ = false;
      if (!all_finite(f_) || !all_finite(g_)) return false;
    }
    return true;
  }

  PointsView x_rows(std::size_t s) const {
    const ShardRange r = plan_[s];
    return {std::span<const float>(x_).subspan(r.begin * d_, r.size() * d_), r.size(), d_};
  }
  std::span<const float> a_rows(std::size_t s) const {
    return std::span<const float>(a_).subspan(plan_[s].begin, plan_[s].size());
  }
  /// Shard s's rows of an (n × width) row-major array.
  template <class T>
  std::span<T> rows_of(std::span<T> all, std::size_t s, std::size_t width) const {
    return all.subspan(plan_[s].begin * width, plan_[s].size() * width);
  }

  /// The column-side hard c-transform of every shard combined: min value, global index, lower shard on ties.
  void combine_c_transform(const std::vector<std::vector<double>>& part,
                           const std::vector<std::vector<std::int32_t>>& arg, std::span<double> values,
                           std::span<std::int32_t> index) const {
    for (std::size_t j = 0; j < m_; ++j) {
      double best = part[0][j];
      std::int32_t at = arg[0][j] + static_cast<std::int32_t>(plan_[0].begin);
      for (std::size_t s = 1; s < plan_.size(); ++s)
        if (part[s][j] < best) {
          best = part[s][j];
          at = arg[s][j] + static_cast<std::int32_t>(plan_[s].begin);
        }
      values[j] = best;
      index[j] = at;
    }
  }

  /// Runs fn(s) for s in [0, count): concurrently, one thread per shard, for device children.
  void for_each(std::size_t count, const std::function<void(std::size_t)>& fn) const {
    if (!parallel_ || count == 1) {
      for (std::size_t s = 0; s < count; ++s) fn(s);
      return;
    }
    std::vector<std::exception_ptr> errors(count);
    {
      std::vector<std::jthread> workers;
      workers.reserve(count);
      for (std::size_t s = 0; s < count; ++s)
        workers.emplace_back([&, s] {
          try {
            fn(s);
          } catch (...) {
            errors[s] = std::current_exception();
          }
        });
    }
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
  void each_shard(const std::function<void(std::size_t)>& fn) const { for_each(plan_.size(), fn); }

  /// Hands the host potentials to the children when they changed since the last hand-over.
  void push() const {
    if (pushed_) return;
    std::transform(f_.begin(), f_.end(), fbuf_.begin(), [](double v) { return static_cast<float>(v); });
    std::transform(g_.begin(), g_.end(), gbuf_.begin(), [](double v) { return static_cast<float>(v); });
    each_shard([&](std::size_t s) {
      children_[s]->set_potentials(rows_of(std::span<const float>(fbuf_), s, 1), gbuf_);
    });
    pushed_ = true;
  }

  static void combine(const std::vector<std::vector<float>>& partial, double epsilon, std::span<double> out) {
    std::vector<std::span<const float>> views(partial.begin(), partial.end());
    combine_softmins(views, epsilon, out);
  }

  /// shares[s][j]: shard s's part of column j's plan mass, for backends whose row sides are the shards and whose
  /// column sides have `cols` points. The mass ratios are measured with each column's potential set to the combined
  /// soft c-transform ĥ_j (then Σ_s mass_sj = w_j: no overflow, fp32-accurate shares at any ε); a column without
  /// weight falls back to softmax_s(−h_sj/ε) from the shards' own soft c-transforms. Leaves ĥ as the backends' column
  /// potential.
  /// own_columns: the backends are the children (columns = y, each with its segment's ε under a pattern).
  void column_shares(const PlanParams& p, const std::vector<Backend*>& backends, std::size_t cols,
                     std::vector<std::vector<double>>& shares, bool own_columns) const {
    const std::size_t g = backends.size();
    std::vector<std::vector<float>> h(g, std::vector<float>(cols)), mass(g, std::vector<float>(cols));
    for_each(g, [&](std::size_t s) { backends[s]->softmin(p, Side::kTarget, h[s]); });
    std::vector<double> combined(cols);
    if (own_columns)
      combine(h, p, combined);  // each column's segment ε
    else
      combine(h, p.epsilon, combined);
    std::vector<float> shift(combined.begin(), combined.end());
    // Columns where no shard has mass get 0: their mass is 0 whatever the potential, and the fallback applies.
    for (float& v : shift)
      if (!std::isfinite(v)) v = 0.0f;
    const std::vector<float> ones(std::max_element(plan_.begin(), plan_.end(), [](auto l, auto r) {
                                    return l.size() < r.size();
                                  })->size(), 1.0f);
    for_each(g, [&](std::size_t s) {
      backends[s]->set_potentials(rows_of(std::span<const float>(fbuf_), s, 1), shift);
      backends[s]->apply(p, Side::kTarget, std::span<const float>(ones).first(plan_[s].size()), 1, false, mass[s]);
    });
    shares.assign(g, std::vector<double>(cols));
    std::vector<double> column(g), share(g);
    for (std::size_t j = 0; j < cols; ++j) {
      double total = 0;
      for (std::size_t s = 0; s < g; ++s) total += mass[s][j];
      if (total > 0 && std::isfinite(total)) {
        for (std::size_t s = 0; s < g; ++s) shares[s][j] = mass[s][j] / total;
        continue;
      }
      for (std::size_t s = 0; s < g; ++s) column[s] = h[s][j];
      shard_mass_shares(column, own_columns ? column_epsilon(p, j) : p.epsilon, share);
      for (std::size_t s = 0; s < g; ++s) shares[s][j] = share[s];
    }
  }

  /// Pᵀ·U (m × k) with U (n × k): each shard sums over its own rows; plain sums add up, normalized results are
  /// averaged with each shard's share of the column's mass.
  void apply_columns(const PlanParams& p, std::span<const float> u, std::size_t k, bool normalized,
                     std::span<float> out) const {
    const std::size_t g = plan_.size();
    std::vector<std::vector<double>> shares;
    if (normalized) {
      std::vector<Backend*> backends;
      for (const auto& c : children_) backends.push_back(c.get());
      column_shares(p, backends, m_, shares, true);
      pushed_ = false;  // the children's g is the shift now; normalized results do not depend on it
    }
    const std::size_t width = std::clamp<std::size_t>(kCombineFloats / (g * m_), 1, k);
    std::vector<std::vector<float>> partial(g);
    std::vector<float> chunk;  // (n × width): U's columns of this pass, when k needs several passes
    for (std::size_t c0 = 0; c0 < k; c0 += width) {
      const std::size_t kc = std::min(width, k - c0);
      std::span<const float> uc = u;
      if (kc < k) {
        chunk.resize(n_ * kc);
        for (std::size_t i = 0; i < n_; ++i)
          std::copy_n(u.begin() + static_cast<std::ptrdiff_t>(i * k + c0), kc,
                      chunk.begin() + static_cast<std::ptrdiff_t>(i * kc));
        uc = chunk;
      }
      each_shard([&](std::size_t s) {
        partial[s].resize(m_ * kc);
        children_[s]->apply(p, Side::kTarget, rows_of(uc, s, kc), kc, normalized, partial[s]);
      });
      for (std::size_t j = 0; j < m_; ++j)
        for (std::size_t c = 0; c < kc; ++c) {
          double sum = 0;
          for (std::size_t s = 0; s < g; ++s) {
            // A shard without mass in column j has an undefined (0/0) normalized value: it takes no part.
            if (normalized && shares[s][j] == 0) continue;
            sum += (normalized ? shares[s][j] : 1.0) * partial[s][j * kc + c];
          }
          out[j * k + c0 + c] = static_cast<float>(sum);
        }
    }
  }

  /// Target-side queries are mapped through x, a and f, which the shards split: on each shard, a one-off problem
  /// (its rows of x) × (the queries, unit weights) gives the shard's normalized map, and the maps are averaged with
  /// each shard's share of the query's mass.
  void map_target_queries(const PlanParams& p, PointsView q, std::span<const float> v, std::size_t k,
                          std::span<float> out) const {
    const std::size_t g = plan_.size();
    const std::vector<float> ones(q.n, 1.0f);
    std::vector<std::unique_ptr<Backend>> pairs(g);
    std::vector<std::vector<float>> maps(g, std::vector<float>(q.n * k));
    each_shard([&](std::size_t s) {
      pairs[s] = make_child_(options_[s], ProblemData{x_rows(s), q, a_rows(s), ones});
      pairs[s]->set_potentials(rows_of(std::span<const float>(fbuf_), s, 1), std::vector<float>(q.n, 0.0f));
      pairs[s]->apply(p, Side::kTarget, rows_of(v, s, k), k, true, maps[s]);
    });
    std::vector<Backend*> backends;
    for (const auto& b : pairs) backends.push_back(b.get());
    std::vector<std::vector<double>> shares;
    column_shares(p, backends, q.n, shares, false);
    for (std::size_t j = 0; j < q.n; ++j)
      for (std::size_t c = 0; c < k; ++c) {
        double sum = 0;
        for (std::size_t s = 0; s < g; ++s)
          if (shares[s][j] > 0) sum += shares[s][j] * maps[s][j * k + c];
        out[j * k + c] = static_cast<float>(sum);
      }
  }

  BackendFactory make_child_;
  std::size_t n_, m_, d_;
  std::vector<float> x_;  // (n × d) the shards' rows, kept for one-off problems of target-side queries
  std::vector<float> a_;  // (n)
  std::vector<ShardRange> plan_;
  std::vector<BackendOptions> options_;
  std::vector<std::unique_ptr<Backend>> children_;
  bool parallel_ = false;
  // Potentials live here in fp64 (as the CPU backend keeps them); the children get fp32 copies when they changed.
  std::vector<double> f_, g_;
  mutable std::vector<float> fbuf_, gbuf_;
  mutable bool pushed_ = false;
};

}  // namespace

void add_screening(EngineStatistics& into, const EngineStatistics& more) {
  into.screened = into.screened || more.screened;
  const auto add = [](ScreenSiteStatistics& a, const ScreenSiteStatistics& b) {
    a.kept_tiles += b.kept_tiles;
    a.seen_tiles += b.seen_tiles;
    a.next_screened = a.next_screened || b.next_screened;
  };
  add(into.rows_lse, more.rows_lse);
  add(into.columns_lse, more.columns_lse);
  add(into.sums, more.sums);
  into.c_transform_rescored += more.c_transform_rescored;
  into.c_transform_rescanned += more.c_transform_rescanned;
}

std::unique_ptr<Backend> make_sharded_backend(const BackendOptions& options, const ProblemData& data,
                                              const BackendFactory& make_child) {
  if (options.ranks > 1)
    throw std::runtime_error("a multi-process run (ranks = " + std::to_string(options.ranks) +
                             ") needs CUDA shards combined with NCCL: build with CUDA and keep backend cuda, nccl on");
  return std::make_unique<ShardedBackend>(options, data, make_child);
}

}  // namespace flashot::detail
