#pragma once
// What a run will read and write, checked before any data is read (docs/cli.md, "Checks before any data is read"):
//
// - RunPlan gathers every input path and every output path of a command (or of a GUI save) and checks them
//   together: no output is an input or another output, however the two are spelled (the same text, `./name`, an
//   absolute path, a symbolic link to the file or to a folder on its way, a hard link: device and inode where the
//   file exists), every output's folder exists and accepts a new file, and no output names a folder. Only stat,
//   access and one probe file per output folder (created and removed at once): well under a millisecond a path.
// - check_pair / check_points compare the options that name data (obsm key, --use-x, row filters, the label column)
//   with the files' metadata alone (obsm keys and shapes, obs column names, whether X exists, PLY headers), so a
//   misspelt name is reported before the large arrays are read and long before a solve.

#include <cstddef>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashot/workflow/dataset.hpp"

namespace flashot::workflow {

/// A path a run cannot use as given. what() reads "<option> <path> <why>", e.g.
/// "--report A.h5ad is the input TARGET (same file)" or "-o out/x.h5ad: folder out does not exist".
class PathError : public std::invalid_argument {
 public:
  PathError(std::string option, std::filesystem::path path, const std::string& message)
      : std::invalid_argument(message), option_(std::move(option)), path_(std::move(path)) {}
  /// The output's name as the user gave it: "-o", "--report", … (or "the report" for the GUI).
  const std::string& option() const noexcept { return option_; }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::string option_;
  std::filesystem::path path_;
};

class RunPlan {
 public:
  /// An input read by the run. `role` names it in messages ("SOURCE", "TARGET", "POINTS", "--solution"). An empty
  /// path is ignored (a data set the GUI generated in memory).
  RunPlan& input(std::string role, std::filesystem::path path);
  /// An output written by the run. `option` names it in messages ("-o", "--report", "--coupling", …).
  RunPlan& output(std::string option, std::filesystem::path path);

  /// Checks, in two passes over the outputs in the order given (so a clash with an input is reported before a
  /// folder problem):
  /// 1. no output is an input or an earlier output — the same path however spelled, a symbolic link to the other
  ///    file (also one whose target does not exist yet) or through a linked folder, or a hard link (same device
  ///    and inode) → "<option> <path> is the input <role> [<its path>] (same file[: how])" or
  ///    "<option> <path> is also the output <option> [<its path>] (same file[: how])"; and no output ends in a
  ///    folder name ("out/", ".") or names an existing folder or other non-regular file (a device such as
  ///    /dev/null, a FIFO) → "<option> <path> is a folder" / "exists and is not a regular file";
  /// 2. every output's folder exists, is a folder and takes a new file (access() and a probe file, so a read-only
  ///    mount refuses also root) → "<option> <path>: folder <f> does not exist" / "is not writable (<why>)".
  /// Inputs themselves are not required to exist here: their readers say what is wrong with them.
  /// Throws PathError for the first problem found; returns normally when every output can be written.
  void check() const;

 private:
  struct Entry {
    std::string name;
    std::filesystem::path path;
  };
  std::vector<Entry> inputs_;
  std::vector<Entry> outputs_;
};

/// Checks what load_pair(source, target, options) will read against the files' metadata alone (nothing large is
/// read): both files of one kind; .h5ad: the obsm key (`--key`, or X_pca in both) present in both with rows equal to
/// n_obs and the same width, or X present in both for `--use-x`; the `--source-where` / `--target-where` columns
/// among the obs columns; `label_column` (`--transfer-labels`, empty = none) among TARGET's obs columns. .ply:
/// a vertex element with x, y, z, the filter and label names among its scalar vertex properties, and no --key or
/// --use-x. Throws std::invalid_argument naming the option, the file and the value and listing what the file has
/// ("--transfer-labels louvain: TARGET t.h5ad has no obs column 'louvain' (obs columns: cell_type, batch)");
/// io::IoError / io::FormatError for files that cannot be opened or whose metadata is malformed.
void check_pair(const std::filesystem::path& source, const std::filesystem::path& target, const LoadOptions& options,
                const std::string& label_column = {});

/// Checks what load_points(path, key, where) will read, metadata only, and returns the points' dimension (the
/// obsm entry's width, 3 for PLY). `role` names the file ("POINTS"), `key_option` where the key came from
/// ("--key", or "the solution's key"), `where_option` the filter's option ("--where"). Throws as check_pair.
std::size_t check_points(const std::filesystem::path& path, const std::string& key,
                         const std::optional<RowFilter>& where, const std::string& role = "POINTS",
                         const std::string& key_option = "--key", const std::string& where_option = "--where");

}  // namespace flashot::workflow
