#include "h5/isolated_walk.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>

#include "h5/h5.hpp"

namespace flashot::io::h5 {
namespace {

// The memory the walk may take beyond what the process had (plus three copies of an in-memory image: HDF5 copies it
// into the property list and into the file). Metadata needs far less; damaged structures can ask for unbounded
// amounts (a local heap whose free list loops grows a list for ever).
constexpr std::size_t kWalkMemoryBytes = std::size_t{256} << 20;
// The child's exit status when it reached its memory ceiling.
constexpr int kExitMemory = 3;

struct Walk {
  const FileRef* file;
  std::set<haddr_t> seen;
  AttributeTable attributes;
  bool out_of_memory = false;  // an allocation of the walk's own failed inside an HDF5 callback
};

void visit(hid_t object, Walk& walk, int depth);

struct AttributeVisit {
  Walk* walk;
  std::map<std::string, Attribute>* entry;
  int depth;
};

// Each attribute decoded as the reader will use it, into the table the parent gets; object references followed.
void record_attribute(hid_t object, const char* name, AttributeVisit* at) {
  Id attr(H5Aopen(object, name, H5P_DEFAULT));
  if (!attr.valid()) {
    H5Eclear2(H5E_DEFAULT);
    return;
  }
  Attribute decoded = decode_attribute(at->walk->file, attr.get());
  const bool follow = decoded.kind == Attribute::Kind::kReference && decoded.problem.empty();
  const std::uint64_t reference = decoded.reference;
  at->entry->emplace(name, std::move(decoded));
  if (follow && at->walk->seen.insert(reference).second) {
    hobj_ref_t ref = reference;
    Id target(H5Rdereference2(object, H5P_DEFAULT, H5R_OBJECT, &ref));
    if (target.valid()) visit(target.get(), *at->walk, at->depth + 1);
  }
  H5Eclear2(H5E_DEFAULT);
}

// HDF5 calls this from C: no exception may pass through it. The walk's own allocations fail near the memory ceiling
// (std::bad_alloc): that ends the walk with the ceiling's verdict.
herr_t visit_attribute(hid_t object, const char* name, const H5A_info_t*, void* data) {
  auto* at = static_cast<AttributeVisit*>(data);
  if (at->walk->out_of_memory) return -1;
  try {
    record_attribute(object, name, at);
  } catch (...) {
    at->walk->out_of_memory = true;
    return -1;
  }
  return 0;
}

// The attributes asked for by name where the walk's table is not used (write_h5ad_copy's upgrade of a legacy copy
// calls H5Aexists, which decodes the messages along another path than iteration).
constexpr const char* kAttributeNames[] = {"encoding-type", "encoding-version", "_index", "column-order", "categories",
                                           "ordered", "shape", "h5sparse_format", "h5sparse_shape"};

// The links the reader looks up by name (H5Lexists searches a group's name index, a symbol table's B-tree and local
// heap, along another path than listing the group by index: a local heap whose free list loops is decoded only there).
constexpr const char* kLinkNames[] = {"obs",    "var",  "X",     "uns",     "raw",  "obsm",  "varm",   "obsp",
                                      "varp",   "layers", "_index", "index", "codes", "categories", "values",
                                      "mask",   "data", "indices", "indptr"};

// The object a link of `group` names, visited once (an object seen before, and cycles, are skipped). Hard and soft
// links are followed (the reader opens both, and opens only objects the walk reached); external links are not:
// their targets are in another file, which the reader does not follow either.
void visit_link(hid_t group, const char* name, Walk& walk, int depth) {
  H5L_info_t link{};
  const bool described = H5Lget_info(group, name, &link, H5P_DEFAULT) >= 0;
  if (described && (link.type == H5L_TYPE_EXTERNAL || link.type >= H5L_TYPE_UD_MIN)) return;
  H5O_info_t target{};
  std::uint64_t address = 0;
  if (described && link.type == H5L_TYPE_HARD) {
    address = link.u.address;
  } else if (H5Oget_info_by_name2(group, name, &target, H5O_INFO_BASIC, H5P_DEFAULT) >= 0) {
    address = target.addr;  // a soft link's target, or a name whose link HDF5 cannot describe but can open
  } else {
    H5Eclear2(H5E_DEFAULT);
    return;
  }
  if (walk.seen.insert(address).second) {
    Id child(H5Oopen(group, name, H5P_DEFAULT));
    if (child.valid()) visit(child.get(), walk, depth + 1);
  }
  H5Eclear2(H5E_DEFAULT);
}

// Each child of a group by index, so that one damaged link does not end the walk (H5Ovisit stops at the first).
void visit_children(hid_t group, Walk& walk, int depth) {
  // By name first: in a damaged group a name lookup can find what listing by index does not, and the reader looks
  // these names up (an object the walk does not reach has no attributes for the reader).
  // Whatever H5Lexists answers: on a damaged group its answer depends on what HDF5 decoded before (it failed here
  // where the reader's process, after other calls, found the link).
  for (const char* name : kLinkNames) {
    H5Lexists(group, name, H5P_DEFAULT);
    H5Eclear2(H5E_DEFAULT);
    visit_link(group, name, walk, depth);
  }
  H5Eclear2(H5E_DEFAULT);
  H5G_info_t info{};
  if (H5Gget_info(group, &info) < 0) return;
  for (hsize_t i = 0; i < info.nlinks && i < 1'000'000; ++i) {
    const ssize_t length = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (length < 0 || length > (ssize_t{1} << 20)) continue;
    std::string name(static_cast<std::size_t>(length), '\0');
    if (H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1, H5P_DEFAULT) < 0) {
      continue;
    }
    visit_link(group, name.c_str(), walk, depth);
  }
}

void visit(hid_t object, Walk& walk, int depth) {
  if (depth > 64) return;
  H5O_info_t info{};
  if (H5Oget_info2(object, &info, H5O_INFO_BASIC | H5O_INFO_NUM_ATTRS) < 0) return;
  // An object reached twice (a hard link and a reference) keeps its first entry.
  const auto [entry, fresh] = walk.attributes.try_emplace(info.addr);
  if (fresh) {
    for (const char* name : kAttributeNames) H5Aexists(object, name);
    AttributeVisit at{&walk, &entry->second, depth};
    hsize_t index = 0;
    H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_NATIVE, &index, visit_attribute, &at);
  }
  H5Eclear2(H5E_DEFAULT);
  if (info.type == H5O_TYPE_DATASET) {
    Id type(H5Dget_type(object));
    Id space(H5Dget_space(object));
    Id dcpl(H5Dget_create_plist(object));
    if (dcpl.valid()) H5Pget_layout(dcpl.get());
    H5Dget_storage_size(object);
  } else if (info.type == H5O_TYPE_GROUP) {
    visit_children(object, walk, depth);
  }
  H5Eclear2(H5E_DEFAULT);
}

}  // namespace
}  // namespace flashot::io::h5

