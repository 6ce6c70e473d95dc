#pragma once
// The algebra of the linearized fused GW cost (docs/gromov-wasserstein.md), apart from any backend: the moment
// columns a plan application must return, their reduction to the few numbers the next cost depends on, the
// augmented points and separable terms of that cost, and the GW energy of the plan. Private to the engine;
// tests/engine/gromov_test.cpp checks it against dense fp64 evaluations.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace flashot::detail {

/// `count` of the n points of one side, for a coarse level (docs/gromov-wasserstein.md §9): a systematic sample
/// along an order that keeps similar points together. The points are split into 32 k-means groups of their
/// features u (n×e, fp32; one group when e = 0), each group is ordered along a Morton curve of the first three
/// columns of its coordinates x (n×p, fp64), and every (n/count)-th point of that sequence is taken from an
/// offset drawn from `seed`. Each group, and each stretch of space within it, keeps its share of the points to
/// within one point, where a uniform random sample keeps it only to binomial noise (a group of 5000 of 20 000
/// points: 1250 ± 30 in a quarter sample) — the noise that set the coarse level's moments and group shifts apart
/// from the finer level's. Returns sorted, distinct indices; count ≤ n.
std::vector<std::size_t> stratified_indices(const std::vector<double>& x, std::size_t p, const std::vector<float>& u,
                                            std::size_t e, std::size_t n, std::size_t count, std::uint64_t seed);

/// Columns of H(y_j) for q-dimensional target coordinates, in this order:
///   1 | y (q) | ‖y‖² | ‖y‖²·y (q) | ‖y‖⁴ | y_a·y_b for a ≤ b (q(q+1)/2)
std::size_t moment_columns(std::size_t q);
/// H(y) for every row of y (m×q, fp64), (m × moment_columns(q)) fp64.
std::vector<double> moment_values(std::span<const double> y, std::size_t m, std::size_t q);

/// Everything the linearized cost and the energy need from a plan P, from R = P·H(y) (n × moment_columns(q))
/// and the source coordinates x (n×p). Sums over i in fp64.
struct PlanMoments {
  std::size_t p = 0, q = 0;
  double mass = 0;                  // μ = Σ P
  std::vector<double> xbar;         // (p) Σ_i r_i x_i
  std::vector<double> ybar;         // (q) Σ_j c_j y_j
  std::vector<double> cross;        // (p×q) M = Xᵀ P Y
  double c_ny = 0;                  // Σ_j c_j ‖y_j‖²
  double r_nx = 0;                  // Σ_i r_i ‖x_i‖²
  std::vector<double> w;            // (p) Σ_ij P_ij x_i ‖y_j‖²
  std::vector<double> z;            // (q) Σ_ij P_ij ‖x_i‖² y_j
  double k = 0;                     // Σ_ij P_ij ‖x_i‖²‖y_j‖²
  std::vector<double> sx;           // (p×p) Σ_i r_i x_i x_iᵀ
  std::vector<double> x3;           // (p) Σ_i r_i ‖x_i‖² x_i
  double x4 = 0;                    // Σ_i r_i ‖x_i‖⁴
  std::vector<double> sy;           // (q×q) Σ_j c_j y_j y_jᵀ
  std::vector<double> y3;           // (q) Σ_j c_j ‖y_j‖² y_j
  double y4 = 0;                    // Σ_j c_j ‖y_j‖⁴
};

PlanMoments reduce_moments(std::span<const double> x, std::size_t n, std::size_t p, std::span<const float> r_h,
                           std::size_t stride, std::size_t q);
/// The same from an fp64 R (tests).
PlanMoments reduce_moments(std::span<const double> x, std::size_t n, std::size_t p, std::span<const double> r_h,
                           std::size_t stride, std::size_t q);

/// Every number of a PlanMoments as one vector (its fields in declaration order), and back: the outer loop's
/// acceleration (MomentAnderson) extrapolates the moments the next cost is built from.
std::vector<double> flatten_moments(const PlanMoments& mo);
/// Throws std::invalid_argument when v's size is not flatten_moments' size for (p, q).
PlanMoments unflatten_moments(std::span<const double> v, std::size_t p, std::size_t q);

/// Type-II Anderson acceleration of the outer fixed point m ↦ G(m) (docs/gromov-wasserstein.md §8): m are the
/// moments a linearized cost was built from, G(m) the moments of the plan that cost gave. From the last
/// `memory` + 1 pairs (m_k, G_k) with residuals f_k = G_k − m_k, the next cost's moments are
///   m⁺ = G_t − ΔG·γ,   γ = argmin ‖f_t − ΔF·γ‖   (ΔF, ΔG: differences of consecutive f_k, G_k),
/// solved on the (memory × memory) Gram matrix with a relative Tikhonov term. The vectors are a few dozen numbers,
/// so the cost is nothing beside one plan application.
///
/// Safeguards (a fixed-point solver is drawn to every fixed point, the outer loop's repelling ones too — the
/// product plan of a symmetric pure-GW problem): it extrapolates only while the residual norms of the pairs it
/// holds fall monotonically (the loop contracts there), at least two differences held; a step whose next residual
/// is not smaller than the one it started from restarts the memory from the new pair; a mix that is not finite
/// or steps more than kMaxStep·‖f_t‖ from G_t is not taken (memory restarts). The caller restarts it too (reset)
/// on its own evidence (an unconverged inner solve, a rise of the objective).
class MomentAnderson {
 public:
  explicit MomentAnderson(int memory) : memory_(memory) {}
  /// Adds (m, G(m)) and returns the next cost's moments: the mix, or G(m) itself; `extrapolated()` says which.
  std::vector<double> step(std::span<const double> m, std::span<const double> g);
  void reset();
  bool extrapolated() const { return extrapolated_; }
  /// A contraction of rate ρ needs steps of about ‖f‖/(1 − ρ): 100 admits ρ up to 0.99.
  static constexpr double kMaxStep = 100;

 private:
  int memory_;
  std::vector<std::vector<double>> f_, g_;  // the last memory + 1 residuals and images, oldest first
  std::vector<double> norms_;               // their norms
  bool extrapolated_ = false;
};

/// E(P) = Σ_ijkl (‖x_i − x_k‖² − ‖y_j − y_l‖²)² P_ij P_kl from the moments alone.
double gw_energy(const PlanMoments& mo);

/// The GW part of the linearized cost at P, split as  ∇E(P)_ij = −4⟨φ_i, ψ_j⟩ + sep_x_i + sep_y_j
/// with φ_i = [‖x_i‖², x_i] (p + 1) and ψ_j = [μ‖y_j‖² − 2ȳ·y_j, 4M y_j − 2x̄‖y_j‖²] (p + 1).
struct GwLinearization {
  std::size_t width = 0;            // p + 1
  std::vector<double> phi;          // (n × width)
  std::vector<double> psi;          // (m × width)
  std::vector<double> sep_x;        // (n) 2·Σ_k ‖x_i − x_k‖⁴ r_k − 4·(terms of Σ_kl D^x D^y P in i alone)
  std::vector<double> sep_y;        // (m) likewise in j alone
};
GwLinearization linearize_gw(std::span<const double> x, std::size_t n, std::span<const double> y, std::size_t m,
                             const PlanMoments& mo);

/// Solves the `k`×`k` system G γ = rhs in place (Gaussian elimination with partial pivoting; G is overwritten,
/// rhs becomes γ); false when G is singular.
bool solve_small(std::vector<double>& g, std::vector<double>& rhs, std::size_t k);

}  // namespace flashot::detail
