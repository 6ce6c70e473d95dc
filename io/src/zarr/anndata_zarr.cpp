// Reading AnnData from a zarr store (anndata_zarr.hpp). The element decoding follows io/src/anndata_read.cpp's for
// the anndata ≥0.8 encodings (anndata writes no legacy layouts to zarr that flashot meets), over zarr nodes instead
// of HDF5 ones: the same checks (indptr, indices, shapes against obs × var) and the same messages.

#include "zarr/anndata_zarr.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <sys/mman.h>

#include "anndata_decode.hpp"
#include "flashot/io/errors.hpp"
#include "zarr/node.hpp"

namespace flashot::io::zarr {
namespace {

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

// A dataframe group.
class Frame {
 public:
  explicit Frame(Node node) : node_(std::move(node)) {
    if (!node_.is_group()) node_.fail("a dataframe must be a group");
  }
  const Node& node() const { return node_; }

  std::string index_name() const {
    if (node_.has_attr("_index")) return node_.attr_string("_index");
    if (node_.has("_index")) return "_index";
    if (node_.has("index")) return "index";
    node_.fail("dataframe has no _index attribute");
  }

  std::size_t rows() const {
    return length_of(node_.child(index_name()));
  }

  std::vector<std::string> index() const {
    return read_text(node_.child(index_name()));
  }

  std::vector<std::string> columns() const {
    const std::string index = index_name();
    std::vector<std::string> out;
    if (node_.has_attr("column-order")) return node_.attr_strings("column-order");
    for (auto& c : node_.children()) {
      if (c != index && c != "__categories") out.push_back(std::move(c));
    }
    return out;
  }

