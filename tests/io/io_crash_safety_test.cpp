// Nothing lost, nothing half-written: a writer killed part-way (SIGKILL, or the kernel's SIGXFSZ at a file size
// limit) leaves the previous file, or none, under the output's name, and its partial file only under a name no one
// takes for an output; a write that runs out of room leaves nothing and says which file and why. Each writer runs
// in a forked child, so the limits and signals touch only it.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flashot/io/anndata.hpp"
#include "flashot/io/errors.hpp"
#include "flashot/io/ply.hpp"
#include "h5ad_samples.hpp"

namespace flashot::io::test {
namespace {

std::vector<char> bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A partial file as the writers name it: hidden, flashot's, and never ending in the output's extension.
bool is_partial_of(const std::string& name, const std::string& output) {
  return name.rfind("." + output + ".flashot-partial-", 0) == 0 && !name.ends_with(".h5ad") && !name.ends_with(".ply");
}

// Content whose write takes a while (deflate of 16M random floats): long enough to be killed part-way.
H5adContent big_content() {
  std::mt19937 rng(kSeed);
  std::uniform_real_distribution<float> u(-1, 1);
  H5adContent c;
  const std::size_t rows = 4000, cols = 4000;
  c.obs_names = names("cell", rows);
  c.var_names = names("gene", cols);
  DenseMatrix x{rows, cols, std::vector<float>(rows * cols)};
  for (float& v : x.values) v = u(rng);
  c.x_dense = std::move(x);
  return c;
}

PlyFile big_cloud(std::size_t n) {
  PlyFile ply;
  ply.format = PlyFormat::kBinaryLittleEndian;
  PlyElement vertex;
  vertex.name = "vertex";
  vertex.count = n;
  for (const char* axis : {"x", "y", "z"}) {
    PlyProperty p;
    p.name = axis;
    p.type = PlyType::kFloat32;
    p.values.assign(n, 0.5);
    vertex.properties.push_back(std::move(p));
  }
  ply.elements.push_back(std::move(vertex));
  return ply;
}

// Runs `write` in a child; returns its wait status. `limit` > 0 sets RLIMIT_FSIZE there, with SIGXFSZ ignored when
// `ignore_sigxfsz` (then write() fails with EFBIG) or left to its default (the kernel kills the child mid-write).
// The child reports an exception's message through a pipe into `message`.
int run_child(const std::function<void()>& write, rlim_t limit, bool ignore_sigxfsz, std::string& message,
              const std::function<void(pid_t)>& while_running = {}) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    if (limit > 0) {
      if (ignore_sigxfsz) ::signal(SIGXFSZ, SIG_IGN);
      const rlimit r{limit, limit};
      ::setrlimit(RLIMIT_FSIZE, &r);
    }
    int code = 0;
    try {
      write();
    } catch (const std::exception& e) {
      const std::string what = e.what();
      (void)!::write(fds[1], what.data(), what.size());
      code = 2;
    }
    ::close(fds[1]);
    ::_exit(code);
  }
  ::close(fds[1]);
  if (while_running) while_running(child);
  int status = 0;
  ::waitpid(child, &status, 0);
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::read(fds[0], buffer, sizeof(buffer))) > 0) message.append(buffer, static_cast<std::size_t>(n));
  ::close(fds[0]);
  return status;
}

// Waits until a partial file of `output` in `dir` holds at least `bytes`, then SIGKILLs the child.
std::function<void(pid_t)> kill_when_partial(const fs::path& dir, const std::string& output, std::uintmax_t bytes,
                                             bool& killed) {
  return [&dir, output, bytes, &killed](pid_t child) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(child, &status, WNOHANG) == child) {
        // finished before it could be killed: report through `killed` = false (the status is gone; re-reap is a no-op)
        return;
      }
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (is_partial_of(name, output) && fs::file_size(e.path(), ec) >= bytes && !ec) {
          ::kill(child, SIGKILL);
          killed = true;
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  };
}

TEST(CrashSafety, H5adWriterKilledLeavesThePreviousFileAndARecognisablePartial) {
  TempDir dir;
  const fs::path out = dir.path() / "cells.h5ad";
  std::mt19937 rng(kSeed);
  write_h5ad(out, sample_content(rng));
  const auto before = bytes_of(out);
  const std::size_t cells_before = H5adReader(out).n_obs();
  const H5adContent big = big_content();
  bool killed = false;
  std::string message;
  const int status = run_child([&] { write_h5ad(out, big); }, 0, false, message,
                               kill_when_partial(dir.path(), "cells.h5ad", 1 << 20, killed));
  ASSERT_TRUE(killed) << "the writer finished before it could be killed (status " << status << ")";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_EQ(bytes_of(out), before) << "the previous file changed";
  EXPECT_EQ(H5adReader(out).n_obs(), cells_before);
  const auto names = entries(dir.path());
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[1], "cells.h5ad");
  EXPECT_TRUE(is_partial_of(names[0], "cells.h5ad")) << names[0];
}

