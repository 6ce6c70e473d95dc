#pragma once
// Where a zarr store's keys live: a directory (one file per key) or a zip archive (one entry per key, the last
// entry of a name winning, as Python's zipfile does). Private to flashot::io (docs/io-zarr.md).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace flashot::io::zarr {

class Store {
 public:
  virtual ~Store() = default;
  /// The store as named in messages (the path the user gave).
  virtual const std::string& name() const = 0;
  /// Byte size of `key`, nullopt when absent.
  virtual std::optional<std::uint64_t> size(const std::string& key) const = 0;
  /// The whole value of `key`, nullopt when absent. Throws IoError/FormatError naming the store and key.
  virtual std::optional<std::string> get(const std::string& key) const = 0;
  /// Bytes [offset, offset + length) of `key`; FormatError naming the key when they are not all there.
  virtual std::string get_range(const std::string& key, std::uint64_t offset, std::uint64_t length) const = 0;
  /// Names directly below `prefix` ("" = the root; "obs" lists obs's children), sorted.
  virtual std::vector<std::string> list(const std::string& prefix) const = 0;
  /// Every key (for copying a store), in a stable order.
  virtual std::vector<std::string> keys() const = 0;
};

/// A directory store (`path` is a folder). Throws IoError when it is not one.
std::unique_ptr<Store> open_directory_store(const std::filesystem::path& path);
/// A zip archive on disk (`.zarr.zip`). Throws FormatError for a damaged or unsupported archive.
std::unique_ptr<Store> open_zip_store(const std::filesystem::path& path);
/// A zip archive in memory (the fuzzing entry point); `name` stands for the path in messages. `check_crc` = false
/// skips the entries' CRC-32 check (the fuzzer's mutations then reach the JSON and shard parsers instead of failing
/// the checksum).
std::unique_ptr<Store> open_zip_image(std::vector<std::byte> bytes, const std::string& name, bool check_crc = true);

/// Whether `path` names a zarr store by its name: `*.zarr` (a folder) or `*.zarr.zip` (any case; a trailing
/// separator is ignored).
bool is_zarr_name(const std::filesystem::path& path);
bool is_zip_name(const std::filesystem::path& path);

}  // namespace flashot::io::zarr
