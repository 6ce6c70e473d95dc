// Entropic fused Gromov–Wasserstein (flashot/gromov.hpp): the outer loop over linearized costs, each one an
// ordinary squared-Euclidean Problem on augmented points (docs/gromov-wasserstein.md). No backend knows about GW:
// the loop runs unchanged on every backend, and nothing n×m is allocated.
#include "flashot/gromov.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "gromov_linear.hpp"
#include "separable.hpp"
#include "validation.hpp"

namespace flashot {

using detail::show;

namespace {

void require(bool ok, const std::string& what, double value) {
  if (!ok) throw std::invalid_argument(what + " (got " + show(value) + ")");
}

/// Copies `v` into fp64, subtracting the weighted mean (GW compares distances within a side, so each side may be
/// translated on its own); returns the mean.
std::vector<double> centred(const PointsView& v, std::span<const float> w, std::vector<double>& out) {
  std::vector<double> mean(v.d, 0.0);
  double total = 0;
  for (std::size_t i = 0; i < v.n; ++i) {
    total += w[i];
    for (std::size_t c = 0; c < v.d; ++c) mean[c] += static_cast<double>(w[i]) * v.data[i * v.d + c];
  }
  for (double& c : mean) c /= total;
  out.resize(v.n * v.d);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = v.data[i] - mean[i % v.d];
  return mean;
}


double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}


/// `k` groups of the rows of `pts` (count × dim) by k-means (k-means++ seeding and Lloyd iterations on a fixed-
/// seed sample of at most 4096 rows, then every row to its nearest centre). Returns the group of each row; every
/// group that is returned holds at least one row (empty ones are dropped and the rest renumbered).
std::vector<int> kmeans_groups(const std::vector<float>& pts, std::size_t count, std::size_t dim, int k,
                               std::uint64_t seed, int& groups) {
  std::mt19937_64 rng(seed);
  const std::size_t sample_size = std::min<std::size_t>(count, 4096);
  std::vector<std::size_t> sample(count);
  for (std::size_t i = 0; i < count; ++i) sample[i] = i;
  for (std::size_t i = 0; i < sample_size; ++i) {
    std::uniform_int_distribution<std::size_t> pick(i, count - 1);
    std::swap(sample[i], sample[pick(rng)]);
  }
  sample.resize(sample_size);
  const std::size_t kk = std::min<std::size_t>(static_cast<std::size_t>(k), sample_size);
  const auto dist2 = [&](std::size_t row, const double* c) {
    double s = 0;
    for (std::size_t d = 0; d < dim; ++d) {
      const double t = pts[row * dim + d] - c[d];
      s += t * t;
    }
    return s;
  };
  std::vector<double> centres(kk * dim);
  std::vector<double> nearest(sample_size, std::numeric_limits<double>::infinity());
  for (std::size_t c = 0; c < kk; ++c) {  // k-means++: the next centre drawn with probability ∝ squared distance
    std::size_t chosen = 0;
    if (c == 0) {
      chosen = sample[0];
    } else {
      double total = 0;
      for (double v : nearest) total += v;
      std::uniform_real_distribution<double> u(0, total);
      double at = u(rng);
      std::size_t s = 0;
      for (; s + 1 < sample_size && at >= nearest[s]; ++s) at -= nearest[s];
      chosen = sample[s];
    }
    for (std::size_t d = 0; d < dim; ++d) centres[c * dim + d] = pts[chosen * dim + d];
    for (std::size_t s = 0; s < sample_size; ++s) nearest[s] = std::min(nearest[s], dist2(sample[s], &centres[c * dim]));
  }
  const auto assign = [&](std::size_t row) {
    std::size_t best = 0;
    double best_d = std::numeric_limits<double>::infinity();
    for (std::size_t c = 0; c < kk; ++c) {
      const double d = dist2(row, &centres[c * dim]);
      if (d < best_d) best_d = d, best = c;
    }
    return best;
  };
  for (int it = 0; it < 10; ++it) {  // Lloyd iterations on the sample
    std::vector<double> sum(kk * dim, 0.0);
    std::vector<std::size_t> size(kk, 0);
    for (std::size_t s : sample) {
      const std::size_t c = assign(s);
      ++size[c];
      for (std::size_t d = 0; d < dim; ++d) sum[c * dim + d] += pts[s * dim + d];
    }
    for (std::size_t c = 0; c < kk; ++c)
      if (size[c] > 0)
        for (std::size_t d = 0; d < dim; ++d) centres[c * dim + d] = sum[c * dim + d] / static_cast<double>(size[c]);
  }
  std::vector<int> group(count), renumber(kk, -1);
  groups = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t c = assign(i);
    if (renumber[c] < 0) renumber[c] = groups++;
    group[i] = renumber[c];
  }
  return group;
}

/// Groups of the rows of `pts` (count × dim) as the product of two k-means partitions: of columns [0, split) into
/// `k_first` groups and of columns [split, dim) into `k_second` (docs/gromov-wasserstein.md §7, "Measured and not taken"):
/// for the augmented points, cell types (the features) × compact regions of the slice (the GW columns). Empty
/// products are dropped and the rest renumbered.
std::vector<int> product_groups(const std::vector<float>& pts, std::size_t count, std::size_t dim, std::size_t split,
                                int k_first, int k_second, std::uint64_t seed, int& groups) {
  const auto columns = [&](std::size_t from, std::size_t to) {
    std::vector<float> out(count * (to - from));
    for (std::size_t i = 0; i < count; ++i)
      for (std::size_t c = from; c < to; ++c) out[i * (to - from) + c - from] = pts[i * dim + c];
    return out;
  };
  int first_groups = 0, second_groups = 0;
  const std::vector<int> first = kmeans_groups(columns(0, split), count, split, k_first, seed, first_groups);
  const std::vector<int> second =
      kmeans_groups(columns(split, dim), count, dim - split, k_second, seed ^ 0x5851f42d4c957f2dULL, second_groups);
  std::vector<int> group(count), renumber(static_cast<std::size_t>(first_groups) * second_groups, -1);
  groups = 0;
  for (std::size_t i = 0; i < count; ++i) {
    int& id = renumber[static_cast<std::size_t>(first[i]) * second_groups + second[i]];
    if (id < 0) id = groups++;
    group[i] = id;
  }
  return group;
}

/// The two-level correction of the inner solves (docs/gromov-wasserstein.md §4, "Group correction"): for a
/// partition of the source points into groups k and of the target points into groups l, the potentials are
/// shifted by one constant per group, (f_i + δ_k(i), g_j + η_l(j)), chosen so that the plan's group marginals are
/// exact: Σ_l Q_kl e^{(δ_k + η_l)/ε} = A_k = Σ_{i∈k} a_i and Σ_k … = B_l, where Q_kl = Σ_{i∈k, j∈l} P_ij. At a
/// fixed point every partition's group marginals are exact, so the correction never moves away from it; what it
/// removes in one step are the slow modes of Sinkhorn that are (near) constant on groups — a group of cells whose
/// potentials must shift rigidly across a cost gap (the plateaus of §7). Balanced problems only.
///
/// Q is formed in the log domain from one soft c-transform per target group: with f̂⁽ˡ⁾ = softmin over j ∈ l of
/// g (the engine's f-update on the problem restricted to the group's targets), Σ_{j∈l} P_ij = a_i e^{(f_i −
/// f̂⁽ˡ⁾_i)/ε}, so Q_kl = Σ_{i∈k} a_i e^{(f_i − f̂⁽ˡ⁾_i)/ε} even where it is far below fp32's range (e^{−93}: the
/// blocks the plateau's mass must cross). The L restricted problems together cost one Sinkhorn iteration. The
/// K + L offsets solve the small balanced problem exactly by Newton's method on its concave dual.
class GroupCorrection {
 public:
  GroupCorrection(const std::vector<float>& phi, std::size_t n, const std::vector<float>& psi, std::size_t m,
                  std::size_t dim, std::span<const float> wa, std::span<const float> wb,
                  const std::vector<int>& source_group, int source_groups, const std::vector<int>& target_group,
                  int target_groups, const BackendOptions& backend)
      : n_(n), m_(m), k_(source_groups), l_(target_groups), source_group_(source_group), target_group_(target_group),
        wa_(wa.begin(), wa.end()) {
    members_.resize(l_);
    for (std::size_t j = 0; j < m; ++j) members_[target_group[j]].push_back(j);
    mass_a_.assign(k_, 0.0);
    mass_b_.assign(l_, 0.0);
    for (std::size_t i = 0; i < n; ++i) mass_a_[source_group[i]] += wa[i];
    for (std::size_t j = 0; j < m; ++j) mass_b_[target_group[j]] += wb[j];
    double ta = 0, tb = 0;
    for (double v : mass_a_) ta += v;
    for (double v : mass_b_) tb += v;
    for (double& v : mass_b_) v *= ta / tb;  // the engine's balanced problem with unequal masses: scale to a's
    // A group of zero mass (zero weights) has no finite shift: no correction then.
    for (double v : mass_a_) usable_ &= v > 0;
    for (double v : mass_b_) usable_ &= v > 0;
    if (!usable_) return;
    problems_.reserve(l_);
    double total_a = 0;
    for (float w : wa) total_a += w;
    for (int l = 0; l < l_; ++l) {
      // The engine's balanced solve wants equal masses: the group's weights are scaled by s to a's total, which
      // lowers its softmin by ε·log s (added back in apply).
      std::vector<float> pts(members_[l].size() * dim), w(members_[l].size());
      double total = 0;
      for (std::size_t j : members_[l]) total += wb[j];
      const double s = total_a / total;
      log_scale_.push_back(std::log(s));
      for (std::size_t t = 0; t < members_[l].size(); ++t) {
        const std::size_t j = members_[l][t];
        for (std::size_t c = 0; c < dim; ++c) pts[t * dim + c] = psi[j * dim + c];
        w[t] = static_cast<float>(wb[j] * s);
      }
      problems_.emplace_back(PointsView{phi, n, dim}, PointsView{pts, members_[l].size(), dim}, wa, w, backend);
    }
  }

  /// Adds the group offsets to z = [f; g] (n + m, the engine's potentials at ε). Returns the relative L1 error of
  /// the group marginals before the correction, or NaN when it was not applied (a non-finite c-transform, or
  /// Newton's method did not converge).
  double apply(std::vector<double>& z, double epsilon) {
    if (!usable_) return std::numeric_limits<double>::quiet_NaN();
    // log Q_kl = LSE_{i∈k} [log a_i + (f_i − f̂⁽ˡ⁾_i)/ε]
    std::vector<double> log_q(static_cast<std::size_t>(k_) * l_, -std::numeric_limits<double>::infinity());
    SolveOptions so;
    so.epsilon = epsilon;
    so.max_iterations = 1;
    so.tolerance = 0;
    so.scheme = Scheme::kAlternating;  // f = softmin(g) first: the f of the result
    so.overrelaxation = 1;
    so.diagnostics = false;
    so.multiscale = Multiscale::kOff;
    std::vector<double> top(k_);
    std::vector<double> term(n_);
    for (int l = 0; l < l_; ++l) {
      so.initial_g.resize(members_[l].size());
      for (std::size_t t = 0; t < members_[l].size(); ++t) so.initial_g[t] = static_cast<float>(z[n_ + members_[l][t]]);
      const SolveResult r = problems_[l].solve(so);
      std::fill(top.begin(), top.end(), -std::numeric_limits<double>::infinity());
      for (std::size_t i = 0; i < n_; ++i) {
        if (!(wa_[i] > 0)) {
          term[i] = -std::numeric_limits<double>::infinity();
          continue;
        }
        term[i] = std::log(static_cast<double>(wa_[i])) + (z[i] - static_cast<double>(r.f[i])) / epsilon -
                  log_scale_[l];
        if (!std::isfinite(term[i])) return std::numeric_limits<double>::quiet_NaN();
        top[source_group_[i]] = std::max(top[source_group_[i]], term[i]);
      }
      std::vector<double> sum(k_, 0.0);
      for (std::size_t i = 0; i < n_; ++i)
        if (std::isfinite(term[i])) sum[source_group_[i]] += std::exp(term[i] - top[source_group_[i]]);
      for (int k = 0; k < k_; ++k)
        if (sum[k] > 0) log_q[static_cast<std::size_t>(k) * l_ + l] = top[k] + std::log(sum[k]);
    }
    std::vector<double> u(k_, 0.0), v(l_, 0.0);  // offsets / ε
    const double before = group_error(log_q, u, v);
    if (!newton(log_q, u, v)) return std::numeric_limits<double>::quiet_NaN();
    for (std::size_t i = 0; i < n_; ++i) z[i] += epsilon * u[source_group_[i]];
    for (std::size_t j = 0; j < m_; ++j) z[n_ + j] += epsilon * v[target_group_[j]];
    return before;
  }

 private:
  /// Σ_k |row_k − A_k| + Σ_l |col_l − B_l| over Σ A, for the group plan Q_kl e^{u_k + v_l}.
  double group_error(const std::vector<double>& log_q, const std::vector<double>& u, const std::vector<double>& v) const {
    std::vector<double> row(k_, 0.0), col(l_, 0.0);
    for (int k = 0; k < k_; ++k)
      for (int l = 0; l < l_; ++l) {
        const double p = std::exp(log_q[static_cast<std::size_t>(k) * l_ + l] + u[k] + v[l]);
        row[k] += p;
        col[l] += p;
      }
    double err = 0, total = 0;
    for (int k = 0; k < k_; ++k) err += std::abs(row[k] - mass_a_[k]), total += mass_a_[k];
    for (int l = 0; l < l_; ++l) err += std::abs(col[l] - mass_b_[l]);
    return err / total;
  }

  /// Solves the group marginals for u, v: a few log-domain Sinkhorn sweeps (they make the group plan finite
  /// whatever the start: the warm potentials of a new cost can be far off), then Newton's method on the marginal
  /// equations G(u, v) = 0 — the Jacobian is −[diag(row) Q; Qᵀ diag(col)], the Hessian of the concave dual
  /// Σ A_k u_k + Σ B_l v_l − Σ_kl Q_kl e^{u_k + v_l}, with the gauge fixed by holding v_L — with an exact line
  /// search on the dual. The groups of one cell type couple strongly and different types only through blocks at
  /// e^{−40} and below, so the group problem has the plateau too (Sinkhorn sweeps leave its error where it was);
  /// Newton's direction points along it. True when the group marginals end within 10⁻⁶ of the mass.
  bool newton(const std::vector<double>& log_q, std::vector<double>& u, std::vector<double>& v) const {
    const std::size_t kn = k_, ln = l_, dim = kn + ln - 1;
    double total = 0;
    for (double a : mass_a_) total += a;
    const auto lse_row = [&](std::size_t k) {
      double top = -std::numeric_limits<double>::infinity();
      for (std::size_t l = 0; l < ln; ++l) top = std::max(top, log_q[k * ln + l] + v[l]);
      if (!std::isfinite(top)) return top;
      double sum = 0;
      for (std::size_t l = 0; l < ln; ++l) sum += std::exp(log_q[k * ln + l] + v[l] - top);
      return top + std::log(sum);
    };
    const auto lse_col = [&](std::size_t l) {
      double top = -std::numeric_limits<double>::infinity();
      for (std::size_t k = 0; k < kn; ++k) top = std::max(top, log_q[k * ln + l] + u[k]);
      if (!std::isfinite(top)) return top;
      double sum = 0;
      for (std::size_t k = 0; k < kn; ++k) sum += std::exp(log_q[k * ln + l] + u[k] - top);
      return top + std::log(sum);
    };
    for (int sweep = 0; sweep < 20; ++sweep) {
      for (std::size_t k = 0; k < kn; ++k) {
        const double r = lse_row(k);
        if (!std::isfinite(r)) return false;
        u[k] = std::log(mass_a_[k]) - r;
      }
      for (std::size_t l = 0; l < ln; ++l) {
        const double c = lse_col(l);
        if (!std::isfinite(c)) return false;
        v[l] = std::log(mass_b_[l]) - c;
      }
    }
    // The residuals G (rows, then columns) and the group plan at (uu, vv).
    const auto residual = [&](const std::vector<double>& uu, const std::vector<double>& vv, std::vector<double>& p,
                              std::vector<double>& row, std::vector<double>& col) {
      p.assign(kn * ln, 0.0);
      row.assign(kn, 0.0);
      col.assign(ln, 0.0);
      for (std::size_t k = 0; k < kn; ++k)
        for (std::size_t l = 0; l < ln; ++l) {
          const double e = std::exp(log_q[k * ln + l] + uu[k] + vv[l]);
          p[k * ln + l] = e;
          row[k] += e;
          col[l] += e;
        }
      double err = 0;
      for (std::size_t k = 0; k < kn; ++k) err += std::abs(mass_a_[k] - row[k]);
      for (std::size_t l = 0; l < ln; ++l) err += std::abs(mass_b_[l] - col[l]);
      return std::isfinite(err) ? err : std::numeric_limits<double>::infinity();
    };
    std::vector<double> p, row, col;
    double err = residual(u, v, p, row, col);
    for (int it = 0; it < 200 && err > 1e-12 * total; ++it) {
      std::vector<double> h(dim * dim, 0.0), step(dim);
      for (std::size_t k = 0; k < kn; ++k) step[k] = mass_a_[k] - row[k];
      for (std::size_t l = 0; l + 1 < ln; ++l) step[kn + l] = mass_b_[l] - col[l];
      // A ridge of 10⁻¹² of the mass keeps the elimination finite where types are decoupled to fp64's range
      // (only the direction is used).
      const double ridge = 1e-12 * total;
      for (std::size_t k = 0; k < kn; ++k) h[k * dim + k] = row[k] + ridge;
      for (std::size_t l = 0; l + 1 < ln; ++l) h[(kn + l) * dim + kn + l] = col[l] + ridge;
      for (std::size_t k = 0; k < kn; ++k)
        for (std::size_t l = 0; l + 1 < ln; ++l) h[k * dim + kn + l] = h[(kn + l) * dim + k] = p[k * ln + l];
      if (!detail::solve_small(h, step, dim)) break;
      // Exact line search on the concave dual along the Newton direction d (unit max-norm): its slope
      // ⟨G(x + t d), d⟩ falls monotonically in t; doubling from the Newton length brackets the zero, bisection
      // finds it. Across a weak coupling the Newton length is astronomical (the Jacobian is nearly singular) and
      // the dual is linear along it until the blocks' mass appears, so neither the full step nor a decrease of
      // ‖G‖ can be asked for.
      double longest = 0;
      for (double x : step) longest = std::max(longest, std::abs(x));
      if (!(longest > 0) || !std::isfinite(longest)) break;
      for (double& x : step) x /= longest;
      const auto slope = [&](double t) {
        std::vector<double> uu = u, vv = v, pp, rr, cc;
        for (std::size_t k = 0; k < kn; ++k) uu[k] += t * step[k];
        for (std::size_t l = 0; l + 1 < ln; ++l) vv[l] += t * step[kn + l];
        residual(uu, vv, pp, rr, cc);
        double s = 0;
        for (std::size_t k = 0; k < kn; ++k) s += step[k] * (mass_a_[k] - rr[k]);
        for (std::size_t l = 0; l + 1 < ln; ++l) s += step[kn + l] * (mass_b_[l] - cc[l]);
        return std::isfinite(s) ? s : -std::numeric_limits<double>::infinity();
      };
      if (!(slope(0) > 0)) break;
      double lo = 0, hi = std::min(longest, 1e6);
      while (slope(hi) > 0 && hi < 1e6) lo = hi, hi *= 2;
      for (int b = 0; b < 60 && hi - lo > 1e-12 * hi; ++b) {
        const double mid = 0.5 * (lo + hi);
        (slope(mid) > 0 ? lo : hi) = mid;
      }
      const double t = lo > 0 ? lo : hi;
      for (std::size_t k = 0; k < kn; ++k) u[k] += t * step[k];
      for (std::size_t l = 0; l + 1 < ln; ++l) v[l] += t * step[kn + l];
      err = residual(u, v, p, row, col);
    }
    return err <= 1e-6 * total;
  }

