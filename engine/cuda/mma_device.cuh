#pragma once
// Device helpers of the tensor-core kernels (mma_tile.cuh, wg_tile.cuh, apply_mma.cu): the m16n8k16 product, the
// asynchronous global→shared copy, and the per-device raise of a kernel's dynamic shared-memory limit.

#include <atomic>
#include <cstdint>

#include <cuda_runtime.h>

#include "error.hpp"

namespace flashot::detail::cuda {

/// c += a·b on the tensor cores: A (16×16, row) and B (16×8, col) fp16 or bf16, C (16×8) fp32.
__device__ __forceinline__ void mma_16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1, bool bf16) {
  if (bf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/// 16-byte global→shared copy that bypasses registers; `valid` false writes zeros.
__device__ __forceinline__ void copy_async16(void* shared, const void* global, bool valid) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global), "r"(valid ? 16 : 0));
}

/// Raises a kernel's dynamic shared-memory limit once per device (the attribute is per device and per kernel).
template <auto Kernel>
void allow_shared_bytes(int bytes) {
  static std::atomic<std::uint64_t> done_devices{0};
  int device = 0;
  FLASHOT_CUDA_CHECK(cudaGetDevice(&device));
  const std::uint64_t bit = std::uint64_t(1) << (device % 64);
  if (done_devices.load() & bit) return;
  FLASHOT_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done_devices.fetch_or(bit);
}

}  // namespace flashot::detail::cuda
