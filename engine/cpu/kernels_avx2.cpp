// Tile kernels for AVX2 + FMA: 8 floats per vector (the baseline of current x86-64 servers).
// The instruction set is chosen per function with a target pragma, not per build, so one binary runs on any
// x86-64 CPU; select_kernels() picks the widest set the CPU has.
#include <immintrin.h>

#include <cstddef>

#include "kernels.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace flashot::cpu::avx2 {

inline constexpr std::size_t kWidth = 8;
inline constexpr std::size_t kMicroRows = 4;  // register tile (kMicroRows, kMicroVecs·kWidth): 8 accumulators
inline constexpr std::size_t kMicroVecs = 2;
typedef float VecF __attribute__((vector_size(kWidth * sizeof(float))));
inline VecF vmax(VecF a, VecF b) {
  return reinterpret_cast<VecF>(_mm256_max_ps(reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b)));
}

#include "tile_kernels.inc"

}  // namespace flashot::cpu::avx2

#pragma GCC pop_options

namespace flashot::cpu {

const IsaKernels& avx2_kernels() {
  static const IsaKernels kernels{"avx2", &avx2::lse, &avx2::weighted, &avx2::fused, &avx2::scores,
                                  &avx2::exp2_clamped};
  return kernels;
}

}  // namespace flashot::cpu
