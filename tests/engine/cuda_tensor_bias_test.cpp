// Issue 21: the one-pass sums with the biases on the tensor cores (ScoreKernel::kTensorBias, engine/cuda/sums_bias.cuh;
// docs/engine.md, "Biases on the tensor cores"). Their accumulator holds the whole exponent α⟨x, y⟩ + u_i + v_j, whose
// terms are hundreds of log2 units that cancel, so the tests start from potentials shifted by +C on x and −C on y:
// the plan and every iterate's offset are the same as from zero (the symmetric update keeps (C, −C)), but |u| and
// |v| grow by C·log2(e)/ε. From zero (shifted) at ε = 0.1, so that the first steps run far from the fixed point (the
// one-pass step's fallbacks too); from the reference's ε-scaled potentials (shifted) at ε = 0.01. Potentials within
// 1e-4 of the fp64 reference (tests/support), relative to the unshifted potentials' magnitude; kTensor beside it on
// the same problems. Skips without a GPU; FLASHOT_REQUIRE_CUDA=1 fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "backend_fixture.hpp"
#include "problems.hpp"
#include "reference.hpp"

namespace flashot::test {
namespace {

constexpr double kRelTol = 1e-4;

/// Largest |got_i − want_i| over the largest |want_i − shift| (at least 1): the error relative to the unshifted
/// potentials.
double shifted_error(const std::vector<float>& got, const std::vector<double>& want, double shift) {
  double scale = 1;
  for (const double w : want) scale = std::max(scale, std::abs(w - shift));
  return max_abs_diff(got, want) / scale;
}

// (d, shift C, ε)
class CudaTensorBiasTest : public ::testing::TestWithParam<std::tuple<int, double, double>> {};

TEST_P(CudaTensorBiasTest, ShiftedPotentialsMatchTheReference) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const auto [dim, shift, epsilon] = GetParam();
  const std::size_t d = static_cast<std::size_t>(dim), n = 1500, m = 1700;
  // The benchmark's points (N(0,1)), n ≠ m so that a kernel mixing up the sides fails.
  const std::vector<float> x = random_points(n, d, 51), y = random_points(m, d, 52);
  const std::vector<float> a(n, 1.0f / float(n)), b(m, 1.0f / float(m));
  SolveOptions o;
  o.epsilon = epsilon;
  o.tolerance = 0;
  o.max_iterations = 20;
  o.initial_f.assign(n, static_cast<float>(shift));
  o.initial_g.assign(m, static_cast<float>(-shift));
  if (epsilon < 0.1) {
    // From zero at ε = 0.01 the one-pass sums would leave their range for most of 20 steps (the fallbacks run
    // instead): start at the reference's ε-scaled potentials, shifted.
    SolveOptions warm;
    warm.blur = std::sqrt(epsilon);
    warm.tolerance = 0;
    warm.max_iterations = 20;
    const ReferenceResult start = reference_solve(PointsView{x, n, d}, PointsView{y, m, d}, a, b, warm);
    for (std::size_t i = 0; i < n; ++i) o.initial_f[i] = static_cast<float>(start.f[i] + shift);
    for (std::size_t j = 0; j < m; ++j) o.initial_g[j] = static_cast<float>(start.g[j] - shift);
  }
  const ReferenceResult ref = reference_solve(PointsView{x, n, d}, PointsView{y, m, d}, a, b, o);
  for (const ScoreKernel kernel : {ScoreKernel::kTensorBias, ScoreKernel::kTensor}) {
    BackendOptions options = backend_options("cuda");
    options.cuda.kernel = kernel;
    Problem problem(PointsView{x, n, d}, PointsView{y, m, d}, a, b, options);
    const SolveResult r = problem.solve(o);
    ASSERT_NE(r.reason, StopReason::kNonFinite) << to_string(kernel) << ": " << r.message;
    const EngineStatistics st = problem.statistics();
    const double ef = shifted_error(r.f, ref.f, shift), eg = shifted_error(r.g, ref.g, -shift);
    std::printf("[ tensor-bias ] d=%zu C=%g eps=%g kernel=%s: f %.3g g %.3g; %lld one-pass steps (%s)\n", d, shift,
                epsilon, to_string(kernel).c_str(), ef, eg, st.one_pass_steps, r.device.c_str());
    EXPECT_LE(ef, kRelTol) << "kernel " << to_string(kernel) << " d = " << d << " C = " << shift;
    EXPECT_LE(eg, kRelTol) << "kernel " << to_string(kernel) << " d = " << d << " C = " << shift;
    // The one-pass steps ran (the biased sums are their kernel), not only the two-pass fallbacks.
    EXPECT_GT(st.one_pass_steps, 0) << to_string(kernel) << " d = " << d;
    // On Hopper (the warpgroup kernels) the family's sums are the biased ones.
    if (kernel == ScoreKernel::kTensorBias && r.device.find("sm_90") != std::string::npos) {
      EXPECT_NE(r.device.find("biases on the tensor cores"), std::string::npos) << r.device;
    }
  }
}

std::vector<std::tuple<int, double, double>> cases() {
  std::vector<std::tuple<int, double, double>> v;
  // d = 5..16: KS = 1 with four parts per bias (d ≤ 12), two (13, 14), KS = 2 (15, 16); 20 and 30 as well.
  for (int d = 5; d <= 16; ++d) v.emplace_back(d, 0.0, 0.1);
  for (int d : {5, 8, 12, 13, 14, 16, 20, 30}) v.emplace_back(d, 50.0, 0.1);  // |u| ≈ 720 + the points' own
  for (int d : {8, 14}) v.emplace_back(d, 20.0, 0.01);                        // |u| ≈ 2900 + the points' own
  return v;
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<int, double, double>>& info) {
  const int d = std::get<0>(info.param), shift = static_cast<int>(std::get<1>(info.param));
  const int inverse_epsilon = static_cast<int>(1 / std::get<2>(info.param) + 0.5);
  std::string name = "d";  // appended, not "d" + …: GCC 12 warns falsely (-Wrestrict) on that operator+
  name += std::to_string(d);
  name += "_C";
  name += std::to_string(shift);
  name += "_eps";
  name += std::to_string(inverse_epsilon);
  return name;
}

INSTANTIATE_TEST_SUITE_P(Shifts, CudaTensorBiasTest, ::testing::ValuesIn(cases()), case_name);

TEST(CudaTensorBias, ADimensionPastThirtyIsRefusedByName) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const TestProblem p = make_problem({.n = 50, .m = 60, .d = 31, .seed = 3});
  BackendOptions options = backend_options("cuda");
  options.cuda.kernel = ScoreKernel::kTensorBias;
  try {
    Problem problem(p.xv(), p.yv(), p.a, p.b, options);
    FAIL() << "the biased sums accepted d = 31";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tensor-bias"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("d = 31"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flashot::test
