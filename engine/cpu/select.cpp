#include <stdexcept>
#include <string>

#include "kernels.hpp"

namespace flashot::cpu {

namespace {

bool has_avx512() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

}  // namespace

const IsaKernels& select_kernels(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto:
      if (has_avx512()) return avx512_kernels();
      if (has_avx2()) return avx2_kernels();
      return generic_kernels();
    case CpuIsa::kGeneric: return generic_kernels();
    case CpuIsa::kAvx2:
      if (!has_avx2()) throw std::runtime_error("BackendOptions::cpu_isa = avx2, but this CPU lacks AVX2 or FMA");
      return avx2_kernels();
    case CpuIsa::kAvx512:
      if (!has_avx512()) throw std::runtime_error("BackendOptions::cpu_isa = avx512, but this CPU lacks AVX-512F");
      return avx512_kernels();
  }
  throw std::invalid_argument("BackendOptions::cpu_isa: unknown value " + std::to_string(static_cast<int>(isa)));
}

}  // namespace flashot::cpu
