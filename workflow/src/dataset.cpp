#include "flashot/workflow/dataset.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>

namespace flashot::workflow {
namespace {

constexpr std::size_t kPreviewValues = 8;  // values listed in "matches no row" messages
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string join(const std::vector<std::string>& words, std::size_t limit = std::numeric_limits<std::size_t>::max()) {
  std::string text;
  for (std::size_t i = 0; i < words.size() && i < limit; ++i) text += (i ? ", " : "") + words[i];
  if (words.size() > limit) text += ", … (" + std::to_string(words.size()) + " in all)";
  return words.empty() ? "none" : text;
}

std::optional<double> parse_number(const std::string& text) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto result = std::from_chars(text.data(), end, value);
  if (result.ec != std::errc() || result.ptr != end) return std::nullopt;
  return value;
}

std::optional<bool> parse_boolean(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  return std::nullopt;
}

bool is_missing(const io::Column& c, std::size_t row) { return !c.missing.empty() && c.missing[row] != 0; }

/// The text of every row of a column (categorical category, string, number, boolean); nullopt when missing.
std::optional<std::string> cell_text(const io::Column& c, std::size_t row) {
  if (is_missing(c, row)) return std::nullopt;
  switch (c.kind) {
    case io::Column::Kind::kCategorical:
      if (c.codes[row] < 0 || std::size_t(c.codes[row]) >= c.categories.size()) return std::nullopt;
      return c.categories[std::size_t(c.codes[row])];
    case io::Column::Kind::kString:
      return c.strings[row];
    case io::Column::Kind::kNumeric:
      if (std::isnan(c.numbers[row])) return std::nullopt;
      return value_text(c.numbers[row]);
    case io::Column::Kind::kBoolean:
      return c.flags[row] ? std::string("true") : std::string("false");
  }
  return std::nullopt;
}

std::vector<std::string> distinct_values(const io::Column& c) {
  std::set<std::string> seen;
  for (std::size_t row = 0; row < c.size() && seen.size() <= kPreviewValues; ++row) {
    if (auto text = cell_text(c, row)) seen.insert(*text);
  }
  return {seen.begin(), seen.end()};
}

void require_column(const std::vector<std::string>& columns, const std::string& column, const std::string& what) {
  if (std::find(columns.begin(), columns.end(), column) == columns.end()) {
    throw std::invalid_argument(what + " has no column '" + column + "' (columns: " + join(columns) + ")");
  }
}

std::vector<std::size_t> all_rows(std::size_t count) {
  std::vector<std::size_t> rows(count);
  std::iota(rows.begin(), rows.end(), std::size_t{0});
  return rows;
}

std::vector<std::size_t> filter_h5ad_rows(const io::H5adReader& reader, const std::optional<RowFilter>& filter,
                                          const std::string& option) {
  if (!filter) return all_rows(reader.n_obs());
  const std::string where = reader.path().string() + ": " + option + " " + filter->column + "=" + filter->value;
  require_column(reader.obs_columns(), filter->column, where + ": obs");
  const io::Column column = reader.read_obs(filter->column);
  std::vector<std::size_t> rows;
  if (column.kind == io::Column::Kind::kNumeric) {
    const auto wanted = parse_number(filter->value);
    if (!wanted) throw std::invalid_argument(where + ": column '" + filter->column + "' is numeric but '" +
                                             filter->value + "' is not a number");
    for (std::size_t r = 0; r < column.size(); ++r) {
      if (!is_missing(column, r) && column.numbers[r] == *wanted) rows.push_back(r);
    }
  } else if (column.kind == io::Column::Kind::kBoolean) {
    const auto wanted = parse_boolean(filter->value);
    if (!wanted) throw std::invalid_argument(where + ": column '" + filter->column + "' is boolean but '" +
                                             filter->value + "' is not true/false");
    for (std::size_t r = 0; r < column.size(); ++r) {
      if (!is_missing(column, r) && (column.flags[r] != 0) == *wanted) rows.push_back(r);
    }
  } else {
    for (std::size_t r = 0; r < column.size(); ++r) {
      if (cell_text(column, r) == filter->value) rows.push_back(r);
    }
  }
  if (rows.empty()) {
    throw std::invalid_argument(where + ": matches no row (values present: " +
                                join(distinct_values(column), kPreviewValues) + ")");
  }
  return rows;
}

std::vector<std::size_t> filter_ply_rows(const PointCloud& cloud, const std::optional<RowFilter>& filter,
                                         const std::string& option) {
  if (!filter) return all_rows(cloud.file_rows);
  const std::string where = cloud.path.string() + ": " + option + " " + filter->column + "=" + filter->value;
  const io::PlyElement* vertex = cloud.ply->find("vertex");
  const io::PlyProperty* property = vertex->find(filter->column);
  if (property == nullptr || property->is_list) {
    std::vector<std::string> names;
    for (const auto& p : vertex->properties) names.push_back(p.name);
    throw std::invalid_argument(where + ": the vertex element has no scalar property '" + filter->column +
                                "' (properties: " + join(names) + ")");
  }
  const auto wanted = parse_number(filter->value);
  if (!wanted) throw std::invalid_argument(where + ": '" + filter->value + "' is not a number");
  std::vector<std::size_t> rows;
  std::set<double> seen;
  for (std::size_t r = 0; r < property->values.size(); ++r) {
    if (property->values[r] == *wanted) rows.push_back(r);
    if (seen.size() <= kPreviewValues) seen.insert(property->values[r]);
  }
  if (rows.empty()) {
    std::vector<std::string> values;
    for (double v : seen) values.push_back(value_text(v));
    throw std::invalid_argument(where + ": matches no vertex (values present: " + join(values, kPreviewValues) +
                                ")");
  }
  return rows;
}

/// Keeps `rows` of a (file_rows × d) matrix and rejects non-finite values, naming the file row and its name.
std::vector<float> select_rows(std::span<const float> all, std::size_t d, const std::vector<std::size_t>& rows,
                               const std::vector<std::string>& all_names, const std::string& what) {
  std::vector<float> kept(rows.size() * d);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const float* src = all.data() + rows[i] * d;
    for (std::size_t k = 0; k < d; ++k) {
      if (!std::isfinite(src[k])) {
        const std::string name = rows[i] < all_names.size() ? " ('" + all_names[rows[i]] + "')" : "";
        throw std::invalid_argument(what + ": row " + std::to_string(rows[i]) + name + " has a non-finite value (" +
                                    value_text(src[k]) + ") in column " + std::to_string(k));
      }
    }
    std::copy(src, src + d, kept.begin() + std::ptrdiff_t(i * d));
  }
  return kept;
}

