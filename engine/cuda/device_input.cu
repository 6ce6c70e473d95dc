// Device-resident inputs (device_input.hpp, docs/engine.md "Device-resident inputs"): the scans that validate and
// bound the caller's device points and validate and total its device weights for Problem::on_device, the Sinkhorn
// loop's weighted sums over the resident weights, and the kernels that centre the points and serve the operations
// reading them, each with the host path's arithmetic (explicitly rounded double operations, so that no
// fused multiply-add makes the device differ from the host in the last bit).

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend.hpp"
#include "device_buffer.hpp"
#include "device_input.hpp"
#include "error.hpp"
#include "validation.hpp"

namespace flashot::detail {
namespace cuda {
namespace {

constexpr int kThreads = 256;

/// An unsigned key with the order of the floats (−0 just below +0), for atomicMin / atomicMax.
__host__ __device__ inline unsigned float_key(float f) {
#if defined(__CUDA_ARCH__)
  const unsigned u = __float_as_uint(f);
#else
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
inline float key_float(unsigned k) {
  const unsigned u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// Threads t < stride (a multiple of d) each own column t % d and walk the elements t, t + stride, …: the finite
/// values' min and max per column, and the first row holding a non-finite value.
__global__ void scan_kernel(const float* __restrict__ p, std::size_t count, int d, std::size_t stride,
                            unsigned* __restrict__ lo, unsigned* __restrict__ hi,
                            unsigned long long* __restrict__ bad_row) {
  const std::size_t t = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= stride) return;
  float low = INFINITY, high = -INFINITY;
  unsigned long long bad = ULLONG_MAX;
  for (std::size_t e = t; e < count; e += stride) {
    const float v = p[e];
    if (isfinite(v)) {
      low = fminf(low, v);
      high = fmaxf(high, v);
    } else if (bad == ULLONG_MAX) {
      bad = e / std::size_t(d);
    }
  }
  const int c = int(t % std::size_t(d));
  if (low <= high) {
    atomicMin(lo + c, float_key(low));
    atomicMax(hi + c, float_key(high));
  }
  if (bad != ULLONG_MAX) atomicMin(bad_row, bad);
}

__global__ void centre_kernel(const float* __restrict__ in, std::size_t n, int d, const double* __restrict__ centre,
                              float* __restrict__ out, float* __restrict__ norm2, unsigned* __restrict__ bounds) {
  float largest = 0, max_norm = 0;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    double norm = 0;
    for (int k = 0; k < d; ++k) {
      const float c = centre != nullptr ? __double2float_rn(__dsub_rn(double(in[i * d + k]), centre[k])) : in[i * d + k];
      if (out != nullptr) out[i * d + k] = c;
      norm = __dadd_rn(norm, __dmul_rn(double(c), double(c)));
      largest = fmaxf(largest, fabsf(c));
    }
    norm2[i] = __double2float_rn(norm);
    max_norm = fmaxf(max_norm, __double2float_rn(sqrt(norm)));
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    largest = fmaxf(largest, __shfl_down_sync(0xffffffffu, largest, offset));
    max_norm = fmaxf(max_norm, __shfl_down_sync(0xffffffffu, max_norm, offset));
  }
  // Non-negative floats order as their bit patterns.
  if ((threadIdx.x & 31) == 0) {
    atomicMax(bounds, __float_as_uint(largest));
    atomicMax(bounds + 1, __float_as_uint(max_norm));
  }
}

__global__ void pack_sample_kernel(const float* __restrict__ points, const float* __restrict__ norm2,
                                   const float* __restrict__ logw, const float* __restrict__ weight, int count,
                                   int even, const int* __restrict__ far, int c, int d, float* __restrict__ packed) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= c) return;
  const std::size_t i = k < even ? std::size_t(k) * count / even : std::size_t(far[k - even]);
  for (int j = 0; j < d; ++j) packed[std::size_t(k) * d + j] = points[i * d + j];
  packed[std::size_t(c) * d + k] = norm2[i];
  packed[std::size_t(c) * (d + 1) + k] = logw[i];
  packed[std::size_t(c) * (d + 2) + k] = weight[i];
}

/// far[b] = the row of the largest ‖p‖² in chunk b of `chunks` equal chunks of [0, count) (the lowest such row).
__global__ void farthest_in_chunks_kernel(const float* __restrict__ norm2, int count, int chunks, int* far) {
  const int b = blockIdx.x;
  const int begin = int(std::int64_t(b) * count / chunks), end = int(std::int64_t(b + 1) * count / chunks);
  float best = -1.f;
  int at = begin;
  for (int i = begin + int(threadIdx.x); i < end; i += int(blockDim.x)) {
    if (norm2[i] > best) best = norm2[i], at = i;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, offset);
    const int oa = __shfl_xor_sync(0xffffffffu, at, offset);
    if (ob > best || (ob == best && oa < at)) best = ob, at = oa;
  }
  __shared__ float bests[32];
  __shared__ int ats[32];
  const int warp = int(threadIdx.x) / 32;
  if (threadIdx.x % 32 == 0) bests[warp] = best, ats[warp] = at;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < int(blockDim.x) / 32; ++w) {
    if (bests[w] > best || (bests[w] == best && ats[w] < at)) best = bests[w], at = ats[w];
  }
  far[b] = min(at, count - 1);
}

