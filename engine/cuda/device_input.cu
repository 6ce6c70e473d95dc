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
#include <stdexcept>
#include <string>
#include <vector>

#include "backend.hpp"
#include "device_buffer.hpp"
#include "device_input.hpp"
#include "error.hpp"

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
                                   const float* __restrict__ logw, const float* __restrict__ weight, int count, int c,
                                   int d, float* __restrict__ packed) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= c) return;
  const std::size_t i = std::size_t(k) * count / c;
  for (int j = 0; j < d; ++j) packed[std::size_t(k) * d + j] = points[i * d + j];
  packed[std::size_t(c) * d + k] = norm2[i];
  packed[std::size_t(c) * (d + 1) + k] = logw[i];
  packed[std::size_t(c) * (d + 2) + k] = weight[i];
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

/// detail::weighted_sums (engine/src/sinkhorn.cpp) per block, in fp64 with explicitly rounded operations.
__global__ void weighted_sums_kernel(const float* __restrict__ w, const float* __restrict__ h,
                                     const float* __restrict__ hh, std::size_t n, double epsilon, double rho,
                                     double* __restrict__ partials) {
  __shared__ double shared[kThreads];
  double marginal = 0, dual = 0;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
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
    partials[2 * blockIdx.x] = marginal;
    partials[2 * blockIdx.x + 1] = dual;
  }
}

__global__ void fill_kernel(float* data, std::size_t count, float value) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += std::size_t(gridDim.x) * blockDim.x)
    data[i] = value;
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
                        int c, int d, float* packed, cudaStream_t stream) {
  if (c <= 0) return;
  pack_sample_kernel<<<grid_for(std::size_t(c)), kThreads, 0, stream>>>(points, norm2, logw, weight, count, c, d,
                                                                       packed);
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

}  // namespace flashot::detail
