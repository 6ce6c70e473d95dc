// Qt Test suite for flashot-gui's Qt logic (no VTK, no display: run with QT_QPA_PLATFORM=offscreen):
// data sets, parameter validation, colors, the alignment runner, the worker (finish, cancel, failure), the
// command line and saving.

#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <span>

#include <nlohmann/json.hpp>

#include "align_worker.hpp"
#include "alignment.hpp"
#include "colors.hpp"
#include "command_line.hpp"
#include "dataset.hpp"
#include "flashot/io/anndata.hpp"
#include "flashot/io/errors.hpp"
#include "flashot/io/ply.hpp"
#include "parameters.hpp"
#include "save.hpp"

using namespace flashot;
using namespace flashot::gui;

namespace {

constexpr unsigned kSeed = 20261129;
constexpr double kMapTolerance = 0.05;          // mapped points vs. the known shift, data units (shift 3)
constexpr double kLabelAccuracy = 0.95;         // two far-apart clusters: nearly every label must arrive
constexpr int kWorkerTimeoutMs = 120'000;       // a generous wait for a small solve on a loaded machine

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Two Gaussian clusters (labels 0 and 1) in d dimensions; the target is the source moved by `shift` on axis 0.
struct Clusters {
  Matrix x, y;
  std::vector<std::int32_t> x_labels, y_labels;
};

Clusters make_clusters(std::size_t n, std::size_t m, std::size_t d, float shift, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  Clusters c;
  auto fill = [&](Matrix& mat, std::vector<std::int32_t>& labels, std::size_t count, float offset) {
    mat = Matrix{count, d, std::vector<float>(count * d)};
    labels.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      labels[i] = static_cast<std::int32_t>(i % 2);
      for (std::size_t k = 0; k < d; ++k) mat.values[i * d + k] = noise(rng);
      mat.values[i * d + 1] += labels[i] == 0 ? -4.0f : 4.0f;  // the clusters sit far apart on axis 1
      mat.values[i * d] += offset;
    }
  };
  fill(c.x, c.x_labels, n, 0.0f);
  fill(c.y, c.y_labels, m, shift);
  return c;
}

std::vector<float> first_three(const Matrix& m) {
  std::vector<float> out(m.rows * 3, 0.0f);
  for (std::size_t i = 0; i < m.rows; ++i) {
    for (std::size_t c = 0; c < std::min<std::size_t>(3, m.cols); ++c) out[3 * i + c] = m.values[i * m.cols + c];
  }
  return out;
}

AlignmentInput cluster_input(std::size_t n, std::size_t m) {
  Clusters c = make_clusters(n, m, 4, 3.0f, kSeed);
  AlignmentInput input;
  input.source_display = first_three(c.x);
  input.target_display = first_three(c.y);
  input.source = std::move(c.x);
  input.target = std::move(c.y);
  input.parameters.backend = "cpu";
  input.parameters.blur = 0.3;
  workflow::Labels labels;
  labels.column = "cluster";
  labels.categories = {"left", "right"};
  labels.codes = c.y_labels;
  input.target_labels = labels;
  return input;
}

io::Column categorical(std::vector<std::int32_t> codes, std::vector<std::string> categories) {
  io::Column column;
  column.kind = io::Column::Kind::kCategorical;
  column.codes = std::move(codes);
  column.categories = std::move(categories);
  return column;
}

