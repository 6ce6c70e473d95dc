// sums_wg_kernel<KS>, sums_wg_site_kernel<KS> past padded d = 128: KS = 12 and 16 (padded d = 192, 256; blocks of
// two warpgroups, mma_launch.cuh wg_wide). Their own translation unit, so that the KS = 1 .. 8 kernels of
// sums_wg.cu keep their SASS (docs/engine.md, "Past d = 128").
#include "../sums_wg.cuh"

namespace flashot::detail::cuda {
FLASHOT_WG_INSTANCES(sums, SumsSiteArgs, 12);
FLASHOT_WG_INSTANCES(sums, SumsSiteArgs, 16);
}  // namespace flashot::detail::cuda
