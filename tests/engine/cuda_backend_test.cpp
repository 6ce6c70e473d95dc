// CUDA-specific checks: the tiling heuristics (host code, run everywhere), and on a GPU the accuracy promised for the
// default precision, the one-pass symmetric step's fallback, column chunking, concurrent problems and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <sys/mman.h>

#include "../../engine/cuda/one_pass.hpp"
#include "../../engine/src/backend.hpp"
#include "../../engine/cuda/tiling.hpp"
#include "backend_fixture.hpp"
#include "problems.hpp"
#include "reference.hpp"

namespace flashot::test {
namespace {

using detail::cuda::plan_balanced;
using detail::cuda::plan_reduction;
using detail::cuda::plan_waves;
using detail::cuda::ReductionPlan;

// Issue 3: potentials within 1e-4 relative at n = 2k for d ≤ 64 in the default precision.
constexpr double kDefaultPrecisionRelTol = 1e-4;
constexpr double kPlanRelTol = 1e-4;
// Two runs of the same problem differ only by the order of float atomics in the column sums.
constexpr double kRerunRelTol = 1e-5;

// ---- tiling heuristics (no GPU needed) -------------------------------------------------------------------------
TEST(CudaTiling, SplitsCoverEveryColumnExactlyOnce) {
  for (std::int64_t rows : {1, 100, 10'000, 1'000'000})
    for (std::int64_t cols : {1, 63, 64, 65, 10'000, 1'000'000}) {
      const ReductionPlan plan = plan_reduction(rows, cols, 1024, 256, 528);
      EXPECT_EQ(plan.cols_per_split % 256, 0);
      EXPECT_GE(std::int64_t(plan.splits) * plan.cols_per_split, cols) << rows << "x" << cols;
      EXPECT_LT(std::int64_t(plan.splits - 1) * plan.cols_per_split, cols) << rows << "x" << cols;
      EXPECT_EQ(plan.row_blocks, (rows + 1023) / 1024);
    }
}

TEST(CudaTiling, FewRowBlocksSplitTheColumnsToFillTheDevice) {
  // n = 10k on 132 SMs: 10 row blocks of 1024 rows cannot fill the device alone.
  const ReductionPlan plan = plan_reduction(10'000, 10'000, 1024, 256, 132 * 4);
  EXPECT_EQ(plan.row_blocks, 10);
  // As many splits as there are column tiles (40), the most that keeps every split a whole tile.
  EXPECT_EQ(plan.splits, 40);
  const ReductionPlan wide = plan_reduction(10'000, 1'000'000, 1024, 256, 132 * 4);
  EXPECT_GE(std::int64_t(wide.row_blocks) * wide.splits, 2 * 132 * 4);
}

TEST(CudaTiling, ManyRowBlocksDoNotSplit) {
  // 4M rows make 3907 blocks of 1024, more than two waves of 528: no partial sums to merge.
  const ReductionPlan plan = plan_reduction(4'000'000, 1'000'000, 1024, 256, 132 * 4);
  EXPECT_EQ(plan.splits, 1);
  EXPECT_EQ(plan.cols_per_split, 1'000'000 / 256 * 256 + 256);
}

TEST(CudaTiling, WavePlansCoverEveryColumnExactlyOnce) {
  for (std::int64_t rows : {1, 255, 256, 10'000, 100'000, 1'000'000})
    for (std::int64_t cols : {1, 63, 64, 65, 10'000, 100'000, 1'000'000}) {
      const ReductionPlan plan = plan_waves(rows, cols, 256, 64, 132, 2);
      EXPECT_EQ(plan.cols_per_split % 64, 0);
      EXPECT_GE(std::int64_t(plan.splits) * plan.cols_per_split, cols) << rows << "x" << cols;
      EXPECT_LT(std::int64_t(plan.splits - 1) * plan.cols_per_split, cols) << rows << "x" << cols;
      EXPECT_EQ(plan.row_blocks, (rows + 255) / 256);
    }
}

TEST(CudaTiling, WavePlansFillWholeWaves) {
  // n = 10k: 40 row blocks of 256 rows, 157 column tiles, 132 SMs. Three splits make one wave of 53 tiles a block
  // (cost 55); plan_reduction's two waves of four blocks per SM would give 14 splits, five waves of 12 (cost 70).
  const ReductionPlan small = plan_waves(10'000, 10'000, 256, 64, 132, 2);
  EXPECT_EQ(small.row_blocks, 40);
  EXPECT_EQ(small.splits, 3);
  EXPECT_EQ(small.cols_per_split, 53 * 64);
  // n = 100k: 391 row blocks already make three waves (2.96): splitting only adds partials.
  const ReductionPlan large = plan_waves(100'000, 100'000, 256, 64, 132, 2);
  EXPECT_EQ(large.splits, 1);
  // One row block: the columns are spread over every SM.
  const ReductionPlan narrow = plan_waves(100, 1'000'000, 256, 64, 132, 2);
  EXPECT_EQ(narrow.splits, 132);
}

TEST(CudaTiling, BalancedPlansCoverEveryColumnExactlyOnce) {
  for (std::int64_t rows : {1, 1023, 1024, 10'000, 100'000, 1'000'000})
    for (std::int64_t cols : {1, 31, 32, 33, 10'000, 100'000, 1'000'000}) {
      const ReductionPlan plan = plan_balanced(rows, cols, 1024, 32, 132, 6, 3, 2);
      EXPECT_EQ(plan.cols_per_split % 32, 0);
      EXPECT_GE(std::int64_t(plan.splits) * plan.cols_per_split, cols) << rows << "x" << cols;
      EXPECT_LT(std::int64_t(plan.splits - 1) * plan.cols_per_split, cols) << rows << "x" << cols;
      EXPECT_EQ(plan.row_blocks, (rows + 1023) / 1024);
    }
}

TEST(CudaTiling, BalancedPlansEvenOutTheSms) {
  // n = 10k, d <= 4: 10 row blocks of 1024 rows, 313 chunks of 32 columns, 132 SMs holding up to 6 blocks each.
  // Whole 256-column tiles (plan_reduction: 40 splits) make 400 blocks, and four SMs hold four of them: 4 × (8 + 2)
  // = 40 chunks. 63 splits of 5 chunks make 630 blocks, at most 5 per SM: 5 × (5 + 2) = 35.
  const ReductionPlan small = plan_balanced(10'000, 10'000, 1024, 32, 132, 6, 3, 2);
  EXPECT_EQ(small.row_blocks, 10);
  EXPECT_EQ(small.splits, 63);
  EXPECT_EQ(small.cols_per_split, 5 * 32);
  // n = 100k: 8 splits make 784 blocks, all resident at once, at most 6 per SM: 6 × 393 = 2358 chunks; plan_reduction's
  // 11 (1078 blocks, more than fit at once) spread to ≈ 1078 × 290 / 132 + 290 = 2658.
  const ReductionPlan large = plan_balanced(100'000, 100'000, 1024, 32, 132, 6, 3, 2);
  EXPECT_EQ(large.splits, 8);
  EXPECT_EQ(large.cols_per_split, 391 * 32);
  // Too few columns for three blocks per SM: the quickest plan there is one chunk per block.
  const ReductionPlan tiny = plan_balanced(1'000, 1'000, 1024, 32, 132, 6, 3, 2);
  EXPECT_EQ(tiny.splits, 32);
}

TEST(CudaOnePassRule, SumsInRangeRunUnshifted) {
  const detail::cuda::SumsStep step = detail::cuda::decide_sums_step(-30.f, 2.f, detail::cuda::kSumsMinLog2);
  EXPECT_EQ(step.skip, 0);
  EXPECT_EQ(step.shift, 0.f);
  const float low = detail::cuda::kSumsMinLog2, high = detail::cuda::kSumsMaxLog2;
  EXPECT_EQ(detail::cuda::decide_sums_step(low, high, low).shift, 0.f);
}

TEST(CudaOnePassRule, SumsBelowTheRangeAreShiftedUpByTheLeastWholeAmount) {
  // The third step of a cold N(0,1), d = 64, ε = 0.1 solve at n = 10k, as an fp64 simulation predicts it.
  const detail::cuda::SumsStep step = detail::cuda::decide_sums_step(-154.7f, 0.8f, detail::cuda::kSumsMinLog2);
  EXPECT_EQ(step.skip, 0);
  EXPECT_EQ(step.shift, 89.f);  // −154.7 + 89 = −65.7 ≥ −70 + kShiftMargin; 0.8 + 89 ≤ 100 − kShiftMargin
  // Against the screened floor (2^-20) the same spread is too wide; a narrower one is shifted to −16.
  EXPECT_EQ(detail::cuda::decide_sums_step(-154.7f, 0.8f, -20.f).skip, 1);
  const detail::cuda::SumsStep screened = detail::cuda::decide_sums_step(-40.f, 1.f, -20.f);
  EXPECT_EQ(screened.skip, 0);
  EXPECT_EQ(screened.shift, 24.f);
}

TEST(CudaOnePassRule, SumsAboveTheRangeAreShiftedDown) {
  const detail::cuda::SumsStep step = detail::cuda::decide_sums_step(50.f, 130.5f, detail::cuda::kSumsMinLog2);
  EXPECT_EQ(step.skip, 0);
  EXPECT_EQ(step.shift, -35.f);  // 130.5 − 35 = 95.5 ≤ 96
}

TEST(CudaOnePassRule, SumsWiderThanTheRangeOrNotANumberSkip) {
  EXPECT_EQ(detail::cuda::decide_sums_step(-300.f, 2.f, detail::cuda::kSumsMinLog2).skip, 1);
  // Wider than the range less both margins: no shift leaves kShiftMargin on both sides.
  const float too_wide_hi = 100.f - 2 * detail::cuda::kShiftMargin + 1.f;
  EXPECT_EQ(detail::cuda::decide_sums_step(-70.f - 1.f, too_wide_hi, detail::cuda::kSumsMinLog2).skip, 1);
  EXPECT_EQ(detail::cuda::decide_sums_step(std::nanf(""), 0.f, detail::cuda::kSumsMinLog2).skip, 1);
  EXPECT_EQ(detail::cuda::decide_sums_step(-INFINITY, 0.f, detail::cuda::kSumsMinLog2).skip, 1);
  EXPECT_EQ(detail::cuda::decide_sums_step(0.f, INFINITY, detail::cuda::kSumsMinLog2).skip, 1);
}

// The cold step's rule, on the sampled ranges of 100k N(0,1) points at ε = 0.1 (docs/benchmarks.md, "Cold steps":
// kColdSample = 128 evenly spaced rows and columns, fp64).
detail::cuda::SumsStep cold_step_as_run(float lo, float hi, float floor) {
  using namespace detail::cuda;
  return sums_step(cold_forecast(lo, hi, floor, lo));
}

TEST(CudaOnePassRule, ColdSumsThatFitWithBothMarginsRunUnshifted) {
  using namespace detail::cuda;
  const SumsStep d3 = decide_cold_step(-16.1f, -6.6f, kSumsMinLog2, -16.1f);  // d = 3
  EXPECT_EQ(d3.skip, 0);
  EXPECT_EQ(d3.shift, 0.f);
  EXPECT_EQ(cold_step_as_run(-16.1f, -6.6f, kSumsMinLog2).skip, 0);
  EXPECT_EQ(cold_step_as_run(-16.1f, -6.6f, kSumsMinLog2).shift, 0.f);
}

TEST(CudaOnePassRule, ColdSumsAreShiftedToTheTopOfTheRange) {
  using namespace detail::cuda;
  // d = 8: the sample spans [−62.8, −17.7] where 4000 random rows reach −89.5: inside the range as sampled, so the
  // old rule ran it unshifted and the unsampled rows below 2^-70 made it redo. The highest sum goes to
  // 100 − kShiftMargin − kColdHighMargin = 92: shift 109, which holds every row above −70 − 109 = −179.
  const SumsStep d8 = decide_cold_step(-62.8f, -17.7f, kSumsMinLog2, -62.8f);
  EXPECT_EQ(d8.skip, 0);
  EXPECT_EQ(d8.shift, 109.f);
  const SumsStep run = cold_step_as_run(-62.8f, -17.7f, kSumsMinLog2);
  EXPECT_EQ(run.skip, 0);
  EXPECT_EQ(run.shift, 109.f);
  // The same against the screened floor (2^-20): −62.8 − kColdLowMargin + 109 = 38.2 ≥ −20 + kShiftMargin.
  EXPECT_EQ(cold_step_as_run(-62.8f, -17.7f, -20.f).shift, 109.f);
  // d = 12: [−103.1, −24.6] → 116; −103.1 − kColdLowMargin + 116 = 4.9 fits.
  EXPECT_EQ(cold_step_as_run(-103.1f, -24.6f, kSumsMinLog2).shift, 116.f);
  // Sums above the range (large unnormalised weights) are shifted down the same way.
  const SumsStep high = cold_step_as_run(20.f, 110.f, kSumsMinLog2);
  EXPECT_EQ(high.skip, 0);
  EXPECT_EQ(high.shift, -18.f);  // 110 + kColdHighMargin − 18 = 96
}

TEST(CudaOnePassRule, ColdSumsTooWideOrNotANumberSkip) {
  using namespace detail::cuda;
  // d = 16: [−199.1, −38.4] → shift 130 would leave −199.1 − kColdLowMargin + 130 = −77.1 below the range.
  EXPECT_EQ(decide_cold_step(-199.1f, -38.4f, kSumsMinLog2, -199.1f).skip, 1);
  EXPECT_EQ(cold_step_as_run(-199.1f, -38.4f, kSumsMinLog2).skip, 1);
  // [−130, −20] → 112: −130 − kColdLowMargin + 112 = −26 fits above the dense floor (−70 + 4), not above the
  // screened one (−20 + 4).
  EXPECT_EQ(cold_step_as_run(-130.f, -20.f, kSumsMinLog2).shift, 112.f);
  EXPECT_EQ(cold_step_as_run(-130.f, -20.f, -20.f).skip, 1);
  EXPECT_EQ(decide_cold_step(std::nanf(""), 0.f, kSumsMinLog2, std::nanf("")).skip, 1);
  EXPECT_EQ(decide_cold_step(-INFINITY, 0.f, kSumsMinLog2, -INFINITY).skip, 1);
  EXPECT_EQ(decide_cold_step(0.f, INFINITY, kSumsMinLog2, 0.f).skip, 1);
  EXPECT_EQ(decide_cold_step(INFINITY, -INFINITY, kSumsMinLog2, INFINITY).skip, 1);  // nothing sampled
}

TEST(CudaOnePassRule, ColdStepsThatRedoStraysFitOnlyTheEvenlySpacedPoints) {
  using namespace detail::cuda;
  // d = 16 (100k, fp64): the whole sample [−199.1, −38.4] is too wide (shift 130 leaves −77.1 − kColdLowMargin
  // below the range), but where the step redoes its strays alone only the evenly spaced points' lowest must fit:
  // −120 − kColdLowMargin + 130 = 2 ≥ −70 + kShiftMargin. The isolated points below −70 − 130 are the strays.
  EXPECT_EQ(decide_cold_step(-199.1f, -38.4f, kSumsMinLog2, -199.1f).skip, 1);
  const SumsStep d16 = decide_cold_step(-199.1f, -38.4f, kSumsMinLog2, -120.f);
  EXPECT_EQ(d16.skip, 0);
  EXPECT_EQ(d16.shift, 130.f);
  const SumsStep run = sums_step(cold_forecast(-199.1f, -38.4f, kSumsMinLog2, -120.f));
  EXPECT_EQ(run.skip, 0);
  EXPECT_EQ(run.shift, 130.f);
  // The evenly spaced points themselves too wide: skip (a dense middle whose sums spread past the range, ε ≪ the
  // distances: the strays would be most of the points).
  EXPECT_EQ(decide_cold_step(-400.f, -38.4f, kSumsMinLog2, -200.f).skip, 1);
  // The shift still comes from the highest sum, and a sample that fits entirely runs unshifted.
  EXPECT_EQ(decide_cold_step(-62.8f, -17.7f, kSumsMinLog2, -40.f).shift, 109.f);
  EXPECT_EQ(decide_cold_step(-16.1f, -6.6f, kSumsMinLog2, -10.f).shift, 0.f);
  // fit_lo outside [lo, hi] or not a number: a malformed forecast, skipped.
  EXPECT_EQ(decide_cold_step(-62.8f, -17.7f, kSumsMinLog2, -70.f).skip, 1);
  EXPECT_EQ(decide_cold_step(-62.8f, -17.7f, kSumsMinLog2, std::nanf("")).skip, 1);
}

TEST(CudaOnePassRule, ColdForecastsOfShardsAreJudgedTogether) {
  using namespace detail::cuda;
  // combine_forecast takes the MAX of each of the first eight words and of the floor.
  const auto combine = [](const SumsForecast& a, const SumsForecast& b) {
    SumsForecast c;
    c.sums.low = std::max(a.sums.low, b.sums.low);
    c.sums.high = std::max(a.sums.high, b.sums.high);
    c.fallback.low = std::max(a.fallback.low, b.fallback.low);
    c.fallback.high = std::max(a.fallback.high, b.fallback.high);
    c.fell_back = std::max(a.fell_back, b.fell_back);
    c.skip = std::max(a.skip, b.skip);
    c.cold = std::max(a.cold, b.cold);
    c.fit_low = std::max(a.fit_low, b.fit_low);
    c.floor = std::max(a.floor, b.floor);
    return c;
  };
  const auto forecast = [](float lo, float hi) { return cold_forecast(lo, hi, kSumsMinLog2, lo); };
  // The union of the samples, [−62.8, −12.7]: the higher end sets the shift (92 + 12.7 → 104).
  const SumsStep both = sums_step(combine(forecast(-62.8f, -17.7f), forecast(-60.f, -12.7f)));
  EXPECT_EQ(both.skip, 0);
  EXPECT_EQ(both.shift, 104.f);
  // One shard that needs no shift and one that does: [−62.8, −6.6] → 98.
  const SumsStep mixed = sums_step(combine(forecast(-16.1f, -6.6f), forecast(-62.8f, -17.7f)));
  EXPECT_EQ(mixed.skip, 0);
  EXPECT_EQ(mixed.shift, 98.f);
  // A union too wide, or one shard's sample not a number: all skip.
  EXPECT_EQ(sums_step(combine(forecast(-62.8f, -17.7f), forecast(-199.1f, -38.4f))).skip, 1);
  SumsForecast nan = forecast(-62.8f, -17.7f);
  nan.skip = 1;
  EXPECT_EQ(sums_step(combine(forecast(-16.1f, -6.6f), nan)).skip, 1);
}

TEST(CudaOnePassRule, ForecastsKeepTheirRangeAsOrderedKeys) {
  using detail::cuda::float_key;
  using detail::cuda::key_float;
  const float values[] = {-INFINITY, -1e30f, -154.7f, -1.f, -0.f, 0.f, 1e-30f, 0.8f, 130.5f, INFINITY};
  for (std::size_t i = 0; i < std::size(values); ++i) {
    EXPECT_EQ(key_float(float_key(values[i])), values[i]);
    EXPECT_NE(float_key(values[i]), 0u);  // zero is "nothing forecast"
    if (i > 0 && values[i - 1] < values[i]) {
      EXPECT_LT(float_key(values[i - 1]), float_key(values[i]));
    }
  }
  detail::cuda::SumsForecast forecast;  // zero: nothing forecast, run unshifted
  EXPECT_EQ(detail::cuda::sums_step(forecast).skip, 0);
  EXPECT_EQ(detail::cuda::sums_step(forecast).shift, 0.f);
  forecast.sums.low = ~float_key(-154.7f);  // what the finish kernel predicts from a one-pass step
  forecast.sums.high = float_key(0.8f);
  forecast.floor = detail::cuda::kSumsMinLog2;
  EXPECT_EQ(detail::cuda::sums_step(forecast).shift, 89.f);
  forecast.fallback.low = ~float_key(-300.f);  // the step was redone: its commit's range holds
  forecast.fallback.high = float_key(1.f);
  forecast.fell_back = 1;
  EXPECT_EQ(detail::cuda::sums_step(forecast).skip, 1);
  forecast.fell_back = 0;
  forecast.skip = 1;  // the cold check's verdict wins
  EXPECT_EQ(detail::cuda::sums_step(forecast).skip, 1);
}

// ---- on a GPU --------------------------------------------------------------------------------------------------
double rel_max_diff(const std::vector<float>& got, const std::vector<double>& want) {
  return max_abs_diff(got, want) / std::max(1e-30, max_abs(want));
}

class CudaPrecisionTest : public ::testing::TestWithParam<std::size_t> {};

TEST_P(CudaPrecisionTest, DefaultPrecisionPotentialsWithinOneInTenThousandAtTwoThousandPoints) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const std::size_t d = GetParam();
  const TestProblem p = make_problem({.n = 2000, .m = 2000, .d = d, .seed = 21, .random_weights = true});
  SolveOptions o;  // ε-scaling from the diameter: the first steps start far from the fixed point
  o.blur = 0.1;
  o.scaling = 0.5;
  o.tolerance = 0;
  o.max_iterations = 10;
  Problem problem(p.xv(), p.yv(), p.a, p.b, backend_options("cuda"));
  const SolveResult r = problem.solve(o);
  const ReferenceResult ref = reference_solve(p.xv(), p.yv(), p.a, p.b, o);
  ASSERT_NE(r.reason, StopReason::kNonFinite) << r.message;
  EXPECT_EQ(r.iterations, ref.iterations);
  EXPECT_LE(rel_max_diff(r.f, ref.f), kDefaultPrecisionRelTol);
  EXPECT_LE(rel_max_diff(r.g, ref.g), kDefaultPrecisionRelTol);
  std::printf("[ precision] d=%zu default: f %.3g g %.3g relative to the fp64 reference\n", d,
              rel_max_diff(r.f, ref.f), rel_max_diff(r.g, ref.g));
  if (d < 16) return;
  // What the coarser tensor-core options give on the same problem (printed: docs/engine.md records them).
  for (Precision precision : {Precision::kTf32, Precision::kBf16}) {
    BackendOptions options = backend_options("cuda");
    options.precision = precision;
    Problem coarse(p.xv(), p.yv(), p.a, p.b, options);
    const SolveResult rc = coarse.solve(o);
    ASSERT_NE(rc.reason, StopReason::kNonFinite) << rc.message;
    std::printf("[ precision] d=%zu %s: f %.3g g %.3g relative to the fp64 reference\n", d,
                to_string(precision).c_str(), rel_max_diff(rc.f, ref.f), rel_max_diff(rc.g, ref.g));
    EXPECT_LE(rel_max_diff(rc.f, ref.f), 1e-2) << to_string(precision);
  }
}

INSTANTIATE_TEST_SUITE_P(Dimensions, CudaPrecisionTest, ::testing::Values(3, 16, 64),
                         [](const auto& info) {
                           std::string name = std::to_string(info.param);
                           name.insert(name.begin(), 'd');
                           return name;
                         });

TEST(CudaBackend, GenericPathAtALargeDimensionMatchesTheReference) {
  // d = 300 is beyond the tensor-core path (d ≤ 128): the tiled fp32 path streams d in chunks of 16.
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const TestProblem p = make_problem({.n = 120, .m = 100, .d = 300, .seed = 28, .spread = 0.1, .offset = 0.02});
  SolveOptions o;
  o.blur = 0.5;
  o.tolerance = 0;
  o.max_iterations = 15;
  Problem problem(p.xv(), p.yv(), p.a, p.b, backend_options("cuda"));
  const SolveResult r = problem.solve(o);
  const ReferenceResult ref = reference_solve(p.xv(), p.yv(), p.a, p.b, o);
  ASSERT_NE(r.reason, StopReason::kNonFinite) << r.message;
  EXPECT_LE(rel_max_diff(r.f, ref.f), kDefaultPrecisionRelTol);
  EXPECT_LE(rel_max_diff(r.g, ref.g), kDefaultPrecisionRelTol);
  const ReferencePlan plan(p.xv(), p.yv(), p.a, p.b, r);
  const std::vector<double> bary = plan.barycentric(Side::kSource);
  EXPECT_LE(max_abs_diff(problem.barycentric(r, Side::kSource), bary), kPlanRelTol * max_abs(bary));
}

// The coarser tensor-core options trade accuracy for speed; they must still solve the same problem.
constexpr double kCoarsePrecisionRelTol = 1e-2;

TEST(CudaBackend, CoarserTensorCorePrecisionsStayCloseToTheReference) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const TestProblem p = make_problem({.n = 500, .m = 400, .d = 64, .seed = 29});
  SolveOptions o;
  o.blur = 0.2;
  o.tolerance = 0;
  o.max_iterations = 10;
  const ReferenceResult ref = reference_solve(p.xv(), p.yv(), p.a, p.b, o);
  for (Precision precision : {Precision::kFp32, Precision::kTf32, Precision::kBf16}) {
    BackendOptions options = backend_options("cuda");
    options.precision = precision;
    Problem problem(p.xv(), p.yv(), p.a, p.b, options);
    const SolveResult r = problem.solve(o);
    ASSERT_NE(r.reason, StopReason::kNonFinite) << to_string(precision) << ": " << r.message;
    EXPECT_LE(rel_max_diff(r.f, ref.f), kCoarsePrecisionRelTol) << to_string(precision);
    EXPECT_LE(rel_max_diff(r.g, ref.g), kCoarsePrecisionRelTol) << to_string(precision);
  }
}

class CudaStartFarTest : public ::testing::TestWithParam<std::size_t> {};

TEST_P(CudaStartFarTest, StartFarFromTheFixedPointStillMatchesTheReference) {
  // Potentials of +40 at ε = 0.05 put every one-pass exponential above 2^1000: the step must be redone with the
  // shifted two-pass reduction, not return infinities. The fallbacks then skip the one-pass sums while they
  // predict the same (d = 3: fp32 sums; d = 64: tensor-core sums), and the one-pass step resumes near the fixed
  // point: 40 iterations cover both phases.
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const std::size_t d = GetParam();
  const TestProblem p = make_problem({.n = 300, .m = 250, .d = d, .seed = 22, .spread = d > 3 ? 0.2 : 0.5});
  SolveOptions o;
  o.epsilon = 0.05;
  o.tolerance = 0;
  o.max_iterations = d > 3 ? 40 : 12;
  o.initial_f.assign(p.n, 40.0f);
  o.initial_g.assign(p.m, 40.0f);
  Problem problem(p.xv(), p.yv(), p.a, p.b, backend_options("cuda"));
  const SolveResult r = problem.solve(o);
  const ReferenceResult ref = reference_solve(p.xv(), p.yv(), p.a, p.b, o);
  ASSERT_NE(r.reason, StopReason::kNonFinite) << r.message;
  const double scale = std::max(1.0, max_abs(ref.f));
  EXPECT_LE(max_abs_diff(r.f, ref.f), 2e-4 * scale);
  EXPECT_LE(max_abs_diff(r.g, ref.g), 2e-4 * scale);
}

TEST(CudaOnePassShift, AColdSolveShiftsTheStepsItCanAndMatchesTheReference) {
  // The benchmark's problem, smaller: N(0,1) points in d = 64 at ε = 0.1 from zero potentials. An fp64 simulation
  // (one_pass.hpp) predicts the third step's log2 sums in [-157, 1]: below the trusted 2^-70 but narrower than the
  // range, so that step runs in one pass with its sums shifted up rather than falling back.
  // Problem::statistics() counts the steps' outcomes.
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const std::size_t n = 2000, d = 64;
  const std::vector<float> x = random_points(n, d, 41), y = random_points(n, d, 42);
  const std::vector<float> w(n, 1.0f / float(n));
  SolveOptions o;
  o.epsilon = 0.1;
  o.tolerance = 0;
  o.max_iterations = 10;
  const ReferenceResult ref = reference_solve(PointsView{x, n, d}, PointsView{y, n, d}, w, w, o);
  Problem problem(PointsView{x, n, d}, PointsView{y, n, d}, w, w, backend_options("cuda"));
  const SolveResult r = problem.solve(o);
  ASSERT_NE(r.reason, StopReason::kNonFinite) << r.message;
  const EngineStatistics st = problem.statistics();
  const long long one_pass = st.one_pass_steps, shifted = st.shifted_steps, skipped = st.skipped_steps,
                  redone = st.redone_steps;
  const std::string report = std::to_string(one_pass) + " in one pass (" + std::to_string(shifted) +
                             " shifted), " + std::to_string(skipped) + " skipped, " + std::to_string(redone) +
                             " redone";
  std::printf("[ one-pass ] %s\n", report.c_str());
  EXPECT_EQ(one_pass + skipped + redone, 10) << report;
  EXPECT_GE(shifted, 1) << report;
  EXPECT_LE(rel_max_diff(r.f, ref.f), kDefaultPrecisionRelTol) << report;
  EXPECT_LE(rel_max_diff(r.g, ref.g), kDefaultPrecisionRelTol) << report;
}

// A cold step whose sums mostly fit the range once shifted, but a few points' do not: points placed far outside the
// other cloud (x's at `radius`, y's at twice it), which the cold probe's evenly spaced sample leaves out. The step runs shifted and redoes
// those points alone (kernels.cuh Strays) rather than the whole step; past the strays' capacity it redoes the step.
struct StrayCase {
  std::size_t d;
  double epsilon;
  float radius;
};
class CudaStraysTest : public ::testing::TestWithParam<StrayCase> {};

/// n N(0,1) points with `outliers` of them moved to `radius` (random directions), none at the cold probe's evenly
/// spaced indices (device_step.cu kColdSample: ⌊k·n/128⌋).
std::vector<float> points_with_outliers(std::size_t n, std::size_t d, std::size_t outliers, float radius,
                                        std::uint64_t seed) {
  std::vector<float> p = random_points(n, d, seed);
  const std::vector<float> dir = random_points(outliers, d, seed + 1000);
  std::vector<bool> sampled(n, false);
  for (std::size_t k = 0; k < 128; ++k) sampled[k * n / 128] = true;
  std::size_t placed = 0;
  for (std::size_t i = 1; i < n && placed < outliers; i += 3) {
    if (sampled[i]) continue;
    double norm = 0;
    for (std::size_t c = 0; c < d; ++c) norm += double(dir[placed * d + c]) * dir[placed * d + c];
    const double scale = radius / std::sqrt(norm);
    for (std::size_t c = 0; c < d; ++c) p[i * d + c] = static_cast<float>(dir[placed * d + c] * scale);
    ++placed;
  }
  return p;
}

void solve_strays(const StrayCase& c, std::size_t outliers_x, std::size_t outliers_y, EngineStatistics& st) {
  const std::size_t n = 4000, d = c.d;
  const std::vector<float> x = points_with_outliers(n, d, outliers_x, c.radius, 51);
  // y's at twice the radius: no far point of x lies near one of y's (in d = 3, 20 random directions each way put
  // some of them within a few units of each other, in range: measured, 23 strays where 40 were placed).
  const std::vector<float> y = points_with_outliers(n, d, outliers_y, 2 * c.radius, 52);
  const std::vector<float> w(n, 1.0f / float(n));
  SolveOptions o;
  o.epsilon = c.epsilon;
  o.tolerance = 0;
  o.max_iterations = 10;
  Problem problem(PointsView{x, n, d}, PointsView{y, n, d}, w, w, backend_options("cuda"));
  const SolveResult r = problem.solve(o);
  st = problem.statistics();
  const ReferenceResult ref = reference_solve(PointsView{x, n, d}, PointsView{y, n, d}, w, w, o);
  std::printf("[ strays   ] d = %zu: %lld in one pass (%lld shifted), %lld skipped, %lld redone; %lld strays in %lld "
              "steps; potentials off the fp64 reference by %.2e (f), %.2e (g) relative\n",
              d, st.one_pass_steps, st.shifted_steps, st.skipped_steps, st.redone_steps, st.strays,
              st.steps_with_strays, rel_max_diff(r.f, ref.f), rel_max_diff(r.g, ref.g));
  EXPECT_NE(r.reason, StopReason::kNonFinite) << r.message;
  EXPECT_LE(rel_max_diff(r.f, ref.f), kDefaultPrecisionRelTol);
  EXPECT_LE(rel_max_diff(r.g, ref.g), kDefaultPrecisionRelTol);
  EXPECT_EQ(st.one_pass_steps + st.skipped_steps + st.redone_steps, 10);
}

TEST_P(CudaStraysTest, AColdStepRedoesItsStraysAloneAndMatchesTheReference) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  EngineStatistics st;
  solve_strays(GetParam(), 20, 20, st);
  // The first step stood (shifted) with the 40 far points, and any isolated ones of the clouds, redone alone.
  EXPECT_EQ(st.steps_with_strays, 1);
  EXPECT_GE(st.strays, 40);
  EXPECT_GE(st.shifted_steps, 1);
}

TEST_P(CudaStraysTest, MoreStraysThanTheCapacityRedoTheWholeStep) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  // 1100 far rows of 4000: past the capacity (1024 per side at this size, device_step.cu stray_capacity).
  EngineStatistics st;
  solve_strays(GetParam(), 1100, 0, st);
  EXPECT_EQ(st.steps_with_strays, 0);
  EXPECT_GE(st.redone_steps, 1);
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaStraysTest,
                         ::testing::Values(StrayCase{3, 0.1, 10.f}, StrayCase{8, 0.1, 8.f}, StrayCase{64, 2.0, 24.f}),
                         [](const auto& info) { return "d" + std::to_string(info.param.d); });

INSTANTIATE_TEST_SUITE_P(Dimensions, CudaStartFarTest, ::testing::Values(3, 64), [](const auto& info) {
  return "d" + std::to_string(info.param);
});

/// The CUDA solve rg against the CPU backend's rc of the same problem and options: same iteration count,
/// potentials within twice the default precision's tolerance (two float backends against each other).
void expect_potentials_match_cpu(const SolveResult& rg, const SolveResult& rc) {
  ASSERT_NE(rg.reason, StopReason::kNonFinite) << rg.message;
  ASSERT_EQ(rg.iterations, rc.iterations);
  const std::vector<double> fc(rc.f.begin(), rc.f.end()), gc(rc.g.begin(), rc.g.end());
  EXPECT_LE(rel_max_diff(rg.f, fc), 2 * kDefaultPrecisionRelTol);
  EXPECT_LE(rel_max_diff(rg.g, gc), 2 * kDefaultPrecisionRelTol);
}

// At the sizes above the column splits give every block a single column tile (the planner splits to fill the
// device). These sizes give every block of the reductions, the one-pass sums and the plan application tens of
// column tiles, odd and even counts, so the tile pipelines' steady state is what is compared — against the CPU
// backend (itself held to the fp64 reference by reference_test.cpp), because a dense fp64 reference is slow here.
class CudaManyTilesTest : public ::testing::TestWithParam<std::size_t> {};

TEST_P(CudaManyTilesTest, ManyColumnTilesPerBlockMatchTheCpuBackend) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const std::size_t d = GetParam();
  const TestProblem p = make_problem({.n = 12007, .m = 11003, .d = d, .seed = 31, .random_weights = true});
  SolveOptions o;  // ε-scaling: cold first steps (fallbacks, skipped sums), then one-pass steps
  o.blur = 0.2;
  o.scaling = 0.5;
  o.tolerance = 0;
  o.max_iterations = 25;
  Problem gpu(p.xv(), p.yv(), p.a, p.b, backend_options("cuda"));
  Problem cpu(p.xv(), p.yv(), p.a, p.b, backend_options("cpu"));
  const SolveResult rc = cpu.solve(o);
  const SolveResult rg = gpu.solve(o);
  ASSERT_NO_FATAL_FAILURE(expect_potentials_match_cpu(rg, rc));
  // Plan application on the same (CPU) potentials: both backends' P·Y over many tiles.
  const std::vector<float> bg = gpu.barycentric(rc, Side::kSource), bc = cpu.barycentric(rc, Side::kSource);
  const std::vector<double> bcd(bc.begin(), bc.end());
  EXPECT_LE(max_abs_diff(bg, bcd), 2 * kPlanRelTol * std::max(1.0, max_abs(bcd)));
  const std::vector<float> tg = gpu.barycentric(rc, Side::kTarget), tc = cpu.barycentric(rc, Side::kTarget);
  const std::vector<double> tcd(tc.begin(), tc.end());
  EXPECT_LE(max_abs_diff(tg, tcd), 2 * kPlanRelTol * std::max(1.0, max_abs(tcd)));
}

INSTANTIATE_TEST_SUITE_P(Dimensions, CudaManyTilesTest, ::testing::Values(16, 64, 100, 128),
                         [](const auto& info) { return "d" + std::to_string(info.param); });

// Tile screening (Screening, docs/engine.md): a small blur makes the plan sparse — most warp tiles are dropped after
// their hi·hi product — a large one keeps every tile. Pinned on, pinned off and adaptive must all give the fp64
// reference's potentials within the default precision's tolerance, and screened and unscreened runs must agree to
// fp32 rounding (the dropped entries are below 2^-26 of every sum).
class CudaScreeningTest : public ::testing::TestWithParam<std::tuple<std::size_t, double>> {};

TEST_P(CudaScreeningTest, ScreenedUnscreenedAndAdaptiveMatchTheReference) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const auto [d, blur] = GetParam();
  const TestProblem p = make_problem({.n = 2000, .m = 1800, .d = d, .seed = 41, .random_weights = true});
  SolveOptions o;
  o.blur = blur;
  o.scaling = 0.5;
  o.tolerance = 0;
  o.max_iterations = 30;
  const ReferenceResult ref = reference_solve(p.xv(), p.yv(), p.a, p.b, o);
  // Both kernel families: on a Hopper GPU the warpgroup (wgmma) kernels, and the mma.sync ones other GPUs run.
  for (bool warpgroup : {true, false}) {
    std::vector<SolveResult> results;
    for (Screening screening : {Screening::kOn, Screening::kOff, Screening::kAuto}) {
      BackendOptions options = backend_options("cuda");
      options.screening = screening;
      options.cuda.warpgroup_kernels = warpgroup;
      Problem problem(p.xv(), p.yv(), p.a, p.b, options);
      results.push_back(problem.solve(o));
      const SolveResult& r = results.back();
      const std::string what = to_string(screening) + (warpgroup ? "" : ", mma.sync");
      // Past d = 128 only the warpgroup kernels have tensor cores (the wide family); without them, fp32 tiles.
      const bool tensor = warpgroup || d <= 128;
      ASSERT_NE(r.reason, StopReason::kNonFinite) << what << ": " << r.message;
      EXPECT_EQ(r.iterations, ref.iterations) << what;
      EXPECT_LE(rel_max_diff(r.f, ref.f), kDefaultPrecisionRelTol) << what;
      EXPECT_LE(rel_max_diff(r.g, ref.g), kDefaultPrecisionRelTol) << what;
      const EngineStatistics st = problem.statistics();
      EXPECT_EQ(st.screened, tensor && screening != Screening::kOff) << what;
      for (const ScreenSiteStatistics* site : {&st.rows_lse, &st.columns_lse, &st.sums})
        EXPECT_LE(site->kept_tiles, site->seen_tiles) << what;
      if (tensor && screening == Screening::kOn) {
        EXPECT_GT(st.rows_lse.seen_tiles, 0u) << what;
      }
      std::printf("[ screening] d=%zu blur=%g %s: f %.3g g %.3g relative to the fp64 reference; rows' LSE kept "
                  "%llu of %llu warp tiles\n",
                  d, blur, what.c_str(), rel_max_diff(r.f, ref.f), rel_max_diff(r.g, ref.g),
                  st.rows_lse.kept_tiles, st.rows_lse.seen_tiles);
    }
    const std::vector<double> f_off(results[1].f.begin(), results[1].f.end());
    const std::vector<double> g_off(results[1].g.begin(), results[1].g.end());
    EXPECT_LE(rel_max_diff(results[0].f, f_off), kRerunRelTol);
    EXPECT_LE(rel_max_diff(results[0].g, g_off), kRerunRelTol);
  }
}

