// The hard c-transform's spatial order (c_transform.cuh, docs/engine.md "Hard c-transform"): at d ≤ 4 the register
// pass runs on both sides sorted along a Morton (Z-order) curve of their common bounding box, so that kCtBoxTile
// consecutive columns (a tile) lie close together, and a block of consecutive rows too. Every tile gets its bounding
// box (scaled by 2s, rounded outwards) and its largest h_j; the pass skips a tile for a block of rows when, for every
// row, the tile's score bound is below the row's rest (c_transform.cu, ct_small_kernel; ct::ct_tile_below). A row
// block starts at its home tile, where its middle row's code falls among the sorted columns' codes, so that its first
// candidates are near columns.

#include <algorithm>

#include <cub/device/device_radix_sort.cuh>

#include "c_transform.cuh"
#include "device_common.cuh"
#include "error.hpp"

namespace flashot::detail::cuda {
namespace {

constexpr int kCtMaxD = 4;  // the tile pass's widest points (kCtBoxStride holds 2·4 + 1 floats)
static_assert(kCtBoxStride == 2 * kCtMaxD + 1, "a box holds lower and upper corners and the largest potential");

/// Floats ordered as unsigned integers (for atomicMin / atomicMax): negatives flipped whole, positives' sign set.
__device__ __forceinline__ unsigned ct_order_bits(float f) {
  const unsigned u = __float_as_uint(f);
  return u ^ ((u >> 31) != 0u ? 0xffffffffu : 0x80000000u);
}
__device__ __forceinline__ float ct_order_float(unsigned u) {
  return __uint_as_float(u ^ ((u >> 31) != 0u ? 0x80000000u : 0xffffffffu));
}

/// extent[k] = min, extent[kCtMaxD + k] = max of coordinate k over the n points (ct_order_bits; atomics onto what is
/// there, so rows and columns add to one box).
__global__ void ct_extent_kernel(const float* __restrict__ pts, int n, int d, unsigned* extent) {
  float lo[kCtMaxD], hi[kCtMaxD];
#pragma unroll
  for (int k = 0; k < kCtMaxD; ++k) lo[k] = INFINITY, hi[k] = -INFINITY;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
#pragma unroll
    for (int k = 0; k < kCtMaxD; ++k)
      if (k < d) {
        const float v = pts[std::size_t(i) * d + k];
        lo[k] = fminf(lo[k], v);
        hi[k] = fmaxf(hi[k], v);
      }
#pragma unroll
  for (int k = 0; k < kCtMaxD; ++k) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      lo[k] = fminf(lo[k], __shfl_xor_sync(0xffffffffu, lo[k], offset));
      hi[k] = fmaxf(hi[k], __shfl_xor_sync(0xffffffffu, hi[k], offset));
    }
    if (threadIdx.x % 32 == 0 && k < d) {
      atomicMin(&extent[k], ct_order_bits(lo[k]));
      atomicMax(&extent[kCtMaxD + k], ct_order_bits(hi[k]));
    }
  }
}

/// codes[i]: the Morton code of point i (⌊30 / d⌋ bits per coordinate of its cell in the extent, interleaved from
/// the most significant bit), ids[i] = i.
__global__ void ct_morton_kernel(const float* __restrict__ pts, int n, int d, const unsigned* __restrict__ extent,
                                 unsigned* __restrict__ codes, int* __restrict__ ids) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int bits = 30 / d;
  const unsigned top = (1u << bits) - 1u;
  unsigned q[kCtMaxD] = {};
#pragma unroll
  for (int k = 0; k < kCtMaxD; ++k)
    if (k < d) {
      const float lo = ct_order_float(extent[k]), hi = ct_order_float(extent[kCtMaxD + k]);
      const float scale = hi > lo ? float(1u << bits) / (hi - lo) : 0.f;
      const float c = fminf(fmaxf((pts[std::size_t(i) * d + k] - lo) * scale, 0.f), float(1u << bits));
      q[k] = min(static_cast<unsigned>(c), top);  // the largest coordinate falls in the last cell
    }
  unsigned code = 0;
  for (int b = bits - 1; b >= 0; --b)
