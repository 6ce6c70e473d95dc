#pragma once
// The AnnData element decoding of both readers, written once over either store's node: the .h5ad reader
// (anndata_read.cpp, over h5::Node) and the zarr reader (zarr/anndata_zarr.cpp, over zarr::Node) call these, and
// anndata_tree.hpp puts them together into the whole tree (X against obs × var, obsm/varm/layers, raw, uns). The
// checks and their messages are the same for both stores. The anndata ≤0.7 layouts exist only in HDF5 files: they
// are decoded for a node type that satisfies LegacyLayouts (h5::Node), and compiled out for one that does not.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "flashot/io/anndata.hpp"
#include "flashot/io/errors.hpp"

namespace flashot::io::anndata_decode {

// What the decoding asks of a node (an HDF5 group or dataset, a zarr group or array): navigation, attributes,
// shape and type, whole and ranged reads, and fail(), which throws a FormatError naming the input and the node.
// Each node type has its own TypeClass enum with the enumerators used here (kInteger, kUnsigned, kFloat, kString,
// kEnum).
template <typename Node>
concept ElementNode = std::copy_constructible<Node> &&
    requires(const Node& node, const std::string& name, std::uint64_t at, std::span<float> out, float* floats,
             std::int64_t* ints) {
      { node.is_group() } -> std::same_as<bool>;
      { node.is_dataset() } -> std::same_as<bool>;
      { node.object_path() } -> std::convertible_to<std::string>;
      { node.file_path() } -> std::convertible_to<std::string>;
      { node.has(name) } -> std::same_as<bool>;
      { node.child(name) } -> std::same_as<Node>;
      { node.find(name) } -> std::same_as<std::optional<Node>>;
      { node.children() } -> std::same_as<std::vector<std::string>>;
      { node.has_attr(name) } -> std::same_as<bool>;
      { node.attr_string(name) } -> std::same_as<std::string>;
      { node.attr_string_opt(name) } -> std::same_as<std::optional<std::string>>;
      { node.attr_strings(name) } -> std::same_as<std::vector<std::string>>;
      { node.attr_ints(name) } -> std::same_as<std::vector<std::int64_t>>;
      { node.attr_bool(name) } -> std::same_as<bool>;
      node.shape();
      node.type_class();
      { node.dtype_name() } -> std::same_as<std::string>;
      { node.read_doubles() } -> std::same_as<std::vector<double>>;
      { node.read_floats() } -> std::same_as<std::vector<float>>;
      { node.read_int64s() } -> std::same_as<std::vector<std::int64_t>>;
      node.read_floats_into(out);
      node.read_float_rows(at, at, floats);
      node.read_int64_range(at, at, ints);
      { node.read_strings() } -> std::same_as<std::vector<std::string>>;
      { node.read_flags() } -> std::same_as<std::vector<std::uint8_t>>;
      node.fail(name);
    };

// A node that can hold the anndata ≤0.7 layouts: compound (record) datasets, as ≤0.6 stores obs/var/obsm, and
// object-reference attributes, as 0.7 points a categorical at its categories. HDF5's node can; zarr's cannot (anndata
// never wrote those layouts to zarr), and there a dataframe must be a group.
template <typename Node>
concept LegacyLayouts = ElementNode<Node> && requires(const Node& node, const std::string& name) {
  { node.compound_fields() } -> std::same_as<std::vector<std::string>>;
  node.read_compound_field(name);
  { node.attr_is_reference(name) } -> std::same_as<bool>;
  { node.attr_dereference(name) } -> std::same_as<Node>;
};

inline std::string list_keys(const std::vector<std::string>& keys) {
  if (keys.empty()) return "none";
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

inline std::string number_text(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    return std::to_string(static_cast<long long>(v));
  }
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), v);
  return std::string(buffer, result.ptr);
}

template <ElementNode Node>
std::string encoding_of(const Node& node) { return node.attr_string_opt("encoding-type").value_or(""); }

template <typename TypeClass>
bool is_numeric(TypeClass c) { return c == TypeClass::kInteger || c == TypeClass::kUnsigned || c == TypeClass::kFloat; }

