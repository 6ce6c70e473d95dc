// Directory and zip stores for the zarr reader (store.hpp). The zip reader is flashot's own central-directory
// reader rather than minizip's: zarr stores are written by Python's zipfile, whose rule for a name stored twice is
// "the last central-directory entry wins" (minizip's unzLocateFile returns the first), entries are normally stored
// (so a shard can be read in part, straight from the archive at an offset), and ZIP64 archives must work. The
// format parts used are the end-of-central-directory records (plain and ZIP64), central-directory headers with the
// ZIP64 extra field, and local headers; deflated entries are inflated with zlib.

#include "zarr/store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "flashot/io/errors.hpp"
#include "partial_file.hpp"

namespace flashot::io::zarr {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

std::string file_name_of(const std::filesystem::path& path) {
  std::string text = path.string();
  while (text.size() > 1 && text.back() == '/') text.pop_back();
  return lower(std::filesystem::path(text).filename().string());
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A key must stay inside the store: no empty, "." or ".." segment, no leading '/'.
void check_key(const std::string& store, const std::string& key) {
  std::size_t start = 0;
  while (true) {
    const std::size_t end = key.find('/', start);
    const std::string part = key.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (part.empty() || part == "." || part == ".." || part.find('\0') != std::string::npos) {
      throw FormatError(store, key, "not a valid key inside the store");
    }
    if (end == std::string::npos) return;
    start = end + 1;
  }
}

void read_exact(int fd, std::uint64_t offset, std::size_t length, char* out, const std::string& store,
                const std::string& key) {
  std::size_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd, out + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(store + ": " + key + ": cannot read: " + detail::errno_cause(errno));
    }
    if (n == 0) throw FormatError(store, key, "truncated: the file ends inside it");
    done += static_cast<std::size_t>(n);
  }
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// ---- directory ---------------------------------------------------------------------------------------------------

class DirectoryStore final : public Store {
 public:
  explicit DirectoryStore(std::filesystem::path root) : root_(std::move(root)), name_(root_.string()) {}
  const std::string& name() const override { return name_; }

