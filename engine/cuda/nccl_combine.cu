// Kernel of the device-side shard combination (nccl_combine.cuh).
#include "nccl_combine.cuh"

#include <cstddef>

#include "device_common.cuh"
#include "error.hpp"

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

}  // namespace

void launch_merge_partials(const float2* partials, int splits, int count, float2* out, const int* guard,
                           cudaStream_t stream) {
  if (count == 0) return;
  merge_partials_kernel<<<div_up(count, kThreads), kThreads, 0, stream>>>(partials, splits, count, out, guard);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace flashot::detail::cuda
