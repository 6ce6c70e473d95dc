// PLY round trips (every scalar type × format, lists, comments), header variants written by other tools (aliases,
// CRLF, trailing spaces), byte order checked against bytes laid out by hand, and the point-cloud helpers.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "flashot/io/errors.hpp"
#include "flashot/io/ply.hpp"

namespace flashot::io {

// Readable parameter names in test output ("binary_big_endian", not a byte dump).
void PrintTo(PlyFormat format, std::ostream* os) { *os << to_string(format); }

namespace {

constexpr std::uint64_t kSeed = 20261129;
constexpr std::size_t kRows = 257;  // not a multiple of any block size, so partial blocks are exercised
constexpr PlyType kAllTypes[] = {PlyType::kInt8,  PlyType::kUint8,  PlyType::kInt16,   PlyType::kUint16,
                                 PlyType::kInt32, PlyType::kUint32, PlyType::kFloat32, PlyType::kFloat64};
constexpr PlyType kCountTypes[] = {PlyType::kInt8,  PlyType::kUint8,  PlyType::kInt16,
                                   PlyType::kUint16, PlyType::kInt32, PlyType::kUint32};

std::vector<std::byte> bytes_of(std::string_view text) {
  const auto* first = reinterpret_cast<const std::byte*>(text.data());
  return {first, first + text.size()};
}

PlyFile parse_text(std::string_view text) { return parse_ply(bytes_of(text), "test.ply"); }

/// Values that exercise `type`: its extremes, zero, and random ones it represents exactly.
std::vector<double> sample_values(PlyType type, std::size_t n, std::mt19937_64& rng) {
  std::vector<double> values(n);
  auto fill = [&]<class T>() {
    using Limits = std::numeric_limits<T>;
    for (double& v : values) {
      if constexpr (std::is_integral_v<T>) {
        v = static_cast<double>(std::uniform_int_distribution<std::int64_t>(Limits::min(), Limits::max())(rng));
      } else {
        // random bit patterns cover every exponent, subnormals and NaN included
        using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
        const T x = std::bit_cast<T>(static_cast<Bits>(rng()));
        v = std::isnan(x) ? 0.5 : static_cast<double>(x);
      }
    }
    values[0] = static_cast<double>(Limits::lowest());
    values[1] = static_cast<double>(Limits::max());
    values[2] = 0;
    if constexpr (!std::is_integral_v<T>) {
      values[3] = static_cast<double>(Limits::denorm_min());
      values[4] = -0.0;
      values[5] = static_cast<double>(T(0.1));
    }
  };
  switch (type) {
    case PlyType::kInt8: fill.operator()<std::int8_t>(); break;
    case PlyType::kUint8: fill.operator()<std::uint8_t>(); break;
    case PlyType::kInt16: fill.operator()<std::int16_t>(); break;
    case PlyType::kUint16: fill.operator()<std::uint16_t>(); break;
    case PlyType::kInt32: fill.operator()<std::int32_t>(); break;
    case PlyType::kUint32: fill.operator()<std::uint32_t>(); break;
    case PlyType::kFloat32: fill.operator()<float>(); break;
    case PlyType::kFloat64: fill.operator()<double>(); break;
  }
  return values;
}

/// A file with one vertex property of every type, a face element with a list of every count type, a property-less
/// element, comments and obj_info.
PlyFile make_everything(PlyFormat format) {
  std::mt19937_64 rng(kSeed);
  PlyFile ply;
  ply.format = format;
  ply.comments = {"made by flashot tests", "  leading spaces kept", ""};
  ply.obj_info = {"seed 20261129"};
  PlyElement& vertex = ply.elements.emplace_back();
  vertex.name = "vertex";
  vertex.count = kRows;
  for (PlyType type : kAllTypes) {
    PlyProperty& property = vertex.properties.emplace_back();
    property.name = "p_" + to_string(type);
    property.type = type;
    property.values = sample_values(type, kRows, rng);
  }
  PlyElement& face = ply.elements.emplace_back();
  face.name = "face";
  face.count = 41;
  std::size_t k = 0;
  for (PlyType count_type : kCountTypes) {
    PlyProperty& property = face.properties.emplace_back();
    property.name = "list_" + to_string(count_type);
    property.is_list = true;
    property.count_type = count_type;
    property.type = kAllTypes[k++ % std::size(kAllTypes)];
    property.offsets.push_back(0);
    std::vector<double> pool = sample_values(property.type, 41 * 6, rng);
    for (std::size_t row = 0; row < face.count; ++row) {
      const std::size_t length = std::uniform_int_distribution<std::size_t>(0, 5)(rng);
      for (std::size_t i = 0; i < length; ++i) property.values.push_back(pool[row * 6 + i]);
      property.offsets.push_back(property.values.size());
    }
  }
  PlyProperty& scalar_after_lists = face.properties.emplace_back();
  scalar_after_lists.name = "quality";
  scalar_after_lists.type = PlyType::kFloat64;
  scalar_after_lists.values = sample_values(PlyType::kFloat64, face.count, rng);
  PlyElement& marker = ply.elements.emplace_back();
  marker.name = "marker";
  marker.count = 3;
  return ply;
}

/// Bitwise equality of values: distinguishes -0 from 0, which a user converting units would notice.
void expect_same(const PlyFile& a, const PlyFile& b) {
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.comments, b.comments);
  EXPECT_EQ(a.obj_info, b.obj_info);
  ASSERT_EQ(a.elements.size(), b.elements.size());
  for (std::size_t e = 0; e < a.elements.size(); ++e) {
    const PlyElement& x = a.elements[e];
    const PlyElement& y = b.elements[e];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.count, y.count);
    ASSERT_EQ(x.properties.size(), y.properties.size()) << x.name;
    for (std::size_t p = 0; p < x.properties.size(); ++p) {
      const PlyProperty& u = x.properties[p];
      const PlyProperty& v = y.properties[p];
      const std::string where = x.name + "." + u.name;
      EXPECT_EQ(u.name, v.name);
      EXPECT_EQ(u.type, v.type) << where;
      EXPECT_EQ(u.is_list, v.is_list) << where;
      if (u.is_list) {
        EXPECT_EQ(u.count_type, v.count_type) << where;
        EXPECT_EQ(u.offsets, v.offsets) << where;
      }
      ASSERT_EQ(u.values.size(), v.values.size()) << where;
      for (std::size_t i = 0; i < u.values.size(); ++i) {
        ASSERT_EQ(std::bit_cast<std::uint64_t>(u.values[i]), std::bit_cast<std::uint64_t>(v.values[i]))
            << where << "[" << i << "]: " << u.values[i] << " vs " << v.values[i];
      }
    }
  }
}

