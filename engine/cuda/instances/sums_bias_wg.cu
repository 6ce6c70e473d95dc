// sums_bias_wg_kernel<KS>: the one-pass sums with the biases on the tensor cores, KS = 1 (d ≤ 14) and 2 (d ≤ 30;
// launch_bias_operands has the layout). mma_launch.cuh has the pattern; docs/engine.md, "Where the kernels live".
#include "../sums_bias.cuh"

namespace flashot::detail::cuda {
template void launch_sums_bias_wg_kernel<1>(const SiteLaunch&, const BiasSumsArgs&);
template void launch_sums_bias_wg_kernel<2>(const SiteLaunch&, const BiasSumsArgs&);
}  // namespace flashot::detail::cuda
