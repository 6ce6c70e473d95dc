// `flashot flow` and `flashot register --model nonrigid` on the committed shape and its rotated, noisy, partial
// scan (samples/README.md): the flow must lower its loss and record every step; the non-rigid field must bring the
// scan much closer to the shape than it started.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "flashot/io/ply.hpp"
#include "run_command.hpp"

namespace flashot::test {
namespace {

const std::filesystem::path kSamples = FLASHOT_SAMPLES;
// The scan starts ~0.3 units (a 30° turn of a 2-unit shape plus a shift) from the shape; a working flow or field
// must remove most of that.
constexpr double kMinFlowLossReduction = 0.5;     // final loss ≤ half the initial one after 3 gradient steps
constexpr double kMinNonrigidImprovement = 0.5;   // mean nearest-neighbour distance at least halved

/// Mean distance from each point of `a` to its nearest point of `b` (both n×3), brute force.
double mean_nearest_distance(const std::vector<float>& a, const std::vector<float>& b) {
  double total = 0;
  for (std::size_t i = 0; i < a.size() / 3; ++i) {
    double best = std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < b.size() / 3; ++j) {
      double d2 = 0;
      for (int k = 0; k < 3; ++k) d2 += std::pow(double(a[3 * i + k]) - double(b[3 * j + k]), 2);
      best = std::min(best, d2);
    }
    total += std::sqrt(best);
  }
  return total / double(a.size() / 3);
}

TEST(FlowSamples, GradientFlowLowersTheDivergenceAndKeepsEveryStep) {
  const auto folder = fresh_folder();
  const CommandResult r = run_flashot({"flow", (kSamples / "shape_scan.ply").string(), (kSamples / "shape.ply").string(),
                                       "-o", (folder / "flow.ply").string(), "--steps", "3", "--report",
                                       (folder / "flow.json").string(), "--backend", "cpu", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(read_file(folder / "flow.json"));
  ASSERT_EQ(report["steps"].size(), 3u);
  const double first = report["steps"][0]["loss"].get<double>();
  const double last = report["final_loss"].get<double>();
  EXPECT_LT(last, kMinFlowLossReduction * first) << "loss " << first << " -> " << last;

  const io::PlyFile out = io::read_ply(folder / "flow.ply");
  const io::PlyFile in = io::read_ply(kSamples / "shape_scan.ply");
  const io::PlyElement* vertex = out.find("vertex");
  ASSERT_NE(vertex, nullptr);
  for (int step = 0; step <= 3; ++step) {
    for (const char* axis : {"x", "y", "z"}) {
      EXPECT_NE(vertex->find(std::string(axis) + "_step" + std::to_string(step)), nullptr) << axis << step;
    }
  }
  // Step 0 is the input; the final x is the last step.
  EXPECT_EQ(vertex->find("x_step0")->values, in.find("vertex")->find("x")->values);
  EXPECT_EQ(vertex->find("x_step3")->values, vertex->find("x")->values);
}

TEST(FlowSamples, NonrigidRegistrationBringsTheScanOntoTheShape) {
  const auto folder = fresh_folder();
  const CommandResult r =
      run_flashot({"register", (kSamples / "shape_scan.ply").string(), (kSamples / "shape.ply").string(), "-o",
                   (folder / "nonrigid.ply").string(), "--model", "nonrigid", "--max-rounds", "12", "--reach-target",
                   "0.1", "--report", (folder / "nonrigid.json").string(), "--backend", "cpu", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rms"), std::string::npos) << r.out;
  const nlohmann::json report = nlohmann::json::parse(read_file(folder / "nonrigid.json"));
  EXPECT_EQ(report["model"], "nonrigid");
  for (const char* key : {"epsilon", "cost", "converged", "iterations", "marginal_error", "backend", "rms", "rounds"}) {
    EXPECT_TRUE(report.contains(key)) << key;
  }
  const std::vector<float> shape = io::vertex_positions(io::read_ply(kSamples / "shape.ply"));
  const std::vector<float> scan = io::vertex_positions(io::read_ply(kSamples / "shape_scan.ply"));
  const io::PlyFile out = io::read_ply(folder / "nonrigid.ply");
  const std::vector<float> moved = io::vertex_positions(out);
  const double before = mean_nearest_distance(scan, shape);
  const double after = mean_nearest_distance(moved, shape);
  std::printf("nonrigid: mean nearest distance %.4f -> %.4f\n", before, after);
  EXPECT_LT(after, kMinNonrigidImprovement * before);
  // The original coordinates are kept beside the moved ones.
  EXPECT_EQ(out.find("vertex")->find("x_original")->values, io::read_ply(kSamples / "shape_scan.ply").find("vertex")->find("x")->values);
}

}  // namespace
}  // namespace flashot::test
