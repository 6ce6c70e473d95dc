#pragma once
// `flashot flow`: a gradient flow (or damped Newton flow) of a source cloud towards a target through the entropic
// OT cost (docs/differentiation.md). The algorithm (run_flow) is apart from the command line so the GUI can animate
// it; flow_main is the subcommand.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "flashot/differentiation.hpp"
#include "flashot/flashot.hpp"

namespace flashot::workflow {

enum class FlowLoss {
  kDivergence,  ///< debiased S(x, y) = OT(x,y) − ½OT(x,x) − ½OT(y,y): its minimiser is the target itself
  kTransport,   ///< OT_ε(x, y): cheaper (one solve per step), but its minimiser is shrunk by the blur
};
std::string to_string(FlowLoss);
/// "divergence", "ot"; throws std::invalid_argument naming the text.
FlowLoss parse_flow_loss(const std::string& text);

struct FlowOptions {
  FlowLoss loss = FlowLoss::kDivergence;
  int steps = 50;
  /// Gradient flow: x_i ← x_i − τ·∇_i / (2s·a_i) (the Wasserstein-gradient step; τ = 1 on OT_ε moves every point to
  /// its barycentric target). Newton: x ← x + τ·d. In (0, 1]. A step whose loss rises is halved (backtracking).
  double step_size = 0.25;
  double blur = 0;   ///< data units; 0 = kDefaultBlurRelative (0.05) × the clouds' diameter. ε = blur² (cost units).
  double reach = 0;  ///< data units, both sides; 0 = balanced
  Cost cost = Cost::kSquaredEuclidean;
  bool newton = false;
  /// Newton: d solves (H + λ·2s·diag(a)) d = −∇ by truncated CG (stopped at negative curvature), H = ∇²_x OT_ε(x, y)
  /// (for the divergence the self-transport's curvature is left out).
  double damping = 0.1;
  int newton_iterations = 10;  ///< outer CG iterations per step (each one Hessian-vector product)
  double newton_tolerance = 1e-2;
  CgOptions hvp_cg{1e-4, 200};  ///< the inner CG of each Hessian-vector product
  int save_every = 1;           ///< keep positions every this many steps (step 0 and the last are always kept)
  int solve_iterations = 1000;  ///< Sinkhorn budget per solve (warm-started from the previous step)
  double solve_tolerance = 1e-4;
  BackendOptions backend;
};

struct FlowStep {
  int step = 0;
  double loss = 0;           ///< the loss at the positions before this step's move
  double gradient_norm = 0;  ///< ‖∇‖₂
  double displacement = 0;   ///< largest distance a point moved in this step
  double step_size = 0;      ///< τ taken: the option's, halved while the loss rose (at most 6 times)
  int sinkhorn_iterations = 0;  ///< the solves at every trial point (and, at step 0, at the input)
  int newton_iterations = 0;  ///< outer CG iterations (0 for a gradient step)
  int hvp_cg_iterations = 0;  ///< inner CG iterations, all products of this step together
  bool hvp_converged = true;  ///< every inner CG converged
  bool solves_converged = true;
};

struct FlowResult {
  std::vector<int> saved_steps;               ///< step index of each saved frame (0 = the input)
  std::vector<std::vector<float>> positions;  ///< one (n×d) frame per saved step
  std::vector<FlowStep> steps;
  double final_loss = 0;
  double blur = 0;
  double seconds = 0;
  std::string backend, device;
};

/// `progress(step, steps, loss)` after each step; return false to stop early (the frames so far are returned).
using FlowProgress = std::function<bool(int, int, double)>;

/// Moves `source` (n×d) towards `target` (m×d) with uniform weights. Throws std::invalid_argument for bad options
/// (naming the option and value) and as flashot::Problem for bad points.
FlowResult run_flow(PointsView source, PointsView target, const FlowOptions& options,
                    const FlowProgress& progress = {});

}  // namespace flashot::workflow

namespace flashot::cli {

/// flashot flow SOURCE.ply TARGET.ply -o OUT.ply [--steps N] [--step-size T] [--blur B] [--newton] …
/// OUT is SOURCE with x, y, z at the final positions and x_step<k>, y_step<k>, z_step<k> float vertex properties
/// for every saved step k (x_step0 = the input). Returns 0, or throws (UsageError → exit 2, others → 1).
int flow_main(const std::vector<std::string>& args);

}  // namespace flashot::cli
