// `flashot map --hard` and `flashot align --label-cost` on the committed synthetic batches (samples/README.md).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "flashot/io/anndata.hpp"
#include "run_command.hpp"

namespace flashot::test {
namespace {

const std::filesystem::path kSamples = FLASHOT_SAMPLES;
const std::filesystem::path kBatchA = kSamples / "cells_batch_a.h5ad";
const std::filesystem::path kBatchB = kSamples / "cells_batch_b.h5ad";

std::filesystem::path folder(const std::string& name) {
  const auto f = std::filesystem::temp_directory_path() / ("flashot-cli-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(f);
  std::filesystem::create_directories(f);
  return f;
}

TEST(CliMapHard, EveryPointGoesToOneTargetPointAndTheCsvNamesIt) {
  const auto dir = folder("map-hard");
  const auto solution = dir / "b_to_a.solution";
  CommandResult r = run_flashot({"align", kBatchB.string(), kBatchA.string(), "-o", (dir / "b.h5ad").string(),
                                 "--save-solution", solution.string(), "--backend", "cpu", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_flashot({"map", "--solution", solution.string(), kBatchB.string(), "-o", (dir / "hard.h5ad").string(),
                   "--hard", "--assignment", (dir / "hard.csv").string(), "--backend", "cpu", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const io::DenseMatrix mapped = io::H5adReader(dir / "hard.h5ad").read_obsm("X_pca_flashot");
  const io::DenseMatrix targets = io::H5adReader(kBatchA).read_obsm("X_pca");
  std::ifstream csv(dir / "hard.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "row,target_index,value");
  std::size_t rows = 0;
  while (std::getline(csv, line)) {
    std::stringstream s(line);
    std::string row, index;
    std::getline(s, row, ',');
    std::getline(s, index, ',');
    const std::size_t i = std::stoull(row), j = std::stoull(index);
    ASSERT_EQ(i, rows);
    ASSERT_LT(j, targets.rows);
    for (std::size_t c = 0; c < targets.cols; ++c)
      ASSERT_EQ(mapped.values[i * mapped.cols + c], targets.values[j * targets.cols + c]) << "row " << i;
    ++rows;
  }
  EXPECT_EQ(rows, mapped.rows);
  r = run_flashot({"map", "--solution", solution.string(), kBatchB.string(), "-o", (dir / "x.h5ad").string(),
                   "--assignment", (dir / "x.csv").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--assignment needs --hard"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(CliLabelCost, ZeroWeightIsThePlainAlignAndBadTablesAreNamed) {
  const auto dir = folder("label-cost");
  CommandResult r = run_flashot({"align", kBatchB.string(), kBatchA.string(), "-o", (dir / "plain.h5ad").string(),
                                 "--backend", "cpu", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_flashot({"align", kBatchB.string(), kBatchA.string(), "-o", (dir / "zero.h5ad").string(), "--backend", "cpu",
                   "--quiet", "--label-cost", "cell_type", "--label-weight", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(io::H5adReader(dir / "plain.h5ad").read_obsm("X_pca_flashot").values,
            io::H5adReader(dir / "zero.h5ad").read_obsm("X_pca_flashot").values);
  std::ofstream(dir / "W.csv") << ",B cell,CD4 T\nB cell,0,1\n";
  r = run_flashot({"align", kBatchB.string(), kBatchA.string(), "-o", (dir / "w.h5ad").string(), "--backend", "cpu",
                   "--quiet", "--label-cost", "cell_type", "--label-weight", "1", "--label-table",
                   (dir / "W.csv").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no row for SOURCE class"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "w.h5ad"));
  r = run_flashot({"align", kBatchB.string(), kBatchA.string(), "-o", (dir / "v.h5ad").string(), "--label-cost",
                   "cell_typo", "--label-weight", "1", "--backend", "cpu", "--quiet"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cell_typo"), std::string::npos) << r.err;
  r = run_flashot({"align", kBatchB.string(), kBatchA.string(), "-o", (dir / "u.h5ad").string(), "--label-cost",
                   "cell_type"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("go together"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace flashot::test
