// lse_wg_kernel<KS>, lse_wg_site_kernel<KS> past padded d = 128: KS = 12 and 16 (padded d = 192, 256; blocks of
// two warpgroups, mma_launch.cuh wg_wide). Their own translation unit, so that the KS = 1 .. 8 kernels of
// lse_wg.cu keep their SASS (docs/engine.md, "Past d = 128").
#include "../lse_wg.cuh"

namespace flashot::detail::cuda {
FLASHOT_WG_INSTANCES(lse, LseSiteArgs, 12);
FLASHOT_WG_INSTANCES(lse, LseSiteArgs, 16);
}  // namespace flashot::detail::cuda
