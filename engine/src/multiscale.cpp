// The multiscale block-sparse solver (docs/multiscale.md): a chain of levels (points, then centres of blocks,
// then centres of those blocks, ...), the ε schedule run coarse to fine, certified block lists on every level
// that has cluster trees, and a backend in the caller's order for the plan operations of a multiscale result.
#include "multiscale.hpp"
#include "relaxation.hpp"
#include "separable.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "validation.hpp"

namespace flashot::detail {

namespace {

/// A level with at most this many point pairs n·m runs dense and has no coarser level below it.
constexpr double kDensePairs = double{1 << 24};
/// A level hands the stages whose blur √(ε/s) exceeds this many times its mean leaf-block radius to the coarser
/// level: there the coarse problem resolves the plan as well as the points would, and the block lists would be
/// nearly dense (docs/multiscale.md, "Schedule").
constexpr double kSwitchRadii = 2.0;
/// Block lists are never longer than this: the derivation holds ≈ 11 bytes of host memory per kept pair at its peak
/// (docs/multiscale.md, "Lists at 10⁸"), so 4·10⁹ pairs are ≈ 44 GB. (BlockPattern's 32-bit offsets count ranges,
/// ≈ 0.16 per pair a side, and are checked there.) 10⁸ points at a 1 % blur keep ≈ 1–1.4·10⁹.
constexpr double kMaxListedPairs = 4.0e9;
/// An iteration on block lists whose potentials rose by more than this share of τ·ε in that one iteration (rows and
/// columns together) is checked: the lists certified for the elementwise maximum of its input and output are joined
/// to the current ones and, where that adds pairs, it is undone and run again (docs/multiscale.md, "Watched
/// iterations"). A row block that lost its pairs rises by more than τ·ε in one iteration (115 ε in the reproduction
/// of tests/engine/multiscale_test.cpp); the normal course of a solve rises by a few ε, and a start far from the
/// fixed point (10⁷ points on one H200) by 5 ε or more per iteration for many iterations, where redoing each one
/// cost more than it saved (a list derivation and an iteration, ≈ 2 s there).
constexpr double kRiseShare = 1.0;
/// Times one iteration is run again on wider lists before it is kept whatever it rose (the lists only grow, so a
/// redo is rarely needed twice; the checks stay certified either way).
constexpr int kMaxRedo = 3;

/// Permutations of more values than this run in parallel (MultiscaleLevel::to_input, from_input).
constexpr std::int64_t kParallelCopy = std::int64_t{1} << 18;

/// Bounds of the automatic truncation level (SolveOptions::multiscale_truncation = 0).
constexpr double kAutoTruncationMin = 10, kAutoTruncationMax = 20;

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<float> permuted(std::span<const float> v, const std::vector<std::uint32_t>& order) {
  std::vector<float> out(order.size());
  for (std::size_t p = 0; p < order.size(); ++p) out[p] = v[order[p]];
  return out;
}

}  // namespace

double multiscale_truncation(const SolveOptions& o) {
  if (o.multiscale_truncation > 0) return o.multiscale_truncation;
  if (!(o.tolerance > 0)) return kAutoTruncationMax;
  return std::clamp(std::log(1e3 / o.tolerance), kAutoTruncationMin, kAutoTruncationMax);
}

CarryReport carried_softmin(const BackendOptions& options, PointsView points, std::span<const float> weights,
                            const ClusterTree* points_tree, PointsView centres, std::span<const float> centre_weights,
                            const ClusterTree* centres_tree, std::span<const float> h, std::span<const float> guess,
                            double epsilon, double cost_scale, double truncation, double mass, double dense_fraction,
                            std::span<float> out) {
  const ProblemData data{points, centres, weights, centre_weights};
  std::unique_ptr<Backend> b = make_backend(options, data);
  const PlanParams p{epsilon, cost_scale};
  CarryReport report;
  if (points_tree && centres_tree && !guess.empty()) {
    PatternRequest q;
    q.epsilon = epsilon;
    q.cost_scale = cost_scale;
    q.truncation = truncation;
    q.mass = mass;
    const double all = static_cast<double>(points_tree->blocks) * static_cast<double>(centres_tree->blocks);
    q.max_pairs = static_cast<std::size_t>(std::min(kMaxListedPairs, dense_fraction * all));
    // First pass: lists for the estimate. Its result is an upper bound of the exact soft c-transform (the sum over
    // the listed terms is at most the full one), so the lists of the second pass, derived for that bound, leave
    // out only entries below the threshold for the exact one as well.
    PatternResult first = certified_pattern(*points_tree, *centres_tree, points.data, centres.data, guess, h, q);
    // Two passes over lists pay where each visits less than half of what one dense pass does.
    if (first.pattern && first.kept_fraction <= 0.5 * dense_fraction) {
      b->set_pattern(first.pattern);
      b->set_potentials(guess, h);  // the rows' own values only steer the shift of the sums (no update)
      std::vector<float> upper(points.n);
      b->softmin(p, Side::kSource, upper);
      bool finite = true;
      for (float v : upper) finite = finite && std::isfinite(v);
      if (finite) {
        PatternResult second = certified_pattern(*points_tree, *centres_tree, points.data, centres.data, upper, h, q);
        if (second.pattern) {
          b->set_pattern(second.pattern);
          b->set_potentials(upper, h);
          b->softmin(p, Side::kSource, out);
          report.sparse = true;
          report.pairs = second.kept_pairs;
          report.kept_fraction = second.kept_fraction;
          return report;
        }
      }
      b->set_pattern(nullptr);
    }
  }
  const std::vector<float> zero(points.n, 0.0f);
  b->set_potentials(zero, h);
  b->softmin(p, Side::kSource, out);
  return report;
}

struct MultiscaleLevel {
  std::size_t n = 0, m = 0, d = 0;
  double mass_a = 0, mass_b = 0;
  std::vector<float> x, y, a, b;               // in this level's order (the trees' order where there are trees)
  std::unique_ptr<ClusterTree> tx, ty;          // null on a dense level
  std::unique_ptr<Backend> backend;
  BackendOptions options;                       // what `backend` was made with (Run::carry makes more alike)
  std::unique_ptr<MultiscaleLevel> coarse;      // the centres of the parts of this level's leaf blocks
  double leaf_radius = 0;                       // mass-weighted mean radius of the leaf blocks' parts, the larger side
  std::shared_ptr<const BlockPattern> pattern;  // what the backend holds now (null: dense)
  // Host copies for the watched iterations (Run::watched_step): the current potentials (valid while `known`), an
  // iteration's output, and the elementwise maximum of the two.
  std::vector<float> now_f, now_g, next_f, next_g, high_f, high_g;
  bool known = false;
  // The last solve's final lists when they were certified for its final potentials (f, g in this level's order) at
  // (ε, s, τ, dense fraction): the plan operations on that result use them instead of deriving them again (one
  // derivation, ≈ 5–10 s at 10⁸ points, estimated). Null: none.
  struct Certified {
    std::shared_ptr<const BlockPattern> pattern;
    std::vector<float> f, g;
    double epsilon = 0, cost_scale = 0, truncation = 0, dense_fraction = 0;
  } certified;