class PlyRoundTrip : public ::testing::TestWithParam<PlyFormat> {};

TEST_P(PlyRoundTrip, EveryTypeListAndCommentIsExact) {
  const PlyFile original = make_everything(GetParam());
  const std::vector<std::byte> bytes = serialize_ply(original);
  expect_same(original, parse_ply(bytes, "memory.ply"));
}

TEST_P(PlyRoundTrip, ConvertingBetweenFormatsKeepsEveryValue) {
  const PlyFile original = make_everything(GetParam());
  for (PlyFormat other : {PlyFormat::kAscii, PlyFormat::kBinaryLittleEndian, PlyFormat::kBinaryBigEndian}) {
    PlyFile converted = parse_ply(serialize_ply(original), "memory.ply");
    converted.format = other;
    PlyFile back = parse_ply(serialize_ply(converted), "converted.ply");
    back.format = GetParam();
    expect_same(original, back);
  }
}

TEST_P(PlyRoundTrip, WritePlyRenamesOverTheTargetAndLeavesNoTemporaryFile) {
  const std::filesystem::path folder = std::filesystem::temp_directory_path() /
                                       ("flashot_ply_test_" + std::to_string(static_cast<int>(GetParam())) + "_" +
                                        std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  const std::filesystem::path path = folder / "cloud.ply";
  {
    std::ofstream old(path);
    old << "an older file that write_ply replaces";
  }
  const PlyFile original = make_everything(GetParam());
  write_ply(path, original);
  expect_same(original, read_ply(path));
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(folder)) ++entries;
  EXPECT_EQ(entries, 1u) << "write_ply left a temporary file in " << folder;
  std::filesystem::remove_all(folder);
}