INSTANTIATE_TEST_SUITE_P(DimensionsAndBlurs, CudaScreeningTest,
                         ::testing::Combine(::testing::Values(16, 64, 128, 192, 256), ::testing::Values(0.05, 3.0)),
                         [](const auto& info) {
                           const double blur = std::get<1>(info.param);
                           return "d" + std::to_string(std::get<0>(info.param)) + (blur < 1 ? "_sparse" : "_dense");
                         });

/// ε-scaling from the diameter down to blur 0.05 — a sparse plan at these data's scale — with `iterations` in all.
SolveOptions sparse_scaling(int iterations) {
  SolveOptions o;
  o.blur = 0.05;
  o.scaling = 0.5;
  o.tolerance = 0;
  o.max_iterations = iterations;
  return o;
}

/// The CUDA backend with tile screening pinned on (never switching to the dense kernels).
BackendOptions screened_cuda() {
  BackendOptions options = backend_options("cuda");
  options.screening = Screening::kOn;
  return options;
}

// A small sparse problem with screening pinned on: the case compute-sanitizer runs (scripts/gpu-check.sh) — dropped
// and kept tiles, seeded running maxima, the last-block state update — against the fp64 reference.
TEST(CudaBackend, ScreenedSmallSparseProblemMatchesTheReference) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const TestProblem p = make_problem({.n = 300, .m = 260, .d = 64, .seed = 44, .random_weights = true});
  const SolveOptions o = sparse_scaling(12);
  const ReferenceResult ref = reference_solve(p.xv(), p.yv(), p.a, p.b, o);
  for (bool warpgroup : {true, false}) {
    BackendOptions options = screened_cuda();
    options.cuda.warpgroup_kernels = warpgroup;
    Problem problem(p.xv(), p.yv(), p.a, p.b, options);
    const SolveResult r = problem.solve(o);
    ASSERT_NE(r.reason, StopReason::kNonFinite) << r.message;
    EXPECT_LE(rel_max_diff(r.f, ref.f), kDefaultPrecisionRelTol) << "warpgroup " << warpgroup;
    EXPECT_LE(rel_max_diff(r.g, ref.g), kDefaultPrecisionRelTol) << "warpgroup " << warpgroup;
    const EngineStatistics st = problem.statistics();
    EXPECT_TRUE(st.screened);
    EXPECT_GT(st.rows_lse.seen_tiles, 0u);
    EXPECT_LE(st.rows_lse.kept_tiles, st.rows_lse.seen_tiles);
    EXPECT_TRUE(st.rows_lse.next_screened);  // pinned on
  }
}

