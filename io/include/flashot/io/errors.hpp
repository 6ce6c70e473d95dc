#pragma once
// Errors thrown by flashot::io. Every message names the file and the place (PLY line / element; HDF5 object path).

#include <stdexcept>
#include <string>

namespace flashot::io {

/// A file that is not what its format says: truncated payload, count mismatch, unknown type, bad encoding.
/// what() reads "<path>: <where>: <problem>", or "<path>: <problem>" when `where` is empty (the whole file: "empty,
/// 0 bytes", "truncated: N of M bytes").
class FormatError : public std::runtime_error {
 public:
  FormatError(std::string path, std::string where, const std::string& problem)
      : std::runtime_error(path + ": " + (where.empty() ? std::string() : where + ": ") + problem),
        path_(std::move(path)),
        where_(std::move(where)) {}
  const std::string& path() const noexcept { return path_; }
  const std::string& where() const noexcept { return where_; }

 private:
  std::string path_;
  std::string where_;
};

/// A file that cannot be opened, read, written or renamed (the OS or the HDF5 library said no), or a missing
/// element that the caller asked for (names the key and what exists).
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace flashot::io
