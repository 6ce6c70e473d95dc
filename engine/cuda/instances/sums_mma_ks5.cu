// sums_mma_kernel<5, ·, ·, ·>: the one-pass sums on mma.sync, padded d = 80 (KS = 5).
// One instance file per family and KS (mma_launch.cuh has the pattern; docs/engine.md, "Where the kernels live").
#include "../sums_mma.cuh"

namespace flashot::detail::cuda {
FLASHOT_MMA_INSTANCES(sums, SumsSiteArgs, 5);
}  // namespace flashot::detail::cuda
