#pragma once
// Runs the flashot binary (or any command) through the shell and captures what a user would see.

#include <filesystem>
#include <string>
#include <vector>

namespace flashot::test {

struct CommandResult {
  int exit_code = -1;
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

/// Runs `FLASHOT_EXE args…` (each argument shell-quoted); stdin is /dev/null.
CommandResult run_flashot(const std::vector<std::string>& args);
/// The same, run from `folder` (relative paths in `args` are relative to it).
CommandResult run_flashot_in(const std::filesystem::path& folder, const std::vector<std::string>& args);
/// Runs a shell command line as it is.
CommandResult run_shell(const std::string& command);
/// Lines of `text` without the trailing empty one.
std::vector<std::string> lines(const std::string& text);
/// A fresh empty folder under the system temp folder, named after the running test.
std::filesystem::path fresh_folder();
std::string read_file(const std::filesystem::path& path);

}  // namespace flashot::test