// Set when the process runs under a sanitizer (the fuzz targets): a fuzzer's death callback would otherwise treat
// the child's sanitizer report as its own crash and write an artifact, although the parent handles it.
extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));

namespace flashot::io::h5 {
namespace {

// A field of /proc/self/status in kB ("VmData", "VmPeak", ...); -1 when it cannot be read.
long status_kb(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long value = -1;
  const std::size_t length = std::strlen(field);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, field, length) == 0 && line[length] == ':') {
      value = std::strtol(line + length + 1, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return value;
}

// The end of every path of the child: near its memory ceiling (even where HDF5 then refused the file) is a verdict of
// its own. No HDF5 clean-up: the child only had to survive.
[[noreturn]] void end_child(long start_kb, std::size_t budget) {
  const long peak_kb = status_kb("VmPeak");
  const bool near_ceiling =
      start_kb >= 0 && peak_kb >= start_kb && static_cast<std::size_t>(peak_kb - start_kb) * 1024 >= budget / 4 * 3;
  ::_exit(near_ceiling ? kExitMemory : 0);
}

// The table travels from the child to the parent through an anonymous file (memfd) both hold: written whole before
// the child exits, read whole after the parent's wait, so nothing depends on how a pipe splits the bytes.
// Layout: "FOAT", then per object: address, attribute count, and per attribute: name, kind, count, reference,
// problem, strings, ints; then "END!". Numbers are native-endian (one machine, one build).
constexpr char kTableStart[4] = {'F', 'O', 'A', 'T'};
constexpr char kTableEnd[4] = {'E', 'N', 'D', '!'};

class TableWriter {
 public:
  void bytes(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }
  void u64(std::uint64_t v) { bytes(&v, sizeof(v)); }
  void text(const std::string& t) {
    u64(t.size());
    bytes(t.data(), t.size());
  }
  const std::string& data() const { return out_; }

 private:
  std::string out_;
};

std::string serialize(const AttributeTable& table) {
  TableWriter w;
  w.bytes(kTableStart, 4);
  for (const auto& [address, attributes] : table) {
    w.u64(address);
    w.u64(attributes.size());
    for (const auto& [name, a] : attributes) {
      w.text(name);
      w.u64(static_cast<std::uint64_t>(a.kind));
      w.u64(static_cast<std::uint64_t>(a.count));
      w.u64(a.reference);
      w.text(a.problem);
      w.u64(a.strings.size());
      for (const auto& t : a.strings) w.text(t);
      w.u64(a.ints.size());
      if (!a.ints.empty()) w.bytes(a.ints.data(), a.ints.size() * sizeof(std::int64_t));
    }
  }
  w.bytes(kTableEnd, 4);
  return w.data();
}

class TableReader {
 public:
  explicit TableReader(const std::string& in) : in_(in) {}
  bool bytes(void* p, std::size_t n) {
    if (n > in_.size() - at_) return false;
    std::memcpy(p, in_.data() + at_, n);
    at_ += n;
    return true;
  }
  bool u64(std::uint64_t& v) { return bytes(&v, sizeof(v)); }
  bool text(std::string& t) {
    std::uint64_t n = 0;
    if (!u64(n) || n > in_.size() - at_) return false;
    t.assign(in_.data() + at_, static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return true;
  }
  std::size_t left() const { return in_.size() - at_; }

 private:
  const std::string& in_;
  std::size_t at_ = 0;
};

// nullptr when the bytes are not a whole table (the child wrote none: HDF5 refused the file).
std::shared_ptr<const AttributeTable> deserialize(const std::string& in) {
  TableReader r(in);
  char mark[4] = {};
  if (!r.bytes(mark, 4) || std::memcmp(mark, kTableStart, 4) != 0) return nullptr;
  auto table = std::make_shared<AttributeTable>();
  while (r.left() > 4) {
    std::uint64_t address = 0, n = 0;
    if (!r.u64(address) || !r.u64(n)) return nullptr;
    auto& attributes = (*table)[address];
    for (std::uint64_t i = 0; i < n; ++i) {
      std::string name;
      Attribute a;
      std::uint64_t kind = 0, count = 0, strings = 0, ints = 0;
      if (!r.text(name) || !r.u64(kind) || !r.u64(count) || !r.u64(a.reference) || !r.text(a.problem) ||
          !r.u64(strings) || kind > static_cast<std::uint64_t>(Attribute::Kind::kOther) || strings > r.left() / 8) {
        return nullptr;
      }
      a.kind = static_cast<Attribute::Kind>(kind);
      a.count = static_cast<std::int64_t>(count);
      a.strings.resize(static_cast<std::size_t>(strings));
      for (auto& t : a.strings) {
        if (!r.text(t)) return nullptr;
      }
      if (!r.u64(ints) || ints > r.left() / sizeof(std::int64_t)) return nullptr;
      a.ints.resize(static_cast<std::size_t>(ints));
      if (ints > 0 && !r.bytes(a.ints.data(), a.ints.size() * sizeof(std::int64_t))) return nullptr;
      attributes.emplace(std::move(name), std::move(a));
    }
  }
  if (!r.bytes(mark, 4) || std::memcmp(mark, kTableEnd, 4) != 0 || r.left() != 0) return nullptr;
  return table;
}

// Writes all of `data` at the start of `fd`; false on any failure.
bool write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// The whole content of `fd`.
std::optional<std::string> read_all(int fd) {
  struct stat st{};
  if (::fstat(fd, &st) != 0 || st.st_size < 0) return std::nullopt;
  std::string data(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::pread(fd, data.data() + done, data.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    done += static_cast<std::size_t>(n);
  }
  return data;
}

[[noreturn]] void walk_in_child(const FileRef& file, std::chrono::seconds limit, int table_fd) {
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(nullptr);
  // A fault ends the child at once: the default actions, not the handlers the caller may have installed (a
  // fuzzer's or a crash reporter's, which would report the parent's process as crashed, and may not survive the
  // memory ceiling below).
  for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(sig, SIG_DFL);
  // The child times itself: SIGALRM's default action ends it after `limit`, whatever the caller had done with the
  // signal (ignored or blocked dispositions are inherited through fork).
  ::signal(SIGALRM, SIG_DFL);
  sigset_t alarm_only;
  sigemptyset(&alarm_only);
  sigaddset(&alarm_only, SIGALRM);
  ::sigprocmask(SIG_UNBLOCK, &alarm_only, nullptr);
  ::alarm(static_cast<unsigned>(std::max<std::chrono::seconds::rep>(limit.count(), 1)));
  // And a memory ceiling: allocations past it fail (HDF5 then gives up on that structure, or the child dies), and a
  // walk that came near it tells the parent, which must not run the same code without one.
  const std::size_t budget = kWalkMemoryBytes + 3 * file.image.size();
  const long data_kb = status_kb("VmData"), start_kb = status_kb("VmSize");
  if (data_kb >= 0) {
    rlimit ceiling{};
    const rlim_t wanted = static_cast<rlim_t>(data_kb) * 1024 + budget;
    if (::getrlimit(RLIMIT_DATA, &ceiling) == 0 && (ceiling.rlim_cur == RLIM_INFINITY || wanted < ceiling.rlim_cur)) {
      ceiling.rlim_cur = wanted;
      ::setrlimit(RLIMIT_DATA, &ceiling);
    }
  }
  silence_errors();
  hid_t id = H5I_INVALID_HID;
  if (!file.image.empty()) {
    Id fapl(H5Pcreate(H5P_FILE_ACCESS));
    H5Pset_fapl_core(fapl.get(), std::size_t{1} << 20, 0);
    H5Pset_file_image(fapl.get(), const_cast<std::byte*>(file.image.data()), file.image.size());
    id = H5Fopen(file.path.c_str(), H5F_ACC_RDONLY, fapl.get());
  } else {
    id = H5Fopen(file.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  }
  if (id < 0) end_child(start_kb, budget);  // HDF5 refused it: the reader will say why
  FileRef ref = file;
  ref.id = id;
  ref.raw.reset();
  try {
    Walk walk{&ref, {}, {}};
    Id root(H5Oopen(id, "/", H5P_DEFAULT));
    if (root.valid()) {
      visit(root.get(), walk, 0);
      if (walk.out_of_memory) ::_exit(kExitMemory);
      if (table_fd >= 0) write_all(table_fd, serialize(walk.attributes));
    }
  } catch (...) {  // the walk's own containers, near the ceiling (bad_alloc, length_error)
    ::_exit(kExitMemory);
  }
  end_child(start_kb, budget);
}

// One blocking wait; the child's alarm bounds it. A signal to the parent (libFuzzer's timer, every few seconds) ends the
// wait early with EINTR, a timing-dependent number of times: under a fuzzer's coverage instrumentation that loop
// would give the same input different coverage from run to run, so the fuzz runs would not repeat (the same seed
// took other paths on the CI machine than here). It is kept out of the instrumentation.
#if defined(__clang__)
__attribute__((no_sanitize("coverage")))
#endif
bool wait_for(pid_t child, int& status) {
  pid_t done = -1;
  do {
    done = ::waitpid(child, &status, 0);
  } while (done < 0 && errno == EINTR);
  return done == child;
}

std::string signal_name(int sig) {
  const char* text = ::strsignal(sig);
  return "signal " + std::to_string(sig) + (text != nullptr ? std::string(", ") + text : std::string());
}

}  // namespace

WalkResult isolated_walk(const FileRef& file, std::chrono::seconds limit) {
  WalkResult result;
  // Where the child leaves the attribute table; without one the reader asks HDF5 itself, as before the table.
  const int table_fd = ::memfd_create("flashot-attributes", MFD_CLOEXEC);
  const pid_t child = ::fork();
  if (child < 0) {  // cannot isolate: read as before
    if (table_fd >= 0) ::close(table_fd);
    return result;
  }
  if (child == 0) walk_in_child(file, limit, table_fd);
  int status = 0;
  const bool waited = wait_for(child, status);
  std::optional<std::string> table;
  if (table_fd >= 0) {
    if (waited && WIFEXITED(status) && WEXITSTATUS(status) == 0) table = read_all(table_fd);
    ::close(table_fd);
  }
  if (!waited) return result;
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExitMemory) {
    result.problem = "corrupt file: HDF5 needed more than " + std::to_string(kWalkMemoryBytes >> 20) +
                     " MB to read its metadata (in an isolated process)";
  } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
    result.problem = "corrupt file: HDF5 did not finish reading its metadata in " + std::to_string(limit.count()) +
                     " s (an endless loop on damaged structures?)";
  } else if (WIFSIGNALED(status)) {
    result.problem = "corrupt file: HDF5 crashed reading its metadata (" + signal_name(WTERMSIG(status)) +
                     ", in an isolated process)";
  } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {  // e.g. a sanitizer's report with its exit code
    result.problem = "corrupt file: reading its metadata failed in an isolated process (exit status " +
                     std::to_string(WEXITSTATUS(status)) + ")";
  } else if (table) {
    // A walk that could not open the file leaves no table: an empty one then, so that nothing is decoded here.
    result.attributes = deserialize(*table);
    if (result.attributes == nullptr) result.attributes = std::make_shared<const AttributeTable>();
  }
  return result;
}

}  // namespace flashot::io::h5
