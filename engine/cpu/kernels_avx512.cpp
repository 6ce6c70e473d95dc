// Tile kernels for AVX-512F: 16 floats per vector.
// The instruction set is chosen per function with a target pragma, not per build, so one binary runs on any
// x86-64 CPU; select_kernels() picks the widest set the CPU has.
#include <immintrin.h>

#include <cstddef>

#include "kernels.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")

namespace flashot::cpu::avx512 {

inline constexpr std::size_t kWidth = 16;
inline constexpr std::size_t kMicroRows = 8;  // register tile (kMicroRows, kMicroVecs·kWidth): 16 accumulators
inline constexpr std::size_t kMicroVecs = 2;
typedef float VecF __attribute__((vector_size(kWidth * sizeof(float))));
// The masked form with every lane set is plain vmaxps; _mm512_max_ps would start from _mm512_undefined_ps, which
// GCC 12 reports as maybe-uninitialized.
inline VecF vmax(VecF a, VecF b) {
  const __m512 x = reinterpret_cast<__m512>(a);
  return reinterpret_cast<VecF>(_mm512_mask_max_ps(x, 0xFFFF, x, reinterpret_cast<__m512>(b)));
}

#include "tile_kernels.inc"

}  // namespace flashot::cpu::avx512

#pragma GCC pop_options

namespace flashot::cpu {

const IsaKernels& avx512_kernels() {
  static const IsaKernels kernels{"avx512", &avx512::lse, &avx512::weighted, &avx512::fused, &avx512::scores,
                                  &avx512::exp2_clamped};
  return kernels;
}

}  // namespace flashot::cpu
