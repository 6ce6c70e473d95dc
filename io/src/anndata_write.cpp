// Writing .h5ad files in the anndata ≥0.8 encodings (root encoding-version 0.1.0): dataframes as groups with
// `_index` and `column-order`, categoricals as groups, booleans as the HDF5 enum h5py uses, sparse matrices as
// csr_matrix/csc_matrix groups, every dataset chunked and deflated. Every output goes to a temporary file in the
// destination folder and is renamed over the destination only once complete.

#include <algorithm>
#include <atomic>
#include <iterator>
#include <cmath>
#include <optional>
#include <set>
#include <stdexcept>
#include <system_error>
#include <unistd.h>

#include "flashot/io/anndata.hpp"
#include "anndata_encode.hpp"
#include "flashot/io/errors.hpp"
#include "h5/h5.hpp"
#include "partial_file.hpp"
#include "zarr/store.hpp"
#include "zarr/write.hpp"

namespace flashot::io {
namespace {

using h5::Id;
using h5::Node;
using h5::Writer;
using h5::TypeClass;

constexpr std::int64_t kInt32Max = 2147483647;

using TempFile = detail::PartialFile;

// An HDF5 file open for writing; close() reports failures that a destructor could not.
class OpenFile {
 public:
  OpenFile(const std::filesystem::path& path, const std::string& shown, bool create) {
    file_.path = shown;
    file_.disk_path = path.string();
    file_.writable = true;
    const hid_t id = create ? H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)
                            : H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    if (id < 0) {
      throw IoError(shown + ": cannot " + std::string(create ? "create " : "open for writing ") + path.string() +
                    ": " + h5::hdf5_problem("HDF5 refused"));
    }
    file_.id = id;
    root_ = Id(H5Gopen2(id, "/", H5P_DEFAULT));
  }
  ~OpenFile() {
    root_.reset();
    if (file_.id >= 0) H5Fclose(file_.id);
  }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  Writer root() const { return Writer{&file_, root_.get(), "/"}; }
  const h5::FileRef& file() const { return file_; }
  void close() {
    root_.reset();
    const herr_t status = H5Fclose(file_.id);
    file_.id = H5I_INVALID_HID;
    if (status < 0) throw IoError(file_.path + ": cannot finish writing: " + h5::hdf5_problem("HDF5 could not close it"));
  }

