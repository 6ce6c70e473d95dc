#pragma once
// One zarr array (format 2 or 3): its metadata, and reads of whole arrays or of a range of the leading dimension,
// chunk by chunk through the codec chain (blosc, zstd, gzip/zlib, bytes/endian, crc32c, vlen-utf8, and v3's
// sharding_indexed with partial shard reads). Private to flashot::io (docs/io-zarr.md).

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zarr/store.hpp"

namespace flashot::io::zarr {

/// The element type of an array.
struct DType {
  enum class Kind { kBool, kInt, kUInt, kFloat, kString, kFixedBytes, kFixedUnicode };
  Kind kind = Kind::kFloat;
  std::size_t size = 4;     ///< bytes per element (0 for variable-length strings)
  bool big_endian = false;  ///< v2 '>' dtypes (v3: the bytes codec says)
  std::string name() const;  ///< numpy-style: "float32", "int64", "bool", "string"
  bool numeric() const { return kind == Kind::kInt || kind == Kind::kUInt || kind == Kind::kFloat; }
  bool text() const { return kind == Kind::kString || kind == Kind::kFixedBytes || kind == Kind::kFixedUnicode; }
};

struct ArrayMeta;  // array.cpp

class Array {
 public:
  /// Parses `meta` (the array's .zarray or zarr.json document) at `path` inside `store`. Throws FormatError
  /// naming the store, the array and the value for anything unsupported or inconsistent.
  Array(const Store& store, std::string path, const nlohmann::json& meta, int format);
  ~Array();
  Array(Array&&) noexcept;

  const std::vector<std::uint64_t>& shape() const;
  const DType& dtype() const;
  std::uint64_t elements() const;

  /// Rows [row0, row0 + rows) of the leading dimension (all of the others), as native-endian elements of the
  /// array's dtype, row-major, into `out` (rows · row_elements · dtype().size bytes). A 0-D array has one row.
  /// Chunks are decoded on up to `threads` threads.
  void read_rows(std::uint64_t row0, std::uint64_t rows, void* out, unsigned threads = 1) const;
  /// The whole string array (vlen-utf8 / fixed bytes / fixed unicode), 1-D or 0-D.
  std::vector<std::string> read_strings() const;

  [[noreturn]] void fail(const std::string& problem) const;

 private:
  std::unique_ptr<ArrayMeta> meta_;
};

/// Parses a JSON document from the store, FormatError naming the key and the parse error.
nlohmann::json parse_json(const std::string& store, const std::string& key, const std::string& text);

/// The CRC-32C (Castagnoli) of `data`, as zarr v3's crc32c codec stores it.
std::uint32_t crc32c(const unsigned char* data, std::size_t size);

}  // namespace flashot::io::zarr