// A small .h5ad with obsm X_pca (5-d) and X_umap (2-d), X (n × 3), a categorical and a numeric obs column.
// Returns what it wrote.
io::H5adContent write_small_h5ad(const std::filesystem::path& path, std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  io::H5adContent content;
  for (std::size_t i = 0; i < n; ++i) content.obs_names.push_back("cell" + std::to_string(i));
  content.var_names = {"g1", "g2", "g3"};
  io::DenseMatrix x{n, 3, std::vector<float>(n * 3)};
  io::DenseMatrix pca{n, 5, std::vector<float>(n * 5)};
  io::DenseMatrix umap{n, 2, std::vector<float>(n * 2)};
  for (float& v : x.values) v = noise(rng);
  for (float& v : pca.values) v = noise(rng);
  for (float& v : umap.values) v = noise(rng);
  content.x_dense = x;
  content.obsm["X_pca"] = pca;
  content.obsm["X_umap"] = umap;
  std::vector<std::int32_t> codes(n);
  io::Column score;
  score.kind = io::Column::Kind::kNumeric;
  for (std::size_t i = 0; i < n; ++i) {
    codes[i] = static_cast<std::int32_t>(i % 3);
    score.numbers.push_back(0.5 * static_cast<double>(i));
  }
  content.obs["cell_type"] = categorical(codes, {"B", "T", "NK"});
  content.obs["score"] = score;
  io::write_h5ad(path, content);
  return content;
}