__global__ void moment_values_kernel(const float* __restrict__ points, const float* __restrict__ norm2, int m, int d,
                                     float* __restrict__ v) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= m) return;
  const std::size_t k = std::size_t(d) + 2;
  for (int c = 0; c < d; ++c) v[j * k + c] = points[std::size_t(j) * d + c];
  v[j * k + d] = norm2[j];
  v[j * k + d + 1] = 1.0f;
}

__global__ void points_gradient_kernel(const float* __restrict__ points, const float* __restrict__ t,
                                       const float* __restrict__ r, std::size_t count, int d, double factor,
                                       float* __restrict__ out) {
  for (std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < count * d;
       e += std::size_t(gridDim.x) * blockDim.x) {
    const double w = __dmul_rn(factor, double(r[e / d]));
    out[e] = __double2float_rn(__dmul_rn(w, __dsub_rn(double(points[e]), double(t[e]))));
  }
}

__global__ void primal_terms_kernel(const float* __restrict__ points, const float* __restrict__ out, int n, int d,
                                    double* __restrict__ terms) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const std::size_t k = std::size_t(d) + 2;
  const float* row = out + i * k;
  const double r = row[d + 1];
  if (!(r > 0)) {
    terms[i] = 0;
    return;
  }
  double dist = 0, tnorm = 0;
  for (int c = 0; c < d; ++c) {
    const double t = __ddiv_rn(double(row[c]), r);
    const double diff = __dsub_rn(double(points[std::size_t(i) * d + c]), t);
    dist = __dadd_rn(dist, __dmul_rn(diff, diff));
    tnorm = __dadd_rn(tnorm, __dmul_rn(t, t));
  }
  const double spread = fmax(0.0, __dsub_rn(__ddiv_rn(double(row[d]), r), tnorm));
  terms[i] = __dmul_rn(r, __dadd_rn(dist, spread));
}

/// The blocks' fixed-order tree reduction of one double per thread (blockDim.x = kThreads); thread 0 gets the sum.
__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) shared[threadIdx.x] = __dadd_rn(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

/// Per block: the total of its grid-stride share of w (fp64), the smallest finite weight ≥ 0 and the first index of
/// a weight that is not (validate_weights' test: !isfinite(w) || w < 0).
__global__ void scan_weights_kernel(const float* __restrict__ w, std::size_t n, double* __restrict__ totals,
                                    float* __restrict__ smallest, unsigned long long* __restrict__ bad) {
  __shared__ double shared[kThreads];
  __shared__ unsigned long long first_bad;
  __shared__ unsigned low_key;
  if (threadIdx.x == 0) {
    first_bad = ULLONG_MAX;
    low_key = float_key(INFINITY);
  }
  __syncthreads();
  double total = 0;
  float low = INFINITY;
  unsigned long long mine = ULLONG_MAX;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float v = w[i];
    if (!isfinite(v) || v < 0) {
      if (mine == ULLONG_MAX) mine = i;
      continue;
    }
    total = __dadd_rn(total, double(v));
    low = fminf(low, v);
  }
  if (mine != ULLONG_MAX) atomicMin(&first_bad, mine);
  atomicMin(&low_key, float_key(low));
  total = block_sum(total, shared);
  if (threadIdx.x == 0) {
    totals[blockIdx.x] = total;
    smallest[blockIdx.x] = __uint_as_float((low_key & 0x80000000u) ? (low_key & 0x7fffffffu) : ~low_key);
    bad[blockIdx.x] = first_bad;
  }
}

__global__ void log_weights_kernel(const float* __restrict__ w, std::size_t n, float* __restrict__ logw) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float v = w[i];
    logw[i] = v > 0 ? __double2float_rn(log(double(v))) : -INFINITY;
  }
}

