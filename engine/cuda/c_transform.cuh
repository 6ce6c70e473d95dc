#pragma once
// The hard c-transform on one device (docs/engine.md, "Hard c-transform"): for every row point p_i,
// value_i = min_j (s·‖p_i − q_j‖² − h_j) over the column points and the argmin, streamed, never rows × columns.
// Pass 1 keeps each row's best and second-best fp32 score (t_ij = 2s⟨p_i, q_j⟩ + h_j − s‖q_j‖², maximised) and the
// argmax, over column splits; a merge decides every row whose best beats its second by more than twice the scores'
// error bound, and lists the others, which a refinement pass re-decides from fp64 direct differences.

#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include "device_buffer.hpp"
#include "mma.cuh"

namespace flashot::detail::cuda {

/// Rows and columns of one c-transform, on the device.
struct CTransformSides {
  const float* rows = nullptr;        // (nrows × d)
  const float* rows_norm2 = nullptr;  // (nrows) ‖p‖² (fp32)
  int nrows = 0;
  const float* cols = nullptr;        // (ncols × d)
  const float* cols_norm2 = nullptr;  // (ncols)
  int ncols = 0;
  int d = 0;
};

/// Scratch of run_c_transform, grown on demand and kept by the caller between calls.
struct CTransformScratch {
  DeviceBuffer<float> h, best, second;
  DeviceBuffer<int> arg, list, counters;
  DeviceBuffer<unsigned> maxima;
  DeviceBuffer<double> values;
};

/// Fills values (nrows) and index (nrows, column indices) on the host; h (ncols) is the column potential (host).
/// sms: the device's multiprocessors (the column splits fill them). rop, cop: the rows' and columns' split-fp16
/// tensor-core operands (null: fp32 scores); used where c_transform_mma_serves them and d > 16. Synchronizes
/// `stream`.
void run_c_transform(const CTransformSides& sides, std::span<const float> h, double cost_scale, int sms,
                     const MmaOperands* rop, const MmaOperands* cop, std::span<double> values,
                     std::span<std::int32_t> index, CTransformScratch& scratch, cudaStream_t stream);

/// Whether the tensor-core pass (c_transform_mma.cu) serves these operands: split fp16, 16 ≤ padded d ≤ 128.
bool c_transform_mma_serves(const MmaOperands& rop, const MmaOperands& cop);
/// The first pass on the tensor cores: per column split, each row's best and second-best score and the argmax into
/// scratch.best / second / arg (splits × nrows); h on the device.
void launch_c_transform_mma(const CTransformSides& sides, const MmaOperands& rop, const MmaOperands& cop,
                            const float* h, float s, int sms, CTransformScratch& scratch, int& splits,
                            cudaStream_t stream);

}  // namespace flashot::detail::cuda
