#pragma once
// A zarr hierarchy (format 2 or 3, consolidated or not) and its nodes, with the accessors the AnnData decoder
// needs (the same names as the HDF5 layer's h5::Node). Private to flashot::io (docs/io-zarr.md).

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "zarr/array.hpp"
#include "zarr/store.hpp"

namespace flashot::io::zarr {

/// Metadata of one node.
struct NodeMeta {
  bool group = true;
  nlohmann::json meta;   ///< zarr.json (v3) or .zarray/.zgroup (v2)
  nlohmann::json attrs;  ///< attributes (an object)
};

class Hierarchy {
 public:
  /// Opens the store's root: v3 when it has zarr.json, v2 when .zgroup; consolidated metadata is used where present.
  /// A zip whose entries all sit in one folder holding the root (`zip -r x.zarr.zip x.zarr`) is read from there.
  explicit Hierarchy(std::unique_ptr<Store> store);
  const Store& store() const { return *store_; }
  int format() const { return format_; }
  bool consolidated() const { return consolidated_; }
  const std::string& prefix() const { return prefix_; }  ///< "" or "x.zarr/" inside a zip
  /// Metadata of `path` ("" = root, "obs/cat"), nullopt when there is no node.
  std::optional<NodeMeta> meta(const std::string& path) const;
  std::vector<std::string> children(const std::string& path) const;

 private:
  std::unique_ptr<Store> store_;
  int format_ = 3;
  bool consolidated_ = false;
  std::string prefix_;
  std::map<std::string, NodeMeta> nodes_;  // consolidated
};

enum class TypeClass { kInteger, kUnsigned, kFloat, kString, kEnum, kOther };

class Node {
 public:
  Node() = default;
  Node(const Hierarchy* h, std::string path, NodeMeta meta);

  bool is_group() const { return meta_.group; }
  bool is_dataset() const { return !meta_.group; }
  std::string object_path() const { return "/" + path_; }
  const std::string& file_path() const { return h_->store().name(); }

  bool has(const std::string& name) const;
  Node child(const std::string& name) const;
  std::optional<Node> find(const std::string& name) const;
  std::vector<std::string> children() const;

  bool has_attr(const std::string& name) const;
  const nlohmann::json& attr(const std::string& name) const;
  std::string attr_string(const std::string& name) const;
  std::optional<std::string> attr_string_opt(const std::string& name) const;
  std::vector<std::string> attr_strings(const std::string& name) const;
  std::vector<std::int64_t> attr_ints(const std::string& name) const;
  bool attr_bool(const std::string& name) const;

  std::vector<std::uint64_t> shape() const;
  TypeClass type_class() const;  ///< kEnum for bool arrays (as h5py's boolean enum)
  std::string dtype_name() const;

  std::vector<double> read_doubles() const;
  std::vector<float> read_floats() const;
  std::vector<std::int64_t> read_int64s() const;
  void read_floats_into(std::span<float> out) const;
  void read_float_rows(std::uint64_t row0, std::uint64_t count, float* out) const;
  void read_int64_range(std::uint64_t first, std::uint64_t count, std::int64_t* out) const;
  std::vector<std::string> read_strings() const;
  std::vector<std::uint8_t> read_flags() const;

  [[noreturn]] void fail(const std::string& problem) const;
  const Array& array() const;

 private:
  template <class T>
  void read_as(std::uint64_t row0, std::uint64_t rows, T* out) const;

  const Hierarchy* h_ = nullptr;
  std::string path_;
  NodeMeta meta_;
  mutable std::shared_ptr<Array> array_;
};

}  // namespace flashot::io::zarr
