// `flashot align --spatial` on the bundled slice pair (samples/slice_a.h5ad → samples/slice_b.h5ad, made by
// samples/make_slices.cpp with a known rotation of 30° and translation (250, −150) µm): the outputs, the recovered
// motion and cell types, and the usage errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "flashot/io/anndata.hpp"
#include "run_command.hpp"

namespace flashot::test {
namespace {

const std::filesystem::path kSamples = FLASHOT_SAMPLES;
const std::filesystem::path kSliceA = kSamples / "slice_a.h5ad";
const std::filesystem::path kSliceB = kSamples / "slice_b.h5ad";
constexpr double kWidth = 1000;              // µm, the slices' side
constexpr double kTrueRotation = 30;         // degrees
constexpr double kTrueShift[2] = {250, -150};
constexpr double kRotationTolerance = 1.0;   // degrees (the target): measured 0.51
constexpr double kShiftTolerance = 0.01;     // of the width (the target): measured 0.0002
constexpr double kLabelAccuracy = 0.95;      // measured 0.971

class SpatialSamples : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    folder_ = std::filesystem::temp_directory_path() / ("flashot-cli-spatial-" + std::to_string(::getpid()));
    std::filesystem::remove_all(folder_);
    std::filesystem::create_directories(folder_);
    result_ = new CommandResult(run_flashot({"align", kSliceA.string(), kSliceB.string(), "-o",
                                             (folder_ / "a_aligned.h5ad").string(), "--spatial", "spatial", "--key",
                                             "X_pca", "--transfer-labels", "cell_type", "--coupling",
                                             (folder_ / "coupling.h5ad").string(), "--report",
                                             (folder_ / "report.json").string(), "--backend", "cpu"}));
  }
  static void TearDownTestSuite() {
    delete result_;
    std::filesystem::remove_all(folder_);
  }
  void SetUp() override { ASSERT_EQ(result_->exit_code, 0) << result_->err; }
  static inline std::filesystem::path folder_;
  static inline CommandResult* result_ = nullptr;
};

TEST_F(SpatialSamples, RecoversTheKnownMotionAndCellTypes) {
  const nlohmann::json r = nlohmann::json::parse(read_file(folder_ / "report.json"));
  EXPECT_TRUE(r["gromov"]["converged"].get<bool>()) << r["gromov"]["message"];
  EXPECT_NEAR(r["transform"]["rotation_degrees"].get<double>(), kTrueRotation, kRotationTolerance);
  EXPECT_NEAR(r["transform"]["translation"][0].get<double>(), kTrueShift[0], kShiftTolerance * kWidth);
  EXPECT_NEAR(r["transform"]["translation"][1].get<double>(), kTrueShift[1], kShiftTolerance * kWidth);
  const io::H5adReader out(folder_ / "a_aligned.h5ad");
  const io::DenseMatrix moved = out.read_obsm("spatial_flashot");
  const io::DenseMatrix original = out.read_obsm("spatial");
  ASSERT_EQ(moved.rows, original.rows);
  ASSERT_EQ(moved.cols, 2u);
  // The rigid model: every cell moved by the same rotation and translation.
  const double th = r["transform"]["rotation_degrees"].get<double>() * M_PI / 180;
  const double tx = r["transform"]["translation"][0].get<double>(), ty = r["transform"]["translation"][1].get<double>();
  for (std::size_t i = 0; i < moved.rows; i += 97) {
    const double x = original.values[2 * i], y = original.values[2 * i + 1];
    EXPECT_NEAR(moved.values[2 * i], std::cos(th) * x - std::sin(th) * y + tx, 1e-2);
    EXPECT_NEAR(moved.values[2 * i + 1], std::sin(th) * x + std::cos(th) * y + ty, 1e-2);
  }
  const io::Column truth = out.read_obs("cell_type");
  const io::Column got = out.read_obs("cell_type_flashot");
  std::size_t right = 0;
  for (std::size_t i = 0; i < truth.codes.size(); ++i)
    right += truth.categories[truth.codes[i]] == got.categories[got.codes[i]];
  EXPECT_GE(double(right) / double(truth.codes.size()), kLabelAccuracy);
  EXPECT_TRUE(std::filesystem::exists(folder_ / "coupling.h5ad"));
}

TEST(SpatialUsage, RefusesWhatItCannotDo) {
  const std::filesystem::path folder = fresh_folder();
  const auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"align", kSliceA.string(), kSliceB.string(), "-o", (folder / "o.h5ad").string(),
                                  "--spatial", "spatial"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_flashot(args);
  };
  CommandResult r = run({"--alpha", "1.5", "--key", "X_pca"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--alpha must be in [0, 1] (got 1.5)"), std::string::npos) << r.err;
  r = run({"--alpha", "0.3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("give it with --key EMB"), std::string::npos) << r.err;
  r = run({"--model", "wobbly"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--model must be rigid, affine or nonrigid (got 'wobbly')"), std::string::npos) << r.err;
  r = run({"--save-solution", (folder / "s.sol").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--save-solution cannot be combined with --spatial"), std::string::npos) << r.err;
  r = run({"--key", "X_nothing"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("X_nothing"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(folder / "o.h5ad"));
}

}  // namespace
}  // namespace flashot::test
