// The isolated metadata walk (io/src/h5/isolated_walk.cpp) on its own: the verdicts the reader turns into errors.
// These reach into the io library's internals (its src/ folder), because a file that makes HDF5 hang for the whole
// 60 s limit the reader uses would make a slow test.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>
#include <cstdio>

#include "h5/h5.hpp"
#include "h5/isolated_walk.hpp"

namespace fs = std::filesystem;
using flashot::io::h5::Attribute;
using flashot::io::h5::AttributeTable;
using flashot::io::h5::FileRef;
using flashot::io::h5::Id;

// The verdict alone, as the tests of it read best.
std::optional<std::string> crash_in_isolated_walk(const FileRef& file, std::chrono::seconds limit) {
  return flashot::io::h5::isolated_walk(file, limit).problem;
}

namespace {

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("flashot_isolated_walk_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

struct Comparison {
  const AttributeTable* table;
  const FileRef* file;
  int objects = 0, attributes = 0, references = 0, strings = 0, numbers = 0;
  std::vector<std::string> differences;
};

herr_t compare_attribute(hid_t object, const char* name, const H5A_info_t*, void* data) {
  auto* c = static_cast<Comparison*>(data);
  Id attr(H5Aopen(object, name, H5P_DEFAULT));
  const Attribute direct = flashot::io::h5::decode_attribute(c->file, attr.get());
  H5O_info_t info{};
  const auto entry = H5Oget_info2(object, &info, H5O_INFO_BASIC) >= 0 ? c->table->find(info.addr) : c->table->end();
  ++c->attributes;
  c->references += direct.kind == Attribute::Kind::kReference;
  c->strings += direct.kind == Attribute::Kind::kString;
  c->numbers += direct.kind == Attribute::Kind::kNumeric;
  if (entry == c->table->end() || !entry->second.contains(name)) {
    c->differences.push_back(std::string(name) + ": not in the table");
    return 0;
  }
  const Attribute& walked = entry->second.at(name);
  if (walked.kind != direct.kind || walked.count != direct.count || walked.strings != direct.strings ||
      walked.ints != direct.ints || walked.reference != direct.reference || walked.problem != direct.problem) {
    c->differences.push_back(std::string(name) + ": differs");
  }
  return 0;
}

herr_t compare_object(hid_t root, const char* name, const H5O_info_t*, void* data) {
  auto* c = static_cast<Comparison*>(data);
  Id object(H5Oopen(root, name, H5P_DEFAULT));
  if (!object.valid()) return 0;  // HDF5 cannot open it (legacy_06's compound frames): neither can the reader
  ++c->objects;
  hsize_t index = 0;
  H5Aiterate2(object.get(), H5_INDEX_NAME, H5_ITER_NATIVE, &index, compare_attribute, c);
  return 0;
}

}  // namespace

// The reader's process takes every attribute from the table the walk's child decoded: for intact files of several
// writer generations the table must hold exactly what decoding them here gives, object by object.
TEST(H5IsolatedWalk, TheAttributeTableHoldsWhatTheReaderWouldDecode) {
  const std::string corpus = std::string(FLASHOT_IO_TEST_DATA_DIR) + "/../../fuzz/corpus/h5ad/";
  int references = 0, strings = 0;
  for (const char* name : {"csr.h5ad", "dense.h5ad", "legacy_06.h5ad", "legacy_07.h5ad"}) {
    SCOPED_TRACE(name);
    FileRef file;
    file.path = corpus + name;
    ASSERT_TRUE(fs::exists(file.path));
    const auto walk = flashot::io::h5::isolated_walk(file, std::chrono::seconds(30));
    ASSERT_EQ(walk.problem, std::nullopt);
    ASSERT_NE(walk.attributes, nullptr);
    flashot::io::h5::silence_errors();
    Id id(H5Fopen(file.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    ASSERT_TRUE(id.valid());
    file.id = id.get();
    Comparison c{walk.attributes.get(), &file};
    ASSERT_GE(H5Ovisit2(id.get(), H5_INDEX_NAME, H5_ITER_NATIVE, compare_object, &c, H5O_INFO_BASIC), 0);
    EXPECT_TRUE(c.differences.empty()) << c.differences.front();
    EXPECT_GT(c.objects, 3);
    // Every object HDF5's own visit reaches is in the table (its root too).
    EXPECT_GE(walk.attributes->size(), static_cast<std::size_t>(c.objects));
    references += c.references;
    strings += c.strings;
  }
  EXPECT_GT(strings, 0);
  EXPECT_GT(references, 0) << "no file exercised object-reference attributes (legacy categoricals)";
}

// A file HDF5 cannot open gives no verdict of the walk's own (the reader then says why it cannot open it) and an
// empty table: nothing of it is decoded in the reader's process.
TEST(H5IsolatedWalk, AFileHdf5RefusesGivesAnEmptyTable) {
  const fs::path path = scratch("not-hdf5.h5ad");
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("\x89HDF\r\n\x1a\n and then nothing HDF5 could use", f);
    std::fclose(f);
  }
  FileRef file;
  file.path = path.string();
  const auto walk = flashot::io::h5::isolated_walk(file, std::chrono::seconds(30));
  fs::remove_all(path.parent_path());
  EXPECT_EQ(walk.problem, std::nullopt);
  ASSERT_NE(walk.attributes, nullptr);
  EXPECT_TRUE(walk.attributes->empty());
}

TEST(H5IsolatedWalk, AnIntactFileWalksWithoutAVerdict) {
  FileRef file;
  file.path = std::string(FLASHOT_IO_TEST_DATA_DIR) + "/../../fuzz/corpus/h5ad/csr.h5ad";
  ASSERT_TRUE(fs::exists(file.path));
  EXPECT_EQ(crash_in_isolated_walk(file, std::chrono::seconds(30)), std::nullopt);
}

TEST(H5IsolatedWalk, AMetadataMemoryBombIsStoppedByTheCeiling) {
  FileRef file;
  file.path = std::string(FLASHOT_IO_TEST_DATA_DIR) + "/hostile/fuzz_local_heap_loop.h5ad";
  ASSERT_TRUE(fs::exists(file.path));
  const auto verdict = crash_in_isolated_walk(file, std::chrono::seconds(30));
  ASSERT_TRUE(verdict.has_value());
  EXPECT_NE(verdict->find("needed more than 256 MB"), std::string::npos) << *verdict;
}

TEST(H5IsolatedWalk, AChildThatNeverFinishesIsStoppedAtTheLimit) {
  // A FIFO without a writer: HDF5's open blocks in open(2) for ever, as an endless loop in its decoder would.
  const fs::path fifo = scratch("never.h5ad");
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  FileRef file;
  file.path = fifo.string();
  const auto start = std::chrono::steady_clock::now();
  const auto verdict = crash_in_isolated_walk(file, std::chrono::seconds(1));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fs::remove_all(fifo.parent_path());
  ASSERT_TRUE(verdict.has_value());
  EXPECT_NE(verdict->find("did not finish reading its metadata in 1 s"), std::string::npos) << *verdict;
  EXPECT_LT(seconds, 30.0) << "the limit did not stop the child";
}
