// wgmma_probe: checks the warpgroup product of engine/cuda/wgmma.cuh (A from registers, B as interleaved core
// matrices in shared memory) against a host reference, and times one screening sweep over n × m points at
// d = 64 — the hi·hi product of every 64 × 64 tile plus the screen's per-entry work — several ways: wgmma alone,
// wgmma + screen, mma.sync + screen, with and without the lo halves staged, 128 or 256 rows per block
// (docs/benchmarks.md, fourth session, has the figures and ncu's reading). Last, the same sweep with kept tiles
// under two synchronisation schemes (kept_kernel: a barrier per tile, as the engine's warpgroup kernels, or TMA
// stages on mbarriers). Prints a table; exits non-zero when a check fails.
//
//   flashot_wgmma_probe [n]      (default 100000)

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "mma_device.cuh"
#include "wgmma.cuh"

namespace {

using namespace flashot::detail::cuda;

#define CHECK(call)                                                                                  \
  do {                                                                                               \
    const cudaError_t e = (call);                                                                    \
    if (e != cudaSuccess) {                                                                          \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e));     \
      std::exit(2);                                                                                  \
    }                                                                                                \
  } while (0)

constexpr int kTile = 64;

__device__ __forceinline__ void load_matrices_x4(std::uint32_t address, std::uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

/// A fragments (m16k16 layout) of rows row0 .. row0 + 15 of x (count × 16·KS halves).
template <int KS>
__device__ __forceinline__ void load_a(const __half* x, int row0, int count, std::uint32_t (&a)[KS][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int ks = 0; ks < KS; ++ks)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = row0 + g + (q & 1) * 8, k = ks * 16 + 2 * t + (q >> 1) * 8;
      a[ks][q] = r < count ? *reinterpret_cast<const std::uint32_t*>(x + std::size_t(r) * 16 * KS + k) : 0u;
    }
}

/// d = the warpgroup's 64 rows (A fragments a) × the 64 points of the interleaved tile at shared address base.
template <int KS>
__device__ __forceinline__ void hi_product(std::uint32_t base, const std::uint32_t (&a)[KS][4], float (&d)[8][4]) {
  wgmma::fence();
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) wgmma::mma_n64(d, a[ks], wgmma::descriptor(base + ks * 256, 2 * KS), ks > 0);
  wgmma::commit();
  wgmma::wait<0>();
}

/// Copies points [j0, j0 + 64) of y into the interleaved layout at `tile` (cp.async; zeros past count).
/// QUAD: 8 lanes fill one core matrix (points p8·8 + lane % 8, chunk 4·cq + lane / 8), so that a warp writes four
/// whole core matrices (512 contiguous shared bytes per 128, no bank conflict) and reads 64 contiguous bytes of
/// each of 8 points; otherwise a warp reads 4 whole points (coalesced) and writes 8 chunks of each, 128 bytes
/// apart (two-way bank conflicts).
template <int KS, bool QUAD = false>
__device__ __forceinline__ void load_tile(std::uint8_t* tile, const __half* y, int j0, int count, int threads) {
  constexpr int kChunks = 2 * KS;
  if constexpr (QUAD) {
    constexpr int kQuads = (kChunks + 3) / 4, kUnits = (kTile / 8) * kQuads;
    const int lane = threadIdx.x % 32, warps = threads / 32;
    for (int u = threadIdx.x / 32; u < kUnits; u += warps) {
      const int p = (u / kQuads) * 8 + lane % 8, c = (u % kQuads) * 4 + lane / 8, j = j0 + p;
      if (c < kChunks)
        copy_async16(tile + wgmma::core_offset(p, c, kChunks),
                     y + std::size_t(j < count ? j : 0) * 16 * KS + c * 8, j < count);
    }
  } else {
    for (int e = threadIdx.x; e < kTile * kChunks; e += threads) {
      const int p = e / kChunks, c = e % kChunks, j = j0 + p;
      copy_async16(tile + wgmma::core_offset(p, c, kChunks), y + std::size_t(j < count ? j : 0) * 16 * KS + c * 8,
                   j < count);
    }
  }
}

