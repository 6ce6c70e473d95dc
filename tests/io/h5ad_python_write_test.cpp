// Files written by flashot are read back by Python anndata (current PyPI), which must find every value flashot
// meant to write (tests/io/python/check_with_anndata.py compares against an expect file written here).

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "flashot/io/anndata.hpp"
#include "h5ad_expect.hpp"
#include "h5ad_python.hpp"
#include "h5ad_samples.hpp"

namespace flashot::io::test {
namespace {

void expect_anndata_agrees(const fs::path& file, const ExpectWriter& expect, const std::string& extra = "",
                           const fs::path& original = {}) {
  const fs::path expect_path = file.string() + ".expect";
  expect.save(expect_path);
  std::vector<std::string> args = {file.string(), expect_path.string()};
  if (!extra.empty()) {
    args.push_back(extra);
    args.push_back(original.string());
  }
  const PythonRun run = run_python("check_with_anndata.py", args);
  EXPECT_EQ(run.status, 0) << run.output;
#ifdef FLASHOT_PYTHON_OLD_ANNDATA
  // An older anndata (Debian's python3-anndata 0.8) must read the same files: users run such versions.
  const PythonRun old = run_python("check_with_anndata.py", args, FLASHOT_PYTHON_OLD_ANNDATA);
  EXPECT_EQ(old.status, 0) << old.output;
#endif
#ifdef FLASHOT_PYTHON_PANDAS3
  // anndata >= 0.13 with pandas 3 must read it too, and its rewrite of the file (index and string columns as
  // nullable-string-array, pandas 3's dtypes) must give flashot back every value flashot first wrote.
  const fs::path rewritten = file.string() + ".pandas3.h5ad";
  args.push_back("--rewrite");
  args.push_back(rewritten.string());
  const PythonRun pandas3 = run_python("check_with_anndata.py", args, FLASHOT_PYTHON_PANDAS3);
  EXPECT_EQ(pandas3.status, 0) << pandas3.output;
  ASSERT_TRUE(fs::exists(rewritten)) << rewritten;
  check_file(rewritten, expect_path);
#endif
}

TEST(H5adToAnndata, NewFileWithEveryColumnKind) {
  TempDir dir;
  std::mt19937 rng(kSeed);
  const H5adContent content = sample_content(rng);
  const fs::path file = dir.path() / "new.h5ad";
  write_h5ad(file, content);
  ExpectWriter expect;
  expect.content(content);
  expect_anndata_agrees(file, expect);
}

TEST(H5adToAnndata, SparseXInBothLayouts) {
  TempDir dir;
  std::mt19937 rng(kSeed);
  const DenseMatrix dense = random_dense(30, 12, rng, 0.8);
  for (const bool csc : {false, true}) {
    H5adContent c;
    c.obs_names = names("cell", 30);
    c.var_names = names("gene", 12);
    c.x_sparse = to_sparse(dense, csc);
    const fs::path file = dir.path() / (csc ? "csc.h5ad" : "csr.h5ad");
    write_h5ad(file, c);
    ExpectWriter expect;
    expect.content(c);
    expect.dense("X", "", dense);
    expect_anndata_agrees(file, expect);
  }
}

TEST(H5adToAnndata, CouplingIsCsrWithSourcesAndTargets) {
  TempDir dir;
  SparseMatrix p;
  p.rows = 3;
  p.cols = 4;
  p.indptr = {0, 2, 2, 4};
  p.indices = {1, 3, 0, 2};
  p.data = {0.25f, 0.125f, 0.5f, 0.125f};
  const fs::path file = dir.path() / "coupling.h5ad";
  write_coupling_h5ad(file, {"s0", "s1", "s2"}, {"t0", "t1", "t2", "t3"}, p);
  ExpectWriter expect;
  expect.line({"x", "csr_matrix", "float32", "3", "4"});
  expect.names("obs", {"s0", "s1", "s2"});
  expect.names("var", {"t0", "t1", "t2", "t3"});
  expect.dense("X", "", DenseMatrix{3, 4, {0, 0.25f, 0, 0.125f, 0, 0, 0, 0, 0.5f, 0, 0.125f, 0}});
  expect_anndata_agrees(file, expect);
}

TEST(H5adToAnndata, CopyOfPbmc68kGainsEntriesAndKeepsX) {
  TempDir dir;
  ASSERT_TRUE(fs::exists(pbmc68k_path())) << pbmc68k_path();
  const auto before = file_bytes(pbmc68k_path());
  const H5adReader input(pbmc68k_path());
  const std::size_t n = input.n_obs();
  std::mt19937 rng(kSeed);
  H5adContent add;
  add.obsm["X_flashot"] = random_dense(n, 3, rng);
  add.obsm["X_umap"] = random_dense(n, 2, rng);  // replaces the stored one
  std::vector<std::int32_t> codes(n);
  for (std::size_t i = 0; i < n; ++i) codes[i] = static_cast<std::int32_t>(i % 4) - 1;
  add.obs["flashot_label"] = categorical({"CD14+ Monocyte", "CD19+ B", "Dendritic"}, codes);
  std::vector<double> scores(n);
  for (std::size_t i = 0; i < n; ++i) scores[i] = static_cast<double>(i) / static_cast<double>(n);
  add.obs["flashot_confidence"] = numeric(scores);
  add.obs["louvain"] = categorical({"a", "b"}, std::vector<std::int32_t>(n, 1));  // replaces, keeps its position
  add.uns["flashot_epsilon"] = 0.01;
  add.uns["flashot_command"] = std::string("flashot map --epsilon 0.01");
  const fs::path output = dir.path() / "pbmc_mapped.h5ad";
  write_h5ad_copy(pbmc68k_path(), output, add);
  EXPECT_EQ(file_bytes(pbmc68k_path()), before) << "the input changed";

  ExpectWriter expect;
  expect.additions(add);
  auto order = input.obs_columns();
  order.push_back("flashot_confidence");
  order.push_back("flashot_label");
  expect.columns("obs", order);
  expect.names("obs", input.obs_names());
  expect_anndata_agrees(output, expect, "--same-x", pbmc68k_path());
}

// A legacy input (anndata ≤0.6 compound obs/var/obsm with uns/<col>_categories and h5sparse X; 0.7 reference
// categoricals, also LZF-compressed) gains entries: the copy is written in the current layout, keeps every value
// the fixture's expect file lists, and both anndata versions read it. The input's bytes stay as they were.
TEST(H5adToAnndata, LegacyInputsAreWrittenOutInTheCurrentLayout) {
  std::string error;
  const fs::path fixtures = fixture_dir(error);
  ASSERT_FALSE(fixtures.empty()) << error;
  for (const char* name : {"legacy_06", "legacy_07", "legacy_07_lzf"}) {
    SCOPED_TRACE(name);
    TempDir dir;
    const fs::path input = fixtures / (std::string(name) + ".h5ad");
    const auto before = file_bytes(input);
    const H5adReader original(input);
    const std::size_t n = original.n_obs();
    std::mt19937 rng(kSeed);
    H5adContent add;
    add.obsm["X_flashot"] = random_dense(n, 2, rng);
    std::vector<std::int32_t> codes(n);
    for (std::size_t i = 0; i < n; ++i) codes[i] = static_cast<std::int32_t>(i % 3) - 1;
    add.obs["flashot_label"] = categorical({"a", "b"}, codes);
    add.uns["flashot_epsilon"] = 0.05;
    const fs::path output = dir.path() / "mapped.h5ad";
    write_h5ad_copy(input, output, add);
    EXPECT_EQ(file_bytes(input), before) << "the input changed";

    // The fixture's expectations, less what the copy changes on purpose (the generation, obsm's encoding, the
    // column and key lists, which gain the additions), plus the additions.
    ExpectWriter expect;
    for (auto tokens : read_expect(fixtures / (std::string(name) + ".expect"))) {
      const std::string& tag = tokens[0];
      if (tag == "generation" || tag == "info" || (tag == "columns" && tokens[1] == "obs") ||
          (tag == "keys" && tokens[1] == "obsm")) {
        continue;
      }
      if (tag == "x" && tokens[1] == "_") tokens[1] = "array";
      expect.line(tokens);
    }
    auto order = original.obs_columns();
    order.push_back("flashot_label");
    expect.columns("obs", order);
    auto obsm = original.obsm_keys();
    obsm.push_back("X_flashot");
    expect.keys("obsm", obsm);
    expect.additions(add);
    expect.line({"generation", hex_encode("0.1.0 (anndata ≥0.8)")});
    const fs::path expect_path = output.string() + ".flashot.expect";
    expect.save(expect_path);
    check_file(output, expect_path);  // flashot reads it back
    expect_anndata_agrees(output, expect);
  }
}

// What the current layout cannot take fails the write naming the element, and leaves no output.
TEST(H5adToAnndata, LegacyInputThatCannotBeCarriedFailsClearly) {
  std::string error;
  const fs::path fixtures = fixture_dir(error);
  ASSERT_FALSE(fixtures.empty()) << error;
  TempDir dir;
  const fs::path output = dir.path() / "mapped.h5ad";
  H5adContent add;
  add.uns["flashot_epsilon"] = 0.05;
  try {
    write_h5ad_copy(fixtures / "legacy_06_obsm_unreadable.h5ad", output, add);
    FAIL() << "copied an obsm nobody can read";
  } catch (const FormatError& e) {
    EXPECT_EQ(e.path(), output.string());
    EXPECT_NE(std::string(e.what()).find("/obsm (field X_pca)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("filter id 32099"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

}  // namespace
}  // namespace flashot::io::test
