// Reading AnnData .h5ad files of every writer generation. Each element is dispatched on its `encoding-type`
// attribute; elements without one are legacy layouts (anndata ≤0.7), recognised by their shape:
//   ≤0.6  obs/var are compound datasets, categories live in uns/<column>_categories, obsm is a compound dataset
//         of array fields, sparse X is a group with `h5sparse_format`/`h5sparse_shape` attributes;
//   0.7   obs/var are groups; a categorical is an integer dataset whose `categories` attribute is an object
//         reference (into obs/__categories); files are often LZF-compressed.
// Nothing is read before it is asked for: opening a file reads attributes and shapes only. The decoding itself is
// shared with the zarr reader (anndata_decode.hpp, anndata_tree.hpp); what is here opens the file and reads the
// ≤0.6 compound mappings (obsm/varm as one record dataset), which only HDF5 holds.

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <utility>

#include "flashot/io/anndata.hpp"
#include "anndata_decode.hpp"
#include "anndata_tree.hpp"
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
using Tree = anndata_decode::Tree<Node>;

static_assert(anndata_decode::LegacyLayouts<Node>, "h5::Node must keep the accessors of the anndata ≤0.7 layouts");

// How long the isolated metadata walk may take before the file is called corrupt (h5/isolated_walk.hpp): a real
// file's metadata walks in milliseconds (pbmc68k_reduced: a few ms).
constexpr std::chrono::seconds kMetadataWalkLimit{60};

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
  Tree tree;  // the file's AnnData tree (anndata_tree.hpp), from open_root

  Impl() = default;
  Impl(const Impl&) = delete;

  void open_root() {
    file.id = file_id.get();
    h5::Id group(H5Gopen2(file_id.get(), "/", H5P_DEFAULT));
    if (!group.valid()) throw FormatError(file.path, "/", "cannot open the root group (" + h5::take_error_stack() + ")");
    Node root(&file, std::move(group), "/");
    if (!root.has("obs") && !root.has("X") && !root.has("var") &&
        root.attr_string_opt("encoding-type").value_or("") != "anndata") {
      throw FormatError(file.path, "/", "not an AnnData file (no obs, var or X, and no encoding-type=anndata)");
    }
    tree = Tree(std::move(root), path.string(), "file");
  }

  const Node& root() const { return tree.root(); }

  // An anndata ≤0.6 mapping: one compound dataset whose fields are the entries.
  std::optional<Node> compound_mapping(const std::string& group) const {
    auto g = root().find(group);
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

  // An obsm/varm/layers entry: a ≤0.6 compound field, or an element of the tree.
  DenseMatrix read_mapping_entry(const std::string& group, const std::string& key) const {
    if (auto entry = compound_entry(group, key)) {
      DenseMatrix m;
      m.rows = entry->second.rows;
      m.cols = entry->second.cols;
      m.values.resize(m.rows * m.cols);  // compound_array_field bounded rows·cols by the bytes stored
      entry->first.read_compound_array_field_into(key, m.values);
      return m;
    }
    return tree.read_entry(group, key);
  }

  // As read_mapping_entry, into caller memory, with `out`'s size checked against the entry's shape before anything
  // is read. A dense dataset and a ≤0.6 compound field go straight from HDF5 into `out`; sparse and dataframe
  // entries are assembled first and copied.
  void read_mapping_entry_into(const std::string& group, const std::string& key, std::span<float> out) const {
    if (auto entry = compound_entry(group, key)) {
      Tree::check_out_size(group, key, entry->second.rows, entry->second.cols, out);
      entry->first.read_compound_array_field_into(key, out);
      return;
    }
    tree.read_entry_into(group, key, out);
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
  auto walk = h5::isolated_walk(impl_->file, kMetadataWalkLimit);
  if (walk.problem) throw FormatError(path.string(), "", *walk.problem);
  impl_->file.attributes = std::move(walk.attributes);
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
  auto walk = h5::isolated_walk(impl.file, kMetadataWalkLimit);
  if (walk.problem) throw FormatError(name, "", *walk.problem);
  impl.file.attributes = std::move(walk.attributes);
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
  const Node& root = impl_->root();
  if (root.attr_string_opt("encoding-type").value_or("") == "anndata") {
    return root.attr_string_opt("encoding-version").value_or("?") + " (anndata ≥0.8)";
  }
  auto obs = root.find("obs");
  if (obs && obs->is_dataset()) return "legacy (≤0.6)";
  return "legacy (0.7)";
}

std::size_t H5adReader::n_obs() const {
  if (impl_->zarr) return impl_->zarr->n_obs();
  return impl_->tree.n_obs();
}

std::size_t H5adReader::n_vars() const {
  if (impl_->zarr) return impl_->zarr->n_vars();
  return impl_->tree.n_vars();
}

std::vector<std::string> H5adReader::obs_names() const {
  if (impl_->zarr) return impl_->zarr->obs_names();
  return impl_->tree.obs_names();
}
std::vector<std::string> H5adReader::var_names() const {
  if (impl_->zarr) return impl_->zarr->var_names();
  return impl_->tree.var_names();
}

std::optional<ArrayInfo> H5adReader::x_info() const {
  if (impl_->zarr) return impl_->zarr->x_info();
  return impl_->tree.x_info();
}

DenseMatrix H5adReader::read_x_dense() const {
  if (impl_->zarr) return impl_->zarr->read_x_dense();
  return impl_->tree.read_x_dense();
}

SparseMatrix H5adReader::read_x_sparse() const {
  if (impl_->zarr) return impl_->zarr->read_x_sparse();
  return impl_->tree.read_x_sparse();
}

DenseMatrix H5adReader::read_x_columns(std::span<const std::size_t> cols) const {
  if (impl_->zarr) return impl_->zarr->read_x_columns(cols);
  return impl_->tree.read_x_columns(cols);
}

std::vector<std::string> H5adReader::obsm_keys() const {
  if (impl_->zarr) return impl_->zarr->obsm_keys();
  return impl_->tree.keys("obsm");
}

std::optional<ArrayInfo> H5adReader::obsm_info(const std::string& key) const {
  if (impl_->zarr) return impl_->zarr->obsm_info(key);
  if (auto entry = impl_->compound_entry("obsm", key)) return std::move(entry->second);  // ≤0.6: nothing read
  return impl_->tree.element_info("obsm", key);
}

ArrayInfo H5adReader::obsm_shape(const std::string& key) const {
  if (impl_->zarr) return impl_->zarr->obsm_shape(key);
  const std::string where = "/obsm/" + key;
  ArrayInfo info;
  if (auto entry = impl_->compound_entry("obsm", key)) {  // ≤0.6: the field's records are the cells
    info = std::move(entry->second);
    const std::size_t cells = impl_->tree.frame_rows("obs");
    if (cells != Tree::kUnknown && info.rows != cells) {
      throw FormatError(impl_->path.string(), where,
                        "has " + std::to_string(info.rows) + " rows, but the file has " + std::to_string(cells) +
                            " cells");
    }
  } else {
    info = impl_->tree.checked_entry("obsm", key).second;
  }
  return impl_->tree.fits_float32(where, std::move(info));
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
  return impl_->tree.obs_columns();
}
Column H5adReader::read_obs(const std::string& column) const {
  if (impl_->zarr) return impl_->zarr->read_obs(column);
  return impl_->tree.read_obs(column);
}
std::vector<std::string> H5adReader::var_columns() const {
  if (impl_->zarr) return impl_->zarr->var_columns();
  return impl_->tree.var_columns();
}
Column H5adReader::read_var(const std::string& column) const {
  if (impl_->zarr) return impl_->zarr->read_var(column);
  return impl_->tree.read_var(column);
}

std::vector<std::string> H5adReader::layer_keys() const {
  if (impl_->zarr) return impl_->zarr->layer_keys();
  return impl_->tree.keys("layers");
}
std::vector<std::string> H5adReader::uns_keys() const {
  if (impl_->zarr) return impl_->zarr->uns_keys();
  return impl_->tree.keys("uns");
}
std::vector<std::string> H5adReader::varm_keys() const {
  if (impl_->zarr) return impl_->zarr->varm_keys();
  return impl_->tree.keys("varm");
}
DenseMatrix H5adReader::read_varm(const std::string& key) const {
  if (impl_->zarr) return impl_->zarr->read_varm(key);
  return impl_->read_mapping_entry("varm", key);
}

std::optional<ArrayInfo> H5adReader::layer_info(const std::string& key) const {
  if (impl_->zarr) return impl_->zarr->layer_info(key);
  return impl_->tree.element_info("layers", key);
}

DenseMatrix H5adReader::read_layer(const std::string& key) const {
  if (impl_->zarr) return impl_->zarr->read_layer(key);
  return impl_->read_mapping_entry("layers", key);
}

bool H5adReader::has_raw() const {
  if (impl_->zarr) return impl_->zarr->has_raw();
  auto raw = impl_->root().find("raw");
  return raw && raw->is_group();
}

std::optional<ArrayInfo> H5adReader::raw_x_info() const {
  if (impl_->zarr) return impl_->zarr->raw_x_info();
  return impl_->tree.element_info("raw", "X");
}

DenseMatrix H5adReader::read_raw_x_dense() const {
  if (impl_->zarr) return impl_->zarr->read_raw_x_dense();
  return impl_->tree.read_raw_x_dense();
}

std::vector<std::string> H5adReader::raw_var_names() const {
  if (impl_->zarr) return impl_->zarr->raw_var_names();
  return impl_->tree.raw_var_names();
}

UnsValue H5adReader::read_uns(const std::string& key) const {
  if (impl_->zarr) return impl_->zarr->read_uns(key);
  return impl_->tree.read_uns(key);
}

}  // namespace flashot::io
