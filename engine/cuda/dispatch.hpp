// Which kernel family evaluates a problem's scores on the CUDA backend (docs/engine.md, "Choosing the kernel").
// Plain C++ (no CUDA types), so that the choice is unit-tested without a GPU (tests/engine/dispatch_test.cpp).
//
// Three families:
//   kRegister — lse_small_kernel<D> / sums_small_kernel<D> (small_d.cuh): fp32 FMA scores with the rows in
//               registers, at the instantiated width D ≥ d (kRegisterInstances; coordinates past d are zero);
//   kTiled    — lse_tiled_kernel / sums_tiled_kernel: fp32 register-blocked tiles streamed over any d;
//   kTensor   — the tensor-core kernels (mma.cuh): split fp16 by default, d padded to a multiple of 16, d ≤ 128;
//               past 128 (to 256) split fp16 on Hopper's warpgroup kernels alone, d padded to 192 or 256 (the
//               solve's LSE and one-pass sums; the plan's other operations there take the fp32 kernels).
//   kTensorBias — kTensor whose one-pass sums take the biases from the tensor cores too (sums_bias.cuh; split fp16,
//               d ≤ 30, warpgroup GPUs; elsewhere it runs as kTensor).
// The choice is the measured fastest family at the table's nearest measured point (dispatch_table.inc, written by
// tests/bench/peers/sweep.py --table from per-family timings of `flashot bench --kernel`), among the families
// that serve d and the precision asked for. Where the table has nothing for d, a prior (prior_kernel): the choice
// the backend made before the table — register up to d = 4, tensor cores for 16 ≤ d ≤ 128 (unless fp32 is asked
// for) and for 128 < d ≤ 256 at the default precision, tiled otherwise.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include "flashot/flashot.hpp"

