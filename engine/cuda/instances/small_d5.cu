// lse_small_kernel<5> and sums_small_kernel<5>: the register-resident fp32 kernels at width D = 5 (small_d.cuh;
// docs/engine.md, "Where the kernels live"). One instance file per D.
#include "../small_d.cuh"

namespace flashot::detail::cuda {
FLASHOT_SMALL_D_INSTANCE(5)
}  // namespace flashot::detail::cuda
