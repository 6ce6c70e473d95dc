// Reading AnnData .h5ad files of every writer generation. Each element is dispatched on its `encoding-type`
// attribute; elements without one are legacy layouts (anndata ≤0.7), recognised by their shape:
//   ≤0.6  obs/var are compound datasets, categories live in uns/<column>_categories, obsm is a compound dataset
//         of array fields, sparse X is a group with `h5sparse_format`/`h5sparse_shape` attributes;
//   0.7   obs/var are groups; a categorical is an integer dataset whose `categories` attribute is an object
//         reference (into obs/__categories); files are often LZF-compressed.
// Nothing is read before it is asked for: opening a file reads attributes and shapes only.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <unordered_set>
#include <utility>

#include "flashot/io/anndata.hpp"
#include "anndata_decode.hpp"
#include "flashot/io/errors.hpp"
#include "h5/h5.hpp"
#include "h5/isolated_walk.hpp"
#include "h5/probe.hpp"
#include "zarr/anndata_zarr.hpp"
#include "zarr/store.hpp"

namespace flashot::io {
namespace {

using h5::Node;
using h5::TypeClass;

// How long the isolated metadata walk may take before the file is called corrupt (h5/isolated_walk.hpp): a real
// file's metadata walks in milliseconds (pbmc68k_reduced: a few ms).
constexpr std::chrono::seconds kMetadataWalkLimit{60};

// Rows of X read at a time by read_x_columns, so a large dense X never has to fit in memory at once.
constexpr std::size_t kRowBlockBytes = std::size_t{64} << 20;

using anndata_decode::checked_codes;
using anndata_decode::densify;
using anndata_decode::encoding_of;
using anndata_decode::is_numeric;
using anndata_decode::length_of;
using anndata_decode::list_keys;
using anndata_decode::number_text;
using anndata_decode::read_sparse_group;
using anndata_decode::read_text;

// One column of a group-based dataframe (anndata 0.7 and later).
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
  if (column.attr_is_reference("categories")) {  // anndata 0.7
    out.kind = Column::Kind::kCategorical;
    out.categories = read_text(column.attr_dereference("categories"));
    out.codes = checked_codes(column, out.categories.size());
    out.ordered = column.has_attr("ordered") && column.attr_bool("ordered");
    return out;
  }
  const TypeClass cls = column.type_class();
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

// A dataframe: a group (0.7+) or a compound dataset (≤0.6).
class Frame {
 public:
  Frame(Node node, std::optional<Node> uns) : node_(std::move(node)), uns_(std::move(uns)) {}

  bool compound() const { return node_.is_dataset(); }
  const Node& node() const { return node_; }

  std::string index_name() const {
    if (compound()) {
      const auto fields = node_.compound_fields();
      if (std::find(fields.begin(), fields.end(), "index") != fields.end()) return "index";
      node_.fail("legacy compound dataframe has no 'index' field");
    }
    if (node_.has_attr("_index")) return node_.attr_string("_index");
    if (node_.has("_index")) return "_index";
    if (node_.has("index")) return "index";
    node_.fail("dataframe has no _index attribute");
  }

  std::size_t rows() const {
    if (compound()) return length_of(node_);
    return length_of(node_.child(index_name()));
  }

  std::vector<std::string> index() const {
    if (compound()) {
      auto field = node_.read_compound_field("index");
      if (field.is_string) return field.strings;
      std::vector<std::string> out;
      for (double v : field.numbers) out.push_back(number_text(v));
      return out;
    }
    return read_text(node_.child(index_name()));
  }

  std::vector<std::string> columns() const {
    const std::string index = index_name();
    std::vector<std::string> out;
    if (compound()) {
      for (auto& f : node_.compound_fields()) {
        if (f != index) out.push_back(std::move(f));
      }
      return out;
    }
    if (node_.has_attr("column-order")) return node_.attr_strings("column-order");
    for (auto& c : node_.children()) {
      if (c != index && c != "__categories") out.push_back(std::move(c));
    }
    return out;
  }

