#pragma once
// The per-device step of the CUDA backend (docs/engine.md, docs/multi-gpu.md): one device's rows of x (all of them on
// one GPU, a contiguous shard of them on several), all of y, the potentials, the operands and plans of every score
// path (fp32 FMA, mma.sync and warpgroup tensor cores, tile screening, the one-exponential symmetric step), the
// captured iteration and the operations. The one-GPU backend is one DeviceStep; the multi-GPU backend is one
// DeviceStep per device plus the collectives, which the step asks for through a ShardLink at the points where the
// column side of a shard is only partial:
//   * the one-pass symmetric step's column sums (SUM over the shards before the finish kernel),
//   * the column LSE partials of any pass (each shard merges its splits into one (max, sum) pair per column, the
//     pairs of all shards are gathered and the finalize kernel merges them as it merges splits: exact),
//   * the step's redo flag, the next step's forecast and the non-finite flag (MAX, so that every shard takes the same
//     path and stops together),
//   * Pᵀ·V and its weight sums (SUM), all with one column shift, the combined LSE of the columns.
// Row-side results (f, P·V, top-k, soft c-transforms of the rows) stay local to the shard; the backend gathers them.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "backend.hpp"

namespace flashot::detail::cuda {

/// Collectives over the shards of one problem, on the calling shard's stream (NCCL in nccl_backend.cu). Every shard
/// makes the same calls in the same order.
class ShardLink {
 public:
  virtual ~ShardLink() = default;
  /// Number of shards, all processes together.
  virtual int shards() const = 0;
  /// In place, over the shards: SUM of `count` floats; MAX of `count` 32-bit words read as unsigned / as float.
  virtual void sum(float* data, std::size_t count, cudaStream_t stream) const = 0;
  virtual void max_unsigned(void* data, std::size_t count, cudaStream_t stream) const = 0;
  virtual void max_float(float* data, std::size_t count, cudaStream_t stream) const = 0;
  /// all (shards × count float2) = every shard's `mine` (count float2), shard s at all + s·count.
  virtual void gather(const float2* mine, float2* all, std::size_t count, cudaStream_t stream) const = 0;
};

/// Bytes a DeviceStep of (n rows × m columns × d) takes on its device before any operation, about (the resident
/// data, operands, tiles and iteration scratch); what the out-of-memory check compares with the free memory.
/// The largest |coordinate| of a point set (what DeviceStep's `largest` takes, over x and y).
float largest_coordinate(const PointsView& p);

/// biased: the one-pass sums with the biases on the tensor cores (ScoreKernel::kTensorBias, d ≤ 30) as well.
std::size_t step_resident_bytes(std::size_t n, std::size_t m, std::size_t d, bool tensor_cores, bool split,
                                bool warpgroup, bool biased = false);

class DeviceStep {
 public:
  /// data: this device's rows of x (with a) and all of y (with b); rows_total: x's rows over all shards (1 shard:
  /// data.x.n). link: null on one device. largest: the largest |coordinate| of all of x and y (the tensor-core
  /// operands' power-of-two scale comes from it, so that every shard rounds a point exactly as one GPU does); 0: from
  /// `data`. Throws std::runtime_error naming the bytes needed and the bytes the device has when the problem does not
  /// fit.
  DeviceStep(const BackendOptions& options, int device, const ProblemData& data, std::size_t rows_total,
             const ShardLink* link, float largest = 0);
  ~DeviceStep();
  DeviceStep(const DeviceStep&) = delete;
  DeviceStep& operator=(const DeviceStep&) = delete;

  int device() const;
  cudaStream_t stream() const;
  std::string description() const;
  EngineStatistics statistics() const;

  /// f: this shard's rows (n), g: all columns (m).
  void set_potentials(std::span<const float> f, std::span<const float> g);
  void get_potentials(std::span<float> f, std::span<float> g) const;
  /// Backend::iterate; on several shards, a collective (the returned flag is the same on every shard).
  bool iterate(const IterationParams& p, int count);
  /// rows = kSource: out (this shard's n) local; kTarget: out (m) over all shards.
  void softmin(const PlanParams& p, Side rows, std::span<float> out) const;
  /// rows = kSource: out (n × k) = this shard's rows of P·V, v (m × k); kTarget: out (m × k) = Pᵀ·V over all
  /// shards, v (n × k) this shard's rows of V.
  void apply(const PlanParams& p, Side rows, std::span<const float> v, std::size_t k, bool normalized,
             std::span<float> out) const;
  /// Backend::apply_bilinear's fused pass with the same sharding as apply (u, w, v: the local rows of x's side);
  /// false where the fused pass does not serve the shape (the caller then takes Backend's default).
  bool apply_bilinear(const PlanParams& p, Side rows, std::span<const float> u, std::span<const float> w,
                      std::size_t e, std::span<const float> v, std::size_t k, std::span<float> out) const;
  /// from = kSource: every query through all of y (local, whole result); kTarget: through x's rows, over all
  /// shards, v (n × k) this shard's rows.
  void apply_queries(const PlanParams& p, Side from, PointsView q, std::span<const float> v, std::size_t k,
                     std::span<float> out) const;
  /// Backend::set_pattern (one device only for now: a step with a ShardLink refuses a pattern).
  void set_pattern(std::shared_ptr<const BlockPattern> pattern);
  /// Backend::c_transform on this shard: rows = kSource: this shard's rows of x against all of y, h (m); kTarget:
  /// every column against this shard's rows of x, h (this shard's n), index local to the shard.
  void c_transform(double cost_scale, Side rows, std::span<const float> h, std::span<double> values,
                   std::span<std::int32_t> index) const;
  /// Backend::c_transform_rounded on this shard (one device: the whole side), rounded on the device.
  void c_transform_rounded(double cost_scale, Side rows, std::span<const float> h, std::vector<float>& values,
                           std::vector<std::int32_t>& index) const;
  /// This shard's rows.
  void top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns, std::span<float> values) const;
  /// Backend's operations over the resident points (device inputs; one device): apply_points, map_resident,
  /// points_gradient, resident_primal_terms.
  void apply_points(const PlanParams& p, Side rows, bool normalized, std::span<float> out) const;
  void map_resident(const PlanParams& p, Side from, PointsView q, std::span<float> out) const;
  void points_gradient(const PlanParams& p, Side wrt, std::span<float> out) const;
  void resident_primal_terms(const PlanParams& p, std::span<double> terms) const;
  /// Backend::weighted_sums over the resident weights (one device: this shard's rows of x, all of y).
  WeightedSums weighted_sums(Side side, std::size_t offset, std::span<const float> h, std::span<const float> hh,
                             double epsilon, double rho) const;
  /// Backend::batch_weighted_sums: every range in one launch.
  void batch_weighted_sums(Side side, std::span<const WeightedRange> ranges, std::span<const float> h,
                           std::span<const float> hh, std::span<WeightedSums> out) const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashot::detail::cuda