TEST(CrashSafety, H5adWriterKilledAtTheFileSizeLimitLeavesNoOutput) {
  // No previous file; the kernel kills the writer (SIGXFSZ, default action) the moment its file reaches 1 MiB.
  TempDir dir;
  const fs::path out = dir.path() / "new.h5ad";
  const H5adContent big = big_content();
  std::string message;
  const int status = run_child([&] { write_h5ad(out, big); }, 1 << 20, false, message);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ) << status << " " << message;
  EXPECT_FALSE(fs::exists(out));
  const auto names = entries(dir.path());
  ASSERT_EQ(names.size(), 1u);
  EXPECT_TRUE(is_partial_of(names[0], "new.h5ad")) << names[0];
}

TEST(CrashSafety, PlyWriterKilledLeavesThePreviousFileAndARecognisablePartial) {
  TempDir dir;
  const fs::path out = dir.path() / "cloud.ply";
  write_ply(out, big_cloud(10));
  const auto before = bytes_of(out);
  const PlyFile big = big_cloud(8'000'000);  // 96 MB of payload
  bool killed = false;
  std::string message;
  const int status = run_child([&] { write_ply(out, big); }, 0, false, message,
                               kill_when_partial(dir.path(), "cloud.ply", 1, killed));
  ASSERT_TRUE(killed) << "the writer finished before it could be killed (status " << status << ")";
  EXPECT_EQ(bytes_of(out), before);
  const auto names = entries(dir.path());
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[1], "cloud.ply");
  EXPECT_TRUE(is_partial_of(names[0], "cloud.ply")) << names[0];
}

TEST(CrashSafety, PlyWriterKilledAtTheFileSizeLimitLeavesNoOutput) {
  TempDir dir;
  const fs::path out = dir.path() / "cloud.ply";
  const PlyFile big = big_cloud(1'000'000);
  std::string message;
  const int status = run_child([&] { write_ply(out, big); }, 1 << 20, false, message);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ) << status << " " << message;
  EXPECT_FALSE(fs::exists(out));
  const auto names = entries(dir.path());
  ASSERT_EQ(names.size(), 1u);
  EXPECT_TRUE(is_partial_of(names[0], "cloud.ply")) << names[0];
}

// ---- out of room: the write fails, nothing is left, and the message names the file and the cause ----------

void expect_clean_failure(const fs::path& dir, const fs::path& out, const std::vector<char>& before, int status,
                          const std::string& message) {
  ASSERT_TRUE(WIFEXITED(status)) << "the writer died (status " << status << "): " << message;
  EXPECT_EQ(WEXITSTATUS(status), 2) << "the write did not fail: " << message;
  EXPECT_EQ(message.rfind(out.string() + ": ", 0), 0u) << message;
  EXPECT_NE(message.find("file size limit exceeded"), std::string::npos) << message;
  if (before.empty()) {
    EXPECT_TRUE(fs::is_empty(dir)) << entries(dir).front();
  } else {
    EXPECT_EQ(bytes_of(out), before);
    EXPECT_EQ(entries(dir), std::vector<std::string>{out.filename().string()});
  }
}

TEST(CrashSafety, H5adWriteOverTheFileSizeLimitFailsCleanly) {
  TempDir dir;
  const fs::path out = dir.path() / "new.h5ad";
  const H5adContent big = big_content();
  for (const rlim_t limit : {rlim_t{4096}, rlim_t{1} << 20, rlim_t{30} << 20}) {
    std::string message;
    const int status = run_child([&] { write_h5ad(out, big); }, limit, true, message);
    SCOPED_TRACE("limit " + std::to_string(limit));
    expect_clean_failure(dir.path(), out, {}, status, message);
  }
}

TEST(CrashSafety, H5adCopyOverTheFileSizeLimitFailsCleanlyAndKeepsThePreviousOutput) {
  TempDir dir;
  const fs::path input = dir.path() / "input.h5ad";
  write_h5ad(input, big_content());
  const fs::path out_dir = dir.path() / "out";
  fs::create_directories(out_dir);
  const fs::path out = out_dir / "mapped.h5ad";
  std::mt19937 rng(kSeed);
  write_h5ad(out, sample_content(rng));
  const auto before = bytes_of(out);
  H5adContent add;
  add.obsm["X_flashot"] = random_dense(4000, 2, rng);
  const auto input_size = fs::file_size(input);
  // below the input's size (the copy fails) and just above it (the additions fail)
  for (const rlim_t limit : {rlim_t{input_size / 2}, rlim_t{input_size + 4096}}) {
    std::string message;
    const int status = run_child([&] { write_h5ad_copy(input, out, add); }, limit, true, message);
    SCOPED_TRACE("limit " + std::to_string(limit));
    expect_clean_failure(out_dir, out, before, status, message);
  }
}

TEST(CrashSafety, PlyWriteOverTheFileSizeLimitFailsCleanly) {
  TempDir dir;
  const fs::path out = dir.path() / "cloud.ply";
  write_ply(out, big_cloud(10));
  const auto before = bytes_of(out);
  const PlyFile big = big_cloud(1'000'000);
  std::string message;
  const int status = run_child([&] { write_ply(out, big); }, 1 << 20, true, message);
  expect_clean_failure(dir.path(), out, before, status, message);
}

}  // namespace
}  // namespace flashot::io::test
