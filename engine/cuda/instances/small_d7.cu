// lse_small_kernel<7> and sums_small_kernel<7>: the register-resident fp32 kernels at width D = 7 (small_d.cuh;
// docs/engine.md, "Where the kernels live"). One instance file per D.
#include "../small_d.cuh"

namespace flashot::detail::cuda {
FLASHOT_SMALL_D_INSTANCE(7)
}  // namespace flashot::detail::cuda
