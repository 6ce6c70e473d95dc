// The CUDA backend's kernel-family choice (engine/cuda/dispatch.hpp): plain host code, tested everywhere.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "../../engine/cuda/dispatch.hpp"

namespace flashot::test {
namespace {

using detail::cuda::choose_kernel;
using detail::cuda::DispatchEntry;
using detail::cuda::kDispatchTable;
using detail::cuda::register_width;

TEST(CudaDispatch, RegisterWidthsPadToTheNextInstance) {
  EXPECT_EQ(register_width(0), 0);
  for (int d = 1; d <= 8; ++d) EXPECT_EQ(register_width(d), d);
  for (int d = 9; d <= 12; ++d) EXPECT_EQ(register_width(d), 12);
  for (int d = 13; d <= 16; ++d) EXPECT_EQ(register_width(d), 16);
  EXPECT_EQ(register_width(17), 0);
  EXPECT_EQ(register_width(4096), 0);
}

TEST(CudaDispatch, ForcedFamiliesAreCheckedAgainstD) {
  EXPECT_EQ(choose_kernel(3, 100, 100, Precision::kDefault, ScoreKernel::kTensor), ScoreKernel::kTensor);
  EXPECT_EQ(choose_kernel(200, 100, 100, Precision::kDefault, ScoreKernel::kTiled), ScoreKernel::kTiled);
  EXPECT_EQ(choose_kernel(16, 100, 100, Precision::kFp32, ScoreKernel::kRegister), ScoreKernel::kRegister);
  try {
    choose_kernel(17, 100, 100, Precision::kDefault, ScoreKernel::kRegister);
    FAIL() << "register at d = 17 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("d = 17"), std::string::npos) << e.what();
  }
  // Past d = 128 the tensor family is split fp16 on warpgroups alone: the default precision, up to d = 256.
  EXPECT_EQ(choose_kernel(129, 100, 100, Precision::kDefault, ScoreKernel::kTensor), ScoreKernel::kTensor);
  EXPECT_EQ(choose_kernel(256, 100, 100, Precision::kDefault, ScoreKernel::kTensor), ScoreKernel::kTensor);
  EXPECT_THROW(choose_kernel(257, 100, 100, Precision::kDefault, ScoreKernel::kTensor), std::invalid_argument);
  EXPECT_THROW(choose_kernel(129, 100, 100, Precision::kTf32, ScoreKernel::kTensor), std::invalid_argument);
  EXPECT_THROW(choose_kernel(129, 100, 100, Precision::kBf16, ScoreKernel::kTensor), std::invalid_argument);
  EXPECT_EQ(choose_kernel(128, 100, 100, Precision::kBf16, ScoreKernel::kTensor), ScoreKernel::kTensor);
  EXPECT_THROW(choose_kernel(8, 100, 100, Precision::kFp32, ScoreKernel::kTensor), std::invalid_argument);
  EXPECT_THROW(choose_kernel(0, 100, 100, Precision::kDefault, ScoreKernel::kAuto), std::invalid_argument);
}

TEST(CudaDispatch, EveryDimensionGetsAFamilyThatServesIt) {
  for (const Precision p : {Precision::kDefault, Precision::kFp32, Precision::kTf32, Precision::kBf16})
    for (int d = 1; d <= 4096; ++d)
      for (const std::int64_t n : {1'000, 100'000, 1'000'000}) {
        const ScoreKernel k = choose_kernel(d, n, n, p, ScoreKernel::kAuto);
        ASSERT_NE(k, ScoreKernel::kAuto);
        ASSERT_TRUE(detail::cuda::kernel_serves(k, d, p)) << to_string(k) << " d=" << d;
        if (p == Precision::kFp32) {
          ASSERT_NE(k, ScoreKernel::kTensor);
        }
        if (d > 256 || (d > 128 && p != Precision::kDefault)) {
          ASSERT_EQ(k, ScoreKernel::kTiled) << d;
        } else if (d > 128) {
          ASSERT_EQ(k, ScoreKernel::kTensor) << d;  // the wide warpgroup kernels (d ≤ 256, split fp16)
        }
      }
}

TEST(CudaDispatch, WithoutMeasurementsThePriorIsTheChoiceBeforeTheTable) {
  const DispatchEntry none[] = {{1, 1, 1, ScoreKernel::kTiled, 1.0}};
  for (int d = 1; d <= 300; ++d) {
    const ScoreKernel want = d <= 4                ? ScoreKernel::kRegister
                             : d >= 16 && d <= 256 ? ScoreKernel::kTensor
                                                   : ScoreKernel::kTiled;
    EXPECT_EQ(choose_kernel(d, 100'000, 100'000, Precision::kDefault, ScoreKernel::kAuto, none), want) << d;
    EXPECT_EQ(choose_kernel(d, 100'000, 100'000, Precision::kFp32, ScoreKernel::kAuto, none),
              d <= 4 ? ScoreKernel::kRegister : ScoreKernel::kTiled)
        << d;
    EXPECT_EQ(detail::cuda::default_fp32_width(d), d <= 4 ? d : 0);
  }
}

TEST(CudaDispatch, TensorOperandsPadToTheCompiledWidths) {
  // Multiples of 16 up to 128 (KS = 1 .. 8), past it 192 and 256 (the wide kernels' KS = 12, 16).
  for (int d = 1; d <= 128; ++d) EXPECT_EQ(detail::cuda::tensor_padded_d(d), (d + 15) / 16 * 16) << d;
  for (int d = 129; d <= 192; ++d) EXPECT_EQ(detail::cuda::tensor_padded_d(d), 192) << d;
  for (int d = 193; d <= 256; ++d) EXPECT_EQ(detail::cuda::tensor_padded_d(d), 256) << d;
}

TEST(CudaDispatch, NamedLowPrecisionMeansTensorCores) {
  EXPECT_EQ(choose_kernel(16, 100, 100, Precision::kTf32, ScoreKernel::kAuto), ScoreKernel::kTensor);
  // Below d = 16 the tensor cores were never the choice before the table: the prior's register kernels.
  EXPECT_EQ(choose_kernel(3, 100, 100, Precision::kTf32, ScoreKernel::kAuto), ScoreKernel::kRegister);
  // Below d = 16 a named bf16/tf32 does not force the tensor cores: the family the table measured fastest among those
  // that serve it. At d = 8, n = 10k that is tensor-bias for the default precision, which it alone serves, and the
  // plain tensor cores (faster there than the register kernels) for bf16.
  EXPECT_EQ(choose_kernel(8, 100, 100, Precision::kDefault, ScoreKernel::kAuto), ScoreKernel::kTensorBias);
  EXPECT_EQ(choose_kernel(8, 100, 100, Precision::kBf16, ScoreKernel::kAuto), ScoreKernel::kTensor);
  EXPECT_EQ(choose_kernel(3, 100, 100, Precision::kBf16, ScoreKernel::kAuto), ScoreKernel::kRegister);
  EXPECT_EQ(choose_kernel(64, 100, 100, Precision::kBf16, ScoreKernel::kAuto), ScoreKernel::kTensor);
  EXPECT_EQ(choose_kernel(200, 100, 100, Precision::kBf16, ScoreKernel::kAuto), ScoreKernel::kTiled);
}

TEST(CudaDispatch, TheFastestMeasuredFamilyAtTheNearestPointWins) {
  const DispatchEntry table[] = {
      {8, 100'000, 100'000, ScoreKernel::kRegister, 30.0}, {8, 100'000, 100'000, ScoreKernel::kTensor, 60.0},
      {8, 10'000, 10'000, ScoreKernel::kRegister, 2.0},    {8, 10'000, 10'000, ScoreKernel::kTensor, 1.0},
      {8, 10'000, 10'000, ScoreKernel::kTiled, 5.0},
      {16, 100'000, 100'000, ScoreKernel::kRegister, 80.0}, {16, 100'000, 100'000, ScoreKernel::kTensor, 70.0},
      {32, 100'000, 100'000, ScoreKernel::kTiled, 50.0},  {32, 100'000, 100'000, ScoreKernel::kTensor, 70.0},
  };
  const auto pick = [&](int d, std::int64_t n, std::int64_t m, Precision p = Precision::kDefault) {
    return choose_kernel(d, n, m, p, ScoreKernel::kAuto, table);
  };
  EXPECT_EQ(pick(8, 100'000, 100'000), ScoreKernel::kRegister);
  EXPECT_EQ(pick(8, 10'000, 10'000), ScoreKernel::kTensor);  // nearest size decides
  EXPECT_EQ(pick(8, 12'000, 9'000), ScoreKernel::kTensor);
  EXPECT_EQ(pick(8, 1'000'000, 1'000'000), ScoreKernel::kRegister);
  EXPECT_EQ(pick(8, 10'000, 10'000, Precision::kFp32), ScoreKernel::kRegister);  // tensor excluded
  // fp32 at d = 16: only the register family of those measured serves it, so nothing was compared: the prior.
  EXPECT_EQ(pick(16, 100'000, 100'000, Precision::kFp32), ScoreKernel::kTiled);
  EXPECT_EQ(pick(16, 100'000, 100'000), ScoreKernel::kTensor);
  EXPECT_EQ(pick(14, 100'000, 100'000), ScoreKernel::kTensor);  // same register width (16) as the measured d
  EXPECT_EQ(pick(24, 100'000, 100'000), ScoreKernel::kTiled);   // the next larger measured d
  // d = 10 pads to width 12, measured nowhere: the prior (tiled between 5 and 15).
  EXPECT_EQ(pick(10, 100'000, 100'000), ScoreKernel::kTiled);
  EXPECT_EQ(pick(100, 100'000, 100'000), ScoreKernel::kTiled);  // the largest smaller measured d (32)
  EXPECT_EQ(pick(300, 100'000, 100'000), ScoreKernel::kTiled);
}

TEST(CudaDispatch, TheBiasedSumsServeUpToDThirtyAtTheDefaultPrecisionOnly) {
  for (int d = 1; d <= 30; ++d)
    EXPECT_EQ(choose_kernel(d, 100, 100, Precision::kDefault, ScoreKernel::kTensorBias), ScoreKernel::kTensorBias);
  try {
    choose_kernel(31, 100, 100, Precision::kDefault, ScoreKernel::kTensorBias);
    FAIL() << "tensor-bias at d = 31 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tensor-bias"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("d = 31"), std::string::npos) << e.what();
  }
  // One product (tf32, bf16) or fp32 scores leave no split for the biases' parts.
  for (const Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16})
    EXPECT_THROW(choose_kernel(8, 100, 100, p, ScoreKernel::kTensorBias), std::invalid_argument) << to_string(p);
  EXPECT_EQ(parse_score_kernel("tensor-bias"), ScoreKernel::kTensorBias);
  EXPECT_EQ(to_string(ScoreKernel::kTensorBias), "tensor-bias");
}

