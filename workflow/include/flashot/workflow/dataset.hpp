#pragma once
// Turning files into point clouds for the engine, and solved results back into files: what `flashot align`,
// `map` and `register` share (and the GUI may reuse). Representations: an .h5ad obsm entry (default X_pca), X on
// the genes two files share (--use-x), or PLY vertex coordinates. Rows can be restricted by `COLUMN=VALUE`.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "flashot/flashot.hpp"
#include "flashot/io/anndata.hpp"
#include "flashot/io/ply.hpp"

namespace flashot::workflow {

enum class FileKind { kH5ad, kPly };
/// By extension (.h5ad, .zarr, .zarr.zip → kH5ad, i.e. AnnData; .ply; any case). Throws std::invalid_argument
/// naming the path otherwise.
FileKind file_kind(const std::filesystem::path& path);

/// `COLUMN=VALUE`: keep the rows whose obs column (or PLY vertex property) equals VALUE.
struct RowFilter {
  std::string column;
  std::string value;
};
/// Parses `COLUMN=VALUE`; throws std::invalid_argument naming `option` and the text when there is no '='.
RowFilter parse_row_filter(const std::string& text, const std::string& option);

/// Points read from one file, as the engine takes them.
struct PointCloud {
  std::filesystem::path path;
  FileKind kind = FileKind::kH5ad;
  std::string key;             ///< obsm key, "X", or "xyz" (PLY)
  std::string representation;  ///< for people: "obsm['X_pca'] (50-d)", "X on 2000 shared genes", "vertex x,y,z"
  std::size_t file_rows = 0;   ///< n_obs or the vertex count
  std::vector<std::size_t> rows;   ///< file rows kept, ascending (all of them without a filter)
  std::vector<std::string> names;  ///< name of every kept row (obs name, or the vertex index)
  std::size_t d = 0;
  std::vector<float> points;  ///< (rows.size() × d) row-major
  std::optional<io::PlyFile> ply;  ///< the whole PLY file, kept to write the enriched copy
  std::string filter_text;         ///< "cell_type=T" or ""

  std::size_t n() const { return rows.size(); }
  PointsView view() const { return {points, rows.size(), d}; }
};

struct LoadOptions {
  std::string key;  ///< obsm key; empty = X_pca when both files have it
  bool use_x = false;
  std::optional<RowFilter> source_where;
  std::optional<RowFilter> target_where;
};

/// Loads SOURCE and TARGET in one shared representation. Both files must be of the same kind. Throws
/// std::invalid_argument for: mixed kinds, an obsm key missing (names the keys present), different dimensions,
/// no shared genes, a non-finite value (names the file, the row and its name), a filter column missing or
/// matching no row (names the values present); io::IoError / io::FormatError for unreadable files.
std::pair<PointCloud, PointCloud> load_pair(const std::filesystem::path& source, const std::filesystem::path& target,
                                            const LoadOptions& options);

/// Loads one file: obsm `key` (must be given for .h5ad) or PLY coordinates.
PointCloud load_points(const std::filesystem::path& path, const std::string& key,
                       const std::optional<RowFilter>& where = std::nullopt);

/// Labels of the kept rows of a cloud: codes into `categories` (−1 = missing).
struct Labels {
  std::string column;
  std::vector<std::int32_t> codes;
  std::vector<std::string> categories;
};
/// From an obs column (categorical, string, numeric or boolean) or a PLY vertex property. Throws
/// std::invalid_argument naming the column and the columns present.
Labels read_labels(const PointCloud& cloud, const std::string& column);

/// How well transferred labels match known ones: `agreeing` of `compared` rows carry the same label text. Rows
/// compared are those where both a transferred label (≥ 0) and a known one exist.
struct LabelAgreement {
  std::size_t compared = 0;
  std::size_t agreeing = 0;
  double fraction() const { return compared ? double(agreeing) / double(compared) : 0.0; }
};
/// Compares `transfer` (its codes index `transferred.categories`) with the source's own labels `known` (one per
/// transferred row; codes into `known.categories`), by category text, so the two columns may list their classes in
/// different orders. Throws std::invalid_argument when the row counts differ.
LabelAgreement label_agreement(const LabelTransfer& transfer, const Labels& transferred, const Labels& known);

/// What `align` adds to the copy of SOURCE.
struct AlignmentOutput {
  std::vector<float> mapped;  ///< (source.n() × d) barycentric projection into target space
  std::optional<Labels> label_names;       ///< the target's categories
  std::optional<LabelTransfer> transfer;   ///< per source row
  std::vector<std::pair<std::string, double>> scalars;  ///< e.g. epsilon, written to .h5ad uns as flashot_<name>
};

/// Writes the enriched copy of `source` to `path` (a temporary path of an OutputSet, usually):
/// .h5ad: obsm `<key>_flashot` (file_rows × d, NaN for rows outside the filter), obs `<COL>_flashot`
/// (categorical) and `<COL>_flashot_confidence` (float, NaN outside), uns flashot_*; X is not rewritten.
/// .ply: the source file with x, y, z replaced by the mapped coordinates (rows outside the filter keep theirs),
/// the originals kept as x_original, y_original, z_original, and `<COL>_flashot` (int) and
/// `<COL>_flashot_confidence` (float) vertex properties.
/// `zarr_format` (3 or 2) applies when `path` is a zarr store written from an .h5ad source; a zarr source keeps its
/// own format (docs/io-zarr.md).
void write_enriched_copy(const PointCloud& source, const AlignmentOutput& output, const std::filesystem::path& path,
                         int zarr_format = 3);

/// Stable-order text of a value read from a file, for messages ("3", "0.5", "T cell").
std::string value_text(double value);

}  // namespace flashot::workflow

namespace flashot::workflow {

/// Diagonal of the bounding box of both clouds together: the data's scale, from which default ε are derived
/// (the engine's ε-scaling starts from the same diameter).
double bounding_diameter(PointsView a, PointsView b);

}  // namespace flashot::workflow