TEST(PlyFiles, MissingFilesAndFoldersAreIoErrorsNamingThePath) {
  const std::filesystem::path missing = std::filesystem::temp_directory_path() / "flashot_no_such_folder" / "x.ply";
  try {
    read_ply(missing);
    FAIL() << "read a file that does not exist";
  } catch (const IoError& error) {
    EXPECT_NE(std::string(error.what()).find(missing.string()), std::string::npos) << error.what();
  }
  EXPECT_THROW(write_ply(missing, make_point_cloud(std::vector<float>{1, 2, 3}, 1)), IoError);
  EXPECT_FALSE(std::filesystem::exists(missing.parent_path()));
}

INSTANTIATE_TEST_SUITE_P(AllFormats, PlyRoundTrip,
                         ::testing::Values(PlyFormat::kAscii, PlyFormat::kBinaryLittleEndian,
                                           PlyFormat::kBinaryBigEndian),
                         [](const auto& info) { return to_string(info.param); });

TEST(PlyRead, TypeAliasesMeanTheSameTypes) {
  const PlyFile ply = parse_text(
      "ply\nformat ascii 1.0\nelement vertex 1\n"
      "property int8 a\nproperty uint8 b\nproperty int16 c\nproperty uint16 d\n"
      "property int32 e\nproperty uint32 f\nproperty float32 g\nproperty float64 h\n"
      "property list uint8 int32 i\nend_header\n"
      "-128 255 -32768 65535 -2147483648 4294967295 0.1 0.1 2 7 -7\n");
  const PlyElement& vertex = ply.elements.at(0);
  const PlyType expected[] = {PlyType::kInt8,  PlyType::kUint8,  PlyType::kInt16,   PlyType::kUint16,
                              PlyType::kInt32, PlyType::kUint32, PlyType::kFloat32, PlyType::kFloat64};
  for (std::size_t k = 0; k < 8; ++k) EXPECT_EQ(vertex.properties[k].type, expected[k]) << k;
  EXPECT_EQ(vertex.properties[0].values[0], -128);
  EXPECT_EQ(vertex.properties[5].values[0], 4294967295.0);
  EXPECT_EQ(vertex.properties[6].values[0], static_cast<double>(0.1f)) << "float properties keep float precision";
  EXPECT_EQ(vertex.properties[7].values[0], 0.1);
  const PlyProperty& list = vertex.properties[8];
  EXPECT_EQ(list.count_type, PlyType::kUint8);
  EXPECT_EQ(list.type, PlyType::kInt32);
  EXPECT_EQ(list.values, (std::vector<double>{7, -7}));
}

TEST(PlyRead, CrlfLinesTrailingSpacesAndBlankLines) {
  const PlyFile ply = parse_text(
      "ply \r\nformat ascii 1.0   \r\ncomment  two words \r\nelement vertex 2\t\r\nproperty float x  \r\n"
      "property uchar red\r\n\r\nend_header  \r\n1.5 3 \r\n\r\n-2 4\r\n");
  EXPECT_EQ(ply.comments, (std::vector<std::string>{" two words"}));
  const PlyElement* vertex = ply.find("vertex");
  ASSERT_NE(vertex, nullptr);
  EXPECT_EQ(vertex->find("x")->values, (std::vector<double>{1.5, -2}));
  EXPECT_EQ(vertex->find("red")->values, (std::vector<double>{3, 4}));
}

