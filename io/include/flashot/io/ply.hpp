#pragma once
// PLY (Stanford polygon file) reading and writing: ascii, binary_little_endian, binary_big_endian; every scalar
// type and alias; every element and property kept by name, lists included. No VTK: VTK 9.1 drops doubles and
// custom properties (docs/design.md §3).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flashot::io {

enum class PlyFormat { kAscii, kBinaryLittleEndian, kBinaryBigEndian };
/// char/int8, uchar/uint8, short/int16, ushort/uint16, int/int32, uint/uint32, float/float32, double/float64.
enum class PlyType { kInt8, kUint8, kInt16, kUint16, kInt32, kUint32, kFloat32, kFloat64 };

std::string to_string(PlyFormat);  // "ascii", "binary_little_endian", "binary_big_endian"
std::string to_string(PlyType);    // canonical header names: "char", "uchar", …, "float", "double"

/// One property of an element, stored as double (exact for every PLY scalar type).
struct PlyProperty {
  std::string name;
  PlyType type = PlyType::kFloat32;  ///< scalar type, or the item type of a list
  bool is_list = false;
  PlyType count_type = PlyType::kUint8;  ///< the list-length type (lists only)
  std::vector<double> values;            ///< scalar: one per element; list: all items, concatenated
  std::vector<std::size_t> offsets;      ///< list only: element e's items are values[offsets[e] .. offsets[e+1])
};

struct PlyElement {
  std::string name;
  std::size_t count = 0;
  std::vector<PlyProperty> properties;
  const PlyProperty* find(std::string_view property) const;  ///< nullptr when absent
  PlyProperty* find(std::string_view property);
};

struct PlyFile {
  PlyFormat format = PlyFormat::kBinaryLittleEndian;
  std::vector<std::string> comments;
  std::vector<std::string> obj_info;
  std::vector<PlyElement> elements;
  const PlyElement* find(std::string_view element) const;  ///< nullptr when absent
  PlyElement* find(std::string_view element);
};

/// Reads a PLY file. Throws FormatError (path, header line or element/row) for anything malformed: missing
/// magic, unknown format or type, truncated payload, count mismatch, list lengths out of range; IoError if the
/// file cannot be opened.
PlyFile read_ply(const std::filesystem::path& path);
/// Parses a PLY image in memory; `name` is used in error messages (fuzzing entry point).
PlyFile parse_ply(std::span<const std::byte> bytes, std::string_view name);
/// The header alone — format, comments, every element's name and count, its properties' names and types — with
/// every `values` empty and the payload not read: what a command checks option names against before loading.
/// Throws as read_ply for a malformed header (a truncated payload is not noticed here).
PlyFile read_ply_header(const std::filesystem::path& path);
PlyFile parse_ply_header(std::span<const std::byte> bytes, std::string_view name);
/// Writes `ply` in `ply.format`, to a temporary file in the same folder renamed over `path` at the end, so a
/// failure never leaves a partial file. Throws std::invalid_argument for inconsistent elements (sizes ≠ count).
void write_ply(const std::filesystem::path& path, const PlyFile& ply);
/// Serializes to memory (what write_ply writes).
std::vector<std::byte> serialize_ply(const PlyFile& ply);

/// The vertex element's x, y, z as float32 (n×3, row-major). Throws FormatError if there is no vertex element
/// or it lacks x, y or z.
std::vector<float> vertex_positions(const PlyFile& ply, const std::string& path = "<memory>");
/// Builds a point-cloud PLY: vertex element with float x, y, z (or double, if `double_coordinates`).
PlyFile make_point_cloud(std::span<const float> xyz, std::size_t n, bool double_coordinates = false);

}  // namespace flashot::io
