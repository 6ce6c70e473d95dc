#pragma once
// A data set opened in flashot-gui: an .h5ad file or a PLY cloud, with what the window offers to choose from —
// spaces to align in, spaces to show, columns to color by. Reading happens on the UI thread, before a solve;
// the solve gets plain matrices (alignment.hpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "flashot/workflow/dataset.hpp"
#include "flashot/io/anndata.hpp"
#include "flashot/io/ply.hpp"

namespace flashot::gui {

/// Owned float32 values: adopted from a std::vector (X and PLY reads hand theirs over, no copy), or allocated
/// without zero-filling for an obsm entry HDF5 writes straight into (H5adReader::read_obsm_into), so a 1M × 50
/// space is written once, by the read — a zero-filled std::vector costs a second pass over it (docs/benchmarks.md).
class FloatBuffer {
 public:
  FloatBuffer() = default;
  /// Takes `values` over (implicit, so a std::vector can stand where a buffer is expected).
  FloatBuffer(std::vector<float> values) : vector_(std::move(values)), size_(vector_.size()) {}
  /// `count` floats whose values are indeterminate until written.
  static FloatBuffer uninitialized(std::size_t count) {
    FloatBuffer b;
    b.raw_ = std::make_unique_for_overwrite<float[]>(count);
    b.size_ = count;
    return b;
  }
  FloatBuffer(const FloatBuffer& other) : FloatBuffer(std::vector<float>(other.begin(), other.end())) {}
  FloatBuffer(FloatBuffer&& other) noexcept { swap(other); }
  FloatBuffer& operator=(FloatBuffer other) noexcept {  // copy and move assignment alike
    swap(other);
    return *this;
  }
  void swap(FloatBuffer& other) noexcept {
    vector_.swap(other.vector_);
    raw_.swap(other.raw_);
    std::swap(size_, other.size_);
  }

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  float* data() { return raw_ ? raw_.get() : vector_.data(); }
  const float* data() const { return raw_ ? raw_.get() : vector_.data(); }
  float* begin() { return data(); }
  float* end() { return data() + size_; }
  const float* begin() const { return data(); }
  const float* end() const { return data() + size_; }
  float& operator[](std::size_t i) { return data()[i]; }
  const float& operator[](std::size_t i) const { return data()[i]; }
  /// As std::vector::resize: values kept up to the new size, new ones 0.
  void resize(std::size_t count) {
    if (raw_) {
      vector_.assign(raw_.get(), raw_.get() + std::min(count, size_));
      raw_.reset();
    }
    vector_.resize(count);
    size_ = count;
  }

 private:
  std::vector<float> vector_;      // the values, unless raw_ holds them
  std::unique_ptr<float[]> raw_;   // uninitialized() storage
  std::size_t size_ = 0;
};

/// A dense row-major float32 matrix.
struct Matrix {
  std::size_t rows = 0;
  std::size_t cols = 0;
  FloatBuffer values;  ///< rows·cols
};

/// Space keys that are not obsm entries.
inline constexpr const char* kSpaceX = "X";                    ///< .h5ad X (dense or sparse, densified)
inline constexpr const char* kSpacePly = "xyz";                ///< PLY vertex coordinates
inline constexpr const char* kSpaceFirstThree = "first 3 of alignment space";  ///< display only

/// What a color-by choice can be, besides a column.
inline constexpr const char* kColorBySide = "source / target";
inline constexpr const char* kColorByPly = "PLY colors";
inline constexpr const char* kColorByTransferred = "transferred labels";

class Dataset {
 public:
  /// Opens an .h5ad or .ply file and reads what the choices need (PLY: the whole file; .h5ad: names, keys,
  /// column names). Throws std::invalid_argument for another extension, io::IoError / io::FormatError for a file
  /// that cannot be read, std::invalid_argument for a file with no points.
  static Dataset open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  workflow::FileKind kind() const { return kind_; }
  std::size_t size() const { return n_; }
  /// obs names, or the vertex indices as text.
  std::vector<std::string> names() const;
  /// "pbmc.h5ad — 700 cells" / "bunny.ply — 35,947 points"
  std::string summary() const;

  /// Spaces to align in: obsm keys (2-D), "X" when present; PLY: "xyz". The preferred one first (X_pca).
  std::vector<std::string> alignment_spaces() const;
  /// Spaces to show: X_umap, spatial, other obsm keys with ≥ 2 columns, kSpaceFirstThree; PLY: "xyz".
  std::vector<std::string> display_spaces() const;
  /// Columns to color by: obs columns; PLY: scalar vertex properties other than x, y, z, red, green, blue.
  std::vector<std::string> color_columns() const;
  bool has_ply_colors() const;
  /// Columns of an obsm entry (0 when absent; PLY: 3 for "xyz").
  std::size_t space_width(const std::string& key) const;

  /// The points of a space (n × d). Throws std::invalid_argument naming the key and the keys present.
  Matrix read_space(const std::string& key) const;
  /// X restricted to the given var names, in that order (shared genes). Throws for a name not in var.
  Matrix read_x_genes(const std::vector<std::string>& genes) const;
  std::vector<std::string> var_names() const;
  /// A display space as n × 3 (2-D spaces get z = 0; more columns are cut to the first 3). `alignment_key` is
  /// the space kSpaceFirstThree refers to.
  std::vector<float> read_display(const std::string& key, const std::string& alignment_key) const;
  /// An obs column, or a PLY property as a numeric column. Throws std::invalid_argument naming the columns present.
  io::Column read_column(const std::string& name) const;
  /// Labels of a column as codes into categories, via the CLI's rules (numbers in numeric order, strings sorted).
  workflow::Labels read_labels(const std::string& column) const;
  /// PLY vertex colors as n·3 bytes (uchar 0–255 or float 0–1 properties). Throws if there are none.
  std::vector<std::uint8_t> ply_colors() const;

  /// This data set as the CLI's PointCloud (all rows, no points), for writing outputs the way the CLI does.
  workflow::PointCloud as_point_cloud(const std::string& key, std::size_t d) const;

 private:
  std::filesystem::path path_;
  workflow::FileKind kind_ = workflow::FileKind::kH5ad;
  std::size_t n_ = 0;
  std::vector<std::string> obsm_keys_;
  std::vector<std::size_t> obsm_cols_;
  bool has_x_ = false;
  std::vector<std::string> obs_columns_;
  std::optional<io::PlyFile> ply_;
};

/// The spaces two data sets can be aligned in (present in both with the same width, or "X" on shared genes),
/// preferred first.
std::vector<std::string> common_alignment_spaces(const Dataset& source, const Dataset& target);

/// Points of source and target in one alignment space. "X" uses the genes both files share (in the source's
/// order). Throws std::invalid_argument when the widths differ or no gene is shared (naming both).
std::pair<Matrix, Matrix> read_alignment_pair(const Dataset& source, const Dataset& target, const std::string& key);

}  // namespace flashot::gui