/// One 64-row × 64-column tile, both ways, from one block of 128 threads: out_w (wgmma), out_m (mma.sync).
template <int KS>
__global__ void check_kernel(const __half* x, const __half* y, float* out_w, float* out_m) {
  constexpr int kChunks = 2 * KS;
  __shared__ __align__(128) std::uint8_t tile[kTile * kChunks * 16];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  load_tile<KS>(tile, y, 0, kTile, 128);
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
  wgmma::fence_shared_for_async();
  __syncthreads();
  std::uint32_t a[KS][4];
  load_a<KS>(x, warp * 16, kTile, a);
  const std::uint32_t base = static_cast<std::uint32_t>(__cvta_generic_to_shared(tile));
  float d[8][4];
  hi_product<KS>(base, a, d);
  float m[8][4] = {};
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      // b0 = chunk 2ks, b1 = chunk 2ks + 1 of point nt·8 + g: lanes 0-7 address matrix 0, 8-15 matrix 1.
      std::uint32_t r[4];
      const int q = (lane / 8) % 2;
      load_matrices_x4(base + wgmma::core_offset(nt * 8 + lane % 8, 2 * ks + q, kChunks), r);
      mma_16816(m[nt], a[ks], r[0], r[1], false);
    }
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int row = warp * 16 + g + (q / 2) * 8, col = nt * 8 + 2 * t + q % 2;
      out_w[row * kTile + col] = d[nt][q];
      out_m[row * kTile + col] = m[nt][q];
    }
}

enum Mode { kWgmmaOnly = 0, kWgmmaScreen = 1, kMmaScreen = 2, kWgmmaScreenLo = 3 };

/// The sweep: blocks of 256 threads (two warpgroups, 128 rows), every column tile of y through three cp.async
/// stages (hi halves and biases only), one barrier per tile. Screen: per entry v = α·s + b_j, per row the max, a
/// warp vote against the row's floor (set so that no tile is kept: this times a dropped tile's cost).
/// kWgmmaScreenLo also streams a second (lo) array of the same size into each stage, unread: the cost of staging
/// the split operands' lo halves through L2.
template <int KS, int MODE, int WGS, bool QUAD>
__global__ void __launch_bounds__(128 * WGS) sweep_kernel(const __half* x, const __half* y, const __half* y_lo,
                                                    const float* bias, int n,
                                                    int m, float alpha, float floor_value, float* sink,
                                                    unsigned* kept) {
  constexpr int kChunks = 2 * KS, kTileBytes = kTile * kChunks * 16;
  constexpr int kStageBytes = (MODE == kWgmmaScreenLo ? 2 : 1) * kTileBytes + kTile * 4;
  extern __shared__ __align__(128) std::uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  constexpr int kThreads = 128 * WGS;
  const int row0 = blockIdx.x * 64 * WGS + warp * 16;
  std::uint32_t a[KS][4];
  load_a<KS>(x, row0, n, a);
  const int tiles = (m + kTile - 1) / kTile;
  const auto start = [&](int it) { return it * kTile; };
  const auto issue = [&](int it) {
    if (it < tiles) {
      std::uint8_t* st = smem + (it % 3) * kStageBytes;
      load_tile<KS, QUAD>(st, y, start(it), m, kThreads);
      if constexpr (MODE == kWgmmaScreenLo) load_tile<KS, QUAD>(st + kTileBytes, y_lo, start(it), m, kThreads);
      if (threadIdx.x < kTile / 4) {
        const int j = start(it) + threadIdx.x * 4;
        copy_async16(st + kStageBytes - kTile * 4 + threadIdx.x * 16, bias + min(j, m - 4), j + 4 <= m);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  issue(0);
  issue(1);
  float acc_sink = 0.f;
  unsigned my_kept = 0;
  const std::uint32_t smem_base = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  for (int it = 0; it < tiles; ++it) {
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    if constexpr (MODE != kMmaScreen) wgmma::fence_shared_for_async();
    __syncthreads();
    issue(it + 2);
    const int stage = it % 3;
    const std::uint32_t base = smem_base + stage * kStageBytes;
    float d[8][4];
    if constexpr (MODE == kMmaScreen) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) d[nt][q] = 0.f;
#pragma unroll
        for (int ks = 0; ks + 1 < KS; ks += 2) {
          std::uint32_t r[4];
          load_matrices_x4(base + wgmma::core_offset(nt * 8 + lane % 8, 2 * ks + lane / 8, kChunks), r);
          mma_16816(d[nt], a[ks], r[0], r[1], false);
          mma_16816(d[nt], a[ks + 1], r[2], r[3], false);
        }
      }
    } else {
      hi_product<KS>(base, a, d);
    }
    if constexpr (MODE == kWgmmaOnly) {
      acc_sink += d[0][0] + d[7][3];
    } else {
      const float* vt = reinterpret_cast<const float*>(smem + (stage + 1) * kStageBytes - kTile * 4);
      float top0 = -INFINITY, top1 = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const float2 b2 = *reinterpret_cast<const float2*>(&vt[nt * 8 + 2 * t]);
        top0 = fmaxf(top0, fmaxf(fmaf(alpha, d[nt][0], b2.x), fmaf(alpha, d[nt][1], b2.y)));
        top1 = fmaxf(top1, fmaxf(fmaf(alpha, d[nt][2], b2.x), fmaf(alpha, d[nt][3], b2.y)));
      }
      const bool keep = __any_sync(0xffffffffu, !(top0 < floor_value) || !(top1 < floor_value));
      my_kept += keep ? 1u : 0u;
    }
  }
  if (lane == 0) atomicAdd(kept, my_kept);
  if (acc_sink == 12345.f) sink[0] = acc_sink;
}