// Values of a string-like element as text: string datasets, numeric datasets (rendered), boolean enums, and
// nullable-string-array groups (missing entries become "").
template <ElementNode Node>
std::vector<std::string> read_text(const Node& node) {
  if (node.is_group()) {
    const std::string enc = encoding_of(node);
    if (enc == "nullable-string-array" || (node.has("values") && node.has("mask"))) {
      return read_text(node.child("values"));
    }
    node.fail("expected a string array, found a group with encoding '" + enc + "'");
  }
  const auto cls = node.type_class();
  using TypeClass = decltype(cls);
  if (cls == TypeClass::kString) return node.read_strings();
  if (cls == TypeClass::kEnum) {
    std::vector<std::string> out;
    for (auto f : node.read_flags()) out.emplace_back(f != 0 ? "True" : "False");
    return out;
  }
  if (cls == TypeClass::kInteger || cls == TypeClass::kUnsigned) {
    std::vector<std::string> out;
    for (auto v : node.read_int64s()) out.push_back(std::to_string(v));
    return out;
  }
  if (cls == TypeClass::kFloat) {
    std::vector<std::string> out;
    for (double v : node.read_doubles()) out.push_back(number_text(v));
    return out;
  }
  node.fail("expected strings, found " + node.dtype_name());
}

template <ElementNode Node>
std::size_t length_of(const Node& node) {
  if (node.is_group()) {
    if (node.has("values")) return length_of(node.child("values"));
    if (node.has("codes")) return length_of(node.child("codes"));
    node.fail("cannot tell the length of this group");
  }
  const auto dims = node.shape();
  return dims.empty() ? 1 : static_cast<std::size_t>(dims[0]);
}

template <ElementNode Node>
std::vector<std::int32_t> checked_codes(const Node& node, std::size_t n_categories) {
  const auto raw = node.read_int64s();
  std::vector<std::int32_t> codes(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] < -1 || raw[i] >= static_cast<std::int64_t>(n_categories)) {
      node.fail("categorical code " + std::to_string(raw[i]) + " at row " + std::to_string(i) + " outside [-1, " +
                std::to_string(n_categories) + ")");
    }
    codes[i] = static_cast<std::int32_t>(raw[i]);
  }
  return codes;
}

template <ElementNode Node>
SparseMatrix read_sparse_group(const Node& group, const std::string& format, std::size_t rows, std::size_t cols) {
  SparseMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.csc = format == "csc";
  const std::size_t major = m.csc ? cols : rows;
  const std::size_t minor = m.csc ? rows : cols;
  const Node indptr_node = group.child("indptr");
  const Node indices_node = group.child("indices");
  const Node data_node = group.child("data");
  if (length_of(indptr_node) != major + 1) {
    indptr_node.fail("has " + std::to_string(length_of(indptr_node)) + " entries, expected " +
                     std::to_string(major + 1) + " for shape (" + std::to_string(rows) + ", " +
                     std::to_string(cols) + ")");
  }
  m.indptr = indptr_node.read_int64s();
  const std::size_t nnz = length_of(data_node);
  if (length_of(indices_node) != nnz) {
    indices_node.fail("has " + std::to_string(length_of(indices_node)) + " entries, data " + std::to_string(nnz));
  }
  if (m.indptr.front() != 0) indptr_node.fail("starts at " + std::to_string(m.indptr.front()) + ", not 0");
  for (std::size_t i = 1; i < m.indptr.size(); ++i) {
    if (m.indptr[i] < m.indptr[i - 1]) {
      indptr_node.fail("decreases at " + std::to_string(i) + " (" + std::to_string(m.indptr[i - 1]) + " → " +
                       std::to_string(m.indptr[i]) + ")");
    }
  }
  if (static_cast<std::size_t>(m.indptr.back()) != nnz) {
    indptr_node.fail("ends at " + std::to_string(m.indptr.back()) + " but data holds " + std::to_string(nnz));
  }
  m.indices = indices_node.read_int64s();
  for (std::size_t i = 0; i < m.indices.size(); ++i) {
    if (m.indices[i] < 0 || static_cast<std::size_t>(m.indices[i]) >= minor) {
      indices_node.fail("index " + std::to_string(m.indices[i]) + " at " + std::to_string(i) + " outside [0, " +
                        std::to_string(minor) + ")");
    }
  }
  m.data = data_node.read_floats();
  return m;
}

inline DenseMatrix densify(const SparseMatrix& s) {
  DenseMatrix d;
  d.rows = s.rows;
  d.cols = s.cols;
  d.values.assign(s.rows * s.cols, 0.0f);
  const std::size_t major = s.csc ? s.cols : s.rows;
  for (std::size_t i = 0; i < major; ++i) {
    for (auto k = s.indptr[i]; k < s.indptr[i + 1]; ++k) {
      const auto j = static_cast<std::size_t>(s.indices[static_cast<std::size_t>(k)]);
      const std::size_t at = s.csc ? j * s.cols + i : i * s.cols + j;
      d.values[at] += s.data[static_cast<std::size_t>(k)];  // duplicates sum, as in scipy
    }
  }
  return d;
}

