// `flashot bench --end-to-end --save-points / --save-potentials`: the .npy files hold the solved problem and its
// potentials (read back here by a small .npy reader, and by numpy when FLASHOT_PYTHON is configured), and bad
// folders are usage errors before any work.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "run_command.hpp"

namespace flashot::test {
namespace {

namespace fs = std::filesystem;

struct Npy {
  std::vector<std::size_t> shape;
  std::vector<float> values;
  std::size_t data_offset = 0;
};

/// A reader for exactly what numpy writes for a C-order '<f4' array in format 1.0; anything else fails the test.
Npy read_npy(const fs::path& path) {
  const std::string bytes = read_file(path);
  Npy out;
  EXPECT_GE(bytes.size(), 10u) << path;
  if (bytes.size() < 10) return out;
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8)) << path;
  const std::size_t length = std::size_t(std::uint8_t(bytes[8])) | std::size_t(std::uint8_t(bytes[9])) << 8;
  out.data_offset = 10 + length;
  EXPECT_EQ(out.data_offset % 64, 0u) << "numpy aligns the data to 64 bytes: " << path;
  const std::string dict = bytes.substr(10, length);
  EXPECT_EQ(dict.back(), '\n') << path;
  EXPECT_NE(dict.find("'descr': '<f4'"), std::string::npos) << dict;
  EXPECT_NE(dict.find("'fortran_order': False"), std::string::npos) << dict;
  std::smatch match;
  const std::regex shape_re("'shape': \\(([0-9, ]*)\\)");
  EXPECT_TRUE(std::regex_search(dict, match, shape_re)) << dict;
  std::size_t count = 1;
  const std::string dims = match[1].str();
  for (std::size_t pos = 0; pos < dims.size();) {
    const std::size_t comma = dims.find(',', pos);
    const std::string word = dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (word.find_first_not_of(' ') != std::string::npos) {
      out.shape.push_back(std::stoull(word));
      count *= out.shape.back();
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  EXPECT_EQ(bytes.size(), out.data_offset + 4 * count) << path;
  if (bytes.size() != out.data_offset + 4 * count) return out;
  out.values.resize(count);
  std::memcpy(out.values.data(), bytes.data() + out.data_offset, 4 * count);
  return out;
}

double json_number(const std::string& json, const std::string& key) {
  const std::regex re("\"" + key + "\":\\s*([-+0-9.eE]+)");
  std::smatch match;
  if (!std::regex_search(json, match, re)) {
    ADD_FAILURE() << key << " not in " << json;
    return NAN;
  }
  return std::stod(match[1].str());
}

TEST(BenchSave, PointsAndPotentialsAreTheSolvedProblemInTheUsersOrder) {
  const fs::path folder = fresh_folder();
  const fs::path points = folder / "new" / "points", potentials = folder / "potentials";
  constexpr std::size_t n = 300, m = 200, d = 3;
  const CommandResult r = run_flashot({"bench", "--end-to-end", "--n", std::to_string(n), "--m", std::to_string(m),
                                       "--d", std::to_string(d), "--data", "sphere", "--pair", "deformed",
                                       "--blur-relative", "0.05", "--tolerance", "1e-3", "--backend", "cpu",
                                       "--save-points", points.string(), "--save-potentials", potentials.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Npy x = read_npy(points / "x.npy"), y = read_npy(points / "y.npy");
  const Npy a = read_npy(points / "a.npy"), b = read_npy(points / "b.npy");
  const Npy f = read_npy(potentials / "f.npy"), g = read_npy(potentials / "g.npy");
  ASSERT_EQ(x.shape, (std::vector<std::size_t>{n, d}));
  ASSERT_EQ(y.shape, (std::vector<std::size_t>{m, d}));
  ASSERT_EQ(a.shape, (std::vector<std::size_t>{n}));
  ASSERT_EQ(b.shape, (std::vector<std::size_t>{m}));
  ASSERT_EQ(f.shape, (std::vector<std::size_t>{n}));
  ASSERT_EQ(g.shape, (std::vector<std::size_t>{m}));
  for (const fs::path& dir : {points, potentials})
    for (const auto& entry : fs::directory_iterator(dir))
      EXPECT_EQ(entry.path().filename().string().find("flashot-partial"), std::string::npos) << entry.path();

  // The points are the sphere's (unit radius, 0.2 % noise) for x; the weights are probability vectors.
  for (std::size_t i = 0; i < n; ++i) {
    const double r2 = x.values[3 * i] * x.values[3 * i] + x.values[3 * i + 1] * x.values[3 * i + 1] +
                      x.values[3 * i + 2] * x.values[3 * i + 2];
    EXPECT_NEAR(std::sqrt(r2), 1.0, 0.02) << "x row " << i;
  }
  double sum_a = 0, sum_b = 0;
  for (float v : a.values) sum_a += v;
  for (float v : b.values) sum_b += v;
  EXPECT_NEAR(sum_a, 1.0, 1e-5);
  EXPECT_NEAR(sum_b, 1.0, 1e-5);

  // solve.json: its dual cost is ⟨a, f⟩ + ⟨b, g⟩ of the files, and the marginal error recomputed in fp64 from the
  // files (points, weights, potentials, ε) is the one it reports: every file belongs to the same solve, same order.
  const std::string json = read_file(potentials / "solve.json");
  const double eps = json_number(json, "epsilon"), s = json_number(json, "cost_scale");
  EXPECT_EQ(s, 1.0);
  EXPECT_EQ(json_number(json, "n"), double(n));
  EXPECT_GT(json_number(json, "iterations"), 0);
  EXPECT_GE(json_number(json, "solve_s"), 0);
  double dual = 0;
  for (std::size_t i = 0; i < n; ++i) dual += double(a.values[i]) * f.values[i];
  for (std::size_t j = 0; j < m; ++j) dual += double(b.values[j]) * g.values[j];
  EXPECT_NEAR(dual, json_number(json, "dual_cost"), 1e-6 * std::abs(dual));
  std::vector<double> rows(n, 0.0), columns(m, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      double c = 0;
      for (std::size_t k = 0; k < d; ++k) {
        const double t = double(x.values[i * d + k]) - double(y.values[j * d + k]);
        c += t * t;
      }
      const double p = double(a.values[i]) * b.values[j] * std::exp((double(f.values[i]) + g.values[j] - s * c) / eps);
      rows[i] += p;
      columns[j] += p;
    }
  double error = 0;
  for (std::size_t i = 0; i < n; ++i) error += std::abs(rows[i] - a.values[i]);
  for (std::size_t j = 0; j < m; ++j) error += std::abs(columns[j] - b.values[j]);
  error /= sum_a;
  const double reported = json_number(json, "marginal_error");
  EXPECT_LE(reported, 1e-3);
  EXPECT_NEAR(error, reported, 1e-5 + 0.05 * reported) << "recomputed from the files vs solve.json";

  // The same files through numpy, an independent reader.
#ifdef FLASHOT_PYTHON
  const fs::path script = folder / "check.py";
  std::ofstream(script) << "import sys, numpy as np\n"
                           "p, q = sys.argv[1], sys.argv[2]\n"
                           "x, y, a, b = (np.load(p + '/' + k + '.npy') for k in 'xyab')\n"
                           "f, g = np.load(q + '/f.npy'), np.load(q + '/g.npy')\n"
                           "assert x.dtype == np.float32 and x.shape == (300, 3) and y.shape == (200, 3), x.shape\n"
                           "assert a.shape == f.shape == (300,) and b.shape == g.shape == (200,)\n"
                           "print(repr(float(x.astype(np.float64).sum())), "
                           "repr(float(a.astype(np.float64) @ f + b.astype(np.float64) @ g)))\n";
  const CommandResult py = run_shell(std::string("'") + FLASHOT_PYTHON + "' '" + script.string() + "' '" +
                                     points.string() + "' '" + potentials.string() + "'");
  ASSERT_EQ(py.exit_code, 0) << py.out << py.err;
  double x_sum = 0;
  for (float v : x.values) x_sum += v;
  std::istringstream words(py.out);
  double numpy_x_sum = NAN, numpy_dual = NAN;
  words >> numpy_x_sum >> numpy_dual;
  EXPECT_NEAR(numpy_x_sum, x_sum, 1e-9 * (1 + std::abs(x_sum))) << py.out;
  EXPECT_NEAR(numpy_dual, dual, 1e-9 * std::abs(dual)) << py.out;
#endif
}

TEST(BenchSave, ThePeerScriptsEvaluatorAgreesWithTheSolversReport) {
  // tests/bench/peers/multiscale_peers.py judges flashot and FlashSinkhorn by one evaluator: on flashot's own files
  // it must give back flashot's marginal error and dual cost (numpy here; torch on a GPU, through the same code).
#ifndef FLASHOT_PYTHON
  GTEST_SKIP() << "configure with -DFLASHOT_PYTHON=<python with numpy> (scripts/python-env.sh)";
#else
  const fs::path folder = fresh_folder();
  const CommandResult r = run_flashot({"bench", "--end-to-end", "--n", "400", "--m", "300", "--d", "3", "--data",
                                       "bumpy", "--pair", "deformed", "--blur-relative", "0.05", "--tolerance", "1e-3",
                                       "--backend", "cpu", "--save-points", (folder / "p").string(),
                                       "--save-potentials", (folder / "q").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string json = read_file(folder / "q" / "solve.json");
  const double reported = json_number(json, "marginal_error"), dual = json_number(json, "dual_cost");
  for (const std::string mode : {"full", "sampled"}) {
    const CommandResult e = run_shell(std::string("'") + FLASHOT_PYTHON + "' '" + FLASHOT_PEERS_DIR +
                                      "/multiscale_peers.py' evaluate --array numpy --dtype float64 --eval " + mode +
                                      " --samples 4096 '" + (folder / "p").string() + "' '" +
                                      (folder / "q").string() + "'");
    ASSERT_EQ(e.exit_code, 0) << e.out << e.err;
    const double sum = json_number(e.out, "sum_l1");
    const double se = json_number(e.out, "row_se") + json_number(e.out, "col_se");
    EXPECT_NEAR(sum, reported, 1e-6 + 0.02 * reported + 4 * se) << mode << ": " << e.out;
    EXPECT_NEAR(json_number(e.out, "dual_cost"), dual, 1e-9 * std::abs(dual)) << e.out;
    EXPECT_NEAR(json_number(e.out, "mass"), 1.0, 1e-3) << e.out;
  }
#endif
}

TEST(BenchSave, TheSamePointsComeBackForTheSameSeed) {
  const fs::path folder = fresh_folder();
  for (const char* run : {"one", "two"}) {
    const CommandResult r =
        run_flashot({"bench", "--end-to-end", "--n", "100", "--d", "4", "--data", "mixture", "--tolerance", "1e-2",
                     "--max-iterations", "20", "--backend", "cpu", "--seed", "7", "--save-points",
                     (folder / run).string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  for (const char* file : {"x.npy", "y.npy", "a.npy", "b.npy"})
    EXPECT_EQ(read_file(folder / "one" / file), read_file(folder / "two" / file)) << file;
  EXPECT_FALSE(fs::exists(folder / "one" / "f.npy")) << "potentials only with --save-potentials";
}

TEST(BenchSave, AMatchedPairIsTheImageOfXWithTheSameWeights) {
  const fs::path folder = fresh_folder();
  const CommandResult r =
      run_flashot({"bench", "--end-to-end", "--n", "200", "--d", "3", "--data", "sphere", "--pair", "matched",
                   "--max-iterations", "5", "--backend", "cpu", "--save-points", folder.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file(folder / "a.npy"), read_file(folder / "b.npy")) << "b = a";
  const Npy x = read_npy(folder / "x.npy"), y = read_npy(folder / "y.npy");
  ASSERT_EQ(x.values.size(), y.values.size());
  // y_i = R x_i + t + 0.1 sin(2 x_i + φ) (flashot/synthetic.hpp): rotation ≤ 0.3 rad, |t| ≤ 0.1 per axis.
  double largest = 0, total = 0;
  for (std::size_t i = 0; i < 200; ++i) {
    double d2 = 0;
    for (std::size_t k = 0; k < 3; ++k) d2 += std::pow(double(y.values[3 * i + k]) - x.values[3 * i + k], 2);
    largest = std::max(largest, std::sqrt(d2));
    total += std::sqrt(d2);
  }
  EXPECT_LT(largest, 0.3 * 1.01 + 0.2 * std::sqrt(3.0)) << "y_i is x_i's own image";
  EXPECT_GT(total / 200, 0.01) << "and not x_i itself";
  const CommandResult unequal = run_flashot({"bench", "--end-to-end", "--n", "200", "--m", "100", "--pair", "matched"});
  EXPECT_EQ(unequal.exit_code, 2) << unequal.err;
  EXPECT_NE(unequal.err.find("--pair matched"), std::string::npos) << unequal.err;
}

TEST(BenchSave, BadFoldersAreUsageErrorsBeforeAnyWork) {
  const fs::path folder = fresh_folder();
  std::ofstream(folder / "a-file") << "x";
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"--save-points", (folder / "a-file").string()}, "not a folder"},
      {{"--save-potentials", (folder / "a-file" / "below").string()}, "cannot create the folder"},
      {{"--save-points", ""}, "empty"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"bench", "--end-to-end", "--n", "100000000", "--d", "3", "--backend", "cpu"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CommandResult r = run_flashot(args);
    EXPECT_EQ(r.exit_code, 2) << c.args[0] << ": " << r.err;
    EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
    EXPECT_NE(r.err.find(c.args[0]), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << "no solve ran: " << r.out;
  }
  const CommandResult r = run_flashot({"bench", "--n", "10", "--save-points", (folder / "p").string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--save-points needs --end-to-end"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(folder / "p"));
}

}  // namespace
}  // namespace flashot::test
