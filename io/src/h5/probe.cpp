#include "h5/probe.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace flashot::io::h5 {
namespace {

constexpr unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

std::uint64_t decode_le(const std::byte* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

bool starts_with(const std::byte* p, std::size_t n, std::string_view prefix) {
  return n >= prefix.size() && std::memcmp(p, prefix.data(), prefix.size()) == 0;
}

// What the first bytes of a non-HDF5 file suggest it is.
std::string looks_like(const std::byte* p, std::size_t n) {
  if (starts_with(p, n, "ply\n") || starts_with(p, n, "ply\r")) return "it starts with \"ply\": a PLY file";
  if (starts_with(p, n, "PK\x03\x04")) return "it is a zip archive (a zipped .h5ad? unzip it first; a zipped zarr store is read when named *.zarr.zip)";
  if (starts_with(p, n, "\x1f\x8b")) return "it is gzip-compressed (gunzip it first)";
  if (starts_with(p, n, "CDF\x01") || starts_with(p, n, "CDF\x02")) return "it is a netCDF classic file";
  if (starts_with(p, n, "\x89PNG")) return "it is a PNG image";
  if (starts_with(p, n, "%PDF")) return "it is a PDF document";
  std::size_t printable = 0;
  const std::size_t look = std::min<std::size_t>(n, 256);
  for (std::size_t i = 0; i < look; ++i) {
    const auto c = std::to_integer<unsigned char>(p[i]);
    if (c == '\n' || c == '\r' || c == '\t' || (c >= 0x20 && c < 0x7f) || c >= 0x80) ++printable;
  }
  if (look > 0 && printable == look) {
    std::string first;
    for (std::size_t i = 0; i < std::min<std::size_t>(n, 24); ++i) {
      const auto c = std::to_integer<unsigned char>(p[i]);
      if (c == '\n' || c == '\r') break;
      first += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
    }
    return "it looks like text, starting \"" + first + "\"";
  }
  char hex[64] = {};
  std::string bytes;
  for (std::size_t i = 0; i < std::min<std::size_t>(n, 8); ++i) {
    std::snprintf(hex, sizeof(hex), "%s%02x", i == 0 ? "" : " ", std::to_integer<unsigned>(p[i]));
    bytes += hex;
  }
  return "it starts with bytes " + bytes;
}

}  // namespace

std::optional<std::string> hdf5_file_problem(
    std::uint64_t size, const std::function<bool(std::uint64_t, std::size_t, std::byte*)>& read) {
  if (size == 0) return "empty, 0 bytes";
  std::byte head[64] = {};
  const std::size_t head_n = static_cast<std::size_t>(std::min<std::uint64_t>(size, sizeof(head)));
  if (!read(0, head_n, head)) return std::nullopt;  // unreadable: HDF5 will say why
  // The superblock sits at 0, 512, 1024, 2048, … (after a user block).
  std::optional<std::uint64_t> at;
  for (std::uint64_t offset = 0; offset + 8 <= size; offset = offset == 0 ? 512 : offset * 2) {
    std::byte sig[8];
    if (!read(offset, 8, sig)) break;
    if (std::memcmp(sig, kSignature, 8) == 0) {
      at = offset;
      break;
    }
  }
  if (!at) {
    if (size < 8 && std::memcmp(head, kSignature, head_n) == 0) {
      return "truncated: " + std::to_string(size) + " bytes, not even a whole HDF5 signature";
    }
    return "not an HDF5 file: " + looks_like(head, head_n);
  }
  std::byte sb[96] = {};
  const std::size_t sb_n = static_cast<std::size_t>(std::min<std::uint64_t>(size - *at, sizeof(sb)));
  if (!read(*at, sb_n, sb)) return std::nullopt;
  const int version = sb_n > 8 ? std::to_integer<int>(sb[8]) : -1;
  std::size_t addr_size = 0, base_at = 0, eof_at = 0;
  if (version == 0 || version == 1) {
    addr_size = sb_n > 13 ? std::to_integer<std::size_t>(sb[13]) : 0;
    base_at = version == 0 ? 24 : 28;
    eof_at = base_at + 2 * addr_size;
  } else if (version == 2 || version == 3) {
    addr_size = sb_n > 9 ? std::to_integer<std::size_t>(sb[9]) : 0;
    base_at = 12;
    eof_at = 12 + 2 * addr_size;
  } else if (version >= 0) {
    return std::nullopt;  // a superblock version HDF5 may know better
  }
  if (addr_size != 2 && addr_size != 4 && addr_size != 8) {
    if (version < 0 || sb_n < 16) {
      return "truncated: " + std::to_string(size) + " bytes, the HDF5 superblock is cut short";
    }
    return std::nullopt;
  }
  if (eof_at + addr_size > sb_n) {
    return "truncated: " + std::to_string(size) + " bytes, the HDF5 superblock is cut short";
  }
  const std::uint64_t eof = decode_le(sb + eof_at, addr_size);
  const std::uint64_t undefined = addr_size == 8 ? ~std::uint64_t{0} : (std::uint64_t{1} << (8 * addr_size)) - 1;
  if (eof == undefined) return std::nullopt;
  // The end-of-file address is stored as the file's size when written, user block included (base address = the
  // superblock's place). A file whose superblock moved (bytes prepended) is read by HDF5 with the base moved along.
  const std::uint64_t base = decode_le(sb + base_at, addr_size);
  if (base == undefined || base > *at || eof > undefined - (*at - base)) return std::nullopt;
  const std::uint64_t expected = eof + (*at - base);
  if (expected > size) return "truncated: " + std::to_string(size) + " of " + std::to_string(expected) + " bytes";
  return std::nullopt;
}

std::optional<std::string> hdf5_file_problem(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return std::nullopt;
  }
  auto read = [fd](std::uint64_t offset, std::size_t n, std::byte* out) {
    std::size_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(fd, out + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      done += static_cast<std::size_t>(got);
    }
    return true;
  };
  auto problem = hdf5_file_problem(static_cast<std::uint64_t>(st.st_size), read);
  ::close(fd);
  return problem;
}

std::optional<std::string> hdf5_file_problem(std::span<const std::byte> image) {
  return hdf5_file_problem(image.size(), [image](std::uint64_t offset, std::size_t n, std::byte* out) {
    if (offset > image.size() || n > image.size() - offset) return false;
    std::memcpy(out, image.data() + offset, n);
    return true;
  });
}

std::string describe_folder(const std::filesystem::path& path) {
  std::error_code ec;
  for (const char* marker : {".zgroup", ".zattrs", "zarr.json"}) {
    if (std::filesystem::exists(path / marker, ec)) {
      return "a zarr store (a folder); flashot reads zarr stores named *.zarr (or zipped, *.zarr.zip): "
             "rename it (docs/io-zarr.md)";
    }
  }
  return "";
}

}  // namespace flashot::io::h5
