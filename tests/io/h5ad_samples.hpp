#pragma once
// Seeded sample content and small helpers shared by the .h5ad test suites.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"

namespace flashot::io::test {

namespace fs = std::filesystem;

inline constexpr std::uint32_t kSeed = 20261129;

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("flashot_h5ad_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline std::vector<char> file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline std::vector<std::string> names(const std::string& prefix, std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

inline DenseMatrix random_dense(std::size_t rows, std::size_t cols, std::mt19937& rng, double zero_fraction = 0.0) {
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<double> uniform;
  DenseMatrix m{rows, cols, std::vector<float>(rows * cols)};
  for (auto& v : m.values) v = uniform(rng) < zero_fraction ? 0.0f : normal(rng);
  return m;
}

inline SparseMatrix to_sparse(const DenseMatrix& d, bool csc) {
  SparseMatrix s;
  s.rows = d.rows;
  s.cols = d.cols;
  s.csc = csc;
  const std::size_t major = csc ? d.cols : d.rows, minor = csc ? d.rows : d.cols;
  s.indptr.push_back(0);
  for (std::size_t i = 0; i < major; ++i) {
    for (std::size_t j = 0; j < minor; ++j) {
      const float v = csc ? d.values[j * d.cols + i] : d.values[i * d.cols + j];
      if (v != 0.0f) {
        s.data.push_back(v);
        s.indices.push_back(static_cast<std::int64_t>(j));
      }
    }
    s.indptr.push_back(static_cast<std::int64_t>(s.data.size()));
  }
  return s;
}

inline Column categorical(std::vector<std::string> categories, std::vector<std::int32_t> codes, bool ordered = false) {
  Column c;
  c.kind = Column::Kind::kCategorical;
  c.categories = std::move(categories);
  c.codes = std::move(codes);
  c.ordered = ordered;
  return c;
}

inline Column numeric(std::vector<double> values) {
  Column c;
  c.kind = Column::Kind::kNumeric;
  c.numbers = std::move(values);
  return c;
}

inline Column strings(std::vector<std::string> values, std::vector<std::uint8_t> missing = {}) {
  Column c;
  c.kind = Column::Kind::kString;
  c.strings = std::move(values);
  c.missing = std::move(missing);
  return c;
}

inline Column booleans(std::vector<std::uint8_t> flags, std::vector<std::uint8_t> missing = {}) {
  Column c;
  c.kind = Column::Kind::kBoolean;
  c.flags = std::move(flags);
  c.missing = std::move(missing);
  return c;
}

inline H5adContent sample_content(std::mt19937& rng) {
  H5adContent c;
  c.obs_names = {"cell-α", "cell-β", "AAACCTG-1", "細胞", "c4", "c5"};
  c.var_names = names("GENE", 4);
  c.x_dense = random_dense(6, 4, rng, 0.5);
  c.obsm["X_pca"] = random_dense(6, 3, rng);
  c.obsm["X_umap"] = random_dense(6, 2, rng);
  c.obs["cell_type"] = categorical({"B", "NK", "T"}, {0, 2, -1, 1, 2, 0});
  c.obs["stage"] = categorical({"early", "late"}, {1, 0, 0, 1, 1, 0}, true);
  c.obs["score"] = numeric({0.5, -1.25, std::numeric_limits<double>::quiet_NaN(), 3.0, 1e-300, -0.0});
  c.obs["donor"] = strings({"d1", "", "d3", "d ü", "d5", "d6"});
  c.obs["note"] = strings({"x", "", "z", "", "v", "w"}, {0, 1, 0, 0, 0, 1});
  c.obs["is_doublet"] = booleans({1, 0, 0, 1, 0, 1});
  c.obs["qc_pass"] = booleans({1, 0, 0, 1, 0, 1}, {0, 0, 1, 0, 0, 0});
  c.var["highly_variable"] = booleans({1, 1, 0, 0});
  c.uns["epsilon"] = 0.05;
  c.uns["iterations"] = std::int64_t{42};
  c.uns["method"] = std::string("sinkhorn ✓");
  c.uns["errors"] = std::vector<double>{1e-3, 2.5e-4, 0.0};
  return c;
}

}  // namespace flashot::io::test