  std::size_t count(Side side) const { return side == Side::kSource ? n : m; }
  /// Values of this level's order back to its input order (the coarser level's blocks, or the caller's points).
  void to_input(std::span<const float> in, std::size_t k, Side side, std::span<float> out) const {
    const ClusterTree* t = side == Side::kSource ? tx.get() : ty.get();
    if (!t) {
      std::copy(in.begin(), in.end(), out.begin());
      return;
    }
    // In parallel (copies: the same values whatever the threads): the row pass after a 10⁶-point d = 50 solve moves
    // 10⁶ × 52 floats each way, ≈ 0.1 s on one thread.
    const auto count = static_cast<std::int64_t>(t->order.size());
#pragma omp parallel for schedule(static) if (count * static_cast<std::int64_t>(k) > kParallelCopy)
    for (std::int64_t p = 0; p < count; ++p)
      std::copy_n(in.data() + static_cast<std::size_t>(p) * k, k,
                  out.data() + std::size_t{t->order[static_cast<std::size_t>(p)]} * k);
  }
  void from_input(std::span<const float> in, std::size_t k, Side side, std::span<float> out) const {
    const ClusterTree* t = side == Side::kSource ? tx.get() : ty.get();
    if (!t) {
      std::copy(in.begin(), in.end(), out.begin());
      return;
    }
    const auto count = static_cast<std::int64_t>(t->order.size());
#pragma omp parallel for schedule(static) if (count * static_cast<std::int64_t>(k) > kParallelCopy)
    for (std::int64_t p = 0; p < count; ++p)
      std::copy_n(in.data() + std::size_t{t->order[static_cast<std::size_t>(p)]} * k, k,
                  out.data() + static_cast<std::size_t>(p) * k);
  }
};

namespace {

std::unique_ptr<MultiscaleLevel> build_level(const BackendOptions& options, PointsView x, PointsView y,
                                             std::span<const float> a, std::span<const float> b, std::uint64_t seed,
                                             bool top) {
  auto L = std::make_unique<MultiscaleLevel>();
  L->n = x.n;
  L->m = y.n;
  L->d = x.d;
  for (float w : a) L->mass_a += w;
  for (float w : b) L->mass_b += w;
  const double pairs = static_cast<double>(x.n) * static_cast<double>(y.n);
  const bool prune = x.n >= 2 * kBlockSize && y.n >= 2 * kBlockSize && (top || pairs > kDensePairs);
  if (prune) {
    // Both trees at once: the threads the top splits of one leave idle work on the other's.
    const TreeInput clouds[2] = {{x, a, seed}, {y, b, seed ^ 0x5bd1e995u}};
    std::vector<ClusterTree> trees = build_cluster_trees(clouds, kBlockSize);
    L->tx = std::make_unique<ClusterTree>(std::move(trees[0]));
    L->ty = std::make_unique<ClusterTree>(std::move(trees[1]));
    L->x = permute_rows(x.data, x.d, L->tx->order);
    L->y = permute_rows(y.data, y.d, L->ty->order);
    L->a = permuted(a, L->tx->order);
    L->b = permuted(b, L->ty->order);
    // The coarser level holds one point per part of a leaf block (ClusterTree::part_offset): a compact block is one
    // point at its centre; a block across clusters one point in each, so the coarse problem moves no mass between
    // clusters that the points do not (docs/multiscale.md, "Blocks across clusters").
    double radius = 0;
    std::vector<float> cx, cy, mx, my;
    for (const ClusterTree* t : {L->tx.get(), L->ty.get()}) {
      double mass = 0, sum = 0;
      for (std::size_t k = 0; k < t->parts(); ++k) {
        mass += t->part_mass[k];
        sum += t->part_mass[k] * t->part_radius[k];
      }
      radius = std::max(radius, mass > 0 ? sum / mass : 0.0);
      std::vector<float>& c = t == L->tx.get() ? cx : cy;
      std::vector<float>& w = t == L->tx.get() ? mx : my;
      c.assign(t->part_centre.begin(), t->part_centre.end());
      w.assign(t->part_mass.begin(), t->part_mass.end());
    }
    L->leaf_radius = radius;
    L->coarse = build_level(options, {cx, L->tx->parts(), x.d}, {cy, L->ty->parts(), x.d}, mx, my,
                            seed * 0x9e3779b97f4a7c15ULL + 1, false);
  } else {
    L->x.assign(x.data.begin(), x.data.end());
    L->y.assign(y.data.begin(), y.data.end());
    L->a.assign(a.begin(), a.end());
    L->b.assign(b.begin(), b.end());
  }
  const ProblemData data{{L->x, L->n, L->d}, {L->y, L->m, L->d}, L->a, L->b};
  L->backend = make_backend(options, data);
  L->options = options;
  return L;
}

/// One solve across the levels.
struct Run {
  const SolveOptions& o;
  std::vector<double> eps;
  double s = 1, rho_x = 0, rho_y = 0, diameter = 0;
  double truncation = 20, dense_fraction = 0.5;
  MultiscaleLevel* top = nullptr;
  SolveResult& r;
  bool stopped = false;
  bool error_current = false;
  int reached = 0;
  int total_budget = 0;
  bool left_dense = false;  // the current stage began dense and switched to lists (once per stage)
  int settled_stage = -1, settled_iterations = 0;  // the stage a coarser level settled at, and its iterations there
  CarryReport carry_report[2]{};  // the last carry's rows and columns
  bool early_checks = false;    // the next stage starts right after a carry (a final one checks early)