  std::size_t n_, m_;
  int k_, l_;
  const std::vector<int>& source_group_;
  const std::vector<int>& target_group_;
  std::vector<float> wa_;
  std::vector<std::vector<std::size_t>> members_;
  std::vector<double> mass_a_, mass_b_;
  std::vector<double> log_scale_;  // log of the factor each group's target weights were scaled by
  bool usable_ = true;
  std::vector<Problem> problems_;
};

/// One plain inner solve (the engine's own loop, `anderson_memory` = −1) with the group correction: whenever a
/// marginal-error check of the final ε improved by less than 3% on the last one (progress callback: the engine
/// stops there and hands back its potentials), the potentials get the correction
/// and the engine continues from them, over-relaxation ω carried over. Each correction counts as one iteration of
/// the budget (it costs about one). The answer is the engine's iterate and its own check.
SolveResult corrected_solve(Problem& problem, SolveOptions so, const std::function<double(std::vector<double>&)>& correct,
                            bool correct_first, bool correct_flat, double trigger) {
  if (!correct) return problem.solve(so);
  const std::size_t n = problem.n(), m = problem.m();
  const int budget = so.max_iterations;
  const double tol = so.tolerance;
  const ProgressCallback progress = std::move(so.progress);
  const auto take = [&](const std::vector<float>& f, const std::vector<float>& g) {
    std::vector<double> z(n + m);
    for (std::size_t i = 0; i < n; ++i) z[i] = f[i];
    for (std::size_t j = 0; j < m; ++j) z[n + j] = g[j];
    return z;
  };
  const auto put = [&](const std::vector<double>& z) {
    so.initial_f.resize(n);
    so.initial_g.resize(m);
    for (std::size_t i = 0; i < n; ++i) so.initial_f[i] = static_cast<float>(z[i]);
    for (std::size_t j = 0; j < m; ++j) so.initial_g[j] = static_cast<float>(z[n + j]);
  };
  int done = 0;
  while (true) {
    double last_error = std::numeric_limits<double>::infinity();
    bool flagged = false;
    const int offset = done;
    so.max_iterations = std::max(1, budget - done);
    so.progress = [&](const Progress& pr) {
      if (progress) {
        Progress shifted = pr;
        shifted.iteration += offset;
        shifted.max_iterations = budget;
        if (!progress(shifted)) return false;
      }
      if (pr.stage + 1 < pr.stage_count || !std::isfinite(pr.marginal_error)) return true;
      const bool first = correct_first && pr.marginal_error > 2 * tol;
      const bool flat = correct_flat && pr.marginal_error > (1 - trigger) * last_error && pr.marginal_error > 2 * tol;
      last_error = pr.marginal_error;
      if ((first || flat) && offset + pr.iteration + 2 * so.check_every < budget) {
        correct_first = false;
        flagged = true;
        return false;
      }
      correct_first = false;
      return true;
    };
    SolveResult s = problem.solve(so);
    done += s.iterations;
    s.iterations = done;
    if (!(s.reason == StopReason::kCancelled && flagged)) return s;
    std::vector<double> z = take(s.f, s.g);
    ++done;
    if (std::isfinite(correct(z))) put(z);
    else put(take(s.f, s.g));
    so.epsilon = s.epsilon;  // the ε-scaling of a cold start is over (flat checks are the final stage's)
    so.overrelaxation_start = std::clamp(s.overrelaxation, 1.0, 1.95);
  }
}