std::vector<std::string> pick(const std::vector<std::string>& all, const std::vector<std::size_t>& rows) {
  std::vector<std::string> kept;
  kept.reserve(rows.size());
  for (std::size_t r : rows) kept.push_back(r < all.size() ? all[r] : std::to_string(r));
  return kept;
}

PointCloud load_ply(const std::filesystem::path& path, const std::optional<RowFilter>& where,
                    const std::string& option) {
  PointCloud cloud;
  cloud.path = path;
  cloud.kind = FileKind::kPly;
  cloud.key = "xyz";
  cloud.representation = "vertex x,y,z";
  cloud.ply = io::read_ply(path);
  const std::vector<float> xyz = io::vertex_positions(*cloud.ply, path.string());
  cloud.file_rows = xyz.size() / 3;
  cloud.d = 3;
  cloud.rows = filter_ply_rows(cloud, where, option);
  cloud.names.reserve(cloud.rows.size());
  for (std::size_t r : cloud.rows) cloud.names.push_back(std::to_string(r));
  cloud.points = select_rows(xyz, 3, cloud.rows, {}, path.string() + ": vertex");
  if (where) cloud.filter_text = where->column + "=" + where->value;
  return cloud;
}

PointCloud h5ad_cloud(const io::H5adReader& reader, const std::optional<RowFilter>& where, const std::string& option) {
  PointCloud cloud;
  cloud.path = reader.path();
  cloud.kind = FileKind::kH5ad;
  cloud.file_rows = reader.n_obs();
  cloud.rows = filter_h5ad_rows(reader, where, option);
  cloud.names = pick(reader.obs_names(), cloud.rows);
  if (where) cloud.filter_text = where->column + "=" + where->value;
  return cloud;
}

void read_obsm_points(const io::H5adReader& reader, const std::string& key, PointCloud& cloud,
                      const std::string& side) {
  const std::vector<std::string> keys = reader.obsm_keys();
  if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
    throw std::invalid_argument(side + reader.path().string() + " has no obsm['" + key + "'] (obsm keys: " +
                                join(keys) + ")");
  }
  const io::ArrayInfo info = reader.obsm_shape(key);
  // Straight into uninitialised memory (no zero-fill): the read that keeps pace with h5py (docs/benchmarks.md).
  const std::size_t count = info.rows * info.cols;
  const auto values = std::make_unique_for_overwrite<float[]>(count);
  reader.read_obsm_into(key, {values.get(), count});
  cloud.key = key;
  cloud.d = info.cols;
  cloud.representation = "obsm['" + key + "'] (" + std::to_string(info.cols) + "-d)";
  cloud.points = select_rows({values.get(), count}, info.cols, cloud.rows, reader.obs_names(),
                             reader.path().string() + ": obsm['" + key + "']");
}

}  // namespace

