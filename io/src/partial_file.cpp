#include "partial_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include "flashot/io/errors.hpp"

namespace flashot::io::detail {

std::filesystem::path partial_path_for(const std::filesystem::path& target) {
  static std::atomic<unsigned> counter{0};
  const auto folder = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::string name(1, '.');  // built by appending: GCC 12 warns (-Wrestrict) on "." + std::string
  name += target.filename().string();
  name += ".flashot-partial-";
  name += std::to_string(::getpid());
  name += '-';
  name += std::to_string(counter++);
  return folder / name;
}

std::string errno_cause(int error) {
  switch (error) {
    case EFBIG: return "file size limit exceeded";
    case ENOSPC: return "no space left on device";
    case EDQUOT: return "disk quota exceeded";
    case EROFS: return "read-only file system";
    case EACCES: return "permission denied";
    case EIO: return "input/output error";
    default: return std::strerror(error);
  }
}

void copy_contents(const std::filesystem::path& from, const std::filesystem::path& to, const std::string& shown) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) throw IoError(shown + ": cannot open " + from.string() + ": " + errno_cause(errno));
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    const int error = errno;
    ::close(in);
    throw IoError(shown + ": cannot create " + to.string() + ": " + errno_cause(error));
  }
  int error = 0;
  bool plain = false;  // copy_file_range unsupported here: read/write
  std::vector<char> buffer;
  while (true) {
    ssize_t n = 0;
    if (!plain) {
      n = ::copy_file_range(in, nullptr, out, nullptr, std::size_t{1} << 30, 0);
      if (n < 0 && (errno == ENOSYS || errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP)) {
        plain = true;
        continue;
      }
    } else {
      buffer.resize(std::size_t{1} << 20);
      n = ::read(in, buffer.data(), buffer.size());
      for (ssize_t done = 0; n > 0 && done < n;) {
        const ssize_t w = ::write(out, buffer.data() + done, static_cast<std::size_t>(n - done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          n = -1;
          break;
        }
        done += w;
      }
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = errno;
    if (n <= 0) break;
  }
  ::close(in);
  if (::close(out) != 0 && error == 0) error = errno;
  if (error != 0) {
    throw IoError(shown + ": cannot copy " + from.string() + " to " + to.string() + ": " + errno_cause(error));
  }
}

PartialFile::PartialFile(const std::filesystem::path& target) : target_(target), path_(partial_path_for(target)) {}

PartialFile::~PartialFile() {
  if (!committed_) {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
}

namespace {

// fsync of a file or folder; returns errno or 0.
int sync_path(const std::filesystem::path& path, bool folder) {
  const int fd = ::open(path.c_str(), (folder ? O_RDONLY | O_DIRECTORY : O_WRONLY) | O_CLOEXEC);
  if (fd < 0) return errno;
  const int status = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return status;
}

}  // namespace

void PartialFile::commit() {
  // Synced before the rename, so that after a power loss the destination is either the old file or the whole new one.
  if (const int error = sync_path(path_, false); error != 0) {
    throw IoError(target_.string() + ": cannot write " + path_.string() + ": " + errno_cause(error));
  }
  std::error_code ec;
  std::filesystem::rename(path_, target_, ec);
  if (ec) throw IoError(target_.string() + ": cannot rename " + path_.string() + " over it: " + ec.message());
  committed_ = true;
  const auto folder = target_.has_parent_path() ? target_.parent_path() : std::filesystem::path(".");
  sync_path(folder, true);  // the rename itself; a folder that cannot be synced (some file systems) is no error
}

}  // namespace flashot::io::detail
