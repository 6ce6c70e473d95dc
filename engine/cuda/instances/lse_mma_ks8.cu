// lse_mma_kernel<8, ·, ·, ·>: the tensor-core log-sum-exp on mma.sync, padded d = 128 (KS = 8).
// One instance file per family and KS (mma_launch.cuh has the pattern; docs/engine.md, "Where the kernels live").
#include "../lse_mma.cuh"

namespace flashot::detail::cuda {
FLASHOT_MMA_INSTANCES(lse, LseSiteArgs, 8);
}  // namespace flashot::detail::cuda