/// One inner solve with Anderson acceleration of the Sinkhorn map (docs/gromov-wasserstein.md §4, "Inner
/// solves"). `so` carries ε (or an ε-scaling schedule for a cold start), the start, the tolerance, check cadence
/// and budget. The engine runs `block` Sinkhorn iterations per call; the potentials z = [f; g] between calls are
/// extrapolated from the last `memory` residuals r = S(z) − z (type-II Anderson mixing), with a restart whenever
/// the residual grows. The answer is always the engine's own iterate S(z) and its own marginal-error check, so
/// the acceleration changes the path, never the fixed point or the stopping rule.
SolveResult anderson_solve(Problem& problem, SolveOptions so, int memory, int block, bool balanced,
                           bool plateau_search, const std::function<double(std::vector<double>&)>& correct,
                           bool correct_first, double trigger) {
  const std::size_t n = problem.n(), m = problem.m(), len = n + m;
  const double tol = so.tolerance;
  const int budget = so.max_iterations, check_every = so.check_every;
  ProgressCallback progress = std::move(so.progress);
  so.progress = {};
  so.diagnostics = false;
  std::vector<double> z(len, 0.0), z_prev, r(len), r_prev;
  std::vector<std::vector<double>> dz, dr, gram;  // differences of iterates and residuals, Gram matrix of dr
  double best = std::numeric_limits<double>::infinity();
  double best_check = std::numeric_limits<double>::infinity();
  int stalled = 0, restarts = 0;
  const bool search = plateau_search;
  double check_error = 0;
  std::vector<double> check_point;  // the iterate at the last check, and its error (plateau search)
  bool restart = false;
  int done = 0, since_check = 0;
  SolveResult last;
  bool have_z = false;
  if (so.epsilon == 0) {  // a cold start's ε-scaling: its stages first, then fixed ε
    so.tolerance = 0;
    so.max_iterations = block;
    last = problem.solve(so);
    done += last.iterations;
    since_check += block;
    if (last.reason == StopReason::kNonFinite) return last;
    so.epsilon = last.epsilon;
    for (std::size_t i = 0; i < n; ++i) z[i] = last.f[i];
    for (std::size_t j = 0; j < m; ++j) z[n + j] = last.g[j];
    have_z = true;
  } else {
    for (std::size_t i = 0; i < so.initial_f.size(); ++i) z[i] = so.initial_f[i];
    for (std::size_t j = 0; j < so.initial_g.size(); ++j) z[n + j] = so.initial_g[j];
    have_z = true;
  }
  (void)have_z;
  bool correct_next = true;  // at a flat check: the group correction, then the search, alternately
  so.initial_f.resize(n);
  so.initial_g.resize(m);
  std::vector<double> fallback;  // the last plain iterate, where a failed extrapolation restarts
  int failures = 0;
  while (done < budget) {
    for (std::size_t i = 0; i < n; ++i) so.initial_f[i] = static_cast<float>(z[i]);
    for (std::size_t j = 0; j < m; ++j) so.initial_g[j] = static_cast<float>(z[n + j]);
    const int step = std::min(block, budget - done);
    const bool check = since_check + step >= check_every || done + step >= budget;
    so.max_iterations = step;
    so.check_every = step;
    so.tolerance = check ? tol : 0;
    SolveResult s = problem.solve(so);
    done += step;
    since_check = check ? 0 : since_check + step;
    if (s.reason == StopReason::kNonFinite) {
      if (fallback.empty() || ++failures > 3) {
        s.iterations = done;
        return s;
      }
      z = fallback;  // the extrapolation went too far: back to the last plain iterate, memory cleared
      dz.clear();
      dr.clear();
      gram.clear();
      z_prev.clear();
      continue;
    }
    double norm = 0;
    for (std::size_t i = 0; i < n; ++i) r[i] = s.f[i] - z[i];
    for (std::size_t j = 0; j < m; ++j) r[n + j] = s.g[j] - z[n + j];
    for (double v : r) norm = std::max(norm, std::abs(v));
    s.iterations = done;
    if (check) {
      if (progress && !progress(Progress{0, 1, so.epsilon, done, budget, s.marginal_error})) {
        s.reason = StopReason::kCancelled;
        s.message = "cancelled by the progress callback after " + std::to_string(done) + " iterations";
        return s;
      }
      if (s.converged) {
        s.message = "converged: marginal error " + show(s.marginal_error) + " ≤ tolerance " + show(tol) + " after " +
                    std::to_string(done) + " iterations (Anderson-accelerated)";
        return s;
      }
      // Five checks in a row without a new best mean the extrapolation has stalled (near fp32's resolution of
      // the potentials, typically): the rest of the solve runs plain Sinkhorn iterations.
      if (s.marginal_error < best_check) {
        best_check = s.marginal_error;
        stalled = 0;
      } else if (++stalled >= 5) {
        // Restart the memory from the plain iterate; after three restarts without progress, plain iterations.
        stalled = 0;
        restart = true;
        if (++restarts > 0) memory = 0;
      }
    }
    if (norm == 0 && check) {
      // S(z) = z in fp32: the iteration cannot move any more, so more of it only burns the budget.
      s.converged = false;
      s.reason = StopReason::kIterationBudget;
      s.message = "not converged: the fp32 potentials reached a fixed point of the iteration with marginal error " +
                  show(s.marginal_error) + " > tolerance " + show(tol) + " after " + std::to_string(done) +
                  " iterations";
      return s;
    }
    const double error_now = s.marginal_error;
    last = std::move(s);
    fallback.resize(len);
    for (std::size_t i = 0; i < n; ++i) fallback[i] = last.f[i];
    for (std::size_t j = 0; j < m; ++j) fallback[n + j] = last.g[j];
    if (check && (search || correct)) {
      // Plateau search (docs/gromov-wasserstein.md §4, "Plateaus"): a check that improved by less than 3% on the
      // last one is a slow mode — a group of points whose marginal is off by a fraction δ (cell types sampled in
      // different proportions on the two sides) must shift its potentials rigidly by a cost gap of ~100ε before
      // mass can cross to another group, and Sinkhorn moves them by ≈ ε·δ per iteration. Along that mode the
      // iterates drift on a straight line d (the step since the last check), so the solve searches z + κd: κ
      // doubles while the Sinkhorn residual still points along d (the dual is concave, so its slope along d
      // falls monotonically), then bisects the bracket where the slope changes sign. Each trial is one engine
      // iteration and its check; the solve continues from the trial with the smallest marginal error when it
      // improved on the plateau by more than 3%, else from the furthest one short of the turning point (the
      // error cannot see progress along a plateau). Only the path changes.
      const bool flat = !check_point.empty() && error_now > 0.97 * check_error && error_now > 2 * tol;
      // The correction's own trigger may be looser than the search's: a slow decline (not flat) that is constant
      // on groups is removed by one correction as well (docs/gromov-wasserstein.md §7, "Measured and not taken").
      const bool slow = !check_point.empty() && error_now > (1 - trigger) * check_error && error_now > 2 * tol;
      const bool first = correct_first && error_now > 2 * tol;
      correct_first = false;
      if (!slow) correct_next = true;
      if ((first || slow) && correct && correct_next) {
        correct_next = false;
        std::vector<double> moved = fallback;
        if (std::isfinite(correct(moved))) {
          z = std::move(moved);
          dz.clear();
          dr.clear();
          gram.clear();
          z_prev.clear();
          best = std::numeric_limits<double>::infinity();
          check_point.clear();
          continue;
        }
      }
      correct_next = true;
      if (search && flat && done + 2 * check_every < budget) {
        std::vector<double> d(len);
        for (std::size_t i = 0; i < len; ++i) d[i] = fallback[i] - check_point[i];
        if (balanced) {  // (f + c, g − c) is the same plan: no step along it
          double c = 0;
          for (std::size_t i = 0; i < n; ++i) c += d[i];
          for (std::size_t j = 0; j < m; ++j) c -= d[n + j];
          c /= static_cast<double>(len);
          for (std::size_t i = 0; i < n; ++i) d[i] -= c;
          for (std::size_t j = 0; j < m; ++j) d[n + j] += c;
        }
        // The alternating scheme's iterate depends on g alone (f is recomputed from it first).
        const std::size_t from = so.scheme == Scheme::kAlternating ? n : 0;
        SolveOptions to = so;
        to.max_iterations = 1;
        to.check_every = 1;
        to.tolerance = tol;
        const std::vector<double> z0 = fallback;
        // One trial: the engine's iterate from z0 + κd, its marginal error and the residual's slope along d.
        const auto trial = [&](double kappa, double& slope) {
          for (std::size_t i = 0; i < n; ++i) to.initial_f[i] = static_cast<float>(z0[i] + kappa * d[i]);
          for (std::size_t j = 0; j < m; ++j) to.initial_g[j] = static_cast<float>(z0[n + j] + kappa * d[n + j]);
          SolveResult t = problem.solve(to);
          ++done;
          slope = 0;
          for (std::size_t i = from; i < len; ++i) {
            const double out = i < n ? t.f[i] : t.g[i - n];
            const double in = i < n ? to.initial_f[i] : to.initial_g[i - n];
            slope += (out - in) * d[i];
          }
          if (t.reason == StopReason::kNonFinite || !std::isfinite(t.marginal_error) || !std::isfinite(slope))
            slope = -std::numeric_limits<double>::infinity();
          return t;
        };
        to.initial_f.resize(n);
        to.initial_g.resize(m);
        SolveResult best_trial;
        double best_error = error_now, lo = 0, hi = 0;
        SolveResult lo_trial;
        bool have_best = false, have_lo = false, done_early = false;
        const auto consider = [&](SolveResult&& t, double kappa, double slope) {
          if (t.converged) done_early = true;
          const bool ahead = slope > 0;  // short of the turning point: the residual still points along d
          if (std::isfinite(t.marginal_error) && t.marginal_error < best_error) {
            best_error = t.marginal_error;
            best_trial = t;
            have_best = true;
          }
          if (ahead) {
            lo = kappa;
            lo_trial = std::move(t);
            have_lo = true;
          } else {
            hi = kappa;
          }
          return ahead;
        };
        // Doubling until the slope turns (or the budget leaves room for one check after the search).
        for (double kappa = 2; !done_early && done + check_every < budget && kappa <= 65536; kappa *= 2) {
          double slope = 0;
          SolveResult t = trial(kappa, slope);
          if (!consider(std::move(t), kappa, slope)) break;
        }
        // Bisection of [lo, hi] to 1/32 of its width.
        for (int b = 0; b < 5 && hi > 0 && !done_early && done + check_every < budget; ++b) {
          const double mid = 0.5 * (lo + hi);
          double slope = 0;
          SolveResult t = trial(mid, slope);
          consider(std::move(t), mid, slope);
        }
        // The trial with the smallest error when it improved on the plateau by more than 3%, else the furthest
        // one still short of the turning point (the error cannot see progress along a plateau).
        SolveResult* pick = nullptr;
        if (have_best && (done_early || best_error < 0.97 * error_now || !have_lo)) pick = &best_trial;
        else if (have_lo) pick = &lo_trial;
        if (pick) {
          pick->iterations = done;
          if (pick->converged) {
            pick->message = "converged: marginal error " + show(pick->marginal_error) + " ≤ tolerance " +
                            show(tol) + " after " + std::to_string(done) + " iterations (plateau search)";
            return std::move(*pick);
          }
          for (std::size_t i = 0; i < n; ++i) fallback[i] = pick->f[i];
          for (std::size_t j = 0; j < m; ++j) fallback[n + j] = pick->g[j];
          last = std::move(*pick);
          since_check = 0;
          check_point = fallback;
          check_error = last.marginal_error;
          best_check = std::min(best_check, last.marginal_error);
          stalled = 0;
          z = fallback;
          dz.clear();
          dr.clear();
          gram.clear();
          z_prev.clear();
          best = std::numeric_limits<double>::infinity();
          continue;
        }
      }
      check_point = fallback;
      check_error = error_now;
    }
    if (memory <= 0) {
      z = fallback;
      continue;
    }
    if (norm > 4 * best || restart) {  // diverging or stalled extrapolation: restart from the plain iterate
      restart = false;
      dz.clear();
      dr.clear();
      gram.clear();
      z_prev.clear();
      best = norm;
      z = fallback;
      continue;
    }
    best = std::min(best, norm);
    if (!z_prev.empty()) {
      std::vector<double> a(len), b(len);
      for (std::size_t i = 0; i < len; ++i) {
        a[i] = z[i] - z_prev[i];
        b[i] = r[i] - r_prev[i];
      }
      if (dz.size() == static_cast<std::size_t>(memory)) {  // the oldest pair leaves, with its Gram row
        dz.erase(dz.begin());
        dr.erase(dr.begin());
        gram.erase(gram.begin());
        for (auto& row : gram) row.erase(row.begin());
      }
      std::vector<double> row(dr.size() + 1);
      for (std::size_t c = 0; c < dr.size(); ++c) row[c] = dot(dr[c], b);
      row.back() = dot(b, b);
      for (std::size_t c = 0; c < gram.size(); ++c) gram[c].push_back(row[c]);
      gram.push_back(std::move(row));
      dz.push_back(std::move(a));
      dr.push_back(std::move(b));
    }
    z_prev = z;
    r_prev = r;
    const std::size_t k = dr.size();
    std::vector<double> gamma;
    if (k > 0) {
      std::vector<double> g(k * k), rhs(k);
      double trace = 0;
      for (std::size_t a = 0; a < k; ++a) {
        for (std::size_t b = 0; b < k; ++b) g[a * k + b] = gram[a][b];
        rhs[a] = dot(dr[a], r);
        trace += g[a * k + a];
      }
      for (std::size_t a = 0; a < k; ++a) g[a * k + a] += 1e-10 * trace + 1e-300;
      if (detail::solve_small(g, rhs, k)) gamma = std::move(rhs);
    }
    for (std::size_t i = 0; i < len; ++i) {
      double v = z[i] + r[i];
      for (std::size_t a = 0; a < gamma.size(); ++a) v -= gamma[a] * (dz[a][i] + dr[a][i]);
      z[i] = v;
    }
    if (balanced) {
      // (f + c, g − c) is the same plan: the residuals cannot see c, so the extrapolation may drift along it and
      // cost the fp32 potentials their resolution. Keep g's mean that of the plain iterate.
      double c = 0;
      for (std::size_t j = 0; j < m; ++j) c += z[n + j] - fallback[n + j];
      c /= static_cast<double>(m);
      for (std::size_t i = 0; i < n; ++i) z[i] += c;
      for (std::size_t j = 0; j < m; ++j) z[n + j] -= c;
    }
  }
  last.iterations = done;
  last.converged = false;
  last.reason = StopReason::kIterationBudget;
  last.message = "not converged: marginal error " + show(last.marginal_error) + " > tolerance " + show(tol) +
                 " after max_iterations = " + std::to_string(budget);
  return last;
}
}  // namespace

namespace detail {

std::vector<std::size_t> stratified_indices(const std::vector<double>& x, std::size_t p, const std::vector<float>& u,
                                            std::size_t e, std::size_t n, std::size_t count, std::uint64_t seed) {
  // The sort key: the point's k-means group of the features in the high 32 bits, its Morton code in the low 30
  // (10 bits per coordinate over the side's bounding box), so the order runs through one group at a time and, within
  // it, through space along a curve that keeps neighbours together: every stride of n/count consecutive points of
  // it is one stratum, and the sample takes one point of each.
  std::vector<int> group(n, 0);
  if (e > 0) {
    int groups = 0;
    group = kmeans_groups(u, n, e, 32, seed, groups);
  }
  const std::size_t dims = std::min<std::size_t>(p, 3);
  std::vector<double> lo(dims, std::numeric_limits<double>::infinity());
  std::vector<double> hi(dims, -std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < dims; ++c) lo[c] = std::min(lo[c], x[i * p + c]), hi[c] = std::max(hi[c], x[i * p + c]);
  std::vector<std::uint64_t> key(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t code = 0;
    for (std::size_t c = 0; c < dims; ++c) {
      const double span = hi[c] > lo[c] ? hi[c] - lo[c] : 1.0;
      const auto q = static_cast<std::uint64_t>(std::clamp((x[i * p + c] - lo[c]) / span, 0.0, 1.0) * 1023.0);
      for (int b = 0; b < 10; ++b) code |= ((q >> b) & 1u) << (b * dims + c);
    }
    key[i] = (static_cast<std::uint64_t>(group[i]) << 32) | code;
  }
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return key[a] < key[b]; });
  std::mt19937_64 rng(seed);
  const double offset = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  const double stride = static_cast<double>(n) / static_cast<double>(count);
  std::vector<std::size_t> out(count);
  for (std::size_t k = 0; k < count; ++k)
    out[k] = order[std::min(n - 1, static_cast<std::size_t>((static_cast<double>(k) + offset) * stride))];
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace detail

