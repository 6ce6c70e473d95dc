#include "h5/h5.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "flashot/io/errors.hpp"
#include "h5/lzf.hpp"
#include "h5/vlen.hpp"
#include "partial_file.hpp"

namespace flashot::io::h5 {
namespace {

// A dataset may compress well, but a header that claims far more elements than the file could hold is a
// malformed (or hostile) file: refuse it before allocating. Deflate tops out near 1000:1 on constant data.
constexpr hsize_t kMaxExpansion = 1024;
constexpr hsize_t kAlwaysAllowedBytes = hsize_t{64} << 20;

// Whether `count` items of `unit` bytes claim more than `stored` bytes could expand to (a hostile header, refused
// before anyone sizes a buffer from it); a product past 2^64 claims too much.
bool claims_more_than_stored(hsize_t count, hsize_t unit, hsize_t stored) {
  if (unit != 0 && count > std::numeric_limits<hsize_t>::max() / unit) return true;
  const hsize_t bytes = count * unit;
  return bytes > kAlwaysAllowedBytes && bytes / kMaxExpansion > stored;
}
constexpr int kDeflateLevel = 4;
constexpr hsize_t kTargetChunkBytes = hsize_t{1} << 20;
constexpr hsize_t kMaxChunkElements1d = hsize_t{1} << 18;
constexpr H5Z_filter_t kLzfFilterId = 32000;

herr_t collect_error(unsigned n, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::vector<std::string>*>(data);
  if (n >= 2) return 0;
  char minor[160] = {};
  H5Eget_msg(err->min_num, nullptr, minor, sizeof(minor));
  std::string text = minor;
  if (err->desc != nullptr && *err->desc != '\0') text += std::string(text.empty() ? "" : ": ") + err->desc;
  out->push_back(std::move(text));
  return 0;
}

// After a failed read: the HDF5 error stack, and when it says a filter is missing, which one (name and id).
std::string read_failure(hid_t dataset) {
  const std::string stack = take_error_stack();
  std::string problem;
  if (stack.find("filter") != std::string::npos || stack.find("plugin") != std::string::npos) {
    Id dcpl(H5Dget_create_plist(dataset));
    const int n = dcpl.valid() ? H5Pget_nfilters(dcpl.get()) : 0;
    for (int i = 0; i < n; ++i) {
      unsigned flags = 0;
      std::size_t n_values = 0;
      char name[128] = {};
      unsigned config = 0;
      const H5Z_filter_t filter = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &n_values, nullptr,
                                                 sizeof(name), name, &config);
      if (filter < 0 || H5Zfilter_avail(filter) > 0) continue;
      const std::string label = filter == kLzfFilterId ? std::string("LZF") : std::string(name);
      problem += (problem.empty() ? "" : "; ") + std::string("the ") + (label.empty() ? "unnamed" : label) +
                 " filter (HDF5 filter id " + std::to_string(filter) + ") is not available";
    }
    H5Eclear2(H5E_DEFAULT);
  }
  if (stack.rfind("corrupt file: ", 0) == 0) return "cannot read: " + stack;
  if (problem.empty()) return "cannot read" + (stack.empty() ? std::string() : " (HDF5: " + stack + ")");
  return "cannot read: " + problem + " (HDF5: " + stack + ")";
}

[[noreturn]] void throw_format(const FileRef* file, const std::string& object_path, const std::string& problem) {
  throw FormatError(file != nullptr ? file->path : std::string("<hdf5>"), object_path.empty() ? "/" : object_path,
                    problem);
}

[[noreturn]] void throw_io(const FileRef* file, const std::string& object_path, const std::string& problem) {
  throw IoError((file != nullptr ? file->path : std::string("<hdf5>")) + ": " +
                (object_path.empty() ? std::string("/") : object_path) + ": " + problem);
}


// The bytes a dataset stores, as far as the file can back them. HDF5 reports what the layout message says, and a
// damaged one claims more than the whole file: fuzz_h5ad gave an obsm record array of 96 GB 7.5·10^18 stored bytes,
// so no check against them refused it and HDF5 allocated a 16 GB conversion buffer
// (tests/io/data/hostile/fuzz_huge_member.h5ad). Data in the file itself cannot exceed the file.
hsize_t stored_bytes(hid_t dataset) {
  const hsize_t stored = H5Dget_storage_size(dataset);
  Id file(H5Iget_file_id(dataset));
  hsize_t size = 0;
  const bool known = file.valid() && H5Fget_filesize(file.get(), &size) >= 0;
  H5Eclear2(H5E_DEFAULT);
  return known ? std::min(stored, size) : stored;
}

hsize_t product(std::span<const hsize_t> dims) {
  hsize_t n = 1;
  for (hsize_t d : dims) n *= d;
  return n;
}

// A string type matching what is stored (variable or fixed length, same character set) for reading.
Id string_mem_type(hid_t file_type) {
  Id mem(H5Tcopy(H5T_C_S1));
  if (H5Tis_variable_str(file_type) > 0) {
    H5Tset_size(mem.get(), H5T_VARIABLE);
  } else {
    H5Tset_size(mem.get(), std::max<std::size_t>(H5Tget_size(file_type), 1));
    H5Tset_strpad(mem.get(), H5Tget_strpad(file_type));
  }
  H5Tset_cset(mem.get(), H5Tget_cset(file_type));
  return mem;
}

std::string trim_fixed(const char* p, std::size_t size, H5T_str_t pad) {
  std::size_t n = 0;
  while (n < size && p[n] != '\0') ++n;
  if (pad == H5T_STR_SPACEPAD) {
    while (n > 0 && p[n - 1] == ' ') --n;
  }
  return std::string(p, n);
}

// Reads `n` strings from a dataset or attribute through `read(mem_type, buffer)`.
std::vector<std::string> read_string_values(hid_t file_type, hsize_t n,
                                            const std::function<herr_t(hid_t, void*)>& read, hid_t space,
                                            const std::function<void(const std::string&)>& fail) {
  std::vector<std::string> out;
  out.reserve(n);
  Id mem = string_mem_type(file_type);
  if (H5Tis_variable_str(file_type) > 0) {
    std::vector<char*> ptrs(n, nullptr);
    if (n > 0 && read(mem.get(), ptrs.data()) < 0) {
      for (char* p : ptrs) {  // strings of batches converted before the failure
        if (p != nullptr) H5free_memory(p);
      }
      fail("cannot read strings");
    }
    for (char* p : ptrs) out.emplace_back(p != nullptr ? p : "");
    if (n > 0) H5Dvlen_reclaim(mem.get(), space, H5P_DEFAULT, ptrs.data());
  } else {
    const std::size_t size = std::max<std::size_t>(H5Tget_size(file_type), 1);
    std::vector<char> buffer(n * size);
    if (n > 0 && read(mem.get(), buffer.data()) < 0) fail("cannot read strings");
    const H5T_str_t pad = H5Tget_strpad(file_type);
    for (hsize_t i = 0; i < n; ++i) out.push_back(trim_fixed(buffer.data() + i * size, size, pad));
  }
  return out;
}

// Integer value of each element of an enum or integer buffer read in its native type.
std::vector<std::int64_t> widen_integers(const std::vector<unsigned char>& raw, std::size_t size, bool is_signed) {
  std::vector<std::int64_t> out(size == 0 ? 0 : raw.size() / size);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const unsigned char* p = raw.data() + i * size;
    std::int64_t v = 0;
    switch (size) {
      case 1: v = is_signed ? std::int64_t{static_cast<std::int8_t>(p[0])} : std::int64_t{p[0]}; break;
      case 2: {
        std::uint16_t u;
        std::memcpy(&u, p, 2);
        v = is_signed ? std::int64_t{static_cast<std::int16_t>(u)} : std::int64_t{u};
        break;
      }
      case 4: {
        std::uint32_t u;
        std::memcpy(&u, p, 4);
        v = is_signed ? std::int64_t{static_cast<std::int32_t>(u)} : std::int64_t{u};
        break;
      }
      default: {
        std::uint64_t u = 0;
        std::memcpy(&u, p, std::min<std::size_t>(size, 8));
        v = static_cast<std::int64_t>(u);
      }
    }
    out[i] = v;
  }
  return out;
}

