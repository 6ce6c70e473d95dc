// Issue 21: split waits in the warpgroup kernels of two subtiles (CudaTuning::subtile_overlap; engine/cuda/wg_tile.cuh,
// WgWait::kSubtiles, kSubtilesAcross; docs/engine.md, "Overlapping the subtiles"). Each tile's products are committed
// as one wgmma group per subtile and subtile 0 is summed while subtile 1's run (kWithinTile), and subtile 1 while
// the next tile's subtile 0 runs (kAcrossTiles): the same products, summed in the same order, so the potentials
// equal those of the plain kernels (kOff) up to the order of the kernels' atomic additions (which varies from run
// to run either way). Both schemes (the one-pass sums and, alternating, the LSE), both tensor families, at d = 5, 8,
// 14 (padded to 16: two subtiles) and 16, and the biased sums at d = 20 and 30 (their padded 32: two subtiles); on
// Hopper the device line says which variant ran. Skips without a GPU;
// FLASHOT_REQUIRE_CUDA=1 fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "backend_fixture.hpp"
#include "problems.hpp"

namespace flashot::test {
namespace {

/// Largest |overlapped − plain| over the largest |plain| (at least 1): atomics' order, not the kernels, apart.
constexpr double kRelTol = 1e-6;

// (d, kernel, scheme)
class CudaSubtileOverlapTest : public ::testing::TestWithParam<std::tuple<int, ScoreKernel, Scheme>> {};

TEST_P(CudaSubtileOverlapTest, PotentialsEqualThePlainKernels) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const auto [dim, kernel, scheme] = GetParam();
  const std::size_t d = static_cast<std::size_t>(dim), n = 1500, m = 1700;
  // The benchmark's points (N(0,1)), n ≠ m so that a kernel mixing up the sides or the subtiles' rows fails.
  const std::vector<float> x = random_points(n, d, 61), y = random_points(m, d, 62);
  const std::vector<float> a(n, 1.0f / float(n)), b(m, 1.0f / float(m));
  SolveOptions o;
  o.epsilon = 0.1;
  o.tolerance = 0;
  o.max_iterations = 20;
  o.scheme = scheme;
  constexpr SubtileOverlap kWays[] = {SubtileOverlap::kOff, SubtileOverlap::kWithinTile,
                                      SubtileOverlap::kAcrossTiles};
  SolveResult r[3];
  std::string device[3];
  long long one_pass[3] = {};
  for (int overlap = 0; overlap < 3; ++overlap) {
    BackendOptions options = backend_options("cuda");
    options.cuda.kernel = kernel;
    options.cuda.subtile_overlap = kWays[overlap];
    Problem problem(PointsView{x, n, d}, PointsView{y, m, d}, a, b, options);
    r[overlap] = problem.solve(o);
    ASSERT_NE(r[overlap].reason, StopReason::kNonFinite) << r[overlap].message;
    device[overlap] = r[overlap].device;
    one_pass[overlap] = problem.statistics().one_pass_steps;
  }
  const double scale_f = std::max(1.0, max_abs(r[0].f)), scale_g = std::max(1.0, max_abs(r[0].g));
  EXPECT_EQ(device[0].find("subtiles overlapped"), std::string::npos) << device[0];
  for (int overlap = 1; overlap < 3; ++overlap) {
    const std::string way = to_string(kWays[overlap]);
    const double ef = max_abs_diff(r[overlap].f, r[0].f) / scale_f, eg = max_abs_diff(r[overlap].g, r[0].g) / scale_g;
    std::printf("[ overlap ] d=%zu kernel=%s %s %s: f %.3g g %.3g (of %.3g, %.3g); one-pass steps %lld, %lld (%s)\n",
                d, to_string(kernel).c_str(), to_string(scheme).c_str(), way.c_str(), ef, eg, scale_f, scale_g,
                one_pass[0], one_pass[overlap], device[overlap].c_str());
    EXPECT_LE(ef, kRelTol) << "d = " << d << " kernel " << to_string(kernel) << " " << to_string(scheme) << " " << way;
    EXPECT_LE(eg, kRelTol) << "d = " << d << " kernel " << to_string(kernel) << " " << to_string(scheme) << " " << way;
    // On Hopper (the warpgroup kernels) the variant ran wherever a kernel has two subtiles: padded d = 16 (d ≤ 16),
    // and the biased sums' padded 16 and 32 (d ≤ 30).
    if (device[overlap].find("sm_90") != std::string::npos) {
      EXPECT_NE(device[overlap].find("subtiles overlapped"), std::string::npos) << device[overlap];
      EXPECT_EQ(device[overlap].find("across tiles") != std::string::npos,
                kWays[overlap] == SubtileOverlap::kAcrossTiles)
          << device[overlap];
    }
  }
}

std::vector<std::tuple<int, ScoreKernel, Scheme>> cases() {
  std::vector<std::tuple<int, ScoreKernel, Scheme>> v;
  for (int d : {5, 8, 14, 16})
    for (ScoreKernel k : {ScoreKernel::kTensor, ScoreKernel::kTensorBias})
      for (Scheme s : {Scheme::kSymmetric, Scheme::kAlternating}) v.emplace_back(d, k, s);
  // The biased sums have two subtiles at their padded 32 too (d = 15 .. 30: wg_bias_subtiles).
  for (int d : {20, 30})
    for (Scheme s : {Scheme::kSymmetric, Scheme::kAlternating}) v.emplace_back(d, ScoreKernel::kTensorBias, s);
  return v;
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<int, ScoreKernel, Scheme>>& info) {
  std::string name = "d";  // appended, not "d" + …: GCC 12 warns falsely (-Wrestrict) on that operator+
  name += std::to_string(std::get<0>(info.param));
  name += std::get<1>(info.param) == ScoreKernel::kTensor ? "_tensor" : "_tensorbias";
  name += std::get<2>(info.param) == Scheme::kSymmetric ? "_symmetric" : "_alternating";
  return name;
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaSubtileOverlapTest, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace flashot::test
