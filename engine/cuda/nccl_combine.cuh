#pragma once
// Device side of the shard combination (docs/design.md §5): between two NCCL all-reduces over m-vectors (MAX of the
// shards' base-2 log-sum-exps L_s, then SUM of 2^(L_s − M)), these kernels form each shard's share and turn the
// reduced pair into the soft c-transform or the potential update, on the device, with no host round-trip. The
// arithmetic is shard_math.hpp's, unit-tested on the host.

#include <cuda_runtime.h>

#include "kernels.cuh"

namespace flashot::detail::cuda {

/// out (count) = the (max, sum) pair of each point's `splits` LSE partials (splits × count, kernels.cuh's layout),
/// merged as the finalize kernel merges them (a point without mass: (kNoMax, 0)). guard (may be null): nothing is
/// done unless *guard != 0. A shard's contribution to the column combination (DeviceStep).
void launch_merge_partials(const float2* partials, int splits, int count, float2* out, const int* guard,
                           cudaStream_t stream);

/// share (count) = 2^(lse − max), 0 where this shard has no mass.
void launch_lse_share(const float* lse, const float* max, float* share, int count, cudaStream_t stream);

/// From the reduced pair (max, sum) of every column: softmin_j = s‖y_j‖² − ε·ln2·(max_j + log2 sum_j), then, by
/// mode, out = softmin (kSoftmin), out = λ·softmin (kAlternating), out = ½(out + λ·softmin) (kSymmetric), or
/// (kCommit, the one-pass symmetric step) out = ½(out + tmp) unless *redo, else as kSymmetric.
/// Sets *nonfinite when a result is not finite.
void launch_combined_update(Finalize mode, const float* max, const float* sum, const float* norm2, double epsilon,
                            float s, float lambda, float* out, int count, int* nonfinite, cudaStream_t stream,
                            const int* redo = nullptr, const float* tmp = nullptr);

/// values (count × k) *= 2^(lse − max) / sum row by row: a shard's normalized result weighted by its share of the
/// row's mass, ready to be summed over shards. Rows where the shard has no mass become 0 (never NaN).
void launch_weight_by_share(const float* lse, const float* max, const float* sum, float* values, int count, int k,
                            cudaStream_t stream);

}  // namespace flashot::detail::cuda