std::string value_text(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

FileKind file_kind(const std::filesystem::path& path) {
  if (io::is_zarr_path(path)) return FileKind::kH5ad;  // AnnData in a zarr store (docs/io-zarr.md)
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (ext == ".h5ad") return FileKind::kH5ad;
  if (ext == ".ply") return FileKind::kPly;
  throw std::invalid_argument(path.string() + ": unknown file type '" + ext + "' (expected .h5ad, .zarr, .zarr.zip or .ply)");
}

RowFilter parse_row_filter(const std::string& text, const std::string& option) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw std::invalid_argument(option + " expects COLUMN=VALUE (got '" + text + "')");
  }
  return {text.substr(0, eq), text.substr(eq + 1)};
}

std::pair<PointCloud, PointCloud> load_pair(const std::filesystem::path& source, const std::filesystem::path& target,
                                            const LoadOptions& options) {
  const FileKind kind = file_kind(source);
  if (file_kind(target) != kind) {
    throw std::invalid_argument("SOURCE " + source.string() + " and TARGET " + target.string() +
                                " are different kinds of file (both .h5ad or both .ply)");
  }
  if (kind == FileKind::kPly) {
    if (options.use_x || !options.key.empty()) {
      throw std::invalid_argument("--key and --use-x apply to .h5ad files; PLY files are aligned by x, y, z");
    }
    return {load_ply(source, options.source_where, "--source-where"),
            load_ply(target, options.target_where, "--target-where")};
  }
  const io::H5adReader src(source);
  const io::H5adReader tgt(target);
  PointCloud s = h5ad_cloud(src, options.source_where, "--source-where");
  PointCloud t = h5ad_cloud(tgt, options.target_where, "--target-where");
  if (options.use_x) {
    if (!options.key.empty()) throw std::invalid_argument("--key and --use-x exclude each other");
    if (!src.x_info()) throw std::invalid_argument("SOURCE " + source.string() + " has no X");
    if (!tgt.x_info()) throw std::invalid_argument("TARGET " + target.string() + " has no X");
    const std::vector<std::string> source_genes = src.var_names();
    const std::vector<std::string> target_genes = tgt.var_names();
    std::map<std::string, std::size_t> target_index;
    for (std::size_t j = 0; j < target_genes.size(); ++j) target_index.emplace(target_genes[j], j);
    std::vector<std::size_t> source_columns, target_columns;
    for (std::size_t j = 0; j < source_genes.size(); ++j) {
      const auto it = target_index.find(source_genes[j]);
      if (it == target_index.end()) continue;
      source_columns.push_back(j);
      target_columns.push_back(it->second);
    }
    if (source_columns.empty()) {
      throw std::invalid_argument("--use-x: SOURCE " + source.string() + " and TARGET " + target.string() +
                                  " share no gene (var name)");
    }
    const io::DenseMatrix xs = src.read_x_columns(source_columns);
    const io::DenseMatrix xt = tgt.read_x_columns(target_columns);
    const std::string genes = "X on " + std::to_string(source_columns.size()) + " shared genes";
    for (auto [cloud, matrix, reader] : {std::tuple{&s, &xs, &src}, std::tuple{&t, &xt, &tgt}}) {
      cloud->key = "X";
      cloud->representation = genes;
      cloud->d = matrix->cols;
      cloud->points = select_rows(matrix->values, matrix->cols, cloud->rows, reader->obs_names(),
                                  reader->path().string() + ": X");
    }
    return {std::move(s), std::move(t)};
  }
  std::string key = options.key;
  if (key.empty()) {
    const auto has = [](const io::H5adReader& r, const std::string& k) {
      const auto keys = r.obsm_keys();
      return std::find(keys.begin(), keys.end(), k) != keys.end();
    };
    if (!has(src, "X_pca") || !has(tgt, "X_pca")) {
      const io::H5adReader& lacking = has(src, "X_pca") ? tgt : src;
      throw std::invalid_argument("no --key given and " + lacking.path().string() +
                                  " has no obsm['X_pca'] (obsm keys: " + join(lacking.obsm_keys()) +
                                  "); pass --key KEY or --use-x");
    }
    key = "X_pca";
  }
  read_obsm_points(src, key, s, "SOURCE ");
  read_obsm_points(tgt, key, t, "TARGET ");
  if (s.d != t.d) {
    throw std::invalid_argument("SOURCE obsm['" + key + "'] is " + std::to_string(s.d) + "-d but TARGET obsm['" +
                                key + "'] is " + std::to_string(t.d) + "-d");
  }
  return {std::move(s), std::move(t)};
}

