#include "dataset.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <unordered_map>

#include "flashot/io/errors.hpp"

namespace flashot::gui {
namespace {

std::string join(const std::vector<std::string>& words) {
  std::string text;
  for (std::size_t i = 0; i < words.size(); ++i) text += (i ? ", " : "") + words[i];
  return words.empty() ? "none" : text;
}

std::string with_thousands(std::size_t value) {
  const std::string digits = std::to_string(value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

bool is_coordinate(const std::string& name) { return name == "x" || name == "y" || name == "z"; }

// PLY color properties by the names writers use, in the order tried.
const io::PlyProperty* find_channel(const io::PlyElement& vertex, const char* const (&names)[2]) {
  for (const char* name : names) {
    if (const io::PlyProperty* p = vertex.find(name); p != nullptr && !p->is_list) return p;
  }
  return nullptr;
}
constexpr const char* kRedNames[2] = {"red", "diffuse_red"};
constexpr const char* kGreenNames[2] = {"green", "diffuse_green"};
constexpr const char* kBlueNames[2] = {"blue", "diffuse_blue"};

bool is_color_channel(const std::string& name) {
  for (const auto* names : {&kRedNames, &kGreenNames, &kBlueNames}) {
    if (name == (*names)[0] || name == (*names)[1]) return true;
  }
  return name == "alpha";
}

Matrix from_dense(io::DenseMatrix&& dense) {
  return Matrix{dense.rows, dense.cols, std::move(dense.values)};
}

const char* kind_text(workflow::FileKind kind) { return kind == workflow::FileKind::kPly ? "PLY" : ".h5ad"; }

// obsm[key] as the CLI reads it (app read_obsm_points): sized by obsm_shape, then HDF5 writes the values straight
// into memory nobody zero-filled. `cells` is the row count the file had when it was opened.
Matrix read_obsm_matrix(const io::H5adReader& reader, const std::string& key, std::size_t cells) {
  const io::ArrayInfo info = reader.obsm_shape(key);
  if (info.rows != cells) {
    throw std::invalid_argument(reader.path().string() + ": obsm['" + key + "'] has " + std::to_string(info.rows) +
                                " rows now; the file had " + std::to_string(cells) + " cells when it was opened");
  }
  Matrix m{info.rows, info.cols, FloatBuffer::uninitialized(info.rows * info.cols)};
  reader.read_obsm_into(key, {m.values.data(), m.values.size()});
  return m;
}

}  // namespace

Dataset Dataset::open(const std::filesystem::path& path) {
  Dataset d;
  d.path_ = path;
  d.kind_ = workflow::file_kind(path);
  if (d.kind_ == workflow::FileKind::kPly) {
    d.ply_ = io::read_ply(path);
    const io::PlyElement* vertex = d.ply_->find("vertex");
    if (vertex == nullptr) throw io::FormatError(path.string(), "header", "no vertex element");
    io::vertex_positions(*d.ply_, path.string());  // validates x, y, z before anything is shown
    d.n_ = vertex->count;
  } else {
    const io::H5adReader reader(path);
    d.n_ = reader.n_obs();
    for (const std::string& key : reader.obsm_keys()) {
      const auto info = reader.obsm_info(key);
      if (!info || info->encoding == "dataframe" || info->cols == 0) continue;
      d.obsm_keys_.push_back(key);
      d.obsm_cols_.push_back(info->cols);
    }
    d.has_x_ = reader.x_info().has_value();
    d.obs_columns_ = reader.obs_columns();
  }
  if (d.n_ == 0) throw std::invalid_argument(path.string() + ": the " + kind_text(d.kind_) + " file holds no points");
  return d;
}

std::vector<std::string> Dataset::names() const {
  if (kind_ == workflow::FileKind::kH5ad) return io::H5adReader(path_).obs_names();
  std::vector<std::string> names(n_);
  for (std::size_t i = 0; i < n_; ++i) names[i] = std::to_string(i);
  return names;
}

std::string Dataset::summary() const {
  return path_.filename().string() + " — " + with_thousands(n_) +
         (kind_ == workflow::FileKind::kPly ? " points" : " cells");
}

std::vector<std::string> Dataset::alignment_spaces() const {
  if (kind_ == workflow::FileKind::kPly) return {kSpacePly};
  std::vector<std::string> spaces = obsm_keys_;
  // X_pca first: the representation single-cell alignments use, and the CLI's default.
  std::stable_partition(spaces.begin(), spaces.end(), [](const std::string& k) { return k == "X_pca"; });
  if (has_x_) spaces.emplace_back(kSpaceX);
  return spaces;
}

std::vector<std::string> Dataset::display_spaces() const {
  if (kind_ == workflow::FileKind::kPly) return {kSpacePly};
  std::vector<std::string> spaces;
  for (const char* preferred : {"X_umap", "spatial", "X_tsne", "X_spatial"}) {
    for (std::size_t i = 0; i < obsm_keys_.size(); ++i) {
      if (obsm_keys_[i] == preferred && obsm_cols_[i] >= 2) spaces.push_back(obsm_keys_[i]);
    }
  }
  for (std::size_t i = 0; i < obsm_keys_.size(); ++i) {
    if (obsm_cols_[i] >= 2 && std::find(spaces.begin(), spaces.end(), obsm_keys_[i]) == spaces.end()) {
      spaces.push_back(obsm_keys_[i]);
    }
  }
  spaces.emplace_back(kSpaceFirstThree);
  return spaces;
}

std::vector<std::string> Dataset::color_columns() const {
  if (kind_ == workflow::FileKind::kH5ad) return obs_columns_;
  std::vector<std::string> columns;
  for (const auto& p : ply_->find("vertex")->properties) {
    if (!p.is_list && !is_coordinate(p.name) && !is_color_channel(p.name)) columns.push_back(p.name);
  }
  return columns;
}

bool Dataset::has_ply_colors() const {
  if (!ply_) return false;
  const io::PlyElement& vertex = *ply_->find("vertex");
  return find_channel(vertex, kRedNames) && find_channel(vertex, kGreenNames) && find_channel(vertex, kBlueNames);
}

Matrix Dataset::read_space(const std::string& key) const {
  if (kind_ == workflow::FileKind::kPly) {
    if (key != kSpacePly) {
      throw std::invalid_argument(path_.string() + ": a PLY cloud has only the space 'xyz' (asked for '" + key + "')");
    }
    return Matrix{n_, 3, io::vertex_positions(*ply_, path_.string())};
  }
  const io::H5adReader reader(path_);
  if (key == kSpaceX) {
    if (!has_x_) throw std::invalid_argument(path_.string() + ": X is absent");
    return from_dense(reader.read_x_dense());
  }
  if (std::find(obsm_keys_.begin(), obsm_keys_.end(), key) == obsm_keys_.end()) {
    throw std::invalid_argument(path_.string() + ": no obsm entry '" + key + "' (obsm: " + join(obsm_keys_) + ")");
  }
  return read_obsm_matrix(reader, key, n_);
}

std::size_t Dataset::space_width(const std::string& key) const {
  if (kind_ == workflow::FileKind::kPly) return key == kSpacePly ? 3 : 0;
  const auto at = std::find(obsm_keys_.begin(), obsm_keys_.end(), key);
  return at == obsm_keys_.end() ? 0 : obsm_cols_[static_cast<std::size_t>(at - obsm_keys_.begin())];
}

std::vector<std::string> Dataset::var_names() const {
  if (kind_ == workflow::FileKind::kPly) return {};
  return io::H5adReader(path_).var_names();
}

Matrix Dataset::read_x_genes(const std::vector<std::string>& genes) const {
  const io::H5adReader reader(path_);
  const std::vector<std::string> vars = reader.var_names();
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < vars.size(); ++i) index.emplace(vars[i], i);
  std::vector<std::size_t> columns;
  columns.reserve(genes.size());
  for (const std::string& gene : genes) {
    const auto it = index.find(gene);
    if (it == index.end()) throw std::invalid_argument(path_.string() + ": var has no gene '" + gene + "'");
    columns.push_back(it->second);
  }
  return from_dense(reader.read_x_columns(columns));
}

std::vector<float> Dataset::read_display(const std::string& key, const std::string& alignment_key) const {
  const Matrix m = read_space(key == kSpaceFirstThree ? alignment_key : key);
  std::vector<float> xyz(m.rows * 3, 0.0f);
  const std::size_t used = std::min<std::size_t>(3, m.cols);
  for (std::size_t i = 0; i < m.rows; ++i) {
    for (std::size_t c = 0; c < used; ++c) xyz[3 * i + c] = m.values[i * m.cols + c];
  }
  return xyz;
}

io::Column Dataset::read_column(const std::string& name) const {
  const std::vector<std::string> columns = color_columns();
  if (std::find(columns.begin(), columns.end(), name) == columns.end()) {
    throw std::invalid_argument(path_.string() + ": no column '" + name + "' (columns: " + join(columns) + ")");
  }
  if (kind_ == workflow::FileKind::kH5ad) return io::H5adReader(path_).read_obs(name);
  io::Column column;
  column.kind = io::Column::Kind::kNumeric;
  column.numbers = ply_->find("vertex")->find(name)->values;
  column.encoding = "ply property";
  return column;
}

workflow::Labels Dataset::read_labels(const std::string& column) const {
  const std::vector<std::string> columns = color_columns();
  if (std::find(columns.begin(), columns.end(), column) == columns.end()) {
    throw std::invalid_argument(path_.string() + ": no column '" + column + "' to transfer (columns: " +
                                join(columns) + ")");
  }
  return workflow::read_labels(as_point_cloud(alignment_spaces().front(), 0), column);
}

std::vector<std::uint8_t> Dataset::ply_colors() const {
  if (!has_ply_colors()) throw std::invalid_argument(path_.string() + ": the vertices carry no red, green, blue");
  const io::PlyElement& vertex = *ply_->find("vertex");
  const io::PlyProperty* channels[3] = {find_channel(vertex, kRedNames), find_channel(vertex, kGreenNames),
                                        find_channel(vertex, kBlueNames)};
  std::vector<std::uint8_t> rgb(n_ * 3);
  for (int c = 0; c < 3; ++c) {
    const bool unit = channels[c]->type == io::PlyType::kFloat32 || channels[c]->type == io::PlyType::kFloat64;
    const double scale = unit ? 255.0 : 1.0;
    for (std::size_t i = 0; i < n_; ++i) {
      const double v = std::clamp(channels[c]->values[i] * scale, 0.0, 255.0);
      rgb[3 * i + static_cast<std::size_t>(c)] = static_cast<std::uint8_t>(std::lround(v));
    }
  }
  return rgb;
}

workflow::PointCloud Dataset::as_point_cloud(const std::string& key, std::size_t d) const {
  workflow::PointCloud cloud;
  cloud.path = path_;
  cloud.kind = kind_;
  cloud.key = key;
  cloud.representation = kind_ == workflow::FileKind::kPly ? "vertex x,y,z" : key;
  cloud.file_rows = n_;
  cloud.rows.resize(n_);
  for (std::size_t i = 0; i < n_; ++i) cloud.rows[i] = i;
  cloud.names = names();
  cloud.d = d;
  cloud.ply = ply_;
  return cloud;
}

std::vector<std::string> common_alignment_spaces(const Dataset& source, const Dataset& target) {
  if (source.kind() != target.kind()) return {};
  const std::vector<std::string> theirs = target.alignment_spaces();
  std::vector<std::string> common;
  for (const std::string& key : source.alignment_spaces()) {
    if (std::find(theirs.begin(), theirs.end(), key) != theirs.end()) common.push_back(key);
  }
  return common;
}

std::pair<Matrix, Matrix> read_alignment_pair(const Dataset& source, const Dataset& target, const std::string& key) {
  if (source.kind() != target.kind()) {
    throw std::invalid_argument("source and target must both be .h5ad or both be PLY (" +
                                source.path().filename().string() + ", " + target.path().filename().string() + ")");
  }
  if (key == kSpaceX) {
    const std::vector<std::string> target_genes = target.var_names();
    const std::unordered_map<std::string, int> in_target = [&] {
      std::unordered_map<std::string, int> m;
      for (const auto& g : target_genes) m.emplace(g, 0);
      return m;
    }();
    std::vector<std::string> shared;
    for (const std::string& gene : source.var_names()) {
      if (in_target.count(gene) != 0) shared.push_back(gene);
    }
    if (shared.empty()) {
      throw std::invalid_argument("X: " + source.path().filename().string() + " and " +
                                  target.path().filename().string() + " share no gene (var names)");
    }
    return {source.read_x_genes(shared), target.read_x_genes(shared)};
  }
  Matrix x = source.read_space(key);
  Matrix y = target.read_space(key);
  if (x.cols != y.cols) {
    throw std::invalid_argument("space '" + key + "' has " + std::to_string(x.cols) + " columns in " +
                                source.path().filename().string() + " but " + std::to_string(y.cols) + " in " +
                                target.path().filename().string());
  }
  return {std::move(x), std::move(y)};
}

}  // namespace flashot::gui
