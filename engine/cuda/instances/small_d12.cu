// lse_small_kernel<12> and sums_small_kernel<12>: the register-resident fp32 kernels at width D = 12 (small_d.cuh;
// docs/engine.md, "Where the kernels live"). One instance file per D.
#include "../small_d.cuh"

namespace flashot::detail::cuda {
FLASHOT_SMALL_D_INSTANCE(12)
}  // namespace flashot::detail::cuda
