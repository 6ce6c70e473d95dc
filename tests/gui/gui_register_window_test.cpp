// Qt Test suite (under xvfb-run) for the main window's registration panel and stacked-slices view, driven as a
// user would: Register runs off the UI thread and draws the registered cloud over the target with the transform in
// the panel; two sample slices stack in 3-D with their coupling lines, thinned by the Lines control, raw or aligned.

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTest>

#include <filesystem>

#include "flashot/io/anndata.hpp"
#include "main_window.hpp"
#include "point_cloud_scene.hpp"

using namespace flashot;
using namespace flashot::gui;

namespace {

constexpr int kTimeoutMs = 600'000;  // a registration of the samples on a loaded 2-core machine
const QString kSamples = QStringLiteral(FLASHOT_SAMPLES_DIR);

/// Pixels of the frame that differ from the background (the top-left pixel).
std::size_t drawn_pixels(const Frame& f) {
  std::size_t count = 0;
  for (std::size_t p = 0; p < f.rgb.size(); p += 3)
    count += f.rgb[p] != f.rgb[0] || f.rgb[p + 1] != f.rgb[1] || f.rgb[p + 2] != f.rgb[2];
  return count;
}

}  // namespace

class GuiRegisterWindowTest : public QObject {
  Q_OBJECT

 private slots:
  void register_draws_the_registered_cloud_and_the_transform() {
    MainWindow window;
    window.resize(1000, 700);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QVERIFY(window.open_source(kSamples + "/shape_scan.ply"));
    QVERIFY(window.open_target(kSamples + "/shape.ply"));
    auto* model = window.findChild<QComboBox*>("reg_model");
    auto* reg = window.findChild<QPushButton*>("register");
    auto* cancel = window.findChild<QPushButton*>("cancel");
    auto* align = window.findChild<QPushButton*>("align");
    auto* text = window.findChild<QPlainTextEdit*>("registration");
    QVERIFY(model && reg && cancel && align && text);
    QCOMPARE(model->currentText(), QString("rigid"));
    QVERIFY(reg->isEnabled());
    QTest::mouseClick(reg, Qt::LeftButton);
    // Off the UI thread: the window answers, Cancel is on, Register and Align are off until it ends.
    QVERIFY(cancel->isEnabled());
    QVERIFY(!reg->isEnabled());
    QVERIFY(!align->isEnabled());
    QVERIFY(QTest::qWaitFor([&] { return window.registration() != nullptr; }, kTimeoutMs));
    QVERIFY(reg->isEnabled());
    const RegistrationOutcome& r = *window.registration();
    QCOMPARE(window.scene().point_count(Layer::kMapped), std::size_t{2178});
    QCOMPARE(window.scene().point_count(Layer::kLinks), std::size_t{0});
    QVERIFY2(text->toPlainText().contains("rotation 30.0"), qPrintable(text->toPlainText()));
    QVERIFY(text->toPlainText().contains("transported mass"));
    QVERIFY(text->toPlainText().contains("translation ("));
    QVERIFY2(text->toPlainText().contains("multiscale (auto): not used (auto: n·m = "), qPrintable(text->toPlainText()));
    QVERIFY(std::abs(r.rotation_degrees - 30) < 0.5);
    const Frame frame = const_cast<PointCloudScene&>(window.scene()).render();
    QVERIFY(drawn_pixels(frame) > frame.rgb.size() / 3 / 100);

    // Multiscale on: while a round's solve runs, the progress line follows its checks (round, stage, ε, iteration),
    // and Cancel pressed then ends the run; the previous result stays.
    auto* multiscale = window.findChild<QComboBox*>("reg_multiscale");
    auto* progress = window.findChild<QLabel*>("progress_text");
    QVERIFY(multiscale && progress);
    QCOMPARE(multiscale->currentText(), QString("auto"));
    multiscale->setCurrentText("on");
    const RegistrationOutcome* before = window.registration();
    QTest::mouseClick(reg, Qt::LeftButton);
    QVERIFY(QTest::qWaitFor([&] { return progress->text().contains(" · stage ") || !cancel->isEnabled(); }, kTimeoutMs));
    QVERIFY2(progress->text().startsWith("round "), qPrintable(progress->text()));
    QTest::mouseClick(cancel, Qt::LeftButton);
    QVERIFY(QTest::qWaitFor([&] { return reg->isEnabled(); }, kTimeoutMs));
    QCOMPARE(progress->text(), QString("cancelled"));
    QVERIFY(window.registration() == before);
    multiscale->setCurrentText("auto");

    // A nonrigid registration started and cancelled at once leaves the previous result in place.
    model->setCurrentText("nonrigid");
    QTest::mouseClick(reg, Qt::LeftButton);
    QTest::mouseClick(cancel, Qt::LeftButton);
    QVERIFY(QTest::qWaitFor([&] { return reg->isEnabled(); }, kTimeoutMs));
    QCOMPARE(window.registration()->model, std::string("rigid"));
  }

  void h5ad_slices_cannot_be_registered_in_two_columns() {
    MainWindow window;
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QVERIFY(window.open_source(kSamples + "/slice_a.h5ad"));
    QVERIFY(window.open_target(kSamples + "/slice_b.h5ad"));
    window.findChild<QComboBox*>("reg_model")->setCurrentText("rigid");
    // "Align in" offers X_pca (10 columns) and spatial (2): neither is 3-D.
    window.register_clouds();
    auto* box = window.findChild<QMessageBox*>("error");
    QVERIFY(box != nullptr);
    QVERIFY2(box->text().contains("registration needs 3-D points"), qPrintable(box->text()));
    box->close();
    QVERIFY(window.registration() == nullptr);
  }

