#pragma once
// All-or-nothing outputs: every file a command writes goes first to a temporary name in its destination folder,
// and only when every one of them is complete are they renamed into place. A run that fails (exception, Ctrl-C
// handled by the caller) leaves none of its outputs behind, not even the ones finished before the failure.

#include <filesystem>
#include <string>
#include <vector>

namespace flashot::workflow {

class OutputSet {
 public:
  OutputSet() = default;
  /// Removes every staged file not yet committed.
  ~OutputSet();
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;

  /// Registers `destination` and returns the temporary path to write it to (same folder, same extension, hidden
  /// name). Throws std::invalid_argument if `destination` was already staged or its folder does not exist.
  std::filesystem::path stage(const std::filesystem::path& destination);
  /// Renames every staged file over its destination. Throws std::runtime_error naming the file if one is missing
  /// or a rename fails (the staged files not yet renamed are then removed).
  void commit();

 private:
  struct Entry {
    std::filesystem::path temporary;
    std::filesystem::path destination;
  };
  std::vector<Entry> entries_;
  bool committed_ = false;
};

/// Writes `text` to `path` through a temporary file in the same folder renamed at the end.
void write_text_atomically(const std::filesystem::path& path, const std::string& text);

}  // namespace flashot::workflow
