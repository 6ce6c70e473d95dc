// flashot's .h5ad writers read back by flashot's reader; copies that must leave the input and X untouched;
// malformed and foreign files that must fail with the path and the HDF5 object in the message. No Python needed
// (tests/io/h5ad_python_*.cpp check the same files against anndata).

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"
#include "flashot/io/errors.hpp"
#include "h5ad_samples.hpp"

namespace flashot::io::test {
namespace {

void expect_same_column(const Column& got, const Column& want, const std::string& name) {
  ASSERT_EQ(got.kind, want.kind) << name;
  EXPECT_EQ(got.size(), want.size()) << name;
  switch (want.kind) {
    case Column::Kind::kCategorical:
      EXPECT_EQ(got.categories, want.categories) << name;
      EXPECT_EQ(got.codes, want.codes) << name;
      EXPECT_EQ(got.ordered, want.ordered) << name;
      break;
    case Column::Kind::kNumeric:
      for (std::size_t i = 0; i < want.numbers.size(); ++i) {
        if (std::isnan(want.numbers[i])) EXPECT_TRUE(std::isnan(got.numbers[i])) << name << " row " << i;
        else EXPECT_EQ(got.numbers[i], want.numbers[i]) << name << " row " << i;  // float64 on disk: exact
      }
      break;
    case Column::Kind::kString:
      for (std::size_t i = 0; i < want.strings.size(); ++i) {
        const bool missing = !want.missing.empty() && want.missing[i] != 0;
        EXPECT_EQ(got.strings[i], missing ? std::string() : want.strings[i]) << name << " row " << i;
      }
      break;
    case Column::Kind::kBoolean:
      EXPECT_EQ(got.flags, want.flags) << name;
      break;
  }
  const bool want_missing = std::any_of(want.missing.begin(), want.missing.end(), [](auto m) { return m != 0; });
  if (want_missing) EXPECT_EQ(got.missing, want.missing) << name;
}

TEST(H5adRoundTrip, NewFileReadsBackEveryValue) {
  TempDir dir;
  std::mt19937 rng(kSeed);
  const H5adContent content = sample_content(rng);
  const fs::path file = dir.path() / "new.h5ad";
  write_h5ad(file, content);

  const H5adReader r(file);
  EXPECT_EQ(r.writer_generation(), "0.1.0 (anndata ≥0.8)");
  EXPECT_EQ(r.n_obs(), 6u);
  EXPECT_EQ(r.n_vars(), 4u);
  EXPECT_EQ(r.obs_names(), content.obs_names);
  EXPECT_EQ(r.var_names(), content.var_names);
  const auto info = r.x_info();
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->encoding, "array");
  EXPECT_EQ(info->dtype, "float32");
  EXPECT_EQ(r.read_x_dense().values, content.x_dense->values);  // float32 written, float32 read: exact
  EXPECT_EQ(r.obsm_keys(), (std::vector<std::string>{"X_pca", "X_umap"}));
  EXPECT_EQ(r.read_obsm("X_pca").values, content.obsm.at("X_pca").values);
  std::vector<std::string> expected_order;
  for (const auto& [name, column] : content.obs) expected_order.push_back(name);
  EXPECT_EQ(r.obs_columns(), expected_order);
  for (const auto& [name, column] : content.obs) {
    if (name != "note") expect_same_column(r.read_obs(name), column, name);
  }
  // strings with missing entries are stored as a categorical (sorted categories, −1 where missing)
  expect_same_column(r.read_obs("note"), categorical({"", "v", "x", "z"}, {2, -1, 3, 0, 1, -1}), "note");
  expect_same_column(r.read_var("highly_variable"), content.var.at("highly_variable"), "highly_variable");
  EXPECT_EQ(std::get<double>(r.read_uns("epsilon")), 0.05);
  EXPECT_EQ(std::get<std::int64_t>(r.read_uns("iterations")), 42);
  EXPECT_EQ(std::get<std::string>(r.read_uns("method")), "sinkhorn ✓");
  EXPECT_EQ(std::get<std::vector<double>>(r.read_uns("errors")), (std::vector<double>{1e-3, 2.5e-4, 0.0}));
  EXPECT_TRUE(r.layer_keys().empty());
  EXPECT_FALSE(r.has_raw());
}

TEST(H5adRoundTrip, SparseXKeepsItsLayoutAndValues) {
  TempDir dir;
  std::mt19937 rng(kSeed);
  const DenseMatrix dense = random_dense(40, 30, rng, 0.8);
  for (const bool csc : {false, true}) {
    H5adContent c;
    c.obs_names = names("c", 40);
    c.var_names = names("g", 30);
    c.x_sparse = to_sparse(dense, csc);
    const fs::path file = dir.path() / (csc ? "csc.h5ad" : "csr.h5ad");
    write_h5ad(file, c);
    const H5adReader r(file);
    EXPECT_EQ(r.x_info()->encoding, csc ? "csc_matrix" : "csr_matrix");
    const SparseMatrix s = r.read_x_sparse();
    EXPECT_EQ(s.csc, csc);
    EXPECT_EQ(s.indptr, c.x_sparse->indptr);
    EXPECT_EQ(s.indices, c.x_sparse->indices);
    EXPECT_EQ(s.data, c.x_sparse->data);
    EXPECT_EQ(r.read_x_dense().values, dense.values);
  }
}

TEST(H5adRoundTrip, XColumnsMatchTheDenseMatrixForEveryLayout) {
  TempDir dir;
  std::mt19937 rng(kSeed);
  const DenseMatrix dense = random_dense(50, 20, rng, 0.7);
  const std::vector<std::size_t> wanted = {19, 0, 7, 7, 3};  // unordered, with a repeat
  for (const std::string layout : {"dense", "csr", "csc"}) {
    H5adContent c;
    c.obs_names = names("c", 50);
    c.var_names = names("g", 20);
    if (layout == "dense") c.x_dense = dense;
    else c.x_sparse = to_sparse(dense, layout == "csc");
    const fs::path file = dir.path() / (layout + ".h5ad");
    write_h5ad(file, c);
    const DenseMatrix got = H5adReader(file).read_x_columns(wanted);
    ASSERT_EQ(got.rows, 50u) << layout;
    ASSERT_EQ(got.cols, wanted.size()) << layout;
    for (std::size_t r = 0; r < 50; ++r) {
      for (std::size_t k = 0; k < wanted.size(); ++k) {
        EXPECT_EQ(got.values[r * wanted.size() + k], dense.values[r * 20 + wanted[k]]) << layout << " " << r << "," << k;
      }
    }
    const std::vector<std::size_t> outside = {20};
    EXPECT_THROW(H5adReader(file).read_x_columns(outside), std::invalid_argument) << layout;
  }
}

TEST(H5adRoundTrip, CouplingFileHasSourcesAsObsAndTargetsAsVar) {
  TempDir dir;
  SparseMatrix p;
  p.rows = 3;
  p.cols = 4;
  p.indptr = {0, 2, 2, 4};
  p.indices = {1, 3, 0, 2};
  p.data = {0.25f, 0.125f, 0.5f, 0.125f};
  const fs::path file = dir.path() / "coupling.h5ad";
  write_coupling_h5ad(file, {"s0", "s1", "s2"}, {"t0", "t1", "t2", "t3"}, p);
  const H5adReader r(file);
  EXPECT_EQ(r.obs_names(), (std::vector<std::string>{"s0", "s1", "s2"}));
  EXPECT_EQ(r.var_names(), (std::vector<std::string>{"t0", "t1", "t2", "t3"}));
  const SparseMatrix s = r.read_x_sparse();
  EXPECT_FALSE(s.csc);
  EXPECT_EQ(s.indptr, p.indptr);
  EXPECT_EQ(s.indices, p.indices);
  EXPECT_EQ(s.data, p.data);
  p.csc = true;
  EXPECT_THROW(write_coupling_h5ad(file, {"s0", "s1", "s2"}, {"t0", "t1", "t2", "t3"}, p), std::invalid_argument);
}

TEST(H5adCopy, AddsEntriesWithoutTouchingTheInputOrX) {
  TempDir dir;
  std::mt19937 rng(kSeed);
  const H5adContent content = sample_content(rng);
  const fs::path input = dir.path() / "input.h5ad";
  write_h5ad(input, content);
  const auto before = file_bytes(input);

  H5adContent add;
  add.obsm["X_flashot"] = random_dense(6, 2, rng);
  add.obsm["X_pca"] = random_dense(6, 5, rng);  // replaces, with another width
  add.obs["transferred"] = categorical({"B", "T"}, {1, 1, 0, -1, 0, 1});
  add.obs["score"] = numeric({1, 2, 3, 4, 5, 6});  // replaces an existing column in place in the order
  add.uns["epsilon"] = 0.5;
  add.uns["note"] = std::string("added");
  const fs::path output = dir.path() / "output.h5ad";
  write_h5ad_copy(input, output, add);

  EXPECT_EQ(file_bytes(input), before) << "the input file changed";
  const H5adReader r(output);
  EXPECT_EQ(r.read_x_dense().values, content.x_dense->values);
  EXPECT_EQ(r.read_obsm("X_flashot").values, add.obsm.at("X_flashot").values);
  EXPECT_EQ(r.read_obsm("X_pca").cols, 5u);
  EXPECT_EQ(r.read_obsm("X_umap").values, content.obsm.at("X_umap").values);
  std::vector<std::string> order;
  for (const auto& [name, column] : content.obs) order.push_back(name);
  order.push_back("transferred");
  EXPECT_EQ(r.obs_columns(), order);
  expect_same_column(r.read_obs("transferred"), add.obs.at("transferred"), "transferred");
  expect_same_column(r.read_obs("score"), add.obs.at("score"), "score");
  expect_same_column(r.read_obs("cell_type"), content.obs.at("cell_type"), "cell_type");
  EXPECT_EQ(std::get<double>(r.read_uns("epsilon")), 0.5);
  EXPECT_EQ(std::get<std::string>(r.read_uns("note")), "added");
  EXPECT_EQ(std::get<std::int64_t>(r.read_uns("iterations")), 42);
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".flashot-partial-"), std::string::npos) << "left behind: " << entry.path();
  }
}

