// The point order of a Problem's backend: the one place that translates between the caller's order of the points and
// the locality order the backend may hold them in (docs/engine.md, "Point order").
#include "point_order.hpp"

#include <parallel/algorithm>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "multiscale_tree.hpp"
#include "validation.hpp"

namespace flashot::detail {

namespace {

/// out[order[p]·k + c] = in[p·k + c]: rows from the backend's order back into the caller's.
template <class T>
void scatter_rows(std::span<const T> in, std::size_t k, const std::vector<std::uint32_t>& order, std::span<T> out) {
  for (std::size_t p = 0; p < order.size(); ++p)
    std::copy_n(in.data() + p * k, k, out.data() + std::size_t{order[p]} * k);
}

/// The copies among one side's points: points with bit-identical coordinates form a group, listed in increasing
/// caller index (first[i] the group's lowest index, next[i] the next one or −1). Only the hard c-transform reads it,
/// to give an exact tie between copies to the lowest caller index, as the backends do in the caller's order. Empty
/// (any = false) when no point has a copy, the usual case.
struct Copies {
  std::vector<std::int64_t> first, next;
  bool any = false;
};

Copies find_copies(PointsView p) {
  const std::size_t n = p.n, d = p.d;
  const auto row = [&](std::size_t i) { return p.data.data() + i * d; };
  // Rows sorted by a hash of their bytes (then index); equal rows are then neighbours. Bytes, not values: copies are
  // bit-identical (−0 and +0 differ).
  std::vector<std::pair<std::uint64_t, std::uint32_t>> keys(n);
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over the row's 32-bit words, then a final mix
    for (std::size_t k = 0; k < d; ++k) {
      std::uint32_t word;
      std::memcpy(&word, row(i) + k, sizeof word);
      h = (h ^ word) * 0x100000001b3ULL;
    }
    h ^= h >> 31;
    keys[i] = {h, static_cast<std::uint32_t>(i)};
  }
  __gnu_parallel::sort(keys.begin(), keys.end());
  Copies c;
  // Equal hashes somewhere (copies, or a collision that the pass below tells apart): build the groups.
  for (std::size_t s = 0; s + 1 < n && !c.any; ++s) c.any = keys[s].first == keys[s + 1].first;
  if (!c.any) return c;
  c.first.assign(n, -1);
  c.next.assign(n, -1);
  for (std::size_t s = 0; s < n; ++s) {
    const std::uint32_t i = keys[s].second;
    if (c.first[i] >= 0) continue;
    // The rows of i's hash run that equal it (a hash collision between different rows stays apart), in index order.
    std::int64_t last = i;
    c.first[i] = i;
    for (std::size_t t = s + 1; t < n && keys[t].first == keys[s].first; ++t) {
      const std::uint32_t j = keys[t].second;
      if (c.first[j] >= 0 || std::memcmp(row(i), row(j), d * sizeof(float)) != 0) continue;
      c.first[j] = i;
      c.next[last] = j;
      last = j;
    }
  }
  return c;
}

/// A backend on points sorted into a locality order, seen in the caller's order: every per-point input is gathered
/// into the inner backend's order, every per-point output scattered back (and column indices mapped) into the
/// caller's. The inner backend's arithmetic is unchanged; only the order of its summations differs.
class OrderedBackend final : public Backend {
 public:
  OrderedBackend(std::unique_ptr<Backend> inner, std::vector<std::uint32_t> order_x,
                 std::vector<std::uint32_t> order_y, Copies copies_x, Copies copies_y)
      : inner_(std::move(inner)), order_x_(std::move(order_x)), order_y_(std::move(order_y)),
        copies_x_(std::move(copies_x)), copies_y_(std::move(copies_y)) {}

  std::string name() const override { return inner_->name(); }
  std::string device() const override { return inner_->device() + ", locality order"; }
  EngineStatistics statistics() const override { return inner_->statistics(); }

  void set_pattern(std::shared_ptr<const BlockPattern> pattern) override {
    // A pattern lists blocks of consecutive points in some order; a Problem's dense backend never takes one (the
    // multiscale solve and batches build their own backends).
    if (pattern)
      throw std::logic_error("a block pattern cannot be set on a backend in the locality order (the pattern's blocks "
                             "are runs of the caller's order)");
    inner_->set_pattern(nullptr);
  }

