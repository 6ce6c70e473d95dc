#pragma once
// Batches of independent OT problems solved in one call (docs/engine.md, "Batches"): B problems of equal or ragged
// sizes, each with its own weights, ε schedule, tolerance, warm start and report, run as one concatenated problem
// whose block-diagonal block-sparse pattern (docs/block-sparse.md) keeps the problems apart — one launch per pass
// over all of them, and a converged problem's blocks leave the lists.

#include <span>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot {

/// One problem of a batch. The views must stay valid during solve_batch.
struct BatchProblem {
  PointsView x;                 ///< (n × d) source
  PointsView y;                 ///< (m × d) target
  std::span<const float> a;     ///< (n) weights, or empty for uniform
  std::span<const float> b;     ///< (m)
  /// Its own ε / blur / schedule, tolerance, budget, reach, cost, warm start (initial_f/g) and progress callback
  /// (a callback returning false cancels this problem only). `scheme` must be the same for every problem.
  SolveOptions options;
};

/// Solves every problem in one concatenated problem on one backend: results[q] is problem q's report, exactly as
/// Problem(x_q, y_q, a_q, b_q).solve(options_q) describes it (its own f (n_q), g (m_q), ε, stages, checks, stop
/// reason, marginal error, dual and primal cost); `seconds` is the whole batch's wall time.
/// Throws std::invalid_argument naming the problem (its index) and the input for: no problems, an empty source or
/// target (n or m = 0), dimensions that differ between problems, bad weights or options (as Problem and
/// Problem::solve), different schemes. Shards combined on the host (BackendOptions::shards, or several devices with
/// nccl = false) take the batch when their boundaries fall on its 256-row blocks (at least 1024 rows per shard);
/// std::runtime_error otherwise, and for ranks > 1 or several devices with nccl on.
std::vector<SolveResult> solve_batch(std::span<const BatchProblem> problems, const BackendOptions& backend = {});

}  // namespace flashot