TEST(H5adCopy, ReplacingTheInputNeedsInPlace) {
  TempDir dir;
  std::mt19937 rng(kSeed);
  const fs::path file = dir.path() / "data.h5ad";
  write_h5ad(file, sample_content(rng));
  H5adContent add;
  add.uns["run"] = std::int64_t{1};
  EXPECT_THROW(write_h5ad_copy(file, file, add), std::invalid_argument);
  EXPECT_THROW(H5adReader(file).read_uns("run"), IoError);
  write_h5ad_copy(file, file, add, true);
  EXPECT_EQ(std::get<std::int64_t>(H5adReader(file).read_uns("run")), 1);
}

TEST(H5adCopy, RejectsAdditionsOfTheWrongSize) {
  TempDir dir;
  std::mt19937 rng(kSeed);
  const fs::path input = dir.path() / "input.h5ad";
  write_h5ad(input, sample_content(rng));
  H5adContent add;
  add.obsm["X_bad"] = random_dense(5, 2, rng);
  try {
    write_h5ad_copy(input, dir.path() / "out.h5ad", add);
    FAIL() << "no error for 5 rows against 6 cells";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("obsm['X_bad']: 5 rows, expected 6"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.path() / "out.h5ad"));
}

TEST(H5adWrite, InconsistentContentThrowsNamingTheElement) {
  TempDir dir;
  std::mt19937 rng(kSeed);
  const fs::path file = dir.path() / "bad.h5ad";
  auto expect_message = [&](const H5adContent& c, const std::string& needle) {
    try {
      write_h5ad(file, c);
      ADD_FAILURE() << "no error, expected " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(file));
  };
  H5adContent c = sample_content(rng);
  c.x_dense->cols = 5;
  expect_message(c, "X: values hold 24 numbers, rows·cols = 30");
  c = sample_content(rng);
  c.obs["cell_type"].codes[0] = 3;
  expect_message(c, "obs['cell_type']: code 3 at row 0 outside [-1, 3)");
  c = sample_content(rng);
  c.obs["cell_type"].categories = {"B", "B", "T"};
  expect_message(c, "category 'B' appears twice");
  c = sample_content(rng);
  c.uns["a/b"] = 1.0;
  expect_message(c, "uns: key 'a/b'");
  for (const auto& entry : fs::directory_iterator(dir.path())) ADD_FAILURE() << "left behind: " << entry.path();
}

