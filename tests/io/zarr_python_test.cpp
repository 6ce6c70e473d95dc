// zarr stores against PyPI zarr 3.x + anndata (tests/io/python/zarr_fixtures.py; docs/io-zarr.md):
//   ZarrFromPython.*  stores anndata and zarr-python wrote (format 2 and 3, every codec, sharded with the index at the
//                     end and at the start, directory and zip, consolidated or not, a zip with duplicate entries)
//                     must read in flashot exactly as anndata reads them;
//   ZarrToPython.*    stores flashot writes (new, coupling, copies with additions; v2/v3, folder/zip) must read in
//                     anndata with every value flashot wrote.
// The interpreter is FLASHOT_PYTHON_PANDAS3 (anndata 0.13) where CMake found one, and FLASHOT_PYTHON (anndata 0.12).

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"
#include "flashot/io/errors.hpp"
#include "h5ad_python.hpp"

namespace flashot::io::test {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

std::vector<std::string> interpreters() {
  std::vector<std::string> out;
#ifdef FLASHOT_PYTHON_PANDAS3
  out.push_back(FLASHOT_PYTHON_PANDAS3);
#endif
  out.push_back(FLASHOT_PYTHON);
  return out;
}

// The fixture stores of one interpreter, generated once per build tree (under a lock; regenerated when the script
// changes).
fs::path zarr_fixtures(const std::string& python, std::string& error) {
  const fs::path dir = fs::path(FLASHOT_H5AD_FIXTURE_DIR).parent_path() /
                       ("zarr_fixtures_" + std::to_string(std::hash<std::string>{}(python) % 100000));
  fs::create_directories(dir.parent_path());
  const int lock = ::open((dir.string() + ".lock").c_str(), O_CREAT | O_RDWR, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    error = "cannot lock " + dir.string();
    return {};
  }
  const auto time = fs::last_write_time(fs::path(FLASHOT_H5AD_PYTHON_DIR) / "zarr_fixtures.py");
  const std::string version = python + " " + std::to_string(time.time_since_epoch().count());
  std::string current;
  if (std::ifstream in(dir / "stamp.txt"); in) std::getline(in, current);
  fs::path result = dir;
  if (current != version) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    const PythonRun run = run_python("zarr_fixtures.py", {"make", dir.string()}, python);
    if (run.status != 0) {
      error = python + " zarr_fixtures.py make failed:\n" + run.output;
      result.clear();
    } else {
      std::ofstream(dir / "stamp.txt") << version << '\n';
    }
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
  return result;
}

Json load(const fs::path& p) {
  std::ifstream in(p);
  return Json::parse(in);
}

void expect_matrix(const std::string& what, const DenseMatrix& got, const Json& rows) {
  ASSERT_EQ(got.rows, rows.size()) << what;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    ASSERT_EQ(got.cols, rows[r].size()) << what;
    for (std::size_t c = 0; c < rows[r].size(); ++c) {
      const double want = rows[r][c].is_null() ? std::nan("") : rows[r][c].get<double>();
      const float value = got.values[r * got.cols + c];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(value)) << what << "[" << r << "," << c << "]";
      } else {
        EXPECT_NEAR(value, want, 1e-6 * std::max(1.0, std::fabs(want))) << what << "[" << r << "," << c << "]";
      }
    }
  }
}

void expect_column(const std::string& what, const Column& got, const Json& want) {
  const std::string kind = want["kind"];
  if (kind == "categorical") {
    ASSERT_EQ(got.kind, Column::Kind::kCategorical) << what;
    EXPECT_EQ(got.categories, want["categories"].get<std::vector<std::string>>()) << what;
    EXPECT_EQ(std::vector<std::int32_t>(got.codes.begin(), got.codes.end()), want["codes"].get<std::vector<std::int32_t>>()) << what;
    EXPECT_EQ(got.ordered, want["ordered"].get<bool>()) << what;
    return;
  }
  const Json& values = want["values"];
  ASSERT_EQ(got.size(), values.size()) << what;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const bool missing = values[i].is_null();
    if (!got.missing.empty()) {
      EXPECT_EQ(got.missing[i] != 0, missing) << what << "[" << i << "]";
    }
    if (kind == "numeric") {
      ASSERT_EQ(got.kind, Column::Kind::kNumeric) << what;
      if (missing) EXPECT_TRUE(std::isnan(got.numbers[i])) << what << "[" << i << "]";
      else EXPECT_DOUBLE_EQ(got.numbers[i], values[i].get<double>()) << what << "[" << i << "]";
    } else if (kind == "boolean") {
      ASSERT_EQ(got.kind, Column::Kind::kBoolean) << what;
      if (missing) EXPECT_FALSE(got.missing.empty()) << what << ": a missing boolean, but no missing flags";
      else EXPECT_EQ(got.flags[i] != 0, values[i].get<bool>()) << what << "[" << i << "]";
    } else {
      ASSERT_EQ(got.kind, Column::Kind::kString) << what;
      if (!missing) EXPECT_EQ(got.strings[i], values[i].get<std::string>()) << what << "[" << i << "]";
    }
  }
}