struct GromovProblem::Impl {
  std::size_t n = 0, m = 0, p = 0, q = 0, e = 0;
  std::vector<double> x, y;             // centred coordinates, fp64
  std::vector<double> x_mean, y_mean;   // what was subtracted
  std::vector<float> u, v;              // features, centred on their joint mean (the feature cost is
                                        // translation-invariant), empty without features
  std::vector<float> a, b;
  BackendOptions backend;
  std::unique_ptr<Problem> problem;
};

GromovProblem::GromovProblem(const GromovData& data, const BackendOptions& options)
    : impl_(std::make_unique<Impl>()) {
  detail::validate_points(data.x, "x");
  detail::validate_points(data.y, "y");
  detail::validate_weights(data.a, data.x.n, "a", "x");
  detail::validate_weights(data.b, data.y.n, "b", "y");
  Impl& p = *impl_;
  p.n = data.x.n;
  p.m = data.y.n;
  p.p = data.x.d;
  p.q = data.y.d;
  const bool has_u = data.u.n > 0 || !data.u.data.empty();
  const bool has_v = data.v.n > 0 || !data.v.data.empty();
  if (has_u != has_v)
    throw std::invalid_argument(std::string("u and v must both be given or both be empty (got ") +
                                (has_u ? "u only" : "v only") + ")");
  if (has_u) {
    detail::validate_points(data.u, "u");
    detail::validate_points(data.v, "v");
    if (data.u.n != p.n)
      throw std::invalid_argument("u must have one row per point of x, n = " + std::to_string(p.n) + " (got " +
                                  std::to_string(data.u.n) + ")");
    if (data.v.n != p.m)
      throw std::invalid_argument("v must have one row per point of y, m = " + std::to_string(p.m) + " (got " +
                                  std::to_string(data.v.n) + ")");
    if (data.u.d != data.v.d)
      throw std::invalid_argument("u.d and v.d must match (got " + std::to_string(data.u.d) + " and " +
                                  std::to_string(data.v.d) + ")");
    p.e = data.u.d;
  }
  p.a = detail::weights_or_uniform(data.a, p.n);
  p.b = detail::weights_or_uniform(data.b, p.m);
  p.x_mean = centred(data.x, p.a, p.x);
  p.y_mean = centred(data.y, p.b, p.y);
  if (p.e > 0) {
    std::vector<double> mean(p.e, 0.0);
    for (const PointsView* f : {&data.u, &data.v})
      for (std::size_t i = 0; i < f->n; ++i)
        for (std::size_t c = 0; c < p.e; ++c) mean[c] += f->data[i * p.e + c];
    for (double& c : mean) c /= static_cast<double>(p.n + p.m);
    p.u.resize(p.n * p.e);
    p.v.resize(p.m * p.e);
    for (std::size_t i = 0; i < p.u.size(); ++i) p.u[i] = static_cast<float>(data.u.data[i] - mean[i % p.e]);
    for (std::size_t i = 0; i < p.v.size(); ++i) p.v[i] = static_cast<float>(data.v.data[i] - mean[i % p.e]);
  }
  p.backend = options;
}

GromovProblem::~GromovProblem() = default;
GromovProblem::GromovProblem(GromovProblem&&) noexcept = default;
GromovProblem& GromovProblem::operator=(GromovProblem&&) noexcept = default;

std::size_t GromovProblem::n() const { return impl_->n; }
std::size_t GromovProblem::m() const { return impl_->m; }

const Problem& GromovProblem::problem() const {
  if (!impl_->problem) throw std::logic_error("GromovProblem::problem(): no solve has run yet");
  return *impl_->problem;
}

namespace {

/// What a coarse level hands to the next finer one: the moments its last cost was built from, and that cost's
/// true potentials on the coarse points (docs/gromov-wasserstein.md §7), with the coarse points' indices.
struct LevelState {
  detail::PlanMoments cost_moments;
  std::vector<double> f_true, g_true;
  std::vector<std::size_t> rows, cols;  // indices into the finer level's points
  double weight_a = 1, weight_b = 1;    // the coarse weights are the finer ones at rows/cols times these
};

/// The moments the next linearized cost is built from (§2), as one vector: the outer loop's second stopping test
/// compares it between iterations (a plan drifting along a direction that barely changes the objective still
/// changes these).
std::vector<double> cost_moment_vector(const detail::PlanMoments& mo) {
  std::vector<double> v{mo.mass, mo.c_ny, mo.r_nx, mo.k};
  for (const auto* part : {&mo.xbar, &mo.ybar, &mo.cross, &mo.w, &mo.z}) v.insert(v.end(), part->begin(), part->end());
  return v;
}

/// `count` indices of [0, n), a fixed-seed uniform sample, sorted.
std::vector<std::size_t> sample_indices(std::size_t n, std::size_t count, std::uint64_t seed) {
  std::vector<std::size_t> all(n);
  for (std::size_t i = 0; i < n; ++i) all[i] = i;
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < count; ++i) {
    std::uniform_int_distribution<std::size_t> pick(i, n - 1);
    std::swap(all[i], all[pick(rng)]);
  }
  all.resize(count);
  std::sort(all.begin(), all.end());
  return all;
}

GromovResult solve_level(GromovProblem::Impl& p, const GromovOptions& o, int level, LevelState* out);

}  // namespace

GromovResult GromovProblem::solve(const GromovOptions& o) { return solve_level(*impl_, o, 0, nullptr); }

