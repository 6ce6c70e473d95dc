// `flashot bench`, --help, --version and usage errors: what needs no file support (also in FLASHOT_IO=OFF builds).

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "run_command.hpp"

namespace flashot::test {
namespace {

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> fields;
  std::stringstream stream(line);
  for (std::string f; std::getline(stream, f, sep);) fields.push_back(f);
  return fields;
}

TEST(Bench, CsvLastLineIsTheValuesPeersShExpects) {
  const CommandResult r = run_flashot({"bench", "--n", "300", "--m", "200", "--d", "5", "--eps", "0.1", "--iters",
                                       "4", "--repeats", "3", "--backend", "cpu", "--csv"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = lines(r.out);
  ASSERT_FALSE(out.empty());
  const auto fields = split(out.back(), ',');
  ASSERT_EQ(fields.size(), 7u) << out.back();
  EXPECT_EQ(fields[0], "flashot_cpu");
  EXPECT_EQ(fields[1], "300");
  EXPECT_EQ(fields[2], "200");
  EXPECT_EQ(fields[3], "5");
  EXPECT_EQ(fields[4], "0.1");
  EXPECT_EQ(fields[5], "4");
  EXPECT_GT(std::stod(fields[6]), 0.0);
  EXPECT_EQ(out.back().find(' '), std::string::npos) << "no spaces in the CSV line";
}

TEST(Bench, HumanOutputNamesBackendAndMedian) {
  const CommandResult r = run_flashot({"bench", "--n", "200", "--iters", "3", "--repeats", "2", "--backend", "cpu"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("flashot_cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("median"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("iters=3"), std::string::npos) << r.out;
}

TEST(Bench, ClusteredDataAndAForcedKernelRun) {
  // --kernel and --subtile-overlap only steer the CUDA backend; the CPU backend accepts and ignores them (as
  // --screening), and the line names them.
  const CommandResult r =
      run_flashot({"bench", "--n", "300", "--m", "250", "--d", "7", "--iters", "3", "--repeats", "2", "--backend",
                   "cpu", "--data", "clusters", "--kernel", "register"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // across by default
  EXPECT_NE(r.out.find("clusters kernel=register subtile-overlap=across"), std::string::npos) << r.out;
  const CommandResult off =
      run_flashot({"bench", "--n", "300", "--m", "250", "--d", "7", "--iters", "3", "--repeats", "2", "--backend",
                   "cpu", "--kernel", "tensor", "--subtile-overlap", "off"});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_NE(off.out.find("kernel=tensor n=300"), std::string::npos) << off.out;
  const CommandResult across =
      run_flashot({"bench", "--n", "300", "--m", "250", "--d", "7", "--iters", "3", "--repeats", "2", "--backend",
                   "cpu", "--kernel", "tensor-bias", "--subtile-overlap", "across"});
  ASSERT_EQ(across.exit_code, 0) << across.err;
  EXPECT_NE(across.out.find("kernel=tensor-bias subtile-overlap=across n=300"), std::string::npos) << across.out;
}

TEST(Bench, PointOrderIsTheEnginesAndItsBuildTimeIsPrinted) {
  // --point-order locality sorts on any backend (auto would not on the CPU): the summary's device names it, and the
  // Problem's construction time (the sort included, outside the timed solves) goes to stderr.
  const CommandResult r =
      run_flashot({"bench", "--n", "400", "--m", "300", "--d", "4", "--iters", "3", "--repeats", "1", "--backend",
                   "cpu", "--data", "clusters", "--point-order", "locality", "--csv"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(", locality order:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(point order locality)"), std::string::npos) << r.err;
  const CommandResult in = run_flashot({"bench", "--n", "400", "--d", "4", "--iters", "3", "--repeats", "1",
                                        "--backend", "cpu", "--point-order", "input"});
  ASSERT_EQ(in.exit_code, 0) << in.err;
  EXPECT_EQ(in.out.find("locality order"), std::string::npos) << in.out;
}

TEST(Usage, BadOptionValuesExitTwoWithOneLine) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"bench", "--n", "0"},
           {"bench", "--n", "10", "--eps", "-0.1"},
           {"bench", "--n", "10", "--backend", "gpu"},
           {"bench", "--n", "10", "--no-such-option"},
           {"bench", "--n", "10", "--kernel", "fastest"},
           {"bench", "--n", "10", "--subtile-overlap", "yes"},
           {"bench", "--n", "10", "--point-order", "sorted"},
           {"bench", "--n", "10", "--data", "no-such-data"},
           {"bench", "--n", "10", "--overrelaxation", "2"},
           {"bench", "--n", "10", "--overrelaxation", "fast"},
           {"bench"},
           {"no-such-command"},
           {}}) {
    const CommandResult r = run_flashot(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << "\n" << r.err;
    if (!args.empty()) EXPECT_EQ(lines(r.err).size(), 1u) << joined << "\n" << r.err;
  }
}

TEST(Usage, NegativeEpsilonMessageNamesOptionAndValue) {
  const CommandResult r = run_flashot({"bench", "--n", "10", "--eps", "-0.1"});
  EXPECT_NE(r.err.find("--eps"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("-0.1"), std::string::npos) << r.err;
}

TEST(Usage, UnavailableBackendIsAnErrorNotAUsageError) {
  const CommandResult probe = run_flashot({"--version"});
  ASSERT_EQ(probe.exit_code, 0);
  if (probe.out.find("cuda") != std::string::npos) GTEST_SKIP() << "a CUDA device is present here";
  const CommandResult r = run_flashot({"bench", "--n", "10", "--backend", "cuda"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find("cuda"), std::string::npos) << r.err;
}

TEST(Help, EveryCommandAnswersHelpOnStdout) {
  const CommandResult overview = run_flashot({"--help"});
  ASSERT_EQ(overview.exit_code, 0);
  std::vector<std::string> commands;
  for (const std::string& line : lines(overview.out)) {
    if (line.rfind("  ", 0) == 0 && line.size() > 2 && line[2] != '-') commands.push_back(split(line.substr(2), ' ')[0]);
  }
  ASSERT_FALSE(commands.empty()) << overview.out;
  for (const std::string& command : commands) {
    const CommandResult r = run_flashot({command, "--help"});
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.err;
    EXPECT_EQ(r.out.rfind("usage: flashot " + command, 0), 0u) << command << ": " << r.out;
  }
}

TEST(Version, PrintsVersionAndBackends) {
  const CommandResult r = run_flashot({"--version"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("flashot 0.", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("cpu"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace flashot::test