// Everything `expect` (anndata's reading) says, through flashot's reader.
void expect_store(const fs::path& store, const Json& expect) {
  SCOPED_TRACE(store.string());
  const H5adReader r(store);
  EXPECT_EQ(r.n_obs(), expect["n_obs"].get<std::size_t>());
  EXPECT_EQ(r.n_vars(), expect["n_vars"].get<std::size_t>());
  EXPECT_EQ(r.obs_names(), expect["obs_names"].get<std::vector<std::string>>());
  EXPECT_EQ(r.var_names(), expect["var_names"].get<std::vector<std::string>>());
  if (expect.contains("X")) {
    const auto info = r.x_info();
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->encoding, expect["X"]["encoding"].get<std::string>());
    expect_matrix("X", r.read_x_dense(), expect["X"]["dense"]);
    const std::vector<std::size_t> some = {r.n_vars() - 1, 0, 2};
    const DenseMatrix cols = r.read_x_columns(some);
    const Json& dense = expect["X"]["dense"];
    for (std::size_t i = 0; i < cols.rows; ++i) {
      for (std::size_t k = 0; k < some.size(); ++k) {
        EXPECT_FLOAT_EQ(cols.values[i * 3 + k], dense[i][some[k]].get<double>()) << "read_x_columns";
      }
    }
  } else {
    EXPECT_FALSE(r.x_info().has_value());
  }
  std::vector<std::string> keys;
  for (const auto& [k, v] : expect["obsm"].items()) {
    keys.push_back(k);
    expect_matrix("obsm/" + k, r.read_obsm(k), v);
    const ArrayInfo shape = r.obsm_shape(k);
    std::vector<float> into(shape.rows * shape.cols);
    r.read_obsm_into(k, into);
    EXPECT_EQ(into, r.read_obsm(k).values) << "read_obsm_into obsm/" << k;
  }
  for (const auto& k : keys) EXPECT_NE(std::find(r.obsm_keys().begin(), r.obsm_keys().end(), k), r.obsm_keys().end());
  for (const auto& [k, v] : expect["layers"].items()) expect_matrix("layers/" + k, r.read_layer(k), v);
  std::vector<std::string> obs_order;
  for (const auto& [c, v] : expect["obs"].items()) {
    obs_order.push_back(c);
    expect_column("obs/" + c, r.read_obs(c), v);
  }
  EXPECT_EQ(r.obs_columns(), obs_order);
  for (const auto& [c, v] : expect["var"].items()) expect_column("var/" + c, r.read_var(c), v);
  for (const auto& [k, v] : expect["uns"].items()) {
    const UnsValue got = r.read_uns(k);
    if (v.is_string()) {
      EXPECT_EQ(std::get<std::string>(got), v.get<std::string>()) << "uns/" << k;
    } else if (v.contains("int")) {
      EXPECT_EQ(std::get<std::int64_t>(got), v["int"].get<std::int64_t>()) << "uns/" << k;
    } else if (v.contains("float")) {
      EXPECT_DOUBLE_EQ(std::get<double>(got), v["float"].get<double>()) << "uns/" << k;
    } else {
      EXPECT_EQ(std::get<std::vector<double>>(got), v["vector"].get<std::vector<double>>()) << "uns/" << k;
    }
  }
  if (expect.contains("raw_var_names")) {
    ASSERT_TRUE(r.has_raw());
    EXPECT_EQ(r.raw_var_names(), expect["raw_var_names"].get<std::vector<std::string>>());
    expect_matrix("raw/X", r.read_raw_x_dense(), expect["raw_X"]);
  }
}

