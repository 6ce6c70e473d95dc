// The warpgroup kernels' inputs: the column side's split operands as whole tiles in their shared-memory layout
// (launch_tile_operands), the column biases padded to whole tiles (launch_column_biases), and whether this build's
// image has the wgmma instructions for the current device (warpgroup_kernels_available). mma.cuh has the contracts.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "device_common.cuh"
#include "error.hpp"
#include "mma.cuh"
#include "mma_launch.cuh"
#include "wgmma.cuh"

namespace flashot::detail::cuda {
namespace {

/// Unit u of column_tiles(count) × 2 arrays × 64 points × chunks 16-byte units: (tile, array, point, chunk) →
/// the core-matrix offset of that point and chunk in its tile (WgTileCore's stage layout); zeros past count.
__global__ void tile_operands_kernel(const std::uint16_t* __restrict__ hi, const std::uint16_t* __restrict__ lo,
                                     int count, int padded_d, std::uint8_t* __restrict__ out, std::size_t units) {
  const int chunks = padded_d / 8;
  const std::size_t per_array = std::size_t(kMmaTile) * chunks, per_tile = 2 * per_array;
  for (std::size_t u = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; u < units;
       u += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t tile = u / per_tile, rest = u % per_tile;
    const int array = static_cast<int>(rest / per_array), v = static_cast<int>(rest % per_array);
    const int p = v / chunks, c = v % chunks;
    const std::size_t j = tile * kMmaTile + p;
    uint4 value = make_uint4(0u, 0u, 0u, 0u);
    if (j < std::size_t(count)) value = *reinterpret_cast<const uint4*>((array == 0 ? hi : lo) + j * padded_d + c * 8);
    *reinterpret_cast<uint4*>(out + tile * tile_bytes(padded_d) + array * per_array * 16 +
                              wgmma::core_offset(p, c, chunks)) = value;
  }
}

/// Thread i: side a's bias of column i (i < a_padded), else side b's of column i − a_padded (launch_column_biases).
__global__ void column_biases_kernel(PointSet a, const float* __restrict__ ha, float* __restrict__ out_a,
                                     int a_padded, PointSet b, const float* __restrict__ hb,
                                     float* __restrict__ out_b, int b_padded, Scale sc) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < a_padded) {
    out_a[i] = i < a.count ? column_bias(a, ha, sc, i) : -INFINITY;
  } else if (i - a_padded < b_padded) {
    const int j = i - a_padded;
    out_b[j] = j < b.count ? column_bias(b, hb, sc, j) : -INFINITY;
  }
}

/// 1 in *out when this build's image of the kernels has the warpgroup instructions (compiled for sm_90a).
__global__ void wgmma_image_kernel(int* out) {
#ifdef FLASHOT_WGMMA_DEVICE
  *out = 1;
#else
  *out = 0;
#endif
}

}  // namespace

void launch_tile_operands(const std::uint16_t* hi, const std::uint16_t* lo, int count, int padded_d, std::uint8_t* out,
                          cudaStream_t stream) {
  const std::size_t units = std::size_t(column_tiles(count)) * 2 * kMmaTile * (padded_d / 8);
  if (units == 0) return;
  const int blocks = static_cast<int>(std::min<std::size_t>((units + 255) / 256, 4096));
  tile_operands_kernel<<<blocks, 256, 0, stream>>>(hi, lo, count, padded_d, out, units);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_column_biases(const PointSet& a, const float* ha, float* out_a, const PointSet& b, const float* hb,
                          float* out_b, const Scale& scale, cudaStream_t stream) {
  const int a_padded = column_tiles(a.count) * kMmaTile, b_padded = column_tiles(b.count) * kMmaTile;
  const int total = a_padded + b_padded;
  if (total == 0) return;
  column_biases_kernel<<<div_up(total, 256), 256, 0, stream>>>(a, ha, out_a, a_padded, b, hb, out_b, b_padded,
                                                               scale);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

bool warpgroup_kernels_available() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  // Asked once per device: the probe's cudaFree synchronises the device, which other Problems' streams would feel.
  static std::atomic<signed char> known[64];  // 0 not asked yet, 1 no, 2 yes
  if (device < 64 && known[device].load() != 0) return known[device].load() == 2;
  int* flag = nullptr;
  if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  int value = 0;
  wgmma_image_kernel<<<1, 1>>>(flag);
  // No image for this device (an sm_90a build on another GPU) is an answer, not an error.
  const bool ran = cudaGetLastError() == cudaSuccess &&
                   cudaMemcpy(&value, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(flag);
  cudaGetLastError();
  const bool available = ran && value == 1;
  if (device < 64) known[device].store(available ? 2 : 1);
  return available;
}

}  // namespace flashot::detail::cuda
