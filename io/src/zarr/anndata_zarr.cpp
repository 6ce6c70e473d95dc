// Reading AnnData from a zarr store (anndata_zarr.hpp): the anndata ≥0.8 encodings (anndata writes no legacy
// layouts to zarr that flashot meets), decoded by the same code as the .h5ad reader's (anndata_decode.hpp,
// anndata_tree.hpp) over zarr nodes instead of HDF5 ones: the same checks (indptr, indices, shapes against
// obs × var) and the same messages, naming the store.

#include "zarr/anndata_zarr.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <stdexcept>

#include "anndata_decode.hpp"
#include "anndata_tree.hpp"
#include "flashot/io/errors.hpp"
#include "zarr/node.hpp"

namespace flashot::io::zarr {
namespace {

using Tree = anndata_decode::Tree<Node>;

static_assert(anndata_decode::ElementNode<Node>, "zarr::Node must offer the accessors the AnnData decoding uses");
static_assert(!anndata_decode::LegacyLayouts<Node>, "anndata's ≤0.7 layouts are not read from zarr");

// Huge pages for an output of 4 MiB or more before the decoded chunks are written into it.
void advise_huge_pages(std::span<float> out) {
  if (out.size_bytes() >= (std::size_t{4} << 20)) {
    ::madvise(reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(out.data()) & ~std::uintptr_t{4095}),
              out.size_bytes(), MADV_HUGEPAGE);
  }
}

}  // namespace

struct AnnData::Impl {
  const Hierarchy* h = nullptr;
  Tree tree;

  explicit Impl(const Hierarchy* hierarchy) : h(hierarchy) {
    auto m = h->meta("");
    if (!m || !m->group) throw FormatError(h->store().name(), "/", "the store's root is not a group");
    Node root(h, "", std::move(*m));
    const std::string path = h->store().name();
    if (!root.has("obs") && !root.has("X") && !root.has("var") &&
        root.attr_string_opt("encoding-type").value_or("") != "anndata") {
      throw FormatError(path, "/", "not an AnnData store (no obs, var or X, and no encoding-type=anndata)");
    }
    tree = Tree(std::move(root), path, "store");
  }
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
  const std::string version = impl_->tree.root().attr_string_opt("encoding-version").value_or("?");
  return version + " (anndata ≥0.8, zarr format " + std::to_string(h_->format()) + ")";
}

std::size_t AnnData::n_obs() const { return impl_->tree.n_obs(); }
std::size_t AnnData::n_vars() const { return impl_->tree.n_vars(); }
std::vector<std::string> AnnData::obs_names() const { return impl_->tree.obs_names(); }
std::vector<std::string> AnnData::var_names() const { return impl_->tree.var_names(); }
std::optional<ArrayInfo> AnnData::x_info() const { return impl_->tree.x_info(); }
DenseMatrix AnnData::read_x_dense() const { return impl_->tree.read_x_dense(); }
SparseMatrix AnnData::read_x_sparse() const { return impl_->tree.read_x_sparse(); }
DenseMatrix AnnData::read_x_columns(std::span<const std::size_t> cols) const {
  return impl_->tree.read_x_columns(cols);
}

std::vector<std::string> AnnData::obsm_keys() const { return impl_->tree.keys("obsm"); }
std::optional<ArrayInfo> AnnData::obsm_info(const std::string& key) const {
  return impl_->tree.element_info("obsm", key);
}
ArrayInfo AnnData::obsm_shape(const std::string& key) const {
  return impl_->tree.fits_float32("/obsm/" + key, impl_->tree.checked_entry("obsm", key).second);
}
DenseMatrix AnnData::read_obsm(const std::string& key) const { return impl_->tree.read_entry("obsm", key); }
void AnnData::read_obsm_into(const std::string& key, std::span<float> out) const {
  impl_->tree.read_entry_into("obsm", key, out, advise_huge_pages);
}

std::vector<std::string> AnnData::obs_columns() const { return impl_->tree.obs_columns(); }
Column AnnData::read_obs(const std::string& column) const { return impl_->tree.read_obs(column); }
std::vector<std::string> AnnData::var_columns() const { return impl_->tree.var_columns(); }
Column AnnData::read_var(const std::string& column) const { return impl_->tree.read_var(column); }
std::vector<std::string> AnnData::layer_keys() const { return impl_->tree.keys("layers"); }
std::vector<std::string> AnnData::uns_keys() const { return impl_->tree.keys("uns"); }
std::vector<std::string> AnnData::varm_keys() const { return impl_->tree.keys("varm"); }
std::vector<std::string> AnnData::keys_of(const std::string& group) const { return impl_->tree.keys(group); }
DenseMatrix AnnData::read_varm(const std::string& key) const { return impl_->tree.read_entry("varm", key); }

std::optional<ArrayInfo> AnnData::layer_info(const std::string& key) const {
  return impl_->tree.element_info("layers", key);
}
DenseMatrix AnnData::read_layer(const std::string& key) const { return impl_->tree.read_entry("layers", key); }

bool AnnData::has_raw() const {
  auto raw = impl_->tree.root().find("raw");
  return raw && raw->is_group() && raw->has("X");
}
std::optional<ArrayInfo> AnnData::raw_x_info() const { return impl_->tree.element_info("raw", "X"); }
DenseMatrix AnnData::read_raw_x_dense() const { return impl_->tree.read_raw_x_dense(); }
std::vector<std::string> AnnData::raw_var_names() const { return impl_->tree.raw_var_names(); }

UnsValue AnnData::read_uns(const std::string& key) const { return impl_->tree.read_uns(key); }

}  // namespace flashot::io::zarr
