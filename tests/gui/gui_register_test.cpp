// Qt Test suite (QT_QPA_PLATFORM=offscreen, no display) for flashot-gui's registration and stacked-slices logic:
// the registration panel's code path (registration_input → TaskWorker → run_registration) on the bundled PLY pair
// checked against `flashot register` on the same files (its --report) and against the sample's known motion; the
// registered cloud saved and read back with every PLY property kept; saves onto inputs refused; cancel; the
// stacked slices built from samples/slice_a.h5ad and slice_b.h5ad with a coupling, a coupling file read back, and
// a small fused-GW slice alignment.

#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>

#include <nlohmann/json.hpp>

#include "alignment.hpp"
#include "dataset.hpp"
#include "flashot/io/anndata.hpp"
#include "flashot/io/ply.hpp"
#include "flashot/workflow/run_plan.hpp"
#include "registration.hpp"
#include "slice_stack.hpp"
#include "task_worker.hpp"

using namespace flashot;
using namespace flashot::gui;

namespace {

constexpr int kTimeoutMs = 600'000;  // registrations of 2,178 onto 3,000 points on 2 loaded cores
const std::filesystem::path kSamples = FLASHOT_SAMPLES_DIR;

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Runs `job` on a TaskWorker as the panel does and returns its result (null when cancelled or failed).
std::shared_ptr<const void> run_on_worker(TaskWorker::Job job, bool cancel_at_once = false) {
  TaskWorker worker;
  QSignalSpy finished(&worker, &TaskWorker::finished);
  QSignalSpy cancelled(&worker, &TaskWorker::cancelled);
  QSignalSpy failed(&worker, &TaskWorker::failed);
  QSignalSpy progress(&worker, &TaskWorker::progress);
  if (!worker.start(std::move(job))) return nullptr;
  if (cancel_at_once) worker.cancel();
  const bool ended = QTest::qWaitFor([&] { return !worker.busy() && finished.count() + cancelled.count() + failed.count() > 0; },
                                     kTimeoutMs);
  if (!ended) return nullptr;
  if (!failed.isEmpty()) qWarning("worker failed: %s", qPrintable(failed.first().first().toString()));
  if (finished.isEmpty()) return nullptr;
  if (!cancel_at_once && progress.isEmpty()) qWarning("no progress was reported");
  return finished.first().first().value<std::shared_ptr<const void>>();
}

/// Runs `job` on a TaskWorker and keeps every progress line; `cancel_when(line)` true makes the test press Cancel
/// (TaskWorker::cancel, as the window's button does) while the job runs.
struct WatchedRun {
  std::shared_ptr<const void> result;
  QStringList lines;
  bool cancelled = false, failed = false;
  int lines_at_cancel = -1;  ///< progress lines received when Cancel was pressed
};
WatchedRun run_watched(TaskWorker::Job job, const std::function<bool(const QString&)>& cancel_when = {}) {
  WatchedRun run;
  TaskWorker worker;
  QSignalSpy finished(&worker, &TaskWorker::finished);
  QSignalSpy cancelled(&worker, &TaskWorker::cancelled);
  QSignalSpy failed(&worker, &TaskWorker::failed);
  QObject::connect(&worker, &TaskWorker::progress, &worker, [&](const QString& text, int, int) {
    run.lines << text;
    if (cancel_when && run.lines_at_cancel < 0 && cancel_when(text)) {
      run.lines_at_cancel = int(run.lines.size());
      worker.cancel();
    }
  });
  if (!worker.start(std::move(job))) return run;
  if (!QTest::qWaitFor([&] { return !worker.busy() && finished.count() + cancelled.count() + failed.count() > 0; },
                       kTimeoutMs)) {
    qWarning("the job did not end within %d ms", kTimeoutMs);
    return run;
  }
  run.cancelled = !cancelled.isEmpty();
  run.failed = !failed.isEmpty();
  if (run.failed) qWarning("worker failed: %s", qPrintable(failed.first().first().toString()));
  if (!finished.isEmpty()) run.result = finished.first().first().value<std::shared_ptr<const void>>();
  return run;
}

/// `flashot register SCAN SHAPE -o DIR/cli.ply --report DIR/cli.json --backend cpu --quiet EXTRA…`'s report.
nlohmann::json cli_register_report(const std::filesystem::path& folder, const QStringList& extra = {}) {
  QProcess cli;
  cli.start(FLASHOT_CLI, QStringList{"register", QString::fromStdString((kSamples / "shape_scan.ply").string()),
                                     QString::fromStdString((kSamples / "shape.ply").string()), "-o",
                                     QString::fromStdString((folder / "cli.ply").string()), "--report",
                                     QString::fromStdString((folder / "cli.json").string()), "--backend", "cpu",
                                     "--quiet"} + extra);
  if (!cli.waitForFinished(kTimeoutMs) || cli.exitCode() != 0) {
    qWarning("flashot register failed: %s", cli.readAllStandardError().constData());
    return {};
  }
  return nlohmann::json::parse(read_bytes(folder / "cli.json"));
}

}  // namespace

