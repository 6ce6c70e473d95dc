#pragma once
// AnnData stored as zarr (format 2 or 3, a directory or a .zarr.zip): the reading side behind H5adReader, which
// dispatches here on the path's name (anndata.hpp). Each accessor reads only what it returns. docs/io-zarr.md.

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"

namespace flashot::io::zarr {

class Hierarchy;

class AnnData {
 public:
  /// A `.zarr` folder or a `.zarr.zip` archive. Throws IoError / FormatError naming the store.
  explicit AnnData(const std::filesystem::path& path);
  /// A zip archive in memory (the fuzzing entry point; `check_crc` as open_zip_image).
  static std::unique_ptr<AnnData> from_zip_image(std::vector<std::byte> bytes, const std::string& name,
                                                 bool check_crc = true);
  ~AnnData();

  const Hierarchy& hierarchy() const { return *h_; }
  std::string writer_generation() const;
  std::size_t n_obs() const;
  std::size_t n_vars() const;
  std::vector<std::string> obs_names() const;
  std::vector<std::string> var_names() const;
  std::optional<ArrayInfo> x_info() const;
  DenseMatrix read_x_dense() const;
  DenseMatrix read_x_columns(std::span<const std::size_t> cols) const;
  SparseMatrix read_x_sparse() const;
  std::vector<std::string> obsm_keys() const;
  std::optional<ArrayInfo> obsm_info(const std::string& key) const;
  ArrayInfo obsm_shape(const std::string& key) const;
  DenseMatrix read_obsm(const std::string& key) const;
  void read_obsm_into(const std::string& key, std::span<float> out) const;
  std::vector<std::string> obs_columns() const;
  Column read_obs(const std::string& column) const;
  std::vector<std::string> var_columns() const;
  Column read_var(const std::string& column) const;
  std::vector<std::string> layer_keys() const;
  std::vector<std::string> uns_keys() const;
  std::vector<std::string> varm_keys() const;
  DenseMatrix read_varm(const std::string& key) const;
  std::optional<ArrayInfo> layer_info(const std::string& key) const;
  DenseMatrix read_layer(const std::string& key) const;
  bool has_raw() const;
  std::optional<ArrayInfo> raw_x_info() const;
  DenseMatrix read_raw_x_dense() const;
  std::vector<std::string> raw_var_names() const;
  UnsValue read_uns(const std::string& key) const;
  /// obsp keys (for the cross-format copy's check of what it cannot carry).
  std::vector<std::string> keys_of(const std::string& group) const;

 private:
  explicit AnnData(std::unique_ptr<Hierarchy> h);
  struct Impl;
  std::unique_ptr<Hierarchy> h_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashot::io::zarr
