#pragma once
// AnnData .h5ad reading and writing over the HDF5 C API (kept private to io/src). Reads every writer
// generation (anndata ≤0.6 compound obs, 0.7 reference categories / LZF, 0.8–0.12, 0.13 + pandas 3 nullable
// strings), only what is asked for. No HDF5 types here.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace flashot::io {

/// A dense row-major matrix converted to float32 (the dtype on disk is reported separately).
struct DenseMatrix {
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<float> values;  ///< rows·cols
};

/// Compressed sparse rows (or columns, when `csc`), float32 values, int64 indices.
struct SparseMatrix {
  std::size_t rows = 0;
  std::size_t cols = 0;
  bool csc = false;
  std::vector<float> data;
  std::vector<std::int64_t> indices;
  std::vector<std::int64_t> indptr;  ///< rows+1 (csr) or cols+1 (csc)
};

/// Shape and storage of an array element (X, an obsm/varm entry, a layer).
struct ArrayInfo {
  std::string encoding;  ///< "array", "csr_matrix", "csc_matrix", "dataframe", or "" for legacy/unknown
  std::string dtype;     ///< "float32", "float64", "int32", … ("" for a dataframe)
  std::size_t rows = 0;
  std::size_t cols = 0;
};

/// One obs/var column.
struct Column {
  enum class Kind { kCategorical, kNumeric, kString, kBoolean };
  Kind kind = Kind::kNumeric;
  // kCategorical: codes (−1 = missing) into `categories` (numeric categories are rendered as text)
  std::vector<std::int32_t> codes;
  std::vector<std::string> categories;
  bool ordered = false;
  // kNumeric: values (NaN = missing for nullable integers / floats)
  std::vector<double> numbers;
  // kString: values; kBoolean: flags (missing = false, and `missing` marks it)
  std::vector<std::string> strings;
  std::vector<std::uint8_t> flags;
  std::vector<std::uint8_t> missing;  ///< empty, or one per row (nullable columns)
  std::string encoding;               ///< the on-disk encoding-type, for `flashot info`
  std::size_t size() const;
};

/// A value for uns: a scalar or string, or a float vector.
using UnsValue = std::variant<double, std::int64_t, std::string, std::vector<double>>;

/// An open AnnData file, read-only: an .h5ad, or a zarr store (`*.zarr` folder, `*.zarr.zip` archive; format 2 or
/// 3), chosen by the path's name (docs/io-zarr.md). Each accessor reads only what it returns.
class H5adReader {
 public:
  /// Throws IoError if the file cannot be opened, FormatError if it is not an AnnData HDF5 file.
  explicit H5adReader(const std::filesystem::path& path);
  ~H5adReader();
  H5adReader(H5adReader&&) noexcept;
  H5adReader& operator=(H5adReader&&) noexcept;

  const std::filesystem::path& path() const;
  std::string writer_generation() const;  ///< e.g. "0.1.0 (anndata ≥0.8)", "legacy (≤0.7)"
  std::size_t n_obs() const;
  std::size_t n_vars() const;
  std::vector<std::string> obs_names() const;
  std::vector<std::string> var_names() const;

  std::optional<ArrayInfo> x_info() const;  ///< nullopt when X is absent
  DenseMatrix read_x_dense() const;         ///< densifies sparse X (caller's choice; may be large)
  /// Columns `cols` of X (by var index), densified: what `--use-x` needs on shared genes. Reads X row-block-wise.
  DenseMatrix read_x_columns(std::span<const std::size_t> cols) const;
  SparseMatrix read_x_sparse() const;  ///< X as stored (csr/csc); dense X throws FormatError

  std::vector<std::string> obsm_keys() const;
  /// Encoding, dtype and shape of obsm[key] from the file's metadata alone (for a ≤0.6 compound obsm: the
  /// dataspace and the field's type), nothing read; nullopt when there is no such entry. Throws FormatError for
  /// an entry whose layout is unsupported or whose shape the stored bytes could not hold.
  std::optional<ArrayInfo> obsm_info(const std::string& key) const;
  /// obsm[key]'s shape checked for a read into caller memory (read_obsm_into), metadata only: IoError naming the
  /// key and the keys present when there is no such entry; FormatError naming /obsm/<key> when its rows differ
  /// from the cells or rows·cols float32 values could not be addressed.
  ArrayInfo obsm_shape(const std::string& key) const;
  /// A dense (or sparse, densified) obsm entry as float32. Throws IoError naming the key and the keys present.
  DenseMatrix read_obsm(const std::string& key) const;
  /// The same values written into caller-owned memory, e.g. `std::make_unique_for_overwrite<float[]>(rows * cols)`
  /// or pinned host memory for a GPU upload. `out` must hold exactly rows·cols floats (`obsm_info`), else
  /// std::invalid_argument naming the key and both sizes (before anything is read). A dense entry is read by HDF5
  /// straight into `out` — no zero-filled vector, no copy — which is what makes a 1M × 50 read as fast as h5py's
  /// (docs/benchmarks.md); so is a ≤0.6 compound field. Sparse and dataframe entries are assembled first and
  /// copied. A buffer of ≥ 4 MiB is advised onto transparent huge pages (madvise, a hint) before the read.
  /// Throws as read_obsm.
  void read_obsm_into(const std::string& key, std::span<float> out) const;

