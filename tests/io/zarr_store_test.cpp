// zarr stores without Python (docs/io-zarr.md): flashot's own round trips, and damaged stores, each of which must end
// in an error naming the store, the entry and the value — never a crash.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "flashot/io/anndata.hpp"
#include "flashot/io/errors.hpp"

namespace flashot::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("flashot_zarr_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::error_code ec;
  fs::remove_all(dir / name, ec);
  return dir / name;
}

H5adContent small() {
  H5adContent c;
  for (int i = 0; i < 6; ++i) c.obs_names.push_back("c" + std::to_string(i));
  for (int j = 0; j < 3; ++j) c.var_names.push_back("g" + std::to_string(j));
  c.x_dense = DenseMatrix{6, 3, {}};
  for (int k = 0; k < 18; ++k) c.x_dense->values.push_back(float(k) * 0.5f);
  c.obsm["X_pca"] = DenseMatrix{6, 2, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}};
  Column cat;
  cat.kind = Column::Kind::kCategorical;
  cat.categories = {"a", "b"};
  cat.codes = {0, 1, -1, 1, 0, 0};
  c.obs["cluster"] = cat;
  c.uns["note"] = std::string("hello");
  return c;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

void write_json(const fs::path& p, const json& j) { std::ofstream(p) << j.dump(); }

TEST(ZarrRoundTrip, BothFormatsFolderAndZip) {
  for (int format : {3, 2}) {
    for (const std::string suffix : {".zarr", ".zarr.zip", ".ZARR"}) {
      SCOPED_TRACE(std::to_string(format) + suffix);
      const fs::path store = scratch("rt" + std::to_string(format) + suffix);
      H5adContent c = small();
      c.zarr_format = format;
      write_h5ad(store, c);
      const H5adReader r(store);
      EXPECT_EQ(r.obs_names(), c.obs_names);
      EXPECT_EQ(r.var_names(), c.var_names);
      EXPECT_EQ(r.read_x_dense().values, c.x_dense->values);
      EXPECT_EQ(r.read_obsm("X_pca").values, c.obsm["X_pca"].values);
      const Column cat = r.read_obs("cluster");
      EXPECT_EQ(cat.codes, c.obs["cluster"].codes);
      EXPECT_EQ(cat.categories, c.obs["cluster"].categories);
      EXPECT_EQ(std::get<std::string>(r.read_uns("note")), "hello");
      EXPECT_NE(r.writer_generation().find("zarr format " + std::to_string(format)), std::string::npos);
    }
  }
}

TEST(ZarrRoundTrip, TrailingSlashAndNames) {
  EXPECT_TRUE(is_zarr_path("a/b.zarr"));
  EXPECT_TRUE(is_zarr_path("a/b.zarr/"));
  EXPECT_TRUE(is_zarr_path("B.Zarr.Zip"));
  EXPECT_FALSE(is_zarr_path("b.h5ad"));
  EXPECT_FALSE(is_zarr_path("b.zip"));
  const fs::path store = scratch("slash.zarr");
  write_h5ad(store.string() + "/", small());
  EXPECT_EQ(H5adReader(store.string() + "/").n_obs(), 6u);
}

TEST(ZarrDamaged, MessagesNameStoreEntryAndValue) {
  const fs::path store = scratch("damaged.zarr");
  write_h5ad(store, small());
  const json good = read_json(store / "zarr.json");
  auto reset = [&] { write_json(store / "zarr.json", good); };

  std::ofstream(store / "zarr.json") << "{\"zarr_format\": 3, ";
  std::string m = message_of([&] { H5adReader r(store); });
  EXPECT_NE(m.find(store.string()), std::string::npos) << m;
  EXPECT_NE(m.find("zarr.json: bad JSON"), std::string::npos) << m;

  json j = good;
  j["consolidated_metadata"]["metadata"]["obsm/X_pca"]["codecs"][1]["name"] = "lz77";
  write_json(store / "zarr.json", j);
  m = message_of([&] { H5adReader(store).read_obsm("X_pca"); });
  EXPECT_NE(m.find("/obsm/X_pca: unknown codec 'lz77'"), std::string::npos) << m;

  j = good;
  j["consolidated_metadata"]["metadata"]["obsm/X_pca"]["shape"] = {5, 2};
  write_json(store / "zarr.json", j);
  m = message_of([&] { H5adReader(store).read_obsm("X_pca"); });
  EXPECT_NE(m.find("/obsm/X_pca: has 5 rows, but the store has 6 cells"), std::string::npos) << m;

  j = good;
  j["consolidated_metadata"]["metadata"]["obsm/X_pca"]["data_type"] = "complex64";
  write_json(store / "zarr.json", j);
  m = message_of([&] { H5adReader(store).read_obsm("X_pca"); });
  EXPECT_NE(m.find("data_type 'complex64' is not supported"), std::string::npos) << m;

  // a sharded array whose shard is too short for its index
  j = good;
  j["consolidated_metadata"]["metadata"]["obsm/X_pca"]["codecs"] = json::parse(
      R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[3,2],"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"end"}}])");
  write_json(store / "zarr.json", j);
  fs::resize_file(store / "obsm/X_pca/c/0/0", 10);
  m = message_of([&] { H5adReader(store).read_obsm("X_pca"); });
  EXPECT_NE(m.find("obsm/X_pca/c/0/0: shard of 10 bytes is too short for its index (2 inner chunks need 36 bytes): truncated shard index"),
            std::string::npos) << m;
  // the same shard with an index whose checksum fails
  std::ofstream(store / "obsm/X_pca/c/0/0", std::ios::binary) << std::string(60, 'x');
  m = message_of([&] { H5adReader(store).read_obsm("X_pca"); });
  EXPECT_NE(m.find("crc32c checksum does not match"), std::string::npos) << m;

  reset();
  fs::resize_file(store / "X/c/0/0", 5);
  m = message_of([&] { H5adReader(store).read_x_dense(); });
  EXPECT_NE(m.find(store.string() + ": X/c/0/0: "), std::string::npos) << m;
  EXPECT_NE(m.find("zstd"), std::string::npos) << m;
}