  int stage_count() const { return static_cast<int>(eps.size()); }
  std::string stage_text(int k) const {
    return "ε stage " + std::to_string(k + 1) + " of " + std::to_string(stage_count()) + " (ε = " + show(eps[k]) + ")";
  }
  void non_finite(int k) {
    r.reason = StopReason::kNonFinite;
    r.message = "a potential or marginal became non-finite at " + stage_text(k) + " after " +
                std::to_string(r.iterations) + " iterations";
    stopped = true;
  }

  /// Block lists of the level's current potentials at ε. Returns null for dense.
  PatternResult lists(MultiscaleLevel& L, double epsilon) {
    L.now_f.resize(L.n);
    L.now_g.resize(L.m);
    L.backend->get_potentials(L.now_f, L.now_g);
    L.known = true;
    return lists_for(L, epsilon, L.now_f, L.now_g);
  }

  /// Block lists certified for potentials f, g (the level's order) at ε. Returns null for dense.
  PatternResult lists_for(MultiscaleLevel& L, double epsilon, const std::vector<float>& f,
                          const std::vector<float>& g) {
    const auto t0 = Clock::now();
    PatternRequest q;
    q.epsilon = epsilon;
    q.cost_scale = s;
    q.truncation = truncation;
    q.mass = std::max({1.0, L.mass_a, L.mass_b});
    const double all = static_cast<double>(L.tx->blocks) * static_cast<double>(L.ty->blocks);
    q.max_pairs = static_cast<std::size_t>(std::min(kMaxListedPairs, dense_fraction * all));
    PatternResult p = certified_pattern(*L.tx, *L.ty, L.x, L.y, f, g, q);
    r.multiscale.pattern_seconds += seconds_since(t0);
    return p;
  }

  void install(MultiscaleLevel& L, std::shared_ptr<const BlockPattern> pattern, MultiscaleStage& st, double fraction) {
    L.pattern = std::move(pattern);
    L.backend->set_pattern(L.pattern);
    st.dense = !L.pattern;
    st.kept_pairs = L.pattern ? L.pattern->pairs() : st.total_pairs;
    st.kept_fraction = L.pattern ? fraction : 1.0;
  }

  /// Re-derives the lists from moved potentials (final stage): pairs are only ever added, so the loop ends.
  /// Returns true when a pair had to be added (the fixed point may move).
  bool recheck(MultiscaleLevel& L, double epsilon, MultiscaleStage& st) {
    if (!L.tx) return false;  // no trees: nothing is ever dropped
    if (!L.pattern) {
      // Dense: nothing dropped, nothing to certify. The stage began from the previous ε's potentials, whose lists
      // can be much wider than the converged ones: once (per stage) the current potentials' lists pay, the stage
      // goes on with them, derived afresh and certified like a stage's first lists.
      if (left_dense) return false;
      ++st.rechecks;
      PatternResult p = lists(L, epsilon);
      if (!p.pattern) return false;
      left_dense = true;
      install(L, p.pattern, st, p.kept_fraction);
      return true;
    }
    ++st.rechecks;
    return widen(L, lists(L, epsilon), st);
  }

  /// Installs the union of L's lists and p's (dense when p is). Returns true when a pair was added.
  bool widen(MultiscaleLevel& L, const PatternResult& p, MultiscaleStage& st) {
    if (!p.pattern) {
      install(L, nullptr, st, 1.0);
      return true;
    }
    if (pattern_contains(*L.pattern, *p.pattern)) return false;
    auto merged = pattern_union(*L.pattern, *p.pattern);
    double points = 0;
    for (std::size_t rb = 0; rb < merged->row_blocks(); ++rb) {
      const auto [b0, b1] = BlockPattern::block_points(rb, L.n);
      for (const BlockRange& range : merged->row_list(rb)) {
        const std::size_t c0 = static_cast<std::size_t>(range.begin) * kBlockSize;
        const std::size_t c1 = std::min(L.m, static_cast<std::size_t>(range.end) * kBlockSize);
        points += static_cast<double>(b1 - b0) * static_cast<double>(c1 - c0);
      }
    }
    install(L, merged, st, points / (static_cast<double>(L.n) * static_cast<double>(L.m)));
    return true;
  }

