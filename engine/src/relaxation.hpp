#pragma once
// Over-relaxation of the final ε stage (docs/engine.md, "Over-relaxation"): the ω that the Sinkhorn loop
// (sinkhorn.cpp) and the multiscale loop (multiscale.cpp) pass in IterationParams::relaxation. Private to the engine.
//
// Near the fixed point the log-domain Sinkhorn map is linear. The alternating scheme is then a block Gauss–Seidel
// sweep whose error contracts by r per iteration, and Young's theory of successive over-relaxation for such
// two-block (consistently ordered) iterations gives the optimal ω = 2/(1 + √(1 − r)) with rate ω − 1 — about
// 1 − 2√(1 − r) instead of r, the square root of the iteration count (Thibault, Chizat, Dossal, Papadakis,
// "Overrelaxed Sinkhorn–Knopp"; Lehmann, von Renesse, Sambale, Uschmajew, "A note on overrelaxation in the Sinkhorn
// algorithm"). The symmetric scheme is a Jacobi step averaged with the old potentials; its iteration matrix has the
// eigenvalues ½(1 + μ), μ ∈ [−1, √r_J], and a longer step t = ½ω gains at most a factor 2: the mode (c, c) with
// μ = −1 contracts by |1 − ω|, the slow mode by 1 − ½ω(1 − √r_J), balanced at ω = 2/(2 − r) for the measured plain
// rate r.
//
// Auto mode estimates r from the marginal errors of successive checks: at ω = 1 the error ratio per iteration is r;
// at ω > 1 below the optimum the relaxed rate ρ still tells r (alternating: r = (ρ + ω − 1)²/(ρ·ω²), the SOR
// eigenvalue relation; symmetric: r = 1 − (1 − ρ)/ω). The estimate only grows (early checks see the fast modes, so
// they underestimate: a smaller ω is the safe side). The safeguard: when the error grows from one check to the
// next, ω falls halfway back toward 1 and the ω it had becomes out of reach (cap) for the rest of the stage.
//
// The loops run the iteration before each check plain (ω = 1): the marginal error of an over-relaxed iterate
// carries (ω − 1) times its last step (measured: ×5–9 at ω ≈ 1.8 on the 20k sphere pair of docs/multiscale.md),
// a plain one only the distance to the fixed point — so the checks, the stopping rule and the rate estimates see
// the convergence, and a change of ω does not look like divergence.

#include <algorithm>
#include <cmath>

#include "flashot/flashot.hpp"

namespace flashot::detail {

class Relaxation {
 public:
  /// option: SolveOptions::overrelaxation (validated: kOverrelaxationAuto, or in [1, 2)).
  /// start: auto mode's ω before its first estimate (SolveOptions::overrelaxation_start).
  Relaxation(double option, Scheme scheme, double start = 1)
      : auto_(option == kOverrelaxationAuto), scheme_(scheme) {
    omega_ = auto_ ? start : option;
  }

  /// ω for the next iterations.
  double omega() const { return omega_; }

  /// A marginal check after `iterations` iterations at omega() since the previous one: its error. Adapts ω
  /// (auto mode), or backs a fixed ω off toward 1 when the error stalls or grows.
  void observe(int iterations, double error) {
    if (!(error > 0) || !std::isfinite(error) || iterations <= 0) return;
    if (!(window_error_ > 0)) {  // the stage's first check: nothing to compare with
      best_ = window_error_ = error;
      return;
    }
    if (fresh_) {  // the first check at a new ω: its error is the new baseline (a change of ω moves the error)
      fresh_ = false;
      best_ = error;
      stall_ = 0;
      restart(error);
      return;
    }
    // The relaxed error is not monotone (ω > 1 rotates the slow modes), so a single rise proves nothing: back off
    // when no check has improved on the best error for kStall checks, or the error is far above it.
    if (error < best_) {
      best_ = error;
      stall_ = 0;
    } else {
      ++stall_;
    }
    if (omega_ > 1 && (stall_ >= kStall || error > kBlowUp * best_)) {
      cap_ = std::min(cap_, omega_);
      omega_ = 1 + 0.5 * (omega_ - 1);
      fresh_ = true;
      return;
    }
    window_iterations_ += iterations;
    if (++window_checks_ < kWindow || !auto_) return;
    // The rate over the window (kWindow checks at one ω) smooths the oscillation of the relaxed error.
    const double rho = std::pow(error / window_error_, 1.0 / window_iterations_);
    restart(error);
    if (!(rho < 1)) return;
    double r = -1;
    if (omega_ == 1) {
      r = rho;
    } else if (rho > omega_ - 1) {  // below the optimum: the slow mode still sets the rate
      r = scheme_ == Scheme::kAlternating ? (rho + omega_ - 1) * (rho + omega_ - 1) / (rho * omega_ * omega_)
                                          : 1 - (1 - rho) / omega_;
    }
    if (!(r > rate_)) return;
    rate_ = std::min(r, kMaxRate);
    const double best = scheme_ == Scheme::kAlternating ? 2 / (1 + std::sqrt(1 - rate_)) : 2 / (2 - rate_);
    // Below the cap (an ω that stalled), never above kMaxOmega.
    const double next = std::max(omega_, std::min({best, kMaxOmega, 1 + 0.95 * (cap_ - 1)}));
    fresh_ = next != omega_;
    omega_ = next;
  }

  /// The largest ω auto mode picks (its rate ω − 1 = 0.95 is the slowest it accepts).
  static constexpr double kMaxOmega = 1.95;

 private:
  static constexpr double kMaxRate = 0.999999;
  static constexpr int kStall = 4;       // checks without a new best error before ω backs off
  static constexpr double kBlowUp = 10;  // an error this far above the best backs ω off at once
  static constexpr int kWindow = 3;      // checks per rate estimate

  void restart(double error) {
    window_error_ = error;
    window_iterations_ = 0;
    window_checks_ = 0;
  }

  bool auto_;
  Scheme scheme_;
  double omega_ = 1;
  double rate_ = 0;        // the plain iteration's estimated rate r
  double cap_ = 2;         // ω known to make the error grow
  double best_ = 0;          // the stage's smallest error since ω last backed off
  int stall_ = 0;            // checks since best_ improved
  bool fresh_ = false;       // ω changed since the last check
  double window_error_ = 0;  // the error at the start of the rate window
  int window_iterations_ = 0, window_checks_ = 0;
};

}  // namespace flashot::detail
