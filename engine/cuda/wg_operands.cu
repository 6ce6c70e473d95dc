// The warpgroup kernels' inputs: the column side's split operands as whole tiles in their shared-memory layout
// (launch_tile_operands), the column biases padded to whole tiles (launch_column_biases), and whether this build's
// image has the wgmma instructions for the current device (warpgroup_kernels_available). mma.cuh has the contracts.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include <cuda_fp16.h>

#include "device_common.cuh"
#include "error.hpp"
#include "one_pass.hpp"
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

/// The fp16 parts of value·2^-kBiasSlotLog2 (docs/engine.md, "Biases on the tensor cores"): part q is the
/// rounding of what parts 0 .. q − 1 left, so Σ parts = value·2^-c up to the last residual. Clamped to ±65504 first
/// (a NaN stays NaN): an infinity would meet the zero of another product's operand (∞·0 = NaN).
template <int PARTS>
__device__ __forceinline__ void bias_parts(float value, __half (&part)[PARTS]) {
  float r = value * (1.f / float(1 << kBiasSlotLog2));
  r = r > 65504.f ? 65504.f : r < -65504.f ? -65504.f : r;
#pragma unroll
  for (int q = 0; q < PARTS; ++q) {
    part[q] = __float2half_rn(r);
    r -= __half2float(part[q]);
  }
}

/// Unit u < rows.count × chunks: row i, 16-byte chunk c of the rows' operands (hi, lo: rows.count × padded, row-major):
/// coordinates k < d are x·ra split, slot d + q (q < slots) holds parts 2q (hi) and 2q + 1 (lo) of u_i, slot
/// d + slots + q holds 2^c (hi) and 0 (lo), the rest zeros. Past that, unit rows.count × chunks + w: point j, chunk
/// c of the column tiles (tile_operands_kernel's layout): y·rb split; slot d + q holds 2^c (hi) and 0 (lo); slot
/// d + slots + q parts 2q and 2q + 1 of v_j; columns past cols.count: zeros but −65504 (hi) in the v slots.
__global__ void bias_operands_kernel(PointSet rows, const float* __restrict__ f, PointSet cols,
                                     const float* __restrict__ vbias, Scale sc, float ra, float rb, int d, int padded,
                                     int slots, const SumsForecast* forecast, std::uint16_t* __restrict__ rhi,
                                     std::uint16_t* __restrict__ rlo, std::uint8_t* __restrict__ tiles,
                                     std::size_t row_units, std::size_t units) {
  const SumsStep step = forecast != nullptr ? sums_step(*forecast) : SumsStep{};
  if (step.skip != 0) return;  // the sums kernel returns too
  const int chunks = padded / 8;
  const __half one_slot = __float2half_rn(float(1 << kBiasSlotLog2));
  for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < units;
       e += std::size_t(gridDim.x) * blockDim.x) {
    const bool row = e < row_units;
    const std::size_t w = row ? e : e - row_units;
    const std::size_t p = w / chunks;
    const int c = static_cast<int>(w % chunks);
    const float* points = row ? rows.points : cols.points;  // (fields, not a reference to either parameter: that
    const bool valid = p < std::size_t(row ? rows.count : cols.count);  // would copy both to local memory)
    // u_i = c1·(f_i − s‖x_i‖²) + shift (sums_wg_body's); v_j as launch_column_biases wrote it.
    const float value = !valid ? 0.f : row ? sc.c1 * (f[p] - sc.s * rows.norm2[p]) + step.shift : vbias[p];
    __half bias[4];
    bias_parts(value, bias);
    const float factor = row ? ra : rb;
    alignas(16) __half hi[8];
    alignas(16) __half lo[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const int k = c * 8 + q;
      __half h = __float2half_rn(0.f), l = h;
      if (k < d) {
        if (valid) {
          const float v = points[p * d + k] * factor;
          h = __float2half_rn(v);
          l = __float2half_rn(v - __half2float(h));
        }
      } else if (k < d + 2 * slots) {
        const int s = k < d + slots ? k - d : k - d - slots;
        const bool own = row == (k < d + slots);  // the rows' u slots, the columns' v slots
        if (!valid) {
          if (!row && own) h = __float2half_rn(-65504.f);  // a padded column: E = 0
        } else if (own) {
          h = s == 0 ? bias[0] : bias[2], l = s == 0 ? bias[1] : bias[3];  // constant indices: no local memory
        } else {
          h = one_slot;
        }
      }
      hi[q] = h, lo[q] = l;
    }
    const uint4 vh = *reinterpret_cast<const uint4*>(hi), vl = *reinterpret_cast<const uint4*>(lo);
    if (row) {
      *reinterpret_cast<uint4*>(rhi + p * padded + c * 8) = vh;
      *reinterpret_cast<uint4*>(rlo + p * padded + c * 8) = vl;
    } else {
      const std::size_t per_array = std::size_t(kMmaTile) * chunks;
      std::uint8_t* tile = tiles + (p / kMmaTile) * tile_bytes(padded);
      const int at = wgmma::core_offset(static_cast<int>(p % kMmaTile), c, chunks);
      *reinterpret_cast<uint4*>(tile + at) = vh;
      *reinterpret_cast<uint4*>(tile + per_array * 16 + at) = vl;
    }
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

void launch_bias_operands(const PointSet& rows, const float* f, const PointSet& cols, const float* vbias,
                          const Scale& scale, const BiasFactors& factors, const SumsForecast* forecast,
                          const BiasOperands& out, cudaStream_t stream) {
  const int chunks = out.padded_d / 8;
  const std::size_t row_units = std::size_t(rows.count) * chunks;
  const std::size_t units = row_units + std::size_t(column_tiles(cols.count)) * kMmaTile * chunks;
  if (units == 0) return;
  const int blocks = static_cast<int>(std::min<std::size_t>((units + 255) / 256, 8192));
  bias_operands_kernel<<<blocks, 256, 0, stream>>>(rows, f, cols, vbias, scale, factors.ra, factors.rb, scale.d,
                                                   out.padded_d, bias_slots(scale.d, out.padded_d), forecast,
                                                   out.rows_hi, out.rows_lo, out.tiles, row_units, units);
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
