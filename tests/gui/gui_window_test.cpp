// Qt Test suite for the flashot-gui main window, driven as a user would (drops, buttons, slider), under
// xvfb-run: files open by drag-and-drop, a bad file shows a dialog and the program keeps its data, Align runs
// off the UI thread and fills the view, Cancel stops a solve, the t slider moves the mapped points.

#include <QApplication>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QDropEvent>
#include <QFile>
#include <QLabel>
#include <QMessageBox>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSlider>
#include <QTemporaryDir>
#include <QTest>
#include <QUrl>

#include "main_window.hpp"
#include "point_cloud_scene.hpp"

using namespace flashot::gui;

namespace {

constexpr int kSolveTimeoutMs = 300'000;  // the sample cells on a loaded 2-core machine
const QString kSamples = QStringLiteral(FLASHOT_SAMPLES_DIR);

void drop(QWidget* window, const QStringList& files) {
  auto* mime = new QMimeData;
  QList<QUrl> urls;
  for (const QString& f : files) urls << QUrl::fromLocalFile(f);
  mime->setUrls(urls);
  const QPointF at(window->width() / 2.0, window->height() / 2.0);
  QDragEnterEvent enter(at.toPoint(), Qt::CopyAction, mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(window, &enter);
  QVERIFY(enter.isAccepted());
  QDropEvent event(at, Qt::CopyAction, mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(window, &event);
  delete mime;
}

}  // namespace

class GuiWindowTest : public QObject {
  Q_OBJECT

 private slots:
  void dropped_files_open_and_a_bad_one_shows_a_dialog() {
    MainWindow window;
    window.resize(1000, 700);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    drop(&window, {kSamples + "/shape_scan.ply", kSamples + "/shape.ply"});
    QVERIFY(window.has_source() && window.has_target());
    QVERIFY(window.scene().point_count(Layer::kSource) > 0);
    QVERIFY(window.scene().point_count(Layer::kTarget) > 0);
    QVERIFY(window.findChild<QPushButton*>("align")->isEnabled());

    const QString missing = kSamples + "/no_such_cloud.ply";
    drop(&window, {missing});
    auto* box = window.findChild<QMessageBox*>("error");
    QVERIFY2(box != nullptr, "a bad file must show a dialog");
    QVERIFY(box->text().contains("no_such_cloud.ply"));
    QVERIFY(window.has_target());  // the target opened before is kept
    QVERIFY(window.scene().point_count(Layer::kTarget) > 0);
    box->close();
  }

  void align_fills_the_view_and_the_slider_moves_the_mapped_points() {
    MainWindow window;
    window.resize(1000, 700);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QVERIFY(window.open_source(kSamples + "/shape_scan.ply"));
    QVERIFY(window.open_target(kSamples + "/shape.ply"));
    auto* align = window.findChild<QPushButton*>("align");
    auto* cancel = window.findChild<QPushButton*>("cancel");
    QTest::mouseClick(align, Qt::LeftButton);
    QVERIFY(cancel->isEnabled());          // the solve runs on its thread: the UI answers meanwhile
    QVERIFY(!align->isEnabled());
    QTRY_VERIFY_WITH_TIMEOUT(window.has_alignment(), kSolveTimeoutMs);
    QVERIFY(!cancel->isEnabled());
    const std::size_t n = window.scene().point_count(Layer::kSource);
    QCOMPARE(window.scene().point_count(Layer::kMapped), n);
    QVERIFY(window.scene().point_count(Layer::kLinks) > 0);
    QVERIFY(!window.findChild<QPlainTextEdit*>("summary")->toPlainText().isEmpty());

    auto* t = window.findChild<QSlider*>("t");
    t->setValue(0);
    QCOMPARE(window.scene().morph_t(), 0.0);
    t->setValue(t->maximum());
    QCOMPARE(window.scene().morph_t(), 1.0);
  }

  void a_failed_solve_shows_its_message_and_the_window_keeps_working() {
    // Two clouds whose points all coincide: an automatic blur (relative to their diameter, 0) cannot be set, so
    // the solve fails on the worker thread. The message must reach a dialog, and the window must stay usable.
    QTemporaryDir dir;
    const QString source = dir.filePath("flat_source.ply"), target = dir.filePath("flat_target.ply");
    for (const QString& path : {source, target}) {
      QFile file(path);
      QVERIFY(file.open(QIODevice::WriteOnly));
      file.write("ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\nproperty float z\n"
                 "end_header\n1 2 3\n1 2 3\n1 2 3\n1 2 3\n");
    }
    MainWindow window;
    window.resize(1000, 700);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QVERIFY(window.open_source(source));
    QVERIFY(window.open_target(target));
    auto* align = window.findChild<QPushButton*>("align");
    QTest::mouseClick(align, Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(window.findChild<QMessageBox*>("error") != nullptr, kSolveTimeoutMs);
    auto* box = window.findChild<QMessageBox*>("error");
    QVERIFY2(box->text().contains("diameter"), qPrintable(box->text()));
    QCOMPARE(window.findChild<QLabel*>("progress_text")->text(), QString("failed"));
    QVERIFY(!window.has_alignment());
    QVERIFY(window.has_source() && window.has_target());  // the data stay loaded
    QVERIFY(align->isEnabled());
    box->close();
    QTRY_VERIFY(window.findChild<QMessageBox*>("error") == nullptr);  // WA_DeleteOnClose
    // Still usable: the same data with an explicit blur solve.
    window.findChild<QDoubleSpinBox*>("blur")->setValue(0.5);
    QTest::mouseClick(align, Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(window.has_alignment(), kSolveTimeoutMs);
    QVERIFY(window.findChild<QMessageBox*>("error") == nullptr);
  }

  void a_failed_load_keeps_the_data_already_open() {
    QTemporaryDir dir;
    const QString broken = dir.filePath("broken.ply");
    QFile file(broken);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write("ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nend_header\n1\nnot-a-number\n");
    file.close();
    MainWindow window;
    window.resize(1000, 700);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QVERIFY(window.open_source(kSamples + "/shape_scan.ply"));
    const std::size_t before = window.scene().point_count(Layer::kSource);
    QVERIFY(!window.open_source(broken));
    auto* box = window.findChild<QMessageBox*>("error");
    QVERIFY2(box != nullptr, "a malformed file must show a dialog");
    QVERIFY(box->text().contains("broken.ply"));
    QVERIFY(window.has_source());
    QCOMPARE(window.scene().point_count(Layer::kSource), before);
    box->close();
    QVERIFY(window.open_target(kSamples + "/shape.ply"));  // and the window goes on opening files
    QVERIFY(window.findChild<QPushButton*>("align")->isEnabled());
  }

  void cancel_stops_a_solve_and_the_window_keeps_working() {
    MainWindow window;
    window.resize(1000, 700);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QVERIFY(window.open_source(kSamples + "/shape_scan.ply"));
    QVERIFY(window.open_target(kSamples + "/shape.ply"));
    window.findChild<QDoubleSpinBox*>("tolerance")->setValue(0);  // only Cancel can end it before the budget
    QTest::mouseClick(window.findChild<QPushButton*>("align"), Qt::LeftButton);
    auto* progress = window.findChild<QLabel*>("progress_text");
    QTRY_VERIFY_WITH_TIMEOUT(progress->text().contains("iteration"), kSolveTimeoutMs);
    QTest::mouseClick(window.findChild<QPushButton*>("cancel"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(progress->text(), QString("cancelled"), kSolveTimeoutMs);
    QVERIFY(!window.has_alignment());
    QVERIFY(window.findChild<QPushButton*>("align")->isEnabled());
  }
};

QTEST_MAIN(GuiWindowTest)
#include "gui_window_test.moc"