  std::vector<std::string> obs_columns() const;  ///< in column-order
  Column read_obs(const std::string& column) const;
  std::vector<std::string> var_columns() const;
  Column read_var(const std::string& column) const;

  std::vector<std::string> layer_keys() const;
  std::vector<std::string> uns_keys() const;

  // ---- added for the io tests, the fuzzer and `flashot info` ----
  /// Parses an HDF5 file image held in memory (the fuzzing entry point); `name` stands for the path in messages.
  static H5adReader from_image(std::span<const std::byte> image, const std::string& name);
  std::vector<std::string> varm_keys() const;
  DenseMatrix read_varm(const std::string& key) const;
  std::optional<ArrayInfo> layer_info(const std::string& key) const;
  DenseMatrix read_layer(const std::string& key) const;  ///< densified
  bool has_raw() const;
  std::optional<ArrayInfo> raw_x_info() const;
  DenseMatrix read_raw_x_dense() const;
  std::vector<std::string> raw_var_names() const;
  /// uns entry by key; nested entries as "a/b". Scalars (float → double, integer → int64), strings, and 1-D
  /// numeric arrays (→ vector<double>). Throws IoError if absent, FormatError for other kinds (mappings, tables).
  UnsValue read_uns(const std::string& key) const;

 private:
  struct Impl;
  explicit H5adReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// What flashot writes: either a new file (`write_h5ad`) or additions to a copy of an input (`write_h5ad_copy`).
struct H5adContent {
  std::vector<std::string> obs_names;              ///< required for a new file
  std::vector<std::string> var_names;              ///< required for a new file
  std::optional<DenseMatrix> x_dense;              ///< at most one of x_dense / x_sparse
  std::optional<SparseMatrix> x_sparse;
  std::map<std::string, DenseMatrix> obsm;         ///< added or replaced
  std::map<std::string, Column> obs;               ///< added or replaced (categorical, numeric, string, boolean)
  std::map<std::string, Column> var;
  std::map<std::string, UnsValue> uns;
  /// zarr format of a new .zarr / .zarr.zip output (3, or 2 for older readers); a copy of a zarr input keeps the
  /// input's format. Ignored for .h5ad outputs (docs/io-zarr.md).
  int zarr_format = 3;
};

/// Whether `path` names a zarr store: `*.zarr` or `*.zarr.zip` (any case). The writers below write zarr for such a
/// path and .h5ad otherwise; H5adReader reads either.
bool is_zarr_path(const std::filesystem::path& path);

/// Writes a new .h5ad (anndata 0.1.0 encodings, chunked + deflate) via a temporary file renamed over `path`; or a
/// zarr store when `path` is named .zarr / .zarr.zip (format content.zarr_format; a folder written beside the target
/// and renamed into place).
/// Throws std::invalid_argument for inconsistent sizes (names the element and both sizes), IoError on failure.
void write_h5ad(const std::filesystem::path& path, const H5adContent& content);
/// Copies `input` to `output` (never touching `input`), then adds/replaces obsm entries, obs/var columns and
/// uns entries from `additions` without rewriting X. obs_names/var_names/X in `additions` must be empty.
/// `output` may equal `input` only if `in_place` is true (then the original is replaced atomically).
/// zarr (docs/io-zarr.md): a zarr input to a zarr output is copied entry by entry, in the input's zarr format; a copy
/// between .h5ad and zarr carries X, obs, var, obsm and plain uns values, and fails (std::invalid_argument naming
/// them) when the input holds more (layers, varm, raw, nested uns) rather than drop it.
void write_h5ad_copy(const std::filesystem::path& input, const std::filesystem::path& output,
                     const H5adContent& additions, bool in_place = false);
/// A sparse coupling as an .h5ad: X = CSR (rows = source cells = obs, cols = target cells = var).
void write_coupling_h5ad(const std::filesystem::path& path, const std::vector<std::string>& source_names,
                         const std::vector<std::string>& target_names, const SparseMatrix& coupling,
                         int zarr_format = 3);

}  // namespace flashot::io
