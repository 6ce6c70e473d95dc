// `flashot info`, and what every file command does with bad input: one line on stderr naming the problem, exit 1,
// and no output left behind. The bad inputs are small files written here.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"
#include "flashot/io/ply.hpp"
#include "run_command.hpp"

namespace flashot::test {
namespace {

const std::filesystem::path kSamples = FLASHOT_SAMPLES;

/// A small .h5ad with obsm `key` (n × d, seeded values), obs cell_type, optional NaN in one row.
std::filesystem::path small_h5ad(const std::filesystem::path& folder, const std::string& name, std::size_t n,
                                 std::size_t d, const std::string& key = "X_pca", long nan_row = -1,
                                 std::uint32_t seed = 1) {
  io::H5adContent content;
  for (std::size_t i = 0; i < n; ++i) content.obs_names.push_back("c" + std::to_string(i));
  content.var_names = {"g0"};
  io::DenseMatrix m{n, d, std::vector<float>(n * d)};
  for (std::size_t i = 0; i < n * d; ++i) m.values[i] = float((i * 2654435761u + seed * 97u) % 1000) / 100.0f;
  if (nan_row >= 0) m.values[std::size_t(nan_row) * d + d / 2] = std::numeric_limits<float>::quiet_NaN();
  content.obsm.emplace(key, std::move(m));
  io::Column types;
  types.kind = io::Column::Kind::kCategorical;
  types.categories = {"a", "b"};
  for (std::size_t i = 0; i < n; ++i) types.codes.push_back(std::int32_t(i % 2));
  content.obs.emplace("cell_type", std::move(types));
  const auto path = folder / name;
  io::write_h5ad(path, content);
  return path;
}

void expect_one_line_error(const CommandResult& r, const std::vector<std::string>& mentions) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
  for (const std::string& m : mentions) EXPECT_NE(r.err.find(m), std::string::npos) << "'" << m << "' in: " << r.err;
}

std::size_t entries(const std::filesystem::path& folder) {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(folder)) ++count;
  return count;
}

