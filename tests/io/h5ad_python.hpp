#pragma once
// Running the Python oracle (anndata/h5py from PyPI, FLASHOT_PYTHON) from the .h5ad tests. Only compiled when CMake
// was given FLASHOT_PYTHON; a missing module or data file then fails the tests instead of skipping them.

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace flashot::io::test {

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

struct PythonRun {
  int status = -1;
  std::string output;  ///< stdout and stderr together
};

/// Runs `python` (FLASHOT_PYTHON unless given) tests/io/python/<script> args…
inline PythonRun run_python(const std::string& script, const std::vector<std::string>& args,
                            const std::string& python = FLASHOT_PYTHON) {
  std::string command = shell_quote(python) + " " +
                        shell_quote(std::string(FLASHOT_H5AD_PYTHON_DIR) + "/" + script);
  for (const auto& a : args) command += " " + shell_quote(a);
  command += " 2>&1";
  PythonRun run;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    run.output = "cannot start " + command;
    return run;
  }
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) run.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

inline std::filesystem::path pbmc68k_path() {
  return std::filesystem::path(FLASHOT_H5AD_DATA_DIR) / "10x_pbmc68k_reduced.h5ad";
}

/// The fixture files written by make_h5ad_fixtures.py into `dir` by `python` with `args` after the folder,
/// generated once per build tree (ctest runs test processes in parallel: a file lock lets one of them generate while
/// the others wait). Regenerated when the scripts change. Returns an empty path and sets `error` on failure.
inline std::filesystem::path fixture_dir(const std::string& python, const std::filesystem::path& dir,
                                         const std::vector<std::string>& args, std::string& error) {
  namespace fs = std::filesystem;
  fs::create_directories(dir.parent_path());
  const int lock = ::open((dir.string() + ".lock").c_str(), O_CREAT | O_RDWR, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    error = "cannot lock " + dir.string() + ".lock";
    if (lock >= 0) ::close(lock);
    return {};
  }
  std::ostringstream version;
  for (const char* script : {"make_h5ad_fixtures.py", "h5ad_expect.py"}) {
    const auto time = fs::last_write_time(fs::path(FLASHOT_H5AD_PYTHON_DIR) / script);
    version << script << ' ' << time.time_since_epoch().count() << '\n';
  }
  version << python << '\n';
  for (const auto& a : args) version << a << '\n';
  const fs::path stamp = dir / "stamp.txt";
  std::string current;
  if (std::ifstream in(stamp); in) current.assign(std::istreambuf_iterator<char>(in), {});
  fs::path result = dir;
  if (current != version.str()) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    std::vector<std::string> all = {dir.string()};
    all.insert(all.end(), args.begin(), args.end());
    const PythonRun run = run_python("make_h5ad_fixtures.py", all, python);
    if (run.status != 0) {
      error = python + " make_h5ad_fixtures.py failed (status " + std::to_string(run.status) + "):\n" + run.output;
      result.clear();
    } else {
      std::ofstream(stamp) << version.str();
    }
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
  return result;
}

/// The fixtures of the current PyPI anndata, with the pbmc68k_reduced expectations.
inline std::filesystem::path fixture_dir(std::string& error) {
  if (!std::filesystem::exists(pbmc68k_path())) {
    error = "the pbmc68k_reduced data file is missing: " + pbmc68k_path().string() +
            " (scripts/python-env.sh extracts it from the scanpy wheel)";
    return {};
  }
  return fixture_dir(FLASHOT_PYTHON, FLASHOT_H5AD_FIXTURE_DIR, {pbmc68k_path().string()}, error);
}

}  // namespace flashot::io::test
