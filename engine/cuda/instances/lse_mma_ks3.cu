// lse_mma_kernel<3, ·, ·, ·>: the tensor-core log-sum-exp on mma.sync, padded d = 48 (KS = 3).
// One instance file per family and KS (mma_launch.cuh has the pattern; docs/engine.md, "Where the kernels live").
#include "../lse_mma.cuh"

namespace flashot::detail::cuda {
FLASHOT_MMA_INSTANCES(lse, LseSiteArgs, 3);
}  // namespace flashot::detail::cuda
