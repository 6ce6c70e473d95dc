// lse_wg_kernel<KS>, lse_wg_site_kernel<KS>: the log-sum-exp of split operands on warpgroups, KS = 1 .. 8
// (padded d = 16·KS). One translation unit for the whole family, unlike the mma.sync kernels' one per KS: compiled
// per KS, these kernels' PTX is the same up to register numbering, but ptxas then schedules some of them
// differently, so the SASS would no longer match the build before the split (scripts/sass-compare.sh;
// mma_launch.cuh has the pattern; docs/engine.md, "Where the kernels live").
#include "../lse_wg.cuh"

namespace flashot::detail::cuda {
FLASHOT_WG_INSTANCES(lse, LseSiteArgs, 1);
FLASHOT_WG_INSTANCES(lse, LseSiteArgs, 2);
FLASHOT_WG_INSTANCES(lse, LseSiteArgs, 3);
FLASHOT_WG_INSTANCES(lse, LseSiteArgs, 4);
FLASHOT_WG_INSTANCES(lse, LseSiteArgs, 5);
FLASHOT_WG_INSTANCES(lse, LseSiteArgs, 6);
FLASHOT_WG_INSTANCES(lse, LseSiteArgs, 7);
FLASHOT_WG_INSTANCES(lse, LseSiteArgs, 8);
}  // namespace flashot::detail::cuda
