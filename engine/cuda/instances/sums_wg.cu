// sums_wg_kernel<KS>, sums_wg_site_kernel<KS>: the one-pass sums of split operands on warpgroups, KS = 1 .. 8
// (padded d = 16·KS). One translation unit for the whole family, unlike the mma.sync kernels' one per KS: compiled
// per KS, these kernels' PTX is the same up to register numbering, but ptxas then schedules some of them
// differently, so the SASS would no longer match the build before the split (scripts/sass-compare.sh;
// mma_launch.cuh has the pattern; docs/engine.md, "Where the kernels live").
#include "../sums_wg.cuh"

namespace flashot::detail::cuda {
FLASHOT_WG_INSTANCES(sums, SumsSiteArgs, 1);
FLASHOT_WG_INSTANCES(sums, SumsSiteArgs, 2);
FLASHOT_WG_INSTANCES(sums, SumsSiteArgs, 3);
FLASHOT_WG_INSTANCES(sums, SumsSiteArgs, 4);
FLASHOT_WG_INSTANCES(sums, SumsSiteArgs, 5);
FLASHOT_WG_INSTANCES(sums, SumsSiteArgs, 6);
FLASHOT_WG_INSTANCES(sums, SumsSiteArgs, 7);
FLASHOT_WG_INSTANCES(sums, SumsSiteArgs, 8);
}  // namespace flashot::detail::cuda
