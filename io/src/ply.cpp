// PLY public entry points that touch the file system, lookups, and the point-cloud helpers. Parsing lives in
// ply_read.cpp, serialisation in ply_write.cpp.

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flashot/io/errors.hpp"
#include "partial_file.hpp"
#include "flashot/io/ply.hpp"

namespace flashot::io {
namespace {

template <class Element, class Range>
Element* find_by_name(Range& range, std::string_view name) {
  for (auto& item : range) {
    if (item.name == name) return &item;
  }
  return nullptr;
}

/// A read-only mapping of a whole file; the kernel pages it in as the parser walks it, with no copy.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw IoError("cannot open '" + path.string() + "': " + std::strerror(errno));
    struct stat info {};
    if (::fstat(fd_, &info) != 0) {
      const int error = errno;
      ::close(fd_);
      throw IoError("cannot stat '" + path.string() + "': " + std::strerror(error));
    }
    if (S_ISDIR(info.st_mode)) {
      ::close(fd_);
      throw IoError("cannot read '" + path.string() + "': it is a directory");
    }
    size_ = static_cast<std::size_t>(info.st_size);
    if (size_ == 0) return;
    void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd_, 0);
    if (map == MAP_FAILED) {
      const int error = errno;
      ::close(fd_);
      throw IoError("cannot map '" + path.string() + "': " + std::strerror(error));
    }
    data_ = static_cast<const std::byte*>(map);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    ::close(fd_);
  }
  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  int fd_ = -1;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace

std::string to_string(PlyFormat format) {
  switch (format) {
    case PlyFormat::kAscii: return "ascii";
    case PlyFormat::kBinaryLittleEndian: return "binary_little_endian";
    case PlyFormat::kBinaryBigEndian: return "binary_big_endian";
  }
  throw std::invalid_argument("invalid PlyFormat value " + std::to_string(static_cast<int>(format)));
}

std::string to_string(PlyType type) {
  switch (type) {
    case PlyType::kInt8: return "char";
    case PlyType::kUint8: return "uchar";
    case PlyType::kInt16: return "short";
    case PlyType::kUint16: return "ushort";
    case PlyType::kInt32: return "int";
    case PlyType::kUint32: return "uint";
    case PlyType::kFloat32: return "float";
    case PlyType::kFloat64: return "double";
  }
  throw std::invalid_argument("invalid PlyType value " + std::to_string(static_cast<int>(type)));
}

const PlyProperty* PlyElement::find(std::string_view property) const {
  return find_by_name<const PlyProperty>(properties, property);
}
PlyProperty* PlyElement::find(std::string_view property) { return find_by_name<PlyProperty>(properties, property); }
const PlyElement* PlyFile::find(std::string_view element) const {
  return find_by_name<const PlyElement>(elements, element);
}
PlyElement* PlyFile::find(std::string_view element) { return find_by_name<PlyElement>(elements, element); }

PlyFile read_ply(const std::filesystem::path& path) {
  const MappedFile file(path);
  return parse_ply(file.bytes(), path.string());
}

PlyFile read_ply_header(const std::filesystem::path& path) {
  // Read in blocks up to the line "end_header" (not mapped: MappedFile populates the whole file).
  constexpr std::size_t kBlock = 1 << 16;
  constexpr std::size_t kMaxHeader = std::size_t{1} << 26;
  if (std::filesystem::is_directory(path)) throw IoError("cannot read '" + path.string() + "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open '" + path.string() + "': " + std::strerror(errno));
  std::string text;
  std::size_t line_start = 0;
  bool complete = false;
  while (!complete && in && text.size() < kMaxHeader) {
    const std::size_t old_size = text.size();
    text.resize(old_size + kBlock);
    in.read(text.data() + old_size, static_cast<std::streamsize>(kBlock));
    text.resize(old_size + static_cast<std::size_t>(in.gcount()));
    if (old_size == 0 && text.find("ply") > 16) break;  // not a PLY file: the parser says so, nothing more read
    for (std::size_t newline; (newline = text.find('\n', line_start)) != std::string::npos;) {
      std::string_view line(text.data() + line_start, newline - line_start);
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
      while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
      line_start = newline + 1;
      if (line == "end_header") {
        text.resize(line_start);
        complete = true;
        break;
      }
    }
  }
  return parse_ply_header(std::as_bytes(std::span<const char>(text)), path.string());
}

void write_ply(const std::filesystem::path& path, const PlyFile& ply) {
  const std::vector<std::byte> bytes = serialize_ply(ply);
  detail::PartialFile partial(path);
  std::FILE* out = std::fopen(partial.path().c_str(), "wb");
  if (out == nullptr) {
    throw IoError(path.string() + ": cannot create " + partial.path().string() + ": " + detail::errno_cause(errno));
  }
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), out) == bytes.size();
  const int write_error = errno;
  const bool closed = std::fclose(out) == 0;
  if (!written || !closed) {
    throw IoError(path.string() + ": cannot write " + partial.path().string() + ": " +
                  detail::errno_cause(written ? errno : write_error));
  }
  partial.commit();
}

std::vector<float> vertex_positions(const PlyFile& ply, const std::string& path) {
  const PlyElement* vertex = ply.find("vertex");
  if (vertex == nullptr) {
    std::string names;
    for (const PlyElement& element : ply.elements) names += (names.empty() ? "" : ", ") + element.name;
    throw FormatError(path, "element 'vertex'", "no vertex element (elements: " + (names.empty() ? "none" : names) + ")");
  }
  const PlyProperty* axes[3] = {vertex->find("x"), vertex->find("y"), vertex->find("z")};
  for (int k = 0; k < 3; ++k) {
    const std::string name(1, "xyz"[k]);
    if (axes[k] == nullptr) throw FormatError(path, "element 'vertex'", "no property '" + name + "'");
    if (axes[k]->is_list) throw FormatError(path, "element 'vertex'", "property '" + name + "' is a list, not a coordinate");
  }
  const std::size_t n = vertex->count;
  for (const PlyProperty* axis : axes) {
    if (axis->values.size() != n) {
      throw std::invalid_argument("vertex." + axis->name + " has " + std::to_string(axis->values.size()) +
                                  " values but the element count is " + std::to_string(n));
    }
  }
  std::vector<float> xyz(3 * n);
  for (int k = 0; k < 3; ++k) {
    const std::vector<double>& values = axes[k]->values;
    for (std::size_t i = 0; i < n; ++i) xyz[3 * i + k] = static_cast<float>(values[i]);
  }
  return xyz;
}

PlyFile make_point_cloud(std::span<const float> xyz, std::size_t n, bool double_coordinates) {
  if (xyz.size() != 3 * n) {
    throw std::invalid_argument("xyz must hold 3·n = " + std::to_string(3 * n) + " floats (got " +
                                std::to_string(xyz.size()) + ")");
  }
  PlyFile ply;
  ply.format = PlyFormat::kBinaryLittleEndian;
  PlyElement& vertex = ply.elements.emplace_back();
  vertex.name = "vertex";
  vertex.count = n;
  for (int k = 0; k < 3; ++k) {
    PlyProperty& axis = vertex.properties.emplace_back();
    axis.name = std::string(1, "xyz"[k]);
    axis.type = double_coordinates ? PlyType::kFloat64 : PlyType::kFloat32;
    axis.values.resize(n);
    for (std::size_t i = 0; i < n; ++i) axis.values[i] = xyz[3 * i + k];
  }
  return ply;
}

}  // namespace flashot::io
