// Tile kernels for SSE2, part of every x86-64 CPU: 4 floats per vector.
// The fallback when the CPU has neither AVX2 nor AVX-512 (or BackendOptions::cpu_isa = kGeneric asks for it).
#include <immintrin.h>

#include <cstddef>

#include "kernels.hpp"


// Declared here like the wider variants in kernels_avx2.cpp / kernels_avx512.cpp (see there why).
extern "C" __m128 Sleef_exp2f4_u10sse2(__m128);

namespace flashot::cpu::generic {

inline constexpr std::size_t kWidth = 4;
inline constexpr std::size_t kMicroRows = 4;  // accumulators that fit the vector registers
typedef float VecF __attribute__((vector_size(kWidth * sizeof(float))));
inline VecF vexp2(VecF x) { return reinterpret_cast<VecF>(Sleef_exp2f4_u10sse2(reinterpret_cast<__m128>(x))); }

#include "tile_kernels.inc"

}  // namespace flashot::cpu::generic

namespace flashot::cpu {

const IsaKernels& generic_kernels() {
  static const IsaKernels kernels{"generic", &generic::lse, &generic::weighted, &generic::fused, &generic::scores};
  return kernels;
}

}  // namespace flashot::cpu
