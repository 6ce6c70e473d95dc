// The CPU kernels' own exponential (engine/cpu/tile_kernels.inc, exp2_bounded): an inline polynomial in place of
// SLEEF's exp2f, so its accuracy is tested here against the correctly rounded fp64 2^x, for every instruction set
// this CPU runs.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "../../engine/cpu/kernels.hpp"

namespace flashot::test {
namespace {

/// Largest errors allowed, in units in the last place of the correctly rounded result (docs/engine.md, "The CPU
/// backend", has the figures measured over every float in [−100, 100]). SSE2 has no FMA: its polynomial rounds
/// twice per step.
constexpr double kExp2MaxUlpFma = 1.0;
constexpr double kExp2MaxUlpSse2 = 1.25;
/// Every kStride-th float bit pattern of [0, 100], each also negated (about 3.5·10⁷ arguments per set); 1 checks
/// them all (minutes).
constexpr std::uint32_t kStride = 64;

/// |y − 2^x| in units of the last place of 2^x (as an fp32 normal number; every result here is normal).
double ulp_error(float x, float y) {
  const double exact = std::exp2(static_cast<double>(x));
  const double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
  return std::abs(static_cast<double>(y) - exact) / ulp;
}

struct Isa {
  const char* name;
  CpuIsa isa;
  bool present;
};

std::vector<Isa> isas_present() {
  std::vector<Isa> out{{"generic", CpuIsa::kGeneric, true},
                       {"avx2", CpuIsa::kAvx2, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")},
                       {"avx512", CpuIsa::kAvx512,
                        __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
                            __builtin_cpu_supports("fma")}};
  std::erase_if(out, [](const Isa& i) { return !i.present; });
  return out;
}

TEST(CpuExp2, WithinOneUlpFromMinus100To100) {
  const std::uint32_t top = std::bit_cast<std::uint32_t>(100.0f);
  constexpr std::uint32_t kBlock = 1 << 20;  // bit patterns per call
  std::vector<float> x, y;
  for (const Isa& isa : isas_present()) {
    const cpu::IsaKernels& kernels = cpu::select_kernels(isa.isa);
    double worst = 0;
    float worst_x = 0;
    std::size_t count = 0;
    for (std::uint64_t b0 = 0; b0 <= top; b0 += std::uint64_t{kBlock} * kStride) {
      x.clear();
      for (std::uint64_t b = b0; b <= top && b < b0 + std::uint64_t{kBlock} * kStride; b += kStride) {
        x.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(b)));
        x.push_back(-x.back());
      }
      if (b0 == 0) {
        x.push_back(100.0f);
        x.push_back(-100.0f);
      }
      y.resize(x.size());
      kernels.exp2_clamped(x.data(), x.size(), y.data());
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double e = ulp_error(x[i], y[i]);
        if (e > worst) {
          worst = e;
          worst_x = x[i];
        }
      }
      count += x.size();
    }
    std::printf("exp2 (%s): at most %.3f ulp over %zu arguments in [-100, 100] (worst at x = %a)\n", isa.name, worst,
                count, static_cast<double>(worst_x));
    EXPECT_LE(worst, isa.isa == CpuIsa::kGeneric ? kExp2MaxUlpSse2 : kExp2MaxUlpFma)
        << isa.name << " at x = " << worst_x;
  }
}

TEST(CpuExp2, ClampsItsArgumentAndStaysNormal) {
  const std::vector<float> x{-1000.0f, -100.5f, -std::numeric_limits<float>::infinity(), 100.5f, 1000.0f, 0.0f};
  std::vector<float> y(x.size());
  for (const Isa& isa : isas_present()) {
    cpu::select_kernels(isa.isa).exp2_clamped(x.data(), x.size(), y.data());
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(y[i], 0x1p-100f) << isa.name << " x = " << x[i];
    for (std::size_t i = 3; i < 5; ++i) EXPECT_EQ(y[i], 0x1p100f) << isa.name << " x = " << x[i];
    EXPECT_EQ(y[5], 1.0f) << isa.name;
  }
}

}  // namespace
}  // namespace flashot::test