  /// Iterations on L's lists, each one watched (docs/multiscale.md, "Watched iterations"). Lists derived from
  /// potentials (f⁰, g⁰) leave out only pairs with f⁰_i + g⁰_j − C_ij ≤ −ε(τ + log M); for potentials at most ρ_f
  /// above f⁰ on every row and ρ_g above g⁰ on every column they are certified at τ − (ρ_f + ρ_g)/ε. A row whose
  /// lists lack the pairs its update needs rises further than the exact update would (a truncated sum is never
  /// above the full one), and iterating on such lists drifts without bound (the pairs they keep cannot carry the
  /// rows' mass). So after each iteration its rise over its input is measured; above kRiseShare·τ·ε the lists
  /// certified for the elementwise maximum of its input and output are joined to the current ones, and unless
  /// that adds nothing (then they were certified at τ for both) the iteration is undone and runs again, its
  /// truncated sums only larger and its rows' result only lower. Dense (no lists): plain iterations.
  bool advance(MultiscaleLevel& L, const IterationParams& ip, int count, int k, MultiscaleStage& st) {
    for (int t = 0; t < count; ++t) {
      if (!L.pattern) {
        L.known = false;
        return L.backend->iterate(ip, count - t);
      }
      if (!watched_step(L, ip, k, st)) return false;
    }
    return true;
  }

  bool watched_step(MultiscaleLevel& L, const IterationParams& ip, int k, MultiscaleStage& st) {
    if (!L.known) {
      L.now_f.resize(L.n);
      L.now_g.resize(L.m);
      L.backend->get_potentials(L.now_f, L.now_g);
      L.known = true;
    }
    L.next_f.resize(L.n);
    L.next_g.resize(L.m);
    const double allowed = kRiseShare * truncation * eps[k];
    for (int attempt = 0;; ++attempt) {
      if (!L.backend->iterate(ip, 1)) {
        L.known = false;
        return false;
      }
      L.backend->get_potentials(L.next_f, L.next_g);
      const double rise = largest_rise(L.next_f, L.now_f) + largest_rise(L.next_g, L.now_g);
      st.largest_rise = std::max(st.largest_rise, rise / eps[k]);
      if (rise <= allowed || attempt == kMaxRedo || !L.pattern) {
        std::swap(L.now_f, L.next_f);
        std::swap(L.now_g, L.next_g);
        return true;
      }
      ++st.rechecks;
      elementwise_max(L.high_f, L.now_f, L.next_f);
      elementwise_max(L.high_g, L.now_g, L.next_g);
      if (!widen(L, lists_for(L, eps[k], L.high_f, L.high_g), st)) {
        std::swap(L.now_f, L.next_f);
        std::swap(L.now_g, L.next_g);
        return true;
      }
      ++st.redone;
      L.backend->set_potentials(L.now_f, L.now_g);
    }
  }

  /// max(0, max_i out_i − in_i): how far one iteration raised a side's potentials.
  static double largest_rise(const std::vector<float>& out, const std::vector<float>& in) {
    double rise = 0;
    const std::size_t count = out.size();
#pragma omp parallel for reduction(max : rise) schedule(static)
    for (std::size_t i = 0; i < count; ++i)
      rise = std::max(rise, static_cast<double>(out[i]) - static_cast<double>(in[i]));
    return rise;
  }

  static void elementwise_max(std::vector<float>& into, const std::vector<float>& a, const std::vector<float>& b) {
    const std::size_t count = a.size();
    into.resize(count);
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < count; ++i) into[i] = std::max(a[i], b[i]);
  }

  /// The points' first potentials from coarse level C's (docs/multiscale.md, "Carrying the potentials down"): each
  /// point's potential is the soft c-transform at ε of the coarse solution's other side at that point,
  ///   f_i = λ_x·softmin_J(b_J, g_J, s‖x_i − c_J‖²),   g_j = λ_y·softmin_I(a_I, f_I, s‖c_I − y_j‖²),
  /// what the coarse problem's own update gives at its centres, evaluated at the points themselves. A first-order
  /// extrapolation across the block from its centre (f_I + s(‖x_i − T_I‖² − ‖c_I − T_I‖²), used until 2026-12-01) is
  /// the tangent of this concave-plus-quadratic function at the centre: it is never below it, and above it by the
  /// curvature, which the spread of the coarse plan of the block sets; at 10⁷ points a few column blocks came down
  /// hundreds of ε too high. Per side, carried_softmin on a temporary backend of the level's kind: over certified
  /// block lists between the points' blocks and the coarser level's blocks where the coarser level has trees (two
  /// list derivations and two sparse passes), else one dense pass of n·m_c entries (≈ 3.9·10¹³ per side at 10⁸
  /// points, 390 625 centres); O(n + n_c) memory besides the lists.
  void carry(MultiscaleLevel& L, MultiscaleLevel& C, double carry_eps, std::vector<float>& f,
             std::vector<float>& g) {
    std::vector<float> fc(C.n), gc(C.m);
    C.backend->get_potentials(fc, gc);
    const double mass = std::max({1.0, L.mass_a, L.mass_b});
    // The estimates of the first lists: each point gets the coarse potential of its own part's centre (level L's
    // part k is the coarser level's point k, at position inverse(order)[k] there).
    const auto estimate = [](const ClusterTree* own, const ClusterTree* coarse, const std::vector<float>& hc) {
      std::vector<float> e;
      if (!own || !coarse) return e;
      std::vector<std::uint32_t> where(coarse->order.size());
      for (std::size_t p = 0; p < where.size(); ++p) where[coarse->order[p]] = static_cast<std::uint32_t>(p);
      e.resize(own->n);
#pragma omp parallel for schedule(static)
      for (std::size_t k = 0; k < own->parts(); ++k) {
        const float v = hc[where[k]];
        for (std::size_t p = own->part_begin[k]; p < own->part_end[k]; ++p) e[p] = v;
      }
      return e;
    };
    const std::vector<float> guess_f = estimate(L.tx.get(), C.tx.get(), fc);
    const CarryReport rf = carried_softmin(L.options, {L.x, L.n, L.d}, L.a, L.tx.get(), {C.y, C.m, C.d}, C.b,
                                           C.ty.get(), gc, guess_f, carry_eps, s, truncation, mass, dense_fraction, f);
    const std::vector<float> guess_g = estimate(L.ty.get(), C.ty.get(), gc);
    const CarryReport rg = carried_softmin(L.options, {L.y, L.m, L.d}, L.b, L.ty.get(), {C.x, C.n, C.d}, C.a,
                                           C.tx.get(), fc, guess_g, carry_eps, s, truncation, mass, dense_fraction, g);
    carry_report[0] = rf;
    carry_report[1] = rg;
    const double lx = solve_damping(carry_eps, rho_x), ly = solve_damping(carry_eps, rho_y);
    if (lx != 1)
      for (float& v : f) v = static_cast<float>(lx * v);
    if (ly != 1)
      for (float& v : g) v = static_cast<float>(ly * v);
  }