bool enum_or_int_signed(hid_t type) {
  if (H5Tget_class(type) == H5T_ENUM) {
    Id base(H5Tget_super(type));
    return H5Tget_sign(base.get()) != H5T_SGN_NONE;
  }
  return H5Tget_sign(type) != H5T_SGN_NONE;
}

}  // namespace

void silence_errors() {
  static const bool silenced = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    register_builtin_lzf();
    register_vlen_string_reader();
    return true;
  }();
  (void)silenced;
}

std::string take_error_stack() {
  std::vector<std::string> entries;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &entries);
  H5Eclear2(H5E_DEFAULT);
  // A corrupt string found by flashot's own reader says more than HDF5's "conversion failed" that follows it.
  if (std::string vlen = take_vlen_problem(); !vlen.empty()) return "corrupt file: " + vlen;
  std::string out;
  for (const auto& e : entries) out += (out.empty() ? "" : "; ") + e;
  return out;
}

std::string hdf5_problem(const std::string& what) {
  const std::string stack = take_error_stack();
  // A failed write's stack carries the system's errno ("errno = 27, error message = 'File too large'"): say it in
  // plain words first, so that a full disk or a file size limit is not buried in HDF5's wording.
  std::string cause;
  if (const auto at = stack.find("errno = "); at != std::string::npos) {
    const int error = std::atoi(stack.c_str() + at + 8);
    if (error > 0) cause = ": " + detail::errno_cause(error);
  }
  if (stack.rfind("corrupt file: ", 0) == 0) return what + ": " + stack;
  return what + cause + (stack.empty() ? "" : " (HDF5: " + stack + ")");
}

void Id::reset() {
  if (id_ >= 0 && H5Iis_valid(id_) > 0) H5Idec_ref(id_);
  id_ = H5I_INVALID_HID;
}

std::string join_path(const std::string& parent, const std::string& name) {
  if (parent.empty() || parent == "/") return "/" + name;
  return parent + "/" + name;
}

// ---- Node ------------------------------------------------------------------------------------------------

void Node::fail(const std::string& problem) const { throw_format(file_, object_path_, problem); }

bool Node::is_group() const { return H5Iget_type(id()) == H5I_GROUP || H5Iget_type(id()) == H5I_FILE; }
bool Node::is_dataset() const { return H5Iget_type(id()) == H5I_DATASET; }