  std::optional<std::uint64_t> size(const std::string& key) const override {
    check_key(name_, key);
    struct stat st {};
    if (::stat((root_ / key).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
    return static_cast<std::uint64_t>(st.st_size);
  }

  std::optional<std::string> get(const std::string& key) const override {
    check_key(name_, key);
    const Fd fd(::open((root_ / key).c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
      throw IoError(name_ + ": " + key + ": cannot open: " + detail::errno_cause(errno));
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw IoError(name_ + ": " + key + ": " + detail::errno_cause(errno));
    if (!S_ISREG(st.st_mode)) return std::nullopt;
    std::string out(static_cast<std::size_t>(st.st_size), '\0');
    read_exact(fd.get(), 0, out.size(), out.data(), name_, key);
    return out;
  }

  std::string get_range(const std::string& key, std::uint64_t offset, std::uint64_t length) const override {
    check_key(name_, key);
    const Fd fd(::open((root_ / key).c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) throw IoError(name_ + ": " + key + ": cannot open: " + detail::errno_cause(errno));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw IoError(name_ + ": " + key + ": " + detail::errno_cause(errno));
    const auto total = static_cast<std::uint64_t>(st.st_size);
    if (offset > total || length > total - offset) {
      throw FormatError(name_, key,
                        "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + length) +
                            ") asked for, but it holds " + std::to_string(total));
    }
    std::string out(static_cast<std::size_t>(length), '\0');
    read_exact(fd.get(), offset, out.size(), out.data(), name_, key);
    return out;
  }

  std::vector<std::string> list(const std::string& prefix) const override {
    if (!prefix.empty()) check_key(name_, prefix);
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(prefix.empty() ? root_ : root_ / prefix, ec)) {
      out.push_back(entry.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  std::vector<std::string> keys() const override {
    std::vector<std::string> out;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(root_, ec);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) throw IoError(name_ + ": cannot list: " + ec.message());
      if (it->is_regular_file(ec)) out.push_back(std::filesystem::relative(it->path(), root_).generic_string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::filesystem::path root_;
  std::string name_;
};

// ---- zip -----------------------------------------------------------------------------------------------------

std::uint16_t u16(const unsigned char* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
std::uint32_t u32(const unsigned char* p) {
  return std::uint32_t(p[0]) | (std::uint32_t(p[1]) << 8) | (std::uint32_t(p[2]) << 16) | (std::uint32_t(p[3]) << 24);
}
std::uint64_t u64(const unsigned char* p) { return std::uint64_t(u32(p)) | (std::uint64_t(u32(p + 4)) << 32); }

// The archive's bytes: a file (pread, safe from several threads) or memory.
class Bytes {
 public:
  virtual ~Bytes() = default;
  virtual std::uint64_t size() const = 0;
  virtual void read(std::uint64_t offset, std::size_t length, char* out, const std::string& what) const = 0;
};

class FileBytes final : public Bytes {
 public:
  FileBytes(const std::filesystem::path& path, std::string name) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)), name_(std::move(name)) {
    if (fd_.get() < 0) throw IoError(name_ + ": cannot open: " + detail::errno_cause(errno));
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) throw IoError(name_ + ": " + detail::errno_cause(errno));
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  std::uint64_t size() const override { return size_; }
  void read(std::uint64_t offset, std::size_t length, char* out, const std::string& what) const override {
    if (offset > size_ || length > size_ - offset) throw FormatError(name_, what, "lies past the end of the archive");
    read_exact(fd_.get(), offset, length, out, name_, what);
  }

 private:
  Fd fd_;
  std::string name_;
  std::uint64_t size_ = 0;
};

class MemoryBytes final : public Bytes {
 public:
  MemoryBytes(std::vector<std::byte> bytes, std::string name) : bytes_(std::move(bytes)), name_(std::move(name)) {}
  std::uint64_t size() const override { return bytes_.size(); }
  void read(std::uint64_t offset, std::size_t length, char* out, const std::string& what) const override {
    if (offset > bytes_.size() || length > bytes_.size() - offset) {
      throw FormatError(name_, what, "lies past the end of the archive");
    }
    std::memcpy(out, bytes_.data() + offset, length);
  }

 private:
  std::vector<std::byte> bytes_;
  std::string name_;
};

struct Entry {
  std::uint16_t method = 0;
  std::uint16_t flags = 0;
  std::uint32_t crc = 0;
  std::uint64_t compressed = 0;
  std::uint64_t uncompressed = 0;
  std::uint64_t header_offset = 0;
  mutable std::optional<std::uint64_t> data_offset;  // found from the local header on first use
};

class ZipStore final : public Store {
 public:
  ZipStore(std::unique_ptr<Bytes> bytes, std::string name, bool check_crc = true)
      : bytes_(std::move(bytes)), name_(std::move(name)), check_crc_(check_crc) {
    read_directory();
  }
  const std::string& name() const override { return name_; }

  std::optional<std::uint64_t> size(const std::string& key) const override {
    const Entry* e = find(key);
    if (e == nullptr) return std::nullopt;
    return e->uncompressed;
  }

  std::optional<std::string> get(const std::string& key) const override {
    const Entry* e = find(key);
    if (e == nullptr) return std::nullopt;
    const std::uint64_t at = data_offset(key, *e);  // checks the entry lies inside the archive before allocating
    std::string raw(static_cast<std::size_t>(e->compressed), '\0');
    bytes_->read(at, raw.size(), raw.data(), key);
    std::string out;
    if (e->method == 0) {
      if (e->compressed != e->uncompressed) {
        throw FormatError(name_, key, "stored entry of " + std::to_string(e->compressed) + " bytes claims " +
                                          std::to_string(e->uncompressed) + " uncompressed");
      }
      out = std::move(raw);
    } else {
      out = inflate_entry(key, *e, raw);
    }
    auto sum = static_cast<std::uint32_t>(::crc32(0L, Z_NULL, 0));
    for (std::size_t at = 0; at < out.size();) {  // zlib's crc32 takes at most 4 GiB at a time
      const std::size_t n = std::min<std::size_t>(out.size() - at, std::size_t{1} << 30);
      sum = static_cast<std::uint32_t>(::crc32(sum, reinterpret_cast<const Bytef*>(out.data() + at), static_cast<uInt>(n)));
      at += n;
    }
    if (check_crc_ && sum != e->crc) {
      throw FormatError(name_, key, "zip entry fails its CRC-32 check (stored " + hex(e->crc) + ", computed " + hex(sum) + ")");
    }
    return out;
  }

  std::string get_range(const std::string& key, std::uint64_t offset, std::uint64_t length) const override {
    const Entry* e = find(key);
    if (e == nullptr) throw IoError(name_ + ": " + key + ": no such entry in the archive");
    if (offset > e->uncompressed || length > e->uncompressed - offset) {
      throw FormatError(name_, key,
                        "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + length) +
                            ") asked for, but it holds " + std::to_string(e->uncompressed));
    }
    if (e->method != 0) return get(key)->substr(static_cast<std::size_t>(offset), static_cast<std::size_t>(length));
    std::string out(static_cast<std::size_t>(length), '\0');
    bytes_->read(data_offset(key, *e) + offset, out.size(), out.data(), key);
    return out;
  }

  std::vector<std::string> list(const std::string& prefix) const override {
    const std::string head = prefix.empty() ? "" : prefix + "/";
    std::set<std::string> out;
    for (auto it = entries_.lower_bound(head); it != entries_.end() && it->first.compare(0, head.size(), head) == 0; ++it) {
      const std::string rest = it->first.substr(head.size());
      out.insert(rest.substr(0, rest.find('/')));
    }
    return {out.begin(), out.end()};
  }

  std::vector<std::string> keys() const override {
    std::vector<std::string> out;
    for (const auto& [k, e] : entries_) out.push_back(k);
    return out;
  }

 private:
  static std::string hex(std::uint32_t v) {
    char buffer[16];
    std::snprintf(buffer, sizeof buffer, "%08x", v);
    return buffer;
  }

  const Entry* find(const std::string& key) const {
    const auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  }

  std::uint64_t data_offset(const std::string& key, const Entry& e) const {
    if (e.data_offset) return *e.data_offset;
    unsigned char local[30];
    bytes_->read(e.header_offset, sizeof local, reinterpret_cast<char*>(local), key + " (local header)");
    if (u32(local) != 0x04034b50) throw FormatError(name_, key, "local header signature missing at offset " + std::to_string(e.header_offset));
    const std::uint64_t start = e.header_offset + 30 + u16(local + 26) + u16(local + 28);
    if (start > bytes_->size() || e.compressed > bytes_->size() - start) {
      throw FormatError(name_, key, "entry data (" + std::to_string(e.compressed) + " bytes at offset " +
                                        std::to_string(start) + ") lies past the end of the archive (" +
                                        std::to_string(bytes_->size()) + " bytes)");
    }
    e.data_offset = start;
    return start;
  }

  std::string inflate_entry(const std::string& key, const Entry& e, const std::string& raw) const {
    if (e.method != 8) {
      throw FormatError(name_, key, "zip compression method " + std::to_string(e.method) +
                                        " is not supported (stored or deflated entries only)");
    }
    // Deflate expands at most ~1032:1; a larger claim is a damaged header, refused before allocating.
    if (e.uncompressed / 1032 > e.compressed + 1) {
      throw FormatError(name_, key, "deflated entry of " + std::to_string(e.compressed) + " bytes claims " +
                                        std::to_string(e.uncompressed) + " uncompressed");
    }
    std::string out(static_cast<std::size_t>(e.uncompressed), '\0');
    z_stream z{};
    if (inflateInit2(&z, -15) != Z_OK) throw IoError(name_ + ": " + key + ": zlib cannot start");
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
    z.avail_in = static_cast<uInt>(raw.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    const int rc = inflate(&z, Z_FINISH);
    const auto produced = z.total_out;
    inflateEnd(&z);
    if (rc != Z_STREAM_END || produced != out.size()) {
      throw FormatError(name_, key, "deflated entry does not inflate to its " + std::to_string(e.uncompressed) + " bytes");
    }
    return out;
  }

  void read_directory() {
    const std::uint64_t total = bytes_->size();
    if (total < 22) throw FormatError(name_, "", "not a zip archive (" + std::to_string(total) + " bytes, no end-of-central-directory record)");
    const std::size_t tail = static_cast<std::size_t>(std::min<std::uint64_t>(total, 22 + 65535));
    std::string buffer(tail, '\0');
    bytes_->read(total - tail, tail, buffer.data(), "end of central directory");
    const auto* b = reinterpret_cast<const unsigned char*>(buffer.data());
    std::optional<std::size_t> eocd;
    for (std::size_t i = tail - 22 + 1; i-- > 0;) {
      if (u32(b + i) == 0x06054b50) {
        eocd = i;
        break;
      }
    }
    if (!eocd) throw FormatError(name_, "", "not a zip archive (no end-of-central-directory record)");
    std::uint64_t count = u16(b + *eocd + 10);
    std::uint64_t cd_size = u32(b + *eocd + 12);
    std::uint64_t cd_offset = u32(b + *eocd + 16);
    const std::uint64_t eocd_at = total - tail + *eocd;
    if (eocd_at >= 20 && (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF)) {
      unsigned char locator[20];
      bytes_->read(eocd_at - 20, 20, reinterpret_cast<char*>(locator), "ZIP64 locator");
      if (u32(locator) == 0x07064b50) {
        const std::uint64_t z64 = u64(locator + 8);
        unsigned char record[56];
        bytes_->read(z64, 56, reinterpret_cast<char*>(record), "ZIP64 end of central directory");
        if (u32(record) != 0x06064b50) throw FormatError(name_, "", "ZIP64 end-of-central-directory record missing");
        count = u64(record + 32);
        cd_size = u64(record + 40);
        cd_offset = u64(record + 48);
      }
    }
    if (cd_offset > total || cd_size > total - cd_offset) {
      throw FormatError(name_, "", "central directory (" + std::to_string(cd_size) + " bytes at offset " +
                                       std::to_string(cd_offset) + ") lies outside the archive (" +
                                       std::to_string(total) + " bytes): truncated?");
    }
    if (count > cd_size / 46 + 1) {
      throw FormatError(name_, "", "central directory claims " + std::to_string(count) + " entries in " +
                                       std::to_string(cd_size) + " bytes");
    }
    std::string cd(static_cast<std::size_t>(cd_size), '\0');
    bytes_->read(cd_offset, cd.size(), cd.data(), "central directory");
    const auto* p = reinterpret_cast<const unsigned char*>(cd.data());
    std::size_t at = 0;
    for (std::uint64_t i = 0; i < count; ++i) {
      if (at + 46 > cd.size() || u32(p + at) != 0x02014b50) {
        throw FormatError(name_, "", "central directory entry " + std::to_string(i) + " of " + std::to_string(count) +
                                         " is damaged (no header at offset " + std::to_string(cd_offset + at) + ")");
      }
      Entry e;
      e.flags = u16(p + at + 8);
      e.method = u16(p + at + 10);
      e.crc = u32(p + at + 16);
      e.compressed = u32(p + at + 20);
      e.uncompressed = u32(p + at + 24);
      const std::size_t name_len = u16(p + at + 28), extra_len = u16(p + at + 30), comment_len = u16(p + at + 32);
      e.header_offset = u32(p + at + 42);
      if (at + 46 + name_len + extra_len + comment_len > cd.size()) {
        throw FormatError(name_, "", "central directory entry " + std::to_string(i) + " runs past the directory");
      }
      std::string name(cd.data() + at + 46, name_len);
      // ZIP64 extended information: the 64-bit values of the fields that hold 0xFFFFFFFF, in this order.
      const unsigned char* extra = p + at + 46 + name_len;
      for (std::size_t x = 0; x + 4 <= extra_len;) {
        const std::uint16_t id = u16(extra + x), len = u16(extra + x + 2);
        if (x + 4 + len > extra_len) break;
        if (id == 0x0001) {
          std::size_t f = x + 4;
          auto take = [&](std::uint64_t& field) {
            if (field == 0xFFFFFFFF && f + 8 <= x + 4 + len) {
              field = u64(extra + f);
              f += 8;
            }
          };
          take(e.uncompressed);
          take(e.compressed);
          take(e.header_offset);
        }
        x += 4 + len;
      }
      at += 46 + name_len + extra_len + comment_len;
      if (name.empty() || name.back() == '/') continue;  // folder entries
      if ((e.flags & 1) != 0) throw FormatError(name_, name, "zip entry is encrypted");
      entries_[name] = e;  // a name stored twice: the later entry wins, as in Python's zipfile
    }
  }

  std::unique_ptr<Bytes> bytes_;
  std::string name_;
  std::map<std::string, Entry> entries_;
  bool check_crc_ = true;
};

}  // namespace

bool is_zip_name(const std::filesystem::path& path) { return ends_with(file_name_of(path), ".zarr.zip"); }
bool is_zarr_name(const std::filesystem::path& path) {
  const std::string name = file_name_of(path);
  return ends_with(name, ".zarr") || ends_with(name, ".zarr.zip");
}

std::unique_ptr<Store> open_directory_store(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw IoError(path.string() + ": no such zarr store");
  if (!std::filesystem::is_directory(path, ec)) {
    throw IoError(path.string() + ": not a directory: a .zarr store is a folder (a zipped one is named .zarr.zip)");
  }
  return std::make_unique<DirectoryStore>(path);
}

std::unique_ptr<Store> open_zip_store(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw IoError(path.string() + ": no such file");
  if (std::filesystem::is_directory(path, ec)) {
    throw IoError(path.string() + ": is a directory, but a .zarr.zip store is a zip archive");
  }
  return std::make_unique<ZipStore>(std::make_unique<FileBytes>(path, path.string()), path.string());
}

std::unique_ptr<Store> open_zip_image(std::vector<std::byte> bytes, const std::string& name, bool check_crc) {
  return std::make_unique<ZipStore>(std::make_unique<MemoryBytes>(std::move(bytes), name), name, check_crc);
}

}  // namespace flashot::io::zarr