 private:
  h5::FileRef file_;
  Id root_;
};

Writer sub(const Writer& parent, const Id& group, const std::string& name) {
  return Writer{parent.file, group.get(), h5::join_path(parent.object_path, name)};
}

Id open_or_create_dict(const Writer& at, const std::string& name) {
  if (H5Lexists(at.group, name.c_str(), H5P_DEFAULT) > 0) {
    H5O_info_t info{};
    if (H5Oget_info_by_name(at.group, name.c_str(), &info, H5P_DEFAULT) >= 0 && info.type == H5O_TYPE_GROUP) {
      return Id(H5Gopen2(at.group, name.c_str(), H5P_DEFAULT));
    }
    throw FormatError(at.file->path, h5::join_path(at.object_path, name),
                      "is a legacy (anndata ≤0.6) dataset; flashot adds entries only to a group");
  }
  h5::take_error_stack();
  Id group = h5::create_group(at, name);
  h5::set_encoding(group.get(), "dict", "0.1.0");
  return group;
}

// ---- validation -------------------------------------------------------------------------------------------

void check_dense(const std::string& what, const DenseMatrix& m, std::optional<std::size_t> rows,
                 std::optional<std::size_t> cols) {
  if (m.values.size() != m.rows * m.cols) {
    throw std::invalid_argument(what + ": values hold " + std::to_string(m.values.size()) + " numbers, rows·cols = " +
                                std::to_string(m.rows * m.cols));
  }
  if (rows && m.rows != *rows) {
    throw std::invalid_argument(what + ": " + std::to_string(m.rows) + " rows, expected " + std::to_string(*rows));
  }
  if (cols && m.cols != *cols) {
    throw std::invalid_argument(what + ": " + std::to_string(m.cols) + " columns, expected " +
                                std::to_string(*cols));
  }
}

void check_sparse(const std::string& what, const SparseMatrix& m, std::size_t rows, std::size_t cols) {
  if (m.rows != rows || m.cols != cols) {
    throw std::invalid_argument(what + ": shape (" + std::to_string(m.rows) + ", " + std::to_string(m.cols) +
                                "), expected (" + std::to_string(rows) + ", " + std::to_string(cols) + ")");
  }
  const std::size_t major = m.csc ? m.cols : m.rows;
  const std::size_t minor = m.csc ? m.rows : m.cols;
  if (m.indptr.size() != major + 1) {
    throw std::invalid_argument(what + ": indptr has " + std::to_string(m.indptr.size()) + " entries, expected " +
                                std::to_string(major + 1));
  }
  if (m.indices.size() != m.data.size()) {
    throw std::invalid_argument(what + ": " + std::to_string(m.indices.size()) + " indices but " +
                                std::to_string(m.data.size()) + " values");
  }
  if (m.indptr.front() != 0 || static_cast<std::size_t>(m.indptr.back()) != m.data.size()) {
    throw std::invalid_argument(what + ": indptr must run from 0 to " + std::to_string(m.data.size()) + " (got " +
                                std::to_string(m.indptr.front()) + " … " + std::to_string(m.indptr.back()) + ")");
  }
  for (std::size_t i = 1; i < m.indptr.size(); ++i) {
    if (m.indptr[i] < m.indptr[i - 1]) {
      throw std::invalid_argument(what + ": indptr decreases at " + std::to_string(i));
    }
  }
  for (std::size_t i = 0; i < m.indices.size(); ++i) {
    if (m.indices[i] < 0 || static_cast<std::size_t>(m.indices[i]) >= minor) {
      throw std::invalid_argument(what + ": index " + std::to_string(m.indices[i]) + " at " + std::to_string(i) +
                                  " outside [0, " + std::to_string(minor) + ")");
    }
  }
}

void check_column(const std::string& what, const Column& c, std::size_t rows) {
  if (c.size() != rows) {
    throw std::invalid_argument(what + ": " + std::to_string(c.size()) + " values, expected " +
                                std::to_string(rows));
  }
  if (!c.missing.empty() && c.missing.size() != rows) {
    throw std::invalid_argument(what + ": missing has " + std::to_string(c.missing.size()) + " flags, expected " +
                                std::to_string(rows));
  }
  if (c.kind == Column::Kind::kCategorical) {
    std::set<std::string> seen;
    for (const auto& category : c.categories) {
      if (!seen.insert(category).second) {
        throw std::invalid_argument(what + ": category '" + category + "' appears twice");
      }
    }
    for (std::size_t i = 0; i < c.codes.size(); ++i) {
      if (c.codes[i] < -1 || c.codes[i] >= static_cast<std::int32_t>(c.categories.size())) {
        throw std::invalid_argument(what + ": code " + std::to_string(c.codes[i]) + " at row " + std::to_string(i) +
                                    " outside [-1, " + std::to_string(c.categories.size()) + ")");
      }
    }
  }
}

void check_key(const std::string& what, const std::string& key) {
  if (key.empty() || key.find('/') != std::string::npos || key == "." || key == "..") {
    throw std::invalid_argument(what + ": key '" + key + "' must be non-empty and contain no '/'");
  }
}

void check_additions(const H5adContent& c, std::size_t n_obs, std::size_t n_vars) {
  for (const auto& [key, m] : c.obsm) {
    check_key("obsm", key);
    check_dense("obsm['" + key + "']", m, n_obs, std::nullopt);
  }
  for (const auto& [key, col] : c.obs) {
    check_key("obs", key);
    check_column("obs['" + key + "']", col, n_obs);
  }
  for (const auto& [key, col] : c.var) {
    check_key("var", key);
    check_column("var['" + key + "']", col, n_vars);
  }
  for (const auto& [key, value] : c.uns) check_key("uns", key);
}

// ---- element writers --------------------------------------------------------------------------------------

void write_dense(const Writer& at, const std::string& name, const DenseMatrix& m) {
  const hsize_t dims[2] = {m.rows, m.cols};
  Id ds = h5::write_numeric(at, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, m.values.data(), dims);
  h5::set_encoding(ds.get(), "array", "0.2.0");
}

// Integers in the narrowest of int32 / int64 that holds `max`, as scipy does.
void write_index_array(const Writer& at, const std::string& name, const std::vector<std::int64_t>& values,
                       std::int64_t max) {
  const hsize_t n = values.size();
  if (max <= kInt32Max) {
    std::vector<std::int32_t> narrow(values.begin(), values.end());
    h5::write_numeric(at, name, H5T_STD_I32LE, H5T_NATIVE_INT32, narrow.data(), std::span<const hsize_t>(&n, 1));
  } else {
    h5::write_numeric(at, name, H5T_STD_I64LE, H5T_NATIVE_INT64, values.data(), std::span<const hsize_t>(&n, 1));
  }
}

void write_sparse(const Writer& at, const std::string& name, const SparseMatrix& m) {
  Id group = h5::create_group(at, name);
  h5::set_encoding(group.get(), m.csc ? "csc_matrix" : "csr_matrix", "0.1.0");
  const std::int64_t shape[2] = {static_cast<std::int64_t>(m.rows), static_cast<std::int64_t>(m.cols)};
  h5::set_attr_ints(group.get(), "shape", shape);
  const Writer inside = sub(at, group, name);
  const hsize_t nnz = m.data.size();
  h5::write_numeric(inside, "data", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, m.data.data(), std::span<const hsize_t>(&nnz, 1));
  const std::int64_t minor = static_cast<std::int64_t>(m.csc ? m.rows : m.cols);
  write_index_array(inside, "indices", m.indices, minor);
  write_index_array(inside, "indptr", m.indptr, static_cast<std::int64_t>(nnz));
}

void write_string_array(const Writer& at, const std::string& name, const std::vector<std::string>& values) {
  Id ds = h5::write_strings(at, name, values);
  h5::set_encoding(ds.get(), "string-array", "0.2.0");
}

void write_column(const Writer& at, const std::string& name, const Column& c) {
  switch (c.kind) {
    case Column::Kind::kCategorical: {
      Id group = h5::create_group(at, name);
      h5::set_encoding(group.get(), "categorical", "0.2.0");
      h5::set_attr_bool(group.get(), "ordered", c.ordered);
      const Writer inside = sub(at, group, name);
      const hsize_t n = c.codes.size();
      const std::size_t code_bytes = anndata_encode::code_bytes(c.categories.size());
      Id codes;
      if (code_bytes == 1) {
        std::vector<std::int8_t> narrow(c.codes.begin(), c.codes.end());
        codes = h5::write_numeric(inside, "codes", H5T_STD_I8LE, H5T_NATIVE_INT8, narrow.data(),
                                  std::span<const hsize_t>(&n, 1));
      } else if (code_bytes == 2) {
        std::vector<std::int16_t> narrow(c.codes.begin(), c.codes.end());
        codes = h5::write_numeric(inside, "codes", H5T_STD_I16LE, H5T_NATIVE_INT16, narrow.data(),
                                  std::span<const hsize_t>(&n, 1));
      } else {
        codes = h5::write_numeric(inside, "codes", H5T_STD_I32LE, H5T_NATIVE_INT32, c.codes.data(),
                                  std::span<const hsize_t>(&n, 1));
      }
      h5::set_encoding(codes.get(), "array", "0.2.0");
      write_string_array(inside, "categories", c.categories);
      return;
    }
    case Column::Kind::kNumeric: {
      const hsize_t n = c.numbers.size();
      const std::vector<double> values = anndata_encode::numbers_with_nan(c);
      Id ds = h5::write_numeric(at, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, values.data(),
                                std::span<const hsize_t>(&n, 1));
      h5::set_encoding(ds.get(), "array", "0.2.0");
      return;
    }
    case Column::Kind::kString: {
      if (!anndata_encode::any_missing(c)) {
        write_string_array(at, name, c.strings);
        return;
      }
      write_column(at, name, anndata_encode::strings_as_categorical(c));
      return;
    }
    case Column::Kind::kBoolean: {
      if (!anndata_encode::any_missing(c)) {
        Id ds = h5::write_flags(at, name, c.flags);
        h5::set_encoding(ds.get(), "array", "0.2.0");
        return;
      }
      Id group = h5::create_group(at, name);
      h5::set_encoding(group.get(), "nullable-boolean", "0.1.0");
      const Writer inside = sub(at, group, name);
      Id values = h5::write_flags(inside, "values", c.flags);
      h5::set_encoding(values.get(), "array", "0.2.0");
      Id mask = h5::write_flags(inside, "mask", c.missing);
      h5::set_encoding(mask.get(), "array", "0.2.0");
      return;
    }
  }
}

void write_column_order(hid_t frame, const std::vector<std::string>& order) {
  if (order.empty()) {
    h5::set_attr_empty_float_array(frame, "column-order");  // what anndata itself writes for no columns
  } else {
    h5::set_attr_strings(frame, "column-order", order);
  }
}

void write_dataframe(const Writer& at, const std::string& name, const std::vector<std::string>& index,
                     const std::map<std::string, Column>& columns) {
  Id group = h5::create_group(at, name);
  h5::set_encoding(group.get(), "dataframe", "0.2.0");
  const Writer inside = sub(at, group, name);
  const std::string index_name = anndata_encode::index_key(columns);
  h5::set_attr_string(group.get(), "_index", index_name);
  write_string_array(inside, index_name, index);
  std::vector<std::string> order;
  for (const auto& [key, column] : columns) {
    write_column(inside, key, column);
    order.push_back(key);
  }
  write_column_order(group.get(), order);
}

void write_uns_value(const Writer& at, const std::string& name, const UnsValue& value) {
  Id ds;
  if (const auto* d = std::get_if<double>(&value)) {
    ds = h5::write_scalar_double(at, name, *d);
    h5::set_encoding(ds.get(), "numeric-scalar", "0.2.0");
  } else if (const auto* i = std::get_if<std::int64_t>(&value)) {
    ds = h5::write_scalar_int64(at, name, *i);
    h5::set_encoding(ds.get(), "numeric-scalar", "0.2.0");
  } else if (const auto* s = std::get_if<std::string>(&value)) {
    ds = h5::write_scalar_string(at, name, *s);
    h5::set_encoding(ds.get(), "string", "0.2.0");
  } else {
    const auto& v = std::get<std::vector<double>>(value);
    const hsize_t n = v.size();
    ds = h5::write_numeric(at, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v.data(), std::span<const hsize_t>(&n, 1));
    h5::set_encoding(ds.get(), "array", "0.2.0");
  }
}

void write_empty_dicts(const Writer& root, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    Id group = h5::create_group(root, name);
    h5::set_encoding(group.get(), "dict", "0.1.0");
  }
}