struct FromPython : ::testing::TestWithParam<std::tuple<std::size_t, std::string>> {};

TEST_P(FromPython, ReadsAsAnndataDoes) {
  const auto& [which, name] = GetParam();
  const auto pythons = interpreters();
  if (which >= pythons.size()) GTEST_SKIP() << "no second interpreter (FLASHOT_PYTHON_PANDAS3) configured";
  std::string error;
  const fs::path dir = zarr_fixtures(pythons[which], error);
  ASSERT_FALSE(dir.empty()) << error;
  fs::path store;
  std::ifstream list(dir / "stores.txt");
  for (std::string line; std::getline(list, line);) {
    if (line.substr(0, line.find('\t')) == name) store = line.substr(line.find('\t') + 1);
  }
  ASSERT_FALSE(store.empty()) << name << " is not in " << (dir / "stores.txt");
  expect_store(store, load(dir / (name + ".json")));
}

INSTANTIATE_TEST_SUITE_P(
    Stores, FromPython,
    ::testing::Combine(::testing::Values(std::size_t{0}, std::size_t{1}),
                       ::testing::Values("anndata_v3", "anndata_v2", "v3_zstd_shard_end", "v3_gzip_shard_end",
                                         "v3_blosc_shard_end", "v3_zstd", "v3_gzip", "v3_blosc", "v3_none",
                                         "v3_zstd_shard_start", "v2_zstd", "v2_zlib", "v2_gzip", "v2_blosc", "v2_none",
                                         "v3_unconsolidated", "v2_unconsolidated", "v2_big_endian", "v3_big_endian", "zarr_zipstore",
                                         "v3_zstd_shard_end_zip", "v2_blosc_zip", "folder_in_zip", "duplicates")),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == 0 ? "first_" : "second_") + std::get<1>(info.param);
    });

// ---- flashot writes, anndata reads --------------------------------------------------------------------------

H5adContent sample_content() {
  H5adContent c;
  const std::size_t n = 9, g = 4;
  for (std::size_t i = 0; i < n; ++i) c.obs_names.push_back("c" + std::to_string(i) + (i == 3 ? "é" : ""));
  for (std::size_t j = 0; j < g; ++j) c.var_names.push_back("g" + std::to_string(j));
  SparseMatrix x;
  x.rows = n;
  x.cols = g;
  x.indptr.push_back(0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < g; ++j) {
      if ((i + j) % 3 == 0) {
        x.indices.push_back(static_cast<std::int64_t>(j));
        x.data.push_back(0.5f + float(i * g + j));
      }
    }
    x.indptr.push_back(static_cast<std::int64_t>(x.data.size()));
  }
  c.x_sparse = x;
  DenseMatrix pca{n, 3, {}};
  for (std::size_t k = 0; k < n * 3; ++k) pca.values.push_back(0.25f * float(k) - 1.0f);
  c.obsm["X_pca"] = pca;
  Column cat;
  cat.kind = Column::Kind::kCategorical;
  cat.categories = {"a", "b", "c"};
  cat.codes = {0, 1, 2, -1, 0, 1, 2, 0, 1};
  c.obs["cluster"] = cat;
  Column num;
  num.kind = Column::Kind::kNumeric;
  for (std::size_t i = 0; i < n; ++i) num.numbers.push_back(i == 4 ? std::nan("") : 1.5 * double(i));
  c.obs["score"] = num;
  Column str;
  str.kind = Column::Kind::kString;
  for (std::size_t i = 0; i < n; ++i) str.strings.push_back("s" + std::to_string(i % 4));
  c.obs["note"] = str;
  Column flags;
  flags.kind = Column::Kind::kBoolean;
  flags.flags = {1, 0, 1, 1, 0, 0, 1, 0, 1};
  c.obs["flag"] = flags;
  Column nb = flags;
  nb.missing = {0, 0, 0, 0, 1, 0, 0, 0, 0};
  c.obs["maybe"] = nb;
  Column vnum;
  vnum.kind = Column::Kind::kNumeric;
  vnum.numbers = {0.1, 0.2, 0.3, 0.4};
  c.var["mean"] = vnum;
  c.uns["epsilon"] = 0.05;
  c.uns["iterations"] = std::int64_t{42};
  c.uns["method"] = std::string("sinkhorn");
  c.uns["costs"] = std::vector<double>{1.0, 0.5, 0.25};
  return c;
}

