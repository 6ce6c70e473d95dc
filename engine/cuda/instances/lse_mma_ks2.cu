// lse_mma_kernel<2, ·, ·, ·>: the tensor-core log-sum-exp on mma.sync, padded d = 32 (KS = 2).
// One instance file per family and KS (mma_launch.cuh has the pattern; docs/engine.md, "Where the kernels live").
#include "../lse_mma.cuh"

namespace flashot::detail::cuda {
FLASHOT_MMA_INSTANCES(lse, LseSiteArgs, 2);
}  // namespace flashot::detail::cuda