// ---- Kept tiles: one barrier per tile (the engine's warpgroup kernels) vs TMA stages on mbarriers ----------------
//
// The engine's screened warpgroup kernels run one 16-warp block per SM with a barrier per column tile, so a warp that
// keeps a tile (cross products, exponentials) holds the other 15 at the next barrier. This sweep models them — 256
// rows per block, hi and lo halves of each 64-column tile staged, hi·hi by wgmma, a screen — with kept tiles chosen
// by a fixed hash (1 in 16 warp tiles, the same in both variants, given the engine's cross products and 32 exp2),
// two ways: cp.async into three stages and __syncthreads per tile (as the engine), or 1-D bulk copies (TMA) into
// four stages completing on "full" mbarriers, released through "empty" mbarriers (one arrival per warp) — no block
// barrier, so warps drift apart by up to two tiles. Column tiles are stored tile-major in global memory (hi then lo
// core matrices, 16 KB per tile at d = 64), the layout a bulk copy needs.

// The barrier and bulk-copy helpers are the engine's (wgmma.cuh); only the plain arrival is the probe's own.
__device__ __forceinline__ void mbar_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

template <int KS, bool TMA>
__global__ void __launch_bounds__(512, 1) kept_kernel(const __half* x, const std::uint8_t* y_tiles, int n, int tiles,
                                                      float alpha, float floor_value, float* sink,
                                                      unsigned* kept) {
  constexpr int kChunks = 2 * KS, kArray = kTile * kChunks * 16, kTileBytes = 2 * kArray;
  constexpr int kStages = TMA ? 4 : 3;
  extern __shared__ __align__(128) std::uint8_t smem[];
  __shared__ __align__(8) std::uint64_t bars[2 * 4];  // full[4], empty[4]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  const int row0 = blockIdx.x * 256 + warp * 16;
  std::uint32_t a[KS][4];
  load_a<KS>(x, row0, n, a);
  const std::uint32_t smem_base = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  const std::uint32_t bar_base = static_cast<std::uint32_t>(__cvta_generic_to_shared(bars));
  const auto full = [&](int s) { return bar_base + 8 * s; };
  const auto empty = [&](int s) { return bar_base + 8 * (4 + s); };
  const auto copy_in = [&](int it) {  // cp.async variant: every thread, 16 bytes at a time
    if (it < tiles) {
      const std::uint8_t* src = y_tiles + std::size_t(it) * kTileBytes;
      for (int e = threadIdx.x; e < kTileBytes / 16; e += 512)
        copy_async16(smem + (it % kStages) * kTileBytes + e * 16, src + e * 16, true);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  if constexpr (TMA) {
    if (threadIdx.x == 0) {
      for (int s = 0; s < kStages; ++s) {
        wgmma::barrier_init(full(s), 1);
        wgmma::barrier_init(empty(s), 16);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int s = 0; s < kStages && s < tiles; ++s) {
        wgmma::arrive_expect_bytes(full(s), kTileBytes);
        wgmma::bulk_copy(smem_base + s * kTileBytes, y_tiles + std::size_t(s) * kTileBytes, kTileBytes, full(s));
      }
    }
  } else {
    copy_in(0);
    copy_in(1);
  }
  float acc = 0.f;
  unsigned my_kept = 0;
  for (int it = 0; it < tiles; ++it) {
    const int s = it % kStages;
    if constexpr (TMA) {
      wgmma::barrier_wait(full(s), (it / kStages) & 1);
    } else {
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");
      wgmma::fence_shared_for_async();
      __syncthreads();
      copy_in(it + 2);
    }
    const std::uint32_t base = smem_base + s * kTileBytes;
    float d[8][4];
    hi_product<KS>(base, a, d);
    float top = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int q = 0; q < 4; ++q) top = fmaxf(top, fmaf(alpha, d[nt][q], 0.25f * q));
    const bool near = __any_sync(0xffffffffu, !(top < floor_value));  // never, as in the sweep above
    const bool keep = near || ((blockIdx.x * 131 + warp * 31 + it * 17) & 15) == 0;
    if (keep) {
      ++my_kept;
      const int q = lane / 8;
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        __syncwarp();
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          std::uint32_t b[4];
          load_matrices_x4(base + (q >> 1) * kArray + wgmma::core_offset(nt * 8 + lane % 8, 2 * ks + (q & 1), kChunks),
                           b);
          mma_16816(d[nt], a[ks], b[2], b[3], false);
          mma_16816(d[nt], a[ks], b[0], b[1], false);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int q2 = 0; q2 < 4; ++q2) acc += exp2f(fminf(alpha * d[nt][q2] * 1e-3f, 0.f) - float(t));
    }
    if constexpr (TMA) {
      __syncwarp();
      if (lane == 0) mbar_arrive(empty(s));
      if (threadIdx.x == 0 && it + kStages < tiles) {
        wgmma::barrier_wait(empty(s), (it / kStages) & 1);
        wgmma::arrive_expect_bytes(full(s), kTileBytes);
        wgmma::bulk_copy(base, y_tiles + std::size_t(it + kStages) * kTileBytes, kTileBytes, full(s));
      }
    }
  }
  if (lane == 0) atomicAdd(kept, my_kept);
  if (acc == 12345.f) sink[0] = acc;
}