Json dump_with_anndata(const std::string& python, const fs::path& store) {
  const fs::path out = store.parent_path() / (store.filename().string() + ".anndata.json");
  const PythonRun run = run_python("zarr_fixtures.py", {"dump", store.string(), out.string()}, python);
  EXPECT_EQ(run.status, 0) << run.output;
  return run.status == 0 ? load(out) : Json();
}

// What anndata read from `store` equals what flashot wrote (`c`), and flashot reads it back the same way.
void expect_written(const std::string& python, const fs::path& store, const H5adContent& c) {
  const Json j = dump_with_anndata(python, store);
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["obs_names"].get<std::vector<std::string>>(), c.obs_names);
  EXPECT_EQ(j["var_names"].get<std::vector<std::string>>(), c.var_names);
  EXPECT_EQ(j["X"]["encoding"].get<std::string>(), "csr_matrix");
  const SparseMatrix& x = *c.x_sparse;
  for (std::size_t i = 0; i < x.rows; ++i) {
    std::vector<double> row(x.cols, 0.0);
    for (auto p = x.indptr[i]; p < x.indptr[i + 1]; ++p) row[std::size_t(x.indices[std::size_t(p)])] = x.data[std::size_t(p)];
    EXPECT_EQ(j["X"]["dense"][i].get<std::vector<double>>(), row) << "X row " << i;
  }
  for (const auto& [k, m] : c.obsm) {
    const DenseMatrix got = [&] {
      DenseMatrix d{m.rows, m.cols, {}};
      for (const auto& row : j["obsm"][k]) for (const auto& v : row) d.values.push_back(v.get<float>());
      return d;
    }();
    EXPECT_EQ(got.values, m.values) << "obsm/" << k;
  }
  const Json& obs = j["obs"];
  EXPECT_EQ(obs["cluster"]["categories"].get<std::vector<std::string>>(), c.obs.at("cluster").categories);
  EXPECT_EQ(obs["cluster"]["codes"].get<std::vector<int>>(), std::vector<int>(c.obs.at("cluster").codes.begin(), c.obs.at("cluster").codes.end()));
  for (std::size_t i = 0; i < c.obs_names.size(); ++i) {
    const double want = c.obs.at("score").numbers[i];
    if (std::isnan(want)) EXPECT_TRUE(obs["score"]["values"][i].is_null());
    else EXPECT_EQ(obs["score"]["values"][i].get<double>(), want);
    EXPECT_EQ(obs["note"]["values"][i].get<std::string>(), c.obs.at("note").strings[i]);
    EXPECT_EQ(obs["flag"]["values"][i].get<bool>(), c.obs.at("flag").flags[i] != 0);
    if (c.obs.at("maybe").missing[i]) EXPECT_TRUE(obs["maybe"]["values"][i].is_null());
    else EXPECT_EQ(obs["maybe"]["values"][i].get<bool>(), c.obs.at("maybe").flags[i] != 0);
  }
  EXPECT_EQ(j["var"]["mean"]["values"].get<std::vector<double>>(), c.var.at("mean").numbers);
  EXPECT_EQ(j["uns"]["epsilon"]["float"].get<double>(), 0.05);
  EXPECT_EQ(j["uns"]["iterations"]["int"].get<std::int64_t>(), 42);
  EXPECT_EQ(j["uns"]["method"].get<std::string>(), "sinkhorn");
  EXPECT_EQ(j["uns"]["costs"]["vector"].get<std::vector<double>>(), (std::vector<double>{1.0, 0.5, 0.25}));
  expect_store(store, j);  // and flashot reads back what anndata read
}

struct ToPython : ::testing::TestWithParam<std::tuple<std::size_t, int, std::string>> {};