bool Node::has(const std::string& name) const {
  if (name.empty() || name.find('/') != std::string::npos || !is_group()) return false;
  const htri_t link = H5Lexists(id(), name.c_str(), H5P_DEFAULT);
  if (link <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return false;
  }
  const htri_t object = H5Oexists_by_name(id(), name.c_str(), H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  return object > 0;
}

namespace {
// Whether the isolated walk reached the object at `address` of a file it walked (always, for a file without a walk).
// Opening an object decodes its header messages, whose decoders fault on damaged ones: the reader opens only what
// the walk's child opened first.
bool walked(const FileRef* file, std::uint64_t address) {
  return file == nullptr || file->attributes == nullptr || file->attributes->contains(address);
}
}  // namespace

std::optional<Node> Node::find(const std::string& name) const {
  if (!has(name)) return std::nullopt;
  const std::string path = join_path(object_path_, name);
  if (file_ != nullptr && file_->attributes != nullptr) {
    H5L_info_t link{};
    if (H5Lget_info(id(), name.c_str(), &link, H5P_DEFAULT) < 0) throw_format(file_, path, hdf5_problem("cannot open"));
    if (link.type == H5L_TYPE_EXTERNAL || link.type >= H5L_TYPE_UD_MIN) {
      throw_format(file_, path, "a link to another file, which flashot does not follow");
    }
    H5O_info_t target{};
    if (link.type == H5L_TYPE_SOFT && H5Oget_info_by_name2(id(), name.c_str(), &target, H5O_INFO_BASIC, H5P_DEFAULT) < 0) {
      throw_format(file_, path, hdf5_problem("cannot open"));
    }
    const std::uint64_t address = link.type == H5L_TYPE_HARD ? link.u.address : target.addr;
    if (!walked(file_, address)) {
      throw_format(file_, path, "corrupt file: the isolated metadata walk did not reach it (its group does not list it)");
    }
  }
  Id opened(H5Oopen(id(), name.c_str(), H5P_DEFAULT));
  if (!opened.valid()) throw_format(file_, path, hdf5_problem("cannot open"));
  return Node(file_, std::move(opened), path);
}

Node Node::child(const std::string& name) const {
  auto found = find(name);
  if (!found) throw_format(file_, join_path(object_path_, name), "missing (expected by the AnnData layout)");
  return std::move(*found);
}

std::vector<std::string> Node::children() const {
  std::vector<std::string> names;
  if (!is_group()) return names;
  H5G_info_t info{};
  if (H5Gget_info(id(), &info) < 0) fail(hdf5_problem("cannot list group"));
  H5_index_t index = H5_INDEX_CRT_ORDER;
  for (int attempt = 0; attempt < 2; ++attempt) {
    names.clear();
    bool ok = true;
    for (hsize_t i = 0; i < info.nlinks && ok; ++i) {
      const ssize_t len = H5Lget_name_by_idx(id(), ".", index, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      if (len < 0) {
        ok = false;
        break;
      }
      std::string name(static_cast<std::size_t>(len), '\0');
      H5Lget_name_by_idx(id(), ".", index, H5_ITER_INC, i, name.data(), name.size() + 1, H5P_DEFAULT);
      names.push_back(std::move(name));
    }
    H5Eclear2(H5E_DEFAULT);
    if (ok) return names;
    index = H5_INDEX_NAME;  // creation order is not tracked in this group (h5py's default)
  }
  fail(hdf5_problem("cannot list group"));
}

namespace {
// A problem found while decoding an attribute, carried out of read_string_values' failure callback.
struct AttributeProblem {
  std::string text;
};
}  // namespace

Attribute decode_attribute(const FileRef* file, hid_t attr) {
  Attribute out;
  Id type(H5Aget_type(attr));
  Id space(H5Aget_space(attr));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  out.count = n < 0 ? -1 : static_cast<std::int64_t>(n);
  const H5T_class_t cls = H5Tget_class(type.get());
  if (n < 0) {
    out.kind = cls == H5T_STRING ? Attribute::Kind::kString : Attribute::Kind::kOther;
    out.problem = hdf5_problem("unreadable dataspace");
    return out;
  }
  try {
    if (cls == H5T_STRING) {
      out.kind = Attribute::Kind::kString;
      if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) return out;
      // An attribute holds its elements in the object header: a count its stored bytes cannot back is corrupt.
      const hsize_t stored = H5Aget_storage_size(attr);
      const std::size_t element = std::max<std::size_t>(H5Tget_size(type.get()), 1);
      if (static_cast<hsize_t>(n) > stored / element) {
        out.problem = "claims " + std::to_string(n) + " strings but stores only " + std::to_string(stored) + " bytes";
        return out;
      }
      const VlenReadScope scope(file);
      out.strings = read_string_values(
          type.get(), static_cast<hsize_t>(n), [&](hid_t mem, void* buf) { return H5Aread(attr, mem, buf); },
          space.get(), [](const std::string& p) { throw AttributeProblem{hdf5_problem(p)}; });
    } else if (cls == H5T_INTEGER || cls == H5T_FLOAT || cls == H5T_ENUM) {
      out.kind = Attribute::Kind::kNumeric;
      const hsize_t stored = H5Aget_storage_size(attr);
      if (claims_more_than_stored(static_cast<hsize_t>(n), std::max<std::size_t>(H5Tget_size(type.get()), 1),
                                  stored)) {
        throw AttributeProblem{"claims " + std::to_string(n) + " values but stores only " + std::to_string(stored) +
                               " bytes"};
      }
      if (cls == H5T_ENUM) {
        Id native(H5Tget_native_type(type.get(), H5T_DIR_ASCEND));
        const std::size_t size = H5Tget_size(native.get());
        std::vector<unsigned char> raw(static_cast<std::size_t>(n) * size);
        if (n > 0 && H5Aread(attr, native.get(), raw.data()) < 0) throw AttributeProblem{hdf5_problem("cannot read")};
        out.ints = widen_integers(raw, size, enum_or_int_signed(type.get()));
      } else {
        out.ints.resize(static_cast<std::size_t>(n));
        if (n > 0 && H5Aread(attr, H5T_NATIVE_INT64, out.ints.data()) < 0) {
          throw AttributeProblem{hdf5_problem("cannot read")};
        }
      }
    } else if (cls == H5T_REFERENCE) {
      out.kind = Attribute::Kind::kReference;
      if (n != 1) throw AttributeProblem{"expected one object reference"};
      hobj_ref_t ref{};
      if (H5Aread(attr, H5T_STD_REF_OBJ, &ref) < 0) throw AttributeProblem{hdf5_problem("cannot read")};
      out.reference = ref;
    }
  } catch (const AttributeProblem& p) {
    out.strings.clear();
    out.ints.clear();
    out.problem = p.text;
  }
  H5Eclear2(H5E_DEFAULT);
  return out;
}

const std::map<std::string, Attribute>* Node::table_entry() const {
  if (!table_looked_up_) {
    table_looked_up_ = true;
    // The key is an address in the reader's file: an object of another file (through an external link) has none.
    H5O_info_t object{}, root{};
    const bool known = H5Oget_info2(id(), &object, H5O_INFO_BASIC) >= 0 &&
                       H5Oget_info2(file_->id, &root, H5O_INFO_BASIC) >= 0 && object.fileno == root.fileno;
    H5Eclear2(H5E_DEFAULT);
    if (known) {
      const auto it = file_->attributes->find(object.addr);
      if (it != file_->attributes->end()) table_entry_ = &it->second;
    }
  }
  return table_entry_;
}

const Attribute* Node::attribute(const std::string& name, Attribute& scratch) const {
  if (file_ != nullptr && file_->attributes != nullptr) {
    // An object the walk did not reach (in a damaged file: a name lookup finds what listing the group does not) has
    // no attributes for the reader: nothing is decoded in this process.
    const auto* entry = table_entry();
    if (entry == nullptr) return nullptr;
    const auto it = entry->find(name);
    return it == entry->end() ? nullptr : &it->second;
  }
  // A file being written, or no walk: HDF5 decodes it here.
  Id attr(H5Aopen(id(), name.c_str(), H5P_DEFAULT));
  if (!attr.valid()) {
    H5Eclear2(H5E_DEFAULT);
    return nullptr;
  }
  scratch = decode_attribute(file_, attr.get());
  return &scratch;
}

bool Node::has_attr(const std::string& name) const {
  if (file_ != nullptr && file_->attributes != nullptr) {
    const auto* entry = table_entry();
    return entry != nullptr && entry->contains(name);
  }
  const htri_t r = H5Aexists(id(), name.c_str());
  H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

namespace {
const Attribute& present(const Attribute* a, const FileRef* file, const std::string& where) {
  if (a == nullptr) throw_format(file, where, "missing attribute");
  return *a;
}
}  // namespace

std::vector<std::string> Node::attr_strings(const std::string& name) const {
  const std::string where = object_path_ + " (attribute " + name + ")";
  Attribute scratch;
  const Attribute& a = present(attribute(name, scratch), file_, where);
  if (a.count < 0) throw_format(file_, where, a.problem);
  if (a.kind != Attribute::Kind::kString) {
    if (a.count == 0) return {};  // anndata writes an empty column-order as an empty float64 array
    throw_format(file_, where, "expected a string attribute");
  }
  if (!a.problem.empty()) throw_format(file_, where, a.problem);
  return a.strings;
}

std::string Node::attr_string(const std::string& name) const {
  auto values = attr_strings(name);
  if (values.size() != 1) {
    fail("attribute " + name + " should hold one string (holds " + std::to_string(values.size()) + ")");
  }
  return values[0];
}

std::optional<std::string> Node::attr_string_opt(const std::string& name) const {
  if (!has_attr(name)) return std::nullopt;
  return attr_string(name);
}

std::vector<std::int64_t> Node::attr_ints(const std::string& name) const {
  const std::string where = object_path_ + " (attribute " + name + ")";
  Attribute scratch;
  const Attribute& a = present(attribute(name, scratch), file_, where);
  if (a.count < 0 || a.kind != Attribute::Kind::kNumeric) throw_format(file_, where, "expected a numeric attribute");
  if (!a.problem.empty()) throw_format(file_, where, a.problem);
  return a.ints;
}

bool Node::attr_bool(const std::string& name) const {
  auto values = attr_ints(name);
  if (values.size() != 1) fail("attribute " + name + " should hold one boolean");
  return values[0] != 0;
}

bool Node::attr_is_reference(const std::string& name) const {
  Attribute scratch;
  const Attribute* a = attribute(name, scratch);
  return a != nullptr && a->kind == Attribute::Kind::kReference;
}

Node Node::attr_dereference(const std::string& name) const {
  const std::string where = object_path_ + " (attribute " + name + ")";
  Attribute scratch;
  const Attribute& a = present(attribute(name, scratch), file_, where);
  if (a.kind != Attribute::Kind::kReference || a.count != 1) throw_format(file_, where, "expected one object reference");
  if (!a.problem.empty()) throw_format(file_, where, a.problem);
  if (!walked(file_, a.reference)) {
    throw_format(file_, where, "corrupt file: an object reference the metadata walk could not follow");
  }
  hobj_ref_t ref = a.reference;
  Id target(H5Rdereference2(id(), H5P_DEFAULT, H5R_OBJECT, &ref));
  if (!target.valid()) throw_format(file_, where, hdf5_problem("dangling object reference"));
  std::string path(256, '\0');
  const ssize_t len = H5Iget_name(target.get(), path.data(), path.size());
  if (len < 0) throw_format(file_, where, hdf5_problem("unnamed reference target"));
  if (static_cast<std::size_t>(len) >= path.size()) {
    path.assign(static_cast<std::size_t>(len) + 1, '\0');
    H5Iget_name(target.get(), path.data(), path.size());
  }
  path.resize(static_cast<std::size_t>(len));
  return Node(file_, std::move(target), path);
}

std::vector<hsize_t> Node::shape() const {
  if (!is_dataset()) fail("expected a dataset, found a group");
  Id space(H5Dget_space(id()));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail(hdf5_problem("unreadable dataspace"));
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

TypeClass Node::type_class() const {
  if (!is_dataset()) return TypeClass::kOther;
  Id type(H5Dget_type(id()));
  switch (H5Tget_class(type.get())) {
    case H5T_INTEGER: return H5Tget_sign(type.get()) == H5T_SGN_NONE ? TypeClass::kUnsigned : TypeClass::kInteger;
    case H5T_FLOAT: return TypeClass::kFloat;
    case H5T_STRING: return TypeClass::kString;
    case H5T_ENUM: return TypeClass::kEnum;
    case H5T_COMPOUND: return TypeClass::kCompound;
    case H5T_REFERENCE: return TypeClass::kReference;
    default: return TypeClass::kOther;
  }
}

std::size_t Node::type_size() const {
  Id type(H5Dget_type(id()));
  return H5Tget_size(type.get());
}

std::string Node::dtype_name() const {
  const std::size_t bits = type_size() * 8;
  switch (type_class()) {
    case TypeClass::kInteger: return "int" + std::to_string(bits);
    case TypeClass::kUnsigned: return "uint" + std::to_string(bits);
    case TypeClass::kFloat: return "float" + std::to_string(bits);
    case TypeClass::kString: return "string";
    case TypeClass::kEnum: return "bool";
    case TypeClass::kCompound: return "compound";
    case TypeClass::kReference: return "reference";
    case TypeClass::kOther: break;
  }
  return "unknown";
}

namespace {

// Advises a large buffer onto transparent huge pages, as numpy does for its arrays: where the kernel grants them
// only on request (THP "madvise" mode, Debian's default) a 200 MB read otherwise spends as long in 4 KiB page
// faults as in HDF5. Only a hint: pages already touched keep their size, and memory that cannot take it is left
// as it is.
void advise_huge_pages(void* data, std::size_t bytes) {
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  if (bytes < 2 * kHugePage) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = (begin + kHugePage - 1) / kHugePage * kHugePage;
  const std::uintptr_t last = (begin + bytes) / kHugePage * kHugePage;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

// Reserves room for n elements, advised onto huge pages.
template <typename T>
void reserve_for_read(std::vector<T>& v, std::size_t n) {
  v.reserve(n);
  advise_huge_pages(v.data(), n * sizeof(T));
}

// Contiguous datasets larger than this are read in blocks of rows: std::vector zero-fills what it grows by, and
// growing block by block right before HDF5 writes the block keeps that memory in cache instead of a second pass
// over the whole buffer. Chunked datasets are read whole (a block edge inside a chunk would decompress it twice).
constexpr std::size_t kReadBlockBytes = std::size_t{8} << 20;

bool contiguous(hid_t dataset) {
  Id dcpl(H5Dget_create_plist(dataset));
  return dcpl.valid() && H5Pget_layout(dcpl.get()) == H5D_CONTIGUOUS;
}

void read_block(const Node& node, hid_t mem_type, hsize_t first, hsize_t count, void* out);

}  // namespace

// HDF5 1.10.8 copies a dataset's elements out of buffers sized from what the file says is stored, without checking
// the two agree (H5VM_memcpyvv under H5Dread): an unfiltered chunk whose index record is shorter than the chunk
// (found by fuzz_h5ad: tests/io/data/hostile/fuzz_chunk_overread.h5ad), or a compact dataset whose header holds
// fewer bytes than dataspace × element size. Checked before the first read of each dataset.
void check_compact_storage(const Node& node) {
  if (node.storage_checked()) return;
  Id dcpl(H5Dget_create_plist(node.id()));
  const H5D_layout_t layout = dcpl.valid() ? H5Pget_layout(dcpl.get()) : H5D_LAYOUT_ERROR;
  if (layout == H5D_CHUNKED && H5Pget_nfilters(dcpl.get()) == 0) {
    // Unfiltered chunks are read whole, chunk-size bytes each, into a buffer sized from the chunk index's record:
    // a record claiming less (fuzz_h5ad: 48 bytes for a 52-byte chunk) is over-read the same way. Every allocated
    // chunk of an unfiltered dataset is exactly the chunk's size on disk, so their sum must be.
    Id type(H5Dget_type(node.id()));
    const int rank = H5Pget_chunk(dcpl.get(), 0, nullptr);
    std::vector<hsize_t> chunk(static_cast<std::size_t>(std::max(rank, 0)));
    hsize_t chunks = 0;
    Id space(H5Dget_space(node.id()));
    // Variable-length elements take 4 + address size + 4 bytes on disk, not their size in memory; inside a compound
    // or array that is not worked out here, and such datasets are left to HDF5.
    std::size_t element = type.valid() ? H5Tget_size(type.get()) : 0;
    const bool top_vlen = type.valid() && (H5Tget_class(type.get()) == H5T_VLEN || H5Tis_variable_str(type.get()) > 0);
    if (top_vlen) {
      std::size_t sizeof_addr = 8, sizeof_size = 8;
      Id file(H5Iget_file_id(node.id()));
      Id fcpl(file.valid() ? H5Fget_create_plist(file.get()) : H5I_INVALID_HID);
      if (fcpl.valid()) H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size);
      element = 8 + sizeof_addr;
    } else if (type.valid() && H5Tdetect_class(type.get(), H5T_VLEN) > 0) {
      element = 0;
    }
    if (element > 0 && rank > 0 && H5Pget_chunk(dcpl.get(), rank, chunk.data()) == rank && space.valid() &&
        H5Dget_num_chunks(node.id(), space.get(), &chunks) >= 0) {
      hsize_t chunk_bytes = element;
      for (hsize_t d : chunk) chunk_bytes *= d;
      const hsize_t stored = stored_bytes(node.id());
      if (chunk_bytes > 0 && stored != chunks * chunk_bytes) {
        H5Eclear2(H5E_DEFAULT);
        node.fail("corrupt file: " + std::to_string(chunks) + " unfiltered chunks of " + std::to_string(chunk_bytes) +
                  " bytes store " + std::to_string(stored) + " bytes");
      }
    }
    H5Eclear2(H5E_DEFAULT);
    node.set_storage_checked();
    return;
  }
  if (layout != H5D_COMPACT) {
    H5Eclear2(H5E_DEFAULT);
    node.set_storage_checked();
    return;
  }
  Id type(H5Dget_type(node.id()));
  Id space(H5Dget_space(node.id()));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  std::size_t element = type.valid() ? H5Tget_size(type.get()) : 0;
  if (type.valid() && (H5Tdetect_class(type.get(), H5T_VLEN) > 0 || H5Tis_variable_str(type.get()) > 0)) {
    // stored as a 4-byte length, an address and a 4-byte index, whatever its size in memory
    std::size_t sizeof_addr = 8, sizeof_size = 8;
    Id file(H5Iget_file_id(node.id()));
    Id fcpl(file.valid() ? H5Fget_create_plist(file.get()) : H5I_INVALID_HID);
    if (fcpl.valid()) H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size);
    element = H5Tget_class(type.get()) == H5T_COMPOUND ? element : 8 + sizeof_addr;
  }
  const hsize_t stored = stored_bytes(node.id());
  H5Eclear2(H5E_DEFAULT);
  if (n < 0 || element == 0) node.fail("unreadable compact dataset");
  if (static_cast<hsize_t>(n) > stored / element) {
    node.fail("corrupt file: compact dataset of " + std::to_string(n) + " elements of " + std::to_string(element) +
              " bytes stores only " + std::to_string(stored) + " bytes");
  }
  node.set_storage_checked();
}

namespace {

// No writer stores a number wider than 16 bytes (a quad float). A header declaring wider ones is corrupt, and HDF5
// would allocate a conversion buffer of that width per element before reading a byte (a 28-byte .h5ad from
// fuzz_h5ad declared 2 GB integers: tests/io/data/hostile/fuzz_huge_integer.h5ad). `flags` admits enums (booleans).
constexpr std::size_t kMaxNumericBytes = 16;

void check_numeric_type(const Node& node, bool flags) {
  const TypeClass cls = node.type_class();
  if (cls != TypeClass::kInteger && cls != TypeClass::kUnsigned && cls != TypeClass::kFloat &&
      !(flags && cls == TypeClass::kEnum)) {
    node.fail(std::string("expected a ") + (flags ? "boolean" : "numeric") + " dataset, found " + node.dtype_name());
  }
  const std::size_t size = node.type_size();
  if (size == 0 || size > kMaxNumericBytes) {
    node.fail("corrupt file: " + node.dtype_name() + " elements of " + std::to_string(size) +
              " bytes (numbers are 1 to " + std::to_string(kMaxNumericBytes) + " bytes)");
  }
}

// The element count of a numeric dataset read whole as `element_size`-byte values, after checking the read is
// plausible for the file (a header claiming far more than the file stores is rejected before any allocation).
hsize_t checked_numeric_count(const Node& node, std::size_t element_size) {
  check_compact_storage(node);
  check_numeric_type(node, false);
  const hsize_t n = product(node.shape());
  // the larger of the file's and the memory's element: HDF5 converts through buffers of both
  const hsize_t stored = stored_bytes(node.id());
  if (claims_more_than_stored(n, std::max(element_size, node.type_size()), stored)) {
    node.fail("claims " + std::to_string(n) + " elements but stores only " + std::to_string(stored) + " bytes");
  }
  return n;
}

// Reads a whole numeric dataset with `mem_type`, checked as above.
template <typename T>
std::vector<T> read_all(const Node& node, hid_t mem_type) {
  const auto dims = node.shape();
  const hsize_t n = checked_numeric_count(node, sizeof(T));
  const hsize_t bytes = n * sizeof(T);
  std::vector<T> out;
  reserve_for_read(out, n);
  if (bytes > 2 * kReadBlockBytes && (dims.size() == 1 || dims.size() == 2) && contiguous(node.id())) {
    const hsize_t row = dims.size() == 2 ? dims[1] : 1;
    const hsize_t rows_per_block = std::max<hsize_t>(1, kReadBlockBytes / (row * sizeof(T)));
    for (hsize_t first = 0; first < dims[0]; first += rows_per_block) {
      const hsize_t count = std::min(rows_per_block, dims[0] - first);
      out.resize((first + count) * row);
      read_block(node, mem_type, first, count, out.data() + first * row);
    }
    return out;
  }
  out.resize(n);
  if (n > 0 && H5Dread(node.id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0) {
    node.fail(read_failure(node.id()));
  }
  return out;
}

void read_block(const Node& node, hid_t mem_type, hsize_t first, hsize_t count, void* out) {
  check_compact_storage(node);
  const auto dims = node.shape();
  if (dims.empty() || dims.size() > 2) node.fail("expected a 1-D or 2-D dataset");
  if (first + count > dims[0]) {
    node.fail("block [" + std::to_string(first) + ", " + std::to_string(first + count) + ") outside " +
              std::to_string(dims[0]) + " rows");
  }
  if (count == 0) return;
  Id file_space(H5Dget_space(node.id()));
  std::vector<hsize_t> start(dims.size(), 0), counts = dims;
  start[0] = first;
  counts[0] = count;
  H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, counts.data(), nullptr);
  const hsize_t n = product(counts);
  Id mem_space(H5Screate_simple(1, &n, nullptr));
  if (H5Dread(node.id(), mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, out) < 0) {
    node.fail(read_failure(node.id()));
  }
}

}  // namespace

std::vector<double> Node::read_doubles() const { return read_all<double>(*this, H5T_NATIVE_DOUBLE); }
std::vector<float> Node::read_floats() const { return read_all<float>(*this, H5T_NATIVE_FLOAT); }
std::vector<std::int64_t> Node::read_int64s() const {
  if (type_class() == TypeClass::kFloat) fail("expected an integer dataset, found " + dtype_name());
  return read_all<std::int64_t>(*this, H5T_NATIVE_INT64);
}

void Node::read_floats_into(std::span<float> out) const {
  const hsize_t n = checked_numeric_count(*this, sizeof(float));
  if (out.size() != n) {
    fail("has " + std::to_string(n) + " values, but the buffer given holds " + std::to_string(out.size()));
  }
  if (n == 0) return;
  // One H5Dread of the whole dataset: for a contiguous one HDF5 reads the file straight into `out`.
  advise_huge_pages(out.data(), out.size_bytes());
  if (H5Dread(id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0) fail(read_failure(id()));
}

void Node::read_float_rows(hsize_t row0, hsize_t count, float* out) const {
  check_numeric_type(*this, false);
  read_block(*this, H5T_NATIVE_FLOAT, row0, count, out);
}

void Node::read_int64_range(hsize_t first, hsize_t count, std::int64_t* out) const {
  const TypeClass cls = type_class();
  if (cls != TypeClass::kInteger && cls != TypeClass::kUnsigned) fail("expected an integer dataset");
  check_numeric_type(*this, false);
  read_block(*this, H5T_NATIVE_INT64, first, count, out);
}

std::vector<std::string> Node::read_strings() const {
  if (type_class() != TypeClass::kString) fail("expected a string dataset, found " + dtype_name());
  check_compact_storage(*this);
  Id type(H5Dget_type(id()));
  Id space(H5Dget_space(id()));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) fail(hdf5_problem("unreadable dataspace"));
  const hsize_t stored = stored_bytes(id());
  if (claims_more_than_stored(static_cast<hsize_t>(n), std::max<std::size_t>(H5Tget_size(type.get()), 1), stored)) {
    fail("claims " + std::to_string(n) + " strings but stores only " + std::to_string(stored) + " bytes");
  }
  auto fail_fn = [&](const std::string&) { fail(read_failure(id())); };
  const VlenReadScope scope(file_);
  return read_string_values(
      type.get(), static_cast<hsize_t>(n),
      [&](hid_t mem, void* buf) { return H5Dread(id(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf); }, space.get(),
      fail_fn);
}

std::vector<std::uint8_t> Node::read_flags() const {
  check_compact_storage(*this);
  if (type_class() == TypeClass::kFloat) fail("expected a boolean dataset, found " + dtype_name());
  check_numeric_type(*this, true);
  Id type(H5Dget_type(id()));
  Id native(H5Tget_native_type(type.get(), H5T_DIR_ASCEND));
  const std::size_t size = H5Tget_size(native.get());
  const hsize_t n = product(shape());
  const hsize_t stored = stored_bytes(id());
  if (claims_more_than_stored(n, size, stored)) {
    fail("claims " + std::to_string(n) + " elements but stores only " + std::to_string(stored) + " bytes");
  }
  std::vector<unsigned char> raw(n * size);
  if (n > 0 && H5Dread(id(), native.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) < 0) {
    fail(read_failure(id()));
  }
  const auto values = widen_integers(raw, size, enum_or_int_signed(type.get()));
  std::vector<std::uint8_t> flags(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) flags[i] = values[i] != 0 ? 1 : 0;
  return flags;
}

std::vector<std::string> Node::compound_fields() const {
  if (type_class() != TypeClass::kCompound) fail("expected a compound dataset");
  Id type(H5Dget_type(id()));
  const int n = H5Tget_nmembers(type.get());
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) {
    char* name = H5Tget_member_name(type.get(), static_cast<unsigned>(i));
    if (name == nullptr) continue;
    names.emplace_back(name);
    H5free_memory(name);
  }
  return names;
}

// The compound dataset's type and its member `field`, after checking that every member lies inside the record.
// HDF5 1.10.8 takes member offsets from the file unchecked and its struct conversion copies from them: fuzz_h5ad
// put a field at byte 2097152 of a 28-byte record, and the read copied from far outside the buffer
// (tests/io/data/hostile/fuzz_compound_member_outside.h5ad).
namespace {
struct CompoundMember {
  Id type;
  Id member;
};
CompoundMember compound_member(const Node& node, const std::string& field, const std::string& where) {
  CompoundMember out{Id(H5Dget_type(node.id())), Id()};
  const int index = H5Tget_member_index(out.type.get(), field.c_str());
  if (index < 0) throw_format(node.file(), where, "missing field");
  const std::size_t record = H5Tget_size(out.type.get());
  const int members = H5Tget_nmembers(out.type.get());
  for (int i = 0; i < members; ++i) {
    const auto at = static_cast<unsigned>(i);
    Id member(H5Tget_member_type(out.type.get(), at));
    const std::size_t offset = H5Tget_member_offset(out.type.get(), at);
    const std::size_t size = member.valid() ? H5Tget_size(member.get()) : 0;
    if (size == 0 || offset > record || size > record - offset) {
      std::string name = "#" + std::to_string(i);
      if (char* text = H5Tget_member_name(out.type.get(), at)) {
        name = text;
        H5free_memory(text);
      }
      H5Eclear2(H5E_DEFAULT);
      throw_format(node.file(), where,
                   "corrupt file: field " + name + " (" + std::to_string(size) + " bytes at byte " +
                       std::to_string(offset) + ") lies outside its " + std::to_string(record) + "-byte record");
    }
  }
  out.member = Id(H5Tget_member_type(out.type.get(), static_cast<unsigned>(index)));
  return out;
}
}  // namespace

Node::Field Node::read_compound_field(const std::string& field) const {
  check_compact_storage(*this);
  const std::string where = object_path_ + " (field " + field + ")";
  const auto [type, member] = compound_member(*this, field, where);
  Id space(H5Dget_space(id()));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) throw_format(file_, where, hdf5_problem("unreadable dataspace"));
  const hsize_t stored = stored_bytes(id());
  const hsize_t record = H5Tget_size(type.get());
  if (claims_more_than_stored(static_cast<hsize_t>(n), record, stored)) {
    throw_format(file_, where, "claims " + std::to_string(n) + " records but stores only " +
                                   std::to_string(stored) + " bytes");
  }
  Field out;
  const VlenReadScope scope(file_);
  auto read_into = [&](hid_t mem_member, std::size_t size, void* buf) {
    Id mem(H5Tcreate(H5T_COMPOUND, size));
    H5Tinsert(mem.get(), field.c_str(), 0, mem_member);
    if (n > 0 && H5Dread(id(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
      throw_format(file_, where, hdf5_problem("cannot read"));
    }
    return mem;
  };
  const H5T_class_t cls = H5Tget_class(member.get());
  if (cls == H5T_STRING) {
    out.is_string = true;
    Id mem_str = string_mem_type(member.get());
    if (H5Tis_variable_str(member.get()) > 0) {
      std::vector<char*> ptrs(static_cast<std::size_t>(n), nullptr);
      Id mem;
      try {
        mem = read_into(mem_str.get(), sizeof(char*), ptrs.data());
      } catch (...) {
        for (char* p : ptrs) {
          if (p != nullptr) H5free_memory(p);
        }
        throw;
      }
      for (char* p : ptrs) out.strings.emplace_back(p != nullptr ? p : "");
      if (n > 0) H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
    } else {
      const std::size_t size = H5Tget_size(mem_str.get());
      std::vector<char> buffer(static_cast<std::size_t>(n) * size);
      read_into(mem_str.get(), size, buffer.data());
      const H5T_str_t pad = H5Tget_strpad(member.get());
      for (hssize_t i = 0; i < n; ++i) out.strings.push_back(trim_fixed(buffer.data() + i * size, size, pad));
    }
  } else if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
    out.numbers.resize(static_cast<std::size_t>(n));
    read_into(H5T_NATIVE_DOUBLE, sizeof(double), out.numbers.data());
  } else if (cls == H5T_ENUM) {
    Id native(H5Tget_native_type(member.get(), H5T_DIR_ASCEND));
    const std::size_t size = H5Tget_size(native.get());
    std::vector<unsigned char> raw(static_cast<std::size_t>(n) * size);
    read_into(native.get(), size, raw.data());
    for (std::int64_t v : widen_integers(raw, size, enum_or_int_signed(member.get()))) {
      out.numbers.push_back(static_cast<double>(v));
    }
  } else {
    throw_format(file_, where, "unsupported field type");
  }
  return out;
}

namespace {

// numpy's name for an integer or floating-point HDF5 type ("float64", "uint8").
std::string numeric_type_name(hid_t type) {
  const std::string bits = std::to_string(H5Tget_size(type) * 8);
  if (H5Tget_class(type) == H5T_FLOAT) return "float" + bits;
  return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + bits;
}

}  // namespace

Node::ArrayField Node::compound_array_field(const std::string& field) const {
  const std::string where = object_path_ + " (field " + field + ")";
  const auto [type, member] = compound_member(*this, field, where);
  Id space(H5Dget_space(id()));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) throw_format(file_, where, hdf5_problem("unreadable dataspace"));
  ArrayField out;
  Id element = member;  // the array's base type, or the member itself for a plain number
  if (H5Tget_class(member.get()) == H5T_ARRAY) {
    const int rank = H5Tget_array_ndims(member.get());
    if (rank <= 0 || rank > 4) throw_format(file_, where, "unsupported array field rank");
    out.dims.resize(static_cast<std::size_t>(rank));
    if (H5Tget_array_dims2(member.get(), out.dims.data()) < 0) {
      throw_format(file_, where, hdf5_problem("unreadable array dims"));
    }
    element = Id(H5Tget_super(member.get()));
    const H5T_class_t base_cls = H5Tget_class(element.get());
    if (base_cls != H5T_INTEGER && base_cls != H5T_FLOAT) throw_format(file_, where, "non-numeric array field");
  } else {
    const H5T_class_t cls = H5Tget_class(member.get());
    if (cls != H5T_INTEGER && cls != H5T_FLOAT) throw_format(file_, where, "non-numeric field");
  }
  // records·cols floats must be addressable, and no more than the stored bytes could expand to: the header is
  // all there is to go on, so a hostile one is refused here, before anyone sizes a buffer from it.
  constexpr hsize_t kMaxFloats = std::numeric_limits<std::size_t>::max() / sizeof(float);
  std::string dims_text;
  for (hsize_t d : out.dims) dims_text += (dims_text.empty() ? "(" : ", ") + std::to_string(d);
  hsize_t cols = 1;
  for (hsize_t d : out.dims) {
    if (d == 0) throw_format(file_, where, "array field of dims " + dims_text + ") has a zero-sized dimension");
    if (cols > kMaxFloats / d) throw_format(file_, where, "array field of dims " + dims_text + ") is too large");
    cols *= d;
  }
  const auto records = static_cast<hsize_t>(n);
  const hsize_t stored = stored_bytes(id());
  if (records > kMaxFloats / cols || claims_more_than_stored(records * cols, sizeof(float), stored)) {
    throw_format(file_, where, "claims " + std::to_string(records) + " records of " + std::to_string(cols) +
                                   " values but stores only " + std::to_string(stored) + " bytes");
  }
  // The file's side too: HDF5 converts whole records, in a buffer of at least one record, and the numbers in them.
  // fuzz_h5ad declared a record of 16 GB (tests/io/data/hostile/fuzz_huge_record.h5ad).
  const std::size_t number_bytes = H5Tget_size(element.get());
  if (number_bytes == 0 || number_bytes > kMaxNumericBytes) {
    throw_format(file_, where,
                 "corrupt file: numbers of " + std::to_string(number_bytes) + " bytes (numbers are 1 to " +
                     std::to_string(kMaxNumericBytes) + " bytes)");
  }
  const hsize_t record_bytes = H5Tget_size(type.get());
  if (record_bytes == 0 || claims_more_than_stored(records, record_bytes, stored)) {
    throw_format(file_, where, "corrupt file: claims " + std::to_string(records) + " records of " +
                                   std::to_string(record_bytes) + " bytes but stores only " + std::to_string(stored) +
                                   " bytes");
  }
  out.records = static_cast<std::size_t>(records);
  out.cols = static_cast<std::size_t>(cols);
  out.dtype = numeric_type_name(element.get());
  return out;
}

void Node::read_compound_array_field_into(const std::string& field, std::span<float> out) const {
  check_compact_storage(*this);
  const ArrayField shape = compound_array_field(field);
  const std::string where = object_path_ + " (field " + field + ")";
  if (out.size() != shape.records * shape.cols) {
    throw_format(file_, where, "has " + std::to_string(shape.records * shape.cols) +
                                   " values, but the buffer given holds " + std::to_string(out.size()));
  }
  if (out.empty()) return;
  // Only this field, converted to float32, in a compound type of its own: HDF5 fills `out` record by record.
  Id mem_member(shape.dims.empty() ? H5Tcopy(H5T_NATIVE_FLOAT)
                                   : H5Tarray_create2(H5T_NATIVE_FLOAT, static_cast<unsigned>(shape.dims.size()),
                                                      shape.dims.data()));
  Id mem(H5Tcreate(H5T_COMPOUND, shape.cols * sizeof(float)));
  if (!mem_member.valid() || !mem.valid() || H5Tinsert(mem.get(), field.c_str(), 0, mem_member.get()) < 0) {
    throw_format(file_, where, hdf5_problem("cannot make the memory type"));
  }
  advise_huge_pages(out.data(), out.size_bytes());
  if (H5Dread(id(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0) {
    throw_format(file_, where, read_failure(id()));
  }
}

// ---- writing ---------------------------------------------------------------------------------------------

namespace {

void check_write(herr_t status, const Writer& at, const std::string& name, const std::string& what) {
  if (status < 0) throw_io(at.file, join_path(at.object_path, name), hdf5_problem(what));
}

Id utf8_vlen_string() {
  Id type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  return type;
}

Id chunked_deflate(std::span<const hsize_t> dims, std::size_t element_size) {
  Id dcpl(H5Pcreate(H5P_DATASET_CREATE));
  if (product(dims) == 0) return dcpl;  // HDF5 needs chunk dims > 0; an empty dataset stays contiguous
  std::vector<hsize_t> chunk(dims.begin(), dims.end());
  if (dims.size() == 1) {
    chunk[0] = std::min({dims[0], kMaxChunkElements1d,
                         std::max<hsize_t>(1, kTargetChunkBytes / std::max<std::size_t>(element_size, 1))});
  } else {
    hsize_t row_bytes = element_size;
    for (std::size_t d = 1; d < dims.size(); ++d) {
      chunk[d] = std::min<hsize_t>(dims[d], 4096);
      row_bytes *= chunk[d];
    }
    chunk[0] = std::clamp<hsize_t>(kTargetChunkBytes / std::max<hsize_t>(row_bytes, 1), 1, dims[0]);
  }
  H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
  H5Pset_deflate(dcpl.get(), kDeflateLevel);
  return dcpl;
}

Id create_dataset(const Writer& at, const std::string& name, hid_t file_type, std::span<const hsize_t> dims,
                  std::size_t element_size) {
  Id space(dims.empty() ? H5Screate(H5S_SCALAR)
                        : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  Id dcpl = dims.empty() ? Id(H5Pcreate(H5P_DATASET_CREATE)) : chunked_deflate(dims, element_size);
  Id ds(H5Dcreate2(at.group, name.c_str(), file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
  if (!ds.valid()) throw_io(at.file, join_path(at.object_path, name), hdf5_problem("cannot create dataset"));
  return ds;
}

}  // namespace

Id copy_compound_field(const Node& source, const std::string& field, const Writer& at, const std::string& name,
                       bool at_least_2d) {
  check_compact_storage(source);
  const std::string where = source.object_path() + " (field " + field + ")";
  const auto [type, member] = compound_member(source, field, where);
  std::vector<hsize_t> dims;
  Id element = member;
  if (H5Tget_class(member.get()) == H5T_ARRAY) {
    const int rank = H5Tget_array_ndims(member.get());
    if (rank <= 0 || rank > 4) throw_format(source.file(), where, "unsupported array field rank");
    dims.resize(static_cast<std::size_t>(rank));
    H5Tget_array_dims2(member.get(), dims.data());
    element = Id(H5Tget_super(member.get()));
  }
  const H5T_class_t cls = H5Tget_class(element.get());
  if (cls != H5T_INTEGER && cls != H5T_FLOAT && cls != H5T_ENUM) {
    throw_format(source.file(), where, "is not numeric: cannot copy it as an array");
  }
  Id space(H5Dget_space(source.id()));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) throw_format(source.file(), where, hdf5_problem("unreadable dataspace"));
  Id native(H5Tget_native_type(element.get(), H5T_DIR_ASCEND));
  const std::size_t element_size = H5Tget_size(native.get());
  hsize_t per_record = 1;
  for (hsize_t d : dims) per_record *= d;
  const hsize_t bytes = static_cast<hsize_t>(n) * per_record * element_size;
  const hsize_t stored = stored_bytes(source.id());
  if (claims_more_than_stored(static_cast<hsize_t>(n) * per_record, element_size, stored)) {
    throw_format(source.file(), where, "claims " + std::to_string(bytes) + " bytes but stores only " +
                                           std::to_string(stored));
  }
  Id mem_member(dims.empty() ? H5Tcopy(native.get())
                             : H5Tarray_create2(native.get(), static_cast<unsigned>(dims.size()), dims.data()));
  Id mem(H5Tcreate(H5T_COMPOUND, static_cast<std::size_t>(per_record) * element_size));
  if (!mem_member.valid() || !mem.valid() || H5Tinsert(mem.get(), field.c_str(), 0, mem_member.get()) < 0) {
    throw_format(source.file(), where, hdf5_problem("cannot make the memory type"));
  }
  std::vector<unsigned char> buffer(static_cast<std::size_t>(bytes));
  if (n > 0 && H5Dread(source.id(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()) < 0) {
    throw_format(source.file(), where, read_failure(source.id()));
  }
  std::vector<hsize_t> out_dims{static_cast<hsize_t>(n)};
  out_dims.insert(out_dims.end(), dims.begin(), dims.end());
  if (at_least_2d && out_dims.size() == 1) out_dims.push_back(1);
  Id file_type(H5Tcopy(element.get()));
  return write_numeric(at, name, file_type.get(), native.get(), buffer.data(), out_dims);
}

Id bool_enum_type() {
  Id type(H5Tenum_create(H5T_NATIVE_INT8));
  const std::int8_t no = 0, yes = 1;
  H5Tenum_insert(type.get(), "FALSE", &no);
  H5Tenum_insert(type.get(), "TRUE", &yes);
  return type;
}

Id create_group(const Writer& at, const std::string& name) {
  Id group(H5Gcreate2(at.group, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!group.valid()) throw_io(at.file, join_path(at.object_path, name), hdf5_problem("cannot create group"));
  return group;
}

void delete_link(const Writer& at, const std::string& name) {
  if (H5Lexists(at.group, name.c_str(), H5P_DEFAULT) > 0) {
    check_write(H5Ldelete(at.group, name.c_str(), H5P_DEFAULT), at, name, "cannot delete");
  }
  H5Eclear2(H5E_DEFAULT);
}

namespace {
void replace_attr(hid_t object, const std::string& name) {
  if (H5Aexists(object, name.c_str()) > 0) H5Adelete(object, name.c_str());
  H5Eclear2(H5E_DEFAULT);
}
void check_attr(herr_t status, const std::string& name) {
  if (status < 0) throw IoError(hdf5_problem("cannot write attribute " + name));
}
}  // namespace

void set_attr_string(hid_t object, const std::string& name, const std::string& value) {
  replace_attr(object, name);
  Id type = utf8_vlen_string();
  Id space(H5Screate(H5S_SCALAR));
  Id attr(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  const char* p = value.c_str();
  check_attr(attr.valid() ? H5Awrite(attr.get(), type.get(), &p) : -1, name);
}

void set_attr_strings(hid_t object, const std::string& name, const std::vector<std::string>& values) {
  replace_attr(object, name);
  Id type = utf8_vlen_string();
  const hsize_t n = values.size();
  Id space(H5Screate_simple(1, &n, nullptr));
  Id attr(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  check_attr(attr.valid() ? (n == 0 ? 0 : H5Awrite(attr.get(), type.get(), ptrs.data())) : -1, name);
}

void set_attr_empty_float_array(hid_t object, const std::string& name) {
  replace_attr(object, name);
  const hsize_t n = 0;
  Id space(H5Screate_simple(1, &n, nullptr));
  Id attr(H5Acreate2(object, name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  check_attr(attr.valid() ? 0 : -1, name);
}

void set_attr_ints(hid_t object, const std::string& name, std::span<const std::int64_t> values) {
  replace_attr(object, name);
  const hsize_t n = values.size();
  Id space(H5Screate_simple(1, &n, nullptr));
  Id attr(H5Acreate2(object, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  check_attr(attr.valid() ? H5Awrite(attr.get(), H5T_NATIVE_INT64, values.data()) : -1, name);
}

void set_attr_bool(hid_t object, const std::string& name, bool value) {
  replace_attr(object, name);
  Id type = bool_enum_type();
  Id space(H5Screate(H5S_SCALAR));
  Id attr(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  const std::int8_t v = value ? 1 : 0;
  check_attr(attr.valid() ? H5Awrite(attr.get(), type.get(), &v) : -1, name);
}

void set_encoding(hid_t object, const std::string& type, const std::string& version) {
  set_attr_string(object, "encoding-type", type);
  set_attr_string(object, "encoding-version", version);
}

Id write_numeric(const Writer& at, const std::string& name, hid_t file_type, hid_t mem_type, const void* data,
                 std::span<const hsize_t> dims) {
  Id ds = create_dataset(at, name, file_type, dims, H5Tget_size(file_type));
  if (product(dims) > 0) {
    check_write(H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), at, name, "cannot write");
    // Chunks still in HDF5's cache are written here, where a failure (a full disk) can still be reported: the
    // dataset's close would drop it.
    check_write(H5Dflush(ds.get()), at, name, "cannot write");
  }
  return ds;
}

Id write_strings(const Writer& at, const std::string& name, const std::vector<std::string>& values) {
  Id type = utf8_vlen_string();
  const hsize_t n = values.size();
  Id ds = create_dataset(at, name, type.get(), std::span<const hsize_t>(&n, 1), sizeof(char*));
  std::vector<const char*> ptrs;
  ptrs.reserve(values.size());
  for (const auto& v : values) ptrs.push_back(v.c_str());
  if (n > 0) {
    check_write(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), at, name,
                "cannot write");
    check_write(H5Dflush(ds.get()), at, name, "cannot write");
  }
  return ds;
}

Id write_flags(const Writer& at, const std::string& name, const std::vector<std::uint8_t>& flags) {
  Id type = bool_enum_type();
  const hsize_t n = flags.size();
  Id ds = create_dataset(at, name, type.get(), std::span<const hsize_t>(&n, 1), 1);
  std::vector<std::int8_t> values(flags.size());
  for (std::size_t i = 0; i < flags.size(); ++i) values[i] = flags[i] != 0 ? 1 : 0;
  if (n > 0) {
    check_write(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), at, name,
                "cannot write");
    check_write(H5Dflush(ds.get()), at, name, "cannot write");
  }
  return ds;
}

Id write_scalar_double(const Writer& at, const std::string& name, double value) {
  Id ds = create_dataset(at, name, H5T_IEEE_F64LE, {}, sizeof(double));
  check_write(H5Dwrite(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value), at, name,
              "cannot write");
  return ds;
}

Id write_scalar_int64(const Writer& at, const std::string& name, std::int64_t value) {
  Id ds = create_dataset(at, name, H5T_STD_I64LE, {}, sizeof(std::int64_t));
  check_write(H5Dwrite(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value), at, name,
              "cannot write");
  return ds;
}

Id write_scalar_string(const Writer& at, const std::string& name, const std::string& value) {
  Id type = utf8_vlen_string();
  Id ds = create_dataset(at, name, type.get(), {}, sizeof(char*));
  const char* p = value.c_str();
  check_write(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), at, name, "cannot write");
  return ds;
}

}  // namespace flashot::io::h5