/// detail::weighted_sums (engine/src/sinkhorn.cpp) for block `block` of `blocks`, in fp64 with explicitly rounded
/// operations: its (marginal, dual) partial in partials[0..1].
__device__ void weighted_sums_block(const float* __restrict__ w, const float* __restrict__ h,
                                    const float* __restrict__ hh, std::size_t n, double epsilon, double rho,
                                    unsigned block, unsigned blocks, double* shared, double* __restrict__ partials) {
  double marginal = 0, dual = 0;
  for (std::size_t i = std::size_t(block) * blockDim.x + threadIdx.x; i < n; i += std::size_t(blocks) * blockDim.x) {
    const double wi = w[i], hi = h[i];
    if (hh == nullptr) {
      dual = __dadd_rn(dual, rho > 0 ? __dmul_rn(__dmul_rn(wi, rho), __dsub_rn(1.0, exp(__ddiv_rn(-hi, rho))))
                                     : __dmul_rn(wi, hi));
    } else if (wi > 0) {
      const double mass = __dmul_rn(wi, exp(__ddiv_rn(__dsub_rn(hi, double(hh[i])), epsilon)));
      const double target = rho > 0 ? __dmul_rn(wi, exp(__ddiv_rn(-hi, rho))) : wi;
      marginal = __dadd_rn(marginal, fabs(__dsub_rn(mass, target)));
    }
  }
  marginal = block_sum(marginal, shared);
  dual = block_sum(dual, shared);
  if (threadIdx.x == 0) {
    partials[0] = marginal;
    partials[1] = dual;
  }
}

__global__ void weighted_sums_kernel(const float* __restrict__ w, const float* __restrict__ h,
                                     const float* __restrict__ hh, std::size_t n, double epsilon, double rho,
                                     double* __restrict__ partials) {
  __shared__ double shared[kThreads];
  weighted_sums_block(w, h, hh, n, epsilon, rho, blockIdx.x, gridDim.x, shared, partials + 2 * blockIdx.x);
}

/// Range blockIdx.y of the table, its block blockIdx.x (blocks past the range's own count return at once).
__global__ void batch_weighted_sums_kernel(const float* __restrict__ w, const float* __restrict__ h,
                                           const float* __restrict__ hh, const SumRange* __restrict__ ranges,
                                           double* __restrict__ partials) {
  __shared__ double shared[kThreads];
  const SumRange r = ranges[blockIdx.y];
  if (int(blockIdx.x) >= r.blocks) return;
  weighted_sums_block(w + r.offset, h + r.offset, hh != nullptr ? hh + r.offset : nullptr, r.count, r.epsilon, r.rho,
                      blockIdx.x, unsigned(r.blocks), shared, partials + 2 * (std::size_t(r.first_block) + blockIdx.x));
}

__global__ void fill_kernel(float* data, std::size_t count, float value) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += std::size_t(gridDim.x) * blockDim.x)
    data[i] = value;
}

// ---- Device batches (solve_batch_on_device): side s = 2q (x of problem q) or 2q + 1 (y). ----------------------------

/// One side of one problem of a device batch as the kernels read it.
struct BatchSide {
  const float* points = nullptr;   // the caller's (n × d)
  const float* weights = nullptr;  // the caller's (n), or null: uniform
  std::size_t n = 0;
  std::size_t begin = 0;   // its first row in the concatenation
  std::size_t padded = 0;  // the rows it owns there (n, then zero padding to the next problem)
  float uniform = 0;       // float(1/n), the weight of every point when `weights` is null
};

/// Rows of one side that one block of batch_scan_kernel reads.
constexpr std::size_t kScanRows = 256;

