// Issue 21: the accuracy bar at every d of the sweep (tests/bench/peers/sweep.py), for the family the CUDA backend
// picks and for every family that can serve d (engine/cuda/dispatch.hpp): potentials within 1e-4 (relative to
// their largest magnitude) of the fp64 reference (tests/support). Skips without a GPU; FLASHOT_REQUIRE_CUDA=1 fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "backend_fixture.hpp"
#include "problems.hpp"
#include "reference.hpp"

namespace flashot::test {
namespace {

constexpr double kRelTol = 1e-4;

double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  return max_abs_diff(got, want) / std::max(1e-30, max_abs(want));
}

class CudaEveryDTest : public ::testing::TestWithParam<int> {};

TEST_P(CudaEveryDTest, EveryFamilyThatServesDMeetsTheAccuracyBar) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const std::size_t d = static_cast<std::size_t>(GetParam());
  // n ≠ m so that a kernel mixing up the sides fails; ε-scaling from the diameter down to ε = 0.01, so that the
  // first steps start far from the fixed point (the one-pass step's fallbacks run too).
  // Fewer points past d = 64, where the fp64 reference's time grows with d.
  const std::size_t n = d <= 64 ? 1000 : 400;
  const TestProblem p = make_problem({.n = n, .m = n + n / 5, .d = d, .seed = 21, .random_weights = true});
  SolveOptions o;
  o.blur = 0.1;
  o.scaling = 0.5;
  o.tolerance = 0;
  o.max_iterations = 10;
  const ReferenceResult ref = reference_solve(p.xv(), p.yv(), p.a, p.b, o);
  for (const ScoreKernel kernel :
       {ScoreKernel::kAuto, ScoreKernel::kRegister, ScoreKernel::kTiled, ScoreKernel::kTensor,
        ScoreKernel::kTensorBias}) {
    if ((kernel == ScoreKernel::kRegister && d > 16) || (kernel == ScoreKernel::kTensor && d > 256) ||
        (kernel == ScoreKernel::kTensorBias && d > 30))
      continue;
    BackendOptions options = backend_options("cuda");
    options.cuda.kernel = kernel;
    Problem problem(p.xv(), p.yv(), p.a, p.b, options);
    const SolveResult r = problem.solve(o);
    ASSERT_NE(r.reason, StopReason::kNonFinite) << to_string(kernel) << ": " << r.message;
    EXPECT_EQ(r.iterations, ref.iterations);
    const double ef = relative_error(r.f, ref.f), eg = relative_error(r.g, ref.g);
    std::printf("[ every d ] d=%zu kernel=%s: f %.3g g %.3g relative to the fp64 reference\n", d,
                to_string(kernel).c_str(), ef, eg);
    EXPECT_LE(ef, kRelTol) << "kernel " << to_string(kernel) << " d = " << d;
    EXPECT_LE(eg, kRelTol) << "kernel " << to_string(kernel) << " d = " << d;
  }
}

TEST(CudaEveryD, AFamilyThatCannotServeDIsRefusedByName) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const TestProblem p = make_problem({.n = 50, .m = 60, .d = 20, .seed = 3});
  BackendOptions options = backend_options("cuda");
  options.cuda.kernel = ScoreKernel::kRegister;
  try {
    Problem problem(p.xv(), p.yv(), p.a, p.b, options);
    FAIL() << "the register kernels accepted d = 20";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("register"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("d = 20"), std::string::npos) << e.what();
  }
  // Past d = 128 the tensor family is the warpgroup kernels alone: forced without them, refused by name.
  const TestProblem wide = make_problem({.n = 50, .m = 60, .d = 200, .seed = 3});
  options.cuda.kernel = ScoreKernel::kTensor;
  options.cuda.warpgroup_kernels = false;
  try {
    Problem problem(wide.xv(), wide.yv(), wide.a, wide.b, options);
    FAIL() << "the tensor kernels accepted d = 200 without the warpgroup kernels";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tensor"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("d = 200"), std::string::npos) << e.what();
  }
  // Not forced, the same problem takes the fp32 tiled kernels and solves.
  options.cuda.kernel = ScoreKernel::kAuto;
  Problem fallback(wide.xv(), wide.yv(), wide.a, wide.b, options);
  SolveOptions o;
  o.blur = 1.0;
  o.max_iterations = 5;
  EXPECT_NE(fallback.solve(o).reason, StopReason::kNonFinite);
}

// The sweep's dimensions (tests/bench/peers/sweep.py): 1..16, every 4 to 64, then 96, 128, 192, 256.
std::vector<int> sweep_dims() {
  std::vector<int> dims;
  for (int d = 1; d <= 16; ++d) dims.push_back(d);
  for (int d = 20; d <= 64; d += 4) dims.push_back(d);
  for (int d : {96, 128, 192, 256}) dims.push_back(d);
  // Past 128 the operands pad to 192 or 256 (tensor_padded_d): a d just past each step, and one between.
  for (int d : {129, 200}) dims.push_back(d);
  return dims;
}

INSTANTIATE_TEST_SUITE_P(Sweep, CudaEveryDTest, ::testing::ValuesIn(sweep_dims()),
                         [](const auto& info) {
                           // Appended, not "d" + to_string(...): GCC 12 warns falsely (-Wrestrict) on the latter.
                           std::string name = "d";
                           name += std::to_string(info.param);
                           return name;
                         });

}  // namespace
}  // namespace flashot::test