  /// Runs stages [kb, ke) on level L from `f`, `g` (the level's order; empty: zero, or the coarser level's
  /// extrapolated potentials). Leaves the potentials on L's backend.
  void run_level(MultiscaleLevel& L, int kb, int ke, std::vector<float> f, std::vector<float> g) {
    const bool is_top = &L == top;
    int split = kb;
    if (L.coarse && f.empty()) {
      const double switch_eps = s * (kSwitchRadii * L.leaf_radius) * (kSwitchRadii * L.leaf_radius);
      while (split < ke - 1 && eps[split] > switch_eps) ++split;
    }
    if (f.empty()) f.assign(L.n, 0.0f);
    if (g.empty()) g.assign(L.m, 0.0f);
    if (split > kb) {
      MultiscaleLevel& C = *L.coarse;
      run_level(C, kb, split, {}, {});
      // The coarser level settles at this level's first ε before its potentials come down (docs/multiscale.md,
      // "Schedule"): its slow, global modes cost n·m/(n_c·m_c) times less to relax there than here.
      const bool settled = !stopped && o.tolerance > 0 && settle(C, split);
      const double carry_eps = settled ? eps[split] : eps[split - 1];  // the ε of C's current potentials
      // Carried down even after a cancel, so that the result's potentials belong to the points at eps[reached].
      carry(L, C, carry_eps, f, g);
      early_checks = true;
    }
    L.backend->set_potentials(f, g);
    L.known = false;
    for (int k = split; k < ke && !stopped; ++k) run_stage(L, k, is_top && k == stage_count() - 1);
  }

  /// A stage's report at eps[k] on level L, with L's lists for eps[k] derived and installed (a level with trees).
  MultiscaleStage begin_stage(MultiscaleLevel& L, int k) {
    MultiscaleStage st;
    st.epsilon = eps[k];
    st.coarse = &L != top;
    if (L.tx) {
      st.total_pairs = static_cast<unsigned long long>(L.tx->blocks) * L.ty->blocks;
      PatternResult p = lists(L, eps[k]);
      install(L, p.pattern, st, p.kept_fraction);
    } else {
      st.total_pairs = static_cast<unsigned long long>(L.n) * L.m;
      st.kept_pairs = st.total_pairs;
      st.dense = true;
    }
    return st;
  }

  void run_stage(MultiscaleLevel& L, int k, bool final_stage) {
    reached = k;
    left_dense = false;
    IterationParams ip{eps[k], s, o.scheme, solve_damping(eps[k], rho_x), solve_damping(eps[k], rho_y)};
    MultiscaleStage st = begin_stage(L, k);
    const bool after_carry = early_checks;
    early_checks = false;
    const int carried = k == settled_stage ? settled_iterations : 0;
    StageReport stage{eps[k], 0};
    if (!final_stage) {
      const bool ok = advance(L, ip, o.stage_iterations, k, st);
      st.iterations = o.stage_iterations;
      stage.iterations = carried + o.stage_iterations;
      r.iterations += o.stage_iterations;
      r.stages.push_back(stage);
      r.multiscale.stages.push_back(st);
      if (!ok) {
        non_finite(k);
        return;
      }
      if (o.progress && !o.progress(Progress{k, stage_count(), eps[k], r.iterations, total_budget,
                                             std::numeric_limits<double>::quiet_NaN()})) {
        r.reason = StopReason::kCancelled;
        r.message = "cancelled by the progress callback after " + stage_text(k);
        stopped = true;
      }
      return;
    }
    const int done = converge(L, k, st, true, after_carry);
    st.iterations = done;
    stage.iterations = carried + done;
    r.stages.push_back(stage);
    r.multiscale.stages.push_back(st);
    stopped = true;
  }

  /// Runs coarse level C at eps[k] (the finer level's first ε) to the tolerance, as a stage of its own (coarse, in
  /// the reports). Returns false when C's potentials became non-finite (then they belong to no ε).
  bool settle(MultiscaleLevel& C, int k) {
    left_dense = false;
    MultiscaleStage st = begin_stage(C, k);
    reached = k;  // what C holds now, and so what comes down, belongs to eps[k] (also after a cancel)
    const int done = converge(C, k, st, false);
    st.iterations = done;
    r.multiscale.stages.push_back(st);
    // One StageReport per ε of the schedule: stage k's counts its iterations on both levels (here alone when the
    // solve stops during the settling: a cancel or a non-finite value).
    if (stopped) {
      r.stages.push_back(StageReport{eps[k], done});
    } else {
      settled_stage = k;
      settled_iterations = done;
    }
    return r.reason != StopReason::kNonFinite;
  }

