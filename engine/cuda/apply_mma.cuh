#pragma once
// Plan application on the tensor cores (16 ≤ d ≤ 128), the FlashAttention forward pass without the online max: the
// score tile comes from mma.sync exactly as in the tensor-core LSE (lse_mma.cuh), the plan weights exp2(score − lse2_i)
// are formed in fp32, and the weight tile is multiplied by a tile of V on the tensor cores again. Weights and values
// are each split into fp16 hi + lo (three products), which keeps P·V at fp32-class accuracy. The bilinear variant
// multiplies every weight by a second tensor-core dot product ⟨u_i, w_j⟩ before the product with V.
// Also: the fused bilinear application in fp32 FMA for small d and e (d ≤ 16 without tensor cores).

#include <cstdint>

#include <cuda_runtime.h>

#include "blocks.cuh"
#include "kernels.cuh"
#include "mma.cuh"

namespace flashot::detail::cuda {

/// A value matrix V (count × k) in the form the tensor-core product takes: transposed (row c holds column c of V,
/// its `count` entries contiguous and zero-padded to `stride`), each column multiplied by the power of two that puts
/// its largest |entry| in [128, 256), and split into fp16 hi + lo.
struct MmaValues {
  const std::uint16_t* hi = nullptr;     // (rows × stride)
  const std::uint16_t* lo = nullptr;     // (rows × stride)
  const float* inverse_scale = nullptr;  // (rows) 1 / the column's power of two
  int k = 0;                             // columns of V
  int rows = 0;                          // k rounded up to a multiple of 8
  int stride = 0;                        // count rounded up to the column tile
};
int mma_values_rows(int k);
int mma_values_stride(int count);

/// Fills hi, lo (mma_values_rows(k) × mma_values_stride(count)) and inverse_scale (mma_values_rows(k)) from V
/// (device, count × k); column_max (k) is scratch. Returns the view the product kernels read.
MmaValues launch_split_values(const float* v, int count, int k, std::uint16_t* hi, std::uint16_t* lo,
                              float* inverse_scale, unsigned* column_max, cudaStream_t stream);

/// The tensor-core operands of scale·src, src (device, count × width), zero-padded to (count × padded): hi and lo
/// the fp16 split (kSplitFp16), hi alone in fp16 (kFp16) or bf16 (kBf16; lo untouched, may be null). Both the
/// point sets (once, in the backend's constructor) and the bilinear term's u and w are converted here.
void launch_split_rows(const float* src, int count, int width, int padded, float scale, MmaMode mode,
                       std::uint16_t* hi, std::uint16_t* lo, cudaStream_t stream);

/// The second dot product of the bilinear application: u on the rows' side, w on the columns' side, both split
/// fp16; ⟨u_i, w_j⟩ of the stored (scaled) operands times `scale` lies in [−1, 1].
struct MmaBilinear {
  MmaOperands u, w;
  float scale = 1;
};

ReductionPlan plan_apply_mma(const PointSet& rows, const PointSet& cols, int resident_blocks);
/// The same contract as launch_apply with scores from the tensor cores:
///   out (rows.count × values.k) += Σ_j exp2(score_ij − lse2_i) · [⟨u_i, w_j⟩] · V_j,
///   wsum (rows.count)            += Σ_j exp2(score_ij − lse2_i)
/// (the bracket only when `bilinear` is non-null). out and wsum must start at zero.
void launch_apply_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
                      const float* h, const Scale& scale, const float* lse2, const MmaValues& values,
                      const MmaBilinear* bilinear, const ReductionPlan& plan, float* out, float* wsum,
                      cudaStream_t stream);

/// launch_apply_mma over block lists (blocks.cuh): row i's sums run over the listed column ranges of its row block
/// only, with its segment's scales (seg[lists.segment[row block]]); rows of an unlisted row block stay zero. The
/// same contract otherwise (out and wsum must start at zero); no bilinear term.
void launch_block_apply_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& rop,
                            const MmaOperands& cop, const float* h, const BlockLists& lists, const SegmentScale* seg,
                            const float* lse2, const MmaValues& values, float* out, float* wsum,
                            cudaStream_t stream);

/// fp32 FMA bilinear application for d ≤ 16 and e ≤ 16 (any k):
///   out (rows.count × k) += Σ_j exp2(score_ij − lse2_i) ⟨u_i, w_j⟩ V_j,  wsum += Σ_j exp2(score_ij − lse2_i)
/// with u (rows.count × e), w (cols.count × e), V (cols.count × k) on the device.
inline bool bilinear_fma_supports(int d, int e) { return d <= 16 && e <= 16; }
ReductionPlan plan_apply_bilinear_fma(const PointSet& rows, const PointSet& cols, int resident_blocks);
void launch_apply_bilinear_fma(const PointSet& rows, const PointSet& cols, const float* h, const Scale& scale,
                               const float* lse2, const float* u, const float* w, int e, const float* v, int k,
                               const ReductionPlan& plan, float* out, float* wsum, cudaStream_t stream);

}  // namespace flashot::detail::cuda
