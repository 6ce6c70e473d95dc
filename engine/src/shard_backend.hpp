#pragma once
// One problem on several shards of x's rows (docs/design.md §5, docs/multi-gpu.md). Private to the engine.
//
// Every shard holds a contiguous range of x's rows (with their weights and f) and all of y (with b and g). Row-side
// operations (the f-update, P·V, top-k, maps of source queries) are local to a shard; column-side ones (the
// g-update, Pᵀ·U, column marginals) combine the shards' partial results exactly: soft c-transforms through
// −ε·log Σ_s exp(−h_s/ε), plan sums by addition, normalized results by each shard's share of the column's mass.

#include <functional>
#include <memory>

#include "backend.hpp"

namespace flashot::detail {

/// Makes the backend of one shard (make_backend, with the sharding fields cleared and `device` set).
using BackendFactory = std::function<std::unique_ptr<Backend>(const BackendOptions&, const ProblemData&)>;

/// Shards on the host: G children built by `make_child` (any kind: CPU shards, or CUDA shards on the devices
/// listed in options.devices) combined on the host. CUDA children run concurrently, one host thread per shard.
/// Throws std::invalid_argument for inconsistent sharding fields or more shards than rows, and
/// std::runtime_error for ranks > 1 (several processes need the NCCL path).
std::unique_ptr<Backend> make_sharded_backend(const BackendOptions& options, const ProblemData& data,
                                              const BackendFactory& make_child);

/// CUDA shards combined on the devices with NCCL (engine/cuda/nccl_backend.cu): one communicator per device in one
/// process, or one rank per process bootstrapped through MPI (options.ranks > 1). Linked only when CUDA is
/// compiled in; registry.cpp calls it under its one #if. Throws std::runtime_error when NCCL cannot start.
std::unique_ptr<Backend> make_nccl_backend(const BackendOptions& options, const ProblemData& data);

}  // namespace flashot::detail
