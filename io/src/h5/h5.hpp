#pragma once
// A thin private RAII layer over the HDF5 C API for the .h5ad reader and writers. Every failure becomes a
// flashot::io exception naming the file and the HDF5 object path; HDF5's own error printing is silenced.

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace flashot::io::h5 {

/// Turns HDF5's automatic error printing off (process-wide; the serial library has one error stack).
void silence_errors();
/// The HDF5 error stack as one line ("<minor>: <description>" of the innermost entries), then cleared.
std::string take_error_stack();
/// `what`, the system's cause in plain words when the error stack carries an errno ("file size limit exceeded"),
/// and the HDF5 error stack (then cleared).
std::string hdf5_problem(const std::string& what);

/// Owns one HDF5 identifier of any kind (file, group, dataset, attribute, datatype, dataspace, property list).
class Id {
 public:
  Id() = default;
  explicit Id(hid_t id) : id_(id) {}
  ~Id() { reset(); }
  Id(Id&& other) noexcept : id_(other.id_) { other.id_ = H5I_INVALID_HID; }
  Id& operator=(Id&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = other.id_;
      other.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  // A copy shares the object: HDF5 counts references, so both copies may be closed.
  Id(const Id& other) : id_(other.id_) {
    if (id_ >= 0) H5Iinc_ref(id_);
  }
  Id& operator=(const Id& other) {
    if (this != &other) *this = Id(other);
    return *this;
  }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

/// What an element's datatype is, as far as AnnData cares.
enum class TypeClass { kInteger, kUnsigned, kFloat, kString, kEnum, kCompound, kReference, kOther };

class RawFile;

/// One attribute as the reader sees it, decoded once. For a file being read that happens in the isolated walk's
/// child (isolated_walk.hpp): HDF5's attribute-message decoding has faults that a damaged object header triggers,
/// so the reader's process never runs it on such a file (docs/io-h5ad.md, "Hostile files").
struct Attribute {
  enum class Kind : std::uint8_t { kString, kNumeric, kReference, kOther };
  Kind kind = Kind::kOther;
  std::int64_t count = 0;            ///< elements; -1 when the dataspace is unreadable
  std::vector<std::string> strings;  ///< kString
  std::vector<std::int64_t> ints;    ///< kNumeric (floats converted by HDF5, enums by value)
  std::uint64_t reference = 0;       ///< kReference: the target's object header address
  std::string problem;               ///< why the value could not be read (reported when it is asked for)
};
/// Every attribute of every object the isolated walk reached: object header address → name → attribute.
using AttributeTable = std::map<std::uint64_t, std::map<std::string, Attribute>>;

/// The file an object lives in; used for error messages, and by the checked string reader (vlen.hpp) to read the
/// file's bytes itself.
struct FileRef {
  std::string path;  ///< as shown in messages (and opened by the string reader unless `image` is set)
  hid_t id = H5I_INVALID_HID;
  std::span<const std::byte> image;  ///< the file's bytes when it was opened from memory (must outlive the file)
  std::string disk_path;             ///< the file on disk when it differs from `path` (a partial file being written)
  bool writable = false;             ///< opened for writing: flushed before strings are read back
  mutable std::shared_ptr<RawFile> raw;  ///< opened by the first string read
  /// The attributes as the isolated walk decoded them, the only source of attributes when set (an object the walk
  /// did not reach has none); nullptr (a file being written, or no walk): HDF5 decodes them in this process.
  std::shared_ptr<const AttributeTable> attributes;
};

/// Decodes the open attribute `attr` of an object of `file` (strings through the checked reader, vlen.hpp).
/// Never throws for what the file holds: a value that cannot be read is an Attribute with a problem.
Attribute decode_attribute(const FileRef* file, hid_t attr);

/// An open group or dataset together with its object path, so every error can name both.
class Node {
 public:
  Node() = default;
  Node(const FileRef* file, Id id, std::string object_path)
      : file_(file), id_(std::move(id)), object_path_(std::move(object_path)) {}

  hid_t id() const { return id_.get(); }
  const std::string& object_path() const { return object_path_; }
  const std::string& file_path() const { return file_->path; }
  const FileRef* file() const { return file_; }
  bool is_group() const;
  bool is_dataset() const;

  // ---- navigation ----
  bool has(const std::string& name) const;  ///< a direct child link that resolves to an object
  Node child(const std::string& name) const;  ///< throws FormatError (names the object) if absent
  std::optional<Node> find(const std::string& name) const;
  std::vector<std::string> children() const;  ///< in creation order where tracked, else name order

  // ---- attributes ----
  bool has_attr(const std::string& name) const;
  std::string attr_string(const std::string& name) const;  ///< scalar or one-element string attribute
  std::optional<std::string> attr_string_opt(const std::string& name) const;
  std::vector<std::string> attr_strings(const std::string& name) const;  ///< empty for an empty numeric array
  std::vector<std::int64_t> attr_ints(const std::string& name) const;
  bool attr_bool(const std::string& name) const;  ///< enum/int/bool attribute, nonzero = true
  bool attr_is_reference(const std::string& name) const;
  Node attr_dereference(const std::string& name) const;  ///< an object-reference attribute's target

  // ---- dataset shape and type ----
  std::vector<hsize_t> shape() const;
  TypeClass type_class() const;
  std::size_t type_size() const;
  std::string dtype_name() const;  ///< numpy-style: "float32", "int64", "uint8", "bool", "string", …

  // ---- dataset reads (whole, or a block of the leading dimension) ----
  std::vector<double> read_doubles() const;
  std::vector<float> read_floats() const;
  std::vector<std::int64_t> read_int64s() const;
  /// The whole numeric dataset as float32 into `out`, which must hold exactly its element count (caller-owned
  /// memory: no zero-fill, no copy).
  void read_floats_into(std::span<float> out) const;
  /// Rows [row0, row0+count) of a 1-D or 2-D numeric dataset into `out` (count·cols values).
  void read_float_rows(hsize_t row0, hsize_t count, float* out) const;
  void read_int64_range(hsize_t first, hsize_t count, std::int64_t* out) const;
  std::vector<std::string> read_strings() const;  ///< 1-D or scalar string dataset; fixed-length trimmed at NUL
  /// An enum (HDF5 boolean) or integer dataset as 0/1 flags.
  std::vector<std::uint8_t> read_flags() const;
  /// A compound dataset's field: numeric as double, string as text. `is_string` tells which was filled.
  struct Field {
    bool is_string = false;
    std::vector<double> numbers;
    std::vector<std::string> strings;
  };
  std::vector<std::string> compound_fields() const;
  Field read_compound_field(const std::string& field) const;
  /// A compound field that is a numeric array or number (anndata ≤0.6 obsm), as a records × cols matrix.
  struct ArrayField {
    std::size_t records = 0;        ///< elements of the dataset's dataspace
    std::size_t cols = 0;           ///< product of the field's array dims (1 for a plain number)
    std::vector<hsize_t> dims;      ///< the field's array dims (empty for a plain number)
    std::string dtype;              ///< numpy name of the stored element type ("float64", …)
  };
  /// That field's shape from the dataspace and the compound type alone: nothing is read. Throws FormatError for
  /// a missing or non-numeric field, a zero-sized or unsupported array dimension, or a shape larger than the
  /// stored bytes could hold.
  ArrayField compound_array_field(const std::string& field) const;
  /// The field's values as float32 into `out` (caller-owned, records·cols, row-major), straight from HDF5.
  /// Throws FormatError as compound_array_field, when `out` has another size, or when the read fails.
  void read_compound_array_field_into(const std::string& field, std::span<float> out) const;

  [[noreturn]] void fail(const std::string& problem) const;  ///< FormatError naming file and object path

  /// Whether the dataset's stored bytes were checked against what a read will copy (h5.cpp, once per Node).
  bool storage_checked() const { return storage_checked_; }
  void set_storage_checked() const { storage_checked_ = true; }

 private:
  /// The attribute `name`: from the file's table when it has one (an object the walk did not reach has none), else
  /// decoded into `scratch`; nullptr when the object has no such attribute.
  const Attribute* attribute(const std::string& name, Attribute& scratch) const;
  /// The object's attributes in the file's table (which must exist); nullptr when the walk did not reach it.
  const std::map<std::string, Attribute>* table_entry() const;

  const FileRef* file_ = nullptr;
  Id id_;
  std::string object_path_;
  mutable bool storage_checked_ = false;
  mutable bool table_looked_up_ = false;
  mutable const std::map<std::string, Attribute>* table_entry_ = nullptr;
};

std::string join_path(const std::string& parent, const std::string& name);

// ---- writing ----

/// Where new objects go: a group plus the names for messages.
struct Writer {
  const FileRef* file;
  hid_t group;
  std::string object_path;
};

Id create_group(const Writer& at, const std::string& name);
void delete_link(const Writer& at, const std::string& name);  ///< no-op if absent
void set_attr_string(hid_t object, const std::string& name, const std::string& value);
void set_attr_strings(hid_t object, const std::string& name, const std::vector<std::string>& values);
void set_attr_empty_float_array(hid_t object, const std::string& name);
void set_attr_ints(hid_t object, const std::string& name, std::span<const std::int64_t> values);
void set_attr_bool(hid_t object, const std::string& name, bool value);
void set_encoding(hid_t object, const std::string& type, const std::string& version);

/// A dataset of `dims` (1-D or 2-D) numbers, chunked and deflated. `mem_type` is the native type of `data`.
Id write_numeric(const Writer& at, const std::string& name, hid_t file_type, hid_t mem_type, const void* data,
                 std::span<const hsize_t> dims);
Id write_strings(const Writer& at, const std::string& name, const std::vector<std::string>& values);
Id write_flags(const Writer& at, const std::string& name, const std::vector<std::uint8_t>& flags);
Id write_scalar_double(const Writer& at, const std::string& name, double value);
Id write_scalar_int64(const Writer& at, const std::string& name, std::int64_t value);
Id write_scalar_string(const Writer& at, const std::string& name, const std::string& value);

/// Copies compound field `field` of the compound dataset `source` into a new dataset `name` at `at`, keeping the
/// field's stored element type (an enum stays an enum, int64 stays int64). An array field of dims (d…) becomes
/// records × d…; a plain number field becomes records values, or records × 1 when `at_least_2d`. Chunked and
/// deflated like every other dataset. Throws FormatError for a string field (read those as text), IoError on write.
Id copy_compound_field(const Node& source, const std::string& field, const Writer& at, const std::string& name,
                       bool at_least_2d);

/// The HDF5 boolean type h5py and anndata use: an enum over int8 with FALSE = 0, TRUE = 1.
Id bool_enum_type();

}  // namespace flashot::io::h5