TEST(ZarrDamaged, NotAStoreAndMissing) {
  const fs::path empty = scratch("empty.zarr");
  fs::create_directories(empty);
  std::string m = message_of([&] { H5adReader r(empty); });
  EXPECT_NE(m.find("not a zarr store: no zarr.json (format 3) or .zgroup (format 2)"), std::string::npos) << m;
  m = message_of([&] { H5adReader r(scratch("absent.zarr")); });
  EXPECT_NE(m.find("no such zarr store"), std::string::npos) << m;
  const fs::path zip = scratch("bad.zarr.zip");
  std::ofstream(zip) << "PK this is no archive";
  m = message_of([&] { H5adReader r(zip); });
  EXPECT_NE(m.find("bad.zarr.zip: not a zip archive"), std::string::npos) << m;
  // a zip store cut short: the central directory is gone
  const fs::path whole = scratch("whole.zarr.zip");
  write_h5ad(whole, small());
  fs::resize_file(whole, fs::file_size(whole) / 2);
  m = message_of([&] { H5adReader r(whole); });
  EXPECT_NE(m.find("whole.zarr.zip: not a zip archive"), std::string::npos) << m;
}

// Python's zipfile: a name stored twice reads as its last entry. Built here from flashot's own zip by appending
// a second, different copy of one entry (a hand-made archive, so this test needs no Python).
TEST(ZarrZip, DuplicateEntryLastWins) {
  const fs::path a = scratch("a.zarr"), b = scratch("b.zarr");
  H5adContent first = small(), second = small();
  second.obsm["X_pca"].values.assign(12, 7.0f);
  write_h5ad(a, first);
  write_h5ad(b, second);
  // An archive: every entry of a, then b's X_pca chunk again under the same name; then the reverse order.
  auto build = [&](const fs::path& out, const fs::path& last) {
    std::vector<std::pair<std::string, std::string>> entries;
    for (const auto& e : fs::recursive_directory_iterator(a)) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      entries.emplace_back(fs::relative(e.path(), a).generic_string(), std::string(std::istreambuf_iterator<char>(in), {}));
    }
    std::ifstream in(last / "obsm/X_pca/c/0/0", std::ios::binary);
    entries.emplace_back("obsm/X_pca/c/0/0", std::string(std::istreambuf_iterator<char>(in), {}));
    std::string zip, cd;
    auto le = [](std::string& s, std::uint64_t v, int n) { for (int i = 0; i < n; ++i) s += char((v >> (8 * i)) & 0xFF); };
    for (const auto& [name, data] : entries) {
      std::uint32_t crc = 0xFFFFFFFFu;  // CRC-32 (zip's), computed in place: clang cannot capture a structured binding
      for (unsigned char ch : data) {
        crc ^= ch;
        for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
      }
      crc = ~crc;
      const std::size_t offset = zip.size();
      le(zip, 0x04034b50, 4); le(zip, 20, 2); le(zip, 0, 2); le(zip, 0, 2); le(zip, 0, 4); le(zip, crc, 4);
      le(zip, data.size(), 4); le(zip, data.size(), 4); le(zip, name.size(), 2); le(zip, 0, 2);
      zip += name + data;
      le(cd, 0x02014b50, 4); le(cd, 20, 2); le(cd, 20, 2); le(cd, 0, 2); le(cd, 0, 2); le(cd, 0, 4); le(cd, crc, 4);
      le(cd, data.size(), 4); le(cd, data.size(), 4); le(cd, name.size(), 2); le(cd, 0, 2); le(cd, 0, 2);
      le(cd, 0, 2); le(cd, 0, 2); le(cd, 0, 4); le(cd, offset, 4);
      cd += name;
    }
    const std::size_t cd_at = zip.size();
    zip += cd;
    le(zip, 0x06054b50, 4); le(zip, 0, 4); le(zip, entries.size(), 2); le(zip, entries.size(), 2);
    le(zip, cd.size(), 4); le(zip, cd_at, 4); le(zip, 0, 2);
    std::ofstream(out, std::ios::binary) << zip;
  };
  const fs::path z1 = scratch("dup1.zarr.zip"), z2 = scratch("dup2.zarr.zip");
  build(z1, b);
  build(z2, a);
  EXPECT_EQ(H5adReader(z1).read_obsm("X_pca").values, second.obsm["X_pca"].values);
  EXPECT_EQ(H5adReader(z2).read_obsm("X_pca").values, first.obsm["X_pca"].values);
}

TEST(ZarrWrite, RefusesBadFormatAndLeavesNothing) {
  const fs::path store = scratch("bad_format.zarr");
  H5adContent c = small();
  c.zarr_format = 4;
  EXPECT_THROW(write_h5ad(store, c), std::invalid_argument);
  EXPECT_FALSE(fs::exists(store));
  for (const auto& e : fs::directory_iterator(store.parent_path())) {
    EXPECT_EQ(e.path().filename().string().find("bad_format.zarr.flashot-partial"), std::string::npos) << e.path();
  }
  // a file where a folder store should go is not replaced
  const fs::path file = scratch("file.zarr");
  std::ofstream(file) << "keep";
  EXPECT_THROW(write_h5ad(file, small()), IoError);
  std::ifstream in(file);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "keep");
}

}  // namespace
}  // namespace flashot::io