TEST(H5adWrite, DuplicateCellNamesAreKeptAsAnndataKeepsThem) {
  TempDir dir;
  std::mt19937 rng(kSeed);
  H5adContent c = sample_content(rng);
  c.obs_names[1] = c.obs_names[0];  // concatenated batches often repeat barcodes
  const fs::path file = dir.path() / "dup.h5ad";
  write_h5ad(file, c);
  EXPECT_EQ(H5adReader(file).obs_names(), c.obs_names);
}

TEST(H5adWrite, UnwritableFolderIsAnIoError) {
  H5adContent c;
  c.obs_names = {"a"};
  c.var_names = {"b"};
  EXPECT_THROW(write_h5ad("/nonexistent-flashot-dir/out.h5ad", c), IoError);
}

TEST(H5adRead, MissingFileNamesThePath) {
  try {
    H5adReader r("/nonexistent-flashot-dir/none.h5ad");
    FAIL() << "opened a missing file";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-flashot-dir/none.h5ad"), std::string::npos) << e.what();
  }
}

TEST(H5adRead, NonHdf5FileIsAFormatError) {
  TempDir dir;
  const fs::path file = dir.path() / "text.h5ad";
  std::ofstream(file) << "this is not HDF5\n";
  try {
    H5adReader r(file);
    FAIL() << "opened a text file";
  } catch (const FormatError& e) {
    EXPECT_EQ(e.path(), file.string());
    EXPECT_NE(std::string(e.what()).find("not an HDF5 file"), std::string::npos) << e.what();
  }
}