TEST(CudaDispatch, SubtileOverlapNamesRoundTripAndTheDefaultIsAcrossTiles) {
  for (const SubtileOverlap o : {SubtileOverlap::kOff, SubtileOverlap::kWithinTile, SubtileOverlap::kAcrossTiles})
    EXPECT_EQ(parse_subtile_overlap(to_string(o)), o) << to_string(o);
  EXPECT_EQ(to_string(SubtileOverlap::kAcrossTiles), "across");
  EXPECT_EQ(CudaTuning{}.subtile_overlap, SubtileOverlap::kAcrossTiles);
  try {
    parse_subtile_overlap("both");
    FAIL() << "'both' accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'both'"), std::string::npos) << e.what();
  }
}

TEST(CudaDispatch, TheBiasedSumsWinOnlyWhereMeasuredFastestAndServing) {
  const DispatchEntry table[] = {
      {8, 100'000, 100'000, ScoreKernel::kRegister, 70.0}, {8, 100'000, 100'000, ScoreKernel::kTensor, 60.0},
      {8, 100'000, 100'000, ScoreKernel::kTensorBias, 40.0},
      {32, 100'000, 100'000, ScoreKernel::kTiled, 300.0}, {32, 100'000, 100'000, ScoreKernel::kTensor, 70.0},
  };
  const auto pick = [&](int d, Precision p = Precision::kDefault) {
    return choose_kernel(d, 100'000, 100'000, p, ScoreKernel::kAuto, table);
  };
  EXPECT_EQ(pick(8), ScoreKernel::kTensorBias);
  EXPECT_EQ(pick(8, Precision::kTf32), ScoreKernel::kTensor);  // not served: the fastest that is
  // fp32: of those measured only the register family serves it, so nothing was compared: the prior.
  EXPECT_EQ(pick(8, Precision::kFp32), ScoreKernel::kTiled);
  EXPECT_EQ(pick(32), ScoreKernel::kTensor);
  // Without a measurement the prior never takes it.
  const DispatchEntry none[] = {{1, 1, 1, ScoreKernel::kTiled, 1.0}};
  for (int d = 1; d <= 30; ++d)
    EXPECT_NE(choose_kernel(d, 100'000, 100'000, Precision::kDefault, ScoreKernel::kAuto, none),
              ScoreKernel::kTensorBias);
}

TEST(CudaDispatch, TheTableInTheRepositoryIsWellFormed) {
  for (const DispatchEntry& e : kDispatchTable) {
    EXPECT_GE(e.d, 1);
    EXPECT_GT(e.n, 0);
    EXPECT_GT(e.m, 0);
    EXPECT_GT(e.ms, 0);
    EXPECT_TRUE(detail::cuda::kernel_serves(e.kernel, e.d, Precision::kDefault));
  }
}

}  // namespace
}  // namespace flashot::test
