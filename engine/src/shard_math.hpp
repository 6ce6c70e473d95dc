#pragma once
// The exact combination of per-shard log-sum-exps (docs/design.md §5), written once for the host and the device.
//
// With x's rows cut into shards S_1..S_G, a column's log-sum-exp over all rows is the log-sum-exp of the shards'
// log-sum-exps: LSE_i∈∪S (t_i) = LSE_s (LSE_i∈S_s t_i). Stabilized by the max M = max_s L_s:
//   L = M + log2 Σ_s 2^(L_s − M)            (base 2, as the kernels keep it)
// which the host combination evaluates (engine/src/shard_backend.cpp, through shard_plan.cpp). The devices gather
// each shard's (max, sum) pair instead and merge the pairs as the finalize kernel merges a column's splits (the same
// stabilized sum; engine/cuda/device_step.hpp). A shard with no mass in a column has L_s = −∞; a column with no
// mass anywhere stays at −∞ (its soft c-transform is +∞, as on one device), never NaN. The functions also compile
// for CUDA device code and are unit-tested on the host.

#include <math.h>

#if defined(__CUDACC__)
#define FLASHOT_HOST_DEVICE __host__ __device__
#else
#define FLASHOT_HOST_DEVICE
#endif

namespace flashot::detail::shard {

FLASHOT_HOST_DEVICE inline float exp2_of(float v) { return exp2f(v); }
FLASHOT_HOST_DEVICE inline double exp2_of(double v) { return exp2(v); }
FLASHOT_HOST_DEVICE inline float log2_of(float v) { return log2f(v); }
FLASHOT_HOST_DEVICE inline double log2_of(double v) { return log2(v); }

/// 2^(lse − max): this shard's share of the column's sum, relative to the max over shards. 0 for a shard with no
/// mass (lse = −∞), including when no shard has any (max = −∞, where lse − max would be NaN).
template <class T>
FLASHOT_HOST_DEVICE inline T lse_share(T lse, T max) {
  return lse == -INFINITY ? T(0) : exp2_of(lse - max);
}

/// max + log2(sum) of the reduced pair: −∞ when no shard has mass (sum = 0); a NaN anywhere stays NaN, so the
/// non-finite check after an iteration still sees it.
template <class T>
FLASHOT_HOST_DEVICE inline T lse_total(T max, T sum) {
  return sum == T(0) ? T(-INFINITY) : max + log2_of(sum);
}

}  // namespace flashot::detail::shard
