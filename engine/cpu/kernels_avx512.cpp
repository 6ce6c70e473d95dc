// Tile kernels for AVX-512F: 16 floats per vector.
// The instruction set is chosen per function with a target pragma, not per build, so one binary runs on any
// x86-64 CPU; select_kernels() picks the widest set the CPU has.
#include <immintrin.h>

#include <cstddef>

#include "kernels.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")

// sleef.h declares the variants of an instruction set only when the translation unit is compiled for it (-m...),
// which this project does not do globally; the declaration is SLEEF's, for the target enabled just above.
extern "C" __m512 Sleef_exp2f16_u10avx512f(__m512);

namespace flashot::cpu::avx512 {

inline constexpr std::size_t kWidth = 16;
inline constexpr std::size_t kMicroRows = 16;  // accumulators that fit the vector registers
typedef float VecF __attribute__((vector_size(kWidth * sizeof(float))));
inline VecF vexp2(VecF x) { return reinterpret_cast<VecF>(Sleef_exp2f16_u10avx512f(reinterpret_cast<__m512>(x))); }

#include "tile_kernels.inc"

}  // namespace flashot::cpu::avx512

#pragma GCC pop_options

namespace flashot::cpu {

const IsaKernels& avx512_kernels() {
  static const IsaKernels kernels{"avx512", &avx512::lse, &avx512::weighted, &avx512::fused, &avx512::scores};
  return kernels;
}

}  // namespace flashot::cpu
