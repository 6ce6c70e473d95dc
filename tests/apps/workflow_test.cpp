// flashot_workflow pieces the end-to-end tests cannot pin down precisely: the ETA estimate, all-or-nothing
// outputs, the path checks before a run (RunPlan, as the GUI calls them), the solution file round trip and its
// rejection of damaged files.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "flashot/workflow/dataset.hpp"
#include "flashot/workflow/output_set.hpp"
#include "flashot/workflow/progress.hpp"
#include "flashot/workflow/run_plan.hpp"
#include "flashot/workflow/solution.hpp"
#include "run_command.hpp"

namespace flashot::test {
namespace {

constexpr double kSecondsTolerance = 1e-9;

TEST(ProgressEta, ExtrapolatesTheErrorDecayInTheFinalStage) {
  Progress previous, current;
  previous.stage = current.stage = 4;
  previous.stage_count = current.stage_count = 5;
  previous.max_iterations = current.max_iterations = 1000;
  previous.iteration = 100;
  previous.marginal_error = 1e-1;
  current.iteration = 110;
  current.marginal_error = 1e-2;  // one decade per 10 iterations: 1e-3 needs 10 more
  bool upper_bound = true;
  const double left = workflow::ProgressDisplay::estimate_seconds_left(previous, current, 11.0, 1e-3, upper_bound);
  EXPECT_FALSE(upper_bound);
  EXPECT_NEAR(left, 10 * (11.0 / 110), kSecondsTolerance);
}

TEST(ProgressEta, FallsBackToTheBudgetWhenTheErrorDoesNotFall) {
  Progress previous, current;
  previous.stage = current.stage = 0;
  previous.stage_count = current.stage_count = 1;
  previous.max_iterations = current.max_iterations = 100;
  previous.iteration = 10;
  current.iteration = 20;
  previous.marginal_error = current.marginal_error = 0.5;
  bool upper_bound = false;
  const double left = workflow::ProgressDisplay::estimate_seconds_left(previous, current, 2.0, 1e-3, upper_bound);
  EXPECT_TRUE(upper_bound);
  EXPECT_NEAR(left, 80 * 0.1, kSecondsTolerance);
}

TEST(OutputSet, NothingAppearsUnlessCommitted) {
  const auto folder = fresh_folder();
  {
    workflow::OutputSet outputs;
    std::ofstream(outputs.stage(folder / "a.txt")) << "a";
    std::ofstream(outputs.stage(folder / "b.json")) << "b";
  }
  EXPECT_TRUE(std::filesystem::is_empty(folder));
  workflow::OutputSet outputs;
  const auto temporary = outputs.stage(folder / "a.txt");
  EXPECT_EQ(temporary.parent_path(), folder);
  EXPECT_EQ(temporary.extension(), ".txt");
  std::ofstream(temporary) << "a";
  outputs.commit();
  EXPECT_EQ(read_file(folder / "a.txt"), "a");
  EXPECT_FALSE(std::filesystem::exists(temporary));
  EXPECT_THROW(outputs.stage(folder / "no" / "c.txt"), std::invalid_argument);
}

TEST(OutputSet, CommitRefusesAnUnwrittenOutput) {
  const auto folder = fresh_folder();
  workflow::OutputSet outputs;
  std::ofstream(outputs.stage(folder / "a.txt")) << "a";
  outputs.stage(folder / "never.txt");
  EXPECT_THROW(outputs.commit(), std::runtime_error);
}

workflow::Solution small_solution() {
  workflow::Solution s;
  s.key = "X_pca";
  s.representation = "obsm['X_pca'] (2-d)";
  s.cost = Cost::kHalfSquaredEuclidean;
  s.epsilon = 0.25;
  s.reach_target = 4;
  s.n = 3;
  s.m = 2;
  s.d = 2;
  s.x = {0, 1, 2, 3, 4, 5};
  s.a = {0.2f, 0.3f, 0.5f};
  s.f = {-1, 0, 1};
  s.y = {7, 8, 9, 10};
  s.b = {0.5f, 0.5f};
  s.g = {0.5f, -0.5f};
  return s;
}

TEST(SolutionFile, RoundTripsEveryField) {
  const auto folder = fresh_folder();
  const workflow::Solution s = small_solution();
  workflow::save_solution(folder / "s.sol", s);
  const workflow::Solution r = workflow::load_solution(folder / "s.sol");
  EXPECT_EQ(r.key, s.key);
  EXPECT_EQ(r.representation, s.representation);
  EXPECT_EQ(r.cost, s.cost);
  EXPECT_EQ(r.epsilon, s.epsilon);
  EXPECT_EQ(r.reach_target, s.reach_target);
  EXPECT_EQ(r.x, s.x);
  EXPECT_EQ(r.a, s.a);
  EXPECT_EQ(r.f, s.f);
  EXPECT_EQ(r.y, s.y);
  EXPECT_EQ(r.b, s.b);
  EXPECT_EQ(r.g, s.g);
}

TEST(SolutionFile, RejectsTruncatedAndForeignFiles) {
  const auto folder = fresh_folder();
  workflow::save_solution(folder / "s.sol", small_solution());
  const std::string bytes = read_file(folder / "s.sol");
  std::ofstream(folder / "short.sol", std::ios::binary) << bytes.substr(0, bytes.size() - 4);
  std::ofstream(folder / "other.sol", std::ios::binary) << "PLY\nnot a solution";
  EXPECT_THROW(workflow::load_solution(folder / "short.sol"), std::runtime_error);
  EXPECT_THROW(workflow::load_solution(folder / "other.sol"), std::runtime_error);
  EXPECT_THROW(workflow::load_solution(folder / "missing.sol"), std::runtime_error);
  workflow::Solution bad = small_solution();
  bad.g.pop_back();
  EXPECT_THROW(workflow::save_solution(folder / "bad.sol", bad), std::invalid_argument);
}

TEST(RowFilter, ParsesColumnEqualsValue) {
  const workflow::RowFilter f = workflow::parse_row_filter("time=day 3=late", "--where");
  EXPECT_EQ(f.column, "time");
  EXPECT_EQ(f.value, "day 3=late");
  EXPECT_THROW(workflow::parse_row_filter("time", "--where"), std::invalid_argument);
  EXPECT_THROW(workflow::parse_row_filter("=3", "--where"), std::invalid_argument);
}

TEST(RunPlan, RefusesAnInputAndNamesTheOptionAndThePath) {
  const auto folder = fresh_folder();
  std::ofstream(folder / "a.h5ad") << "input";
  workflow::RunPlan plan;
  plan.input("SOURCE", folder / "a.h5ad").output("the report", folder / "." / "a.h5ad");
  try {
    plan.check();
    FAIL() << "the input was accepted as an output";
  } catch (const workflow::PathError& e) {
    EXPECT_EQ(e.option(), "the report");
    EXPECT_EQ(e.path(), folder / "." / "a.h5ad");
    EXPECT_NE(std::string(e.what()).find("is the input SOURCE"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(folder / "a.h5ad"), "input");
}

TEST(RunPlan, HardLinkAndLinkedFolderAreTheSameFile) {
  const auto folder = fresh_folder();
  std::filesystem::create_directory(folder / "data");
  std::ofstream(folder / "data" / "a.ply") << "input";
  std::filesystem::create_hard_link(folder / "data" / "a.ply", folder / "copy.ply");
  std::filesystem::create_directory_symlink(folder / "data", folder / "alias");
  EXPECT_THROW(workflow::RunPlan().input("TARGET", folder / "data" / "a.ply").output("-o", folder / "copy.ply").check(),
               workflow::PathError);
  EXPECT_THROW(
      workflow::RunPlan().input("TARGET", folder / "data" / "a.ply").output("-o", folder / "alias" / "a.ply").check(),
      workflow::PathError);
  // Two outputs that do not exist yet, one spelled through the linked folder.
  EXPECT_THROW(workflow::RunPlan()
                   .output("-o", folder / "data" / "new.ply")
                   .output("--report", folder / "alias" / ".." / "alias" / "new.ply")
                   .check(),
               workflow::PathError);
}

TEST(RunPlan, AcceptsDistinctOutputsAndLeavesNoProbeFile) {
  const auto folder = fresh_folder();
  std::ofstream(folder / "a.h5ad") << "input";
  std::ofstream(folder / "out.h5ad") << "an earlier run's output, replaced";
  workflow::RunPlan plan;
  plan.input("SOURCE", folder / "a.h5ad").input("TARGET", folder / "a.h5ad").input("generated", "");
  plan.output("-o", folder / "out.h5ad").output("--report", folder / "report.json");
  EXPECT_NO_THROW(plan.check());
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(folder)) ++entries;
  EXPECT_EQ(entries, 2u) << "the write probe must be removed";
}

TEST(RunPlan, MissingFolderIsNamed) {
  const auto folder = fresh_folder();
  try {
    workflow::RunPlan().output("--coupling", folder / "missing" / "c.h5ad").check();
    FAIL() << "a missing folder was accepted";
  } catch (const workflow::PathError& e) {
    EXPECT_EQ(e.option(), "--coupling");
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flashot::test
