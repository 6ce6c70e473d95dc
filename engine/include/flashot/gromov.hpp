#pragma once
// Entropic fused Gromov–Wasserstein between two point sets whose geometry is squared-Euclidean on each side
// (tissue slices: spatial coordinates x, y and, optionally, expression embeddings u, v). The derivation and its
// accuracy are in docs/gromov-wasserstein.md.
//
// Plain C++20 only, like flashot.hpp. The objective, for a plan P with row sums r = P1 and column sums c = Pᵀ1:
//   F(P) = (1 − α)·⟨P, ‖u_i − v_j‖²⟩ + α·E(P),   E(P) = Σ_ijkl (‖x_i − x_k‖² − ‖y_j − y_l‖²)² P_ij P_kl
// (POT's fused GW loss with the square loss). Every outer iteration replaces E by its linearization at the current
// plan, ∇E(P)_ij = 2[Σ_k ‖x_i − x_k‖⁴ r_k + Σ_l ‖y_j − y_l‖⁴ c_l − 2 Σ_kl ‖x_i − x_k‖²‖y_j − y_l‖² P_kl], and
// solves one entropic OT problem with the cost C = (1 − α)‖u_i − v_j‖² + α∇E(P)_ij (ε, and the unbalanced KL
// penalties ρ = reach², exactly as SolveOptions defines them). That cost is a squared-Euclidean cost between
// augmented points Φ_i, Ψ_j of dimension e + p + 1 plus terms in i alone and j alone, so every solve streams
// through the ordinary engine (any backend) and nothing of size n×m is ever allocated.

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot {

/// The two point sets. x (n×p) and y (m×q) are the coordinates whose pairwise squared distances GW compares
/// (p and q may differ, 1 ≤ p, q ≤ 3 typically, any ≥ 1 works); u (n×e) and v (m×e) are features compared
/// directly, or empty (n = 0) for pure GW (then α must be 1). a (n), b (m): weights, empty for uniform.
struct GromovData {
  PointsView x;
  PointsView y;
  PointsView u;
  PointsView v;
  std::span<const float> a;
  std::span<const float> b;
};

/// Reported after every outer iteration and at every marginal-error check of the inner solves.
struct GromovProgress {
  int outer = 0;                 ///< 1-based index of the outer iteration under way
  int max_outer = 0;
  int inner_iteration = 0;       ///< Sinkhorn iterations of the current inner solve so far
  double marginal_error = 0;     ///< of the current inner solve (NaN between ε stages)
  double objective = 0;          ///< F of the last finished outer iteration (NaN before the first)
  double change = 0;             ///< its relative change (NaN before the second)
};
/// Return false to stop; the solve then ends with converged = false and reason kCancelled (no exception).
using GromovProgressCallback = std::function<bool(const GromovProgress&)>;

/// One outer iteration.
struct GromovIteration {
  int outer = 0;
  int level = 0;               ///< 0: the problem itself; k > 0: its k-th coarser subsample (coarse_points)
  std::size_t n = 0, m = 0;    ///< points of this level
  double objective = 0;        ///< F(P_t)
  double feature_cost = 0;     ///< ⟨P_t, ‖u − v‖²⟩ (0 without features)
  double gw_cost = 0;          ///< E(P_t)
  double change = 0;           ///< |F_t − F_{t−1}| / |F_t| (NaN at the first)
  double moment_change = 0;    ///< relative change of the cost's moments (docs/gromov-wasserstein.md §2; NaN at first)
  int inner_iterations = 0;
  bool inner_converged = false;
  double marginal_error = 0;   ///< of the inner solve
  double mass = 0;             ///< Σ P_t
  double epsilon = 0;          ///< ε of this outer iteration's inner solve
  double inner_tolerance = 0;  ///< the marginal-error tolerance it was solved to
  double seconds = 0;          ///< wall time of this outer iteration (solve + moments)
  bool extrapolated = false;   ///< its cost was built from Anderson-mixed moments (outer_anderson_memory)
  /// max |f_i|, |g_j| of the inner solve's engine potentials (cost units): against ε, what fp32 resolves of them
  /// (resolution ≈ 6·10⁻⁸ of this; docs/gromov-wasserstein.md §9)
  double largest_potential = 0;
};

struct GromovOptions {
  /// Weight of the GW term in [0, 1]; 1 − α weighs the feature term (0 needs no coordinates' structure: plain OT).
  double alpha = 0.5;
  /// Entropic regularization ε > 0 of every inner solve, in the units of the cost C above.
  double epsilon = 0;
  /// Unbalanced marginals: ρ = reach² (cost units); per side as in SolveOptions; 0 = balanced.
  double reach = 0;
  double reach_source = 0;
  double reach_target = 0;
  /// Outer loop: stop when |F_t − F_{t−1}| ≤ outer_tolerance·|F_t|, the inner solve converged, and ...
  int max_outer = 100;
  double outer_tolerance = 1e-6;
  /// ... and the moments the next cost is built from (μ, x̄, ȳ, M = XᵀPY, w, z, K, ⟨c, ‖y‖²⟩, ⟨r, ‖x‖²⟩) changed by
  /// at most this much relative to their norm: a plan drifting along a direction that barely changes F (near-
  /// symmetric problems) still moves them. 0: the objective test alone.
  double moment_tolerance = 1e-4;
  /// > 0: the loop also stops (converged) when two outer iterations in a row ended with a converged inner solve and
  /// moments that changed by at most this much, whatever the objective change. With the cost settled, a further
  /// outer iteration only continues the inner solve: at 20k × 20k the objective kept drifting by 1–4·10⁻⁵ relative
  /// per outer iteration (the marginal error falling from 9·10⁻⁵ to 3·10⁻⁵ in steps of 10 Sinkhorn iterations) for
  /// 11 outer iterations after the moments had settled to 5·10⁻⁶ (docs/gromov-wasserstein.md §8). 0: off.
  double settled_moment_tolerance = 1e-5;
  /// > 0: Anderson acceleration of the outer fixed point on the moments the next cost is built from (the cost
  /// depends on the plan only through them, §2): the next cost is built from the type-II Anderson mix of the last
  /// outer_anderson_memory + 1 pairs (moments of a cost, moments of the plan it gave) instead of the last plan's
  /// moments (docs/gromov-wasserstein.md §8). Pairs are taken only from outer iterations whose inner solve
  /// converged; the memory restarts when an inner solve does not converge or the objective after an extrapolated
  /// cost rose by more than inner_tolerance relative. The plan, its objective and every stopping test are still
  /// the plan's own. Coarse levels (coarse_points) run the plain map. 0: off (the plain outer loop).
  int outer_anderson_memory = 3;
  /// Inner solves: the SolveOptions of the same names (marginal error tolerance, budget per solve, check cadence).
  /// The budget is per outer iteration, not a convergence requirement: a solve cut short hands its potentials to
  /// the next outer iteration (warm start), and the loop stops only after a solve that met inner_tolerance. Short
  /// budgets make the early solves inexact while the plan is far from the fixed point (docs/gromov-wasserstein.md
  /// §6: 100 measured best with Anderson acceleration).
  double inner_tolerance = 1e-5;
  int inner_max_iterations = 100;
  int check_every = 10;
  Scheme scheme = Scheme::kAlternating;
  /// The first inner solve starts cold: ε-scaling from the augmented points' diameter down to ε, factor
  /// scaling² per stage (true), or ε directly (false). Later solves start from the previous potentials at ε.
  bool epsilon_scaling = true;
  double scaling = 0.5;
  /// Later inner solves start from the previous solve's potentials (carried through the change of cost), or
  /// from zero (false: only for measuring what the warm start saves).
  bool warm_start = true;
  /// Inner solves at the final ε run Anderson-accelerated (docs/gromov-wasserstein.md §4 "Inner solves"): the
  /// engine's iterate from `anderson_block` Sinkhorn iterations, extrapolated from the last `anderson_memory`
  /// residuals; −1 runs the engine's plain loop, 0 the same in blocks. The fixed point and the stopping rule
  /// (the engine's marginal-error check) are the plain loop's. Larger blocks cost fewer host round trips (the
  /// CUDA backend uploads the potentials at every block).
  int anderson_memory = 10;
  int anderson_block = 1;
  /// SolveOptions::overrelaxation of the inner solves (docs/engine.md, "Over-relaxation"): auto adapts ω within
  /// each plain inner solve (anderson_memory = −1); with Anderson acceleration every engine call is one block
  /// without two checks, so auto leaves those plain and only a fixed ω in (1, 2) changes them.
  double overrelaxation = kOverrelaxationAuto;
  /// Inner solves with Anderson acceleration (anderson_memory ≥ 0): at a marginal-error check that improved less
  /// than 3% on the last one (a plateau: a group of points whose potentials must shift rigidly across a cost gap
  /// before mass can cross to another group), search along the drift since the last check for the furthest
  /// point short of the turning point of the dual (docs/gromov-wasserstein.md §4, "Plateaus"). Changes the path
  /// only: the answer is still the engine's iterate and its own check.
  bool plateau_search = true;
  /// > 0: the group correction of the inner solves (docs/gromov-wasserstein.md §4, "Group correction"), balanced
  /// problems only: each side's augmented points are split into this many k-means groups, and at marginal-error
  /// checks that improved less than 3% on the last one the potentials are shifted by one constant per group,
  /// solved exactly so that the plan's mass between groups meets the group marginals (about one Sinkhorn
  /// iteration's work). The Anderson inner path (alternating with plateau_search); the plain path (anderson_memory
  /// = −1) only with plain_group_correction. Changes the path only. 0: off.
  int correction_groups = 32;
  /// > 0 (with features and a GW term): the correction's groups are the product of correction_groups k-means
  /// groups of the features and this many k-means groups of the GW columns (compact regions of each slice), so that
  /// a potential varying smoothly across one cell type's region is (nearly) constant on groups too
  /// (docs/gromov-wasserstein.md §7, "Measured and not taken"). 0: one k-means partition of the augmented points.
  int correction_spatial_groups = 0;
  /// The group correction on the plain inner path too (engine calls stopped at a flat check, corrected, restarted
  /// with ω carried). Off by default: on one H200 at 100k × 100k it held the coarse levels at a marginal error of
  /// 4.4·10⁻⁴ (not converged in 45 s) where the uncorrected plain path reached the full level in 45 s
  /// (docs/gromov-wasserstein.md §7).
  bool plain_group_correction = false;
  /// The group correction (correction_groups > 0, balanced problems) also at the first marginal-error check of the
  /// first inner solve of a level that starts from a coarser one (coarse_points), on either inner path: the coarse
  /// level's potentials carry group shifts for the coarse sample's proportions of cell types, not this level's
  /// (docs/gromov-wasserstein.md §7, "Level start": full-level inner iterations 530 → 440 at 5000², 660 → 560 at
  /// 2000²; on the H200's 100k plain path the plateau 0.0018 → 0.00063).
  bool level_start_correction = true;
  /// A marginal-error check that improved by less than this fraction on the last one triggers the group
  /// correction (the plateau search keeps its 3%). 0.03 is the measured default: 0.1 and 0.2 changed the path
  /// without shortening it (docs/gromov-wasserstein.md §7, "Measured and not taken").
  double correction_trigger = 0.03;
  /// > 0: inexact inner solves. The first is solved to `first_tolerance`, each later one to
  /// max(inner_tolerance, min(previous tolerance, adaptive_tolerance · last relative objective change)); the outer
  /// loop stops only after a solve at inner_tolerance. 0: every solve at inner_tolerance.
  double adaptive_tolerance = 0;
  double first_tolerance = 1e-2;
  /// ≠ 1: ε-annealing across outer iterations: the first runs at ε·annealing_start (0: at the augmented points'
  /// squared diameter), each next one at max(ε, previous·annealing_factor), solved to annealing_tolerance or for
  /// exactly annealing_iterations (> 0) Sinkhorn iterations; the stopping rule counts only iterations at ε.
  double annealing_start = 1;
  double annealing_factor = 0.5;
  double annealing_tolerance = 1e-2;
  int annealing_iterations = 0;
  /// Coarse-to-fine start (docs/gromov-wasserstein.md §7): when max(n, m) > 2·coarse_points, the loop first
  /// runs on a subsample (coarse_stratified) of max(coarse_points, n/coarse_factor) source and as many target
  /// points (itself coarse-started the same way), with the same options. The next cost depends on the plan only through the few
  /// moments of §2, which the subsample estimates: the full loop starts from the subsample's last cost instead of
  /// P_0 = a bᵀ, and its potentials from soft c-transforms of the subsample's, so its first solve is warm. The
  /// stopping rule of the full loop is unchanged. 0: off.
  int coarse_points = 1000;
  double coarse_factor = 4;
  /// The coarse subsample is a systematic sample along an order that keeps similar points together (k-means groups
  /// of the features, then a Morton curve of the coordinates within each), so that every group and region keeps
  /// its share of the points to within one point and the coarse level's fixed point is the finer level's in small
  /// (docs/gromov-wasserstein.md §9: at 20k × 20k the full level's inner iterations 400 → 240); false: a uniform
  /// random sample.
  bool coarse_stratified = true;
  /// > inner_tolerance: the first inner solve of a level started from a coarser one stops at this marginal error
  /// (docs/gromov-wasserstein.md §9–10); the next cost moves by the two levels' sampling difference whatever its
  /// accuracy. 0: inner_tolerance. 3e-4: 20k × 20k on 2 CPU cores 117 → 93 s, 100k on an H200 15.9 → 13.6 s.
  double level_start_tolerance = 3e-4;
  /// The coarse levels' outer tolerance is max(outer_tolerance, coarse_tolerance): they only start the next level
  /// (docs/gromov-wasserstein.md §7), whose own stopping rule is unchanged.
  double coarse_tolerance = 1e-5;
  /// A coarse level also stops when its objective change is within its tolerance and its moments changed by at
  /// most moment_tolerance in two outer iterations in a row, even if its last inner solve did not meet
  /// inner_tolerance: the next level needs its moments, and an inner solve on a floor of the marginal error held
  /// the H200's 25 000-point level for 100 outer iterations (docs/gromov-wasserstein.md §7). false: a coarse level
  /// stops only as the full one does.
  bool coarse_stop_on_moments = true;
  GromovProgressCallback progress;
  /// Called with each outer iteration's record as soon as it is finished (for logs; optional).
  std::function<void(const GromovIteration&)> report;
};

struct GromovResult {
  /// The last inner solve. Its potentials belong to GromovProblem::problem() (the augmented problem), so every
  /// plan operation of Problem — apply_plan, transfer_labels, top_k, row_marginal — works on P with it.
  SolveResult plan;
  double objective = 0;     ///< F of the final plan
  double feature_cost = 0;
  double gw_cost = 0;
  double epsilon = 0;
  bool converged = false;   ///< outer tolerance met with a converged inner solve
  StopReason reason = StopReason::kIterationBudget;  ///< kTolerance, kIterationBudget, kNonFinite, kCancelled
  std::string message;
  int outer_iterations = 0;
  int inner_iterations = 0;  ///< all inner solves together
  std::vector<GromovIteration> history;
  /// The coarse levels' outer iterations (coarse_points), coarsest first; their seconds are part of `seconds`,
  /// their Sinkhorn iterations are not part of inner_iterations (they are counted in coarse_inner_iterations).
  std::vector<GromovIteration> coarse_history;
  int coarse_inner_iterations = 0;
  int outer_extrapolations = 0;  ///< costs built from Anderson-mixed moments (GromovOptions::outer_anderson_memory)
  int group_corrections = 0;  ///< group corrections of this level's inner solves (GromovOptions::correction_groups)
  double coarse_seconds = 0;
  double seconds = 0;
};

/// A fused GW problem. The data are copied in; solve() builds one engine Problem per outer iteration (the
/// previous one is released first, so memory stays O((n + m)(e + p + q))). Not thread-safe.
class GromovProblem {
 public:
  /// Throws std::invalid_argument naming the input and value for: empty sets, data size ≠ n·d, non-finite values,
  /// u/v with a row count other than n/m or differing widths, bad weights. The backend is chosen by `options`.
  explicit GromovProblem(const GromovData& data, const BackendOptions& options = {});
  ~GromovProblem();
  GromovProblem(GromovProblem&&) noexcept;
  GromovProblem& operator=(GromovProblem&&) noexcept;
  GromovProblem(const GromovProblem&) = delete;
  GromovProblem& operator=(const GromovProblem&) = delete;

  std::size_t n() const;
  std::size_t m() const;

  /// Runs the outer loop from the product plan P_0 = a bᵀ (POT's default). Throws std::invalid_argument for bad
  /// options (α ∉ [0, 1], ε ≤ 0, α < 1 without features, …), naming the option and value; non-convergence and
  /// non-finite values are reported in the result.
  GromovResult solve(const GromovOptions& options);

  /// The augmented problem of the last solve (its plan is GromovResult::plan). Throws std::logic_error before
  /// any solve.
  const Problem& problem() const;

  /// Barycentric image of every source point's coordinates in the target's coordinate space: (P y)_i / (P 1)_i,
  /// (n×q) in the caller's units. Rows with no mass get NaN.
  std::vector<float> map_coordinates(const GromovResult& r) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashot
