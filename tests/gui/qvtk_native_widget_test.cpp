// Qt Test suite for QvtkNativeWidget (VTK rendering in Qt's own GL context). Needs an X display (ctest runs it
// under xvfb-run). Every check is on the pixels of the widget's framebuffer, so a black or empty frame fails.

#include <QApplication>
#include <QImage>
#include <QMouseEvent>
#include <QTest>
#include <QVBoxLayout>
#include <QWheelEvent>

#include <vtkActor.h>
#include <vtkCamera.h>
#include <vtkCellArray.h>
#include <vtkGenericOpenGLRenderWindow.h>
#include <vtkNew.h>
#include <vtkPointData.h>
#include <vtkPoints.h>
#include <vtkPolyData.h>
#include <vtkPolyDataMapper.h>
#include <vtkProperty.h>
#include <vtkRenderer.h>
#include <vtkUnsignedCharArray.h>

#include <cmath>
#include <cstdlib>

#include "qvtk_native_widget.hpp"

using flashot::gui::QvtkNativeWidget;

namespace {

constexpr int kWidth = 320;
constexpr int kHeight = 240;
constexpr int kBackground[3] = {51, 76, 153};
constexpr int kBackgroundSlack = 8;    // per channel, for rounding of the background color
constexpr int kChannelSlack = 60;      // how far a pixel may be from a pure color and still count as it
constexpr double kMinBackground = 0.5;  // the discs cover well under half of the frame
constexpr double kMinDisc = 0.02;       // each disc of 2000 points at point size 4 covers ~5% of a 320×240 frame
constexpr int kDiscPoints = 2000;
constexpr double kMinCameraMove = 1e-3;  // world units; an 80-pixel drag moves the camera by far more
constexpr int kBlackLevel = 10;          // channels below this on all three count as black

struct Counts {
  long background = 0, red = 0, green = 0, yellow = 0, black = 0, total = 0;
  double share(long n) const { return static_cast<double>(n) / static_cast<double>(total); }
};

Counts count(const QImage& image) {
  const QImage rgb = image.convertToFormat(QImage::Format_RGB888);
  Counts c;
  c.total = static_cast<long>(rgb.width()) * rgb.height();
  for (int y = 0; y < rgb.height(); ++y) {
    const auto* line = rgb.constScanLine(y);
    for (int x = 0; x < rgb.width(); ++x) {
      const int r = line[3 * x], g = line[3 * x + 1], b = line[3 * x + 2];
      if (std::abs(r - kBackground[0]) < kBackgroundSlack && std::abs(g - kBackground[1]) < kBackgroundSlack &&
          std::abs(b - kBackground[2]) < kBackgroundSlack)
        ++c.background;
      else if (r < kBlackLevel && g < kBlackLevel && b < kBlackLevel) ++c.black;
      else if (r > 255 - kChannelSlack && g > 255 - kChannelSlack && b < kChannelSlack) ++c.yellow;
      else if (r > 255 - kChannelSlack && g < kChannelSlack && b < kChannelSlack) ++c.red;
      else if (g > 255 - kChannelSlack && r < kChannelSlack && b < kChannelSlack) ++c.green;
    }
  }
  return c;
}

// Share of the disc's color in the left, middle and right thirds of the frame.
double share_in_third(const QImage& image, int third, bool (*is)(int, int, int)) {
  const QImage rgb = image.convertToFormat(QImage::Format_RGB888);
  const int x0 = third * rgb.width() / 3, x1 = (third + 1) * rgb.width() / 3;
  long hits = 0;
  for (int y = 0; y < rgb.height(); ++y) {
    const auto* line = rgb.constScanLine(y);
    for (int x = x0; x < x1; ++x) hits += is(line[3 * x], line[3 * x + 1], line[3 * x + 2]) ? 1 : 0;
  }
  return static_cast<double>(hits) / (static_cast<double>(x1 - x0) * rgb.height());
}

bool is_red(int r, int g, int b) { return r > 255 - kChannelSlack && g < kChannelSlack && b < kChannelSlack; }
bool is_yellow(int r, int g, int b) {
  return r > 255 - kChannelSlack && g > 255 - kChannelSlack && b < kChannelSlack;
}

// Red, green and yellow filled discs of points, left to right, on a blue background.
class Scene {
 public:
  explicit Scene(QvtkNativeWidget& widget) {
    vtkNew<vtkPoints> points;
    vtkNew<vtkUnsignedCharArray> colors;
    colors->SetNumberOfComponents(3);
    vtkNew<vtkCellArray> verts;
    const unsigned char palette[3][3] = {{255, 0, 0}, {0, 255, 0}, {255, 255, 0}};
    for (int d = 0; d < 3; ++d) {
      for (int i = 0; i < kDiscPoints; ++i) {
        const double r = std::sqrt((i + 0.5) / kDiscPoints), a = i * 2.399963;  // golden-angle spiral
        const vtkIdType id = points->InsertNextPoint(-2.4 + 2.4 * d + r * std::cos(a), r * std::sin(a), 0.0);
        colors->InsertNextTypedTuple(palette[d]);
        verts->InsertNextCell(1, &id);
      }
    }
    poly->SetPoints(points);
    poly->SetVerts(verts);
    poly->GetPointData()->SetScalars(colors);
    mapper->SetInputData(poly);
    actor->SetMapper(mapper);
    actor->GetProperty()->SetPointSize(4);
    renderer->AddActor(actor);
    renderer->SetBackground(kBackground[0] / 255.0, kBackground[1] / 255.0, kBackground[2] / 255.0);
    widget.render_window()->AddRenderer(renderer);
    renderer->ResetCamera();
  }

  vtkNew<vtkPolyData> poly;
  vtkNew<vtkPolyDataMapper> mapper;
  vtkNew<vtkActor> actor;
  vtkNew<vtkRenderer> renderer;
};

void expect_drawn(const QImage& frame, int width, int height) {
  QCOMPARE(frame.width(), width);
  QCOMPARE(frame.height(), height);
  const Counts c = count(frame);
  QVERIFY2(c.background > kMinBackground * c.total, qPrintable(QString("background pixels %1 of %2 (black %3)")
                                                                   .arg(c.background)
                                                                   .arg(c.total)
                                                                   .arg(c.black)));
  QVERIFY2(c.share(c.red) > kMinDisc, qPrintable(QString("red share %1").arg(c.share(c.red))));
  QVERIFY2(c.share(c.green) > kMinDisc, qPrintable(QString("green share %1").arg(c.share(c.green))));
  QVERIFY2(c.share(c.yellow) > kMinDisc, qPrintable(QString("yellow share %1").arg(c.share(c.yellow))));
  QCOMPARE(c.black, 0L);
}

}  // namespace

class QvtkNativeWidgetTest : public QObject {
  Q_OBJECT

 private slots:
  void draws_background_and_points() {
    QvtkNativeWidget widget;
    Scene scene(widget);
    widget.resize(kWidth, kHeight);
    widget.show();
    QVERIFY(QTest::qWaitForWindowExposed(&widget));
    const QImage frame = widget.grabFramebuffer();
    expect_drawn(frame, kWidth, kHeight);
    if (QTest::currentTestFailed()) return;
    // Red on the left, yellow on the right: the frame is VTK's view, not a flipped or stale buffer.
    QVERIFY(share_in_third(frame, 0, is_red) > 3 * share_in_third(frame, 2, is_red) + kMinDisc);
    QVERIFY(share_in_third(frame, 2, is_yellow) > 3 * share_in_third(frame, 0, is_yellow) + kMinDisc);
    QVERIFY(widget.last_frame_ms() > 0);
  }

  void draws_after_resize() {
    QvtkNativeWidget widget;
    Scene scene(widget);
    widget.resize(kWidth, kHeight);
    widget.show();
    QVERIFY(QTest::qWaitForWindowExposed(&widget));
    expect_drawn(widget.grabFramebuffer(), kWidth, kHeight);
    if (QTest::currentTestFailed()) return;
    // A new size makes Qt recreate its framebuffer and VTK resize its own, in the same context.
    widget.resize(2 * kWidth, 2 * kHeight);
    QTest::qWait(50);
    expect_drawn(widget.grabFramebuffer(), 2 * kWidth, 2 * kHeight);
  }

  void draws_after_context_is_replaced() {
    // Moving the widget to another top-level window gives it a new GL context; VTK's objects of the old one
    // must be released and rebuilt, or the frame shows garbage.
    QWidget first, second;
    auto* layout_first = new QVBoxLayout(&first);
    auto* layout_second = new QVBoxLayout(&second);
    auto* widget = new QvtkNativeWidget;
    Scene scene(*widget);
    widget->setFixedSize(kWidth, kHeight);
    layout_first->addWidget(widget);
    first.show();
    QVERIFY(QTest::qWaitForWindowExposed(&first));
    expect_drawn(widget->grabFramebuffer(), kWidth, kHeight);
    if (QTest::currentTestFailed()) return;
    layout_second->addWidget(widget);
    second.show();
    QVERIFY(QTest::qWaitForWindowExposed(&second));
    expect_drawn(widget->grabFramebuffer(), kWidth, kHeight);
  }

  void mouse_and_wheel_move_the_camera() {
    QvtkNativeWidget widget;
    Scene scene(widget);
    widget.resize(kWidth, kHeight);
    widget.show();
    QVERIFY(QTest::qWaitForWindowExposed(&widget));
    const QImage before = widget.grabFramebuffer();
    vtkCamera* camera = scene.renderer->GetActiveCamera();
    double position[3];
    camera->GetPosition(position);

    QTest::mousePress(&widget, Qt::LeftButton, Qt::NoModifier, QPoint(kWidth / 2, kHeight / 2));
    for (int step = 1; step <= 10; ++step) {
      QMouseEvent move(QEvent::MouseMove, QPointF(kWidth / 2 + 8 * step, kHeight / 2), widget.mapToGlobal(QPointF()),
                       Qt::NoButton, Qt::LeftButton, Qt::NoModifier);
      QApplication::sendEvent(&widget, &move);
    }
    QTest::mouseRelease(&widget, Qt::LeftButton, Qt::NoModifier, QPoint(kWidth / 2 + 80, kHeight / 2));
    double rotated[3];
    camera->GetPosition(rotated);
    QVERIFY(std::abs(rotated[0] - position[0]) + std::abs(rotated[2] - position[2]) > kMinCameraMove);
    const QImage after_drag = widget.grabFramebuffer();
    QVERIFY(after_drag != before);
    QVERIFY(count(after_drag).background > kMinBackground * count(after_drag).total);

    const double distance = camera->GetDistance();
    QWheelEvent wheel(QPointF(kWidth / 2, kHeight / 2), widget.mapToGlobal(QPointF(kWidth / 2, kHeight / 2)),
                      QPoint(), QPoint(0, 120), Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
    QApplication::sendEvent(&widget, &wheel);
    QVERIFY(camera->GetDistance() < distance);
    // Closer camera, bigger discs: more colored pixels than before the zoom.
    const Counts zoomed = count(widget.grabFramebuffer());
    const Counts dragged = count(after_drag);
    QVERIFY(zoomed.red + zoomed.green + zoomed.yellow > dragged.red + dragged.green + dragged.yellow);
  }
};

QTEST_MAIN(QvtkNativeWidgetTest)
#include "qvtk_native_widget_test.moc"