PointCloud load_points(const std::filesystem::path& path, const std::string& key,
                       const std::optional<RowFilter>& where) {
  if (file_kind(path) == FileKind::kPly) return load_ply(path, where, "--where");
  if (key.empty()) throw std::invalid_argument(path.string() + ": no obsm key given");
  const io::H5adReader reader(path);
  PointCloud cloud = h5ad_cloud(reader, where, "--where");
  read_obsm_points(reader, key, cloud, "");
  return cloud;
}

Labels read_labels(const PointCloud& cloud, const std::string& column) {
  Labels labels;
  labels.column = column;
  labels.codes.assign(cloud.n(), -1);
  if (cloud.kind == FileKind::kPly) {
    const io::PlyElement* vertex = cloud.ply->find("vertex");
    const io::PlyProperty* property = vertex->find(column);
    if (property == nullptr || property->is_list) {
      std::vector<std::string> names;
      for (const auto& p : vertex->properties) names.push_back(p.name);
      throw std::invalid_argument(cloud.path.string() + ": --transfer-labels: the vertex element has no scalar "
                                  "property '" + column + "' (properties: " + join(names) + ")");
    }
    std::set<double> distinct;
    for (std::size_t r : cloud.rows) distinct.insert(property->values[r]);
    const std::vector<double> values(distinct.begin(), distinct.end());
    for (double v : values) labels.categories.push_back(value_text(v));
    for (std::size_t i = 0; i < cloud.n(); ++i) {
      const double v = property->values[cloud.rows[i]];
      labels.codes[i] = std::int32_t(std::lower_bound(values.begin(), values.end(), v) - values.begin());
    }
    return labels;
  }
  const io::H5adReader reader(cloud.path);
  require_column(reader.obs_columns(), column, cloud.path.string() + ": --transfer-labels: obs");
  const io::Column c = reader.read_obs(column);
  if (c.kind == io::Column::Kind::kCategorical) {
    labels.categories = c.categories;
    for (std::size_t i = 0; i < cloud.n(); ++i) {
      const std::size_t r = cloud.rows[i];
      const std::int32_t code = c.codes[r];
      labels.codes[i] = (is_missing(c, r) || code < 0 || std::size_t(code) >= c.categories.size()) ? -1 : code;
    }
    return labels;
  }
  std::set<std::string> distinct;
  std::set<double> numbers;
  for (std::size_t r : cloud.rows) {
    if (c.kind == io::Column::Kind::kNumeric) {
      if (!is_missing(c, r) && !std::isnan(c.numbers[r])) numbers.insert(c.numbers[r]);
    } else if (auto text = cell_text(c, r)) {
      distinct.insert(*text);
    }
  }
  for (double v : numbers) labels.categories.push_back(value_text(v));  // numeric order, not text order
  if (c.kind != io::Column::Kind::kNumeric) labels.categories.assign(distinct.begin(), distinct.end());
  std::map<std::string, std::int32_t> code_of;
  for (std::size_t k = 0; k < labels.categories.size(); ++k) code_of.emplace(labels.categories[k], std::int32_t(k));
  for (std::size_t i = 0; i < cloud.n(); ++i) {
    if (auto text = cell_text(c, cloud.rows[i])) labels.codes[i] = code_of.at(*text);
  }
  return labels;
}

