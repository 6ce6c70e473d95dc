// Kernels of the device-side shard combination (nccl_combine.cuh).
#include "nccl_combine.cuh"

#include <cstddef>

#include "device_common.cuh"
#include "error.hpp"
#include "shard_math.hpp"

namespace flashot::detail::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void merge_partials_kernel(const float2* __restrict__ partials, int splits, int count,
                                      float2* __restrict__ out, const int* guard) {
  if (guard != nullptr && *guard == 0) return;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= count) return;
  float m = kNoMax, sum = 0.f;
  for (int k = 0; k < splits; ++k) {
    const float2 p = partials[std::size_t(k) * count + j];
    merge_lse<true>(m, sum, p.x, p.y);
  }
  out[j] = make_float2(m, sum);
}

__global__ void lse_share_kernel(const float* __restrict__ lse, const float* __restrict__ max,
                                 float* __restrict__ share, int count) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < count) share[j] = shard::lse_share(lse[j], max[j]);
}

__global__ void combined_update_kernel(Finalize mode, const float* __restrict__ max, const float* __restrict__ sum,
                                       const float* __restrict__ norm2, float epsilon_ln2, float s, float lambda,
                                       float* __restrict__ out, int count, int* nonfinite, const int* redo,
                                       const float* __restrict__ tmp) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= count) return;
  if (mode == Finalize::kCommit && *redo == 0) {
    const float result = 0.5f * (out[j] + tmp[j]);
    out[j] = result;
    if (!isfinite(result)) *nonfinite = 1;
    return;
  }
  const float softmin = s * norm2[j] - epsilon_ln2 * shard::lse_total(max[j], sum[j]);
  float result;
  switch (mode) {
    case Finalize::kAlternating: result = lambda * softmin; break;
    case Finalize::kSymmetric:
    case Finalize::kCommit: result = 0.5f * (out[j] + lambda * softmin); break;
    default: result = softmin; break;
  }
  out[j] = result;
  if (!isfinite(result)) *nonfinite = 1;
}

__global__ void weight_by_share_kernel(const float* __restrict__ lse, const float* __restrict__ max,
                                       const float* __restrict__ sum, float* __restrict__ values, int count, int k) {
  const std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= std::size_t(count) * k) return;
  const int j = static_cast<int>(e / k);
  const float share = shard::lse_share(lse[j], max[j]);
  values[e] = share > 0.f && sum[j] > 0.f ? values[e] * (share / sum[j]) : 0.f;
}

}  // namespace

void launch_merge_partials(const float2* partials, int splits, int count, float2* out, const int* guard,
                           cudaStream_t stream) {
  if (count == 0) return;
  merge_partials_kernel<<<div_up(count, kThreads), kThreads, 0, stream>>>(partials, splits, count, out, guard);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_lse_share(const float* lse, const float* max, float* share, int count, cudaStream_t stream) {
  if (count == 0) return;
  lse_share_kernel<<<div_up(count, kThreads), kThreads, 0, stream>>>(lse, max, share, count);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_combined_update(Finalize mode, const float* max, const float* sum, const float* norm2, double epsilon,
                            float s, float lambda, float* out, int count, int* nonfinite, cudaStream_t stream,
                            const int* redo, const float* tmp) {
  if (count == 0) return;
  combined_update_kernel<<<div_up(count, kThreads), kThreads, 0, stream>>>(
      mode, max, sum, norm2, static_cast<float>(epsilon * 0.6931471805599453), s, lambda, out, count, nonfinite,
      redo, tmp);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_weight_by_share(const float* lse, const float* max, const float* sum, float* values, int count, int k,
                            cudaStream_t stream) {
  const long long elements = static_cast<long long>(count) * k;
  if (elements == 0) return;
  weight_by_share_kernel<<<div_up(elements, kThreads), kThreads, 0, stream>>>(lse, max, sum, values, count, k);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace flashot::detail::cuda
