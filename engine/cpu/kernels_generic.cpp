// Tile kernels for SSE2, part of every x86-64 CPU: 4 floats per vector.
// The fallback when the CPU has neither AVX2 nor AVX-512 (or BackendOptions::cpu_isa = kGeneric asks for it).
#include <immintrin.h>

#include <cstddef>

#include "kernels.hpp"

namespace flashot::cpu::generic {

inline constexpr std::size_t kWidth = 4;
inline constexpr std::size_t kMicroRows = 4;  // register tile (kMicroRows, kMicroVecs·kWidth): 8 accumulators
inline constexpr std::size_t kMicroVecs = 2;
typedef float VecF __attribute__((vector_size(kWidth * sizeof(float))));
inline VecF vmax(VecF a, VecF b) {
  return reinterpret_cast<VecF>(_mm_max_ps(reinterpret_cast<__m128>(a), reinterpret_cast<__m128>(b)));
}

#include "tile_kernels.inc"

}  // namespace flashot::cpu::generic

namespace flashot::cpu {

const IsaKernels& generic_kernels() {
  static const IsaKernels kernels{"generic", &generic::lse, &generic::weighted, &generic::fused, &generic::scores,
                                  &generic::exp2_clamped};
  return kernels;
}

}  // namespace flashot::cpu
