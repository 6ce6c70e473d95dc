#pragma once
// An AnnData tree seen from its root node, written once for both readers: H5adReader (anndata_read.cpp, over
// h5::Node) and zarr::AnnData (zarr/anndata_zarr.cpp, over zarr::Node) hold one and answer through it. It puts the
// element decoding of anndata_decode.hpp together: X with its shape checked against obs × var before anything is
// read, X's columns read in row blocks, obsm/varm/layers entries checked against the cells or genes, raw, uns.
// What only one format has stays with its reader: the .h5ad reader's ≤0.6 compound mappings (obsm as one record
// dataset), the zarr reader's huge-page advice for large outputs.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "anndata_decode.hpp"
#include "flashot/io/anndata.hpp"
#include "flashot/io/errors.hpp"

namespace flashot::io::anndata_decode {

// Rows of X read at a time by read_x_columns, so a large dense X never has to fit in memory at once.
inline constexpr std::size_t kRowBlockBytes = std::size_t{64} << 20;

template <ElementNode Node>
class Tree {
 public:
  // A frame's rows when the tree has no such frame.
  static constexpr std::size_t kUnknown = static_cast<std::size_t>(-1);

  Tree() = default;
  // `path` names the input in messages; `noun` ("file" or "store") says what the input is.
  Tree(Node root, std::string path, std::string noun)
      : root_(std::move(root)), path_(std::move(path)), noun_(std::move(noun)) {}

  const Node& root() const { return root_; }
  const std::string& path() const { return path_; }

  // obs, var or raw/var; a LegacyLayouts frame sees the root's uns (≤0.6 categories live there).
  Frame<Node> frame(const std::string& name) const {
    if constexpr (LegacyLayouts<Node>) {
      return Frame<Node>(root_.child(name), root_.find("uns"));
    } else {
      return Frame<Node>(root_.child(name));
    }
  }
  std::size_t frame_rows(const std::string& name) const { return root_.has(name) ? frame(name).rows() : kUnknown; }

  std::size_t n_obs() const {
    if (root_.has("obs")) return frame("obs").rows();
    if (auto x = x_info()) return x->rows;
    return 0;
  }
  std::size_t n_vars() const {
    if (root_.has("var")) return frame("var").rows();
    if (auto x = x_info()) return x->cols;
    return 0;
  }
  std::vector<std::string> obs_names() const { return frame("obs").index(); }
  std::vector<std::string> var_names() const { return frame("var").index(); }
  std::vector<std::string> obs_columns() const { return frame("obs").columns(); }
  std::vector<std::string> var_columns() const { return frame("var").columns(); }
  Column read_obs(const std::string& column) const { return frame("obs").column(column); }
  Column read_var(const std::string& column) const { return frame("var").column(column); }

  std::optional<ArrayInfo> x_info() const {
    auto x = root_.find("X");
    if (!x) return std::nullopt;
    return info_of(*x);
  }

  // X, with its shape checked against obs and var before anything is read.
  Node x() const {
    auto node = root_.find("X");
    if (!node) throw IoError(path_ + ": /X: the " + noun_ + " has no X");
    const ArrayInfo info = info_of(*node);
    const std::size_t rows = frame_rows("obs"), cols = frame_rows("var");
    if ((rows != kUnknown && info.rows != rows) || (cols != kUnknown && info.cols != cols)) {
      node->fail("shape (" + std::to_string(info.rows) + ", " + std::to_string(info.cols) +
                 ") does not match obs × var (" + std::to_string(rows) + ", " + std::to_string(cols) + ")");
    }
    return std::move(*node);
  }
  DenseMatrix read_x_dense() const { return read_dense(x()); }
  SparseMatrix read_x_sparse() const { return read_sparse(x()); }

