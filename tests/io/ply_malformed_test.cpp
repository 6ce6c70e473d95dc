// Malformed PLY input: every problem must become a FormatError that names the file and the place — never a crash,
// never silently padded data, never an allocation sized by a hostile count.

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "flashot/io/errors.hpp"
#include "flashot/io/ply.hpp"

namespace flashot::io {
namespace {

constexpr std::uint64_t kSeed = 7;

std::vector<std::byte> bytes_of(std::string_view text) {
  const auto* first = reinterpret_cast<const std::byte*>(text.data());
  return {first, first + text.size()};
}

/// Parses `text` expecting a FormatError; returns its message (empty, with a test failure, if none was thrown).
std::string format_error(std::string_view text) {
  try {
    parse_ply(bytes_of(text), "bad.ply");
  } catch (const FormatError& error) {
    EXPECT_EQ(error.path(), "bad.ply");
    return error.what();
  }
  ADD_FAILURE() << "no FormatError for:\n" << text;
  return {};
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

/// A small binary file with a fixed-size element and a list element, built by the writer.
std::vector<std::byte> small_binary(PlyFormat format) {
  std::mt19937_64 rng(kSeed);
  PlyFile ply;
  ply.format = format;
  ply.comments = {"truncation test"};
  PlyElement& vertex = ply.elements.emplace_back();
  vertex.name = "vertex";
  vertex.count = 6;
  for (const char* axis : {"x", "y", "z"}) {
    PlyProperty& property = vertex.properties.emplace_back();
    property.name = axis;
    property.type = PlyType::kFloat32;
    for (std::size_t i = 0; i < vertex.count; ++i) {
      property.values.push_back(static_cast<float>(std::uniform_real_distribution<double>(-1, 1)(rng)));
    }
  }
  PlyElement& face = ply.elements.emplace_back();
  face.name = "face";
  face.count = 3;
  PlyProperty& indices = face.properties.emplace_back();
  indices.name = "vertex_indices";
  indices.is_list = true;
  indices.count_type = PlyType::kUint8;
  indices.type = PlyType::kInt32;
  indices.values = {0, 1, 2, 3, 4, 5, 0, 2, 4, 1};
  indices.offsets = {0, 3, 6, 10};
  return serialize_ply(ply);
}

TEST(PlyMalformed, EveryTruncationOfABinaryFileThrows) {
  for (PlyFormat format : {PlyFormat::kBinaryLittleEndian, PlyFormat::kBinaryBigEndian}) {
    const std::vector<std::byte> full = small_binary(format);
    ASSERT_NO_THROW(parse_ply(full, "full.ply"));
    for (std::size_t length = 0; length < full.size(); ++length) {
      EXPECT_THROW(parse_ply(std::span(full).first(length), "cut.ply"), FormatError)
          << to_string(format) << " cut at byte " << length << " of " << full.size();
    }
  }
}

TEST(PlyMalformed, EveryTruncationOfAnAsciiFileBeforeItsLastRowThrows) {
  const std::vector<std::byte> full = small_binary(PlyFormat::kAscii);
  const std::string text(reinterpret_cast<const char*>(full.data()), full.size());
  const std::size_t last_row = text.rfind('\n', text.size() - 2) + 1;
  for (std::size_t length = 0; length < last_row; ++length) {
    EXPECT_THROW(parse_ply(std::span(full).first(length), "cut.ply"), FormatError) << "cut at byte " << length;
  }
  // A cut inside the last row may still parse ("12" cut to "1"); it must not crash and must not invent rows.
  for (std::size_t length = last_row; length < full.size(); ++length) {
    try {
      const PlyFile ply = parse_ply(std::span(full).first(length), "cut.ply");
      EXPECT_EQ(ply.find("face")->find("vertex_indices")->offsets.size(), 4u);
    } catch (const FormatError&) {
    }
  }
}

TEST(PlyMalformed, TruncatedFixedRowsNameTheRowAndTheShortfall) {
  std::string text = "ply\nformat binary_little_endian 1.0\nelement vertex 4\nproperty float x\nproperty uchar c\n"
                     "end_header\n";
  text += std::string(5 * 2 + 3, '\0');  // two whole rows of 5 bytes, three bytes of the third
  const std::string message = format_error(text);
  EXPECT_CONTAINS(message, "vertex row 2 of 4");
  EXPECT_CONTAINS(message, "payload ends 7 bytes early");
}

TEST(PlyMalformed, HeaderProblemsNameTheLine) {
  EXPECT_EQ(std::string(format_error("")), "bad.ply: empty, 0 bytes");
  EXPECT_CONTAINS(format_error("PLY\nformat ascii 1.0\nend_header\n"), "expected 'ply'");
  EXPECT_CONTAINS(format_error("ply\nformat binary 1.0\nend_header\n"), "header line 2: unknown format 'binary'");
  EXPECT_CONTAINS(format_error("ply\nformat ascii 2.0\nend_header\n"), "unsupported version");
  EXPECT_CONTAINS(format_error("ply\nelement vertex 1\nend_header\n"), "before the 'format' line");
  EXPECT_CONTAINS(format_error("ply\nformat ascii 1.0\nelement vertex 1\nproperty half x\nend_header\n"),
                  "header line 4: unknown property type 'half'");
  EXPECT_CONTAINS(format_error("ply\nformat ascii 1.0\nelement vertex 1\nproperty list float int x\nend_header\n"),
                  "count type must be an integer");
  EXPECT_CONTAINS(format_error("ply\nformat ascii 1.0\nelement vertex -1\nend_header\n"), "non-negative integer");
  EXPECT_CONTAINS(format_error("ply\nformat ascii 1.0\nproperty float x\nend_header\n"), "before any 'element'");
  EXPECT_CONTAINS(format_error("ply\nformat ascii 1.0\nelement v 1\nproperty float x\nproperty float x\nend_header\n"),
                  "second property named 'x'");
  EXPECT_CONTAINS(format_error("ply\nformat ascii 1.0\nelement v 0\nelement v 0\nend_header\n"), "second element");
  EXPECT_CONTAINS(format_error("ply\nformat ascii 1.0\nelement v 1\nproperty float x\nproprety float y\nend_header\n"),
                  "header line 5: unknown keyword 'proprety'");
  EXPECT_CONTAINS(format_error("ply\nformat ascii 1.0\nelement v 1\nproperty float x\n"), "before 'end_header'");
  EXPECT_CONTAINS(format_error("ply\ncomment no format\nend_header\n"), "no 'format' line");
}

TEST(PlyMalformed, HeaderOnlyFileWithRowsDeclared) {
  EXPECT_CONTAINS(format_error("ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nend_header\n"),
                  "vertex row 0 of 3");
  EXPECT_CONTAINS(format_error("ply\nformat binary_little_endian 1.0\nelement vertex 3\nproperty float x\nend_header\n"),
                  "vertex row 0 of 3: payload ends 12 bytes early");
  // a header that declares no rows is a valid empty file
  EXPECT_NO_THROW(parse_ply(bytes_of("ply\nformat ascii 1.0\nelement vertex 0\nproperty float x\nend_header\n"), "e"));
}

TEST(PlyMalformed, AsciiTokensThatDoNotParseOrDoNotFit) {
  const std::string head = "ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty uchar c\nend_header\n";
  EXPECT_CONTAINS(format_error(head + "1 2\n1.5x 3\n"), "vertex row 1 of 2 (line 8): property 'x' (float): cannot read '1.5x'");
  EXPECT_CONTAINS(format_error(head + "1 256\n1 3\n"), "cannot read '256' as uchar");
  EXPECT_CONTAINS(format_error(head + "1 -1\n1 3\n"), "cannot read '-1' as uchar");
  EXPECT_CONTAINS(format_error(head + "1 2.0\n1 3\n"), "cannot read '2.0' as uchar");
  EXPECT_CONTAINS(format_error(head + "1e39 2\n1 3\n"), "cannot read '1e39' as float");
  EXPECT_CONTAINS(format_error(head + "1\n1 3\n"), "vertex row 0 of 2 (line 7): line ends before property 'c'");
  EXPECT_CONTAINS(format_error(head + "1 2 3\n1 3\n"), "unexpected value '3' after the last property");
}

TEST(PlyMalformed, CountMismatchesInEitherDirection) {
  const std::string ascii = "ply\nformat ascii 1.0\nelement vertex 2\nproperty int i\nend_header\n";
  EXPECT_CONTAINS(format_error(ascii + "1\n"), "vertex row 1 of 2");
  EXPECT_CONTAINS(format_error(ascii + "1\n2\n3\n"), "line 8: data after the last element");
  const std::string binary = "ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty uchar i\nend_header\n";
  EXPECT_CONTAINS(format_error(binary + "ab"), "1 bytes after the last element");
  // a newline after a binary payload is what some writers add; it is not data
  EXPECT_NO_THROW(parse_ply(bytes_of(binary + "a\n"), "newline.ply"));
}

TEST(PlyMalformed, NegativeAndHugeListLengthsAreRefusedBeforeAllocating) {
  const std::string binary = "ply\nformat binary_little_endian 1.0\nelement face 1\nproperty list int int v\nend_header\n";
  EXPECT_CONTAINS(format_error(binary + std::string("\xfd\xff\xff\xff", 4)), "face row 0 of 1: list 'v' has a negative length (-3)");
  EXPECT_CONTAINS(format_error(binary + std::string("\xff\xff\xff\x7f", 4) + std::string(8, '\0')),
                  "list 'v' has 2147483647 items of 4 bytes but only 8 bytes remain");
  const std::string ascii = "ply\nformat ascii 1.0\nelement face 1\nproperty list int int v\nend_header\n";
  EXPECT_CONTAINS(format_error(ascii + "-3 1 2 3\n"), "negative length");
  EXPECT_CONTAINS(format_error(ascii + "2000000000 1 2\n"), "declares 2000000000 items");
  EXPECT_CONTAINS(format_error(ascii + "3 1 2\n"), "declares 3 items but the line has only 4 characters left");
  EXPECT_CONTAINS(format_error(ascii + "3 1 2      \n"), "line ends after 2 of 3 items of list 'v'");
}

TEST(PlyMalformed, HugeElementCountsFailAtTheRowWhereDataEnds) {
  // 2^62 rows of 8 bytes: more than any file; must fail without reserving, naming where the data ran out.
  const std::string fixed = "ply\nformat binary_big_endian 1.0\nelement vertex 4611686018427387904\n"
                            "property double x\nend_header\n" + std::string(16, '\0');
  EXPECT_CONTAINS(format_error(fixed), "vertex row 2 of 4611686018427387904: payload ends more than 2^64 bytes early");
  const std::string lists = "ply\nformat binary_little_endian 1.0\nelement face 18446744073709551615\n"
                            "property list uchar int v\nend_header\n" + std::string(3, '\0');
  EXPECT_CONTAINS(format_error(lists), "face row 3 of 18446744073709551615: payload ends inside the row");
  const std::string ascii = "ply\nformat ascii 1.0\nelement vertex 18446744073709551615\nproperty float x\n"
                            "end_header\n1\n2\n";
  EXPECT_CONTAINS(format_error(ascii), "vertex row 2 of 18446744073709551615");
  EXPECT_CONTAINS(format_error("ply\nformat ascii 1.0\nelement vertex 18446744073709551616\nend_header\n"),
                  "non-negative integer");
}

}  // namespace
}  // namespace flashot::io
