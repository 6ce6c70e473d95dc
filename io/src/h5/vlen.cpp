#include "h5/vlen.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <vector>

#include "h5/h5.hpp"

namespace flashot::io::h5 {

// The bytes of one HDF5 file as flashot sees them, independent of the library: an in-memory image or a descriptor of
// its own on the path, plus what the superblock says about addresses (through the file-creation property list).
class RawFile {
 public:
  RawFile(const FileRef& file) {
    if (!file.image.empty()) {
      image_ = file.image;
      size_ = image_.size();
    } else {
      const std::string& on_disk = file.disk_path.empty() ? file.path : file.disk_path;
      fd_ = ::open(on_disk.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd_ < 0) {
        problem_ = "cannot open " + on_disk + " to read its strings: " + std::strerror(errno);
        return;
      }
      struct stat st {};
      if (::fstat(fd_, &st) != 0) {
        problem_ = "cannot stat " + file.path + ": " + std::strerror(errno);
        return;
      }
      size_ = static_cast<std::uint64_t>(st.st_size);
    }
    Id fcpl(H5Fget_create_plist(file.id));
    std::size_t sizeof_addr = 0, sizeof_size = 0;
    hsize_t userblock = 0;
    if (!fcpl.valid() || H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size) < 0 ||
        H5Pget_userblock(fcpl.get(), &userblock) < 0) {
      problem_ = "cannot query the file's address sizes";
      H5Eclear2(H5E_DEFAULT);
      return;
    }
    sizeof_addr_ = sizeof_addr;
    sizeof_size_ = sizeof_size;
    base_ = userblock;
  }
  ~RawFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;

  const std::string& problem() const { return problem_; }
  std::uint64_t size() const { return size_; }
  std::uint64_t base() const { return base_; }
  std::size_t sizeof_addr() const { return sizeof_addr_; }
  std::size_t sizeof_size() const { return sizeof_size_; }

  /// Bytes [offset, offset + n) of the file, or false when they are not all there.
  bool read(std::uint64_t offset, std::size_t n, std::byte* out) const {
    if (offset > size_ || n > size_ - offset) return false;
    if (!image_.empty()) {
      std::memcpy(out, image_.data() + offset, n);
      return true;
    }
    std::size_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(fd_, out + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      done += static_cast<std::size_t>(got);
    }
    return true;
  }

 private:
  std::span<const std::byte> image_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::uint64_t base_ = 0;
  std::size_t sizeof_addr_ = 8;
  std::size_t sizeof_size_ = 8;
  std::string problem_;
};