void write_enriched_copy(const PointCloud& source, const AlignmentOutput& output, const std::filesystem::path& path,
                         int zarr_format) {
  const std::size_t d = source.d;
  if (output.mapped.size() != source.n() * d) {
    throw std::invalid_argument("mapped points: expected " + std::to_string(source.n() * d) + " values, got " +
                                std::to_string(output.mapped.size()));
  }
  const bool with_labels = output.transfer.has_value() && output.label_names.has_value();
  const std::string label_column = with_labels ? output.label_names->column + "_flashot" : "";
  if (source.kind == FileKind::kH5ad) {
    io::H5adContent additions;
    additions.zarr_format = zarr_format;
    io::DenseMatrix mapped{source.file_rows, d, std::vector<float>(source.file_rows * d, kNaN)};
    for (std::size_t i = 0; i < source.n(); ++i) {
      std::copy_n(output.mapped.begin() + std::ptrdiff_t(i * d), d,
                  mapped.values.begin() + std::ptrdiff_t(source.rows[i] * d));
    }
    additions.obsm.emplace(source.key + "_flashot", std::move(mapped));
    if (with_labels) {
      io::Column labels;
      labels.kind = io::Column::Kind::kCategorical;
      labels.categories = output.label_names->categories;
      labels.codes.assign(source.file_rows, -1);
      io::Column confidence;
      confidence.kind = io::Column::Kind::kNumeric;
      confidence.numbers.assign(source.file_rows, std::numeric_limits<double>::quiet_NaN());
      for (std::size_t i = 0; i < source.n(); ++i) {
        labels.codes[source.rows[i]] = output.transfer->label[i];
        if (output.transfer->label[i] >= 0) confidence.numbers[source.rows[i]] = output.transfer->confidence[i];
      }
      additions.obs.emplace(label_column, std::move(labels));
      additions.obs.emplace(label_column + "_confidence", std::move(confidence));
    }
    for (const auto& [name, value] : output.scalars) additions.uns.emplace("flashot_" + name, value);
    io::write_h5ad_copy(source.path, path, additions);
    return;
  }
  io::PlyFile ply = *source.ply;
  io::PlyElement& vertex = *ply.find("vertex");
  const char* axes[] = {"x", "y", "z"};
  for (std::size_t k = 0; k < 3; ++k) {
    io::PlyProperty* coordinate = vertex.find(axes[k]);
    io::PlyProperty original = *coordinate;
    original.name = std::string(axes[k]) + "_original";
    for (std::size_t i = 0; i < source.n(); ++i) coordinate->values[source.rows[i]] = output.mapped[i * 3 + k];
    if (io::PlyProperty* existing = vertex.find(original.name)) {
      *existing = std::move(original);
    } else {
      vertex.properties.push_back(std::move(original));
    }
  }
  if (with_labels) {
    io::PlyProperty labels{label_column, io::PlyType::kFloat64, false, io::PlyType::kUint8,
                           std::vector<double>(vertex.count, -1.0), {}};
    io::PlyProperty confidence{label_column + "_confidence", io::PlyType::kFloat32, false, io::PlyType::kUint8,
                               std::vector<double>(vertex.count, 0.0), {}};
    for (std::size_t i = 0; i < source.n(); ++i) {
      const std::int32_t code = output.transfer->label[i];
      if (code < 0) continue;
      // The label's own value (the categories are the target's property values), not its code.
      labels.values[source.rows[i]] = *parse_number(output.label_names->categories[std::size_t(code)]);
      confidence.values[source.rows[i]] = output.transfer->confidence[i];
    }
    for (io::PlyProperty* p : {&labels, &confidence}) {
      if (io::PlyProperty* existing = vertex.find(p->name)) {
        *existing = std::move(*p);
      } else {
        vertex.properties.push_back(std::move(*p));
      }
    }
  }
  io::write_ply(path, ply);
}

}  // namespace flashot::workflow

namespace flashot::workflow {

LabelAgreement label_agreement(const LabelTransfer& transfer, const Labels& transferred, const Labels& known) {
  if (known.codes.size() != transfer.points || transfer.label.size() != transfer.points) {
    throw std::invalid_argument("label comparison: " + std::to_string(transfer.points) + " transferred labels but " +
                                std::to_string(known.codes.size()) + " known ones in '" + known.column + "'");
  }
  LabelAgreement out;
  for (std::size_t i = 0; i < transfer.points; ++i) {
    const std::int32_t got = transfer.label[i], want = known.codes[i];
    if (got < 0 || want < 0) continue;
    ++out.compared;
    if (transferred.categories.at(std::size_t(got)) == known.categories.at(std::size_t(want))) ++out.agreeing;
  }
  return out;
}

double bounding_diameter(PointsView a, PointsView b) {
  const std::size_t d = a.d;
  std::vector<double> lo(d, std::numeric_limits<double>::infinity());
  std::vector<double> hi(d, -std::numeric_limits<double>::infinity());
  for (const PointsView& p : {a, b}) {
    for (std::size_t i = 0; i < p.n; ++i) {
      for (std::size_t k = 0; k < d; ++k) {
        lo[k] = std::min(lo[k], double(p.data[i * d + k]));
        hi[k] = std::max(hi[k], double(p.data[i * d + k]));
      }
    }
  }
  double squared = 0;
  for (std::size_t k = 0; k < d; ++k) squared += (hi[k] - lo[k]) * (hi[k] - lo[k]);
  return std::sqrt(squared);
}

}  // namespace flashot::workflow