/// Median event time of `launch` over PROBE_REPS launches (default 7) after a warm-up one (PROBE_REPS=1: that one,
/// for ncu), with *kept zeroed before each.
template <typename Launch>
float median_ms(unsigned* kept, Launch launch) {
  static const int reps = std::getenv("PROBE_REPS") ? std::atoi(std::getenv("PROBE_REPS")) : 7;
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> times;
  for (int rep = 0; rep < reps; ++rep) {
    CHECK(cudaMemset(kept, 0, 4));
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaGetLastError());
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (rep > 0 || reps == 1) times.push_back(ms);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

template <int KS, bool TMA>
float kept_sweep(const __half* x, const std::uint8_t* y_tiles, int n, int tiles, float* sink, unsigned* kept,
                 unsigned* kept_count) {
  constexpr int kBytes = (TMA ? 4 : 3) * 2 * kTile * 2 * KS * 16;
  CHECK(cudaFuncSetAttribute(kept_kernel<KS, TMA>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  const float ms = median_ms(kept, [&] {
    kept_kernel<KS, TMA><<<(n + 255) / 256, 512, kBytes>>>(x, y_tiles, n, tiles, 0.5f, 1e30f, sink, kept);
  });
  CHECK(cudaMemcpy(kept_count, kept, 4, cudaMemcpyDeviceToHost));
  std::printf("kept tiles n=m=%d d=%d %-34s %8.3f ms  (%u warp tiles kept)\n", n, 16 * KS,
              TMA ? "TMA stages on mbarriers, no barrier" : "cp.async stages, barrier per tile", ms, *kept_count);
  return ms;
}

template <int KS>
bool check(std::mt19937& rng) {
  const int d = 16 * KS;
  std::normal_distribution<float> normal;
  std::vector<__half> x(64 * d), y(64 * d);
  for (auto& v : x) v = __float2half(normal(rng));
  for (auto& v : y) v = __float2half(normal(rng));
  __half *dx, *dy;
  float *dw, *dm;
  CHECK(cudaMalloc(&dx, x.size() * 2));
  CHECK(cudaMalloc(&dy, y.size() * 2));
  CHECK(cudaMalloc(&dw, 64 * 64 * 4));
  CHECK(cudaMalloc(&dm, 64 * 64 * 4));
  CHECK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), y.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dw, 0xff, 64 * 64 * 4));  // NaN: an unwritten entry fails
  CHECK(cudaMemset(dm, 0xff, 64 * 64 * 4));
  check_kernel<KS><<<1, 128>>>(dx, dy, dw, dm);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> w(64 * 64), mm(64 * 64);
  CHECK(cudaMemcpy(w.data(), dw, w.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(mm.data(), dm, mm.size() * 4, cudaMemcpyDeviceToHost));
  double err_w = 0, err_m = 0, norm = 0;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j) {
      double ref = 0;
      for (int k = 0; k < d; ++k) ref += double(__half2float(x[i * d + k])) * __half2float(y[j * d + k]);
      err_w = std::max(err_w, std::abs(w[i * 64 + j] - ref));
      err_m = std::max(err_m, std::abs(mm[i * 64 + j] - ref));
      if (std::isnan(w[i * 64 + j])) err_w = INFINITY;
      if (std::isnan(mm[i * 64 + j])) err_m = INFINITY;
      norm = std::max(norm, std::abs(ref));
    }
  const bool ok = err_w <= 1e-5 * norm && err_m <= 1e-5 * norm;
  std::printf("check d=%3d: wgmma max err %.3g, mma.sync max err %.3g (of max |ref| %.3g): %s\n", d, err_w, err_m,
              norm, ok ? "ok" : "FAILED");
  cudaFree(dx), cudaFree(dy), cudaFree(dw), cudaFree(dm);
  return ok;
}