namespace {

constexpr std::size_t kNoObject = static_cast<std::size_t>(-1);

std::uint64_t decode_le(const std::byte* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

std::size_t align8(std::uint64_t x) { return static_cast<std::size_t>((x + 7) / 8 * 8); }

// One global heap collection, checked whole: every object lies inside it (HDF5 1.10.8 checks none of this).
struct Collection {
  std::vector<std::byte> bytes;
  std::vector<std::pair<std::size_t, std::size_t>> objects;  // by index: (offset of the data, size), or kNoObject
};

std::string hex(std::uint64_t v) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

// Reads and checks the collection at `addr`; returns the problem, or "" with `out` filled.
std::string load_collection(const RawFile& raw, std::uint64_t addr, Collection& out) {
  const std::string where = "global heap collection at " + hex(addr);
  const std::size_t ls = raw.sizeof_size();
  const std::size_t header = align8(4 + 1 + 3 + ls);
  const std::size_t object_header = align8(2 + 2 + 4 + ls);
  if (addr > raw.size() || raw.base() > raw.size() - addr) return where + " lies beyond the end of the file";
  const std::uint64_t at = raw.base() + addr;
  std::byte head[32] = {};
  if (!raw.read(at, header, head)) return where + ": header beyond the end of the file";
  if (std::memcmp(head, "GCOL", 4) != 0) return where + ": no GCOL signature";
  if (std::to_integer<int>(head[4]) != 1) return where + ": version " + std::to_string(std::to_integer<int>(head[4]));
  const std::uint64_t size = decode_le(head + 8, ls);
  if (size < header || size > raw.size() - at) {
    return where + " claims " + std::to_string(size) + " bytes; the file has " + std::to_string(raw.size() - at) +
           " from there";
  }
  out.bytes.resize(static_cast<std::size_t>(size));
  if (!raw.read(at, out.bytes.size(), out.bytes.data())) return where + ": cannot read " + std::to_string(size) + " bytes";
  out.objects.clear();
  std::size_t offset = header;
  while (offset < size) {
    if (offset + object_header > size) break;  // too small for an object: free space
    const std::byte* p = out.bytes.data() + offset;
    const auto index = static_cast<std::size_t>(decode_le(p, 2));
    const std::uint64_t object_size = decode_le(p + 8, ls);
    std::uint64_t need = 0;
    if (index == 0) {  // free space: its size includes its header
      if (object_size < object_header) {
        return where + ": free-space object of " + std::to_string(object_size) + " bytes at offset " +
               std::to_string(offset);
      }
      need = object_size;
    } else {
      if (object_size > size) {
        return where + " (" + std::to_string(size) + " bytes): object " + std::to_string(index) + " claims " +
               std::to_string(object_size) + " bytes";
      }
      need = object_header + align8(object_size);
    }
    if (need > size - offset) {
      return where + " (" + std::to_string(size) + " bytes): object " + std::to_string(index) + " of " +
             std::to_string(object_size) + " bytes at offset " + std::to_string(offset) + " runs past its end";
    }
    if (index > 0) {
      if (index >= out.objects.size()) out.objects.resize(index + 1, {kNoObject, 0});
      out.objects[index] = {offset + object_header, static_cast<std::size_t>(object_size)};
    }
    offset += static_cast<std::size_t>(need);
  }
  return "";
}

struct ThreadState {
  const FileRef* file = nullptr;
  std::unordered_map<std::uint64_t, Collection> collections;  // of the current scope
  std::string problem;
};

thread_local ThreadState t_state;

bool is_vlen_string(hid_t type) { return H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0; }

// Converts `n` stored elements (4-byte length, heap address, 4-byte heap index) into malloc'd NUL-terminated strings.
herr_t convert(hid_t src, hid_t dst, H5T_cdata_t* cdata, std::size_t n, std::size_t buf_stride, std::size_t,
               void* buf, void*, hid_t) {
  switch (cdata->command) {
    case H5T_CONV_INIT: {
      // Only stored → memory: a stored string is 4 + address size + 4 bytes, a string in memory a pointer.
      if (!is_vlen_string(src) || !is_vlen_string(dst)) return -1;
      const std::size_t src_size = H5Tget_size(src);
      if (H5Tget_size(dst) != sizeof(char*) || src_size < 4 + 2 + 4 || src_size > 4 + 8 + 4 ||
          src_size == sizeof(char*)) {
        return -1;
      }
      cdata->need_bkg = H5T_BKG_NO;
      return 0;
    }
    case H5T_CONV_FREE: return 0;
    case H5T_CONV_CONV: break;
    default: return -1;
  }
  ThreadState& state = t_state;
  const FileRef* file = state.file;
  if (file == nullptr) {
    state.problem = "a variable-length string was read outside flashot's checked reader";
    return -1;
  }
  if (!file->raw) file->raw = std::make_shared<RawFile>(*file);
  const RawFile& raw = *file->raw;
  if (!raw.problem().empty()) {
    state.problem = raw.problem();
    return -1;
  }
  const std::size_t src_size = H5Tget_size(src);
  const std::size_t addr_size = src_size - 8;
  const std::size_t src_step = buf_stride != 0 ? buf_stride : src_size;
  const std::size_t dst_step = buf_stride != 0 ? buf_stride : sizeof(char*);
  auto* bytes = static_cast<std::byte*>(buf);
  std::vector<char*> made;  // freed again if a later element fails
  auto fail = [&](std::string problem) {
    for (char* p : made) H5free_memory(p);
    state.problem = std::move(problem);
    return herr_t{-1};
  };
  for (std::size_t i = 0; i < n; ++i) {
    const std::byte* s = bytes + i * src_step;
    const std::uint64_t length = decode_le(s, 4);
    const std::uint64_t addr = decode_le(s + 4, addr_size);
    const std::uint64_t index = decode_le(s + 4 + addr_size, 4);
    char* text = nullptr;
    if (addr != 0) {  // address 0 is HDF5's null string
      auto found = state.collections.find(addr);
      if (found == state.collections.end()) {
        Collection c;
        std::string problem = load_collection(raw, addr, c);
        if (!problem.empty()) return fail(std::move(problem));
        found = state.collections.emplace(addr, std::move(c)).first;
      }
      const Collection& c = found->second;
      if (index == 0 || index >= c.objects.size() || c.objects[index].first == kNoObject) {
        return fail("string " + std::to_string(i) + " points to object " + std::to_string(index) +
                    " of the global heap collection at " + hex(addr) + ", which has no such object");
      }
      const auto [offset, size] = c.objects[index];
      if (length > size) {
        return fail("string " + std::to_string(i) + " claims " + std::to_string(length) + " bytes, but its object " +
                    std::to_string(index) + " in the global heap collection at " + hex(addr) + " holds " +
                    std::to_string(size));
      }
      text = static_cast<char*>(H5allocate_memory(static_cast<std::size_t>(length) + 1, false));
      if (text == nullptr) return fail("out of memory for a string of " + std::to_string(length) + " bytes");
      std::memcpy(text, c.bytes.data() + offset, static_cast<std::size_t>(length));
      text[length] = '\0';
      made.push_back(text);
    }
    std::memcpy(bytes + i * dst_step, &text, sizeof(char*));
  }
  return 0;
}

}  // namespace

void register_vlen_string_reader() {
  static const bool registered = [] {
    Id type(H5Tcopy(H5T_C_S1));
    H5Tset_size(type.get(), H5T_VARIABLE);
    return H5Tregister(H5T_PERS_SOFT, "flashot: checked variable-length string read", type.get(), type.get(),
                       convert) >= 0;
  }();
  (void)registered;
}

VlenReadScope::VlenReadScope(const FileRef* file) : previous_(t_state.file) {
  if (file != nullptr && file->writable && file->id >= 0) {
    H5Fflush(file->id, H5F_SCOPE_LOCAL);  // so the bytes on disk are what the library holds
    file->raw.reset();                    // and its size is read again
  }
  t_state.file = file;
  t_state.collections.clear();
}

VlenReadScope::~VlenReadScope() {
  t_state.file = previous_;
  t_state.collections.clear();
}

std::string take_vlen_problem() {
  std::string problem = std::move(t_state.problem);
  t_state.problem.clear();
  return problem;
}

}  // namespace flashot::io::h5
