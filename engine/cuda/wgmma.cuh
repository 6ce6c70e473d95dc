#pragma once
// Hopper's warpgroup matrix product (wgmma, sm_90a) as the tensor-core kernels use it: A (64 × 16, fp16) from
// registers in the m16n8k16 A-fragment layout (warp w of the warpgroup holds rows 16w .. 16w + 15), B (16 × N,
// fp16) from shared memory through a matrix descriptor, D (64 × N, fp32) in registers in the m16n8 C-fragment layout
// repeated over N / 8 column groups. Shared layout of B: K-major "interleaved" (no swizzle) core matrices, 8 points ×
// 8 coordinates (16 bytes each) in 128 contiguous bytes — core matrix (point group p8, chunk c8) at byte
// (p8 · chunks + c8) · 128, where chunks = padded d / 8. The same core matrices feed ldmatrix for mma.sync.
//
// Every function compiles to its instruction only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); elsewhere to a trap, and
// the host never launches a kernel that uses them there (wgmma_image_available).

#include <cstdint>

namespace flashot::detail::cuda::wgmma {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLASHOT_WGMMA_DEVICE 1
#endif

/// Byte offset of point p, 16-byte chunk c8 in a tile of interleaved core matrices with `chunks` chunks per point.
__host__ __device__ constexpr int core_offset(int p, int c8, int chunks) {
  return ((p / 8) * chunks + c8) * 128 + (p % 8) * 16;
}

/// The descriptor of the K-major interleaved B operand whose k16 step ks starts at shared byte address `address`
/// (tile base + ks · 256): LBO = 128 bytes (the next 8 coordinates of the same points), SBO = chunks · 128 bytes
/// (the next 8 points), no swizzle.
__device__ __forceinline__ std::uint64_t descriptor(std::uint32_t address, int chunks) {
  const std::uint64_t start = (address & 0x3FFFFu) >> 4;
  const std::uint64_t lbo = 128u >> 4;
  const std::uint64_t sbo = std::uint64_t(chunks * 128) >> 4;
  return start | (lbo << 16) | (sbo << 32);
}

__device__ __forceinline__ void fence() {
#ifdef FLASHOT_WGMMA_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void commit() {
#ifdef FLASHOT_WGMMA_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

template <int PENDING>
__device__ __forceinline__ void wait() {
#ifdef FLASHOT_WGMMA_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
#endif
}

/// Makes this thread's ordinary (and cp.async) writes to shared memory visible to the tensor cores' reads; a barrier
/// must follow before the wgmma that reads them.
__device__ __forceinline__ void fence_shared_for_async() {
#ifdef FLASHOT_WGMMA_DEVICE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/// d (+)= a · B for one k16 step, N = 64: d[nt][q] is C-fragment register q of column group nt (8 columns).
/// accumulate = false overwrites d.
__device__ __forceinline__ void mma_n64(float (&d)[8][4], const std::uint32_t (&a)[4], std::uint64_t desc,
                                        bool accumulate) {
#ifdef FLASHOT_WGMMA_DEVICE
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
        "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),
        "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate ? 1 : 0));
#else
  (void)d, (void)a, (void)desc, (void)accumulate;
  __trap();
#endif
}

// ---- Bulk (TMA) copies of whole column tiles on shared-memory barriers --------------------------------------
// The warpgroup kernels' column tiles are stored in global memory already in their shared-memory layout (one
// contiguous block per tile, launch_tile_operands), so one thread fetches a tile with one bulk copy instead of
// every thread issuing cp.async with its own address arithmetic (a quarter of the loop's time, measured by ncu).

__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

/// Initialises the barrier at shared address `bar` for `count` arrivals per phase (one thread, before any use).
__device__ __forceinline__ void barrier_init(std::uint32_t bar, unsigned count) {
#ifdef FLASHOT_WGMMA_DEVICE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  (void)bar, (void)count;
  __trap();
#endif
}

/// One arrival on `bar` that also expects `bytes` of bulk copies to complete before the phase ends.
__device__ __forceinline__ void arrive_expect_bytes(std::uint32_t bar, unsigned bytes) {
#ifdef FLASHOT_WGMMA_DEVICE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#else
  (void)bar, (void)bytes;
#endif
}

/// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory to shared address `dst`;
/// completion is counted on `bar`.
__device__ __forceinline__ void bulk_copy(std::uint32_t dst, const void* src, unsigned bytes, std::uint32_t bar) {
#ifdef FLASHOT_WGMMA_DEVICE
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#else
  (void)dst, (void)src, (void)bytes, (void)bar;
#endif
}

/// Waits until the phase of `bar` with parity `parity` has completed (its copies are then visible to this thread).
__device__ __forceinline__ void barrier_wait(std::uint32_t bar, unsigned parity) {
#ifdef FLASHOT_WGMMA_DEVICE
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#else
  (void)bar, (void)parity;
#endif
}

/// elect.sync over the full warp: true on exactly one lane (no lane-id read, no shuffle; every lane must call it).
__device__ __forceinline__ bool elect_one() {
#ifdef FLASHOT_WGMMA_DEVICE
  unsigned elected;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "elect.sync _|p, 0xffffffff;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(elected));
  return elected != 0;
#else
  return threadIdx.x % 32 == 0;
#endif
}

/// Adds one to the shared counter at `address` and returns its old value: one atomic with acquire-release order at
/// CTA scope, in place of a fence, the atomic and a fence (which compiled to two sequentially consistent MEMBARs
/// around a warp-aggregated atomic: a fifth of the screened kernels' warp time, ncu, eighth session).
__device__ __forceinline__ unsigned count_in(std::uint32_t address) {
#ifdef FLASHOT_WGMMA_DEVICE
  unsigned old;
  asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], 1;\n" : "=r"(old) : "r"(address) : "memory");
  return old;
#else
  (void)address;
  return 0;
#endif
}

/// Orders the accumulator registers d after the preceding wgmma wait: an empty asm that "modifies" every register,
/// so the compiler moves no read of them above the wait.
__device__ __forceinline__ void fence_operands(float (&d)[8][4]) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int q = 0; q < 4; ++q) asm volatile("" : "+f"(d[nt][q])::"memory");
}

}  // namespace flashot::detail::cuda::wgmma
