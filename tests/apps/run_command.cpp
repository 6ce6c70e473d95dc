#include "run_command.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace flashot::test {

namespace {

std::string quote(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

CommandResult run_shell(const std::string& command) {
  const std::filesystem::path folder = std::filesystem::temp_directory_path() /
                                       ("flashot-cli-run-" + std::to_string(::getpid()));
  std::filesystem::create_directories(folder);
  const auto out = folder / "stdout", err = folder / "stderr";
  const std::string line = command + " </dev/null >" + quote(out.string()) + " 2>" + quote(err.string());
  const int status = std::system(line.c_str());
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_file(out);
  result.err = read_file(err);
  std::filesystem::remove_all(folder);
  return result;
}

CommandResult run_flashot(const std::vector<std::string>& args) {
  std::string command = quote(FLASHOT_EXE);
  for (const std::string& a : args) command += " " + quote(a);
  return run_shell(command);
}

CommandResult run_flashot_in(const std::filesystem::path& folder, const std::vector<std::string>& args) {
  std::string command = "cd " + quote(folder.string()) + " && " + quote(FLASHOT_EXE);
  for (const std::string& a : args) command += " " + quote(a);
  return run_shell(command);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> result;
  std::stringstream stream(text);
  for (std::string line; std::getline(stream, line);) result.push_back(line);
  return result;
}

namespace {

// Folders made by fresh_folder, removed when the test program ends.
struct Cleanup {
  std::vector<std::filesystem::path> folders;
  ~Cleanup() {
    for (const auto& f : folders) {
      std::error_code ignored;
      std::filesystem::remove_all(f, ignored);
    }
  }
};
Cleanup cleanup;

}  // namespace

std::filesystem::path fresh_folder() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "suite";
  for (char& c : name) c = (c == '/') ? '_' : c;
  const auto folder = std::filesystem::temp_directory_path() /
                      ("flashot-cli-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  cleanup.folders.push_back(folder);
  return folder;
}

}  // namespace flashot::test