#pragma unroll
    for (int k = 0; k < kCtMaxD; ++k)
      if (k < d) code = (code << 1) | ((q[k] >> b) & 1u);
  codes[i] = code;
  ids[i] = i;
}

/// Sorted point i takes point ids[i]'s coordinates, norm and (columns) potential.
__global__ void ct_gather_kernel(const float* __restrict__ pts, const float* __restrict__ norm2,
                                 const float* __restrict__ h, const int* __restrict__ ids, int n, int d,
                                 float* __restrict__ pts_out, float* __restrict__ norm2_out,
                                 float* __restrict__ h_out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int from = ids[i];
  for (int k = 0; k < d; ++k) pts_out[std::size_t(i) * d + k] = pts[std::size_t(from) * d + k];
  norm2_out[i] = norm2[from];
  if (h != nullptr) h_out[i] = h[from];
}

/// One warp per tile of kCtBoxTile sorted columns: its box, scaled by 2s and rounded outwards (so the scores' bound in
/// ct_small_kernel only grows), and its largest h_j. Coordinates past d: 0 in both corners.
__global__ void ct_box_kernel(const float* __restrict__ cols, const float* __restrict__ h, int ncols, int d, float s,
                              int tiles, float* __restrict__ box) {
  const int lane = threadIdx.x % 32;
  const int t = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (t >= tiles) return;
  const int j0 = t * kCtBoxTile, j1 = min(ncols, j0 + kCtBoxTile);
  float lo[kCtMaxD], hi[kCtMaxD], hmax = -INFINITY;
#pragma unroll
  for (int k = 0; k < kCtMaxD; ++k) lo[k] = INFINITY, hi[k] = -INFINITY;
  for (int j = j0 + lane; j < j1; j += 32) {
#pragma unroll
    for (int k = 0; k < kCtMaxD; ++k)
      if (k < d) {
        const float v = cols[std::size_t(j) * d + k];
        lo[k] = fminf(lo[k], v);
        hi[k] = fmaxf(hi[k], v);
      }
    hmax = fmaxf(hmax, h[j]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
#pragma unroll
    for (int k = 0; k < kCtMaxD; ++k) {
      lo[k] = fminf(lo[k], __shfl_xor_sync(0xffffffffu, lo[k], offset));
      hi[k] = fmaxf(hi[k], __shfl_xor_sync(0xffffffffu, hi[k], offset));
    }
    hmax = fmaxf(hmax, __shfl_xor_sync(0xffffffffu, hmax, offset));
  }
  if (lane == 0) {
    const float two_s = 2.f * s;  // exact: a power-of-two multiple
    float* b = box + std::size_t(t) * kCtBoxStride;
#pragma unroll
    for (int k = 0; k < kCtMaxD; ++k) {
      b[k] = k < d ? ct::ct_mul_down(two_s, lo[k]) : 0.f;
      b[kCtMaxD + k] = k < d ? ct::ct_mul_up(two_s, hi[k]) : 0.f;
    }
    b[2 * kCtMaxD] = hmax;
  }
}

/// homes[b]: the tile holding the first sorted column whose code is ≥ that of row block b's middle row.
__global__ void ct_home_kernel(const unsigned* __restrict__ row_codes, int nrows, int rows_per_block,
                               const unsigned* __restrict__ col_codes, int ncols, int blocks, int* __restrict__ homes) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  const unsigned key = row_codes[min(nrows - 1, b * rows_per_block + rows_per_block / 2)];
  int lo = 0, hi = ncols;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (col_codes[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  homes[b] = min(lo, ncols - 1) / kCtBoxTile;
}

/// Sorts n points' codes (scratch.order.codes / ids, n at `offset`) into codes_sorted / ids_out.
void ct_sort(CTransformScratch::Order& o, std::size_t offset, int n, int bits, int* ids_out, cudaStream_t stream) {
  std::size_t bytes = 0;
  FLASHOT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, o.codes.get() + offset,
                                                     o.codes_sorted.get() + offset, o.ids.get() + offset, ids_out, n,
                                                     0, bits, stream));
  o.temp.reserve(std::max<std::size_t>(bytes, 1));
  FLASHOT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(o.temp.get(), bytes, o.codes.get() + offset,
                                                     o.codes_sorted.get() + offset, o.ids.get() + offset, ids_out, n,
                                                     0, bits, stream));
}

}  // namespace

