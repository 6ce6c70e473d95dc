// Files written by Python anndata (current PyPI) and hand-built legacy layouts (h5py) are read by flashot and
// compared value by value with what Python says they hold (tests/io/python/make_h5ad_fixtures.py).

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "flashot/io/anndata.hpp"
#include "flashot/io/errors.hpp"
#include "h5ad_expect.hpp"
#include "h5ad_python.hpp"

namespace flashot::io::test {
namespace {

std::filesystem::path fixtures() {
  static std::string error;
  static const std::filesystem::path dir = fixture_dir(error);
  if (dir.empty()) ADD_FAILURE() << error;
  return dir;
}

class H5adFromPython : public ::testing::TestWithParam<const char*> {};

TEST_P(H5adFromPython, ReadsWhatAnndataWrote) {
  const auto dir = fixtures();
  ASSERT_FALSE(dir.empty());
  const auto file = dir / (std::string(GetParam()) + ".h5ad");
  const auto expect = dir / (std::string(GetParam()) + ".expect");
  ASSERT_TRUE(std::filesystem::exists(file)) << file;
  ASSERT_TRUE(std::filesystem::exists(expect)) << expect;
  check_file(file, expect);
}

INSTANTIATE_TEST_SUITE_P(Encodings, H5adFromPython,
                         ::testing::Values("dense_f32", "dense_f64", "dense_i32", "dense_u16", "csr_f32",
                                           "csr_f64_i64", "csr_i64", "csc_f32", "csc_i16", "csr_unsigned_indices",
                                           "no_x", "raw", "nullable", "pandas3_strings", "fixed_strings",
                                           "large_contiguous"),
                         [](const auto& info) { return std::string(info.param); });

INSTANTIATE_TEST_SUITE_P(Legacy, H5adFromPython,
                         ::testing::Values("legacy_06", "legacy_06_obsm_unreadable", "legacy_07", "legacy_07_lzf"),
                         [](const auto& info) { return std::string(info.param); });

INSTANTIATE_TEST_SUITE_P(Malformed, H5adFromPython,
                         ::testing::Values("bad_indptr", "short_indptr", "bad_indices", "missing_indices",
                                           "obsm_wrong_rows", "column_wrong_length", "bad_code", "missing_obsm_key",
                                           "missing_index", "unknown_filter", "x_unreadable", "x_wrong_shape",
                                           "not_anndata"),
                         [](const auto& info) { return std::string(info.param); });

#ifdef FLASHOT_PYTHON_OLD_ANNDATA
// The same encodings written by an older anndata (Debian's python3-anndata 0.8 with pandas 1.5).
class H5adFromOldAnndata : public ::testing::TestWithParam<const char*> {};

TEST_P(H5adFromOldAnndata, ReadsWhatAnndataWrote) {
  static std::string error;
  static const std::filesystem::path dir = fixture_dir(
      FLASHOT_PYTHON_OLD_ANNDATA, std::string(FLASHOT_H5AD_FIXTURE_DIR) + "_old_anndata", {"--anndata-only"}, error);
  ASSERT_FALSE(dir.empty()) << error;
  check_file(dir / (std::string(GetParam()) + ".h5ad"), dir / (std::string(GetParam()) + ".expect"));
}

INSTANTIATE_TEST_SUITE_P(Encodings, H5adFromOldAnndata,
                         ::testing::Values("dense_f32", "dense_f64", "dense_i32", "dense_u16", "csr_f32",
                                           "csr_f64_i64", "csr_i64", "csc_f32", "csc_i16", "csr_unsigned_indices",
                                           "no_x", "raw"),
                         [](const auto& info) { return std::string(info.param); });
#endif

#ifdef FLASHOT_PYTHON_PANDAS3
// Written by anndata >= 0.13 with pandas >= 3 as they are (make_h5ad_fixtures.py --pandas3 refuses older ones):
// index and str columns as nullable-string-array groups (na-value NaN or NA), or converted to categoricals.
class H5adFromPandas3 : public ::testing::TestWithParam<const char*> {};

TEST_P(H5adFromPandas3, ReadsWhatAnndataWrote) {
  static std::string error;
  static const std::filesystem::path dir = fixture_dir(
      FLASHOT_PYTHON_PANDAS3, std::string(FLASHOT_H5AD_FIXTURE_DIR) + "_pandas3", {"--pandas3"}, error);
  ASSERT_FALSE(dir.empty()) << error;
  check_file(dir / (std::string(GetParam()) + ".h5ad"), dir / (std::string(GetParam()) + ".expect"));
}

INSTANTIATE_TEST_SUITE_P(Encodings, H5adFromPandas3,
                         ::testing::Values("pandas3_native", "pandas3_categoricals", "dense_f32", "dense_f64",
                                           "dense_i32", "dense_u16", "csr_f32", "csr_f64_i64", "csr_i64", "csc_f32",
                                           "csc_i16", "csr_unsigned_indices", "no_x", "raw"),
                         [](const auto& info) { return std::string(info.param); });
#endif

TEST(H5adPbmc68k, ReadsTheScanpyDatasetLikeAnndata) {
  const auto dir = fixtures();
  ASSERT_FALSE(dir.empty());
  ASSERT_TRUE(std::filesystem::exists(pbmc68k_path())) << pbmc68k_path();
  check_file(pbmc68k_path(), dir / "pbmc68k_reduced.expect");
}

TEST(H5adPbmc68k, HasTheShapesScanpyDocuments) {
  ASSERT_TRUE(std::filesystem::exists(pbmc68k_path())) << pbmc68k_path();
  const H5adReader reader(pbmc68k_path());
  EXPECT_EQ(reader.n_obs(), 700u);
  const auto pca = reader.obsm_info("X_pca");
  ASSERT_TRUE(pca.has_value());
  EXPECT_EQ(pca->rows, 700u);
  EXPECT_EQ(pca->cols, 50u);
  EXPECT_EQ(pca->dtype, "float32");
  const Column labels = reader.read_obs("bulk_labels");
  EXPECT_EQ(labels.kind, Column::Kind::kCategorical);
  EXPECT_EQ(labels.categories.size(), 10u);
  EXPECT_EQ(reader.read_obs("louvain").categories.size(), 11u);
}

// obsm_shape, the check the CLI and the GUI make before reading obsm into their own memory, on files h5py broke:
// the shape of a good entry (and of the ≤0.6 compound field, read from metadata), a row count that disagrees with
// the cells, a key that is not there.
TEST(H5adObsmShape, ChecksRowsAndNamesMissingKeys) {
  const auto dir = fixtures();
  ASSERT_FALSE(dir.empty());
  const H5adReader wrong(dir / "obsm_wrong_rows.h5ad");
  try {
    wrong.obsm_shape("X_pca");
    ADD_FAILURE() << "obsm_shape accepted 8 rows for 6 cells";
  } catch (const FormatError& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.path(), (dir / "obsm_wrong_rows.h5ad").string());
    EXPECT_NE(m.find("/obsm/X_pca"), std::string::npos) << m;
    EXPECT_NE(m.find("has 8 rows, but the file has 6 cells"), std::string::npos) << m;
  }
  const H5adReader missing(dir / "missing_obsm_key.h5ad");
  const ArrayInfo pca = missing.obsm_shape("X_pca");
  EXPECT_EQ(pca.rows, 6u);
  EXPECT_EQ(pca.cols, 3u);
  try {
    missing.obsm_shape("X_umap");
    ADD_FAILURE() << "obsm_shape found X_umap";
  } catch (const IoError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("X_umap"), std::string::npos) << m;
    EXPECT_NE(m.find("X_pca"), std::string::npos) << m;
  }
  const H5adReader legacy(dir / "legacy_06.h5ad");
  for (const std::string& key : legacy.obsm_keys()) {
    const ArrayInfo shape = legacy.obsm_shape(key);
    EXPECT_EQ(shape.rows, legacy.n_obs()) << key;
    EXPECT_EQ(shape.rows * shape.cols, legacy.read_obsm(key).values.size()) << key;
  }
}

}  // namespace
}  // namespace flashot::io::test