template <int KS, int MODE, int WGS, bool QUAD>
float sweep(const __half* x, const __half* y, const float* bias, int n, float* sink, unsigned* kept) {
  constexpr int kBytes = 3 * ((MODE == kWgmmaScreenLo ? 2 : 1) * kTile * 2 * KS * 16 + kTile * 4);
  CHECK(cudaFuncSetAttribute(sweep_kernel<KS, MODE, WGS, QUAD>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  const float ms = median_ms(kept, [&] {
    sweep_kernel<KS, MODE, WGS, QUAD><<<(n + 64 * WGS - 1) / (64 * WGS), 128 * WGS, kBytes>>>(
        x, y, x, bias, n, n, 0.5f, 1e30f, sink, kept);
  });
  int blocks = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, sweep_kernel<KS, MODE, WGS, QUAD>, 128 * WGS, kBytes));
  unsigned k = 0;
  CHECK(cudaMemcpy(&k, kept, 4, cudaMemcpyDeviceToHost));
  if (k != 0) std::printf("  (kept %u tiles: expected none)\n", k);
  static const char* names[] = {"wgmma product only", "wgmma + screen", "mma.sync + screen", "wgmma + screen + lo"};
  std::printf("sweep n=m=%d d=%d %-20s rows/block %d %-9s %8.3f ms  %6.1f TFLOP/s (hi product)  %d blocks/SM\n",
              n, 16 * KS, names[MODE], 64 * WGS, QUAD ? "quad" : "row", ms, 2.0 * n * double(n) * 16 * KS / (ms * 1e-3) / 1e12, blocks);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 100000;
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, compute capability %d.%d, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.major, prop.minor,
              prop.l2CacheSize >> 20);
  std::mt19937 rng(7);
  bool ok = check<1>(rng) && check<3>(rng) && check<4>(rng) && check<8>(rng);
  constexpr int kKs = 4;
  std::vector<__half> x(std::size_t(n) * 16 * kKs);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = __float2half(normal(rng) * 0.125f);
  std::vector<float> bias(n);
  for (auto& v : bias) v = normal(rng);
  __half *dx, *dy;
  float *db, *sink;
  unsigned* kept;
  CHECK(cudaMalloc(&dx, x.size() * 2));
  CHECK(cudaMalloc(&dy, x.size() * 2));
  CHECK(cudaMalloc(&db, n * 4));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMalloc(&kept, 4));
  CHECK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  std::shuffle(x.begin(), x.end(), rng);
  CHECK(cudaMemcpy(dy, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, bias.data(), n * 4, cudaMemcpyHostToDevice));
  sweep<kKs, kWgmmaOnly, 2, false>(dx, dy, db, n, sink, kept);
  sweep<kKs, kWgmmaOnly, 2, true>(dx, dy, db, n, sink, kept);
  sweep<kKs, kWgmmaScreen, 2, false>(dx, dy, db, n, sink, kept);
  sweep<kKs, kWgmmaScreen, 2, true>(dx, dy, db, n, sink, kept);
  sweep<kKs, kMmaScreen, 2, true>(dx, dy, db, n, sink, kept);
  sweep<kKs, kWgmmaScreenLo, 2, false>(dx, dy, db, n, sink, kept);
  sweep<kKs, kWgmmaScreenLo, 2, true>(dx, dy, db, n, sink, kept);
  sweep<kKs, kWgmmaScreen, 4, true>(dx, dy, db, n, sink, kept);
  sweep<kKs, kWgmmaScreenLo, 4, true>(dx, dy, db, n, sink, kept);
  // Kept tiles, both synchronisation schemes: the same tiles, the same bytes and the same kept warp tiles.
  const int tiles = (n + kTile - 1) / kTile;
  std::vector<std::uint8_t> tiled(std::size_t(tiles) * 2 * kTile * 2 * kKs * 16);
  for (std::size_t i = 0; i < tiled.size(); i += 2) {
    const __half h = __float2half(normal(rng) * 0.125f);
    std::memcpy(&tiled[i], &h, 2);
  }
  std::uint8_t* dtiles;
  CHECK(cudaMalloc(&dtiles, tiled.size()));
  CHECK(cudaMemcpy(dtiles, tiled.data(), tiled.size(), cudaMemcpyHostToDevice));
  unsigned kept_barrier = 0, kept_tma = 0;
  kept_sweep<kKs, false>(dx, dtiles, n, tiles, sink, kept, &kept_barrier);
  kept_sweep<kKs, true>(dx, dtiles, n, tiles, sink, kept, &kept_tma);
  if (kept_barrier != kept_tma) {
    std::printf("kept tiles differ between the two schemes: %u vs %u: FAILED\n", kept_barrier, kept_tma);
    ok = false;
  }
  return ok ? 0 : 1;
}
