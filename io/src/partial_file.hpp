#pragma once
// How every flashot::io writer puts a file in place: the bytes go to a partial file beside the destination, named
//   .<destination name>.flashot-partial-<pid>-<n>
// (hidden, and never ending in .h5ad / .ply, so no glob for outputs picks it up), which is synced and renamed over
// the destination only when complete. A writer that fails removes it; one that is killed (SIGKILL, power loss)
// leaves it behind under that name, and the destination keeps its previous content (or stays absent).

#include <filesystem>
#include <string>

namespace flashot::io::detail {

/// A unique partial-file name in `target`'s folder (so the final rename stays on one file system).
std::filesystem::path partial_path_for(const std::filesystem::path& target);

/// errno in plain words where a user can act on it ("file size limit exceeded", "no space left on device", …),
/// else strerror.
std::string errno_cause(int error);

/// Copies `from`'s bytes into a new file `to` (copy_file_range, else read/write). Throws IoError starting with
/// `shown` and naming the system's cause in plain words (std::filesystem::copy_file reports a full disk as EIO).
void copy_contents(const std::filesystem::path& from, const std::filesystem::path& to, const std::string& shown);

/// Owns a partial file: removed on destruction unless commit() renamed it over the target.
class PartialFile {
 public:
  explicit PartialFile(const std::filesystem::path& target);
  ~PartialFile();
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;
  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& target() const { return target_; }
  /// fsync the partial file, rename it over the target, fsync the folder. Throws IoError naming the target.
  void commit();

 private:
  std::filesystem::path target_;
  std::filesystem::path path_;
  bool committed_ = false;
};

}  // namespace flashot::io::detail
