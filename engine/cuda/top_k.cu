// Top-k plan entries per row, streamed: each block owns 64 rows and walks every column tile; the row's owner thread
// keeps its sorted list in the output arrays (scores while scanning), so nothing of size n×m exists. The kept
// entries are then re-evaluated from the direct cost ‖x − y‖², which is more accurate than the expanded score.

#include <cmath>

#include "device_common.cuh"
#include "error.hpp"

namespace flashot::detail::cuda {
namespace {

__global__ void __launch_bounds__(kTileThreads) top_k_kernel(PointSet x, PointSet y, const float* __restrict__ f,
                                                             const float* __restrict__ g, Scale sc, int k, std::int32_t* __restrict__ columns,
                                                             float* __restrict__ values) {
  __shared__ TileStage<> st;
  __shared__ float scores[kTileRows][kTileCols + 1];  // (BM, BN)
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int i0 = blockIdx.x * kTileRows;
  const int own = i0 + threadIdx.x;  // the row this thread ranks (threads < 64)
  const bool owner = threadIdx.x < kTileRows && own < x.count;
  float* row_values = values + std::size_t(own) * k;
  std::int32_t* row_columns = columns + std::size_t(own) * k;
  if (owner) {
    for (int t = 0; t < k; ++t) row_values[t] = -INFINITY, row_columns[t] = -1;
  }
  float kth = -INFINITY;
  for (int j0 = 0; j0 < y.count; j0 += kTileCols) {
    float acc[4][4];
    tile_dots(x.points, x.count, i0, y.points, y.count, j0, sc.d, st, acc);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = j0 + tx + 16 * c;
      const float bias = j < y.count ? column_bias(y, g, sc, j) : -INFINITY;
#pragma unroll
      for (int r = 0; r < 4; ++r) scores[ty + 16 * r][tx + 16 * c] = fmaf(sc.alpha, acc[r][c], bias);
    }
    __syncthreads();
    if (owner) {
      const int ncols = min(kTileCols, y.count - j0);
      for (int jj = 0; jj < ncols; ++jj) {
        const float s = scores[threadIdx.x][jj];
        if (!(s > kth)) continue;
        int pos = k - 1;
        while (pos > 0 && row_values[pos - 1] < s) {
          row_values[pos] = row_values[pos - 1];
          row_columns[pos] = row_columns[pos - 1];
          --pos;
        }
        row_values[pos] = s;
        row_columns[pos] = j0 + jj;
        kth = row_values[k - 1];
      }
    }
  }
  if (!owner) return;
  // P_ij = a_i b_j exp((f_i + g_j − C_ij)/ε) from the direct cost.
  const float* xi = x.points + std::size_t(own) * sc.d;
  for (int t = 0; t < k; ++t) {
    const int j = row_columns[t];
    if (j < 0) {
      row_values[t] = 0.f;
      continue;
    }
    const float* yj = y.points + std::size_t(j) * sc.d;
    float cost = 0.f;
    for (int q = 0; q < sc.d; ++q) {
      const float diff = xi[q] - yj[q];
      cost = fmaf(diff, diff, cost);
    }
    row_values[t] = x.weight[own] * y.weight[j] * expf((f[own] + g[j] - sc.s * cost) / sc.epsilon);
  }
}

}  // namespace

void launch_top_k(const PointSet& x, const PointSet& y, const float* f, const float* g, const Scale& scale, int k,
                  std::int32_t* columns, float* values, cudaStream_t stream) {
  top_k_kernel<<<div_up(x.count, kTileRows), kTileThreads, 0, stream>>>(x, y, f, g, scale, k, columns, values);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace flashot::detail::cuda