namespace {

GromovResult solve_level(GromovProblem::Impl& p, const GromovOptions& o, int level, LevelState* out) {
  require(o.alpha >= 0 && o.alpha <= 1, "alpha must be in [0, 1]", o.alpha);
  if (o.alpha < 1 && p.e == 0)
    throw std::invalid_argument("alpha < 1 weighs a feature term, but no features (u, v) were given (alpha = " +
                                show(o.alpha) + ")");
  require(std::isfinite(o.epsilon) && o.epsilon > 0, "epsilon must be > 0", o.epsilon);
  require(std::isfinite(o.reach) && o.reach >= 0, "reach must be ≥ 0 (0 = balanced)", o.reach);
  require(std::isfinite(o.reach_source) && o.reach_source >= 0, "reach_source must be ≥ 0", o.reach_source);
  require(std::isfinite(o.reach_target) && o.reach_target >= 0, "reach_target must be ≥ 0", o.reach_target);
  require(o.max_outer >= 1, "max_outer must be ≥ 1", o.max_outer);
  require(std::isfinite(o.outer_tolerance) && o.outer_tolerance >= 0, "outer_tolerance must be ≥ 0",
          o.outer_tolerance);
  require(std::isfinite(o.inner_tolerance) && o.inner_tolerance > 0, "inner_tolerance must be > 0",
          o.inner_tolerance);
  require(o.inner_max_iterations >= 1, "inner_max_iterations must be ≥ 1", o.inner_max_iterations);
  require(o.check_every >= 1, "check_every must be ≥ 1", o.check_every);
  require(o.scaling > 0 && o.scaling < 1, "scaling must be in (0, 1)", o.scaling);
  require(o.anderson_memory >= -1, "anderson_memory must be ≥ −1 (−1 = plain solves)", o.anderson_memory);
  require(o.anderson_block >= 1, "anderson_block must be ≥ 1", o.anderson_block);
  require(o.overrelaxation == kOverrelaxationAuto || (o.overrelaxation >= 1 && o.overrelaxation < 2),
          "overrelaxation must be 0 (auto), 1 (off) or in (1, 2)", o.overrelaxation);
  require(std::isfinite(o.adaptive_tolerance) && o.adaptive_tolerance >= 0, "adaptive_tolerance must be ≥ 0",
          o.adaptive_tolerance);
  require(std::isfinite(o.first_tolerance) && o.first_tolerance > 0, "first_tolerance must be > 0",
          o.first_tolerance);
  require(o.annealing_start == 0 || (std::isfinite(o.annealing_start) && o.annealing_start >= 1),
          "annealing_start must be 0 (from the diameter) or ≥ 1 (1 = no annealing)", o.annealing_start);
  require(o.annealing_factor > 0 && o.annealing_factor < 1, "annealing_factor must be in (0, 1)",
          o.annealing_factor);
  require(std::isfinite(o.annealing_tolerance) && o.annealing_tolerance > 0, "annealing_tolerance must be > 0",
          o.annealing_tolerance);
  require(o.annealing_iterations >= 0, "annealing_iterations must be ≥ 0", o.annealing_iterations);
  require(std::isfinite(o.moment_tolerance) && o.moment_tolerance >= 0, "moment_tolerance must be ≥ 0",
          o.moment_tolerance);
  require(std::isfinite(o.settled_moment_tolerance) && o.settled_moment_tolerance >= 0,
          "settled_moment_tolerance must be ≥ 0 (0 = off)", o.settled_moment_tolerance);
  require(o.outer_anderson_memory >= 0, "outer_anderson_memory must be ≥ 0 (0 = off)", o.outer_anderson_memory);
  require(o.correction_groups >= 0, "correction_groups must be ≥ 0 (0 = no group correction)", o.correction_groups);
  require(o.correction_spatial_groups >= 0, "correction_spatial_groups must be ≥ 0 (0 = one k-means partition)",
          o.correction_spatial_groups);
  require(o.correction_trigger > 0 && o.correction_trigger < 1, "correction_trigger must be in (0, 1)",
          o.correction_trigger);
  require(std::isfinite(o.coarse_tolerance) && o.coarse_tolerance >= 0, "coarse_tolerance must be ≥ 0",
          o.coarse_tolerance);
  require(std::isfinite(o.level_start_tolerance) && o.level_start_tolerance >= 0,
          "level_start_tolerance must be ≥ 0 (0 = inner_tolerance)", o.level_start_tolerance);
  require(o.coarse_points >= 0, "coarse_points must be ≥ 0 (0 = no coarse start)", o.coarse_points);
  require(std::isfinite(o.coarse_factor) && o.coarse_factor > 1, "coarse_factor must be > 1", o.coarse_factor);

  const auto start = std::chrono::steady_clock::now();
  const double eps = o.epsilon;
  const double rho_x = detail::side_rho(o.reach, o.reach_source);
  const double rho_y = detail::side_rho(o.reach, o.reach_target);
  // docs/gromov-wasserstein.md §4: a separable term A_i of the cost moves into the weights as a_i·e^{−κA_i},
  // κ = 1/(ε + ρ), on an unbalanced side; on a balanced side the potentials absorb it (κ = 0).
  const bool features = o.alpha < 1;
  const bool gw = o.alpha > 0;
  const std::size_t fe = features ? p.e : 0;
  const std::size_t gw_width = gw ? p.p + 1 : 0;
  const std::size_t dim = fe + gw_width;

  // Value columns of the one plan application per outer iteration: H(y) for the moments, then [v | ‖v‖²] for
  // the feature cost (variance form, as Problem's primal cost).
  const std::size_t kh = detail::moment_columns(p.q);
  const std::size_t k = kh + (features ? p.e + 1 : 0);
  std::vector<float> values(p.m * k);
  {
    const std::vector<double> h = detail::moment_values(p.y, p.m, p.q);
    for (std::size_t j = 0; j < p.m; ++j) {
      for (std::size_t c = 0; c < kh; ++c) values[j * k + c] = static_cast<float>(h[j * kh + c]);
      if (!features) continue;
      double norm = 0;
      for (std::size_t c = 0; c < p.e; ++c) {
        values[j * k + kh + c] = p.v[j * p.e + c];
        norm += static_cast<double>(p.v[j * p.e + c]) * p.v[j * p.e + c];
      }
      values[j * k + kh + p.e] = static_cast<float>(norm);
    }
  }

  GromovResult result;
  // ---- Coarse-to-fine start (§7): the same loop on a subsample, whose last cost and potentials start this one. --
  LevelState coarse;
  bool have_coarse = false;
  if (o.coarse_points > 0 && std::max(p.n, p.m) > 2 * static_cast<std::size_t>(o.coarse_points)) {
    const auto size = [&](std::size_t count) {
      const auto scaled = static_cast<std::size_t>(std::ceil(static_cast<double>(count) / o.coarse_factor));
      return std::min(count, std::max(static_cast<std::size_t>(o.coarse_points), scaled));
    };
    GromovProblem::Impl sub;
    sub.n = size(p.n);
    sub.m = size(p.m);
    sub.p = p.p;
    sub.q = p.q;
    sub.e = p.e;
    sub.backend = p.backend;
    const std::uint64_t seed_rows = 0x9e3779b97f4a7c15ULL ^ (p.n * 31 + level);
    const std::uint64_t seed_cols = 0xc2b2ae3d27d4eb4fULL ^ (p.m * 37 + level);
    if (o.coarse_stratified) {
      coarse.rows = detail::stratified_indices(p.x, p.p, p.u, p.e, p.n, sub.n, seed_rows);
      coarse.cols = detail::stratified_indices(p.y, p.q, p.v, p.e, p.m, sub.m, seed_cols);
    } else {
      coarse.rows = sample_indices(p.n, sub.n, seed_rows);
      coarse.cols = sample_indices(p.m, sub.m, seed_cols);
    }
    const auto take = [](const auto& from, const std::vector<std::size_t>& idx, std::size_t d, auto& to) {
      to.resize(idx.size() * d);
      for (std::size_t k = 0; k < idx.size(); ++k)
        for (std::size_t c = 0; c < d; ++c) to[k * d + c] = from[idx[k] * d + c];
    };
    take(p.x, coarse.rows, p.p, sub.x);
    take(p.y, coarse.cols, p.q, sub.y);
    if (p.e > 0) {
      take(p.u, coarse.rows, p.e, sub.u);
      take(p.v, coarse.cols, p.e, sub.v);
    }
    take(p.a, coarse.rows, 1, sub.a);
    take(p.b, coarse.cols, 1, sub.b);
    // The subsample carries the whole mass, so that its moments estimate this level's.
    double ta = 0, sa = 0, tb = 0, sb = 0;
    for (float w : p.a) ta += w;
    for (float w : sub.a) sa += w;
    for (float w : p.b) tb += w;
    for (float w : sub.b) sb += w;
    coarse.weight_a = sa > 0 ? ta / sa : 1;
    coarse.weight_b = sb > 0 ? tb / sb : 1;
    for (float& w : sub.a) w = static_cast<float>(w * coarse.weight_a);
    for (float& w : sub.b) w = static_cast<float>(w * coarse.weight_b);
    GromovOptions so = o;
    // A coarse level only starts the next one: its moments estimate the finer level's to the subsample's accuracy,
    // so it stops at the coarser of the two outer tolerances.
    so.outer_tolerance = std::max(o.outer_tolerance, o.coarse_tolerance);
    if (o.progress)
      so.progress = [&o](const GromovProgress& pr) { return o.progress(pr); };
    const GromovResult cr = solve_level(sub, so, level + 1, &coarse);
    result.coarse_history = cr.coarse_history;
    result.coarse_history.insert(result.coarse_history.end(), cr.history.begin(), cr.history.end());
    result.coarse_inner_iterations = cr.coarse_inner_iterations + cr.inner_iterations;
    result.coarse_seconds = cr.seconds;
    if (cr.reason == StopReason::kCancelled) {
      result.reason = cr.reason;
      result.message = "coarse level (" + std::to_string(sub.n) + " × " + std::to_string(sub.m) + "): " + cr.message;
      result.seconds = cr.seconds;
      return result;
    }
    // A coarse level that went non-finite hands nothing over: this level starts from a bᵀ as without one.
    have_coarse = cr.reason != StopReason::kNonFinite && !coarse.f_true.empty();
  }

  // The moments of P_0 = a bᵀ: row i of P_0·H is a_i·Σ_j b_j H_j.
  detail::PlanMoments moments;
  if (have_coarse) {
    moments = coarse.cost_moments;
  } else {
    const std::vector<double> h = detail::moment_values(p.y, p.m, p.q);
    std::vector<double> col(kh, 0.0);
    for (std::size_t j = 0; j < p.m; ++j)
      for (std::size_t c = 0; c < kh; ++c) col[c] += static_cast<double>(p.b[j]) * h[j * kh + c];
    std::vector<double> rows(p.n * kh);
    for (std::size_t i = 0; i < p.n; ++i)
      for (std::size_t c = 0; c < kh; ++c) rows[i * kh + c] = p.a[i] * col[c];
    moments = detail::reduce_moments(p.x, p.n, p.p, std::span<const double>(rows), kh, p.q);
  }

  result.epsilon = eps;
  std::vector<double> f_true, g_true;  // potentials of the true cost C (docs/gromov-wasserstein.md §4)
  double omega = 1;  // the last inner solve's over-relaxation: where the next one's auto ω starts
  double previous = std::numeric_limits<double>::quiet_NaN();
  double last_change = std::numeric_limits<double>::quiet_NaN();
  std::vector<float> phi(p.n * dim), psi(p.m * dim), wa(p.n), wb(p.m);
  std::vector<double> sep_a(p.n), sep_b(p.m);
  bool stop = false;
  std::vector<double> previous_moments;

  double eps_t = eps * std::max(1.0, o.annealing_start);
  bool previous_final = false;
  bool previous_settled = false;  // the last outer iteration's moments settled (coarse_stop_on_moments)
  bool previous_still = false;    // the last outer iteration converged with moments within settled_moment_tolerance
  // Outer acceleration (docs/gromov-wasserstein.md §8): the moments this iteration's cost is built from.
  // Coarse levels run the plain map: they only hand their last cost and potentials to the next level, and a mixed
  // last cost measured worse there (a different path of the finer level: 800 × 1000 from 200 × 250, 37 / 3,600
  // full-level iterations against 31 / 3,100; docs/gromov-wasserstein.md §8).
  const bool accelerate = o.outer_anderson_memory > 0 && out == nullptr;
  detail::MomentAnderson outer_mix(o.outer_anderson_memory);
  std::vector<double> cost_vector;
  bool cost_extrapolated = false;  // this iteration's cost came from the mix
  double adaptive_cap = o.first_tolerance;
  // Groups of the group correction (balanced problems), from the first outer iteration's augmented points.
  const bool group_correction = o.correction_groups > 0 && rho_x == 0 && rho_y == 0 &&
                                (o.anderson_memory >= 0 || o.plain_group_correction ||
                                 (o.level_start_correction && have_coarse));
  std::vector<int> source_group, target_group;
  int source_groups = 0, target_groups = 0;
  for (int t = 1; t <= o.max_outer && !stop; ++t) {
    const auto t_start = std::chrono::steady_clock::now();
    if (out) out->cost_moments = moments;
    if (accelerate) cost_vector = detail::flatten_moments(moments);
    // ---- The linearized cost at the current plan as ‖Φ_i − Ψ_j‖² + A_i + B_j. ----------------------------------
    std::fill(sep_a.begin(), sep_a.end(), 0.0);
    std::fill(sep_b.begin(), sep_b.end(), 0.0);
    if (features) {
      const float w = static_cast<float>(std::sqrt(1.0 - o.alpha));
      for (std::size_t i = 0; i < p.n; ++i)
        for (std::size_t c = 0; c < p.e; ++c) phi[i * dim + c] = w * p.u[i * p.e + c];
      for (std::size_t j = 0; j < p.m; ++j)
        for (std::size_t c = 0; c < p.e; ++c) psi[j * dim + c] = w * p.v[j * p.e + c];
    }
    if (gw) {
      const detail::GwLinearization lin = detail::linearize_gw(p.x, p.n, p.y, p.m, moments);
      // −4α⟨φ_i, ψ_j⟩ = −2⟨s∘φ_i, t∘ψ_j⟩ with s_c·t_c = 2α; each column balanced so that both sides' entries
      // have the same root-mean-square (small augmented norms keep the fp32 cost accurate).
      for (std::size_t c = 0; c < gw_width; ++c) {
        double sp = 0, sq = 0;
        for (std::size_t i = 0; i < p.n; ++i) sp += lin.phi[i * gw_width + c] * lin.phi[i * gw_width + c];
        for (std::size_t j = 0; j < p.m; ++j) sq += lin.psi[j * gw_width + c] * lin.psi[j * gw_width + c];
        const double rp = std::sqrt(sp / static_cast<double>(p.n)), rq = std::sqrt(sq / static_cast<double>(p.m));
        double s = 0, tc = 0;
        if (rp > 0 && rq > 0) {
          s = std::sqrt(2 * o.alpha * rq / rp);
          tc = 2 * o.alpha / s;
        }
        for (std::size_t i = 0; i < p.n; ++i) {
          const float val = static_cast<float>(s * lin.phi[i * gw_width + c]);
          phi[i * dim + fe + c] = val;
          sep_a[i] -= static_cast<double>(val) * val;
        }
        for (std::size_t j = 0; j < p.m; ++j) {
          const float val = static_cast<float>(tc * lin.psi[j * gw_width + c]);
          psi[j * dim + fe + c] = val;
          sep_b[j] -= static_cast<double>(val) * val;
        }
      }
      for (std::size_t i = 0; i < p.n; ++i) sep_a[i] += o.alpha * lin.sep_x[i];
      for (std::size_t j = 0; j < p.m; ++j) sep_b[j] += o.alpha * lin.sep_y[j];
    }
    if (t == 1 && o.annealing_start == 0) {
      // ε_1 = the squared diameter of the augmented points' union (what ε-scaling would start from).
      double d2 = 0;
      for (std::size_t c = 0; c < dim; ++c) {
        double lo = phi[c], hi = phi[c];
        for (std::size_t i = 0; i < p.n; ++i) lo = std::min<double>(lo, phi[i * dim + c]), hi = std::max<double>(hi, phi[i * dim + c]);
        for (std::size_t j = 0; j < p.m; ++j) lo = std::min<double>(lo, psi[j * dim + c]), hi = std::max<double>(hi, psi[j * dim + c]);
        d2 += (hi - lo) * (hi - lo);
      }
      eps_t = std::max(eps, d2);
    }
    if (t > 1) eps_t = std::max(eps, eps_t * o.annealing_factor);
    const bool at_final = eps_t <= eps;
    double tol_t = o.inner_tolerance;
    if (!at_final) tol_t = o.annealing_iterations > 0 ? 0.0 : std::max(tol_t, o.annealing_tolerance);
    else if (o.adaptive_tolerance > 0) {
      // Inexact inner solves: loose while the outer iterates move, tightened with the outer change, never loosened.
      const double proposal = std::isfinite(last_change) ? o.adaptive_tolerance * last_change : o.first_tolerance;
      tol_t = std::max(tol_t, std::min(adaptive_cap, proposal));
      adaptive_cap = tol_t;
    }
    // The first solve of a level started from a coarser one: the next cost differs from the coarse level's last by
    // the sampling difference of the two levels, whatever this solve's accuracy (docs/gromov-wasserstein.md §9).
    if (t == 1 && have_coarse && at_final && o.level_start_tolerance > tol_t) tol_t = o.level_start_tolerance;
    // The separable terms at this outer iteration's ε (separable.hpp); a constant may move between A and B (C is
    // unchanged): the largest weight factors are made equal.
    const detail::SeparableTerms separable(eps_t, rho_x, rho_y);
    separable.balance(sep_a, sep_b);
    wa = separable.source_weights(p.a, sep_a);
    wb = separable.target_weights(p.b, sep_b);

    if (group_correction && source_group.empty()) {
      if (o.correction_spatial_groups > 0 && fe > 0 && gw_width > 0) {
        source_group = product_groups(phi, p.n, dim, fe, o.correction_groups, o.correction_spatial_groups,
                                      0x243f6a8885a308d3ULL, source_groups);
        target_group = product_groups(psi, p.m, dim, fe, o.correction_groups, o.correction_spatial_groups,
                                      0x13198a2e03707344ULL, target_groups);
      } else {
        source_group = kmeans_groups(phi, p.n, dim, o.correction_groups, 0x243f6a8885a308d3ULL, source_groups);
        target_group = kmeans_groups(psi, p.m, dim, o.correction_groups, 0x13198a2e03707344ULL, target_groups);
      }
    }
    // ---- One entropic OT solve on the augmented points. ------------------------------------------------------
    p.problem.reset();  // the previous problem's device memory goes before the next one's is taken
    p.problem = std::make_unique<Problem>(PointsView{phi, p.n, dim}, PointsView{psi, p.m, dim}, wa, wb, p.backend);
    SolveOptions so;
    so.scheme = o.scheme;
    so.overrelaxation = o.overrelaxation;
    so.overrelaxation_start = o.warm_start ? omega : 1.0;
    so.tolerance = tol_t;
    so.check_every = o.check_every;
    so.max_iterations = tol_t == 0 ? o.annealing_iterations : o.inner_max_iterations;
    so.reach = o.reach;
    so.reach_source = o.reach_source;
    so.reach_target = o.reach_target;
    so.diagnostics = false;
    // Dense inner solves at every size: the Anderson loop calls the engine for one block of iterations at a time
    // from given potentials, where the multiscale solver (auto at n·m ≥ 4·10⁹: the 100k and 1M targets) would
    // redo its coarse stages at every call; and the augmented points (e + p + 1 dimensions, the GW columns
    // changing every outer iteration) give its block bounds little to prune.
    so.multiscale = Multiscale::kOff;
    if (t == 1 && have_coarse) {
      // The coarse level's last cost is this one's first (same moments, the same function of i and j), and its
      // potentials are that cost's on the coarse points. Soft c-transforms carry them to every point here: one
      // f-update of the engine against the coarse target points gives f^E (docs/gromov-wasserstein.md §7), and
      // the same with the roles swapped (the cost is symmetric) gives g^E.
      const auto transfer = [&](const std::vector<float>& rows_pts, std::size_t nr, const std::vector<float>& w_rows,
                                const std::vector<float>& cols_pts, const std::vector<std::size_t>& idx,
                                const std::vector<float>& w_cols, double scale, const std::vector<double>& h_true,
                                const std::vector<double>& sep_cols, double share_cols, double rho_rows,
                                double rho_cols) {
        std::vector<float> pts(idx.size() * dim), w(idx.size());
        SolveOptions to;
        to.initial_g.resize(idx.size());
        for (std::size_t k = 0; k < idx.size(); ++k) {
          for (std::size_t c = 0; c < dim; ++c) pts[k * dim + c] = cols_pts[idx[k] * dim + c];
          w[k] = static_cast<float>(w_cols[idx[k]] * scale);
          to.initial_g[k] = static_cast<float>(h_true[k] - share_cols * sep_cols[idx[k]]);
        }
        Problem transfer_problem(PointsView{rows_pts, nr, dim}, PointsView{pts, idx.size(), dim}, w_rows, w,
                                 p.backend);
        to.epsilon = eps_t;
        to.max_iterations = 1;
        to.tolerance = 0;
        to.scheme = Scheme::kAlternating;  // f from g first
        to.reach_source = std::sqrt(rho_rows);
        to.reach_target = std::sqrt(rho_cols);
        to.diagnostics = false;
        to.multiscale = Multiscale::kOff;
        const SolveResult r = transfer_problem.solve(to);
        return std::vector<double>(r.f.begin(), r.f.end());
      };
      const std::vector<double> fe = transfer(phi, p.n, wa, psi, coarse.cols, wb, coarse.weight_b, coarse.g_true,
                                              sep_b, separable.target_share(), rho_x, rho_y);
      const std::vector<double> ge = transfer(psi, p.m, wb, phi, coarse.rows, wa, coarse.weight_a, coarse.f_true,
                                              sep_a, separable.source_share(), rho_y, rho_x);
      bool finite = true;
      for (double v : fe) finite &= std::isfinite(v);
      for (double v : ge) finite &= std::isfinite(v);
      if (finite) {
        f_true.resize(p.n);
        g_true.resize(p.m);
        for (std::size_t i = 0; i < p.n; ++i) f_true[i] = fe[i] + separable.source_share() * sep_a[i];
        for (std::size_t j = 0; j < p.m; ++j) g_true[j] = ge[j] + separable.target_share() * sep_b[j];
      }
    }
    const bool warm = o.warm_start && !f_true.empty();
    if (tol_t == 0) so.epsilon = eps_t;
    if (tol_t == 0) {
      if (warm) {
        so.initial_f.resize(p.n);
        so.initial_g.resize(p.m);
        for (std::size_t i = 0; i < p.n; ++i)
          so.initial_f[i] = static_cast<float>(f_true[i] - separable.source_share() * sep_a[i]);
        for (std::size_t j = 0; j < p.m; ++j)
          so.initial_g[j] = static_cast<float>(g_true[j] - separable.target_share() * sep_b[j]);
      }
    } else if (warm) {
      so.epsilon = eps_t;
      // f = f^E + (1 − εκ)A  (docs/gromov-wasserstein.md §4), so the engine's f^E for the new A follows.
      so.initial_f.resize(p.n);
      so.initial_g.resize(p.m);
      for (std::size_t i = 0; i < p.n; ++i)
        so.initial_f[i] = static_cast<float>(f_true[i] - separable.source_share() * sep_a[i]);
      for (std::size_t j = 0; j < p.m; ++j)
        so.initial_g[j] = static_cast<float>(g_true[j] - separable.target_share() * sep_b[j]);
    } else if (o.epsilon_scaling) {
      so.blur = std::sqrt(eps_t);
      so.scaling = o.scaling;
    } else {
      so.epsilon = eps_t;
    }
    if (o.progress) {
      so.progress = [&, t](const Progress& pr) {
        return o.progress(GromovProgress{t, o.max_outer, pr.iteration, pr.marginal_error, previous, last_change});
      };
    }
    std::optional<GroupCorrection> groups;  // built at its first use, released with this outer iteration
    std::function<double(std::vector<double>&)> correct;
    const bool anderson = o.anderson_memory >= 0 && tol_t > 0;
    // The first solve after a coarse start inherits the coarse level's group shifts, which belong to the coarse
    // sample's proportions of cell types, not this level's (docs/gromov-wasserstein.md §7, "Level start").
    const bool correct_first = o.level_start_correction && t == 1 && have_coarse && warm;
    if (group_correction && tol_t > 0 && source_groups > 1 && target_groups > 1) {
      correct = [&](std::vector<double>& z) {
        if (!groups)
          groups.emplace(phi, p.n, psi, p.m, dim, wa, wb, source_group, source_groups, target_group, target_groups,
                         p.backend);
        const double e = groups->apply(z, eps_t);
        ++result.group_corrections;
        return e;
      };
    }
    SolveResult s = anderson
                        ? anderson_solve(*p.problem, so, o.anderson_memory, o.anderson_block, rho_x == 0 && rho_y == 0,
                                         o.plateau_search, correct, correct_first, o.correction_trigger)
                        : corrected_solve(*p.problem, so, correct, correct_first, o.plain_group_correction,
                                          o.correction_trigger);
    groups.reset();
    result.inner_iterations += s.iterations;
    result.outer_iterations = t;
    omega = std::clamp(s.overrelaxation, 1.0, 1.95);
    if (s.reason == StopReason::kNonFinite || s.reason == StopReason::kCancelled) {
      result.reason = s.reason;
      result.message = "outer iteration " + std::to_string(t) + ": " + s.message;
      result.plan = std::move(s);
      break;
    }
    f_true.resize(p.n);
    g_true.resize(p.m);
    for (std::size_t i = 0; i < p.n; ++i) f_true[i] = s.f[i] + separable.source_share() * sep_a[i];
    for (std::size_t j = 0; j < p.m; ++j) g_true[j] = s.g[j] + separable.target_share() * sep_b[j];

    // ---- The new plan's moments, energy and feature cost: one plan application. ------------------------------
    const std::vector<float> rows = p.problem->apply_plan(s, values, k);
    moments = detail::reduce_moments(p.x, p.n, p.p, std::span<const float>(rows), k, p.q);
    double feature_cost = 0;
    if (features) {
      for (std::size_t i = 0; i < p.n; ++i) {
        const float* row = rows.data() + i * k;
        const double r = row[0];
        if (!(r > 0)) continue;
        double dist = 0, tnorm = 0;
        for (std::size_t c = 0; c < p.e; ++c) {
          const double tv = row[kh + c] / r;
          dist += (p.u[i * p.e + c] - tv) * (p.u[i * p.e + c] - tv);
          tnorm += tv * tv;
        }
        feature_cost += r * dist + std::max(0.0, row[kh + p.e] - r * tnorm);
      }
    }
    const double energy = detail::gw_energy(moments);
    double moment_change = std::numeric_limits<double>::quiet_NaN();
    {
      std::vector<double> now = cost_moment_vector(moments);
      if (!previous_moments.empty()) {
        double diff = 0, norm = 0;
        for (std::size_t c = 0; c < now.size(); ++c) {
          diff += (now[c] - previous_moments[c]) * (now[c] - previous_moments[c]);
          norm += now[c] * now[c];
        }
        moment_change = std::sqrt(diff / std::max(norm, 1e-300));
      }
      previous_moments = std::move(now);
    }
    const double objective = (1 - o.alpha) * feature_cost + o.alpha * energy;
    const double change =
        std::isfinite(previous) ? std::abs(objective - previous) / std::max(std::abs(objective), 1e-300)
                                : std::numeric_limits<double>::quiet_NaN();
    GromovIteration it;
    it.outer = t;
    it.level = level;
    it.n = p.n;
    it.m = p.m;
    it.objective = objective;
    it.feature_cost = feature_cost;
    it.gw_cost = energy;
    it.change = change;
    it.moment_change = moment_change;
    it.inner_iterations = s.iterations;
    it.inner_converged = s.converged;
    it.marginal_error = s.marginal_error;
    it.mass = moments.mass;
    it.epsilon = eps_t;
    it.inner_tolerance = tol_t;
    it.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    it.extrapolated = cost_extrapolated;
    for (float v : s.f) it.largest_potential = std::max(it.largest_potential, std::abs(static_cast<double>(v)));
    for (float v : s.g) it.largest_potential = std::max(it.largest_potential, std::abs(static_cast<double>(v)));
    result.history.push_back(it);
    if (o.report) o.report(it);
    result.objective = objective;
    result.feature_cost = feature_cost;
    result.gw_cost = energy;
    const bool inner_ok = s.converged;
    const bool s_tol_final = tol_t <= o.inner_tolerance && previous_final;
    result.plan = std::move(s);
    if (!std::isfinite(objective)) {
      result.reason = StopReason::kNonFinite;
      result.message = "the objective became non-finite at outer iteration " + std::to_string(t);
      break;
    }
    if (accelerate) {
      // The next cost from the Anderson mix of (cost moments, plan moments) pairs. Only converged inner solves at
      // the final ε give the map's values; an extrapolated cost that left its inner solve unconverged or raised
      // the objective beyond the inner solves' noise restarts the memory, and the next cost is the plan's own.
      const bool usable = at_final && tol_t <= o.inner_tolerance && inner_ok;
      const bool rose = std::isfinite(previous) && objective - previous > o.inner_tolerance * std::abs(objective);
      const bool rejected = cost_extrapolated && rose;
      cost_extrapolated = false;
      if (!usable || rejected) {
        outer_mix.reset();
      } else {
        const std::vector<double> next = outer_mix.step(cost_vector, detail::flatten_moments(moments));
        if (outer_mix.extrapolated()) {
          detail::PlanMoments mixed = detail::unflatten_moments(next, p.p, p.q);
          if (mixed.mass > 0) {
            moments = std::move(mixed);
            cost_extrapolated = true;
            ++result.outer_extrapolations;
          }
        }
      }
    }
    previous = objective;
    last_change = change;
    previous_final = at_final;
    const bool moments_settled = o.moment_tolerance == 0 || (std::isfinite(moment_change) &&
                                                             moment_change <= o.moment_tolerance);
    // A coarse level only starts the next one, which takes its moments and potentials: once its objective and its
    // moments have settled (the moments twice in a row), an inner solve that cannot meet inner_tolerance in its
    // budget — a floor of the marginal error, measured at 25 000 points on the H200's plain path for 100 outer
    // iterations (docs/gromov-wasserstein.md §7, "Coarse levels on a floor") — no longer holds it.
    const bool coarse_settled = out != nullptr && o.coarse_stop_on_moments && moments_settled && previous_settled;
    previous_settled = moments_settled && std::isfinite(moment_change);
    // The moments settled for two converged outer iterations: what is left of the objective's change is the inner
    // solves' own progress below inner_tolerance (docs/gromov-wasserstein.md §8).
    const bool still = o.settled_moment_tolerance > 0 && inner_ok && std::isfinite(moment_change) &&
                       moment_change <= o.settled_moment_tolerance;
    const bool settled_stop = still && previous_still && at_final && s_tol_final;
    previous_still = still;
    if (settled_stop && !(std::isfinite(change) && change <= o.outer_tolerance && moments_settled)) {
      result.converged = true;
      result.reason = StopReason::kTolerance;
      result.message = "converged: moment change " + show(moment_change) + " ≤ " + show(o.settled_moment_tolerance) +
                       " (settled_moment_tolerance) in two outer iterations in a row with converged inner solves; " +
                       "relative objective change " + show(change) + " after " + std::to_string(t) +
                       " outer iterations (" + std::to_string(result.inner_iterations) + " Sinkhorn iterations)";
      stop = true;
    } else if (at_final && std::isfinite(change) && change <= o.outer_tolerance && moments_settled &&
        (inner_ok || coarse_settled) && s_tol_final) {
      result.converged = inner_ok;
      result.reason = StopReason::kTolerance;
      result.message = std::string(inner_ok ? "converged" : "coarse level settled") + ": relative objective change " +
                       show(change) + " ≤ " + show(o.outer_tolerance) + ", moment change " + show(moment_change) +
                       " ≤ " + show(o.moment_tolerance) + " after " + std::to_string(t) + " outer iterations (" +
                       std::to_string(result.inner_iterations) + " Sinkhorn iterations)" +
                       (inner_ok ? "" : "; its inner solve ended at marginal error " +
                                            show(result.plan.marginal_error) + " > " + show(o.inner_tolerance));
      stop = true;
    } else if (o.progress &&
               !o.progress(GromovProgress{t, o.max_outer, it.inner_iterations, it.marginal_error, objective, change})) {
      result.reason = StopReason::kCancelled;
      result.message = "cancelled by the progress callback after outer iteration " + std::to_string(t);
      stop = true;
    }
  }
  if (result.reason == StopReason::kIterationBudget)
    result.message = "not converged after max_outer = " + std::to_string(o.max_outer) +
                     " outer iterations: last relative objective change " + show(last_change) + " (tolerance " +
                     show(o.outer_tolerance) + ")";
  if (out) {
    out->f_true = std::move(f_true);
    out->g_true = std::move(g_true);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace

std::vector<float> GromovProblem::map_coordinates(const GromovResult& r) const {
  const Impl& p = *impl_;
  const Problem& problem = this->problem();
  const std::size_t k = p.q + 1;
  std::vector<float> v(p.m * k);
  for (std::size_t j = 0; j < p.m; ++j) {
    for (std::size_t c = 0; c < p.q; ++c) v[j * k + c] = static_cast<float>(p.y[j * p.q + c]);
    v[j * k + p.q] = 1.0f;
  }
  const std::vector<float> out = problem.apply_plan(r.plan, v, k);
  std::vector<float> mapped(p.n * p.q);
  for (std::size_t i = 0; i < p.n; ++i) {
    const double mass = out[i * k + p.q];
    for (std::size_t c = 0; c < p.q; ++c)
      mapped[i * p.q + c] = mass > 0 ? static_cast<float>(out[i * k + c] / mass + p.y_mean[c])
                                     : std::numeric_limits<float>::quiet_NaN();
  }
  return mapped;
}

}  // namespace flashot