/// scan_kernel for every side at once: block (blockIdx.x, side blockIdx.y + first) reads rows [blockIdx.x·kScanRows,
/// +kScanRows) of its side. Virtual threads v < stride (a multiple of d) each own column v % d; per problem, the
/// finite values' min and max per column (x and y together: the union's box) and, per side, the first row holding a
/// non-finite value.
__global__ void batch_scan_kernel(const BatchSide* __restrict__ sides, int first, int d, unsigned* __restrict__ lo,
                                  unsigned* __restrict__ hi, unsigned long long* __restrict__ bad_row) {
  const int s = first + int(blockIdx.y);
  const BatchSide side = sides[s];
  const std::size_t row0 = std::size_t(blockIdx.x) * kScanRows;
  if (row0 >= side.n) return;
  const std::size_t begin = row0 * d, end = std::min(side.n, row0 + kScanRows) * d;
  const int stride = d <= int(blockDim.x) ? int(blockDim.x) / d * d : d;
  const int q = s / 2;
  for (int v = threadIdx.x; v < stride; v += blockDim.x) {
    float low = INFINITY, high = -INFINITY;
    unsigned long long bad = ULLONG_MAX;
    for (std::size_t e = begin + v; e < end; e += stride) {
      const float value = side.points[e];
      if (isfinite(value)) {
        low = fminf(low, value);
        high = fmaxf(high, value);
      } else if (bad == ULLONG_MAX) {
        bad = e / std::size_t(d);
      }
    }
    const int c = v % d;
    if (low <= high) {
      atomicMin(lo + std::size_t(q) * d + c, float_key(low));
      atomicMax(hi + std::size_t(q) * d + c, float_key(high));
    }
    if (bad != ULLONG_MAX) atomicMin(bad_row + s, bad);
  }
}

/// scan_weights_kernel for every side given weights: side blockIdx.y + first, its block blockIdx.x of
/// weighted_sum_blocks(n) (blocks past that count, and sides without weights, return at once). Outputs at
/// [side · widest + block].
__global__ void batch_scan_weights_kernel(const BatchSide* __restrict__ sides, int first, int widest,
                                          double* __restrict__ totals, float* __restrict__ smallest,
                                          unsigned long long* __restrict__ bad) {
  __shared__ double shared[kThreads];
  __shared__ unsigned long long first_bad;
  __shared__ unsigned low_key;
  const int s = first + int(blockIdx.y);
  const BatchSide side = sides[s];
  const unsigned blocks = unsigned(std::min<std::size_t>((side.n + kThreads - 1) / kThreads, 1024));
  if (side.weights == nullptr || blockIdx.x >= blocks) return;
  if (threadIdx.x == 0) {
    first_bad = ULLONG_MAX;
    low_key = float_key(INFINITY);
  }
  __syncthreads();
  double total = 0;
  float low = INFINITY;
  unsigned long long mine = ULLONG_MAX;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < side.n;
       i += std::size_t(blocks) * blockDim.x) {
    const float v = side.weights[i];
    if (!isfinite(v) || v < 0) {
      if (mine == ULLONG_MAX) mine = i;
      continue;
    }
    total = __dadd_rn(total, double(v));
    low = fminf(low, v);
  }
  if (mine != ULLONG_MAX) atomicMin(&first_bad, mine);
  atomicMin(&low_key, float_key(low));
  total = block_sum(total, shared);
  if (threadIdx.x == 0) {
    const std::size_t at = std::size_t(s) * widest + blockIdx.x;
    totals[at] = total;
    smallest[at] = __uint_as_float((low_key & 0x80000000u) ? (low_key & 0x7fffffffu) : ~low_key);
    bad[at] = first_bad;
  }
}

/// The concatenation: side blockIdx.y + first, its `padded` rows from `begin`: (float)((double)p − centre[q, c]) for
/// the n real rows (centre_kernel's rounding), zeros after; the weights given, or `uniform`, then zeros.
__global__ void batch_gather_kernel(const BatchSide* __restrict__ sides, int first, int d,
                                    const double* __restrict__ centres, float* __restrict__ x, float* __restrict__ y,
                                    float* __restrict__ a, float* __restrict__ b) {
  const int s = first + int(blockIdx.y);
  const BatchSide side = sides[s];
  const double* centre = centres + std::size_t(s / 2) * d;
  float* points = (s % 2 == 0 ? x : y) + side.begin * d;
  float* weights = (s % 2 == 0 ? a : b) + side.begin;
  const std::size_t real = side.n * d, count = side.padded * d;
  for (std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t row = e / std::size_t(d);
    points[e] = e < real ? __double2float_rn(__dsub_rn(double(side.points[e]), centre[e - row * d])) : 0.0f;
    if (e < side.padded)
      weights[e] = e >= side.n ? 0.0f : side.weights != nullptr ? side.weights[e] : side.uniform;
  }
}

unsigned grid_for(std::size_t items) {
  return unsigned(std::clamp<std::size_t>((items + kThreads - 1) / kThreads, 1, 65535));
}

