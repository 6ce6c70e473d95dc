#pragma once
// The element decoding that the .h5ad reader (anndata_read.cpp) and the zarr reader (zarr/anndata_zarr.cpp) share:
// the anndata ≥0.8 encodings' strings, lengths, categorical codes and sparse matrices, over either store's node
// (h5::Node or zarr::Node: the same accessors, each with its own TypeClass enum of the same names). The checks and
// their messages are the same for both stores.

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"
#include "flashot/io/errors.hpp"

namespace flashot::io::anndata_decode {

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

template <typename Node>
std::string encoding_of(const Node& node) { return node.attr_string_opt("encoding-type").value_or(""); }

template <typename TypeClass>
bool is_numeric(TypeClass c) { return c == TypeClass::kInteger || c == TypeClass::kUnsigned || c == TypeClass::kFloat; }

// Values of a string-like element as text: string datasets, numeric datasets (rendered), boolean enums, and
// nullable-string-array groups (missing entries become "").
template <typename Node>
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

template <typename Node>
std::size_t length_of(const Node& node) {
  if (node.is_group()) {
    if (node.has("values")) return length_of(node.child("values"));
    if (node.has("codes")) return length_of(node.child("codes"));
    node.fail("cannot tell the length of this group");
  }
  const auto dims = node.shape();
  return dims.empty() ? 1 : static_cast<std::size_t>(dims[0]);
}

template <typename Node>
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

template <typename Node>
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

// The uns value at `key` ('/'-separated), walked down from `node` (the root's uns, if any); `path` and `noun`
// ("file" or "store") name the input in errors.
template <typename Node>
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