  Column column(const std::string& name) const {
    const std::size_t n = rows();
    Column out;
    if (compound()) {
      const auto fields = node_.compound_fields();
      if (std::find(fields.begin(), fields.end(), name) == fields.end() || name == "index") {
        throw IoError(node_.file_path() + ": " + node_.object_path() + ": no column '" + name +
                      "' (columns: " + list_keys(columns()) + ")");
      }
      auto field = node_.read_compound_field(name);
      const std::string categories_key = name + "_categories";
      if (!field.is_string && uns_ && uns_->has(categories_key)) {
        out.kind = Column::Kind::kCategorical;
        out.categories = read_text(uns_->child(categories_key));
        out.codes.resize(field.numbers.size());
        for (std::size_t i = 0; i < field.numbers.size(); ++i) {
          const double c = field.numbers[i];
          if (!(c >= -1 && c < static_cast<double>(out.categories.size()))) {
            node_.fail("categorical code " + number_text(c) + " of column " + name + " at row " +
                       std::to_string(i) + " outside [-1, " + std::to_string(out.categories.size()) + ")");
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
    if (name == index_name() || !node_.has(name)) {
      throw IoError(node_.file_path() + ": " + node_.object_path() + ": no column '" + name +
                    "' (columns: " + list_keys(columns()) + ")");
    }
    const Node element = node_.child(name);
    out = read_group_column(element);
    if (out.size() != n) {
      element.fail("column has " + std::to_string(out.size()) + " rows, the dataframe " + std::to_string(n));
    }
    return out;
  }

 private:
  Node node_;
  std::optional<Node> uns_;
};

// Sparse format and shape of a group, from the 0.1.0 attributes or the ≤0.6 h5sparse ones; nullopt if neither.
std::optional<std::pair<std::string, std::vector<std::int64_t>>> sparse_layout(const Node& group) {
  const std::string enc = encoding_of(group);
  if (enc == "csr_matrix" || enc == "csc_matrix") {
    auto shape = group.attr_ints("shape");
    if (shape.size() != 2 || shape[0] < 0 || shape[1] < 0) group.fail("shape attribute must hold two sizes");
    return std::make_pair(enc.substr(0, 3), shape);
  }
  if (enc.empty() && group.has_attr("h5sparse_format")) {
    const std::string format = group.attr_string("h5sparse_format");
    if (format != "csr" && format != "csc") group.fail("unknown h5sparse_format '" + format + "'");
    auto shape = group.attr_ints("h5sparse_shape");
    if (shape.size() != 2 || shape[0] < 0 || shape[1] < 0) group.fail("h5sparse_shape must hold two sizes");
    return std::make_pair(format, shape);
  }
  return std::nullopt;
}

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
      Frame frame(node, std::nullopt);
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

SparseMatrix read_sparse(const Node& node) {
  if (!node.is_group()) node.fail("stored dense, not as a sparse matrix");
  auto layout = sparse_layout(node);
  if (!layout) node.fail("not a sparse matrix (encoding '" + encoding_of(node) + "')");
  return read_sparse_group(node, layout->first, static_cast<std::size_t>(layout->second[0]),
                           static_cast<std::size_t>(layout->second[1]));
}

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
    Frame frame(node, std::nullopt);
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

}  // namespace

std::size_t Column::size() const {
  switch (kind) {
    case Kind::kCategorical: return codes.size();
    case Kind::kNumeric: return numbers.size();
    case Kind::kString: return strings.size();
    case Kind::kBoolean: return flags.size();
  }
  return 0;
}

struct H5adReader::Impl {
  std::filesystem::path path;
  std::unique_ptr<zarr::AnnData> zarr;  // a zarr store (docs/io-zarr.md): every accessor goes there
  std::vector<std::byte> image;  // from_image: the file's bytes (file.image points here)
  h5::FileRef file;
  h5::Id file_id;
  Node root;

  Impl() = default;
  Impl(const Impl&) = delete;

  void open_root() {
    file.id = file_id.get();
    h5::Id group(H5Gopen2(file_id.get(), "/", H5P_DEFAULT));
    if (!group.valid()) throw FormatError(file.path, "/", "cannot open the root group (" + h5::take_error_stack() + ")");
    root = Node(&file, std::move(group), "/");
    if (!root.has("obs") && !root.has("X") && !root.has("var") &&
        root.attr_string_opt("encoding-type").value_or("") != "anndata") {
      throw FormatError(file.path, "/", "not an AnnData file (no obs, var or X, and no encoding-type=anndata)");
    }
  }

  std::optional<Node> uns() const { return root.find("uns"); }

  // X, with its shape checked against obs and var before anything is read.
  Node x() const {
    auto node = root.find("X");
    if (!node) throw IoError(path.string() + ": /X: the file has no X");
    const ArrayInfo info = info_of(*node);
    const std::size_t rows = frame_rows("obs"), cols = frame_rows("var");
    if ((rows != kUnknown && info.rows != rows) || (cols != kUnknown && info.cols != cols)) {
      node->fail("shape (" + std::to_string(info.rows) + ", " + std::to_string(info.cols) +
                 ") does not match obs × var (" + std::to_string(rows) + ", " + std::to_string(cols) + ")");
    }
    return std::move(*node);
  }

  Frame frame(const std::string& name) const { return Frame(root.child(name), uns()); }

  std::optional<Node> element(const std::string& group, const std::string& key) const {
    auto g = root.find(group);
    if (!g || !g->is_group()) return std::nullopt;
    return g->find(key);
  }

  std::vector<std::string> keys(const std::string& group) const {
    auto g = root.find(group);
    if (!g) return {};
    if (g->is_dataset()) {
      if (g->type_class() == TypeClass::kCompound) return g->compound_fields();  // ≤0.6 obsm
      return {};
    }
    return g->children();
  }

  // An anndata ≤0.6 mapping: one compound dataset whose fields are the entries.
  std::optional<Node> compound_mapping(const std::string& group) const {
    auto g = root.find(group);
    if (g && g->is_dataset() && g->type_class() == TypeClass::kCompound) return g;
    return std::nullopt;
  }

  // The ≤0.6 entry `key` (a field of the compound dataset `group`) and its shape, learnt from the dataspace and
  // the compound type without reading the data; nullopt when `group` is no such dataset or has no such field.
  std::optional<std::pair<Node, ArrayInfo>> compound_entry(const std::string& group, const std::string& key) const {
    auto g = compound_mapping(group);
    if (!g) return std::nullopt;
    const auto fields = g->compound_fields();
    if (std::find(fields.begin(), fields.end(), key) == fields.end()) return std::nullopt;
    const Node::ArrayField field = g->compound_array_field(key);
    ArrayInfo info;
    info.dtype = field.dtype;
    info.rows = field.records;
    info.cols = field.cols;
    return std::make_pair(std::move(*g), std::move(info));
  }

  // The obsm/varm/layers element `key` and its shape. obsm/layers rows are cells, varm rows are genes: a shape
  // that disagrees is a broken file, caught before anything is read.
  std::pair<Node, ArrayInfo> checked_entry(const std::string& group, const std::string& key) const {
    auto e = element(group, key);
    if (!e) {
      throw IoError(path.string() + ": /" + group + ": no entry '" + key + "' (keys: " + list_keys(keys(group)) +
                    ")");
    }
    ArrayInfo info = info_of(*e);
    const bool by_var = group == "varm";
    const std::size_t expected = by_var ? frame_rows("var") : frame_rows("obs");
    if (expected != kUnknown && info.rows != expected) {
      e->fail("has " + std::to_string(info.rows) + " rows, but the file has " + std::to_string(expected) +
              (by_var ? " vars" : " cells"));
    }
    return {std::move(*e), std::move(info)};
  }

  DenseMatrix read_mapping_entry(const std::string& group, const std::string& key) const {
    if (auto entry = compound_entry(group, key)) {
      DenseMatrix m;
      m.rows = entry->second.rows;
      m.cols = entry->second.cols;
      m.values.resize(m.rows * m.cols);  // compound_array_field bounded rows·cols by the bytes stored
      entry->first.read_compound_array_field_into(key, m.values);
      return m;
    }
    return read_dense(checked_entry(group, key).first);
  }

  // As read_mapping_entry, into caller memory, with `out`'s size checked against the entry's shape before anything
  // is read. A dense dataset and a ≤0.6 compound field go straight from HDF5 into `out`; sparse and dataframe
  // entries are assembled first and copied.
  void read_mapping_entry_into(const std::string& group, const std::string& key, std::span<float> out) const {
    const auto check_size = [&](std::size_t rows, std::size_t cols) {
      const bool fits = rows == 0 || cols <= std::numeric_limits<std::size_t>::max() / rows;
      if (!fits || out.size() != rows * cols) {
        throw std::invalid_argument(group + "['" + key + "']: out must hold rows·cols = " + std::to_string(rows) +
                                    "·" + std::to_string(cols) + " values (got " + std::to_string(out.size()) +
                                    ")");
      }
    };
    if (auto entry = compound_entry(group, key)) {
      check_size(entry->second.rows, entry->second.cols);
      entry->first.read_compound_array_field_into(key, out);
      return;
    }
    auto [e, info] = checked_entry(group, key);
    check_size(info.rows, info.cols);
    if (e.is_dataset()) {
      if (!is_numeric(e.type_class())) e.fail("expected a numeric array, found " + info.dtype);
      e.read_floats_into(out);
      return;
    }
    const DenseMatrix m = read_dense(e);
    check_size(m.rows, m.cols);
    std::copy(m.values.begin(), m.values.end(), out.begin());
  }

  static constexpr std::size_t kUnknown = static_cast<std::size_t>(-1);
  std::size_t frame_rows(const std::string& name) const {
    return root.has(name) ? frame(name).rows() : kUnknown;
  }
};

H5adReader::H5adReader(const std::filesystem::path& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  if (zarr::is_zarr_name(path)) {
    impl_->zarr = std::make_unique<zarr::AnnData>(path);
    return;
  }
  h5::silence_errors();
  impl_->file.path = path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw IoError(path.string() + ": no such file");
  if (std::filesystem::is_directory(path, ec)) {
    const std::string what = h5::describe_folder(path);
    throw IoError(path.string() + ": is a directory" + (what.empty() ? std::string() : ": " + what));
  }
  // Empty, cut short, or something else: said in plain words before HDF5 describes it by its internals.
  if (auto problem = h5::hdf5_file_problem(path)) throw FormatError(path.string(), "", *problem);
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 < 0) throw IoError(path.string() + ": cannot be opened (" + h5::take_error_stack() + ")");
  if (is_hdf5 == 0) throw FormatError(path.string(), "", "not an HDF5 file (no HDF5 signature)");
  if (auto crash = h5::crash_in_isolated_walk(impl_->file, kMetadataWalkLimit)) {
    throw FormatError(path.string(), "", *crash);
  }
  impl_->file_id = h5::Id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!impl_->file_id.valid()) {
    throw FormatError(path.string(), "/", "HDF5 cannot open it (" + h5::take_error_stack() + ")");
  }
  impl_->open_root();
}

H5adReader H5adReader::from_image(std::span<const std::byte> image, const std::string& name) {
  h5::silence_errors();
  H5adReader reader(std::make_unique<Impl>());
  Impl& impl = *reader.impl_;
  impl.path = name;
  impl.file.path = name;
  if (auto problem = h5::hdf5_file_problem(image)) throw FormatError(name, "", *problem);
  // A copy the reader keeps: its checked string reader (h5/vlen.hpp) reads the bytes itself, after the caller's
  // span may be gone.
  impl.image.assign(image.begin(), image.end());
  impl.file.image = impl.image;
  if (auto crash = h5::crash_in_isolated_walk(impl.file, kMetadataWalkLimit)) throw FormatError(name, "", *crash);
  h5::Id fapl(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fapl_core(fapl.get(), std::size_t{1} << 20, 0);
  // HDF5 copies the image into the property list and again into the file; it never writes through the pointer.
  void* bytes = impl.image.data();
  if (image.empty() || H5Pset_file_image(fapl.get(), bytes, image.size()) < 0) {
    throw FormatError(name, "/", "empty or unusable HDF5 image (" + h5::take_error_stack() + ")");
  }
  impl.file_id = h5::Id(H5Fopen(name.c_str(), H5F_ACC_RDONLY, fapl.get()));
  if (!impl.file_id.valid()) throw FormatError(name, "/", "HDF5 cannot open it (" + h5::take_error_stack() + ")");
  impl.open_root();
  return reader;
}

H5adReader::H5adReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

H5adReader::~H5adReader() = default;
H5adReader::H5adReader(H5adReader&&) noexcept = default;
H5adReader& H5adReader::operator=(H5adReader&&) noexcept = default;

const std::filesystem::path& H5adReader::path() const { return impl_->path; }

std::string H5adReader::writer_generation() const {
  if (impl_->zarr) return impl_->zarr->writer_generation();
  const Node& root = impl_->root;
  if (root.attr_string_opt("encoding-type").value_or("") == "anndata") {
    return root.attr_string_opt("encoding-version").value_or("?") + " (anndata ≥0.8)";
  }
  auto obs = root.find("obs");
  if (obs && obs->is_dataset()) return "legacy (≤0.6)";
  return "legacy (0.7)";
}

std::size_t H5adReader::n_obs() const {
  if (impl_->zarr) return impl_->zarr->n_obs();
  if (impl_->root.has("obs")) return impl_->frame("obs").rows();
  if (auto x = x_info()) return x->rows;
  return 0;
}

std::size_t H5adReader::n_vars() const {
  if (impl_->zarr) return impl_->zarr->n_vars();
  if (impl_->root.has("var")) return impl_->frame("var").rows();
  if (auto x = x_info()) return x->cols;
  return 0;
}

std::vector<std::string> H5adReader::obs_names() const {
  if (impl_->zarr) return impl_->zarr->obs_names();
  return impl_->frame("obs").index();
}
std::vector<std::string> H5adReader::var_names() const {
  if (impl_->zarr) return impl_->zarr->var_names();
  return impl_->frame("var").index();
}

std::optional<ArrayInfo> H5adReader::x_info() const {
  if (impl_->zarr) return impl_->zarr->x_info();
  auto x = impl_->root.find("X");
  if (!x) return std::nullopt;
  return info_of(*x);
}

DenseMatrix H5adReader::read_x_dense() const {
  if (impl_->zarr) return impl_->zarr->read_x_dense();
  return read_dense(impl_->x());
}

SparseMatrix H5adReader::read_x_sparse() const {
  if (impl_->zarr) return impl_->zarr->read_x_sparse();
  return read_sparse(impl_->x());
}

DenseMatrix H5adReader::read_x_columns(std::span<const std::size_t> cols) const {
  if (impl_->zarr) return impl_->zarr->read_x_columns(cols);
  const Node x_node = impl_->x();
  const Node* x = &x_node;
  const ArrayInfo info = info_of(*x);
  for (std::size_t c : cols) {
    if (c >= info.cols) {
      throw std::invalid_argument("read_x_columns: column " + std::to_string(c) + " outside X's " +
                                  std::to_string(info.cols) + " columns");
    }
  }
  DenseMatrix out;
  out.rows = info.rows;
  out.cols = cols.size();
  out.values.assign(out.rows * out.cols, 0.0f);
  if (info.encoding == "csc_matrix") {
    const SparseMatrix all = read_sparse(*x);  // columns are contiguous, but indptr must be validated whole
    for (std::size_t k = 0; k < cols.size(); ++k) {
      for (auto p = all.indptr[cols[k]]; p < all.indptr[cols[k] + 1]; ++p) {
        out.values[static_cast<std::size_t>(all.indices[static_cast<std::size_t>(p)]) * out.cols + k] +=
            all.data[static_cast<std::size_t>(p)];
      }
    }
    return out;
  }
  // Position of each wanted var in the output (−1 = not wanted), so one pass over a row picks them all.
  std::vector<std::int64_t> slot(info.cols, -1);
  for (std::size_t k = 0; k < cols.size(); ++k) {
    if (slot[cols[k]] < 0) {
      slot[cols[k]] = static_cast<std::int64_t>(k);
    }
  }
  auto scatter = [&](std::size_t row, std::size_t var, float value) {
    for (std::size_t k = static_cast<std::size_t>(slot[var]); k < cols.size(); ++k) {
      if (cols[k] == var) out.values[row * out.cols + k] += value;
    }
  };
  if (info.encoding == "csr_matrix") {
    const Node indptr_node = x->child("indptr");
    const Node indices_node = x->child("indices");
    const Node data_node = x->child("data");
    if (length_of(indptr_node) != info.rows + 1) indptr_node.fail("length does not match X's shape");
    const auto indptr = indptr_node.read_int64s();
    const std::size_t nnz = length_of(data_node);
    if (length_of(indices_node) != nnz) indices_node.fail("length differs from data");
    if (indptr.front() != 0 || static_cast<std::size_t>(indptr.back()) != nnz) {
      indptr_node.fail("does not span [0, " + std::to_string(nnz) + "]");
    }
    for (std::size_t i = 1; i < indptr.size(); ++i) {
      if (indptr[i] < indptr[i - 1]) indptr_node.fail("decreases at " + std::to_string(i));
    }
    const std::size_t block_nnz = std::max<std::size_t>(1, kRowBlockBytes / (sizeof(float) + sizeof(std::int64_t)));
    std::vector<std::int64_t> indices;
    std::vector<float> data;
    std::size_t row = 0;
    while (row < info.rows) {
      std::size_t end = row + 1;
      while (end < info.rows && static_cast<std::size_t>(indptr[end + 1] - indptr[row]) <= block_nnz) ++end;
      const auto first = static_cast<hsize_t>(indptr[row]);
      const auto count = static_cast<hsize_t>(indptr[end] - indptr[row]);
      indices.resize(count);
      data.resize(count);
      indices_node.read_int64_range(first, count, indices.data());
      data_node.read_float_rows(first, count, data.data());
      for (std::size_t r = row; r < end; ++r) {
        for (auto p = indptr[r]; p < indptr[r + 1]; ++p) {
          const auto local = static_cast<std::size_t>(p - indptr[row]);
          const std::int64_t var = indices[local];
          if (var < 0 || static_cast<std::size_t>(var) >= info.cols) {
            indices_node.fail("index " + std::to_string(var) + " outside [0, " + std::to_string(info.cols) + ")");
          }
          if (slot[static_cast<std::size_t>(var)] >= 0) scatter(r, static_cast<std::size_t>(var), data[local]);
        }
      }
      row = end;
    }
    return out;
  }
  if (!x->is_dataset()) x->fail("unsupported X encoding '" + info.encoding + "'");
  const std::size_t block_rows = std::max<std::size_t>(1, kRowBlockBytes / (sizeof(float) * std::max<std::size_t>(info.cols, 1)));
  std::vector<float> block;
  for (std::size_t row = 0; row < info.rows; row += block_rows) {
    const std::size_t n = std::min(block_rows, info.rows - row);
    block.resize(n * info.cols);
    x->read_float_rows(row, n, block.data());
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t k = 0; k < cols.size(); ++k) out.values[(row + r) * out.cols + k] = block[r * info.cols + cols[k]];
    }
  }
  return out;
}

std::vector<std::string> H5adReader::obsm_keys() const {
  if (impl_->zarr) return impl_->zarr->obsm_keys();
  return impl_->keys("obsm");
}

std::optional<ArrayInfo> H5adReader::obsm_info(const std::string& key) const {
  if (impl_->zarr) return impl_->zarr->obsm_info(key);
  if (auto entry = impl_->compound_entry("obsm", key)) return std::move(entry->second);  // ≤0.6: nothing read
  auto e = impl_->element("obsm", key);
  if (!e) return std::nullopt;
  return info_of(*e);
}

ArrayInfo H5adReader::obsm_shape(const std::string& key) const {
  if (impl_->zarr) return impl_->zarr->obsm_shape(key);
  const std::string where = "/obsm/" + key;
  ArrayInfo info;
  if (auto entry = impl_->compound_entry("obsm", key)) {  // ≤0.6: the field's records are the cells
    info = std::move(entry->second);
    const std::size_t cells = impl_->frame_rows("obs");
    if (cells != Impl::kUnknown && info.rows != cells) {
      throw FormatError(impl_->path.string(), where,
                        "has " + std::to_string(info.rows) + " rows, but the file has " + std::to_string(cells) +
                            " cells");
    }
  } else {
    info = impl_->checked_entry("obsm", key).second;
  }
  if (info.cols != 0 && info.rows > std::numeric_limits<std::size_t>::max() / sizeof(float) / info.cols) {
    throw FormatError(impl_->path.string(), where,
                      "shape (" + std::to_string(info.rows) + ", " + std::to_string(info.cols) +
                          ") is too large to hold as float32");
  }
  return info;
}

DenseMatrix H5adReader::read_obsm(const std::string& key) const {
  if (impl_->zarr) return impl_->zarr->read_obsm(key);
  return impl_->read_mapping_entry("obsm", key);
}
void H5adReader::read_obsm_into(const std::string& key, std::span<float> out) const {
  if (impl_->zarr) return impl_->zarr->read_obsm_into(key, out);
  impl_->read_mapping_entry_into("obsm", key, out);
}

std::vector<std::string> H5adReader::obs_columns() const {
  if (impl_->zarr) return impl_->zarr->obs_columns();
  return impl_->frame("obs").columns();
}
Column H5adReader::read_obs(const std::string& column) const {
  if (impl_->zarr) return impl_->zarr->read_obs(column);
  return impl_->frame("obs").column(column);
}
std::vector<std::string> H5adReader::var_columns() const {
  if (impl_->zarr) return impl_->zarr->var_columns();
  return impl_->frame("var").columns();
}
Column H5adReader::read_var(const std::string& column) const {
  if (impl_->zarr) return impl_->zarr->read_var(column);
  return impl_->frame("var").column(column);
}

std::vector<std::string> H5adReader::layer_keys() const {
  if (impl_->zarr) return impl_->zarr->layer_keys();
  return impl_->keys("layers");
}
std::vector<std::string> H5adReader::uns_keys() const {
  if (impl_->zarr) return impl_->zarr->uns_keys();
  return impl_->keys("uns");
}
std::vector<std::string> H5adReader::varm_keys() const {
  if (impl_->zarr) return impl_->zarr->varm_keys();
  return impl_->keys("varm");
}
DenseMatrix H5adReader::read_varm(const std::string& key) const {
  if (impl_->zarr) return impl_->zarr->read_varm(key);
  return impl_->read_mapping_entry("varm", key);
}

std::optional<ArrayInfo> H5adReader::layer_info(const std::string& key) const {
  if (impl_->zarr) return impl_->zarr->layer_info(key);
  auto e = impl_->element("layers", key);
  if (!e) return std::nullopt;
  return info_of(*e);
}

DenseMatrix H5adReader::read_layer(const std::string& key) const {
  if (impl_->zarr) return impl_->zarr->read_layer(key);
  return impl_->read_mapping_entry("layers", key);
}

bool H5adReader::has_raw() const {
  if (impl_->zarr) return impl_->zarr->has_raw();
  auto raw = impl_->root.find("raw");
  return raw && raw->is_group();
}

std::optional<ArrayInfo> H5adReader::raw_x_info() const {
  if (impl_->zarr) return impl_->zarr->raw_x_info();
  auto x = impl_->element("raw", "X");
  if (!x) return std::nullopt;
  return info_of(*x);
}

DenseMatrix H5adReader::read_raw_x_dense() const {
  if (impl_->zarr) return impl_->zarr->read_raw_x_dense();
  auto x = impl_->element("raw", "X");
  if (!x) throw IoError(impl_->path.string() + ": /raw/X: the file has no raw X");
  return read_dense(*x);
}

std::vector<std::string> H5adReader::raw_var_names() const {
  if (impl_->zarr) return impl_->zarr->raw_var_names();
  auto raw = impl_->root.find("raw");
  if (!raw || !raw->is_group()) throw IoError(impl_->path.string() + ": /raw: the file has no raw");
  return Frame(raw->child("var"), std::nullopt).index();
}

UnsValue H5adReader::read_uns(const std::string& key) const {
  if (impl_->zarr) return impl_->zarr->read_uns(key);
  return anndata_decode::read_uns(impl_->root.find("uns"), key, impl_->path.string(), "file");
}

}  // namespace flashot::io