/// Throws std::invalid_argument unless `data` is memory of CUDA device `device` (device or managed memory).
void require_device_memory(const void* data, int device, const std::string& name) {
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, data);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw std::invalid_argument(name + ".data is not memory CUDA knows (" + cudaGetErrorString(status) + ")");
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged)
    throw std::invalid_argument(name + ".data must be CUDA device memory on cuda:" + std::to_string(device) +
                                " (got " + (attributes.type == cudaMemoryTypeHost ? "pinned host" : "host") +
                                " memory: build the Problem from host arrays instead)");
  if (attributes.device != device)
    throw std::invalid_argument(name + ".data is on cuda:" + std::to_string(attributes.device) + ", not on cuda:" +
                                std::to_string(device) + " as " + name + ".device says");
}

}  // namespace

void launch_centre_points(const float* in, std::size_t n, int d, const double* centre, float* out, float* norm2,
                          unsigned* bounds, cudaStream_t stream) {
  centre_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, n, d, centre, out, norm2, bounds);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

SideBounds decode_bounds(const unsigned bounds[2]) {
  SideBounds out;
  std::memcpy(&out.largest, &bounds[0], sizeof(float));
  std::memcpy(&out.max_norm, &bounds[1], sizeof(float));
  return out;
}

void launch_pack_sample(const float* points, const float* norm2, const float* logw, const float* weight, int count,
                        int even, int far_count, int* far, int d, float* packed, cudaStream_t stream) {
  const int c = even + far_count;
  if (c <= 0 || count <= 0) return;
  if (far_count > 0) {
    farthest_in_chunks_kernel<<<far_count, kThreads, 0, stream>>>(norm2, count, far_count, far);
    FLASHOT_CUDA_CHECK_LAUNCH();
  }
  pack_sample_kernel<<<grid_for(std::size_t(c)), kThreads, 0, stream>>>(points, norm2, logw, weight, count, even, far,
                                                                       c, d, packed);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_moment_values(const float* points, const float* norm2, int m, int d, float* v, cudaStream_t stream) {
  moment_values_kernel<<<(m + kThreads - 1) / kThreads, kThreads, 0, stream>>>(points, norm2, m, d, v);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_points_gradient(const float* points, const float* t, const float* r, int count, int d, double factor,
                            float* out, cudaStream_t stream) {
  points_gradient_kernel<<<grid_for(std::size_t(count) * d), kThreads, 0, stream>>>(points, t, r, std::size_t(count),
                                                                                     d, factor, out);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_primal_terms(const float* points, const float* out, int n, int d, double* terms, cudaStream_t stream) {
  primal_terms_kernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(points, out, n, d, terms);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_log_weights(const float* w, std::size_t n, float* logw, cudaStream_t stream) {
  if (n == 0) return;
  log_weights_kernel<<<grid_for(n), kThreads, 0, stream>>>(w, n, logw);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

int weighted_sum_blocks(std::size_t n) {
  return int(std::clamp<std::size_t>((n + kThreads - 1) / kThreads, 1, 1024));
}

void launch_weighted_sums(const float* w, const float* h, const float* hh, std::size_t n, double epsilon, double rho,
                          double* partials, cudaStream_t stream) {
  weighted_sums_kernel<<<unsigned(weighted_sum_blocks(n)), kThreads, 0, stream>>>(w, h, hh, n, epsilon, rho,
                                                                                 partials);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_batch_weighted_sums(const float* w, const float* h, const float* hh, const SumRange* ranges, int count,
                                int widest, double* partials, cudaStream_t stream) {
  for (int first = 0; first < count; first += 65535) {  // gridDim.y's limit
    const int now = std::min(65535, count - first);
    batch_weighted_sums_kernel<<<dim3(unsigned(widest), unsigned(now)), kThreads, 0, stream>>>(w, h, hh,
                                                                                             ranges + first, partials);
    FLASHOT_CUDA_CHECK_LAUNCH();
  }
}

void launch_fill(float* data, std::size_t count, float value, cudaStream_t stream) {
  if (count == 0) return;
  fill_kernel<<<grid_for(count), kThreads, 0, stream>>>(data, count, value);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda

// The scan runs on the device's legacy default stream, which waits for the work queued before it on that stream and
// on every blocking stream (a producer's pending writes to the points), and is synchronized before returning.
void cuda_scan_device_points(const DevicePointsView& p, const std::string& name, DeviceScan& scan) {
  using namespace cuda;
  require_device_memory(p.data, p.device, name);
  DeviceScope scope(p.device);
  const int d = static_cast<int>(p.d);
  const std::size_t count = p.n * p.d;
  int sms = 0;
  FLASHOT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, p.device));
  // Enough threads to fill the device, at least d of them; the stride is a multiple of d so each thread keeps
  // one column.
  const std::size_t wanted = std::max<std::size_t>(std::size_t(sms) * 2048, p.d);
  const std::size_t threads = std::min<std::size_t>(wanted, std::max<std::size_t>(count, p.d));
  const std::size_t stride = threads / p.d * p.d;
  DeviceBuffer<unsigned> bounds(2 * p.d);
  DeviceBuffer<unsigned long long> bad(1);
  const cudaStream_t stream = cudaStreamLegacy;
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(bounds.get(), 0xff, sizeof(unsigned) * p.d, stream));
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(bounds.get() + p.d, 0, sizeof(unsigned) * p.d, stream));
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(bad.get(), 0xff, sizeof(unsigned long long), stream));
  scan_kernel<<<unsigned((stride + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      p.data, count, d, stride, bounds.get(), bounds.get() + p.d, bad.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
  std::vector<unsigned> keys(2 * p.d);
  unsigned long long bad_row = 0;
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(keys.data(), bounds.get(), sizeof(unsigned) * keys.size(),
                                     cudaMemcpyDeviceToHost, stream));
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(&bad_row, bad.get(), sizeof bad_row, cudaMemcpyDeviceToHost, stream));
  FLASHOT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (bad_row != std::numeric_limits<unsigned long long>::max()) {
    // The error path reads the offending row (d values) to name its column and value.
    scan.bad_row = static_cast<long long>(bad_row);
    scan.row.resize(p.d);
    FLASHOT_CUDA_CHECK(cudaMemcpy(scan.row.data(), p.data + bad_row * p.d, sizeof(float) * p.d,
                                  cudaMemcpyDeviceToHost));
    return;
  }
  for (std::size_t c = 0; c < p.d; ++c) {
    scan.lo[c] = std::min(scan.lo[c], key_float(keys[c]));
    scan.hi[c] = std::max(scan.hi[c], key_float(keys[p.d + c]));
  }
}

// The weights' scan, on the legacy default stream as the points' scan. Each block's total, smallest weight and
// first bad index come back (a few kB for any n); the total is summed here in block order, so it is the same every
// run. On the error path the single offending value is read back for the message: four bytes, not staging.
DeviceWeightScan cuda_scan_device_weights(const DeviceWeights& w, const std::string& name) {
  using namespace cuda;
  require_device_memory(w.data, w.device, name);
  DeviceScope scope(w.device);
  const int blocks = weighted_sum_blocks(w.n);
  DeviceBuffer<double> totals(blocks);
  DeviceBuffer<float> smallest(blocks);
  DeviceBuffer<unsigned long long> bad(blocks);
  const cudaStream_t stream = cudaStreamLegacy;
  scan_weights_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(w.data, w.n, totals.get(), smallest.get(),
                                                                  bad.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
  std::vector<double> host_totals(blocks);
  std::vector<float> host_smallest(blocks);
  std::vector<unsigned long long> host_bad(blocks);
  totals.download(std::span<double>(host_totals), stream);
  smallest.download(std::span<float>(host_smallest), stream);
  bad.download(std::span<unsigned long long>(host_bad), stream);
  FLASHOT_CUDA_CHECK(cudaStreamSynchronize(stream));
  DeviceWeightScan scan;
  scan.smallest = std::numeric_limits<float>::infinity();
  unsigned long long first = std::numeric_limits<unsigned long long>::max();
  for (int k = 0; k < blocks; ++k) {
    scan.total += host_totals[k];
    scan.smallest = std::min(scan.smallest, host_smallest[k]);
    first = std::min(first, host_bad[k]);
  }
  if (first != std::numeric_limits<unsigned long long>::max()) {
    scan.bad_index = static_cast<long long>(first);
    FLASHOT_CUDA_CHECK(cudaMemcpy(&scan.bad_value, w.data + first, sizeof(float), cudaMemcpyDeviceToHost));
  }
  return scan;
}

// A device batch (solve_batch_on_device): every problem's points and weights scanned in one launch each, on the
// legacy default stream as Problem::on_device's scans (the producers' queued work is waited for); the per-problem
// bounds, the weights' per-block totals and the first bad rows / indices come back (kilobytes, one synchronisation);
// the centres are computed here with solve_batch's double arithmetic; one more launch writes the concatenation.
// Nothing of the points or weights passes through host memory but, on the error path, the offending row or value.
DeviceBatch cuda_prepare_device_batch(std::span<const DeviceBatchInput> problems, std::size_t rows,
                                      std::size_t cols, std::size_t d, int device) {
  using namespace cuda;
  const std::size_t count = problems.size();
  const auto prefix = [](std::size_t q) { return "batch problem " + std::to_string(q) + ": "; };
  for (std::size_t q = 0; q < count; ++q) {
    const DeviceBatchInput& p = problems[q];
    require_device_memory(p.x.data, device, prefix(q) + "x");
    require_device_memory(p.y.data, device, prefix(q) + "y");
    if (p.a.data != nullptr) require_device_memory(p.a.data, device, prefix(q) + "a");
    if (p.b.data != nullptr) require_device_memory(p.b.data, device, prefix(q) + "b");
  }
  DeviceScope scope(device);
  const cudaStream_t stream = cudaStreamLegacy;
  const int n_sides = int(2 * count);
  std::vector<BatchSide> sides(n_sides);
  std::size_t widest_rows = 0;
  int widest_blocks = 1;
  for (std::size_t q = 0; q < count; ++q) {
    const DeviceBatchInput& p = problems[q];
    const std::size_t row_end = q + 1 < count ? problems[q + 1].row_begin : rows;
    const std::size_t col_end = q + 1 < count ? problems[q + 1].col_begin : cols;
    sides[2 * q] = {p.x.data, p.a.data, p.x.n, p.row_begin, row_end - p.row_begin,
                    static_cast<float>(1.0 / static_cast<double>(p.x.n))};
    sides[2 * q + 1] = {p.y.data, p.b.data, p.y.n, p.col_begin, col_end - p.col_begin,
                        static_cast<float>(1.0 / static_cast<double>(p.y.n))};
    for (const BatchSide& side : {sides[2 * q], sides[2 * q + 1]}) {
      widest_rows = std::max(widest_rows, side.n);
      if (side.weights != nullptr) widest_blocks = std::max(widest_blocks, weighted_sum_blocks(side.n));
    }
  }
  DeviceBuffer<BatchSide> table(n_sides);
  table.upload(std::span<const BatchSide>(sides), stream);
  DeviceBuffer<unsigned> lo(count * d), hi(count * d);
  DeviceBuffer<unsigned long long> bad_rows(n_sides);
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(lo.get(), 0xff, sizeof(unsigned) * count * d, stream));
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(hi.get(), 0, sizeof(unsigned) * count * d, stream));
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(bad_rows.get(), 0xff, sizeof(unsigned long long) * n_sides, stream));
  const std::size_t slots = std::size_t(n_sides) * widest_blocks;
  DeviceBuffer<double> totals(slots);
  DeviceBuffer<float> smallest(slots);
  DeviceBuffer<unsigned long long> bad_weights(slots);
  const unsigned scan_blocks = unsigned((widest_rows + kScanRows - 1) / kScanRows);
  for (int first = 0; first < n_sides; first += 65535) {  // gridDim.y's limit
    const unsigned now = unsigned(std::min(65535, n_sides - first));
    batch_scan_kernel<<<dim3(scan_blocks, now), kThreads, 0, stream>>>(table.get(), first, int(d), lo.get(),
                                                                       hi.get(), bad_rows.get());
    FLASHOT_CUDA_CHECK_LAUNCH();
    batch_scan_weights_kernel<<<dim3(unsigned(widest_blocks), now), kThreads, 0, stream>>>(
        table.get(), first, widest_blocks, totals.get(), smallest.get(), bad_weights.get());
    FLASHOT_CUDA_CHECK_LAUNCH();
  }
  std::vector<unsigned> lo_keys(count * d), hi_keys(count * d);
  std::vector<unsigned long long> first_bad(n_sides), weight_bad(slots);
  std::vector<double> host_totals(slots);
  std::vector<float> host_smallest(slots);
  lo.download(std::span<unsigned>(lo_keys), stream);
  hi.download(std::span<unsigned>(hi_keys), stream);
  bad_rows.download(std::span<unsigned long long>(first_bad), stream);
  totals.download(std::span<double>(host_totals), stream);
  smallest.download(std::span<float>(host_smallest), stream);
  bad_weights.download(std::span<unsigned long long>(weight_bad), stream);
  FLASHOT_CUDA_CHECK(cudaStreamSynchronize(stream));

  DeviceBatch out;
  out.diameter.resize(count);
  out.mass_a.resize(count);
  out.mass_b.resize(count);
  out.min_a = out.min_b = std::numeric_limits<float>::infinity();
  // The weights first, problem by problem (a, then b), as solve_batch validates them before it reads the points.
  for (std::size_t q = 0; q < count; ++q)
    for (int t = 0; t < 2; ++t) {
      const BatchSide& side = sides[2 * q + t];
      const char* name = t == 0 ? "a" : "b";
      double& mass = t == 0 ? out.mass_a[q] : out.mass_b[q];
      float& low = t == 0 ? out.min_a : out.min_b;
      if (side.padded > side.n) low = 0;  // the padding's zero weights
      if (side.weights == nullptr) {
        // Uniform: the mass solve_batch sums from its host copy, in the same order.
        for (std::size_t i = 0; i < side.n; ++i) mass += side.uniform;
        low = std::min(low, side.uniform);
        continue;
      }
      unsigned long long bad = std::numeric_limits<unsigned long long>::max();
      float least = std::numeric_limits<float>::infinity();
      const int blocks = weighted_sum_blocks(side.n);
      for (int k = 0; k < blocks; ++k) {  // block order: the same total every run
        const std::size_t at = std::size_t(2 * q + t) * widest_blocks + k;
        mass += host_totals[at];
        least = std::min(least, host_smallest[at]);
        bad = std::min(bad, weight_bad[at]);
      }
      if (bad != std::numeric_limits<unsigned long long>::max()) {
        float value = 0;
        FLASHOT_CUDA_CHECK(cudaMemcpy(&value, side.weights + bad, sizeof(float), cudaMemcpyDeviceToHost));
        throw std::invalid_argument(prefix(q) + name + "[" + std::to_string(bad) +
                                    "] must be a finite weight ≥ 0 (got " + show(value) + ")");
      }
      if (!(mass > 0))
        throw std::invalid_argument(prefix(q) + name + " must have a positive total mass (got " + show(mass) + ")");
      low = std::min(low, least);
    }
  // Then the points: the first problem's first non-finite coordinate (x before y), validate_points' message.
  std::vector<double> centres(count * d);
  for (std::size_t q = 0; q < count; ++q) {
    for (int t = 0; t < 2; ++t) {
      const unsigned long long row = first_bad[2 * q + t];
      if (row == std::numeric_limits<unsigned long long>::max()) continue;
      std::vector<float> values(d);
      FLASHOT_CUDA_CHECK(cudaMemcpy(values.data(), sides[2 * q + t].points + row * d, sizeof(float) * d,
                                    cudaMemcpyDeviceToHost));
      for (std::size_t c = 0; c < d; ++c)
        if (!std::isfinite(values[c]))
          throw std::invalid_argument(prefix(q) + non_finite_message(t == 0 ? "x" : "y", row, c, values[c]));
    }
    double diam2 = 0;
    for (std::size_t c = 0; c < d; ++c) {
      const double low = key_float(lo_keys[q * d + c]), high = key_float(hi_keys[q * d + c]);
      centres[q * d + c] = 0.5 * (low + high);
      diam2 += (high - low) * (high - low);
    }
    out.diameter[q] = std::sqrt(diam2);
  }

  // The concatenation, owned by `out.memory` (the backend copies it into its own buffers).
  struct Memory {
    DeviceBuffer<float> x, y, a, b;
  };
  auto memory = std::make_shared<Memory>();
  memory->x = DeviceBuffer<float>(rows * d);
  memory->y = DeviceBuffer<float>(cols * d);
  memory->a = DeviceBuffer<float>(rows);
  memory->b = DeviceBuffer<float>(cols);
  DeviceBuffer<double> centre_table(count * d);
  centre_table.upload(std::span<const double>(centres), stream);
  std::size_t widest = 0;
  for (const BatchSide& side : sides) widest = std::max(widest, side.padded * d);
  const unsigned gather_blocks = unsigned(std::clamp<std::size_t>((widest + 4 * kThreads - 1) / (4 * kThreads), 1,
                                                                  65535));
  for (int first = 0; first < n_sides; first += 65535) {
    const unsigned now = unsigned(std::min(65535, n_sides - first));
    batch_gather_kernel<<<dim3(gather_blocks, now), kThreads, 0, stream>>>(
        table.get(), first, int(d), centre_table.get(), memory->x.get(), memory->y.get(), memory->a.get(),
        memory->b.get());
    FLASHOT_CUDA_CHECK_LAUNCH();
  }
  // The backend reads the concatenation on its own (non-blocking) stream, and the caller may free its memory once
  // this returns.
  FLASHOT_CUDA_CHECK(cudaStreamSynchronize(stream));
  out.x = memory->x.get();
  out.y = memory->y.get();
  out.a = memory->a.get();
  out.b = memory->b.get();
  out.memory = memory;
  return out;
}

}  // namespace flashot::detail