// One column of a group-based dataframe (anndata 0.7 and later).
template <ElementNode Node>
Column read_group_column(const Node& column) {
  Column out;
  out.encoding = encoding_of(column);
  if (column.is_group()) {
    const std::string& enc = out.encoding;
    if (enc == "categorical" || (enc.empty() && column.has("codes") && column.has("categories"))) {
      out.kind = Column::Kind::kCategorical;
      out.categories = read_text(column.child("categories"));
      out.codes = checked_codes(column.child("codes"), out.categories.size());
      out.ordered = column.has_attr("ordered") && column.attr_bool("ordered");
      return out;
    }
    if (enc == "nullable-integer" || enc == "nullable-boolean" || enc == "nullable-string-array") {
      const Node values = column.child("values");
      out.missing = column.child("mask").read_flags();
      const std::size_t n = length_of(values);
      if (out.missing.size() != n) {
        column.fail("mask has " + std::to_string(out.missing.size()) + " entries, values " + std::to_string(n));
      }
      if (enc == "nullable-integer") {
        out.kind = Column::Kind::kNumeric;
        out.numbers = values.read_doubles();
        for (std::size_t i = 0; i < n; ++i) {
          if (out.missing[i] != 0) out.numbers[i] = std::numeric_limits<double>::quiet_NaN();
        }
      } else if (enc == "nullable-boolean") {
        out.kind = Column::Kind::kBoolean;
        out.flags = values.read_flags();
        for (std::size_t i = 0; i < n; ++i) {
          if (out.missing[i] != 0) out.flags[i] = 0;
        }
      } else {
        out.kind = Column::Kind::kString;
        out.strings = read_text(values);
        for (std::size_t i = 0; i < n; ++i) {
          if (out.missing[i] != 0) out.strings[i].clear();
        }
      }
      return out;
    }
    column.fail("unsupported column encoding '" + enc + "'");
  }
  if constexpr (LegacyLayouts<Node>) {
    if (column.attr_is_reference("categories")) {  // anndata 0.7
      out.kind = Column::Kind::kCategorical;
      out.categories = read_text(column.attr_dereference("categories"));
      out.codes = checked_codes(column, out.categories.size());
      out.ordered = column.has_attr("ordered") && column.attr_bool("ordered");
      return out;
    }
  }
  const auto cls = column.type_class();
  using TypeClass = decltype(cls);
  if (cls == TypeClass::kString) {
    out.kind = Column::Kind::kString;
    out.strings = column.read_strings();
  } else if (cls == TypeClass::kEnum) {
    out.kind = Column::Kind::kBoolean;
    out.flags = column.read_flags();
  } else if (is_numeric(cls)) {
    out.kind = Column::Kind::kNumeric;
    out.numbers = column.read_doubles();
  } else {
    column.fail("unsupported column type " + column.dtype_name());
  }
  if (column.shape().size() != 1) column.fail("a dataframe column must be 1-D");
  return out;
}

// A dataframe: a group (0.7+), or, for LegacyLayouts nodes, a compound dataset (≤0.6) whose categorical columns
// take their categories from uns/<column>_categories (`uns`: the root's uns, if any).
template <ElementNode Node>
class Frame {
 public:
  explicit Frame(Node node, std::optional<Node> uns = std::nullopt) : node_(std::move(node)), uns_(std::move(uns)) {
    if constexpr (!LegacyLayouts<Node>) {
      if (!node_.is_group()) node_.fail("a dataframe must be a group");
    }
  }

  const Node& node() const { return node_; }

  std::string index_name() const {
    if constexpr (LegacyLayouts<Node>) {
      if (compound()) {
        const auto fields = node_.compound_fields();
        if (std::find(fields.begin(), fields.end(), "index") != fields.end()) return "index";
        node_.fail("legacy compound dataframe has no 'index' field");
      }
    }
    if (node_.has_attr("_index")) return node_.attr_string("_index");
    if (node_.has("_index")) return "_index";
    if (node_.has("index")) return "index";
    node_.fail("dataframe has no _index attribute");
  }

  std::size_t rows() const {
    if constexpr (LegacyLayouts<Node>) {
      if (compound()) return length_of(node_);
    }
    return length_of(node_.child(index_name()));
  }

  std::vector<std::string> index() const {
    if constexpr (LegacyLayouts<Node>) {
      if (compound()) {
        auto field = node_.read_compound_field("index");
        if (field.is_string) return field.strings;
        std::vector<std::string> out;
        for (double v : field.numbers) out.push_back(number_text(v));
        return out;
      }
    }
    return read_text(node_.child(index_name()));
  }