void write_colored_ply(const std::filesystem::path& path, std::size_t n) {
  std::vector<float> xyz(n * 3);
  for (std::size_t i = 0; i < n; ++i) {
    xyz[3 * i] = static_cast<float>(i);
    xyz[3 * i + 1] = static_cast<float>(i % 7);
    xyz[3 * i + 2] = 1.0f;
  }
  io::PlyFile ply = io::make_point_cloud(xyz, n);
  io::PlyElement& vertex = *ply.find("vertex");
  for (const char* name : {"red", "green", "blue"}) {
    io::PlyProperty p;
    p.name = name;
    p.type = io::PlyType::kUint8;
    p.values.assign(n, std::string(name) == "red" ? 200.0 : 10.0);
    vertex.properties.push_back(p);
  }
  io::PlyProperty intensity;
  intensity.name = "intensity";
  intensity.type = io::PlyType::kFloat32;
  for (std::size_t i = 0; i < n; ++i) intensity.values.push_back(0.1 * static_cast<double>(i));
  vertex.properties.push_back(intensity);
  io::write_ply(path, ply);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

class GuiCoreTest : public QObject {
  Q_OBJECT

 private slots:
  // ---- parameters ---------------------------------------------------------------------------------------------
  void defaults_are_valid() { QVERIFY(validate(AlignParameters{}).empty()); }

  void every_bad_parameter_is_named_with_its_value() {
    AlignParameters p;
    p.blur = -0.1;
    p.scaling = 1.5;
    p.reach = -2;
    p.tolerance = -1;
    p.max_iterations = 0;
    p.scheme = "sideways";
    p.backend = "abacus";
    p.top_k = 0;
    const std::vector<std::string> problems = validate(p);
    QCOMPARE(problems.size(), std::size_t{8});
    QVERIFY(contains(problems[0], "blur") && contains(problems[0], "-0.1"));
    QVERIFY(contains(problems[1], "scaling") && contains(problems[1], "1.5"));
    QVERIFY(contains(problems[2], "reach") && contains(problems[2], "-2"));
    QVERIFY(contains(problems[3], "tolerance"));
    QVERIFY(contains(problems[4], "max iterations") && contains(problems[4], "0"));
    QVERIFY(contains(problems[5], "sideways"));
    QVERIFY(contains(problems[6], "abacus"));
    QVERIFY(contains(problems[7], "top-k"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, solve_options(p));
  }

  void unavailable_backend_is_refused_by_name() {
    if (cuda_available()) QSKIP("CUDA is available here; the refusal needs a machine without it");
    AlignParameters p;
    p.backend = "cuda";
    const auto problems = validate(p);
    QCOMPARE(problems.size(), std::size_t{1});
    QVERIFY(contains(problems[0], "cuda") && contains(problems[0], "available: cpu"));
  }

  void automatic_blur_follows_the_diameter() {
    AlignParameters p;
    const SolveOptions o = solve_options(p);
    QCOMPARE(o.blur_relative, kDefaultBlurRelative);
    QCOMPARE(o.diameter, 0.0);  // the engine's own
    p.blur = 0.7;
    p.reach = 2.0;
    p.scheme = "alternating";
    const SolveOptions given = solve_options(p);
    QCOMPARE(given.blur, 0.7);
    QCOMPARE(given.blur_relative, 0.0);
    QCOMPARE(given.reach, 2.0);
    QVERIFY(given.scheme == Scheme::kAlternating);
    // Solved: ε = (0.05 × the diameter of both clouds)², and the outcome reports that diameter.
    AlignmentInput input = cluster_input(120, 100);
    input.parameters.blur = 0;  // automatic
    const AlignmentOutcome out = run_alignment(input, {});
    double squared = 0;
    for (std::size_t c = 0; c < input.source.cols; ++c) {
      float lo = INFINITY, hi = -INFINITY;
      for (const Matrix* m : {&input.source, &input.target}) {
        for (std::size_t i = 0; i < m->rows; ++i) {
          lo = std::min(lo, m->values[i * m->cols + c]);
          hi = std::max(hi, m->values[i * m->cols + c]);
        }
      }
      squared += double(hi - lo) * double(hi - lo);
    }
    QVERIFY(std::abs(out.diameter - std::sqrt(squared)) < 1e-5 * out.diameter);
    QVERIFY(std::abs(out.result.epsilon - std::pow(kDefaultBlurRelative * out.diameter, 2)) < 1e-5 * out.result.epsilon);
    // Points that all coincide have no scale: refused with a message, not solved.
    AlignmentInput flat = input;
    std::fill(flat.source.values.begin(), flat.source.values.end(), 1.0f);
    std::fill(flat.target.values.begin(), flat.target.values.end(), 1.0f);
    try {
      run_alignment(flat, {});
      QFAIL("coinciding points with an automatic blur must throw");
    } catch (const std::invalid_argument& e) {
      QVERIFY2(contains(e.what(), "diameter"), e.what());
    }
  }

  // ---- colors -------------------------------------------------------------------------------------------------
  void categories_get_distinct_colors_and_missing_is_gray() {
    const std::vector<std::int32_t> codes = {0, 1, 2, -1, 1};
    const Coloring c = categorical_coloring(codes, {"a", "b", "c"}, "type");
    QCOMPARE(c.legend.size(), std::size_t{4});  // three categories + (missing)
    QCOMPARE(c.legend[1].count, std::size_t{2});
    std::set<QRgb> distinct;
    for (std::size_t i = 0; i < 3; ++i) distinct.insert(QColor(c.rgb[3 * i], c.rgb[3 * i + 1], c.rgb[3 * i + 2]).rgb());
    QCOMPARE(distinct.size(), std::size_t{3});
    QCOMPARE(QColor(c.rgb[9], c.rgb[10], c.rgb[11]), kMissingColor);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, categorical_coloring(std::vector<std::int32_t>{5}, {"a"}, "t"));
  }

  void continuous_values_span_the_map() {
    const std::vector<double> values = {2.0, 4.0, std::nan(""), 3.0};
    const Coloring c = continuous_coloring(values, "score");
    QCOMPARE(c.kind, Coloring::Kind::kContinuous);
    QCOMPARE(c.min, 2.0);
    QCOMPARE(c.max, 4.0);
    QCOMPARE(QColor(c.rgb[0], c.rgb[1], c.rgb[2]), color_map(0.0));
    QCOMPARE(QColor(c.rgb[3], c.rgb[4], c.rgb[5]), color_map(1.0));
    QCOMPARE(QColor(c.rgb[6], c.rgb[7], c.rgb[8]), kMissingColor);
  }

  void a_column_in_both_files_gets_one_palette() {
    // Source has {B, T}, target {T, NK}: T must look the same on both sides, NK gets a new color.
    const io::Column a = categorical({0, 1}, {"B", "T"});
    const io::Column b = categorical({0, 1}, {"T", "NK"});
    const auto [first, second] = joint_coloring(&a, 2, &b, 2, "type");
    const QColor t_source(first.rgb[3], first.rgb[4], first.rgb[5]);
    const QColor t_target(second.rgb[0], second.rgb[1], second.rgb[2]);
    const QColor nk(second.rgb[3], second.rgb[4], second.rgb[5]);
    QCOMPARE(t_source, t_target);
    QVERIFY(nk != t_source);
    QCOMPARE(first.legend.size(), std::size_t{3});
    QCOMPARE(first.legend[1].label, std::string("T"));
    QCOMPARE(first.legend[1].count, std::size_t{2});
    // A column only one side has: the other side is drawn gray.
    const auto [only, absent] = joint_coloring(&a, 2, nullptr, 3, "type");
    QCOMPARE(absent.rgb.size(), std::size_t{9});
    QCOMPARE(QColor(absent.rgb[0], absent.rgb[1], absent.rgb[2]), kMissingColor);
  }

  void low_confidence_fades_to_gray() {
    const std::vector<std::int32_t> labels = {0, 0};
    const std::vector<float> confidence = {1.0f, 0.0f};
    const Coloring c = confidence_coloring(labels, confidence, {"x"}, "t");
    QCOMPARE(QColor(c.rgb[0], c.rgb[1], c.rgb[2]), palette_color(0));
    QCOMPARE(QColor(c.rgb[3], c.rgb[4], c.rgb[5]), kMissingColor);
  }

  // ---- data sets ----------------------------------------------------------------------------------------------
  void float_buffer_adopts_copies_and_resizes() {
    std::vector<float> values = {1.0f, 2.0f, 3.0f};
    const float* storage = values.data();
    const FloatBuffer adopted(std::move(values));
    QCOMPARE(adopted.data(), storage);  // an io or PLY read's vector is taken over, not copied
    FloatBuffer b = FloatBuffer::uninitialized(4);
    for (std::size_t i = 0; i < 4; ++i) b[i] = static_cast<float>(i) + 0.5f;
    const FloatBuffer copy = b;
    FloatBuffer moved = std::move(b);
    QCOMPARE(b.size(), std::size_t{0});  // a moved-from buffer is empty, not a dangling size
    QCOMPARE(copy.size(), std::size_t{4});
    QCOMPARE(copy[3], 3.5f);
    QVERIFY(copy.data() != moved.data());
    moved.resize(6);
    QCOMPARE(moved[2], 2.5f);
    QCOMPARE(moved[5], 0.0f);
    moved.resize(1);
    QCOMPARE(moved.size(), std::size_t{1});
    QCOMPARE(moved[0], 0.5f);
    const std::span<const float> view(moved);
    QCOMPARE(view.size(), std::size_t{1});
  }

  void h5ad_offers_its_spaces_and_columns() {
    QTemporaryDir dir;
    const std::filesystem::path path = dir.filePath("a.h5ad").toStdString();
    const io::H5adContent written = write_small_h5ad(path, 30, kSeed);
    const Dataset d = Dataset::open(path);
    QCOMPARE(d.size(), std::size_t{30});
    const std::vector<std::string> spaces = d.alignment_spaces();
    QCOMPARE(spaces.front(), std::string("X_pca"));
    QCOMPARE(std::count(spaces.begin(), spaces.end(), std::string(kSpaceX)), 1);
    QCOMPARE(d.display_spaces().front(), std::string("X_umap"));
    QCOMPARE(d.display_spaces().back(), std::string(kSpaceFirstThree));
    QCOMPARE(d.color_columns().size(), std::size_t{2});
    const std::vector<float> umap = d.read_display("X_umap", "X_pca");
    QCOMPARE(umap.size(), std::size_t{90});
    for (std::size_t i = 0; i < 30; ++i) QCOMPARE(umap[3 * i + 2], 0.0f);  // 2-D shown with z = 0
    const Matrix pca = d.read_space("X_pca");
    // read by HDF5 straight into memory nobody zero-filled: every value must be the one written, in place
    QCOMPARE(pca.rows, std::size_t{30});
    QCOMPARE(pca.cols, std::size_t{5});
    const std::vector<float>& pca_written = written.obsm.at("X_pca").values;
    QVERIFY(std::equal(pca.values.begin(), pca.values.end(), pca_written.begin(), pca_written.end()));
    const std::vector<float> first3 = d.read_display(kSpaceFirstThree, "X_pca");
    QCOMPARE(first3[3 * 7 + 2], pca.values[7 * 5 + 2]);
    try {
      d.read_space("X_nope");
      QFAIL("a missing obsm key must throw");
    } catch (const std::invalid_argument& e) {
      QVERIFY(contains(e.what(), "X_nope") && contains(e.what(), "X_pca") && contains(e.what(), "X_umap"));
    }
    const Coloring type = column_coloring(d.read_column("cell_type"), "cell_type");
    QCOMPARE(type.kind, Coloring::Kind::kCategorical);
    const Coloring score = column_coloring(d.read_column("score"), "score");
    QCOMPARE(score.kind, Coloring::Kind::kContinuous);
    const workflow::Labels labels = d.read_labels("cell_type");
    QCOMPARE(labels.categories.size(), std::size_t{3});
    QCOMPARE(labels.codes[4], 1);
  }

  void a_file_replaced_after_opening_is_refused_by_its_counts() {
    QTemporaryDir dir;
    const std::filesystem::path path = dir.filePath("cells.h5ad").toStdString();
    write_small_h5ad(path, 30, kSeed);
    const Dataset d = Dataset::open(path);
    write_small_h5ad(path, 40, kSeed + 1);  // another file under the same name, with more cells
    try {
      d.read_space("X_pca");
      QFAIL("obsm of a file that changed since it was opened must throw");
    } catch (const std::invalid_argument& e) {
      QVERIFY2(contains(e.what(), "40 rows now") && contains(e.what(), "30 cells"), e.what());
    }
  }

  void shared_genes_and_widths_are_checked() {
    QTemporaryDir dir;
    const std::filesystem::path a = dir.filePath("a.h5ad").toStdString();
    const std::filesystem::path b = dir.filePath("b.h5ad").toStdString();
    write_small_h5ad(a, 20, kSeed);
    write_small_h5ad(b, 25, kSeed + 1);
    const Dataset da = Dataset::open(a);
    const Dataset db = Dataset::open(b);
    const auto [x, y] = read_alignment_pair(da, db, kSpaceX);
    QCOMPARE(x.cols, std::size_t{3});
    QCOMPARE(y.rows, std::size_t{25});
    try {
      read_alignment_pair(da, db, "X_umap");  // present in both with the same width: fine
    } catch (...) {
      QFAIL("X_umap is in both files");
    }
  }

  void ply_offers_coordinates_colors_and_properties() {
    QTemporaryDir dir;
    const std::filesystem::path path = dir.filePath("c.ply").toStdString();
    write_colored_ply(path, 12);
    const Dataset d = Dataset::open(path);
    QCOMPARE(d.size(), std::size_t{12});
    QCOMPARE(d.alignment_spaces(), std::vector<std::string>{kSpacePly});
    QVERIFY(d.has_ply_colors());
    const std::vector<std::uint8_t> rgb = d.ply_colors();
    QCOMPARE(int(rgb[0]), 200);
    QCOMPARE(int(rgb[1]), 10);
    QCOMPARE(d.color_columns(), std::vector<std::string>{"intensity"});
    QCOMPARE(d.read_space(kSpacePly).values[3 * 5], 5.0f);
  }

  void bad_files_throw_with_the_path() {
    QTemporaryDir dir;
    const std::filesystem::path text = dir.filePath("notes.txt").toStdString();
    std::ofstream(text) << "hello";
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, Dataset::open(text));
    const std::filesystem::path broken = dir.filePath("broken.ply").toStdString();
    std::ofstream(broken) << "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nend_header\n1\n";
    try {
      Dataset::open(broken);
      QFAIL("a truncated PLY must throw");
    } catch (const std::exception& e) {
      QVERIFY(contains(e.what(), "broken.ply"));
    }
    const std::filesystem::path fake = dir.filePath("fake.h5ad").toStdString();
    std::ofstream(fake) << "not hdf5";
    try {
      Dataset::open(fake);
      QFAIL("a non-HDF5 .h5ad must throw");
    } catch (const std::exception& e) {
      QVERIFY(contains(e.what(), "fake.h5ad"));
    }
  }

  // ---- alignment ----------------------------------------------------------------------------------------------
  void alignment_maps_onto_the_shifted_copy_and_transfers_labels() {
    const AlignmentInput input = cluster_input(300, 260);
    const AlignmentOutcome out = run_alignment(input, {});
    QVERIFY(out.result.converged);
    QCOMPARE(out.mapped.size(), std::size_t{300 * 4});
    QCOMPARE(out.mapped_display.size(), std::size_t{300 * 3});
    // The mapped cloud must sit on the target: its mean moved by the shift (3 on axis 0).
    double moved = 0;
    for (std::size_t i = 0; i < 300; ++i) moved += out.mapped[i * 4] - input.source.values[i * 4];
    QVERIFY2(std::abs(moved / 300 - 3.0) < kMapTolerance, qPrintable(QString::number(moved / 300)));
    // The display mapping is the same barycentric map applied to the displayed target coordinates.
    QVERIFY(std::abs(out.mapped_display[3 * 10] - out.mapped[10 * 4]) < 1e-3);
    QVERIFY(out.transfer.has_value());
    std::size_t right = 0;
    const std::vector<std::int32_t> truth = make_clusters(300, 260, 4, 3.0f, kSeed).x_labels;
    for (std::size_t i = 0; i < 300; ++i) right += out.transfer->label[i] == truth[i] ? 1 : 0;
    QVERIFY(static_cast<double>(right) / 300 >= kLabelAccuracy);
    QCOMPARE(out.coupling.rows, std::size_t{300});
    QCOMPARE(out.coupling.k, std::size_t{3});
  }

  void coupling_lines_are_capped_and_fade_with_mass() {
    TopKCoupling c;
    c.rows = 3;
    c.k = 2;
    c.columns = {0, 1, 1, 0, 0, 1};
    c.values = {0.5f, 0.1f, 0.4f, 0.05f, 0.2f, 0.0f};
    const std::vector<float> from(9, 0.0f);
    const std::vector<float> to = {1, 0, 0, 0, 1, 0};
    const CouplingLines all = coupling_lines(c, from, to, 100);
    QCOMPARE(all.endpoints.size() / 6, std::size_t{5});  // the zero entry is not drawn
    const CouplingLines two = coupling_lines(c, from, to, 2);
    QCOMPARE(two.endpoints.size() / 6, std::size_t{2});
    QCOMPARE(int(two.rgba[3]), 255);                      // the heaviest line is opaque
    QVERIFY(two.rgba[7] < two.rgba[3]);                    // the next one fainter
    QCOMPARE(two.endpoints[3], 1.0f);                      // heaviest: row 0 → column 0 at (1, 0, 0)
  }

  void mismatched_inputs_are_refused() {
    AlignmentInput input = cluster_input(50, 40);
    input.target.cols = 3;
    input.target.values.resize(40 * 3);
    try {
      run_alignment(input, {});
      QFAIL("different widths must throw");
    } catch (const std::invalid_argument& e) {
      QVERIFY(contains(e.what(), "4") && contains(e.what(), "3"));
    }
  }

  // ---- worker -------------------------------------------------------------------------------------------------
  void worker_finishes_off_the_ui_thread_with_progress() {
    AlignWorker worker;
    QSignalSpy finished(&worker, &AlignWorker::finished);
    QSignalSpy progress(&worker, &AlignWorker::progress);
    QSignalSpy failed(&worker, &AlignWorker::failed);
    QVERIFY(worker.start(std::make_shared<AlignmentInput>(cluster_input(200, 180))));
    QVERIFY(worker.busy());
    QVERIFY(!worker.start(std::make_shared<AlignmentInput>(cluster_input(10, 10))));  // one at a time
    QVERIFY(finished.wait(kWorkerTimeoutMs));
    QCOMPARE(failed.count(), 0);
    QVERIFY(progress.count() >= 1);
    QVERIFY(!worker.busy());
    const auto outcome = finished.at(0).at(0).value<std::shared_ptr<const AlignmentOutcome>>();
    QVERIFY(outcome && outcome->result.converged);
  }

  void worker_cancels_at_the_next_check() {
    AlignWorker worker;
    QSignalSpy cancelled(&worker, &AlignWorker::cancelled);
    QSignalSpy finished(&worker, &AlignWorker::finished);
    AlignmentInput input = cluster_input(400, 400);
    input.parameters.tolerance = 0;  // never converges: only Cancel can end it early
    input.parameters.max_iterations = 1'000'000;
    connect(&worker, &AlignWorker::progress, &worker, [&worker] { worker.cancel(); });
    QVERIFY(worker.start(std::make_shared<AlignmentInput>(std::move(input))));
    QVERIFY(cancelled.wait(kWorkerTimeoutMs));
    QCOMPARE(finished.count(), 0);
    QVERIFY(!worker.busy());
  }

  void worker_turns_exceptions_into_a_message() {
    AlignWorker worker;
    QSignalSpy failed(&worker, &AlignWorker::failed);
    AlignmentInput input = cluster_input(20, 20);
    input.source.values[5] = std::nanf("");
    QVERIFY(worker.start(std::make_shared<AlignmentInput>(std::move(input))));
    QVERIFY(failed.wait(kWorkerTimeoutMs));
    const QString message = failed.at(0).at(0).toString();
    QVERIFY2(!message.isEmpty(), "the failure must say what went wrong");
  }

  // ---- command line -------------------------------------------------------------------------------------------
  void command_line_headless_mode() {
    const CommandLine c = parse_command_line({"flashot-gui", "a.h5ad", "b.h5ad", "--key", "X_pca", "--show", "X_umap",
                                              "--color-by", "cell_type", "--align", "--screenshot", "out.png",
                                              "--size", "800x600", "--blur", "0.5"});
    QVERIFY(c.headless() && c.align);
    QCOMPARE(c.key, QString("X_pca"));
    QCOMPARE(c.width, 800);
    QCOMPARE(*c.blur, 0.5);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_command_line({"flashot-gui", "a.h5ad", "--align"}));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_command_line({"flashot-gui", "--screenshot", "x.png"}));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_command_line({"flashot-gui", "a", "b", "c"}));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_command_line({"flashot-gui", "--size", "big"}));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_command_line({"flashot-gui", "--blur", "-1"}));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_command_line({"flashot-gui", "--frobnicate"}));
  }

  // ---- saving -------------------------------------------------------------------------------------------------
  void saves_report_coupling_and_aligned_copy() {
    QTemporaryDir dir;
    const std::filesystem::path a = dir.filePath("a.h5ad").toStdString();
    const std::filesystem::path b = dir.filePath("b.h5ad").toStdString();
    write_small_h5ad(a, 40, kSeed);
    write_small_h5ad(b, 30, kSeed + 1);
    const Dataset da = Dataset::open(a);
    const Dataset db = Dataset::open(b);
    AlignmentInput input;
    std::tie(input.source, input.target) = read_alignment_pair(da, db, "X_pca");
    input.parameters.backend = "cpu";
    input.target_labels = db.read_labels("cell_type");
    const AlignmentOutcome out = run_alignment(input, {});

    const std::filesystem::path report = dir.filePath("report.json").toStdString();
    save_report(da, db, "X_pca", out, report);
    const nlohmann::json json = nlohmann::json::parse(std::ifstream(report));
    for (const char* key : {"epsilon", "cost", "converged", "iterations", "marginal_error", "backend"}) {
      QVERIFY2(json.contains(key), key);
    }
    QCOMPARE(json["inputs"]["n"].get<int>(), 40);

    const std::filesystem::path coupling = dir.filePath("coupling.h5ad").toStdString();
    save_coupling(da, db, out, coupling);
    const io::H5adReader reader(coupling);
    QCOMPARE(reader.n_obs(), std::size_t{40});
    QCOMPARE(reader.n_vars(), std::size_t{30});

    const std::filesystem::path aligned = dir.filePath("aligned.h5ad").toStdString();
    save_aligned(da, db, "X_pca", out, aligned);
    const io::H5adReader copy(aligned);
    const io::DenseMatrix mapped = copy.read_obsm("X_pca_flashot");
    QCOMPARE(mapped.rows, std::size_t{40});
    QCOMPARE(mapped.cols, std::size_t{5});
    const auto columns = copy.obs_columns();
    QVERIFY(std::find(columns.begin(), columns.end(), "cell_type_flashot") != columns.end());
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, save_aligned(da, db, "X_pca", out, dir.filePath("x.ply").toStdString()));
    // An input is never a destination, however spelled (workflow::RunPlan, as the CLI checks it): the aligned copy
    // onto the target too, since save_aligned knows both inputs. The input keeps its bytes.
    const std::string target_bytes = read_bytes(b);
    for (const std::filesystem::path& onto : {b, b.parent_path() / "." / "b.h5ad"}) {
      try {
        save_aligned(da, db, "X_pca", out, onto);
        QFAIL("saving the aligned data onto the target must be refused");
      } catch (const std::invalid_argument& e) {
        QVERIFY2(contains(e.what(), "b.h5ad"), e.what());
      }
    }
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, save_report(da, db, "X_pca", out, b.parent_path() / "." / "b.h5ad"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, save_coupling(da, db, out, a));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, save_aligned(da, db, "X_pca", out, a));
    QCOMPARE(read_bytes(b), target_bytes);
    // Nothing is left behind but the four outputs and the two inputs.
    QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).size(), 5);
  }

  void saves_an_aligned_ply_with_the_original_coordinates_kept() {
    QTemporaryDir dir;
    const std::filesystem::path a = dir.filePath("a.ply").toStdString();
    const std::filesystem::path b = dir.filePath("b.ply").toStdString();
    write_colored_ply(a, 40);
    write_colored_ply(b, 30);
    const Dataset da = Dataset::open(a);
    const Dataset db = Dataset::open(b);
    AlignmentInput input;
    std::tie(input.source, input.target) = read_alignment_pair(da, db, kSpacePly);
    input.parameters.backend = "cpu";
    const AlignmentOutcome out = run_alignment(input, {});
    const std::filesystem::path aligned = dir.filePath("aligned.ply").toStdString();
    save_aligned(da, db, kSpacePly, out, aligned);
    const io::PlyFile ply = io::read_ply(aligned);
    const io::PlyElement* vertex = ply.find("vertex");
    QVERIFY(vertex != nullptr && vertex->count == 40);
    QVERIFY(vertex->find("x_original") != nullptr);
    QCOMPARE(vertex->find("x_original")->values[7], 7.0);          // the source's own coordinate
    QCOMPARE(vertex->find("x")->values[7], double(out.mapped[7 * 3]));  // replaced by the mapped one
    QVERIFY(vertex->find("red") != nullptr);                        // the source's other properties stay
    const std::filesystem::path png = dir.filePath("view.png").toStdString();
    QImage image(16, 8, QImage::Format_RGB888);
    image.fill(Qt::red);
    save_image(image, png);
    QCOMPARE(QImage(QString::fromStdString(png.string())).pixelColor(3, 3), QColor(Qt::red));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, save_image(image, dir.filePath("no/such/folder/x.png").toStdString()));
  }
};

QTEST_GUILESS_MAIN(GuiCoreTest)
#include "gui_core_test.moc"