  // The columns `cols` of X (any order, repeats allowed) as a dense n_obs × cols.size() matrix. CSC X is read
  // whole (its indptr must be validated whole); CSR and dense X are read in blocks of rows of at most
  // kRowBlockBytes, so only the output has to fit in memory.
  DenseMatrix read_x_columns(std::span<const std::size_t> cols) const {
    const Node x_node = x();
    const ArrayInfo info = info_of(x_node);
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
      const SparseMatrix all = read_sparse(x_node);  // columns are contiguous, but indptr must be validated whole
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
      const Node indptr_node = x_node.child("indptr");
      const Node indices_node = x_node.child("indices");
      const Node data_node = x_node.child("data");
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
    if (!x_node.is_dataset()) x_node.fail("unsupported X encoding '" + info.encoding + "'");
    const std::size_t block_rows =
        std::max<std::size_t>(1, kRowBlockBytes / (sizeof(float) * std::max<std::size_t>(info.cols, 1)));
    std::vector<float> block;
    for (std::size_t row = 0; row < info.rows; row += block_rows) {
      const std::size_t n = std::min(block_rows, info.rows - row);
      block.resize(n * info.cols);
      x_node.read_float_rows(row, n, block.data());
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t k = 0; k < cols.size(); ++k) {
          out.values[(row + r) * out.cols + k] = block[r * info.cols + cols[k]];
        }
      }
    }
    return out;
  }

  // The element `key` of the group `group` (obsm, layers, raw, …); nullopt when either is missing.
  std::optional<Node> element(const std::string& group, const std::string& key) const {
    auto g = root_.find(group);
    if (!g || !g->is_group()) return std::nullopt;
    return g->find(key);
  }
  std::optional<ArrayInfo> element_info(const std::string& group, const std::string& key) const {
    auto e = element(group, key);
    if (!e) return std::nullopt;
    return info_of(*e);
  }

  // The keys of the group `group`; of a ≤0.6 compound mapping (obsm as one record dataset), its fields.
  std::vector<std::string> keys(const std::string& group) const {
    auto g = root_.find(group);
    if (!g) return {};
    if (g->is_dataset()) {
      if constexpr (LegacyLayouts<Node>) {
        using TypeClass = decltype(g->type_class());
        if (g->type_class() == TypeClass::kCompound) return g->compound_fields();  // ≤0.6 obsm
      }
      return {};
    }
    return g->children();
  }

  // The obsm/varm/layers element `key` and its shape. obsm/layers rows are cells, varm rows are genes: a shape
  // that disagrees is a broken input, caught before anything is read.
  std::pair<Node, ArrayInfo> checked_entry(const std::string& group, const std::string& key) const {
    auto e = element(group, key);
    if (!e) {
      throw IoError(path_ + ": /" + group + ": no entry '" + key + "' (keys: " + list_keys(keys(group)) + ")");
    }
    ArrayInfo info = info_of(*e);
    const bool by_var = group == "varm";
    const std::size_t expected = by_var ? frame_rows("var") : frame_rows("obs");
    if (expected != kUnknown && info.rows != expected) {
      e->fail("has " + std::to_string(info.rows) + " rows, but the " + noun_ + " has " + std::to_string(expected) +
              (by_var ? " vars" : " cells"));
    }
    return {std::move(*e), std::move(info)};
  }

  // `info` of the element at `where`, when its rows × cols float32 values can be held at all.
  ArrayInfo fits_float32(const std::string& where, ArrayInfo info) const {
    if (info.cols != 0 && info.rows > std::numeric_limits<std::size_t>::max() / sizeof(float) / info.cols) {
      throw FormatError(path_, where,
                        "shape (" + std::to_string(info.rows) + ", " + std::to_string(info.cols) +
                            ") is too large to hold as float32");
    }
    return info;
  }

  DenseMatrix read_entry(const std::string& group, const std::string& key) const {
    return read_dense(checked_entry(group, key).first);
  }

  // Throws std::invalid_argument unless `out` holds exactly rows·cols values of group[key].
  static void check_out_size(const std::string& group, const std::string& key, std::size_t rows, std::size_t cols,
                             std::span<const float> out) {
    const bool fits = rows == 0 || cols <= std::numeric_limits<std::size_t>::max() / rows;
    if (!fits || out.size() != rows * cols) {
      throw std::invalid_argument(group + "['" + key + "']: out must hold rows·cols = " + std::to_string(rows) +
                                  "·" + std::to_string(cols) + " values (got " + std::to_string(out.size()) + ")");
    }
  }

  // As read_entry, into caller memory, with `out`'s size checked against the entry's shape before anything is
  // read; `prepare` (if any) is then given `out`. A dense array goes straight from the store into `out`; sparse and
  // dataframe entries are assembled first and copied.
  void read_entry_into(const std::string& group, const std::string& key, std::span<float> out,
                       void (*prepare)(std::span<float>) = nullptr) const {
    auto [e, info] = checked_entry(group, key);
    check_out_size(group, key, info.rows, info.cols, out);
    if (prepare != nullptr) prepare(out);
    if (e.is_dataset()) {
      if (!is_numeric(e.type_class())) e.fail("expected a numeric array, found " + info.dtype);
      e.read_floats_into(out);
      return;
    }
    const DenseMatrix m = read_dense(e);
    check_out_size(group, key, m.rows, m.cols, out);
    std::copy(m.values.begin(), m.values.end(), out.begin());
  }

  DenseMatrix read_raw_x_dense() const {
    auto x = element("raw", "X");
    if (!x) throw IoError(path_ + ": /raw/X: the " + noun_ + " has no raw X");
    return read_dense(*x);
  }

  std::vector<std::string> raw_var_names() const {
    auto raw = root_.find("raw");
    if (!raw || !raw->is_group()) throw IoError(path_ + ": /raw: the " + noun_ + " has no raw");
    return Frame<Node>(raw->child("var")).index();
  }

  UnsValue read_uns(const std::string& key) const { return anndata_decode::read_uns(root_.find("uns"), key, path_, noun_); }

 private:
  Node root_;
  std::string path_;
  std::string noun_;
};

}  // namespace flashot::io::anndata_decode