  /// A stage run to the tolerance on level L at eps[k] (its lists installed): check_every iterations at a time (the
  /// one before a check plain, as in run_sinkhorn), the lists re-derived from the moved potentials (they only grow,
  /// so the lists the check runs on are certified for the checked potentials), then the marginal error. final: the
  /// result's last stage (its checks, stop reason, ω and the progress callback, which may cancel); else the coarser
  /// level settling at the fine level's first ε before its potentials are carried down (settle). Returns the
  /// iterations done.
  int converge(MultiscaleLevel& L, int k, MultiscaleStage& st, bool final, bool after_carry = false) {
    IterationParams ip{eps[k], s, o.scheme, solve_damping(eps[k], rho_x), solve_damping(eps[k], rho_y)};
    const bool checking = o.tolerance > 0 || (final && static_cast<bool>(o.progress));
    const SolveInputs in{L.a, L.b, diameter};
    std::vector<float> f(L.n), g(L.m);
    int done = 0;
    bool clean = false;  // no iteration since the lists were last re-derived from the potentials
    double best = std::numeric_limits<double>::infinity();
    int stalled = 0;     // checks since the error last fell below 0.9 × its best (settling only)
    Relaxation relax(o.overrelaxation, o.scheme, o.overrelaxation_start);  // the stage's ω, as run_sinkhorn's (relaxation.hpp)
    // Right after a carry the points may be within the tolerance after an iteration or two (the coarser level
    // settled the global part of the error): the first checks come after 1, 2, 4, … iterations, until the next
    // multiple of check_every, which is checked as before (docs/multiscale.md, "Early checks"). Only the checks on
    // that grid reach the over-relaxation's rate estimate, so ω follows the same course as without them.
    int early = final && after_carry && checking ? 1 : 0;  // no checks: no early windows (each re-derives lists)
    int observed = 0;  // iterations since the last check that reached relax
    while (done < o.max_iterations) {
      int window = o.check_every - done % o.check_every;
      bool on_grid = true;
      if (early > 0 && early < window) {
        window = early;
        early *= 2;
        on_grid = false;
      } else {
        early = 0;
      }
      const int step = std::min(window, o.max_iterations - done);
      ip.relaxation = relax.omega();
      if (final) r.overrelaxation = ip.relaxation;
      // The iteration before a check runs plain, as in run_sinkhorn (sinkhorn.cpp).
      IterationParams plain = ip;
      plain.relaxation = 1;
      const bool split = checking && ip.relaxation != 1;
      const bool ok = split ? advance(L, ip, step - 1, k, st) && advance(L, plain, 1, k, st)
                            : advance(L, ip, step, k, st);
      done += step;
      r.iterations += step;
      if (final) error_current = false;
      clean = false;
      if (!ok) {
        non_finite(k);
        break;
      }
      recheck(L, eps[k], st);
      clean = true;
      if (!checking) continue;
      L.backend->get_potentials(f, g);
      const double error = solve_marginal_error(*L.backend, in, f, g, eps[k], s, rho_x, rho_y, L.mass_a);
      if (!std::isfinite(error)) {
        non_finite(k);
        break;
      }
      observed += step;
      if (on_grid) {
        relax.observe(observed, error);
        observed = 0;
      }
      if (!final) {
        // Settling: the fine level's iterations cost (n·m)/(n_c·m_c) times these, so the coarse level runs to the
        // tolerance, or until its error stops falling (a tenth less within five checks).
        if (o.progress) {
          Progress pr{k, stage_count(), eps[k], r.iterations, total_budget, error};
          pr.coarse = true;
          if (!o.progress(pr)) {
            r.reason = StopReason::kCancelled;
            r.message = "cancelled by the progress callback while the coarser level settled at " + stage_text(k) +
                        " after " + std::to_string(r.iterations) + " iterations";
            stopped = true;
            break;
          }
        }
        if (error <= o.tolerance) break;
        if (error < 0.9 * best) best = error, stalled = 0;
        else if (++stalled >= 5) break;
        continue;
      }
      r.marginal_error = error;
      error_current = true;
      r.checks.push_back(MarginalCheck{r.iterations, eps[k], r.marginal_error, ip.relaxation});
      // The check ran on lists re-derived from these potentials: no pair outside them reaches the threshold, so the
      // error is that of the certified truncation whether or not the re-check had to add pairs.
      const bool converged = o.tolerance > 0 && r.marginal_error <= o.tolerance;
      const bool go_on =
          !o.progress || o.progress(Progress{k, stage_count(), eps[k], r.iterations, total_budget, r.marginal_error});
      if (converged) {
        r.converged = true;
        r.reason = StopReason::kTolerance;
        r.message = "converged: marginal error " + show(r.marginal_error) + " ≤ tolerance " + show(o.tolerance) +
                    " after " + std::to_string(r.iterations) + " iterations";
        break;
      }
      if (!go_on) {
        r.reason = StopReason::kCancelled;
        r.message = "cancelled by the progress callback at " + stage_text(k) + " after " +
                    std::to_string(r.iterations) + " iterations";
        break;
      }
    }
    if (final) {
      if (!clean && r.reason != StopReason::kNonFinite) clean = !recheck(L, eps[k], st);
      r.multiscale.certified = clean || !L.pattern;
    }
    return done;
  }
};

/// The caller's order over level 0, with certified lists for whatever potentials are loaded.
class PlanBackend final : public Backend {
 public:
  explicit PlanBackend(MultiscaleLevel& level) : L_(level) {}

  void configure(double truncation, double dense_fraction) {
    if (truncation != truncation_ || dense_fraction != dense_fraction_) version_++;
    truncation_ = truncation;
    dense_fraction_ = dense_fraction;
  }