  void slices_stack_with_their_coupling() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::filesystem::path folder = dir.path().toStdString();
    const std::filesystem::path a = (kSamples + "/slice_a.h5ad").toStdString();
    const std::filesystem::path b = (kSamples + "/slice_b.h5ad").toStdString();
    // An aligned copy as align --spatial writes it (obsm spatial_flashot: here the raw coordinates + 500 in x),
    // and a coupling file with 3 entries per source cell of falling weight.
    const io::H5adReader reader(a);
    io::DenseMatrix spatial = reader.read_obsm("spatial");
    for (std::size_t i = 0; i < spatial.rows; ++i) spatial.values[i * spatial.cols] += 500.0f;
    io::H5adContent additions;
    additions.obsm["spatial_flashot"] = spatial;
    const std::filesystem::path aligned = folder / "slice_a_aligned.h5ad";
    io::write_h5ad_copy(a, aligned, additions);
    const std::size_t n = reader.n_obs(), m = io::H5adReader(b).n_obs();
    io::SparseMatrix csr;
    csr.rows = n;
    csr.cols = m;
    csr.indptr.push_back(0);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t k = 0; k < 3; ++k) {
        csr.indices.push_back(std::int64_t((i + k * 400) % m));
        csr.data.push_back(float(1.0 + double(i % 97) / (1.0 + double(k))));
      }
      std::vector<std::pair<std::int64_t, float>> row;
      for (std::size_t k = 0; k < 3; ++k) row.emplace_back(csr.indices[3 * i + k], csr.data[3 * i + k]);
      std::sort(row.begin(), row.end());
      for (std::size_t k = 0; k < 3; ++k) csr.indices[3 * i + k] = row[k].first, csr.data[3 * i + k] = row[k].second;
      csr.indptr.push_back(std::int64_t(csr.data.size()));
    }
    std::vector<std::string> source_names = reader.obs_names(), target_names = io::H5adReader(b).obs_names();
    io::write_coupling_h5ad(folder / "coupling.h5ad", source_names, target_names, csr);

    MainWindow window;
    window.resize(1000, 700);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QVERIFY(window.open_source(QString::fromStdString(aligned.string())));
    QVERIFY(window.open_target(QString::fromStdString(b.string())));
    auto* key = window.findChild<QComboBox*>("stack_key");
    QVERIFY(key != nullptr);
    QCOMPARE(key->count(), 1);  // spatial; spatial_flashot is the aligned copy, X_pca has 10 columns
    QCOMPARE(key->currentText(), QString("spatial"));
    QVERIFY(window.load_coupling(QString::fromStdString((folder / "coupling.h5ad").string())));
    window.findChild<QComboBox*>("color_by")->setCurrentText("cell_type");
    QVERIFY(window.set_stacked("spatial"));
    QVERIFY(window.stacked());
    QCOMPARE(window.scene().point_count(Layer::kSource), n);
    QCOMPARE(window.scene().point_count(Layer::kTarget), m);
    QCOMPARE(window.scene().point_count(Layer::kMapped), std::size_t{0});
    QCOMPARE(window.scene().point_count(Layer::kLinks), std::size_t{2000});  // the default, of 3,600
    QCOMPARE(window.stacked_lines(), std::size_t{2000});
    auto* info = window.findChild<QLabel*>("stack_info");
    QVERIFY2(info->text().contains("aligned (obsm spatial_flashot)"), qPrintable(info->text()));
    QVERIFY(info->text().contains("2000 lines from the coupling file"));
    const Frame stacked = const_cast<PointCloudScene&>(window.scene()).render();
    QVERIFY(drawn_pixels(stacked) > stacked.rgb.size() / 3 / 50);

    window.findChild<QSpinBox*>("stack_lines")->setValue(300);
    QCOMPARE(window.scene().point_count(Layer::kLinks), std::size_t{300});
    window.findChild<QSpinBox*>("stack_lines")->setValue(10'000);
    QCOMPARE(window.scene().point_count(Layer::kLinks), std::size_t{3 * n});  // every entry
    window.findChild<QCheckBox*>("stack_aligned")->setChecked(false);
    QVERIFY2(info->text().contains("raw"), qPrintable(info->text()));
    QCOMPARE(window.scene().point_count(Layer::kLinks), std::size_t{3 * n});
    window.findChild<QDoubleSpinBox*>("stack_spacing")->setValue(1.0);
    QVERIFY2(info->text().contains("(1 × extent"), qPrintable(info->text()));

    // Off again: the plain view, no lines (nothing was aligned here).
    window.findChild<QCheckBox*>("stack")->setChecked(false);
    QVERIFY(!window.stacked());
    QCOMPARE(window.scene().point_count(Layer::kLinks), std::size_t{0});
    QCOMPARE(window.scene().point_count(Layer::kSource), n);

    // A coupling of the wrong shape is refused with a dialog naming it; the one loaded stays.
    QVERIFY(!window.load_coupling(QString::fromStdString((folder / "slice_a_aligned.h5ad").string())));
    auto* box = window.findChild<QMessageBox*>("error");
    QVERIFY(box != nullptr);
    box->close();
  }
};

QTEST_MAIN(GuiRegisterWindowTest)
#include "gui_register_window_test.moc"