// Screening pinned on with tens of column tiles per block, rows and columns of several row blocks and splits, and
// a sparse plan: the dropped-tile branch (zero column sums, untouched running max) runs in the pipelines' steady
// state, against the CPU backend.
TEST(CudaBackend, ScreenedManyTilesMatchTheCpuBackend) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const TestProblem p = make_problem({.n = 12007, .m = 11003, .d = 64, .seed = 43, .random_weights = true});
  const SolveOptions o = sparse_scaling(25);
  Problem gpu(p.xv(), p.yv(), p.a, p.b, screened_cuda());
  Problem cpu(p.xv(), p.yv(), p.a, p.b, backend_options("cpu"));
  const SolveResult rc = cpu.solve(o);
  const SolveResult rg = gpu.solve(o);
  ASSERT_NO_FATAL_FAILURE(expect_potentials_match_cpu(rg, rc));
  EXPECT_NE(rg.device.find("screened"), std::string::npos) << rg.device;
  // On a Hopper GPU the screened sites run the warpgroup (wgmma) kernels unless CudaTuning asks otherwise.
  if (rg.device.find("(sm_90)") != std::string::npos) {
    EXPECT_NE(rg.device.find("(warpgroup)"), std::string::npos) << rg.device;
  }
  BackendOptions mma_sync = screened_cuda();
  mma_sync.cuda.warpgroup_kernels = false;
  Problem older(p.xv(), p.yv(), p.a, p.b, mma_sync);
  const SolveResult rm = older.solve(o);
  ASSERT_NO_FATAL_FAILURE(expect_potentials_match_cpu(rm, rc));
  EXPECT_EQ(rm.device.find("(warpgroup)"), std::string::npos) << rm.device;
}