TEST(PlyRead, AsciiNanInfinityUnderflowAndSignsSurviveARoundTrip) {
  const PlyFile ply = parse_text(
      "ply\nformat ascii 1.0\nelement v 4\nproperty float x\nproperty double y\nend_header\n"
      "nan -nan\n-inf inf\n1e-46 1e-400\n+2 -0\n");
  const std::vector<double>& x = ply.elements[0].properties[0].values;
  const std::vector<double>& y = ply.elements[0].properties[1].values;
  EXPECT_TRUE(std::isnan(x[0]));
  EXPECT_TRUE(std::isnan(y[0]) && std::signbit(y[0]));
  EXPECT_EQ(x[1], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(y[1], std::numeric_limits<double>::infinity());
  EXPECT_EQ(x[2], 0.0) << "below float's smallest subnormal rounds to zero, as strtof does";
  EXPECT_EQ(y[2], 0.0);
  EXPECT_EQ(x[3], 2.0);
  EXPECT_TRUE(y[3] == 0.0 && std::signbit(y[3]));
  const PlyFile back = parse_ply(serialize_ply(ply), "back.ply");
  const std::vector<double>& y_back = back.elements[0].properties[1].values;
  EXPECT_TRUE(std::isnan(y_back[0]) && std::signbit(y_back[0]));
  EXPECT_TRUE(y_back[3] == 0.0 && std::signbit(y_back[3]));
}

TEST(PlyRead, BinaryPayloadAfterCrlfEndHeaderStartsAfterTheLf) {
  std::string text = "ply\r\nformat binary_little_endian 1.0\r\nelement vertex 1\r\nproperty ushort v\r\nend_header\r\n";
  text += std::string("\x0a\x0d", 2);  // 0x0d0a = 3338: bytes that look like a line ending
  const PlyFile ply = parse_text(text);
  EXPECT_EQ(ply.elements.at(0).properties.at(0).values, (std::vector<double>{3338}));
}

TEST(PlyRead, BigAndLittleEndianBytesLaidOutByHand) {
  const std::string head = "element v 1\nproperty short s\nproperty float f\nproperty double d\n"
                           "property list uchar uint l\nend_header\n";
  // short -2, float 1.5, double -0.25, list of one uint 0x01020304
  const std::string big = std::string("\xff\xfe", 2) + std::string("\x3f\xc0\x00\x00", 4) +
                          std::string("\xbf\xd0\x00\x00\x00\x00\x00\x00", 8) + std::string("\x01\x01\x02\x03\x04", 5);
  const std::string little = std::string("\xfe\xff", 2) + std::string("\x00\x00\xc0\x3f", 4) +
                             std::string("\x00\x00\x00\x00\x00\x00\xd0\xbf", 8) +
                             std::string("\x01\x04\x03\x02\x01", 5);
  for (const auto& [format, payload] : {std::pair{std::string("binary_big_endian"), big},
                                        std::pair{std::string("binary_little_endian"), little}}) {
    const PlyFile ply = parse_text("ply\nformat " + format + " 1.0\n" + head + payload);
    const PlyElement& v = ply.elements.at(0);
    EXPECT_EQ(v.properties[0].values[0], -2) << format;
    EXPECT_EQ(v.properties[1].values[0], 1.5) << format;
    EXPECT_EQ(v.properties[2].values[0], -0.25) << format;
    EXPECT_EQ(v.properties[3].values, (std::vector<double>{0x01020304})) << format;
    // and the writer lays the bytes out the same way
    const std::vector<std::byte> written = serialize_ply(ply);
    const std::string tail(reinterpret_cast<const char*>(written.data()) + written.size() - payload.size(),
                           payload.size());
    EXPECT_EQ(tail, payload) << format;
  }
}

TEST(PlyRead, ElementsOfAnyNameWithoutPropertiesOrRowsAreKept) {
  const PlyFile ply = parse_text(
      "ply\nformat ascii 1.0\nobj_info scanner 7\nelement vertex 2\nproperty double x\nelement face 0\n"
      "property list uchar int vertex_indices\nelement camera 1\nproperty float view_px\n"
      "element nothing 5\nend_header\n1e300\n-4.5\n12.25\n");
  EXPECT_EQ(ply.obj_info, (std::vector<std::string>{"scanner 7"}));
  ASSERT_EQ(ply.elements.size(), 4u);
  EXPECT_EQ(ply.find("vertex")->find("x")->values, (std::vector<double>{1e300, -4.5}));
  EXPECT_EQ(ply.find("face")->count, 0u);
  EXPECT_EQ(ply.find("face")->find("vertex_indices")->offsets, (std::vector<std::size_t>{0}));
  EXPECT_EQ(ply.find("camera")->find("view_px")->values, (std::vector<double>{12.25}));
  EXPECT_EQ(ply.find("nothing")->count, 5u);
  EXPECT_EQ(ply.find("missing"), nullptr);
}

TEST(PlyRead, FreeTextBeforeTheFirstElementIsKeptAsAComment) {
  // Blender 2.47 wrote this line without a 'comment' keyword (assimp's Wuson.ply).
  const PlyFile ply = parse_text(
      "ply\nformat ascii 1.0\nCreated by Blender3D 247 - www.blender.org, source file: \nelement vertex 1\n"
      "property float x\nend_header\n2\n");
  EXPECT_EQ(ply.comments, (std::vector<std::string>{"Created by Blender3D 247 - www.blender.org, source file:"}));
}

TEST(PlyWrite, RejectsInconsistentElementsAndUnrepresentableValues) {
  PlyFile ply = make_point_cloud(std::vector<float>{1, 2, 3, 4, 5, 6}, 2);
  ply.elements[0].properties[1].values.pop_back();
  EXPECT_THROW(serialize_ply(ply), std::invalid_argument);

  PlyFile colors = make_point_cloud(std::vector<float>{1, 2, 3}, 1);
  PlyProperty& red = colors.elements[0].properties.emplace_back();
  red.name = "red";
  red.type = PlyType::kUint8;
  red.values = {256};
  try {
    serialize_ply(colors);
    FAIL() << "256 written as uchar";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("vertex.red"), std::string::npos) << error.what();
  }
  red.values = {2.5};
  colors.format = PlyFormat::kAscii;
  EXPECT_THROW(serialize_ply(colors), std::invalid_argument);
  red.values = {255};
  red.name = "has space";
  EXPECT_THROW(serialize_ply(colors), std::invalid_argument);
}