class GuiRegisterTest : public QObject {
  Q_OBJECT

 private slots:
  void validation_names_field_and_value() {
    RegistrationParameters p;
    QVERIFY(validate(p).empty());
    p.model = "wobbly";
    p.anneal = 1.5;
    p.max_rounds = 0;
    const std::vector<std::string> problems = validate(p);
    QCOMPARE(problems.size(), std::size_t{3});
    QVERIFY(problems[0].find("'wobbly'") != std::string::npos);
    QVERIFY(problems[1].find("anneal must be in (0, 1) (got 1.5)") != std::string::npos);
    QVERIFY(problems[2].find("max rounds") != std::string::npos);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, registration_options(p));
  }

  void h5ad_space_must_be_three_columns() {
    const Dataset a = Dataset::open(kSamples / "slice_a.h5ad");
    const Dataset b = Dataset::open(kSamples / "slice_b.h5ad");
    try {
      registration_input(a, b, "spatial", {});
      QFAIL("a 2-column space was accepted");
    } catch (const std::invalid_argument& e) {
      QVERIFY2(std::string(e.what()).find("slice_a.h5ad has 2 columns in 'spatial'") != std::string::npos, e.what());
    }
  }

  // The panel's path on the sample scan and shape, against `flashot register` on the same files and the truth.
  void rigid_matches_cli_and_saves_every_property() {
    const Dataset scan = Dataset::open(kSamples / "shape_scan.ply");
    const Dataset shape = Dataset::open(kSamples / "shape.ply");
    RegistrationParameters p;  // the CLI's defaults
    p.backend = "cpu";
    auto input = std::make_shared<RegistrationInput>(registration_input(scan, shape, kSpacePly, p));
    const auto result = std::static_pointer_cast<const RegistrationOutcome>(run_on_worker(registration_job(input)));
    QVERIFY(result != nullptr);
    const RegistrationOutcome& o = *result;
    QVERIFY(o.transform.has_value());
    QVERIFY(o.converged);
    QCOMPARE(o.registered.size(), scan.size() * 3);

    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::filesystem::path folder = dir.path().toStdString();
    const nlohmann::json report = cli_register_report(folder);
    QVERIFY(!report.is_null());
    const auto& a = o.transform->linear;
    const auto& t = o.transform->translation;
    double worst = 0;
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) worst = std::max(worst, std::abs(report["transform"][r][c].get<double>() - a[3 * r + c]));
      worst = std::max(worst, std::abs(report["transform"][r][3].get<double>() - t[std::size_t(r)]));
    }
    qInfo("GUI vs CLI: largest transform entry difference %.3g; rotation %.4f vs %.4f degrees; rms %.6g vs %.6g",
          worst, o.rotation_degrees, report["rotation_degrees"].get<double>(), o.rms, report["rms"].get<double>());
    QVERIFY2(worst < 1e-4, qPrintable(QString::number(worst)));
    QVERIFY(std::abs(o.rms - report["rms"].get<double>()) < 1e-5);
    QVERIFY(std::abs(o.transported_mass - report["transported_mass"].get<double>()) < 1e-5);
    // The sample's truth (samples/README.md): scan = R·shape + t with R 30° about (1, 2, 3); the registration
    // recovers R⁻¹, 30° about −(1, 2, 3)/√14.
    QVERIFY2(std::abs(o.rotation_degrees - 30) < 0.5, qPrintable(QString::number(o.rotation_degrees)));
    const double axis[3] = {-1 / std::sqrt(14.0), -2 / std::sqrt(14.0), -3 / std::sqrt(14.0)};
    double dot = 0;
    for (int k = 0; k < 3; ++k) dot += axis[k] * o.rotation_axis[std::size_t(k)];
    QVERIFY2(dot > std::cos(M_PI / 180), qPrintable(QString::number(dot)));
    const std::string text = describe(o);
    QVERIFY(text.find("rotation 30.") != std::string::npos);
    QVERIFY(text.find("transported mass") != std::string::npos);

    // Saved and read back: every property of the scan kept, x, y, z moved, originals kept.
    const std::filesystem::path out = folder / "registered.ply";
    save_registered(scan, shape, o, out);
    const io::PlyFile original = io::read_ply(kSamples / "shape_scan.ply");
    const io::PlyFile saved = io::read_ply(out);
    const io::PlyElement& before = *original.find("vertex");
    const io::PlyElement& after = *saved.find("vertex");
    QCOMPARE(after.count, before.count);
    for (const io::PlyProperty& prop : before.properties) {
      const io::PlyProperty* kept = after.find(prop.name);
      QVERIFY2(kept != nullptr, prop.name.c_str());
      if (prop.name == "x" || prop.name == "y" || prop.name == "z") {
        QVERIFY(after.find(prop.name + "_original") != nullptr);
        QVERIFY(after.find(prop.name + "_original")->values == prop.values);
      } else {
        QVERIFY2(kept->values == prop.values, prop.name.c_str());
        QCOMPARE(int(kept->type), int(prop.type));
      }
    }
    const std::vector<float> moved = io::vertex_positions(saved);
    for (std::size_t i = 0; i < moved.size(); ++i) QCOMPARE(moved[i], o.registered[i]);
    // The CLI's output holds the same points (same transform within the tolerance above).
    const std::vector<float> cli_moved = io::vertex_positions(io::read_ply(folder / "cli.ply"));
    QCOMPARE(cli_moved.size(), moved.size());
    double far = 0;
    for (std::size_t i = 0; i < moved.size(); ++i) far = std::max(far, double(std::abs(moved[i] - cli_moved[i])));
    QVERIFY2(far < 1e-3, qPrintable(QString::number(far)));

    // A save onto an input is refused before anything is written; the input is untouched.
    const std::string scan_bytes = read_bytes(kSamples / "shape_scan.ply");
    QVERIFY_THROWS_EXCEPTION(workflow::PathError, save_registered(scan, shape, o, kSamples / "shape_scan.ply"));
    QVERIFY_THROWS_EXCEPTION(workflow::PathError, save_registered(scan, shape, o, kSamples / "." / "shape.ply"));
    QVERIFY(read_bytes(kSamples / "shape_scan.ply") == scan_bytes);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, save_registered(scan, shape, o, folder / "registered.h5ad"));
    // Nothing but the outputs in the folder (no temporary left behind).
    std::size_t files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) files += entry.is_regular_file();
    QCOMPARE(files, std::size_t{3});
  }

  // Multiscale on, as the panel runs it (its TaskWorker job, with a progress line at every check of every round's
  // solve), against `flashot register --multiscale on` on the same files: the same transform, bit for bit.
  void multiscale_on_matches_cli_exactly() {
    const Dataset scan = Dataset::open(kSamples / "shape_scan.ply");
    const Dataset shape = Dataset::open(kSamples / "shape.ply");
    RegistrationParameters p;
    p.backend = "cpu";
    p.multiscale = "on";
    auto input = std::make_shared<RegistrationInput>(registration_input(scan, shape, kSpacePly, p));
    const WatchedRun run = run_watched(registration_job(input));
    QVERIFY(!run.failed && !run.cancelled);
    const auto result = std::static_pointer_cast<const RegistrationOutcome>(run.result);
    QVERIFY(result != nullptr);
    const RegistrationOutcome& o = *result;
    QVERIFY(o.transform.has_value());
    // Every round's solve ran multiscale, and the panel heard its checks: the first round's coarser level settling
    // (9 × 12 block centres under the points) and the points' own checks with their marginal error.
    QVERIFY(!o.rounds.empty());
    QCOMPARE(o.multiscale_rounds, o.rounds.size());
    QVERIFY(std::any_of(run.lines.begin(), run.lines.end(), [](const QString& l) {
      return l.startsWith("round 1/60 · stage") && l.contains("(coarse level)") && l.contains("marginal error");
    }));
    QVERIFY(std::any_of(run.lines.begin(), run.lines.end(), [](const QString& l) {
      return l.startsWith("round 2/60 · stage 1/1 · ε") && l.contains("marginal error");
    }));
    const std::string text = describe(o);
    const std::string rounds_line = "multiscale (on): " + std::to_string(o.rounds.size()) + " of " +
                                    std::to_string(o.rounds.size()) + " rounds";
    QVERIFY2(text.find(rounds_line) != std::string::npos, text.c_str());

    QTemporaryDir dir;
    const std::filesystem::path folder = dir.path().toStdString();
    const nlohmann::json report = cli_register_report(folder, {"--multiscale", "on"});
    QVERIFY(!report.is_null());
    QCOMPARE(report["rounds"].size(), o.rounds.size());
    for (std::size_t k = 0; k < o.rounds.size(); ++k) {
      QVERIFY(report["rounds"][k]["multiscale"].get<bool>());
      QCOMPARE(report["rounds"][k]["iterations"].get<int>(), o.rounds[k].iterations);
    }
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) QCOMPARE(report["transform"][r][c].get<double>(), o.transform->linear[std::size_t(3 * r + c)]);
      QCOMPARE(report["transform"][r][3].get<double>(), o.transform->translation[std::size_t(r)]);
    }
    QCOMPARE(report["rms"].get<double>(), o.rms);
    QCOMPARE(report["transported_mass"].get<double>(), o.transported_mass);
    QCOMPARE(report["iterations"].get<int>(), o.iterations);
    qInfo("multiscale on: rotation %.4f degrees, rms %.6g, %zu rounds, %d iterations, %.1f s (CLI: %.1f s)",
          o.rotation_degrees, o.rms, o.rounds.size(), o.iterations, o.seconds, report["total_seconds"].get<double>());
    QVERIFY2(std::abs(o.rotation_degrees - 30) < 0.5, qPrintable(QString::number(o.rotation_degrees)));
  }

  // Cancel in the middle of a multiscale solve: the engine's progress callback returns false at the next check, and
  // the registration ends there — no further check, no round completed (rigid and nonrigid paths).
  void cancel_during_a_multiscale_solve_ends_it() {
    const Dataset scan = Dataset::open(kSamples / "shape_scan.ply");
    const Dataset shape = Dataset::open(kSamples / "shape.ply");
    for (const char* model : {"rigid", "nonrigid"}) {
      RegistrationParameters p;
      p.backend = "cpu";
      p.multiscale = "on";
      p.model = model;
      const RegistrationInput input = registration_input(scan, shape, kSpacePly, p);
      int rounds_done = 0, checks = 0, checks_after_stop = 0, stopped_in_round = 0;
      bool stop = false;
      const RegistrationOutcome o = run_registration(
          input, [&](int, int, double, double) { return ++rounds_done > 0; },
          [&](int round, const Progress& check) {
            if (stop) ++checks_after_stop;
            ++checks;
            // Stop at the first measured check of the coarser level: inside the multiscale solve of round 1.
            if (!stop && check.coarse && std::isfinite(check.marginal_error)) {
              stop = true;
              stopped_in_round = round;
              return false;
            }
            return true;
          });
      QVERIFY2(stop, model);
      QCOMPARE(stopped_in_round, 1);
      QCOMPARE(checks_after_stop, 0);
      QCOMPARE(rounds_done, 0);
      QVERIFY(o.cancelled);
      QVERIFY(o.rounds.empty());
    }
    // Through the panel's job: Cancel pressed at the first check of the coarser level ends the job as cancelled.
    RegistrationParameters p;
    p.backend = "cpu";
    p.multiscale = "on";
    auto input = std::make_shared<RegistrationInput>(registration_input(scan, shape, kSpacePly, p));
    const WatchedRun run = run_watched(registration_job(input), [](const QString& line) {
      return line.contains("(coarse level)") && line.contains("marginal error");
    });
    QVERIFY(run.lines_at_cancel > 0);
    QVERIFY(run.cancelled);
    QVERIFY(run.result == nullptr);
    qInfo("cancel: %d progress lines when Cancel was pressed, %lld in all", run.lines_at_cancel,
          static_cast<long long>(run.lines.size()));
  }

  void multiscale_choice_is_validated() {
    RegistrationParameters p;
    p.multiscale = "sometimes";
    const std::vector<std::string> problems = validate(p);
    QCOMPARE(problems.size(), std::size_t{1});
    QCOMPARE(problems[0], std::string("multiscale must be auto, on or off (got 'sometimes')"));
    p.multiscale = "off";
    QCOMPARE(registration_options(p).multiscale, Multiscale::kOff);
    p.model = "nonrigid";
    p.multiscale = "on";
    QCOMPARE(nonrigid_options(p).multiscale, Multiscale::kOn);
  }

  // The progress line at a check names the round, the stage (coarse level or the points), ε, the iteration and
  // the error; an intermediate stage (no error measured) leaves the error out.
  void check_text_names_round_stage_and_error() {
    Progress c;
    c.stage = 6;
    c.stage_count = 7;
    c.epsilon = 0.000592;
    c.iteration = 40;
    c.marginal_error = 0.0131;
    c.coarse = true;
    QCOMPARE(check_text(3, 60, c),
             QStringLiteral("round 3/60 · stage 7/7 (coarse level) · ε 0.000592 · iteration 40 · marginal error 1.31e-02"));
    c.coarse = false;
    c.marginal_error = std::numeric_limits<double>::quiet_NaN();
    QCOMPARE(check_text(3, 60, c), QStringLiteral("round 3/60 · stage 7/7 · ε 0.000592 · iteration 40"));
  }

  // Point sets from .h5ad obsm: a 3-column entry registers and saves as obsm <key>_flashot, X untouched.
  void h5ad_obsm_points_register_and_save() {
    QTemporaryDir dir;
    const std::filesystem::path folder = dir.path().toStdString();
    const std::vector<float> scan = io::vertex_positions(io::read_ply(kSamples / "shape_scan.ply"));
    const std::vector<float> shape = io::vertex_positions(io::read_ply(kSamples / "shape.ply"));
    auto with_points = [&](const char* slice, const std::vector<float>& points, const char* name) {
      const std::size_t n = io::H5adReader(kSamples / slice).n_obs();
      io::H5adContent add;
      add.obsm["X_points"] = io::DenseMatrix{n, 3, std::vector<float>(points.begin(), points.begin() + std::ptrdiff_t(3 * n))};
      io::write_h5ad_copy(kSamples / slice, folder / name, add);
      return Dataset::open(folder / name);
    };
    const Dataset a = with_points("slice_a.h5ad", scan, "a.h5ad");    // 1,200 scan points
    const Dataset b = with_points("slice_b.h5ad", shape, "b.h5ad");   // 1,500 shape points
    RegistrationParameters p;
    p.backend = "cpu";
    p.max_rounds = 5;
    const RegistrationInput input = registration_input(a, b, "X_points", p);
    QCOMPARE(input.source.size(), std::size_t{1200 * 3});
    const RegistrationOutcome o = run_registration(input, {});
    QVERIFY(o.transform.has_value());
    QCOMPARE(o.rounds.size(), std::size_t{5});
    save_registered(a, b, o, folder / "registered.h5ad");
    const io::H5adReader out(folder / "registered.h5ad");
    const io::DenseMatrix moved = out.read_obsm("X_points_flashot");
    QCOMPARE(moved.rows, std::size_t{1200});
    QCOMPARE(moved.cols, std::size_t{3});
    QVERIFY(moved.values == o.registered);
    QVERIFY(out.read_obsm("X_points").values == io::H5adReader(folder / "a.h5ad").read_obsm("X_points").values);
    QVERIFY(std::get<double>(out.read_uns("flashot_registration_rms")) == o.rms);
    QVERIFY(out.read_obs("cell_type").codes == io::H5adReader(kSamples / "slice_a.h5ad").read_obs("cell_type").codes);
  }

  void cancel_stops_a_registration() {
    const Dataset scan = Dataset::open(kSamples / "shape_scan.ply");
    const Dataset shape = Dataset::open(kSamples / "shape.ply");
    RegistrationParameters p;
    p.backend = "cpu";
    p.model = "nonrigid";
    auto input = std::make_shared<RegistrationInput>(registration_input(scan, shape, kSpacePly, p));
    QVERIFY(run_on_worker(registration_job(input), /*cancel_at_once=*/true) == nullptr);
  }

  void nonrigid_moves_the_scan_closer() {
    const Dataset scan = Dataset::open(kSamples / "shape_scan.ply");
    const Dataset shape = Dataset::open(kSamples / "shape.ply");
    RegistrationParameters p;
    p.backend = "cpu";
    p.model = "nonrigid";
    p.max_rounds = 12;
    p.reach = 0.1;
    auto input = std::make_shared<RegistrationInput>(registration_input(scan, shape, kSpacePly, p));
    const auto result = std::static_pointer_cast<const RegistrationOutcome>(run_on_worker(registration_job(input)));
    QVERIFY(result != nullptr);
    QVERIFY(!result->transform.has_value());
    QCOMPARE(result->control_points, std::size_t{200});
    QVERIFY(result->transported_mass > 0 && result->transported_mass <= 1.0001);
    QVERIFY(describe(*result).find("nonrigid field: 200 control points") != std::string::npos);
    // Mean distance from a registered point to the nearest shape point, against the scan as it was.
    auto mean_nearest = [&](const std::vector<float>& pts) {
      double sum = 0;
      for (std::size_t i = 0; i < pts.size() / 3; ++i) {
        double best = 1e30;
        for (std::size_t j = 0; j < input->target.size() / 3; ++j) {
          double s = 0;
          for (int k = 0; k < 3; ++k) s += std::pow(double(pts[3 * i + k]) - input->target[3 * j + k], 2);
          best = std::min(best, s);
        }
        sum += std::sqrt(best);
      }
      return sum / double(pts.size() / 3);
    };
    const double before = mean_nearest(input->source), after = mean_nearest(result->registered);
    qInfo("nonrigid: mean nearest distance %.4f -> %.4f", before, after);
    QVERIFY(after < 0.5 * before);  // the CLI's bar (tests/apps/cli_flow_test.cpp): at least halved
  }

  // The stacked view of the two sample slices, with the plain alignment's top-k coupling (X_pca) as the lines.
  void stacked_slices_from_samples() {
    const Dataset a = Dataset::open(kSamples / "slice_a.h5ad");
    const Dataset b = Dataset::open(kSamples / "slice_b.h5ad");
    const std::vector<std::string> keys = common_spatial_keys(a, b);
    QVERIFY(!keys.empty());
    QCOMPARE(keys.front(), std::string("spatial"));
    QVERIFY(std::find(keys.begin(), keys.end(), "X_pca") == keys.end());  // 10 columns: no slice coordinates

    AlignmentInput input;
    std::tie(input.source, input.target) = read_alignment_pair(a, b, "X_pca");
    input.parameters.backend = "cpu";
    input.parameters.top_k = 3;
    const AlignmentOutcome aligned = run_alignment(input, {});
    QCOMPARE(aligned.coupling.rows, a.size());

    const Matrix x = a.read_space("spatial"), y = b.read_space("spatial");
    SliceStackInput stack_input;
    stack_input.source.assign(x.values.begin(), x.values.end());
    stack_input.target.assign(y.values.begin(), y.values.end());
    stack_input.dims = 2;
    stack_input.spacing = 0.5;
    stack_input.coupling = &aligned.coupling;
    stack_input.max_lines = 700;
    const SliceStack stack = build_slice_stack(stack_input);
    QCOMPARE(stack.source_xyz.size(), a.size() * 3);
    QCOMPARE(stack.target_xyz.size(), b.size() * 3);
    QCOMPARE(stack.line_endpoints.size(), std::size_t{700 * 6});
    QCOMPARE(stack.line_rgba.size(), std::size_t{700 * 4});
    QVERIFY(stack.extent > 1000);  // µm, slices about 2 mm wide
    for (std::size_t i = 0; i < a.size(); ++i) QCOMPARE(stack.source_xyz[3 * i + 2], float(stack.gap));
    for (std::size_t j = 0; j < b.size(); ++j) QCOMPARE(stack.target_xyz[3 * j + 2], 0.0f);
    // Every line runs from the source plane down to the target plane; alpha falls with the weight.
    for (std::size_t l = 0; l < 700; ++l) {
      QCOMPARE(stack.line_endpoints[6 * l + 2], float(stack.gap));
      QCOMPARE(stack.line_endpoints[6 * l + 5], 0.0f);
    }
    QCOMPARE(int(stack.line_rgba[3]), 255);
    QVERIFY(stack.line_rgba[4 * 699 + 3] <= stack.line_rgba[3]);
    // Fewer lines asked, fewer drawn; the raw source is centred over the target.
    stack_input.max_lines = 50;
    QCOMPARE(build_slice_stack(stack_input).line_endpoints.size(), std::size_t{50 * 6});
    double mean_source[2] = {0, 0}, mean_target[2] = {0, 0};
    for (std::size_t i = 0; i < a.size(); ++i)
      for (int c = 0; c < 2; ++c) mean_source[c] += stack.source_xyz[3 * i + c] / double(a.size());
    for (std::size_t j = 0; j < b.size(); ++j)
      for (int c = 0; c < 2; ++c) mean_target[c] += stack.target_xyz[3 * j + c] / double(b.size());
    for (int c = 0; c < 2; ++c) QVERIFY(std::abs(mean_source[c] - mean_target[c]) < 1e-2 * stack.extent);
    // Aligned coordinates are drawn as given (here: the raw ones shifted by a known offset), or raw when toggled off.
    stack_input.source_aligned = stack_input.source;
    for (std::size_t i = 0; i < a.size(); ++i) stack_input.source_aligned[2 * i] += 100.0f;
    const SliceStack aligned_stack = build_slice_stack(stack_input);
    QVERIFY(aligned_stack.aligned);
    QCOMPARE(aligned_stack.source_xyz[0], stack_input.source[0] + 100.0f);
    stack_input.use_aligned = false;
    QVERIFY(!build_slice_stack(stack_input).aligned);
    stack_input.spacing = -1;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, build_slice_stack(stack_input));

    // The coupling as the CLI writes it (obs = source, var = target, CSR), read back into the same top-k.
    QTemporaryDir dir;
    const std::filesystem::path file = std::filesystem::path(dir.path().toStdString()) / "coupling.h5ad";
    io::SparseMatrix csr;
    csr.rows = a.size();
    csr.cols = b.size();
    csr.indptr.push_back(0);
    for (std::size_t i = 0; i < csr.rows; ++i) {
      std::vector<std::pair<std::int32_t, float>> row;
      for (std::size_t k = 0; k < aligned.coupling.k; ++k)
        row.emplace_back(aligned.coupling.columns[i * aligned.coupling.k + k], aligned.coupling.values[i * aligned.coupling.k + k]);
      std::sort(row.begin(), row.end());
      for (const auto& [j, v] : row) {
        csr.indices.push_back(j);
        csr.data.push_back(v);
      }
      csr.indptr.push_back(std::int64_t(csr.data.size()));
    }
    io::write_coupling_h5ad(file, a.names(), b.names(), csr);
    const TopKCoupling back = read_coupling(file, a.size(), b.size());
    QCOMPARE(back.rows, a.size());
    QCOMPARE(back.k, std::size_t{3});
    double mass = 0, mass_back = 0;
    for (float v : aligned.coupling.values) mass += v;
    for (float v : back.values) mass_back += v;
    QVERIFY(std::abs(mass - mass_back) < 1e-6 * mass);
    try {
      read_coupling(file, b.size(), a.size());
      QFAIL("a coupling of the wrong shape was accepted");
    } catch (const std::invalid_argument& e) {
      QVERIFY2(std::string(e.what()).find("1200 × 1500 but the slices have 1500 and 1200") != std::string::npos, e.what());
    }
  }

  // align --spatial's solve through the GUI's function, on the first cells of each sample slice (seconds).
  void small_slice_alignment_gives_aligned_coordinates_and_coupling() {
    const Dataset a = Dataset::open(kSamples / "slice_a.h5ad");
    const Dataset b = Dataset::open(kSamples / "slice_b.h5ad");
    auto head = [](Matrix m, std::size_t rows) {
      m.values.resize(rows * m.cols);
      m.rows = rows;
      return m;
    };
    const Matrix x = head(a.read_space("spatial"), 100), y = head(b.read_space("spatial"), 120);
    const Matrix u = head(a.read_space("X_pca"), 100), v = head(b.read_space("X_pca"), 120);
    SliceAlignParameters p;
    p.alpha = 0.5;
    p.top_k = 4;
    p.max_outer = 4;
    p.backend = "cpu";
    int calls = 0;
    const SliceAlignmentOutcome o = run_slice_alignment(x, y, &u, &v, p, [&](int, int, double) { return ++calls > 0; });
    QVERIFY(calls > 0);
    QCOMPARE(o.aligned.size(), std::size_t{100 * 2});
    QCOMPARE(o.coupling.rows, std::size_t{100});
    QVERIFY(o.outer_iterations <= 4);
    QCOMPARE(o.coupling.k, std::size_t{4});
    QVERIFY(std::isfinite(o.rms));
    // Cancelled at the first check: an empty outcome, no exception.
    QVERIFY(run_slice_alignment(x, y, &u, &v, p, [](int, int, double) { return false; }).aligned.empty());
    p.alpha = 0.5;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, run_slice_alignment(x, y, nullptr, nullptr, p, {}));
  }
};

QTEST_MAIN(GuiRegisterTest)
#include "gui_register_test.moc"