  std::string name() const override { return L_.backend->name(); }
  std::string device() const override { return L_.backend->device(); }
  void set_potentials(std::span<const float> f, std::span<const float> g) override {
    std::vector<float> fp(L_.n), gp(L_.m);
    L_.from_input(f, 1, Side::kSource, fp);
    L_.from_input(g, 1, Side::kTarget, gp);
    L_.backend->set_potentials(fp, gp);
    L_.known = false;
    ++version_;
  }
  void get_potentials(std::span<float> f, std::span<float> g) const override {
    std::vector<float> fp(L_.n), gp(L_.m);
    L_.backend->get_potentials(fp, gp);
    L_.to_input(fp, 1, Side::kSource, f);
    L_.to_input(gp, 1, Side::kTarget, g);
  }
  bool iterate(const IterationParams& p, int count) override {
    prepare(p.epsilon, p.cost_scale);
    const bool ok = L_.backend->iterate(p, count);
    L_.known = false;
    ++version_;
    return ok;
  }
  void softmin(const PlanParams& p, Side rows, std::span<float> out) const override {
    prepare(p.epsilon, p.cost_scale);
    std::vector<float> tmp(L_.count(rows));
    L_.backend->softmin(p, rows, tmp);
    L_.to_input(tmp, 1, rows, out);
  }
  void apply(const PlanParams& p, Side rows, std::span<const float> v, std::size_t k, bool normalized,
             std::span<float> out) const override {
    prepare(p.epsilon, p.cost_scale);
    const Side cols = rows == Side::kSource ? Side::kTarget : Side::kSource;
    std::vector<float> vp(v.size()), tmp(out.size());
    L_.from_input(v, k, cols, vp);
    L_.backend->apply(p, rows, vp, k, normalized, tmp);
    L_.to_input(tmp, k, rows, out);
  }
  void apply_queries(const PlanParams& p, Side from, PointsView q, std::span<const float> v, std::size_t k,
                     std::span<float> out) const override {
    const Side other = from == Side::kSource ? Side::kTarget : Side::kSource;
    std::vector<float> vp(v.size());
    L_.from_input(v, k, other, vp);
    L_.backend->apply_queries(p, from, q, vp, k, out);  // dense: queries belong to no block
  }
  void top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns,
             std::span<float> values) const override {
    prepare(p.epsilon, p.cost_scale);
    std::vector<std::int32_t> cp(columns.size());
    std::vector<float> vp(values.size());
    L_.backend->top_k(p, k, cp, vp);
    for (std::int32_t& c : cp)
      if (c >= 0 && L_.ty) c = static_cast<std::int32_t>(L_.ty->order[static_cast<std::size_t>(c)]);
    std::vector<float> cf(cp.size());
    // Rows back to the caller's order (the columns were mapped above).
    for (std::size_t i = 0; i < L_.n; ++i) {
      const std::size_t dst = L_.tx ? L_.tx->order[i] : i;
      std::copy_n(cp.data() + i * k, k, columns.data() + dst * k);
      std::copy_n(vp.data() + i * k, k, values.data() + dst * k);
    }
  }
  void c_transform(double cost_scale, Side rows, std::span<const float> h, std::span<double> values,
                   std::span<std::int32_t> index) const override {
    // Over every pair (no pattern plays a part): h to the level's order, values and argmins back to the caller's.
    const bool source = rows == Side::kSource;
    const Side other = source ? Side::kTarget : Side::kSource;
    const ClusterTree* own = source ? L_.tx.get() : L_.ty.get();
    const ClusterTree* far = source ? L_.ty.get() : L_.tx.get();
    std::vector<float> hp(h.size());
    L_.from_input(h, 1, other, hp);
    std::vector<double> vp(values.size());
    std::vector<std::int32_t> ip(index.size());
    L_.backend->c_transform(cost_scale, rows, hp, vp, ip);
    for (std::size_t i = 0; i < vp.size(); ++i) {
      const std::size_t dst = own ? own->order[i] : i;
      values[dst] = vp[i];
      index[dst] = far ? static_cast<std::int32_t>(far->order[static_cast<std::size_t>(ip[i])]) : ip[i];
    }
  }
  EngineStatistics statistics() const override { return L_.backend->statistics(); }

 private:
  void prepare(double epsilon, double s) const {
    if (!L_.tx || (version_ == pattern_version_ && epsilon == epsilon_ && s == scale_)) return;
    std::vector<float> f(L_.n), g(L_.m);
    L_.backend->get_potentials(f, g);
    const MultiscaleLevel::Certified& c = L_.certified;
    if (c.pattern && c.epsilon == epsilon && c.cost_scale == s && c.truncation == truncation_ &&
        c.dense_fraction == dense_fraction_ && c.f == f && c.g == g) {
      // The solve's own final lists, certified for exactly these potentials. Right after the solve the backend
      // still holds them: installing them again would copy every range anew (on a GPU an upload of the lists,
      // ≈ 0.2·10⁹ ranges a side at 10⁸ points, estimated) for every plan operation.
      if (L_.pattern != c.pattern) {
        L_.pattern = c.pattern;
        L_.backend->set_pattern(L_.pattern);
      }
      pattern_version_ = version_;
      epsilon_ = epsilon;
      scale_ = s;
      return;
    }
    PatternRequest q;
    q.epsilon = epsilon;
    q.cost_scale = s;
    q.truncation = truncation_;
    q.mass = std::max({1.0, L_.mass_a, L_.mass_b});
    const double all = static_cast<double>(L_.tx->blocks) * static_cast<double>(L_.ty->blocks);
    q.max_pairs = static_cast<std::size_t>(std::min(kMaxListedPairs, dense_fraction_ * all));
    L_.pattern = certified_pattern(*L_.tx, *L_.ty, L_.x, L_.y, f, g, q).pattern;
    L_.backend->set_pattern(L_.pattern);
    pattern_version_ = version_;
    epsilon_ = epsilon;
    scale_ = s;
  }

  MultiscaleLevel& L_;
  double truncation_ = 20, dense_fraction_ = 0.5;
  long long version_ = 1;
  mutable long long pattern_version_ = 0;
  mutable double epsilon_ = 0, scale_ = 0;
};

}  // namespace