TEST(Info, JsonDescribesAnH5ad) {
  const CommandResult r = run_flashot({"info", (kSamples / "cells_batch_b.h5ad").string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_obs"], 2000);
  EXPECT_EQ(j["n_vars"], 150);
  EXPECT_EQ(j["x"]["encoding"], "csr_matrix");
  EXPECT_EQ(j["x"]["dtype"], "float32");
  EXPECT_EQ(j["x"]["shape"], nlohmann::json::array({2000, 150}));
  EXPECT_EQ(j["obsm"]["X_pca"], nlohmann::json::array({2000, 30}));
  EXPECT_EQ(j["obsm"]["X_umap"], nlohmann::json::array({2000, 2}));
  EXPECT_EQ(j["obs"]["cell_type"]["kind"], "categorical");
  EXPECT_EQ(j["obs"]["cell_type"]["categories"].size(), 6u);
}

TEST(Info, JsonDescribesAPly) {
  const CommandResult r = run_flashot({"info", (kSamples / "shape_scan.ply").string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "binary_little_endian");
  EXPECT_EQ(j["n_vertices"], io::read_ply(kSamples / "shape_scan.ply").find("vertex")->count);
  EXPECT_EQ(j["properties"]["x"], "float");
  EXPECT_EQ(j["properties"]["part"], "uchar");
}

TEST(Info, TextNamesCellsAndEmbeddings) {
  const CommandResult r = run_flashot({"info", (kSamples / "cells_batch_a.h5ad").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("2400 cells"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("X_pca: 2400×30"), std::string::npos) << r.out;
}

TEST(Info, EscapesStringsInJson) {
  const auto folder = fresh_folder();
  io::PlyFile ply = io::make_point_cloud(std::vector<float>{0, 0, 0, 1, 1, 1}, 2);
  ply.format = io::PlyFormat::kAscii;
  ply.comments = {"quote \" backslash \\ tab \t end"};
  io::write_ply(folder / "odd.ply", ply);
  const CommandResult r = run_flashot({"info", (folder / "odd.ply").string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["comments"][0], ply.comments[0]);
}

TEST(Info, BadFilesAreOneLineErrors) {
  const auto folder = fresh_folder();
  std::ofstream(folder / "garbage.h5ad") << "this is not HDF5";
  std::ofstream(folder / "garbage.ply") << "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nend_header\n1\n";
  expect_one_line_error(run_flashot({"info", (folder / "garbage.h5ad").string()}), {"garbage.h5ad"});
  expect_one_line_error(run_flashot({"info", (folder / "garbage.ply").string()}), {"garbage.ply"});
  expect_one_line_error(run_flashot({"info", (folder / "missing.h5ad").string()}), {"missing.h5ad"});
  expect_one_line_error(run_flashot({"info", (folder / "notes.txt").string()}), {"notes.txt"});
}

TEST(AlignErrors, MissingObsmKeyNamesTheKeysPresent) {
  const auto folder = fresh_folder();
  const auto s = small_h5ad(folder, "s.h5ad", 20, 4), t = small_h5ad(folder, "t.h5ad", 30, 4, "X_scvi");
  expect_one_line_error(run_flashot({"align", s.string(), t.string(), "-o", (folder / "o.h5ad").string()}),
                        {"X_pca", "X_scvi", "t.h5ad"});
  expect_one_line_error(
      run_flashot({"align", s.string(), t.string(), "-o", (folder / "o.h5ad").string(), "--key", "X_umap"}),
      {"X_umap", "X_pca"});
  EXPECT_FALSE(std::filesystem::exists(folder / "o.h5ad"));
}

TEST(AlignErrors, DifferentDimensionsAreNamed) {
  const auto folder = fresh_folder();
  const auto s = small_h5ad(folder, "s.h5ad", 20, 4), t = small_h5ad(folder, "t.h5ad", 30, 5);
  expect_one_line_error(run_flashot({"align", s.string(), t.string(), "-o", (folder / "o.h5ad").string()}),
                        {"4-d", "5-d"});
}

TEST(AlignErrors, NonFiniteValueNamesTheRow) {
  const auto folder = fresh_folder();
  const auto s = small_h5ad(folder, "s.h5ad", 20, 4, "X_pca", 7), t = small_h5ad(folder, "t.h5ad", 30, 4);
  expect_one_line_error(run_flashot({"align", s.string(), t.string(), "-o", (folder / "o.h5ad").string()}),
                        {"row 7", "c7", "nan", "s.h5ad"});
}

TEST(AlignErrors, EmptySubsetNamesTheValuesPresent) {
  const auto folder = fresh_folder();
  const auto s = small_h5ad(folder, "s.h5ad", 20, 4), t = small_h5ad(folder, "t.h5ad", 30, 4);
  expect_one_line_error(run_flashot({"align", s.string(), t.string(), "-o", (folder / "o.h5ad").string(),
                                     "--source-where", "cell_type=zebra"}),
                        {"--source-where", "zebra", "matches no row", "a, b"});
  expect_one_line_error(run_flashot({"align", s.string(), t.string(), "-o", (folder / "o.h5ad").string(),
                                     "--target-where", "stage=3"}),
                        {"stage", "cell_type"});
}

TEST(AlignErrors, UnreadableInputIsNamed) {
  const auto folder = fresh_folder();
  const auto t = small_h5ad(folder, "t.h5ad", 30, 4);
  std::ofstream(folder / "broken.h5ad") << "not an hdf5 file at all";
  expect_one_line_error(run_flashot({"align", (folder / "nope.h5ad").string(), t.string(), "-o",
                                     (folder / "o.h5ad").string()}),
                        {"nope.h5ad"});
  expect_one_line_error(run_flashot({"align", (folder / "broken.h5ad").string(), t.string(), "-o",
                                     (folder / "o.h5ad").string()}),
                        {"broken.h5ad"});
}

TEST(AlignErrors, MissingLabelColumnIsNamed) {
  const auto folder = fresh_folder();
  const auto s = small_h5ad(folder, "s.h5ad", 20, 4), t = small_h5ad(folder, "t.h5ad", 30, 4);
  expect_one_line_error(run_flashot({"align", s.string(), t.string(), "-o", (folder / "o.h5ad").string(),
                                     "--transfer-labels", "louvain"}),
                        {"louvain", "cell_type"});
}

TEST(AlignErrors, MissingOutputFolderLeavesNothing) {
  const auto folder = fresh_folder();
  const auto s = small_h5ad(folder, "s.h5ad", 20, 4), t = small_h5ad(folder, "t.h5ad", 30, 4, "X_pca", -1, 2);
  const std::size_t before = entries(folder);
  // The coupling's folder does not exist: found before anything is read or written (a usage error, exit 2), so
  // neither OUT nor the report nor any temporary file appears. (OutputSet's tests cover a failure after OUT.)
  const CommandResult r = run_flashot({"align", s.string(), t.string(), "-o", (folder / "o.h5ad").string(),
                                       "--report", (folder / "r.json").string(), "--coupling",
                                       (folder / "no" / "such" / "c.h5ad").string(), "--quiet"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find("--coupling " + (folder / "no" / "such" / "c.h5ad").string() + ": folder"), std::string::npos)
      << r.err;
  EXPECT_EQ(entries(folder), before) << "no output and no temporary file may remain";
}

TEST(AlignUsage, UsageErrorsExitTwo) {
  const auto folder = fresh_folder();
  const auto s = small_h5ad(folder, "s.h5ad", 20, 4), t = small_h5ad(folder, "t.h5ad", 30, 4);
  const std::string o = (folder / "o.h5ad").string();
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"align", s.string(), t.string()},
           {"align", s.string(), t.string(), "-o", o, "--scheme", "random"},
           {"align", s.string(), t.string(), "-o", o, "--rel-blur", "-1"},
           {"align", s.string(), t.string(), "-o", o, "--scaling", "1.5"},
           {"align", s.string(), t.string(), "-o", o, "--overrelaxation", "0.5"},
           {"align", s.string(), t.string(), "-o", o, "--source-where", "cell_type"},
           {"align", s.string(), t.string(), "-o", (folder / "o.ply").string()},
           {"align", s.string(), t.string(), "-o", s.string()},
           {"align", s.string(), t.string(), "-o", o, "--compare-labels", "cell_type"},
           {"map", s.string(), "-o", o},
           {"register", s.string(), t.string(), "-o", o}}) {
    const CommandResult r = run_flashot(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << "\n" << r.err;
    EXPECT_EQ(lines(r.err).size(), 1u) << joined << "\n" << r.err;
  }
  EXPECT_EQ(read_file(s).size(), std::filesystem::file_size(s));
}

TEST(MapErrors, NotASolutionFileAndWrongDimension) {
  const auto folder = fresh_folder();
  const auto s = small_h5ad(folder, "s.h5ad", 20, 4), t = small_h5ad(folder, "t.h5ad", 30, 4, "X_pca", -1, 2);
  const auto p = small_h5ad(folder, "p.h5ad", 10, 3);
  expect_one_line_error(run_flashot({"map", "--solution", s.string(), p.string(), "-o", (folder / "m.h5ad").string()}),
                        {"not a flashot solution"});
  ASSERT_EQ(run_flashot({"align", s.string(), t.string(), "-o", (folder / "o.h5ad").string(), "--save-solution",
                         (folder / "sol").string(), "--quiet", "--backend", "cpu"})
                .exit_code,
            0);
  expect_one_line_error(
      run_flashot({"map", "--solution", (folder / "sol").string(), p.string(), "-o", (folder / "m.h5ad").string()}),
      {"3-d", "4-d"});
  EXPECT_FALSE(std::filesystem::exists(folder / "m.h5ad"));
}

}  // namespace
}  // namespace flashot::test