TEST_P(ToPython, NewStoreReadsInAnndata) {
  const auto& [which, format, suffix] = GetParam();
  const auto pythons = interpreters();
  if (which >= pythons.size()) GTEST_SKIP() << "no second interpreter (FLASHOT_PYTHON_PANDAS3) configured";
  const fs::path dir = fs::path(FLASHOT_H5AD_FIXTURE_DIR).parent_path() / "zarr_written" /
                       (std::to_string(which) + "_" + std::to_string(format) + (suffix == ".zarr" ? "_folder" : "_zip"));
  // (one folder per test: ctest runs them in parallel, and each checks its folder holds no partial store)
  fs::create_directories(dir);
  const fs::path store = dir / ("cells" + suffix);
  std::error_code ec;
  fs::remove_all(store, ec);
  H5adContent c = sample_content();
  c.zarr_format = format;
  write_h5ad(store, c);
  expect_written(pythons[which], store, c);
  // written again over itself: the previous store is replaced whole
  c.obsm["X_pca"].values[0] = 123.0f;
  write_h5ad(store, c);
  expect_written(pythons[which], store, c);
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename().string().find(".flashot-partial"), std::string::npos) << entry.path();
  }
  // a copy with additions, in the input's zarr format, read back by anndata
  H5adContent more;
  DenseMatrix mapped{c.obs_names.size(), 2, std::vector<float>(c.obs_names.size() * 2, 0.75f)};
  more.obsm["X_pca_flashot"] = mapped;
  Column label;
  label.kind = Column::Kind::kCategorical;
  label.categories = {"x", "y"};
  label.codes = {0, 1, 0, 1, -1, 0, 1, 0, 1};
  more.obs["label_flashot"] = label;
  more.uns["flashot_cost"] = 1.25;
  const fs::path copy = dir / ("copy" + suffix);
  fs::remove_all(copy, ec);
  write_h5ad_copy(store, copy, more);
  H5adContent all = c;
  all.obsm["X_pca_flashot"] = mapped;
  all.obs["label_flashot"] = label;
  const Json j = dump_with_anndata(pythons[which], copy);
  ASSERT_FALSE(j.is_null());
  expect_store(copy, j);
  EXPECT_EQ(j["obs"]["label_flashot"]["codes"].get<std::vector<int>>(), (std::vector<int>{0, 1, 0, 1, -1, 0, 1, 0, 1}));
  EXPECT_EQ(j["uns"]["flashot_cost"]["float"].get<double>(), 1.25);
  EXPECT_EQ(j["obsm"]["X_pca_flashot"][3][1].get<double>(), 0.75);
  EXPECT_EQ(j["obs"]["cluster"]["codes"].get<std::vector<int>>(), (std::vector<int>{0, 1, 2, -1, 0, 1, 2, 0, 1}));
  const H5adReader r(copy);
  const auto cols = r.obs_columns();
  EXPECT_EQ(cols.back(), "label_flashot");
}

INSTANTIATE_TEST_SUITE_P(Formats, ToPython,
                         ::testing::Combine(::testing::Values(std::size_t{0}, std::size_t{1}), ::testing::Values(3, 2),
                                            ::testing::Values(".zarr", ".zarr.zip")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == 0 ? "first" : "second") + "_v" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) == ".zarr" ? "_folder" : "_zip");
                         });

// An anndata store enriched by flashot: sharded v3 input, its layers, raw and obsp carried byte for byte.
TEST(ZarrToPython, CopyOfAnndataStoreKeepsEverything) {
  const auto python = interpreters().front();
  std::string error;
  const fs::path dir = zarr_fixtures(python, error);
  ASSERT_FALSE(dir.empty()) << error;
  for (const std::string name : {"anndata_v3", "anndata_v2", "zarr_zipstore"}) {
    SCOPED_TRACE(name);
    const fs::path input = dir / (name + (name == "zarr_zipstore" ? ".zarr.zip" : ".zarr"));
    const fs::path output = dir.parent_path() / "zarr_written" / ("enriched_" + name + ".zarr");
    std::error_code ec;
    fs::create_directories(output.parent_path());
    fs::remove_all(output, ec);
    const H5adReader in(input);
    H5adContent more;
    more.obsm["X_pca_flashot"] = in.read_obsm("X_pca");
    more.uns["flashot_epsilon"] = 0.5;
    write_h5ad_copy(input, output, more);
    Json j = dump_with_anndata(python, output);
    ASSERT_FALSE(j.is_null());
    const Json original = load(dir / (name + ".json"));
    EXPECT_EQ(j["layers"], original["layers"]);
    EXPECT_EQ(j["raw_X"], original["raw_X"]);
    EXPECT_EQ(j["obs"], original["obs"]);
    EXPECT_EQ(j["obsm"]["X_pca_flashot"], original["obsm"]["X_pca"]);
    EXPECT_EQ(j["uns"]["flashot_epsilon"]["float"].get<double>(), 0.5);
    expect_store(output, j);
  }
}

}  // namespace
}  // namespace flashot::io::test