TEST(CudaBackend, ApplyWithThousandsOfColumnsMatchesTheDensePlan) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const TestProblem p = make_problem({.n = 300, .m = 200, .d = 5, .seed = 23});
  SolveOptions o;
  o.epsilon = 0.05;
  o.tolerance = 0;
  o.max_iterations = 30;
  Problem problem(p.xv(), p.yv(), p.a, p.b, backend_options("cuda"));
  const SolveResult r = problem.solve(o);
  const std::size_t k = 1500;
  const std::vector<float> v = random_points(p.m, k, 24);
  const ReferencePlan plan(p.xv(), p.yv(), p.a, p.b, r);
  const std::vector<double> want = plan.apply(v, k);
  EXPECT_LE(max_abs_diff(problem.apply_plan(r, v, k), want), kPlanRelTol * max_abs(want));
}

TEST(CudaBackend, ProblemsSolvedConcurrentlyMatchTheSameProblemsSolvedAlone) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const TestProblem p1 = make_problem({.n = 3000, .m = 2500, .d = 3, .seed = 25});
  const TestProblem p2 = make_problem({.n = 2000, .m = 2200, .d = 40, .seed = 26});
  SolveOptions o;
  o.blur = 0.1;
  o.tolerance = 0;
  o.max_iterations = 20;
  const auto solve = [&o](const TestProblem& p) {
    Problem problem(p.xv(), p.yv(), p.a, p.b, backend_options("cuda"));
    return problem.solve(o);
  };
  const SolveResult alone1 = solve(p1), alone2 = solve(p2);
  SolveResult together1, together2;
  std::thread t1([&] { together1 = solve(p1); });
  std::thread t2([&] { together2 = solve(p2); });
  t1.join();
  t2.join();
  EXPECT_LE(max_abs_diff(together1.f, alone1.f), kRerunRelTol * std::max(1.0, max_abs(alone1.f)));
  EXPECT_LE(max_abs_diff(together2.g, alone2.g), kRerunRelTol * std::max(1.0, max_abs(alone2.g)));
}

