#pragma once
// Tensor-core operands: coordinates converted once to 16-bit types, zero-padded to a multiple of 16.

#include <cstddef>
#include <cstdint>

#include "kernels.cuh"

namespace flashot::detail::cuda {

enum class MmaMode {
  kSplitFp16,  // x = hi + lo, three fp16 products: fp32-class accuracy (the default for 16 ≤ d ≤ 128)
  kFp16,       // one fp16 product: 11-bit significand, like TF32 (Precision::kTf32)
  kBf16,       // one bf16 product: 8-bit significand (Precision::kBf16)
};

struct MmaOperands {
  const std::uint16_t* hi = nullptr;  // (count × padded_d) fp16 or bf16 bits of scale·x
  const std::uint16_t* lo = nullptr;  // (count × padded_d) fp16 bits of scale·x − hi (kSplitFp16 only)
  int padded_d = 0;
  float scale = 1;  // power of two applied to the coordinates before conversion
  MmaMode mode = MmaMode::kSplitFp16;
};

/// Tensor cores serve 16 ≤ d ≤ 128 (smaller d is cheaper on the FMA pipe; larger needs the generic path).
inline bool mma_supports(int d) { return d >= 16 && d <= 128; }

ReductionPlan plan_lse_mma(const PointSet& rows, const PointSet& cols, int resident_blocks);
/// Same contract as launch_lse, with the scores from the tensor cores.
void launch_lse_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
                    const float* h, const Scale& scale, const ReductionPlan& plan, float2* partials,
                    const int* guard, cudaStream_t stream);

/// The one-pass symmetric step on tensor cores: the contract of launch_symmetric_sums (kernels.cuh), scores from
/// the operands' tensor-core products (skip as there).
ReductionPlan plan_symmetric_mma(const PointSet& x, const PointSet& y, int resident_blocks);
void launch_symmetric_sums_mma(const PointSet& x, const PointSet& y, const MmaOperands& xop, const MmaOperands& yop,
                               const float* f, const float* g, const Scale& scale, const ReductionPlan& plan,
                               float* rsum, float* csum, const int* skip, cudaStream_t stream);

}  // namespace flashot::detail::cuda
