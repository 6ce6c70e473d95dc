// read_ply_header: the header alone, as the commands check option names against it before loading a cloud
// (docs/cli.md). It must agree with read_ply on everything but the values, and never need the payload.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "flashot/io/errors.hpp"
#include "flashot/io/ply.hpp"

namespace flashot::io {
namespace {

constexpr std::size_t kVertices = 30000;  // a binary payload of 360 kB, several of the reader's blocks
constexpr std::size_t kComments = 1500;   // a header of about 100 kB, longer than one block

std::filesystem::path folder() {
  const auto f = std::filesystem::temp_directory_path() / ("flashot-ply-header-" + std::to_string(::getpid()));
  std::filesystem::create_directories(f);
  return f;
}

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

PlyFile sample() {
  std::vector<float> xyz(kVertices * 3);
  for (std::size_t i = 0; i < xyz.size(); ++i) xyz[i] = float(i % 97);
  PlyFile ply = make_point_cloud(xyz, kVertices);
  ply.find("vertex")->properties.push_back(
      {"part", PlyType::kUint8, false, PlyType::kUint8, std::vector<double>(kVertices, 2.0), {}});
  ply.elements.push_back({"face", 1, {{"vertex_indices", PlyType::kInt32, true, PlyType::kUint8, {0, 1, 2}, {0, 3}}}});
  for (std::size_t c = 0; c < kComments; ++c) ply.comments.push_back("comment " + std::to_string(c) + " end_header");
  return ply;
}

TEST(PlyHeader, AgreesWithTheWholeFileButHoldsNoValues) {
  const auto path = folder() / "long_header.ply";
  const PlyFile written = sample();
  write_ply(path, written);
  const PlyFile header = read_ply_header(path);
  const PlyFile whole = read_ply(path);
  EXPECT_EQ(header.format, whole.format);
  EXPECT_EQ(header.comments, whole.comments);
  ASSERT_EQ(header.elements.size(), whole.elements.size());
  for (std::size_t e = 0; e < header.elements.size(); ++e) {
    EXPECT_EQ(header.elements[e].name, whole.elements[e].name);
    EXPECT_EQ(header.elements[e].count, whole.elements[e].count);
    ASSERT_EQ(header.elements[e].properties.size(), whole.elements[e].properties.size());
    for (std::size_t p = 0; p < header.elements[e].properties.size(); ++p) {
      const PlyProperty& h = header.elements[e].properties[p];
      const PlyProperty& w = whole.elements[e].properties[p];
      EXPECT_EQ(h.name, w.name);
      EXPECT_EQ(h.type, w.type);
      EXPECT_EQ(h.is_list, w.is_list);
      EXPECT_TRUE(h.values.empty()) << h.name;
    }
  }
  std::filesystem::remove(path);
}

TEST(PlyHeader, NeedsNoPayload) {
  const auto path = folder() / "cut.ply";
  write_ply(path, sample());
  const std::string bytes = read_all(path);
  const std::size_t end = bytes.find("\nend_header\n") + std::string("\nend_header\n").size();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, end + 10);
  EXPECT_EQ(read_ply_header(path).find("vertex")->count, kVertices);
  EXPECT_THROW(read_ply(path), FormatError);  // the whole file is truncated, which read_ply reports
  std::filesystem::remove(path);
}

TEST(PlyHeader, BadHeadersAndMissingFilesAreErrorsNamingThePath) {
  const auto dir = folder();
  std::ofstream(dir / "no_end.ply") << "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\n";
  std::ofstream(dir / "not_ply.ply") << "solid cube\nfacet normal 0 0 1\n";
  for (const char* name : {"no_end.ply", "not_ply.ply"}) {
    try {
      read_ply_header(dir / name);
      FAIL() << name << " was accepted";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(read_ply_header(dir / "missing.ply"), IoError);
  EXPECT_THROW(read_ply_header(dir), IoError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace flashot::io