TEST(CudaBackend, AMissingDeviceOrdinalIsAnErrorNamingIt) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const TestProblem p = make_problem({.n = 10, .m = 10, .d = 2, .seed = 27});
  BackendOptions options = backend_options("cuda");
  options.device = 1000;
  try {
    Problem problem(p.xv(), p.yv(), p.a, p.b, options);
    FAIL() << "device 1000 was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("1000"), std::string::npos) << e.what();
  }
}

// Out of memory is refused before any upload, naming what the problem needs and what the device has. The points
// live in an address range that is reserved, never touched (MAP_NORESERVE): the refusal reads only the sizes, so
// the test needs no host memory for 2 × 60M points in d = 128 (~190 GB on the device by step_resident_bytes).
TEST(CudaBackend, AProblemLargerThanTheDeviceIsRefusedNamingWhatItNeeds) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const std::size_t n = 60'000'000, d = 128;
  const std::size_t bytes = (2 * n * d + 2 * n) * sizeof(float);
  void* reserved = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(reserved, MAP_FAILED) << "could not reserve " << bytes << " bytes of address space";
  const float* base = static_cast<const float*>(reserved);
  const detail::ProblemData data{{std::span<const float>(base, n * d), n, d},
                                 {std::span<const float>(base + n * d, n * d), n, d},
                                 std::span<const float>(base + 2 * n * d, n),
                                 std::span<const float>(base + 2 * n * d + n, n)};
  std::string message;
  try {
    (void)detail::make_backend(backend_options("cuda"), data);  // the registry: defined in every build
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  munmap(reserved, bytes);
  ASSERT_FALSE(message.empty()) << "a 60M x 60M, d = 128 problem was accepted";
  std::cout << "[ message  ] " << message << "\n";  // recorded in docs/cli.md as the user sees it
  EXPECT_NE(message.find("out of memory"), std::string::npos) << message;
  EXPECT_NE(message.find("need about"), std::string::npos) << message;
  EXPECT_NE(message.find("MiB free of"), std::string::npos) << message;
  EXPECT_NE(message.find("CUDA device 0"), std::string::npos) << message;
}

}  // namespace
}  // namespace flashot::test
