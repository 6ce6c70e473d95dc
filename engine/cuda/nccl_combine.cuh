#pragma once
// Device side of the shard combination (docs/design.md §5, docs/multi-gpu.md): a shard's column LSE partials merged
// into one (max, sum) pair per column, which the shards then all-gather and the finalize kernel merges exactly as it
// merges a device's column splits (DeviceStep, device_step.hpp).

#include <cuda_runtime.h>

#include "kernels.cuh"

namespace flashot::detail::cuda {

/// out (count) = the (max, sum) pair of each point's `splits` LSE partials (splits × count, kernels.cuh's layout),
/// merged as the finalize kernel merges them (a point without mass: (kNoMax, 0)). guard (may be null): nothing is
/// done unless *guard != 0. A shard's contribution to the column combination (DeviceStep).
void launch_merge_partials(const float2* partials, int splits, int count, float2* out, const int* guard,
                           cudaStream_t stream);

}  // namespace flashot::detail::cuda
