#include "h5/isolated_walk.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "h5/h5.hpp"
#include "h5/vlen.hpp"

namespace flashot::io::h5 {
namespace {

constexpr hsize_t kMaxAttributeBytes = hsize_t{16} << 20;
// The memory the walk may take beyond what the process had (plus three copies of an in-memory image: HDF5 copies it
// into the property list and into the file). Metadata needs far less; damaged structures can ask for unbounded
// amounts (a local heap whose free list loops grows a list for ever).
constexpr std::size_t kWalkMemoryBytes = std::size_t{256} << 20;
// The child's exit status when it reached its memory ceiling.
constexpr int kExitMemory = 3;

struct Walk {
  const FileRef* file;
  std::set<haddr_t> seen;
};

void visit(hid_t object, Walk& walk, int depth);

herr_t visit_attribute(hid_t object, const char* name, const H5A_info_t*, void* data) {
  const auto* walk = static_cast<const Walk*>(data);
  Id attr(H5Aopen(object, name, H5P_DEFAULT));
  if (!attr.valid()) return 0;
  Id type(H5Aget_type(attr.get()));
  Id space(H5Aget_space(attr.get()));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  const hsize_t stored = H5Aget_storage_size(attr.get());
  if (!type.valid() || n <= 0 || stored > kMaxAttributeBytes) return 0;
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls == H5T_STRING && H5Tis_variable_str(type.get()) > 0) {
    if (static_cast<hsize_t>(n) > stored) return 0;
    Id mem(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem.get(), H5T_VARIABLE);
    std::vector<char*> values(static_cast<std::size_t>(n), nullptr);
    const VlenReadScope scope(walk->file);
    if (H5Aread(attr.get(), mem.get(), values.data()) >= 0) {
      H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, values.data());
    } else {
      take_vlen_problem();
    }
  } else if (cls == H5T_REFERENCE) {
    if (H5Tequal(type.get(), H5T_STD_REF_OBJ) > 0 && n == 1) {
      hobj_ref_t ref{};
      if (H5Aread(attr.get(), H5T_STD_REF_OBJ, &ref) >= 0) {
        Id target(H5Rdereference2(object, H5P_DEFAULT, H5R_OBJECT, &ref));
        auto* w = static_cast<Walk*>(data);
        if (target.valid() && w->seen.insert(ref).second) visit(target.get(), *w, 32);
      }
    }
  } else {
    const std::size_t size = H5Tget_size(type.get());
    if (size == 0 || static_cast<hsize_t>(n) > kMaxAttributeBytes / size) return 0;
    std::vector<unsigned char> buffer(static_cast<std::size_t>(n) * size);
    if (cls != H5T_VLEN && cls != H5T_COMPOUND) H5Aread(attr.get(), type.get(), buffer.data());
  }
  H5Eclear2(H5E_DEFAULT);
  return 0;
}

// The attributes the reader asks for by name (H5Aexists decodes the messages along another path than iteration).
constexpr const char* kAttributeNames[] = {"encoding-type", "encoding-version", "_index", "column-order", "categories",
                                           "ordered", "shape", "h5sparse_format", "h5sparse_shape"};

// The links the reader looks up by name (H5Lexists searches a group's name index, a symbol table's B-tree and local
// heap, along another path than listing the group by index: a local heap whose free list loops is decoded only there).
constexpr const char* kLinkNames[] = {"obs",    "var",  "X",     "uns",     "raw",  "obsm",  "varm",   "obsp",
                                      "varp",   "layers", "_index", "index", "codes", "categories", "values",
                                      "mask",   "data", "indices", "indptr"};

// Each child of a group by index, so that one damaged link does not end the walk (H5Ovisit stops at the first).
void visit_children(hid_t group, Walk& walk, int depth) {
  for (const char* name : kLinkNames) H5Lexists(group, name, H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  H5G_info_t info{};
  if (H5Gget_info(group, &info) < 0) return;
  for (hsize_t i = 0; i < info.nlinks && i < 1'000'000; ++i) {
    char name[1024] = {};
    if (H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof(name), H5P_DEFAULT) < 0) continue;
    H5L_info_t link{};
    if (H5Lget_info(group, name, &link, H5P_DEFAULT) < 0 || link.type != H5L_TYPE_HARD) continue;
    if (!walk.seen.insert(link.u.address).second) continue;  // a hard link seen before (and cycles)
    Id child(H5Oopen(group, name, H5P_DEFAULT));
    if (child.valid()) visit(child.get(), walk, depth + 1);
    H5Eclear2(H5E_DEFAULT);
  }
}

void visit(hid_t object, Walk& walk, int depth) {
  if (depth > 64) return;
  H5O_info_t info{};
  if (H5Oget_info2(object, &info, H5O_INFO_BASIC | H5O_INFO_NUM_ATTRS) < 0) return;
  for (const char* name : kAttributeNames) H5Aexists(object, name);
  hsize_t at = 0;
  H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_NATIVE, &at, visit_attribute, &walk);
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

[[noreturn]] void walk_in_child(const FileRef& file, std::chrono::seconds limit) {
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
  Walk walk{&ref, {}};
  Id root(H5Oopen(id, "/", H5P_DEFAULT));
  if (root.valid()) visit(root.get(), walk, 0);
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

std::optional<std::string> crash_in_isolated_walk(const FileRef& file, std::chrono::seconds limit) {
  const pid_t child = ::fork();
  if (child < 0) return std::nullopt;  // cannot isolate: read as before
  if (child == 0) walk_in_child(file, limit);
  int status = 0;
  if (!wait_for(child, status)) return std::nullopt;
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExitMemory) {
    return "corrupt file: HDF5 needed more than " + std::to_string(kWalkMemoryBytes >> 20) +
           " MB to read its metadata (in an isolated process)";
  }
  if (!WIFSIGNALED(status)) return std::nullopt;
  if (WTERMSIG(status) == SIGALRM) {
    return "corrupt file: HDF5 did not finish reading its metadata in " + std::to_string(limit.count()) +
           " s (an endless loop on damaged structures?)";
  }
  return "corrupt file: HDF5 crashed reading its metadata (" + signal_name(WTERMSIG(status)) +
         ", in an isolated process)";
}

}  // namespace flashot::io::h5