TEST(H5adRead, TruncatedFileIsAFormatErrorNamingThePath) {
  TempDir dir;
  std::mt19937 rng(kSeed);
  H5adContent c = sample_content(rng);
  c.obsm["X_big"] = random_dense(6, 4000, rng);
  const fs::path file = dir.path() / "whole.h5ad";
  write_h5ad(file, c);
  const auto bytes = file_bytes(file);
  for (const double fraction : {0.9, 0.5, 0.1}) {
    const fs::path cut = dir.path() / ("cut" + std::to_string(static_cast<int>(fraction * 100)) + ".h5ad");
    std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() * fraction));
    try {
      const H5adReader r(cut);
      r.read_obsm("X_big");
      r.read_x_dense();
      for (const auto& name : r.obs_columns()) r.read_obs(name);
      ADD_FAILURE() << "read a file cut to " << fraction << " of its size";
    } catch (const FormatError& e) {
      EXPECT_EQ(e.path(), cut.string()) << e.what();
    }
  }
}

TEST(H5adRead, MissingEntriesListWhatExists) {
  TempDir dir;
  std::mt19937 rng(kSeed);
  const fs::path file = dir.path() / "f.h5ad";
  write_h5ad(file, sample_content(rng));
  const H5adReader r(file);
  try {
    r.read_obsm("X_tsne");
    FAIL();
  } catch (const IoError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("X_tsne"), std::string::npos) << m;
    EXPECT_NE(m.find("X_pca, X_umap"), std::string::npos) << m;
  }
  EXPECT_FALSE(r.obsm_info("X_tsne").has_value());
  EXPECT_THROW(r.read_obs("no_such_column"), IoError);
  EXPECT_THROW(r.read_x_sparse(), FormatError);  // X is dense
}

TEST(H5adRead, ObsmIntoCallerMemoryHoldsWhatReadObsmReturns) {
  TempDir dir;
  std::mt19937 rng(kSeed);
  const H5adContent content = sample_content(rng);
  const fs::path file = dir.path() / "f.h5ad";
  write_h5ad(file, content);
  const H5adReader r(file);
  for (const auto& [key, want] : content.obsm) {
    std::vector<float> got(want.rows * want.cols, -1.0f);
    r.read_obsm_into(key, got);
    EXPECT_EQ(got, want.values) << key;
  }
  // A buffer of the wrong size is refused before anything is read, naming the entry and both sizes.
  const DenseMatrix& pca = content.obsm.at("X_pca");
  std::vector<float> small(pca.rows * pca.cols - 1, -1.0f);
  try {
    r.read_obsm_into("X_pca", small);
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("obsm['X_pca']"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(pca.rows) + "·" + std::to_string(pca.cols)), std::string::npos) << m;
    EXPECT_NE(m.find("got " + std::to_string(small.size())), std::string::npos) << m;
  }
  EXPECT_TRUE(std::all_of(small.begin(), small.end(), [](float v) { return v == -1.0f; }));
  std::vector<float> none;
  EXPECT_THROW(r.read_obsm_into("X_tsne", none), IoError);
}

TEST(H5adRead, FileImageReadsLikeTheFile) {
  TempDir dir;
  std::mt19937 rng(kSeed);
  const H5adContent content = sample_content(rng);
  const fs::path file = dir.path() / "f.h5ad";
  write_h5ad(file, content);
  const auto bytes = file_bytes(file);
  const H5adReader r = H5adReader::from_image(std::as_bytes(std::span(bytes)), "image.h5ad");
  EXPECT_EQ(r.obs_names(), content.obs_names);
  EXPECT_EQ(r.read_obsm("X_pca").values, content.obsm.at("X_pca").values);
  expect_same_column(r.read_obs("cell_type"), content.obs.at("cell_type"), "cell_type");
  const std::vector<char> junk(100, 'x');
  EXPECT_THROW(H5adReader::from_image(std::as_bytes(std::span(junk)), "junk"), FormatError);
}

}  // namespace
}  // namespace flashot::io::test