  std::vector<std::string> columns() const {
    const std::string index = index_name();
    std::vector<std::string> out;
    if constexpr (LegacyLayouts<Node>) {
      if (compound()) {
        for (auto& f : node_.compound_fields()) {
          if (f != index) out.push_back(std::move(f));
        }
        return out;
      }
    }
    if (node_.has_attr("column-order")) return node_.attr_strings("column-order");
    for (auto& c : node_.children()) {
      if (c != index && c != "__categories") out.push_back(std::move(c));
    }
    return out;
  }

  Column column(const std::string& name) const {
    const std::size_t n = rows();
    if constexpr (LegacyLayouts<Node>) {
      if (compound()) return compound_column(name);
    }
    if (name == index_name() || !node_.has(name)) no_column(name);
    const Node element = node_.child(name);
    Column out = read_group_column(element);
    if (out.size() != n) {
      element.fail("column has " + std::to_string(out.size()) + " rows, the dataframe " + std::to_string(n));
    }
    return out;
  }

 private:
  bool compound() const { return node_.is_dataset(); }

  [[noreturn]] void no_column(const std::string& name) const {
    throw IoError(node_.file_path() + ": " + node_.object_path() + ": no column '" + name + "' (columns: " +
                  list_keys(columns()) + ")");
  }

  Column compound_column(const std::string& name) const {
    const auto fields = node_.compound_fields();
    if (std::find(fields.begin(), fields.end(), name) == fields.end() || name == "index") no_column(name);
    Column out;
    auto field = node_.read_compound_field(name);
    const std::string categories_key = name + "_categories";
    if (!field.is_string && uns_ && uns_->has(categories_key)) {
      out.kind = Column::Kind::kCategorical;
      out.categories = read_text(uns_->child(categories_key));
      out.codes.resize(field.numbers.size());
      for (std::size_t i = 0; i < field.numbers.size(); ++i) {
        const double c = field.numbers[i];
        if (!(c >= -1 && c < static_cast<double>(out.categories.size()))) {
          node_.fail("categorical code " + number_text(c) + " of column " + name + " at row " + std::to_string(i) +
                     " outside [-1, " + std::to_string(out.categories.size()) + ")");
        }
        out.codes[i] = static_cast<std::int32_t>(c);
      }
    } else if (field.is_string) {
      out.kind = Column::Kind::kString;
      out.strings = std::move(field.strings);
    } else {
      out.kind = Column::Kind::kNumeric;
      out.numbers = std::move(field.numbers);
    }
    return out;
  }

  Node node_;
  std::optional<Node> uns_;
};

// Sparse format ("csr" / "csc") and shape of a group, from the 0.1.0 attributes or, for LegacyLayouts nodes, the
// ≤0.6 h5sparse ones; nullopt if neither.
template <ElementNode Node>
std::optional<std::pair<std::string, std::vector<std::int64_t>>> sparse_layout(const Node& group) {
  const std::string enc = encoding_of(group);
  if (enc == "csr_matrix" || enc == "csc_matrix") {
    auto shape = group.attr_ints("shape");
    if (shape.size() != 2 || shape[0] < 0 || shape[1] < 0) group.fail("shape attribute must hold two sizes");
    return std::make_pair(enc.substr(0, 3), shape);
  }
  if constexpr (LegacyLayouts<Node>) {
    if (enc.empty() && group.has_attr("h5sparse_format")) {
      const std::string format = group.attr_string("h5sparse_format");
      if (format != "csr" && format != "csc") group.fail("unknown h5sparse_format '" + format + "'");
      auto shape = group.attr_ints("h5sparse_shape");
      if (shape.size() != 2 || shape[0] < 0 || shape[1] < 0) group.fail("h5sparse_shape must hold two sizes");
      return std::make_pair(format, shape);
    }
  }
  return std::nullopt;
}

// Encoding, dtype and shape of an array-like element (dense, sparse, dataframe), from metadata alone.
template <ElementNode Node>
ArrayInfo info_of(const Node& node) {
  ArrayInfo info;
  info.encoding = encoding_of(node);
  if (node.is_group()) {
    if (auto sparse = sparse_layout(node)) {
      info.encoding = sparse->first + "_matrix";
      info.rows = static_cast<std::size_t>(sparse->second[0]);
      info.cols = static_cast<std::size_t>(sparse->second[1]);
      info.dtype = node.has("data") ? node.child("data").dtype_name() : "";
      return info;
    }
    if (info.encoding == "dataframe" || node.has_attr("_index")) {
      Frame<Node> frame(node);
      info.encoding = "dataframe";
      info.rows = frame.rows();
      info.cols = frame.columns().size();
      return info;
    }
    node.fail("unsupported array encoding '" + info.encoding + "'");
  }
  const auto dims = node.shape();
  if (dims.size() > 2) node.fail("expected a 1-D or 2-D array, found " + std::to_string(dims.size()) + "-D");
  info.dtype = node.dtype_name();
  info.rows = dims.empty() ? 1 : static_cast<std::size_t>(dims[0]);
  info.cols = dims.size() == 2 ? static_cast<std::size_t>(dims[1]) : 1;
  return info;
}