  void set_potentials(std::span<const float> f, std::span<const float> g) override {
    const std::vector<float> fs = permute_rows(f, 1, order_x_), gs = permute_rows(g, 1, order_y_);
    inner_->set_potentials(fs, gs);
  }
  void get_potentials(std::span<float> f, std::span<float> g) const override {
    std::vector<float> fs(f.size()), gs(g.size());
    inner_->get_potentials(fs, gs);
    scatter_rows<float>(fs, 1, order_x_, f);
    scatter_rows<float>(gs, 1, order_y_, g);
  }

  bool iterate(const IterationParams& p, int count) override { return inner_->iterate(p, count); }

  void softmin(const PlanParams& p, Side rows, std::span<float> out) const override {
    std::vector<float> sorted(out.size());
    inner_->softmin(p, rows, sorted);
    scatter_rows<float>(sorted, 1, order(rows), out);
  }

  void apply(const PlanParams& p, Side rows, std::span<const float> v, std::size_t k, bool normalized,
             std::span<float> out) const override {
    const std::vector<float> vs = permute_rows(v, k, order(other(rows)));
    std::vector<float> sorted(out.size());
    inner_->apply(p, rows, vs, k, normalized, sorted);
    scatter_rows<float>(sorted, k, order(rows), out);
  }

  void apply_queries(const PlanParams& p, Side from, PointsView q, std::span<const float> v, std::size_t k,
                     std::span<float> out) const override {
    // The queries belong to no side: only the value rows (the other side's points) are reordered.
    const std::vector<float> vs = permute_rows(v, k, order(other(from)));
    inner_->apply_queries(p, from, q, vs, k, out);
  }

  void top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns,
             std::span<float> values) const override {
    std::vector<std::int32_t> cs(columns.size());
    std::vector<float> vs(values.size());
    inner_->top_k(p, k, cs, vs);
    for (std::int32_t& c : cs)
      if (c >= 0) c = static_cast<std::int32_t>(order_y_[static_cast<std::size_t>(c)]);
    scatter_rows<std::int32_t>(cs, k, order_x_, columns);
    scatter_rows<float>(vs, k, order_x_, values);
  }

  void apply_bilinear(const PlanParams& p, Side rows, std::span<const float> u, std::span<const float> w,
                      std::size_t e, std::span<const float> v, std::size_t k, std::span<float> out) const override {
    const std::vector<std::uint32_t>& mine = order(rows);
    const std::vector<std::uint32_t>& theirs = order(other(rows));
    const std::vector<float> us = permute_rows(u, e, mine), ws = permute_rows(w, e, theirs),
                             vs = permute_rows(v, k, theirs);
    std::vector<float> sorted(out.size());
    inner_->apply_bilinear(p, rows, us, ws, e, vs, k, sorted);
    scatter_rows<float>(sorted, k, mine, out);
  }

  void c_transform(double cost_scale, Side rows, std::span<const float> h, std::span<double> values,
                   std::span<std::int32_t> index) const override {
    const std::vector<std::uint32_t>& mine = order(rows);
    const std::vector<std::uint32_t>& theirs = order(other(rows));
    const std::vector<float> hs = permute_rows(h, 1, theirs);
    std::vector<double> vs(values.size());
    std::vector<std::int32_t> is(index.size());
    inner_->c_transform(cost_scale, rows, hs, vs, is);
    // The backend's argmin is exact; among exact ties it is the lowest index in the backend's order. Copies of one
    // point with one potential tie exactly: the lowest caller index among them is the caller-order answer.
    const Copies& copies = other(rows) == Side::kSource ? copies_x_ : copies_y_;
    for (std::int32_t& j : is) {
      if (j < 0) continue;  // no column (not produced by the backends; kept as it is)
      std::int64_t c = theirs[static_cast<std::size_t>(j)];
      if (copies.any)
        for (std::int64_t t = copies.first[c]; t >= 0 && t < c; t = copies.next[t])
          if (h[t] == h[c]) {
            c = t;
            break;
          }
      j = static_cast<std::int32_t>(c);
    }
    scatter_rows<double>(vs, 1, mine, values);
    scatter_rows<std::int32_t>(is, 1, mine, index);
  }

  WeightedSums weighted_sums(Side side, std::size_t offset, std::span<const float> h, std::span<const float> hh,
                             double epsilon, double rho) const override {
    const std::vector<std::uint32_t>& mine = order(side);
    if (offset != 0 || h.size() != mine.size())
      throw std::logic_error("weighted_sums on a backend in the locality order takes a whole side (" +
                             std::to_string(mine.size()) + " points; got [" + std::to_string(offset) + ", " +
                             std::to_string(offset + h.size()) + "))");
    const std::vector<float> hs = permute_rows(h, 1, mine);
    const std::vector<float> hhs = hh.empty() ? std::vector<float>{} : permute_rows(hh, 1, mine);
    return inner_->weighted_sums(side, 0, hs, hhs, epsilon, rho);
  }

