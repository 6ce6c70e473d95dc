// Tile kernels for AVX2 + FMA: 8 floats per vector (the baseline of current x86-64 servers).
// The instruction set is chosen per function with a target pragma, not per build, so one binary runs on any
// x86-64 CPU; select_kernels() picks the widest set the CPU has.
#include <immintrin.h>

#include <cstddef>

#include "kernels.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

// sleef.h declares the variants of an instruction set only when the translation unit is compiled for it (-m...),
// which this project does not do globally; the declaration is SLEEF's, for the target enabled just above.
extern "C" __m256 Sleef_exp2f8_u10avx2(__m256);

namespace flashot::cpu::avx2 {

inline constexpr std::size_t kWidth = 8;
inline constexpr std::size_t kMicroRows = 8;  // accumulators that fit the vector registers
typedef float VecF __attribute__((vector_size(kWidth * sizeof(float))));
inline VecF vexp2(VecF x) { return reinterpret_cast<VecF>(Sleef_exp2f8_u10avx2(reinterpret_cast<__m256>(x))); }

#include "tile_kernels.inc"

}  // namespace flashot::cpu::avx2

#pragma GCC pop_options

namespace flashot::cpu {

const IsaKernels& avx2_kernels() {
  static const IsaKernels kernels{"avx2", &avx2::lse, &avx2::weighted, &avx2::fused, &avx2::scores};
  return kernels;
}

}  // namespace flashot::cpu
