#pragma once
// Block-sparse kernels of the CUDA backend (docs/block-sparse.md): the tiled fp32 family with its column loop
// walking a row block's listed ranges, and per-segment parameters read once per thread block. DeviceStep runs
// them while a BlockPattern is set; the dense dispatch (docs/engine.md) is untouched otherwise.

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels.cuh"
#include "mma.cuh"

namespace flashot::detail::cuda {

/// Rows/columns per block (block_pattern.hpp kBlockSize; checked there against this value).
inline constexpr int kPatternBlock = 256;

/// The lists of one side as the rows: block b lists ranges[offsets[b] .. offsets[b + 1]) of the other side's
/// blocks (int2 = [begin, end)); segment[b] its segment. tiles_most: the most 64-column tiles any list covers.
struct BlockLists {
  const int* offsets = nullptr;
  const int2* ranges = nullptr;
  const int* segment = nullptr;
  int blocks = 0;
};

/// One segment's scalars, as Scale and the damping (device array indexed by segment).
struct SegmentScale {
  float alpha = 0;  // 2·s·log2(e)/ε
  float c1 = 0;     // log2(e)/ε
  float s = 1;      // cost scale
  float epsilon_ln2 = 0;
  float lambda_f = 1, lambda_g = 1;
  float omega = 1;  // over-relaxation ω (SegmentParams::relaxation)
  float pad1 = 0;
};

/// partials (splits × rows.count): (max, sum) of the LSE of each row over its listed columns, split s taking the
/// s-th share of the row block's listed 64-column tiles (an empty share writes (kNoMax, 0)).
/// self (d ≤ 4; may be null): the rows' own current potential. Then each row's exponents are taken against the
/// log2-sum that potential implies (no running maximum: one subtraction and one exponential per entry), and the row
/// blocks whose sums leave the trusted range are recomputed with the running maximum; redo: one int per row block
/// (scratch). The partials mean the same either way.
void launch_block_lse(const PointSet& rows, const PointSet& cols, const float* h, int d, const BlockLists& lists,
                      const SegmentScale* seg, int splits, float2* partials, cudaStream_t stream,
                      const float* self = nullptr, int* redo = nullptr);

/// The same partials from the tensor cores (blocks_mma.cu: split fp16 operands on mma.sync, 128-row thread blocks),
/// where block_mma_serves(rop): the operands of both sides as DeviceStep prepared them for the dense path.
bool block_mma_serves(const MmaOperands& rop);
void launch_block_lse_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
                          const float* h, const BlockLists& lists, const SegmentScale* seg, int splits,
                          float2* partials, cudaStream_t stream);

/// The same partials on warpgroups (blocks_wg.cu: WgTileCore, 256-row thread blocks, one per row block), where
/// block_wg_serves(rop, cop): block_mma_serves on both sides and the column side's warpgroup tiles and bias buffer
/// prepared (MmaOperands::tiles, bias). The pass's column biases are first written into `bias` (= cop.bias), each
/// column with its column block's segment (col_segment: the column side's block segments).
bool block_wg_serves(const MmaOperands& rop, const MmaOperands& cop);
void launch_block_lse_wg(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
                         const float* h, const BlockLists& lists, const int* col_segment, const SegmentScale* seg,
                         float* bias, int splits, float2* partials, cudaStream_t stream);

/// What block_finalize writes for row i of an active block (inactive blocks: kSoftmin +∞, kLse2 −∞, updates leave
/// the potential): the modes of Finalize (kernels.cuh) without kCommit. source: damping λ_x (else λ_y).
void launch_block_finalize(Finalize mode, const float2* partials, int splits, const PointSet& rows,
                           const BlockLists& lists, const SegmentScale* seg, bool source, float* out, int* nonfinite,
                           cudaStream_t stream);

/// out (rows.count × k) = Σ_j exp2(score_ij − lse2_i) V_j over the listed columns; wsum the weights' sums. Both
/// are written (no need to clear them). V is (cols.count × k).
void launch_block_apply(const PointSet& rows, const PointSet& cols, const float* h, int d, const BlockLists& lists,
                        const SegmentScale* seg, const float* lse2, const float* v, int k, float* out, float* wsum,
                        cudaStream_t stream);
/// out_i,: *= mass_i / wsum_i (mass 1 when normalized), zero where wsum_i = 0 (inactive rows), per-row segment.
void launch_block_apply_scale(const PointSet& rows, const BlockLists& lists, const SegmentScale* seg,
                              const float* pot, const float* lse2, const float* wsum, int k, bool normalized,
                              float* out, cudaStream_t stream);

/// For each row of x: the k largest P_ij among its listed columns (column −1, value 0 past the listed ones).
void launch_block_top_k(const PointSet& x, const PointSet& y, const float* f, const float* g, int d,
                        const BlockLists& lists, const SegmentScale* seg, int k, std::int32_t* columns,
                        float* values, cudaStream_t stream);

}  // namespace flashot::detail::cuda