TEST(PlyPointCloud, PositionsRoundTripInFloatAndDouble) {
  const std::vector<float> xyz = {0.1f, -2.0f, 3e-8f, 4.5f, 1e30f, -0.0f};
  for (bool double_coordinates : {false, true}) {
    const PlyFile ply = make_point_cloud(xyz, 2, double_coordinates);
    const PlyFile back = parse_ply(serialize_ply(ply), "cloud.ply");
    EXPECT_EQ(back.find("vertex")->find("x")->type, double_coordinates ? PlyType::kFloat64 : PlyType::kFloat32);
    const std::vector<float> positions = vertex_positions(back);
    ASSERT_EQ(positions.size(), xyz.size());
    EXPECT_EQ(std::memcmp(positions.data(), xyz.data(), xyz.size() * sizeof(float)), 0);
  }
  EXPECT_THROW(make_point_cloud(xyz, 3), std::invalid_argument);
}

TEST(PlyPointCloud, PositionsNameWhatIsMissing) {
  const PlyFile no_vertex = parse_text("ply\nformat ascii 1.0\nelement face 0\nend_header\n");
  try {
    vertex_positions(no_vertex, "scan.ply");
    FAIL() << "no exception";
  } catch (const FormatError& error) {
    EXPECT_EQ(error.path(), "scan.ply");
    EXPECT_NE(std::string(error.what()).find("face"), std::string::npos) << error.what();
  }
  const PlyFile no_z = parse_text("ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n"
                                  "end_header\n1 2\n");
  try {
    vertex_positions(no_z, "flat.ply");
    FAIL() << "no exception";
  } catch (const FormatError& error) {
    EXPECT_NE(std::string(error.what()).find("'z'"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace flashot::io
