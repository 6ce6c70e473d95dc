#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels.hpp"

namespace flashot::cpu {

namespace {

bool has_avx512() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

}  // namespace

const IsaKernels& select_kernels() {
  const char* env = std::getenv("FLASHOT_CPU_ISA");
  const std::string asked = env ? env : "";
  if (asked.empty()) {
    if (has_avx512()) return avx512_kernels();
    if (has_avx2()) return avx2_kernels();
    return generic_kernels();
  }
  if (asked == "generic") return generic_kernels();
  if (asked == "avx2") {
    if (!has_avx2()) throw std::runtime_error("FLASHOT_CPU_ISA=avx2 but this CPU lacks AVX2 or FMA");
    return avx2_kernels();
  }
  if (asked == "avx512") {
    if (!has_avx512()) throw std::runtime_error("FLASHOT_CPU_ISA=avx512 but this CPU lacks AVX-512F");
    return avx512_kernels();
  }
  throw std::invalid_argument("FLASHOT_CPU_ISA must be generic, avx2 or avx512 (got '" + asked + "')");
}

}  // namespace flashot::cpu