CtTileOrder prepare_ct_tiles(const CTransformSides& sd, const float* h, float s, int rows_per_block,
                             CTransformScratch& sc, cudaStream_t stream) {
  if (sd.d < 1 || sd.d > kCtMaxD)
    throw std::invalid_argument("c_transform: the tile pass serves d = 1 to 4 (got " + std::to_string(sd.d) + ")");
  CTransformScratch::Order& o = sc.order;
  const int nr = sd.nrows, nc = sd.ncols, d = sd.d;
  const int tiles = div_up(nc, kCtBoxTile), blocks = div_up(nr, rows_per_block);
  const std::size_t total = std::size_t(nr) + nc;
  o.extent.reserve(2 * kCtMaxD);
  o.codes.reserve(total);
  o.codes_sorted.reserve(total);
  o.ids.reserve(total);
  o.row_ids.reserve(nr);
  o.col_ids.reserve(nc);
  o.homes.reserve(blocks);
  o.index.reserve(nr);
  o.values.reserve(nr);
  o.rows.reserve(std::size_t(nr) * d);
  o.rows_norm2.reserve(nr);
  o.cols.reserve(std::size_t(nc) * d);
  o.cols_norm2.reserve(nc);
  o.h.reserve(nc);
  o.box.reserve(std::size_t(tiles) * kCtBoxStride);
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(o.extent.get(), 0xff, kCtMaxD * sizeof(unsigned), stream));  // minima
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(o.extent.get() + kCtMaxD, 0, kCtMaxD * sizeof(unsigned), stream));
  ct_extent_kernel<<<std::max(1, std::min(256, div_up(nr, 256))), 256, 0, stream>>>(sd.rows, nr, d, o.extent.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
  ct_extent_kernel<<<std::max(1, std::min(256, div_up(nc, 256))), 256, 0, stream>>>(sd.cols, nc, d, o.extent.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
  ct_morton_kernel<<<div_up(nr, 256), 256, 0, stream>>>(sd.rows, nr, d, o.extent.get(), o.codes.get(), o.ids.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
  ct_morton_kernel<<<div_up(nc, 256), 256, 0, stream>>>(sd.cols, nc, d, o.extent.get(), o.codes.get() + nr,
                                                        o.ids.get() + nr);
  FLASHOT_CUDA_CHECK_LAUNCH();
  const int bits = 30 / d * d;
  ct_sort(o, 0, nr, bits, o.row_ids.get(), stream);
  ct_sort(o, nr, nc, bits, o.col_ids.get(), stream);
  ct_gather_kernel<<<div_up(nr, 256), 256, 0, stream>>>(sd.rows, sd.rows_norm2, nullptr, o.row_ids.get(), nr, d,
                                                        o.rows.get(), o.rows_norm2.get(), nullptr);
  FLASHOT_CUDA_CHECK_LAUNCH();
  ct_gather_kernel<<<div_up(nc, 256), 256, 0, stream>>>(sd.cols, sd.cols_norm2, h, o.col_ids.get(), nc, d,
                                                        o.cols.get(), o.cols_norm2.get(), o.h.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
  ct_box_kernel<<<div_up(tiles * 32, 256), 256, 0, stream>>>(o.cols.get(), o.h.get(), nc, d, s, tiles, o.box.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
  ct_home_kernel<<<div_up(blocks, 256), 256, 0, stream>>>(o.codes_sorted.get(), nr, rows_per_block,
                                                          o.codes_sorted.get() + nr, nc, blocks, o.homes.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
  CtTileOrder out;
  out.sides = {o.rows.get(), o.rows_norm2.get(), nr, o.cols.get(), o.cols_norm2.get(), nc, d};
  out.h = o.h.get();
  out.box = o.box.get();
  out.homes = o.homes.get();
  out.row_ids = o.row_ids.get();
  out.col_ids = o.col_ids.get();
  return out;
}

}  // namespace flashot::detail::cuda
