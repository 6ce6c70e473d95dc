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

#include "h5/h5.hpp"
#include "h5/isolated_walk.hpp"

namespace fs = std::filesystem;
using flashot::io::h5::crash_in_isolated_walk;
using flashot::io::h5::FileRef;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("flashot_isolated_walk_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

}  // namespace

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
