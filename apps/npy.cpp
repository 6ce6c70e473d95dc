#include "npy.hpp"

#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include "cli.hpp"

namespace flashot::cli {
namespace {

static_assert(std::endian::native == std::endian::little, "the .npy writer stores the host's floats as '<f4'");

/// A name in `destination`'s folder that no other writer uses: `.<name>.flashot-partial-<pid>-<k>`, the pattern
/// the io writers leave behind when killed (README.md), safe to delete.
std::filesystem::path temporary_beside(const std::filesystem::path& destination) {
  static std::atomic<unsigned> counter{0};
  std::string name(1, '.');
  name += destination.filename().string();
  name += ".flashot-partial-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  return destination.parent_path() / name;
}

void write_parts(const std::filesystem::path& path, std::string_view head, const char* data, std::size_t size) {
  const std::filesystem::path temporary = temporary_beside(path);
  try {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot create " + temporary.string() + ": " + std::strerror(errno));
    out.write(head.data(), std::streamsize(head.size()));
    if (size) out.write(data, std::streamsize(size));
    out.close();
    if (!out) throw std::runtime_error("cannot write " + temporary.string() + " (disk full?)");
    std::error_code ec;
    std::filesystem::rename(temporary, path, ec);
    if (ec)
      throw std::runtime_error("cannot rename " + temporary.string() + " to " + path.string() + ": " + ec.message());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
}

}  // namespace

std::string npy_header(std::span<const std::size_t> shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (std::size_t k = 0; k < shape.size(); ++k) dict += (k ? ", " : "") + std::to_string(shape[k]);
  dict += shape.size() == 1 ? ",), }" : "), }";
  // magic (6) + version (2) + length (2) + dict + padding + '\n' ≡ 0 (mod 64): numpy's own alignment.
  const std::size_t unpadded = 10 + dict.size() + 1;
  const std::size_t padded = (unpadded + 63) / 64 * 64;
  const std::size_t length = padded - 10;
  if (length > 0xFFFF) throw std::invalid_argument("the .npy header of this shape is too long for format 1.0");
  dict.append(padded - unpadded, ' ');
  dict += '\n';
  std::string header("\x93NUMPY\x01\x00", 8);
  header += char(length & 0xFF);
  header += char(length >> 8);
  return header + dict;
}

void write_npy(const std::filesystem::path& path, std::span<const float> values, std::vector<std::size_t> shape) {
  std::size_t count = 1;
  for (std::size_t s : shape) count *= s;
  if (count != values.size())
    throw std::invalid_argument("write_npy: shape holds " + std::to_string(count) + " values, given " +
                                std::to_string(values.size()) + " (" + path.string() + ")");
  write_parts(path, npy_header(shape), reinterpret_cast<const char*>(values.data()), values.size_bytes());
}

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  write_parts(path, bytes, nullptr, 0);
}

void prepare_output_folder(const std::string& what, const std::filesystem::path& folder) {
  if (folder.empty()) throw UsageError(what + ": the folder name is empty");
  std::error_code ec;
  const auto status = std::filesystem::status(folder, ec);
  if (std::filesystem::exists(status)) {
    if (!std::filesystem::is_directory(status))
      throw UsageError(what + ": '" + folder.string() + "' exists and is not a folder");
  } else {
    std::filesystem::create_directories(folder, ec);
    if (ec) throw UsageError(what + ": cannot create the folder '" + folder.string() + "': " + ec.message());
  }
  // Permissions alone do not say it (root, read-only mounts, ACLs): create and remove a file.
  const std::filesystem::path probe = temporary_beside(folder / "probe");
  {
    std::ofstream out(probe, std::ios::binary | std::ios::trunc);
    if (!out)
      throw UsageError(what + ": cannot write in the folder '" + folder.string() + "': " + std::strerror(errno));
  }
  std::filesystem::remove(probe, ec);
}

}  // namespace flashot::cli
