// `flashot register` on the committed shape and its rotated, noisy, partial scan (samples/README.md): the
// rotation it finds must undo the known one.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "flashot/workflow/registration.hpp"
#include "flashot/io/ply.hpp"
#include "run_command.hpp"

namespace flashot::test {
namespace {

const std::filesystem::path kSamples = FLASHOT_SAMPLES;
constexpr double kScanRotationDegrees = 30.0;  // samples/make_samples.cpp
constexpr double kMaxAngleErrorDegrees = 1.0;  // the defaults: 0.08° measured (docs/cli.md)
constexpr double kMaxTranslationError = 0.03;  // the shape is about 2 units long

/// Rodrigues' rotation about (1,2,3) by 30°, as the generator builds the scan.
workflow::Transform scan_motion() {
  const double n = std::sqrt(14.0), ux = 1 / n, uy = 2 / n, uz = 3 / n;
  const double a = kScanRotationDegrees * M_PI / 180, c = std::cos(a), s = std::sin(a);
  workflow::Transform t;
  t.linear = {c + ux * ux * (1 - c),      ux * uy * (1 - c) - uz * s, ux * uz * (1 - c) + uy * s,
              uy * ux * (1 - c) + uz * s, c + uy * uy * (1 - c),      uy * uz * (1 - c) - ux * s,
              uz * ux * (1 - c) - uy * s, uz * uy * (1 - c) + ux * s, c + uz * uz * (1 - c)};
  t.translation = {0.3, -0.2, 0.1};
  return t;
}

// The documented command with nothing tuned: a partial scan onto its whole model must land within 1° of the truth
// and raise no warning (the balanced OT of old found 32.4°, 5.5° off, and called it converged).
TEST(RegisterSamples, RecoversTheKnownRotationOfThePartialScanWithTheDefaults) {
  const auto folder = fresh_folder();
  const CommandResult r = run_flashot({"register", (kSamples / "shape_scan.ply").string(),
                                       (kSamples / "shape.ply").string(), "-o", (folder / "registered.ply").string(),
                                       "--report", (folder / "report.json").string(), "--backend", "cpu"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("rotation"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rms"), std::string::npos) << r.out;
  const nlohmann::json report = nlohmann::json::parse(read_file(folder / "report.json"));
  for (const char* key : {"epsilon", "cost", "converged", "iterations", "marginal_error", "backend", "transform",
                          "rotation_degrees", "rms", "rounds"}) {
    EXPECT_TRUE(report.contains(key)) << key;
  }
  // found ∘ motion should be the identity: compose the 3×3 parts and measure the residual rotation angle.
  const workflow::Transform motion = scan_motion();
  workflow::Transform composed;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      double v = 0;
      for (int k = 0; k < 3; ++k) v += report["transform"][i][k].get<double>() * motion.linear[std::size_t(3 * k + j)];
      composed.linear[std::size_t(3 * i + j)] = v;
    }
  }
  const double angle_error = composed.rotation_degrees();
  std::printf("registration: found %.3f degrees, residual %.3f degrees, rms %.4f, %zu rounds\n",
              report["rotation_degrees"].get<double>(), angle_error, report["rms"].get<double>(),
              report["rounds"].size());
  EXPECT_LT(angle_error, kMaxAngleErrorDegrees);
  // Every scan point must land near where it came from: found(motion(p)) ≈ p, so found(t_motion) ≈ −A·0 ... check
  // the composed translation A·t_motion + t_found ≈ 0.
  for (int i = 0; i < 3; ++i) {
    double v = report["transform"][i][3].get<double>();
    for (int k = 0; k < 3; ++k) v += report["transform"][i][k].get<double>() * motion.translation[std::size_t(k)];
    EXPECT_LT(std::abs(v), kMaxTranslationError) << "axis " << i;
  }
  EXPECT_TRUE(report["warnings"].empty()) << report["warnings"].dump();
  // --multiscale auto at 2,178 × 3,000 points (6.5·10⁶ pairs, below the CPU threshold of 10¹⁰): every round dense.
  EXPECT_EQ(report["parameters"]["multiscale"], "auto");
  for (const auto& round : report["rounds"]) EXPECT_FALSE(round["multiscale"].get<bool>()) << round.dump();
  EXPECT_EQ(r.err.find("multiscale in"), std::string::npos) << r.err;
  EXPECT_NEAR(report["reach_used"]["target"].get<double>(), 0.02 * report["diameter"].get<double>(), 1e-9);
  EXPECT_EQ(report["reach_used"]["source"].get<double>(), 0.0);
  const io::PlyFile out = io::read_ply(folder / "registered.ply");
  const io::PlyFile in = io::read_ply(kSamples / "shape_scan.ply");
  EXPECT_EQ(out.find("vertex")->find("x_original")->values, in.find("vertex")->find("x")->values);
}

// --multiscale on: every round's solve runs the multiscale block-sparse solver (on the samples: a coarse level of
// 9 × 12 block centres under the points), and the registration still lands within 1° of the truth.
TEST(RegisterSamples, MultiscaleOnRunsEveryRoundMultiscaleAndRecoversTheRotation) {
  const auto folder = fresh_folder();
  const CommandResult r = run_flashot({"register", (kSamples / "shape_scan.ply").string(),
                                       (kSamples / "shape.ply").string(), "-o", (folder / "registered.ply").string(),
                                       "--report", (folder / "report.json").string(), "--backend", "cpu",
                                       "--multiscale", "on"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(read_file(folder / "report.json"));
  EXPECT_EQ(report["parameters"]["multiscale"], "on");
  ASSERT_FALSE(report["rounds"].empty());
  for (const auto& round : report["rounds"]) EXPECT_TRUE(round["multiscale"].get<bool>()) << round.dump();
  EXPECT_TRUE(report["multiscale"]["used"].get<bool>()) << report["multiscale"].dump();  // the last round's solve
  const std::string note = "multiscale in " + std::to_string(report["rounds"].size()) + " of " +
                           std::to_string(report["rounds"].size()) + " rounds";
  EXPECT_NE(r.err.find(note), std::string::npos) << r.err;
  EXPECT_TRUE(report["converged"].get<bool>());
  const workflow::Transform motion = scan_motion();
  workflow::Transform composed;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      double v = 0;
      for (int k = 0; k < 3; ++k) v += report["transform"][i][k].get<double>() * motion.linear[std::size_t(3 * k + j)];
      composed.linear[std::size_t(3 * i + j)] = v;
    }
  }
  std::printf("multiscale on: found %.4f degrees, residual %.4f degrees, rms %.6f, %zu rounds, %d iterations\n",
              report["rotation_degrees"].get<double>(), composed.rotation_degrees(), report["rms"].get<double>(),
              report["rounds"].size(), report["iterations"].get<int>());
  EXPECT_LT(composed.rotation_degrees(), kMaxAngleErrorDegrees);
  EXPECT_TRUE(report["warnings"].empty()) << report["warnings"].dump();
}

TEST(RegisterSamples, AMultiscaleValueOtherThanAutoOnOffIsAUsageError) {
  const auto folder = fresh_folder();
  const CommandResult r = run_flashot({"register", (kSamples / "shape_scan.ply").string(),
                                       (kSamples / "shape.ply").string(), "-o", (folder / "registered.ply").string(),
                                       "--multiscale", "sometimes"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("multiscale must be auto, on or off (got 'sometimes')"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(folder / "registered.ply"));
}

TEST(Registration, ResultsThatLookOffAreWarnedAbout) {
  workflow::RegistrationResult good;
  good.diameter = 2.433;
  good.rms = 0.009;  // the samples with the defaults
  good.converged = true;
  EXPECT_TRUE(workflow::registration_warnings(good).empty());
  workflow::RegistrationResult balanced = good;
  balanced.rms = 0.160;  // the samples under balanced OT: 5.5° off
  const auto rms = workflow::registration_warnings(balanced);
  ASSERT_EQ(rms.size(), 1u);
  EXPECT_NE(rms[0].find("0.16"), std::string::npos) << rms[0];
  EXPECT_NE(rms[0].find("diameter"), std::string::npos) << rms[0];
  workflow::RegistrationResult lost = good;
  lost.transported_mass = 0.2;
  lost.converged = false;
  lost.rounds.resize(60);
  const auto two = workflow::registration_warnings(lost);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_NE(two[0].find("20%"), std::string::npos) << two[0];
  EXPECT_NE(two[1].find("60 rounds"), std::string::npos) << two[1];
}

TEST(Registration, WeightedProcrustesRecoversAnExactMotion) {
  const workflow::Transform motion = scan_motion();
  std::vector<float> from, weights;
  for (int i = 0; i < 50; ++i) {
    from.insert(from.end(), {float(std::sin(i * 1.3)), float(std::cos(i * 0.7)), float(i % 7) / 7.0f});
    weights.push_back(1.0f + float(i % 3));
  }
  const std::vector<float> to = motion.apply(from);
  for (auto model : {workflow::TransformModel::kRigid, workflow::TransformModel::kSimilarity, workflow::TransformModel::kAffine}) {
    const workflow::Transform found = workflow::fit_transform(from, to, weights, model);
    for (std::size_t k = 0; k < 9; ++k) EXPECT_NEAR(found.linear[k], motion.linear[k], 1e-4) << workflow::to_string(model);
    for (std::size_t k = 0; k < 3; ++k) EXPECT_NEAR(found.translation[k], motion.translation[k], 1e-4);
  }
}

}  // namespace
}  // namespace flashot::test