namespace flashot::detail::cuda {

/// Widths D of the register kernels (instances/small_d<D>.cu). A d between two is padded to the next.
inline constexpr int kRegisterInstances[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16};
inline constexpr int kRegisterMaxD = 16;
/// Every tensor-core kernel (mma.sync and warpgroup, the solve and the plan's operations) serves d up to this.
inline constexpr int kTensorNarrowMaxD = 128;
/// The warpgroup LSE and one-pass sums (split fp16, sm_90a) serve d up to this: the "wide" tensor family
/// (docs/engine.md, "Past d = 128").
inline constexpr int kTensorMaxD = 256;

/// The tensor-core operands' padded width of d: a multiple of 16 up to 128, past it 192 or 256 (the wide
/// warpgroup kernels are compiled for KS = 12 and 16 alone).
constexpr int tensor_padded_d(int d) { return d <= kTensorNarrowMaxD ? (d + 15) / 16 * 16 : (d + 63) / 64 * 64; }
/// The biased sums' largest d (mma.cuh kBiasMaxD: d and two K slots within 32).
inline constexpr int kTensorBiasMaxD = 30;

/// The register kernels' width for d (the smallest instance ≥ d), or 0 when d is too large for them.
constexpr int register_width(int d) {
  for (const int w : kRegisterInstances)
    if (w >= d) return d >= 1 ? w : 0;
  return 0;
}

/// One measurement: `kernel`'s time for 10 symmetric iterations at (d, n, m), ε = 0.1, N(0,1) points.
struct DispatchEntry {
  int d;
  std::int64_t n, m;
  ScoreKernel kernel;
  double ms;
};

inline constexpr DispatchEntry kDispatchTable[] = {
#include "dispatch_table.inc"
};

/// Whether `kernel` (not kAuto) can serve dimension d at `precision`.
constexpr bool kernel_serves(ScoreKernel kernel, int d, Precision precision) {
  switch (kernel) {
    case ScoreKernel::kRegister: return d >= 1 && d <= kRegisterMaxD;
    case ScoreKernel::kTiled: return d >= 1;
    case ScoreKernel::kTensor:
      return d >= 1 && (d <= kTensorNarrowMaxD ? precision != Precision::kFp32
                                               : d <= kTensorMaxD && precision == Precision::kDefault);
    case ScoreKernel::kTensorBias: return d >= 1 && d <= kTensorBiasMaxD && precision == Precision::kDefault;
    default: return false;
  }
}

/// Widths up to this one are the prior's register kernels; wider ones (5–8, 12, 16, added for issue 21) serve only
/// where the table measured them fastest, or when forced: no GPU had run them when they were added.
inline constexpr int kRegisterPriorMaxD = 4;

/// The prior where the table has no measurement for d: what the backend did before the table (register kernels up
/// to d = 4, tensor cores for 16 ≤ d ≤ 128 unless fp32 is asked for and past 128 to 256 at the default precision,
/// tiled otherwise). Tensor cores below d = 16
/// (d padded to 16) serve only where the table measured them fastest, or when forced.
constexpr ScoreKernel prior_kernel(int d, Precision precision) {
  if (d <= kRegisterPriorMaxD) return ScoreKernel::kRegister;
  if (d >= 16 && kernel_serves(ScoreKernel::kTensor, d, precision)) return ScoreKernel::kTensor;
  return ScoreKernel::kTiled;
}

/// The fp32 kernel width where nothing else is said (PointSet::fp32_kernel = −1, e.g. the NCCL backend): the
/// prior's register width, else 0 (tiled).
constexpr int default_fp32_width(int d) { return d <= kRegisterPriorMaxD ? register_width(d) : 0; }

/// The kernel family for a problem of n × m points of dimension d. `forced` other than kAuto is checked and
/// returned (std::invalid_argument naming the family and d when it cannot serve them).
template <std::size_t N = std::size(kDispatchTable)>
ScoreKernel choose_kernel(int d, std::int64_t n, std::int64_t m, Precision precision, ScoreKernel forced,
                          const DispatchEntry (&table)[N] = kDispatchTable) {
  if (d < 1) throw std::invalid_argument("the dimension d must be positive (got " + std::to_string(d) + ")");
  if (forced != ScoreKernel::kAuto) {
    if (!kernel_serves(forced, d, precision)) {
      throw std::invalid_argument(
          "kernel '" + to_string(forced) + "' cannot serve d = " + std::to_string(d) + " at precision '" +
          to_string(precision) + "' (register: d ≤ " + std::to_string(kRegisterMaxD) + "; tensor: d ≤ " +
          std::to_string(kTensorNarrowMaxD) + " and not fp32, to " + std::to_string(kTensorMaxD) +
          " at the default precision on a Hopper GPU; tensor-bias: d ≤ " + std::to_string(kTensorBiasMaxD) +
          " at the default precision; tiled: any d)");
    }
    return forced;
  }
  // Precision asked for by name (tf32, bf16) means the tensor cores where they served it before the table
  // (16 ≤ d ≤ 128); elsewhere the choice below.
  if ((precision == Precision::kTf32 || precision == Precision::kBf16) && d >= 16 &&
      kernel_serves(ScoreKernel::kTensor, d, precision))
    return ScoreKernel::kTensor;
  // The nearest measured d: d itself, else the next larger (cost grows with the padded width), else the largest
  // smaller. Only a d at which two families or more were measured decides anything.
  const auto families_at = [&](int dd) {
    int mask = 0;
    for (const DispatchEntry& e : table)
      if (e.d == dd && kernel_serves(e.kernel, d, precision)) mask |= 1 << static_cast<int>(e.kernel);
    return mask;
  };
  const auto several = [](int mask) { return (mask & (mask - 1)) != 0; };
  int best_d = 0;
  for (const DispatchEntry& e : table) {
    if (!several(families_at(e.d))) continue;
    const bool better = best_d == 0 || (e.d >= d && (best_d < d || e.d < best_d)) || (best_d < d && e.d > best_d);
    if (better) best_d = e.d;
  }
  // A measured d whose register width differs from d's says nothing about d's register kernel.
  if (best_d == 0 || (best_d != d && register_width(best_d) != register_width(d))) return prior_kernel(d, precision);
  // The nearest measured size at that d (in log n·m, then log n/m), and the fastest family measured there.
  const double want_size = std::log(double(n) * double(m)), want_shape = std::log(double(n) / double(m));
  double best_distance = std::numeric_limits<double>::infinity();
  for (const DispatchEntry& e : table) {
    if (e.d != best_d) continue;
    const double distance = std::abs(std::log(double(e.n) * double(e.m)) - want_size) +
                            0.5 * std::abs(std::log(double(e.n) / double(e.m)) - want_shape);
    if (distance < best_distance) best_distance = distance;
  }
  ScoreKernel best = prior_kernel(d, precision);
  double best_ms = std::numeric_limits<double>::infinity();
  for (const DispatchEntry& e : table) {
    if (e.d != best_d || !kernel_serves(e.kernel, d, precision)) continue;
    const double distance = std::abs(std::log(double(e.n) * double(e.m)) - want_size) +
                            0.5 * std::abs(std::log(double(e.n) / double(e.m)) - want_shape);
    if (distance > best_distance + 1e-9) continue;
    if (e.ms < best_ms) best_ms = e.ms, best = e.kernel;
  }
  return best;
}

}  // namespace flashot::detail::cuda
