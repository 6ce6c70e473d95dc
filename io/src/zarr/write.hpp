#pragma once
// Writing AnnData as zarr (format 3 by default, 2 on request): a directory store written beside the target and
// renamed into place, or a .zarr.zip written to a partial file and renamed. Private; reached through write_h5ad,
// write_coupling_h5ad and write_h5ad_copy when the output is named .zarr / .zarr.zip (anndata.hpp).

#include <filesystem>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"

namespace flashot::io::zarr {

/// A new store: names, X (at most one of the two), and obs/var/obsm/uns from `rest` (validated by the caller:
/// anndata_write.cpp). `format` is 2 or 3.
void write_new(const std::filesystem::path& path, const std::vector<std::string>& obs_names,
               const std::vector<std::string>& var_names, const DenseMatrix* x_dense, const SparseMatrix* x_sparse,
               const H5adContent& rest, int format);
/// `input` (a zarr store or an .h5ad) with `additions`, written as a zarr store at `output`. A zarr input is copied
/// entry by entry in its own zarr format; an .h5ad input (or a zarr input to an .h5ad output, see
/// write_h5ad_copy) is carried through the reader's model, and fails naming what it cannot carry.
void write_copy(const std::filesystem::path& input, const std::filesystem::path& output, const H5adContent& additions,
                bool in_place);
/// A zarr input enriched into an .h5ad output (the model route).
H5adContent gather_for_conversion(const std::filesystem::path& input, const H5adContent& additions);

}  // namespace flashot::io::zarr