// ---- legacy inputs → the current layout ---------------------------------------------------------------------
// A copy of an anndata ≤0.7 file is rewritten in the 0.1.0 encodings before flashot adds to it, so that the output
// is one layout throughout (anndata ≤0.6 keeps obs/var/obsm as compound datasets, which take no new entries).
// Everything the reader understands is carried; anything else fails the write naming the element.

bool link_exists(hid_t group, const std::string& name) {
  const htri_t r = H5Lexists(group, name.c_str(), H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

std::optional<Node> open_node(const h5::FileRef& ref, hid_t loc, const std::string& name, const std::string& path) {
  if (!link_exists(loc, name)) return std::nullopt;
  Id id(H5Oopen(loc, name.c_str(), H5P_DEFAULT));
  if (!id.valid()) throw FormatError(ref.path, path, h5::hdf5_problem("cannot open"));
  return Node(&ref, std::move(id), path);
}

[[noreturn]] void cannot_carry(const h5::FileRef& ref, const std::string& path, const std::string& what) {
  throw FormatError(ref.path, path,
                    "cannot carry " + what + " into the current AnnData layout; nothing was written (the input is "
                    "a legacy file, which flashot rewrites in the current layout before adding to it)");
}

void replace_link(const Writer& at, const std::string& from, const std::string& to) {
  h5::delete_link(at, to);
  if (H5Lmove(at.group, from.c_str(), at.group, to.c_str(), H5P_DEFAULT, H5P_DEFAULT) < 0) {
    throw IoError(at.file->path + ": " + h5::join_path(at.object_path, to) + ": " + h5::hdf5_problem("cannot rename"));
  }
}

// encoding-type / -version on a dataset that has none: what anndata ≥0.8 writes for its kind.
void encode_dataset(const h5::FileRef& ref, const Node& ds, bool in_uns) {
  if (ds.has_attr("encoding-type")) return;
  const auto dims = ds.shape();
  switch (ds.type_class()) {
    case TypeClass::kString:
      if (in_uns && dims.empty()) {
        h5::set_encoding(ds.id(), "string", "0.2.0");
      } else {
        h5::set_encoding(ds.id(), "string-array", "0.2.0");
      }
      return;
    case TypeClass::kInteger:
    case TypeClass::kUnsigned:
    case TypeClass::kFloat:
    case TypeClass::kEnum:
      h5::set_encoding(ds.id(), in_uns && dims.empty() ? "numeric-scalar" : "array", "0.2.0");
      return;
    default: cannot_carry(ref, ds.object_path(), "a " + ds.dtype_name() + " dataset");
  }
}

// X, a layer, raw/X: a dense dataset, a current sparse group, or a ≤0.6 h5sparse group.
void upgrade_matrix(const h5::FileRef& ref, const Node& m) {
  if (m.is_dataset()) {
    if (m.type_class() == TypeClass::kCompound) cannot_carry(ref, m.object_path(), "a compound (record) array");
    encode_dataset(ref, m, false);
    return;
  }
  const std::string enc = m.attr_string_opt("encoding-type").value_or("");
  if (enc == "csr_matrix" || enc == "csc_matrix" || enc == "dataframe") return;
  if (!enc.empty() || !m.has_attr("h5sparse_format")) cannot_carry(ref, m.object_path(), "this group");
  const std::string format = m.attr_string("h5sparse_format");
  if (format != "csr" && format != "csc") cannot_carry(ref, m.object_path(), "h5sparse_format '" + format + "'");
  const auto shape = m.attr_ints("h5sparse_shape");
  if (shape.size() != 2) cannot_carry(ref, m.object_path(), "an h5sparse_shape that is not two sizes");
  h5::set_encoding(m.id(), format + "_matrix", "0.1.0");
  h5::set_attr_ints(m.id(), "shape", shape);
  for (const char* old : {"h5sparse_format", "h5sparse_shape"}) {
    H5Adelete(m.id(), old);
    H5Eclear2(H5E_DEFAULT);
  }
}

// A text dataset (categories, an index) rewritten as a UTF-8 string array, or a numeric one given its encoding.
void write_categories(const Writer& at, const Node& source) {
  if (source.type_class() == TypeClass::kString) {
    write_string_array(at, "categories", source.read_strings());
  } else {
    const std::string path = source.object_path();
    if (H5Ocopy(source.file()->id, path.c_str(), at.group, "categories", H5P_DEFAULT, H5P_DEFAULT) < 0) {
      throw IoError(at.file->path + ": " + h5::join_path(at.object_path, "categories") +
                    ": " + h5::hdf5_problem("cannot copy " + path));
    }
    Id copied(H5Dopen2(at.group, "categories", H5P_DEFAULT));
    h5::set_encoding(copied.get(), "array", "0.2.0");
  }
}

// obs/var (or raw.var) of anndata ≤0.6: a compound dataset whose field `index` holds the names; categorical codes
// whose categories are uns/<field>_categories (those uns entries are consumed, as anndata's own reader does).
void upgrade_compound_frame(const h5::FileRef& ref, const Writer& at, const std::string& name,
                            const std::string& target, std::optional<Node> uns, std::vector<std::string>& consumed) {
  const Node frame = *open_node(ref, at.group, name, h5::join_path(at.object_path, name));
  const auto fields = frame.compound_fields();
  if (std::find(fields.begin(), fields.end(), "index") == fields.end()) {
    cannot_carry(ref, frame.object_path(), "a compound dataframe without an 'index' field");
  }
  const std::string staging = target + ".flashot-upgrade";
  Id group = h5::create_group(at, staging);
  h5::set_encoding(group.get(), "dataframe", "0.2.0");
  const Writer inside = sub(at, group, target);
  auto index = frame.read_compound_field("index");
  std::vector<std::string> names = index.strings;
  if (!index.is_string) {
    for (double v : index.numbers) names.push_back(std::to_string(v));
  }
  const std::string index_name =
      std::find(fields.begin(), fields.end(), "_index") != fields.end() ? "__flashot_index" : "_index";
  h5::set_attr_string(group.get(), "_index", index_name);
  write_string_array(inside, index_name, names);
  std::vector<std::string> order;
  for (const auto& field : fields) {
    if (field == "index") continue;
    order.push_back(field);
    const auto field_data = frame.read_compound_field(field);
    if (field_data.is_string) {
      write_string_array(inside, field, field_data.strings);
      continue;
    }
    const std::string categories_key = field + "_categories";
    if (uns && uns->has(categories_key)) {
      Id column = h5::create_group(inside, field);
      h5::set_encoding(column.get(), "categorical", "0.2.0");
      h5::set_attr_bool(column.get(), "ordered", false);
      const Writer in_column = sub(inside, column, field);
      const Node categories = uns->child(categories_key);
      const auto n_categories = static_cast<double>(categories.shape().empty() ? 1 : categories.shape()[0]);
      for (std::size_t i = 0; i < field_data.numbers.size(); ++i) {
        const double c = field_data.numbers[i];
        if (!(c >= -1 && c < n_categories) || c != std::floor(c)) {
          frame.fail("categorical code " + std::to_string(c) + " of column " + field + " at row " +
                     std::to_string(i) + " outside [-1, " + std::to_string(static_cast<long>(n_categories)) + ")");
        }
      }
      Id codes = h5::copy_compound_field(frame, field, in_column, "codes", false);
      h5::set_encoding(codes.get(), "array", "0.2.0");
      write_categories(in_column, categories);
      consumed.push_back(categories_key);
      continue;
    }
    Id values = h5::copy_compound_field(frame, field, inside, field, false);
    if (h5::Node(&ref, Id(values), h5::join_path(inside.object_path, field)).shape().size() != 1) {
      cannot_carry(ref, frame.object_path(), "field '" + field + "' (an array field of a dataframe)");
    }
    h5::set_encoding(values.get(), "array", "0.2.0");
  }
  write_column_order(group.get(), order);
  group = Id();
  h5::delete_link(at, name);
  replace_link(at, staging, target);
}

// obs/var of anndata 0.7: a group; categoricals are integer datasets whose `categories` attribute references a
// dataset in <frame>/__categories. Each becomes a categorical group; other columns get their encodings.
void upgrade_group_frame(const h5::FileRef& ref, const Node& frame, const Writer& at) {
  const std::string index_name = frame.has_attr("_index") ? frame.attr_string("_index") : "_index";
  std::vector<std::string> children = frame.children();
  const Writer inside{&ref, frame.id(), frame.object_path()};
  for (const auto& name : children) {
    if (name == "__categories") continue;
    const Node column = frame.child(name);
    if (column.is_group()) {
      const std::string enc = column.attr_string_opt("encoding-type").value_or("");
      if (enc.empty()) cannot_carry(ref, column.object_path(), "a group without an encoding");
      continue;
    }
    if (name != index_name && column.has_attr("categories") && column.attr_is_reference("categories")) {
      const Node categories = column.attr_dereference("categories");
      const bool ordered = column.has_attr("ordered") && column.attr_bool("ordered");
      const std::string staging = name + ".flashot-upgrade";
      Id group = h5::create_group(inside, staging);
      h5::set_encoding(group.get(), "categorical", "0.2.0");
      h5::set_attr_bool(group.get(), "ordered", ordered);
      const Writer in_column = sub(inside, group, name);
      const std::string path = column.object_path();
      if (H5Ocopy(ref.id, path.c_str(), group.get(), "codes", H5P_DEFAULT, H5P_DEFAULT) < 0) {
        throw IoError(ref.path + ": " + path + ": " + h5::hdf5_problem("cannot copy"));
      }
      Id codes(H5Dopen2(group.get(), "codes", H5P_DEFAULT));
      for (const char* old : {"categories", "ordered"}) {
        if (H5Aexists(codes.get(), old) > 0) H5Adelete(codes.get(), old);
        H5Eclear2(H5E_DEFAULT);
      }
      h5::set_encoding(codes.get(), "array", "0.2.0");
      write_categories(in_column, categories);
      group = Id();
      replace_link(inside, staging, name);
      continue;
    }
    encode_dataset(ref, column, false);
  }
  h5::delete_link(inside, "__categories");
  h5::set_encoding(frame.id(), "dataframe", "0.2.0");
  if (!frame.has_attr("column-order")) {
    std::vector<std::string> order;
    for (const auto& name : children) {
      if (name != index_name && name != "__categories") order.push_back(name);
    }
    write_column_order(frame.id(), order);
  }
  (void)at;
}

// obsm/varm of anndata ≤0.6: one compound dataset whose array fields are the entries.
void upgrade_compound_mapping(const h5::FileRef& ref, const Writer& at, const std::string& name,
                              const std::string& target) {
  const Node mapping = *open_node(ref, at.group, name, h5::join_path(at.object_path, name));
  const std::string staging = target + ".flashot-upgrade";
  Id group = h5::create_group(at, staging);
  h5::set_encoding(group.get(), "dict", "0.1.0");
  const Writer inside = sub(at, group, target);
  for (const auto& field : mapping.compound_fields()) {
    Id entry = h5::copy_compound_field(mapping, field, inside, field, true);
    h5::set_encoding(entry.get(), "array", "0.2.0");
  }
  group = Id();
  h5::delete_link(at, name);
  replace_link(at, staging, target);
}

void upgrade_uns(const h5::FileRef& ref, const Node& node) {
  if (node.is_dataset()) {
    if (node.type_class() == TypeClass::kCompound) cannot_carry(ref, node.object_path(), "a record array in uns");
    encode_dataset(ref, node, true);
    return;
  }
  if (!node.has_attr("encoding-type")) h5::set_encoding(node.id(), "dict", "0.1.0");
  if (node.attr_string_opt("encoding-type").value_or("") != "dict") return;  // a typed element: already current
  for (const auto& name : node.children()) upgrade_uns(ref, node.child(name));
}

// A frame (obs, var, raw/var) of either legacy kind, or already current.
void upgrade_frame(const h5::FileRef& ref, const Writer& at, const std::string& name, const std::string& target,
                   const std::optional<Node>& uns, std::vector<std::string>& consumed) {
  const auto node = open_node(ref, at.group, name, h5::join_path(at.object_path, name));
  if (!node) return;
  if (node->is_dataset()) {
    if (node->type_class() != TypeClass::kCompound) cannot_carry(ref, node->object_path(), "a non-compound dataset");
    upgrade_compound_frame(ref, at, name, target, uns, consumed);
    return;
  }
  upgrade_group_frame(ref, *node, at);
}

void upgrade_mapping(const h5::FileRef& ref, const Writer& at, const std::string& name, const std::string& target,
                     bool matrices) {
  auto node = open_node(ref, at.group, name, h5::join_path(at.object_path, name));
  if (!node) {
    Id group = h5::create_group(at, target);
    h5::set_encoding(group.get(), "dict", "0.1.0");
    return;
  }
  if (node->is_dataset()) {
    if (node->type_class() != TypeClass::kCompound) cannot_carry(ref, node->object_path(), "a non-compound dataset");
    node.reset();
    upgrade_compound_mapping(ref, at, name, target);
    return;
  }
  if (!node->has_attr("encoding-type")) h5::set_encoding(node->id(), "dict", "0.1.0");
  for (const auto& key : node->children()) {
    const Node entry = node->child(key);
    if (matrices) {
      upgrade_matrix(ref, entry);
    } else if (entry.is_dataset()) {
      encode_dataset(ref, entry, false);
    }
  }
}

/// Rewrites the legacy (anndata ≤0.7) file open at `root` in the current layout. No-op for a current file.
void upgrade_legacy_layout(const h5::FileRef& ref, const Writer& root) {
  const Node top(&ref, Id(H5Oopen(root.group, ".", H5P_DEFAULT)), "/");
  if (top.attr_string_opt("encoding-type").value_or("") == "anndata") return;
  static const std::set<std::string> known = {"X",    "obs",   "var",  "obsm",   "varm",    "obsp",
                                              "varp", "layers", "uns", "raw",    "raw.X",   "raw.var",
                                              "raw.varm", "raw.cat"};
  for (const auto& name : top.children()) {
    if (known.count(name) == 0) cannot_carry(ref, "/" + name, "an element anndata does not know");
  }
  const auto uns = top.find("uns");
  std::vector<std::string> consumed;  // uns/<col>_categories folded into their columns
  upgrade_frame(ref, root, "obs", "obs", uns, consumed);
  upgrade_frame(ref, root, "var", "var", uns, consumed);
  if (auto x = top.find("X")) upgrade_matrix(ref, *x);
  upgrade_mapping(ref, root, "obsm", "obsm", true);
  upgrade_mapping(ref, root, "varm", "varm", true);
  upgrade_mapping(ref, root, "obsp", "obsp", true);
  upgrade_mapping(ref, root, "varp", "varp", true);
  upgrade_mapping(ref, root, "layers", "layers", true);
  // raw: a group (0.7) or raw.X / raw.var / raw.varm beside the root's elements (≤0.6)
  if (top.has("raw.cat")) cannot_carry(ref, "/raw.cat", "raw's categories (anndata ≤0.6 raw.cat)");
  if (top.has("raw.X") || top.has("raw.var") || top.has("raw.varm")) {
    if (top.has("raw")) cannot_carry(ref, "/raw", "both raw and raw.X");
    Id raw = h5::create_group(root, "raw");
    const Writer in_raw = sub(root, raw, "raw");
    if (top.has("raw.X")) {
      if (H5Lmove(root.group, "raw.X", raw.get(), "X", H5P_DEFAULT, H5P_DEFAULT) < 0) {
        throw IoError(ref.path + ": /raw/X: " + h5::hdf5_problem("cannot move raw.X"));
      }
    }
    if (top.has("raw.var")) upgrade_frame(ref, root, "raw.var", "raw.var.flashot", uns, consumed);
    if (top.has("raw.var.flashot")) {
      if (H5Lmove(root.group, "raw.var.flashot", raw.get(), "var", H5P_DEFAULT, H5P_DEFAULT) < 0) {
        throw IoError(ref.path + ": /raw/var: " + h5::hdf5_problem("cannot move raw.var"));
      }
    }
    if (top.has("raw.varm")) {
      upgrade_mapping(ref, root, "raw.varm", "raw.varm.flashot", true);
      if (H5Lmove(root.group, "raw.varm.flashot", raw.get(), "varm", H5P_DEFAULT, H5P_DEFAULT) < 0) {
        throw IoError(ref.path + ": /raw/varm: " + h5::hdf5_problem("cannot move raw.varm"));
      }
    }
    (void)in_raw;
  }
  if (auto raw = top.find("raw")) {
    if (!raw->is_group()) cannot_carry(ref, "/raw", "a raw that is not a group");
    if (!raw->has_attr("encoding-type")) h5::set_encoding(raw->id(), "raw", "0.1.0");
    const Writer in_raw{&ref, raw->id(), "/raw"};
    if (auto x = raw->find("X")) upgrade_matrix(ref, *x);
    upgrade_frame(ref, in_raw, "var", "var", uns, consumed);
    if (raw->has("varm")) upgrade_mapping(ref, in_raw, "varm", "varm", true);
  }
  if (uns) {
    const Writer in_uns{&ref, uns->id(), "/uns"};
    for (const auto& key : consumed) h5::delete_link(in_uns, key);
    upgrade_uns(ref, *uns);
  } else {
    Id group = h5::create_group(root, "uns");
    h5::set_encoding(group.get(), "dict", "0.1.0");
  }
  h5::set_encoding(root.group, "anndata", "0.1.0");
}

struct NewFile {
  const std::vector<std::string>& obs_names;
  const std::vector<std::string>& var_names;
  const DenseMatrix* x_dense = nullptr;
  const SparseMatrix* x_sparse = nullptr;
  const H5adContent* rest = nullptr;
  int zarr_format = 3;
};

void write_new(const std::filesystem::path& path, const NewFile& f) {
  h5::silence_errors();
  const std::size_t n_obs = f.obs_names.size();
  const std::size_t n_vars = f.var_names.size();
  // Duplicate names are allowed: anndata only warns, and concatenated batches often repeat barcodes.
  if (f.x_dense && f.x_sparse) throw std::invalid_argument("X: give x_dense or x_sparse, not both");
  if (f.x_dense) check_dense("X", *f.x_dense, n_obs, n_vars);
  if (f.x_sparse) check_sparse("X", *f.x_sparse, n_obs, n_vars);
  static const H5adContent kNothing;
  const H5adContent& rest = f.rest != nullptr ? *f.rest : kNothing;
  check_additions(rest, n_obs, n_vars);
  if (zarr::is_zarr_name(path)) {
    zarr::write_new(path, f.obs_names, f.var_names, f.x_dense, f.x_sparse, rest, f.zarr_format);
    return;
  }

  TempFile temp(path);
  {
    OpenFile file(temp.path(), path.string(), true);
    const Writer root = file.root();
    h5::set_encoding(root.group, "anndata", "0.1.0");
    if (f.x_dense) write_dense(root, "X", *f.x_dense);
    if (f.x_sparse) write_sparse(root, "X", *f.x_sparse);
    write_dataframe(root, "obs", f.obs_names, rest.obs);
    write_dataframe(root, "var", f.var_names, rest.var);
    {
      Id obsm = h5::create_group(root, "obsm");
      h5::set_encoding(obsm.get(), "dict", "0.1.0");
      for (const auto& [key, m] : rest.obsm) write_dense(sub(root, obsm, "obsm"), key, m);
    }
    {
      Id uns = h5::create_group(root, "uns");
      h5::set_encoding(uns.get(), "dict", "0.1.0");
      for (const auto& [key, v] : rest.uns) write_uns_value(sub(root, uns, "uns"), key, v);
    }
    write_empty_dicts(root, {"varm", "obsp", "varp", "layers"});
    file.close();
  }
  temp.commit();
}

}  // namespace

void write_h5ad(const std::filesystem::path& path, const H5adContent& content) {
  write_new(path, NewFile{content.obs_names, content.var_names,
                          content.x_dense ? &*content.x_dense : nullptr,
                          content.x_sparse ? &*content.x_sparse : nullptr, &content, content.zarr_format});
}

bool is_zarr_path(const std::filesystem::path& path) { return zarr::is_zarr_name(path); }

void write_coupling_h5ad(const std::filesystem::path& path, const std::vector<std::string>& source_names,
                         const std::vector<std::string>& target_names, const SparseMatrix& coupling,
                         int zarr_format) {
  if (coupling.csc) throw std::invalid_argument("coupling: must be CSR (rows = source cells), got CSC");
  write_new(path, NewFile{source_names, target_names, nullptr, &coupling, nullptr, zarr_format});
}

void write_h5ad_copy(const std::filesystem::path& input, const std::filesystem::path& output,
                     const H5adContent& additions, bool in_place) {
  h5::silence_errors();
  if (!additions.obs_names.empty() || !additions.var_names.empty() || additions.x_dense || additions.x_sparse) {
    throw std::invalid_argument("write_h5ad_copy: additions must not carry obs_names, var_names or X");
  }
  std::error_code ec;
  if (std::filesystem::exists(output, ec) && std::filesystem::equivalent(input, output, ec) && !in_place) {
    throw std::invalid_argument("write_h5ad_copy: output " + output.string() +
                                " is the input file; pass in_place = true to replace it");
  }
  std::size_t n_obs = 0, n_vars = 0;
  {
    const H5adReader reader(input);  // validates the input is AnnData and gives the sizes to check against
    n_obs = reader.n_obs();
    n_vars = reader.n_vars();
  }
  check_additions(additions, n_obs, n_vars);
  if (zarr::is_zarr_name(output)) {  // zarr → zarr entry by entry; .h5ad → zarr through the reader's model
    zarr::write_copy(input, output, additions, in_place);
    return;
  }
  if (zarr::is_zarr_name(input)) {  // zarr → .h5ad through the reader's model
    const H5adContent all = zarr::gather_for_conversion(input, additions);
    write_h5ad(output, all);
    return;
  }

  TempFile temp(output);
  detail::copy_contents(input, temp.path(), output.string());
  {
    OpenFile file(temp.path(), output.string(), false);
    const Writer root = file.root();
    upgrade_legacy_layout(file.file(), root);  // a legacy input is written out in the current layout
    if (!additions.obsm.empty()) {
      Id obsm = open_or_create_dict(root, "obsm");
      const Writer at = sub(root, obsm, "obsm");
      for (const auto& [key, m] : additions.obsm) {
        h5::delete_link(at, key);
        write_dense(at, key, m);
      }
    }
    for (const char* frame_name : {"obs", "var"}) {
      const auto& columns = std::string(frame_name) == "obs" ? additions.obs : additions.var;
      if (columns.empty()) continue;
      H5O_info_t info{};
      if (H5Oget_info_by_name(root.group, frame_name, &info, H5P_DEFAULT) < 0 || info.type != H5O_TYPE_GROUP) {
        h5::take_error_stack();
        throw FormatError(output.string(), std::string("/") + frame_name,
                          "is not a dataframe group (anndata ≤0.6 compound layout); cannot add columns");
      }
      Id frame(H5Gopen2(root.group, frame_name, H5P_DEFAULT));
      const Writer at = sub(root, frame, frame_name);
      const h5::FileRef& ref = file.file();
      const Node node(&ref, Id(H5Gopen2(root.group, frame_name, H5P_DEFAULT)), std::string("/") + frame_name);
      std::vector<std::string> order =
          node.has_attr("column-order") ? node.attr_strings("column-order") : std::vector<std::string>{};
      const std::string index_name = node.has_attr("_index") ? node.attr_string("_index") : "_index";
      std::optional<Node> legacy_categories = node.find("__categories");
      for (const auto& [key, column] : columns) {
        if (key == index_name) {
          throw std::invalid_argument(std::string(frame_name) + ": column '" + key + "' would replace the index");
        }
        h5::delete_link(at, key);
        if (legacy_categories && legacy_categories->has(key)) {
          h5::delete_link(Writer{&ref, legacy_categories->id(), legacy_categories->object_path()}, key);
        }
        write_column(at, key, column);
        if (std::find(order.begin(), order.end(), key) == order.end()) order.push_back(key);
      }
      write_column_order(frame.get(), order);
    }
    if (!additions.uns.empty()) {
      Id uns = open_or_create_dict(root, "uns");
      const Writer at = sub(root, uns, "uns");
      for (const auto& [key, value] : additions.uns) {
        h5::delete_link(at, key);
        write_uns_value(at, key, value);
      }
    }
    file.close();
  }
  temp.commit();
}

}  // namespace flashot::io