MultiscaleSolver::MultiscaleSolver(const BackendOptions& options, PointsView x, PointsView y,
                                   std::span<const float> a, std::span<const float> b, std::uint64_t seed)
    : seed_(seed) {
  const auto t0 = Clock::now();
  top_ = build_level(options, x, y, a, b, seed, true);
  hierarchy_seconds_ = seconds_since(t0);
}

MultiscaleSolver::~MultiscaleSolver() = default;

bool MultiscaleSolver::pruned() const { return static_cast<bool>(top_->tx); }

SolveResult MultiscaleSolver::solve(const SolveOptions& o, double diameter) {
  const auto start = Clock::now();
  MultiscaleLevel& L = *top_;
  SolveResult r;
  Run run{o, {}, cost_scale(o.cost), side_rho(o.reach, o.reach_source), side_rho(o.reach, o.reach_target),
          o.diameter > 0 ? o.diameter : diameter, multiscale_truncation(o), o.multiscale_dense_fraction, &L, r};
  if (!o.initial_f.empty() || !o.initial_g.empty()) {
    // A warm start is the warm-up: the solve runs at the final ε alone, on the points (docs/multiscale.md,
    // "Warm starts"). Stages at the larger ε of a schedule would replace the given potentials by a cold start.
    run.eps = {epsilon_schedule(o, run.diameter).back()};
  } else if (o.epsilon > 0) {
    // A fixed ε: the coarse levels still warm-start it through a geometric schedule from the diameter down.
    for (double e = run.s * run.diameter * run.diameter; e > o.epsilon; e *= o.scaling * o.scaling)
      run.eps.push_back(e);
    run.eps.push_back(o.epsilon);
  } else {
    run.eps = epsilon_schedule(o, run.diameter);
  }
  run.total_budget = (run.stage_count() - 1) * o.stage_iterations + o.max_iterations;

  r.cost = o.cost;
  r.diameter = run.diameter;
  r.reach_source = run.rho_x;
  r.reach_target = run.rho_y;
  r.backend = L.backend->name();
  r.device = L.backend->device();
  r.reason = StopReason::kIterationBudget;
  r.multiscale.used = true;
  r.multiscale.hierarchy = L.tx ? L.tx->kind : "none";
  r.multiscale.row_block = r.multiscale.column_block = kBlockSize;
  r.multiscale.row_blocks = L.tx ? L.tx->blocks : 0;
  r.multiscale.column_blocks = L.ty ? L.ty->blocks : 0;
  {
    const MultiscaleLevel* c = &L;
    while (c->coarse) c = c->coarse.get();
    r.multiscale.coarse_rows = c->n;
    r.multiscale.coarse_columns = c->m;
  }
  r.multiscale.truncation = run.truncation;
  r.multiscale.dense_fraction = o.multiscale_dense_fraction;
  r.multiscale.hierarchy_seconds = hierarchy_seconds_;

  std::vector<float> f0, g0;
  if (!o.initial_f.empty()) {
    f0.resize(L.n);
    L.from_input(o.initial_f, 1, Side::kSource, f0);
  }
  if (!o.initial_g.empty()) {
    g0.resize(L.m);
    L.from_input(o.initial_g, 1, Side::kTarget, g0);
  }
  if (f0.empty() != g0.empty()) {  // one side warm: the other starts at zero, and no coarse level runs
    if (f0.empty()) f0.assign(L.n, 0.0f);
    if (g0.empty()) g0.assign(L.m, 0.0f);
  }
  run.run_level(L, 0, run.stage_count(), std::move(f0), std::move(g0));

  std::vector<float> f(L.n), g(L.m);
  L.backend->get_potentials(f, g);
  L.certified = {};
  if (r.multiscale.certified && L.pattern && L.tx && r.reason != StopReason::kNonFinite)
    L.certified = {L.pattern, f, g, run.eps[run.reached], run.s, run.truncation, run.dense_fraction};
  if (r.reason != StopReason::kNonFinite && r.reason != StopReason::kCancelled && !r.converged)
    r.reason = o.tolerance == 0 ? StopReason::kFixedIterations : StopReason::kIterationBudget;
  if (r.reason == StopReason::kFixedIterations)
    r.message = "ran the " + std::to_string(r.iterations) + " iterations asked for (tolerance 0: no check)";
  r.epsilon = run.eps[run.reached];
  const SolveInputs in{L.a, L.b, run.diameter};
  if (!o.diagnostics && !run.error_current) {
    r.marginal_error = std::numeric_limits<double>::quiet_NaN();
  } else if (!run.error_current && r.reason != StopReason::kNonFinite) {
    r.marginal_error = solve_marginal_error(*L.backend, in, f, g, r.epsilon, run.s, run.rho_x, run.rho_y, L.mass_a);
    if (!std::isfinite(r.marginal_error)) run.non_finite(run.reached);
  }
  if (r.reason == StopReason::kIterationBudget)
    r.message = "not converged: marginal error " + show(r.marginal_error) + " > tolerance " + show(o.tolerance) +
                " after max_iterations = " + std::to_string(o.max_iterations) + " at the final ε = " + show(r.epsilon);
  r.f.resize(L.n);
  r.g.resize(L.m);
  L.to_input(f, 1, Side::kSource, r.f);
  L.to_input(g, 1, Side::kTarget, r.g);
  r.dual_cost = solve_dual_cost(in, f, g, run.rho_x, run.rho_y);
  r.seconds = seconds_since(start);
  return r;
}

Backend& MultiscaleSolver::plan_backend(double truncation, double dense_fraction) {
  if (!plan_) plan_ = std::make_unique<PlanBackend>(*top_);
  static_cast<PlanBackend&>(*plan_).configure(truncation, dense_fraction);
  return *plan_;
}

}  // namespace flashot::detail