template <ElementNode Node>
SparseMatrix read_sparse(const Node& node) {
  if (!node.is_group()) node.fail("stored dense, not as a sparse matrix");
  auto layout = sparse_layout(node);
  if (!layout) node.fail("not a sparse matrix (encoding '" + encoding_of(node) + "')");
  return read_sparse_group(node, layout->first, static_cast<std::size_t>(layout->second[0]),
                           static_cast<std::size_t>(layout->second[1]));
}

// A dense array, a sparse matrix (densified) or a dataframe (its numeric columns side by side) as float32.
template <ElementNode Node>
DenseMatrix read_dense(const Node& node) {
  if (node.is_group()) {
    if (auto layout = sparse_layout(node)) {
      const auto rows = static_cast<std::size_t>(layout->second[0]);
      const auto cols = static_cast<std::size_t>(layout->second[1]);
      if (rows != 0 && cols > std::numeric_limits<std::size_t>::max() / sizeof(float) / rows) {
        node.fail("shape (" + std::to_string(rows) + ", " + std::to_string(cols) + ") is too large to densify");
      }
      return densify(read_sparse(node));
    }
    const ArrayInfo info = info_of(node);  // a dataframe: its numeric columns side by side
    Frame<Node> frame(node);
    DenseMatrix m;
    m.rows = info.rows;
    const auto names = frame.columns();
    m.cols = names.size();
    m.values.assign(m.rows * m.cols, 0.0f);
    for (std::size_t c = 0; c < names.size(); ++c) {
      const Column column = frame.column(names[c]);
      if (column.kind != Column::Kind::kNumeric) {
        node.fail("column '" + names[c] + "' is not numeric, so the dataframe is not a matrix");
      }
      for (std::size_t r = 0; r < m.rows; ++r) m.values[r * m.cols + c] = static_cast<float>(column.numbers[r]);
    }
    return m;
  }
  const ArrayInfo info = info_of(node);
  if (!is_numeric(node.type_class())) node.fail("expected a numeric array, found " + info.dtype);
  DenseMatrix m;
  m.rows = info.rows;
  m.cols = info.cols;
  m.values = node.read_floats();
  return m;
}

// The uns value at `key` ('/'-separated), walked down from `node` (the root's uns, if any); `path` and `noun`
// ("file" or "store") name the input in errors.
template <ElementNode Node>
UnsValue read_uns(std::optional<Node> node, const std::string& key, const std::string& path, const std::string& noun) {
  std::string walked = "/uns";
  std::stringstream parts(key);
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (!node || !node->is_group() || !node->has(part)) {
      throw IoError(path + ": " + walked + ": no entry '" + part + "' (keys: " +
                    list_keys(node && node->is_group() ? node->children() : std::vector<std::string>{}) + ")");
    }
    node = node->find(part);
    walked += "/" + part;
  }
  if (!node) throw IoError(path + ": /uns: the " + noun + " has no uns");
  if (!node->is_dataset()) node->fail("is a mapping, not a value");
  const auto dims = node->shape();
  const auto cls = node->type_class();
  using TypeClass = decltype(cls);
  if (cls == TypeClass::kString) {
    auto strings = node->read_strings();
    if (strings.size() != 1) node->fail("holds " + std::to_string(strings.size()) + " strings, not one");
    return strings[0];
  }
  if (!is_numeric(cls) && cls != TypeClass::kEnum) node->fail("unsupported uns value of type " + node->dtype_name());
  if (dims.empty()) {
    if (cls == TypeClass::kFloat) return node->read_doubles()[0];
    if (cls == TypeClass::kEnum) return std::int64_t{node->read_flags()[0]};
    return node->read_int64s()[0];
  }
  if (dims.size() != 1) node->fail("is a " + std::to_string(dims.size()) + "-D array, not a vector");
  if (cls == TypeClass::kEnum) {
    std::vector<double> out;
    for (auto f : node->read_flags()) out.push_back(f);
    return out;
  }
  return node->read_doubles();
}

}  // namespace flashot::io::anndata_decode
