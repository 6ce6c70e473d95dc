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

/// One problem of a batch whose points (and optional weights) are already on a CUDA device (a torch / CuPy tensor's
/// memory, a slice of a (B, N, D) tensor, a cudaMalloc buffer): DevicePointsView / DeviceWeights as
/// Problem::on_device takes them (weights: data null = uniform). Every problem's memory must be on the same device.
struct DeviceBatchProblem {
  DevicePointsView x;  ///< (n × d) source, device memory
  DevicePointsView y;  ///< (m × d) target
  DeviceWeights a;     ///< (n) weights, or data null for uniform
  DeviceWeights b;     ///< (m)
  SolveOptions options;  ///< as BatchProblem::options
};

/// solve_batch from device-resident inputs (docs/engine.md, "Batches from device memory"): the same concatenated
/// problem and the same results (within fp32 rounding) as solve_batch on the same values from host arrays, with
/// nothing of the points or weights passing through host memory. The validation (finite coordinates, weights finite
/// and ≥ 0 with a positive total), each problem's bounding box, centring and the padded concatenation run in a few
/// kernels over all problems at once; only per-problem bounds and totals come back (and, on the error path, the
/// offending row or weight). The caller's memory is read only while this runs and must hold its values by then
/// (work queued on the device's legacy default stream or on a blocking stream is waited for; other streams must be
/// synchronized by the caller). Throws std::invalid_argument naming the problem (its index) and the input, with
/// solve_batch's and Problem::on_device's messages ("batch problem 3: y has a non-finite coordinate at row 7,
/// column 1 (got nan)", "batch problem 0: b[5] must be a finite weight ≥ 0 (got -1)"), for memory that is not on
/// the device, and for problems on different devices; std::runtime_error as Problem::on_device for the CPU backend
/// ("a device-input Problem needs the CUDA backend …"), several devices, shards or ranks, or a build without CUDA.
std::vector<SolveResult> solve_batch_on_device(std::span<const DeviceBatchProblem> problems,
                                               const BackendOptions& backend = {});

}  // namespace flashot