  Column column(const std::string& name) const {
    const std::size_t n = rows();
    Column out;
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
};

// Sparse format and shape of a group, from the 0.1.0 attributes; nullopt if not sparse.
std::optional<std::pair<std::string, std::vector<std::int64_t>>> sparse_layout(const Node& group) {
  const std::string enc = encoding_of(group);
  if (enc == "csr_matrix" || enc == "csc_matrix") {
    auto shape = group.attr_ints("shape");
    if (shape.size() != 2 || shape[0] < 0 || shape[1] < 0) group.fail("shape attribute must hold two sizes");
    return std::make_pair(enc.substr(0, 3), shape);
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
      Frame frame(node);
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
    Frame frame(node);
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

struct AnnData::Impl {
  const Hierarchy* h = nullptr;
  Node root;
  std::string path;

  explicit Impl(const Hierarchy* hierarchy) : h(hierarchy) {
    auto m = h->meta("");
    if (!m || !m->group) throw FormatError(h->store().name(), "/", "the store's root is not a group");
    root = Node(h, "", std::move(*m));
    path = h->store().name();
    if (!root.has("obs") && !root.has("X") && !root.has("var") &&
        root.attr_string_opt("encoding-type").value_or("") != "anndata") {
      throw FormatError(path, "/", "not an AnnData store (no obs, var or X, and no encoding-type=anndata)");
    }
  }

  Node x() const {
    auto node = root.find("X");
    if (!node) throw IoError(path + ": /X: the store has no X");
    const ArrayInfo info = info_of(*node);
    const std::size_t rows = frame_rows("obs"), cols = frame_rows("var");
    if ((rows != kUnknown && info.rows != rows) || (cols != kUnknown && info.cols != cols)) {
      node->fail("shape (" + std::to_string(info.rows) + ", " + std::to_string(info.cols) +
                 ") does not match obs × var (" + std::to_string(rows) + ", " + std::to_string(cols) + ")");
    }
    return std::move(*node);
  }

  Frame frame(const std::string& name) const { return Frame(root.child(name)); }

  std::optional<Node> element(const std::string& group, const std::string& key) const {
    auto g = root.find(group);
    if (!g || !g->is_group()) return std::nullopt;
    return g->find(key);
  }

  std::vector<std::string> keys(const std::string& group) const {
    auto g = root.find(group);
    if (!g || !g->is_group()) return {};
    return g->children();
  }

  std::pair<Node, ArrayInfo> checked_entry(const std::string& group, const std::string& key) const {
    auto e = element(group, key);
    if (!e) {
      throw IoError(path + ": /" + group + ": no entry '" + key + "' (keys: " + list_keys(keys(group)) + ")");
    }
    ArrayInfo info = info_of(*e);
    const bool by_var = group == "varm";
    const std::size_t expected = by_var ? frame_rows("var") : frame_rows("obs");
    if (expected != kUnknown && info.rows != expected) {
      e->fail("has " + std::to_string(info.rows) + " rows, but the store has " + std::to_string(expected) +
              (by_var ? " vars" : " cells"));
    }
    return {std::move(*e), std::move(info)};
  }

  DenseMatrix read_mapping_entry(const std::string& group, const std::string& key) const {
    return read_dense(checked_entry(group, key).first);
  }

  void read_mapping_entry_into(const std::string& group, const std::string& key, std::span<float> out) const {
    auto [e, info] = checked_entry(group, key);
    const bool fits = info.rows == 0 || info.cols <= std::numeric_limits<std::size_t>::max() / info.rows;
    if (!fits || out.size() != info.rows * info.cols) {
      throw std::invalid_argument(group + "['" + key + "']: out must hold rows·cols = " + std::to_string(info.rows) +
                                  "·" + std::to_string(info.cols) + " values (got " + std::to_string(out.size()) + ")");
    }
    if (out.size_bytes() >= (std::size_t{4} << 20)) {
      ::madvise(reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(out.data()) & ~std::uintptr_t{4095}),
                out.size_bytes(), MADV_HUGEPAGE);
    }
    if (e.is_dataset()) {
      if (!is_numeric(e.type_class())) e.fail("expected a numeric array, found " + info.dtype);
      e.read_floats_into(out);
      return;
    }
    const DenseMatrix m = read_dense(e);
    std::copy(m.values.begin(), m.values.end(), out.begin());
  }

  static constexpr std::size_t kUnknown = static_cast<std::size_t>(-1);
  std::size_t frame_rows(const std::string& name) const { return root.has(name) ? frame(name).rows() : kUnknown; }
};

std::unique_ptr<Store> open_store(const std::filesystem::path& path) {
  return is_zip_name(path) ? open_zip_store(path) : open_directory_store(path);
}

AnnData::AnnData(const std::filesystem::path& path) : AnnData(std::make_unique<Hierarchy>(open_store(path))) {}

AnnData::AnnData(std::unique_ptr<Hierarchy> h) : h_(std::move(h)), impl_(std::make_unique<Impl>(h_.get())) {}

std::unique_ptr<AnnData> AnnData::from_zip_image(std::vector<std::byte> bytes, const std::string& name, bool check_crc) {
  return std::unique_ptr<AnnData>(
      new AnnData(std::make_unique<Hierarchy>(open_zip_image(std::move(bytes), name, check_crc))));
}

AnnData::~AnnData() = default;

std::string AnnData::writer_generation() const {
  const std::string version = impl_->root.attr_string_opt("encoding-version").value_or("?");
  return version + " (anndata ≥0.8, zarr format " + std::to_string(h_->format()) + ")";
}

std::size_t AnnData::n_obs() const {
  if (impl_->root.has("obs")) return impl_->frame("obs").rows();
  if (auto x = x_info()) return x->rows;
  return 0;
}

std::size_t AnnData::n_vars() const {
  if (impl_->root.has("var")) return impl_->frame("var").rows();
  if (auto x = x_info()) return x->cols;
  return 0;
}

std::vector<std::string> AnnData::obs_names() const { return impl_->frame("obs").index(); }
std::vector<std::string> AnnData::var_names() const { return impl_->frame("var").index(); }

std::optional<ArrayInfo> AnnData::x_info() const {
  auto x = impl_->root.find("X");
  if (!x) return std::nullopt;
  return info_of(*x);
}

DenseMatrix AnnData::read_x_dense() const { return read_dense(impl_->x()); }
SparseMatrix AnnData::read_x_sparse() const { return read_sparse(impl_->x()); }

DenseMatrix AnnData::read_x_columns(std::span<const std::size_t> cols) const {
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
      const auto first = static_cast<std::uint64_t>(indptr[row]);
      const auto count = static_cast<std::uint64_t>(indptr[end] - indptr[row]);
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


std::vector<std::string> AnnData::obsm_keys() const { return impl_->keys("obsm"); }

std::optional<ArrayInfo> AnnData::obsm_info(const std::string& key) const {
  auto e = impl_->element("obsm", key);
  if (!e) return std::nullopt;
  return info_of(*e);
}

ArrayInfo AnnData::obsm_shape(const std::string& key) const {
  ArrayInfo info = impl_->checked_entry("obsm", key).second;
  if (info.cols != 0 && info.rows > std::numeric_limits<std::size_t>::max() / sizeof(float) / info.cols) {
    throw FormatError(impl_->path, "/obsm/" + key,
                      "shape (" + std::to_string(info.rows) + ", " + std::to_string(info.cols) +
                          ") is too large to hold as float32");
  }
  return info;
}

DenseMatrix AnnData::read_obsm(const std::string& key) const { return impl_->read_mapping_entry("obsm", key); }
void AnnData::read_obsm_into(const std::string& key, std::span<float> out) const {
  impl_->read_mapping_entry_into("obsm", key, out);
}

std::vector<std::string> AnnData::obs_columns() const { return impl_->frame("obs").columns(); }
Column AnnData::read_obs(const std::string& column) const { return impl_->frame("obs").column(column); }
std::vector<std::string> AnnData::var_columns() const { return impl_->frame("var").columns(); }
Column AnnData::read_var(const std::string& column) const { return impl_->frame("var").column(column); }
std::vector<std::string> AnnData::layer_keys() const { return impl_->keys("layers"); }
std::vector<std::string> AnnData::uns_keys() const { return impl_->keys("uns"); }
std::vector<std::string> AnnData::varm_keys() const { return impl_->keys("varm"); }
std::vector<std::string> AnnData::keys_of(const std::string& group) const { return impl_->keys(group); }
DenseMatrix AnnData::read_varm(const std::string& key) const { return impl_->read_mapping_entry("varm", key); }

std::optional<ArrayInfo> AnnData::layer_info(const std::string& key) const {
  auto e = impl_->element("layers", key);
  if (!e) return std::nullopt;
  return info_of(*e);
}

DenseMatrix AnnData::read_layer(const std::string& key) const { return impl_->read_mapping_entry("layers", key); }

bool AnnData::has_raw() const {
  auto raw = impl_->root.find("raw");
  return raw && raw->is_group() && raw->has("X");
}

std::optional<ArrayInfo> AnnData::raw_x_info() const {
  auto x = impl_->element("raw", "X");
  if (!x) return std::nullopt;
  return info_of(*x);
}

DenseMatrix AnnData::read_raw_x_dense() const {
  auto x = impl_->element("raw", "X");
  if (!x) throw IoError(impl_->path + ": /raw/X: the store has no raw X");
  return read_dense(*x);
}

std::vector<std::string> AnnData::raw_var_names() const {
  auto raw = impl_->root.find("raw");
  if (!raw || !raw->is_group()) throw IoError(impl_->path + ": /raw: the store has no raw");
  return Frame(raw->child("var")).index();
}

UnsValue AnnData::read_uns(const std::string& key) const {
  return anndata_decode::read_uns(impl_->root.find("uns"), key, impl_->path, "store");
}

}  // namespace flashot::io::zarr
