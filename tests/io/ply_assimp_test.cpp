// PLY files nobody here wrote: the models of Debian's assimp-testmodels package (CI installs it). A missing package
// fails these tests with the install hint rather than skipping them.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "flashot/io/errors.hpp"
#include "flashot/io/ply.hpp"

namespace flashot::io {
namespace {

const std::filesystem::path kModels = "/usr/share/assimp/models";

std::filesystem::path model(const std::string& relative) {
  const std::filesystem::path path = kModels / relative;
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << path << " is missing: install Debian's assimp-testmodels (apt-get install assimp-testmodels)";
  }
  return path;
}

#define REQUIRE_MODEL(var, relative)                 \
  const std::filesystem::path var = model(relative); \
  if (!std::filesystem::exists(var)) return

TEST(PlyAssimp, TruncatedPondCloudNamesTheRowAndTheMissingBytes) {
  REQUIRE_MODEL(path, "PLY/pond.0.ply");
  // 70,051 rows of 31 bytes (6 floats, 3 uchars, 1 float) declared; the payload is 69 bytes short, so row 70,048
  // (0-based) is the first incomplete one.
  try {
    read_ply(path);
    FAIL() << "pond.0.ply read without error although it is 69 bytes short";
  } catch (const FormatError& error) {
    EXPECT_EQ(error.path(), path.string());
    EXPECT_EQ(error.where(), "vertex row 70048 of 70051");
    EXPECT_NE(std::string(error.what()).find("payload ends 69 bytes early"), std::string::npos) << error.what();
  }
}

TEST(PlyAssimp, EmptyFileIsAFormatError) {
  REQUIRE_MODEL(path, "invalid/empty.ply");
  try {
    read_ply(path);
    FAIL() << "an empty file read without error";
  } catch (const FormatError& error) {
    EXPECT_EQ(std::string(error.what()), path.string() + ": empty, 0 bytes");
  }
}

TEST(PlyAssimp, ListDeclaredOnTheVertexElementButMissingFromTheRows) {
  // issue623.ply declares vertex_indices on the vertex element (its face element is missing) while its rows carry
  // only six floats: a count mismatch, reported at the first row.
  REQUIRE_MODEL(path, "PLY/issue623.ply");
  try {
    read_ply(path);
    FAIL() << "issue623.ply read without error";
  } catch (const FormatError& error) {
    EXPECT_EQ(error.where(), "vertex row 0 of 24 (line 13)");
    EXPECT_NE(std::string(error.what()).find("'vertex_indices'"), std::string::npos) << error.what();
  }
}

TEST(PlyAssimp, AsciiCubeWithTrailingSpacesAndSizedTypeNames) {
  REQUIRE_MODEL(path, "PLY/cube.ply");
  const PlyFile ply = read_ply(path);
  EXPECT_EQ(ply.format, PlyFormat::kAscii);
  const std::vector<float> xyz = vertex_positions(ply, path.string());
  ASSERT_EQ(xyz.size(), 8u * 3);
  EXPECT_EQ(std::vector<float>(xyz.begin() + 3, xyz.begin() + 6), (std::vector<float>{0, 0, 1}));
  const PlyProperty* faces = ply.find("face")->find("vertex_index");
  ASSERT_NE(faces, nullptr);
  EXPECT_EQ(faces->count_type, PlyType::kUint8);
  EXPECT_EQ(faces->type, PlyType::kInt32);
  ASSERT_EQ(faces->offsets.size(), 7u);
  EXPECT_EQ(std::vector<double>(faces->values.begin() + 4, faces->values.begin() + 8), (std::vector<double>{7, 6, 5, 4}));
}

TEST(PlyAssimp, BinaryCubeMatchesTheAsciiCube) {
  REQUIRE_MODEL(binary_path, "PLY/cube_binary.ply");
  const PlyFile binary = read_ply(binary_path);
  EXPECT_EQ(binary.format, PlyFormat::kBinaryLittleEndian);
  EXPECT_EQ(binary.comments, (std::vector<std::string>{"VCGLIB generated"}));
  const PlyElement* face = binary.find("face");
  ASSERT_NE(face, nullptr);
  EXPECT_EQ(face->count, 12u);
  const PlyProperty* indices = face->find("vertex_indices");
  ASSERT_EQ(indices->offsets.size(), 13u);
  EXPECT_EQ(indices->values.size(), 36u) << "twelve triangles";
  // every corner of the unit cube, each once
  const std::vector<float> xyz = vertex_positions(binary);
  ASSERT_EQ(xyz.size(), 24u);
  int corners = 0;
  for (std::size_t i = 0; i < 8; ++i) corners |= 1 << (int(xyz[3 * i]) * 4 + int(xyz[3 * i + 1]) * 2 + int(xyz[3 * i + 2]));
  EXPECT_EQ(corners, 0xff);
}

TEST(PlyAssimp, FloatColorsAndUcharColorsKeepTheirTypes) {
  REQUIRE_MODEL(float_path, "PLY/float-color.ply");
  const PlyFile floats = read_ply(float_path);
  const PlyProperty* alpha = floats.find("vertex")->find("alpha");
  ASSERT_NE(alpha, nullptr);
  EXPECT_EQ(alpha->type, PlyType::kFloat32);
  REQUIRE_MODEL(points_path, "PLY/points.ply");
  const PlyFile points = read_ply(points_path);
  const PlyProperty* red = points.find("vertex")->find("red");
  ASSERT_NE(red, nullptr);
  EXPECT_EQ(red->type, PlyType::kUint8);
  EXPECT_EQ(points.find("vertex")->count, 4u);
  EXPECT_EQ(points.find("vertex")->find("nx")->values.size(), 4u);
}

TEST(PlyAssimp, BlenderMeshesReadAndSurviveEveryFormat) {
  for (const char* name : {"PLY/Wuson.ply", "PLY/cube_uv.ply"}) {
    REQUIRE_MODEL(path, name);
    const PlyFile ply = read_ply(path);
    EXPECT_FALSE(ply.comments.empty()) << name;
    const PlyElement* vertex = ply.find("vertex");
    ASSERT_NE(vertex, nullptr);
    for (const PlyProperty& property : vertex->properties) {
      EXPECT_EQ(property.values.size(), vertex->count) << name << " " << property.name;
      for (double v : property.values) ASSERT_TRUE(std::isfinite(v)) << name << " " << property.name;
    }
    for (PlyFormat format : {PlyFormat::kAscii, PlyFormat::kBinaryLittleEndian, PlyFormat::kBinaryBigEndian}) {
      PlyFile copy = ply;
      copy.format = format;
      const PlyFile back = parse_ply(serialize_ply(copy), "copy.ply");
      EXPECT_EQ(back.find("face")->find("vertex_indices")->values, ply.find("face")->find("vertex_indices")->values)
          << name << " as " << to_string(format);
      EXPECT_EQ(back.find("vertex")->find("s")->values, vertex->find("s")->values) << name;
    }
  }
  REQUIRE_MODEL(wuson, "PLY/Wuson.ply");
  const PlyFile ply = read_ply(wuson);
  EXPECT_EQ(ply.find("vertex")->count, 11184u);
  EXPECT_EQ(ply.find("face")->count, 3732u);
}

}  // namespace
}  // namespace flashot::io