 private:
  static Side other(Side s) { return s == Side::kSource ? Side::kTarget : Side::kSource; }
  const std::vector<std::uint32_t>& order(Side s) const { return s == Side::kSource ? order_x_ : order_y_; }
  std::unique_ptr<Backend> inner_;
  std::vector<std::uint32_t> order_x_, order_y_;  // position p holds the caller's point order_[p]
  Copies copies_x_, copies_y_;
};

}  // namespace

bool uses_locality_order(const BackendOptions& options, std::size_t n, std::size_t m, std::size_t d,
                         bool device_input) {
  switch (options.point_order) {
    case PointOrder::kInput: return false;
    case PointOrder::kLocality: return !device_input;
    case PointOrder::kAuto: {
      if (device_input) return false;
      const bool cuda = options.backend == BackendKind::kCuda ||
                        (options.backend == BackendKind::kAuto && cuda_available());
      return cuda && d >= kPointOrderAutoMinD && static_cast<double>(n) * static_cast<double>(m) >= kPointOrderAutoPairs;
    }
  }
  return false;
}

double leaf_spread(PointsView p) {
  const std::size_t n = p.n, d = p.d;
  if (n == 0 || d == 0) return 0;
  const std::size_t stride = std::max<std::size_t>(1, n / kSpreadSample);
  std::vector<float> sample;
  for (std::size_t i = 0; i < n && sample.size() < kSpreadSample * d; i += stride)
    sample.insert(sample.end(), p.data.begin() + static_cast<std::ptrdiff_t>(i * d),
                  p.data.begin() + static_cast<std::ptrdiff_t>((i + 1) * d));
  const std::size_t s = sample.size() / d;
  const std::vector<std::uint32_t> order = cluster_order({sample, s, d}, kSpreadLeaf, kPointOrderSeed);
  // Σ‖x − mean‖² of a run of points, in fp64.
  const auto scatter = [&](std::size_t b, std::size_t e) {
    std::vector<double> mean(d, 0.0);
    for (std::size_t q = b; q < e; ++q)
      for (std::size_t k = 0; k < d; ++k) mean[k] += sample[std::size_t{order[q]} * d + k];
    for (double& v : mean) v /= static_cast<double>(e - b);
    double sum = 0;
    for (std::size_t q = b; q < e; ++q)
      for (std::size_t k = 0; k < d; ++k) {
        const double u = sample[std::size_t{order[q]} * d + k] - mean[k];
        sum += u * u;
      }
    return sum;
  };
  const double total = scatter(0, s);
  if (!(total > 0)) return 0;
  double within = 0;
  for (std::size_t b = 0; b < s; b += kSpreadLeaf) within += scatter(b, std::min(s, b + kSpreadLeaf));
  return within / total;
}

std::vector<std::uint32_t> locality_order(PointsView points) {
  return cluster_order(points, kPointOrderLeaf, kPointOrderSeed);
}

std::unique_ptr<Backend> make_problem_backend(const BackendOptions& options, const ProblemData& data) {
  validate_point_order(options.point_order, data.on_device());
  if (!uses_locality_order(options, data.x.n, data.y.n, data.x.d, data.on_device())) return make_backend(options, data);
  // auto: only clustered data (kPointOrderAutoSpread), where the sorted screen pays; elsewhere sorting cost time.
  if (options.point_order == PointOrder::kAuto &&
      !(leaf_spread(data.x) <= kPointOrderAutoSpread && leaf_spread(data.y) <= kPointOrderAutoSpread))
    return make_backend(options, data);
  std::vector<std::uint32_t> order_x = locality_order(data.x), order_y = locality_order(data.y);
  // The sorted copies live until the backend has taken its own.
  const std::vector<float> xs = permute_rows(data.x.data, data.x.d, order_x);
  const std::vector<float> ys = permute_rows(data.y.data, data.y.d, order_y);
  const std::vector<float> as = permute_rows(data.a, 1, order_x), bs = permute_rows(data.b, 1, order_y);
  const ProblemData sorted{{xs, data.x.n, data.x.d}, {ys, data.y.n, data.y.d}, as, bs};
  std::unique_ptr<Backend> inner = make_backend(options, sorted);
  return std::make_unique<OrderedBackend>(std::move(inner), std::move(order_x), std::move(order_y),
                                          find_copies(data.x), find_copies(data.y));
}

}  // namespace flashot::detail
