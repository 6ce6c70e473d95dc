// Qt Test suite for the VTK scene and its Qt adapter. Needs an X display (ctest runs it under xvfb-run): it
// checks pixels, not only that rendering ran, so a black or empty frame fails (docs/design.md §4).

#include <QApplication>
#include <QMouseEvent>
#include <QTest>
#include <QWheelEvent>

#include <vtkCamera.h>
#include <vtkRenderer.h>

#include <cmath>
#include <vector>

#include "point_cloud_scene.hpp"
#include "vtk_image_view.hpp"

using namespace flashot::gui;

namespace {

constexpr std::size_t kPoints = 4000;
constexpr int kWidth = 320;
constexpr int kHeight = 240;
constexpr double kMinCoverage = 0.01;  // a cloud of kPoints at point size 3 covers well over 1% of the frame
constexpr int kChannelSlack = 60;      // how far a pixel may be from a pure color and still count as it

struct Counts {
  std::size_t red = 0, blue = 0, green = 0, background = 0, black = 0, total = 0;
};

Counts count(const std::uint8_t* rgb, std::size_t pixels) {
  Counts c;
  c.total = pixels;
  for (std::size_t p = 0; p < pixels; ++p) {
    const int r = rgb[3 * p], g = rgb[3 * p + 1], b = rgb[3 * p + 2];
    if (r == 255 && g == 255 && b == 255) ++c.background;
    else if (r < 10 && g < 10 && b < 10) ++c.black;
    else if (r > 255 - kChannelSlack && g < kChannelSlack && b < kChannelSlack) ++c.red;
    else if (b > 255 - kChannelSlack && r < kChannelSlack && g < kChannelSlack) ++c.blue;
    else if (g > 255 - kChannelSlack && r < kChannelSlack && b < kChannelSlack) ++c.green;
  }
  return c;
}

Counts count(const Frame& f) { return count(f.rgb.data(), static_cast<std::size_t>(f.width) * f.height); }

Counts count(const QImage& image) {
  const QImage rgb = image.convertToFormat(QImage::Format_RGB888);
  std::vector<std::uint8_t> bytes;
  for (int y = 0; y < rgb.height(); ++y) {
    const auto* line = rgb.constScanLine(y);
    bytes.insert(bytes.end(), line, line + rgb.width() * 3);
  }
  return count(bytes.data(), static_cast<std::size_t>(rgb.width()) * rgb.height());
}

// A filled disc of points centred at (cx, 0, 0), radius 1, in one color.
void disc(float cx, std::uint8_t r, std::uint8_t g, std::uint8_t b, std::vector<float>& xyz,
          std::vector<std::uint8_t>& rgb) {
  xyz.clear();
  rgb.clear();
  const auto side = static_cast<std::size_t>(std::sqrt(static_cast<double>(kPoints)));
  for (std::size_t i = 0; i < side; ++i) {
    for (std::size_t j = 0; j < side; ++j) {
      const float u = -1.0f + 2.0f * static_cast<float>(i) / static_cast<float>(side - 1);
      const float v = -1.0f + 2.0f * static_cast<float>(j) / static_cast<float>(side - 1);
      if (u * u + v * v > 1.0f) continue;
      xyz.insert(xyz.end(), {cx + u, v, 0.0f});
      rgb.insert(rgb.end(), {r, g, b});
    }
  }
}

void two_discs(PointCloudScene& scene) {
  std::vector<float> xyz;
  std::vector<std::uint8_t> rgb;
  disc(-1.5f, 255, 0, 0, xyz, rgb);
  scene.set_points(Layer::kSource, xyz, rgb);
  disc(1.5f, 0, 0, 255, xyz, rgb);
  scene.set_points(Layer::kTarget, xyz, rgb);
  scene.set_point_size(3.0f);
  scene.set_size(kWidth, kHeight);
  scene.reset_camera();
}

}  // namespace

class GuiViewTest : public QObject {
  Q_OBJECT

 private slots:
  void scene_draws_each_cloud_in_its_colors() {
    PointCloudScene scene;
    two_discs(scene);
    const Frame f = scene.render();
    QCOMPARE(f.width, kWidth);
    QCOMPARE(f.height, kHeight);
    const Counts c = count(f);
    QVERIFY2(c.red > kMinCoverage * c.total, qPrintable(QString("red pixels %1").arg(c.red)));
    QVERIFY2(c.blue > kMinCoverage * c.total, qPrintable(QString("blue pixels %1").arg(c.blue)));
    QVERIFY2(c.background > c.total / 2, "the white background must show around the clouds");
    QCOMPARE(c.black, std::size_t{0});
    // Rows run top-down: the source disc (x < 0) is on the left half of the image.
    std::size_t red_left = 0;
    for (int y = 0; y < f.height; ++y) {
      for (int x = 0; x < f.width / 2; ++x) {
        const std::size_t p = 3 * (static_cast<std::size_t>(y) * f.width + x);
        red_left += f.rgb[p] > 200 && f.rgb[p + 2] < 60 ? 1 : 0;
      }
    }
    QCOMPARE(red_left, c.red);
  }

  void hidden_layers_leave_no_pixels() {
    PointCloudScene scene;
    two_discs(scene);
    scene.set_visible(Layer::kTarget, false);
    const Counts c = count(scene.render());
    QCOMPARE(c.blue, std::size_t{0});
    QVERIFY(c.red > kMinCoverage * c.total);
  }

  void morph_moves_the_mapped_points() {
    PointCloudScene scene;
    two_discs(scene);
    scene.set_visible(Layer::kSource, false);
    scene.set_visible(Layer::kTarget, false);
    std::vector<float> from, to;
    std::vector<std::uint8_t> rgb;
    disc(-1.5f, 0, 255, 0, from, rgb);
    disc(1.5f, 0, 255, 0, to, rgb);
    scene.set_morph(from, to, rgb);
    auto green_left_fraction = [&](double t) {
      scene.set_morph_t(t);
      const Frame f = scene.render();
      std::size_t left = 0, all = 0;
      for (int y = 0; y < f.height; ++y) {
        for (int x = 0; x < f.width; ++x) {
          const std::size_t p = 3 * (static_cast<std::size_t>(y) * f.width + x);
          if (f.rgb[p + 1] > 200 && f.rgb[p] < 60) {
            ++all;
            left += x < f.width / 2 ? 1 : 0;
          }
        }
      }
      return all == 0 ? -1.0 : static_cast<double>(left) / static_cast<double>(all);
    };
    QCOMPARE(green_left_fraction(0.0), 1.0);
    QCOMPARE(green_left_fraction(1.0), 0.0);
  }

  void level_of_detail_draws_fewer_points_but_still_draws() {
    PointCloudScene scene;
    two_discs(scene);
    const std::size_t all = scene.points_drawn();
    scene.set_interactive_budget(all / 10);
    scene.set_interactive(true);
    QVERIFY(scene.points_drawn() <= all / 10 + 2);
    const Counts c = count(scene.render());
    QVERIFY(c.red > 0 && c.blue > 0);
    scene.set_interactive(false);
    QCOMPARE(scene.points_drawn(), all);
  }

  // The coarse copy follows recoloring and the morph (it holds its own points and colors).
  void level_of_detail_follows_colors_and_the_morph() {
    PointCloudScene scene;
    two_discs(scene);
    scene.set_visible(Layer::kTarget, false);
    const std::size_t n = scene.point_count(Layer::kSource);
    scene.set_interactive_budget(n / 8);
    scene.set_interactive(true);
    std::vector<std::uint8_t> green(n * 3, 0);
    for (std::size_t i = 0; i < n; ++i) green[3 * i + 1] = 255;
    scene.set_colors(Layer::kSource, green);
    Counts c = count(scene.render());
    QVERIFY(c.green > 0);
    QCOMPARE(c.red, std::size_t{0});
    // A morph from the left disc to the right: the coarse mapped points move with t.
    std::vector<float> from, to;
    std::vector<std::uint8_t> rgb, unused;
    disc(-1.5f, 255, 0, 0, from, rgb);
    disc(1.5f, 255, 0, 0, to, unused);
    scene.set_visible(Layer::kSource, false);
    scene.set_morph(from, to, rgb);
    scene.set_interactive_budget(from.size() / 3 / 8);
    QVERIFY(scene.points_drawn() < from.size() / 3);
    auto red_left = [&] {
      const Frame f = scene.render();
      std::size_t left = 0, all = 0;
      for (int y = 0; y < f.height; ++y)
        for (int x = 0; x < f.width; ++x) {
          const std::uint8_t* p = &f.rgb[3 * (static_cast<std::size_t>(y) * f.width + x)];
          if (p[0] > 200 && p[1] < 60 && p[2] < 60) ++all, left += x < f.width / 2;
        }
      return all ? double(left) / double(all) : -1.0;
    };
    scene.set_morph_t(0);
    QVERIFY(red_left() > 0.9);
    scene.set_morph_t(1);
    QVERIFY(red_left() < 0.1);
  }

  // Still frames of more points than the still budget draw a subset; Full detail now draws them all.
  void still_frames_past_the_budget_draw_a_subset() {
    PointCloudScene scene;
    const std::size_t n = VtkImageView::kInitialStillPoints + 100'000;
    std::vector<float> xyz(n * 3);
    std::vector<std::uint8_t> rgb(n * 3, 0);
    for (std::size_t i = 0; i < n; ++i) {
      xyz[3 * i] = std::cos(0.001f * float(i)) * (1 + float(i) / float(n));
      xyz[3 * i + 1] = std::sin(0.001f * float(i)) * (1 + float(i) / float(n));
      rgb[3 * i] = 255;
    }
    scene.set_points(Layer::kSource, xyz, rgb);
    scene.set_size(kWidth, kHeight);
    scene.reset_camera();
    VtkImageView view(scene);
    view.resize(kWidth, kHeight);
    // The first frame, before the window is shown: nothing measured yet, so the initial still budget (below n)
    // holds. Once shown, the expose event's frame measures the renderer and a fast one may lift the budget past n
    // (then the next still frame draws everything): checking after show() made this test depend on the renderer's
    // speed (it failed on a 2-core CI run, 2026-12-01).
    view.render_now();
    QVERIFY(view.still_subset());
    QVERIFY(!scene.interactive());  // the lent budget is given back
    QVERIFY(count(view.frame()).red > kMinCoverage * kWidth * kHeight);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QVERIFY(count(view.composed_image()).red > kMinCoverage * kWidth * kHeight);
    view.render_full_now();
    QVERIFY(!view.still_subset());
    QVERIFY(view.still_budget() >= VtkImageView::kMinInteractivePoints);
  }

  void links_are_drawn_between_clouds() {
    PointCloudScene scene;
    two_discs(scene);
    scene.set_visible(Layer::kSource, false);
    scene.set_visible(Layer::kTarget, false);
    const std::vector<float> line = {-1.5f, 0.0f, 0.0f, 1.5f, 0.0f, 0.0f};
    const std::vector<std::uint8_t> rgba = {0, 0, 0, 255};
    scene.set_links(line, rgba);
    const Counts c = count(scene.render());
    // The segment spans 3 of the ~5.6 units the camera fits (the discs' bounding sphere): over a quarter of the
    // width, one pixel thick.
    QVERIFY2(c.black > static_cast<std::size_t>(kWidth / 4), "an opaque black line across the view");
  }

  void adapter_shows_the_frame_and_forwards_the_mouse() {
    PointCloudScene scene;
    two_discs(scene);
    VtkImageView view(scene);
    view.resize(kWidth, kHeight);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    view.render_now();
    QCOMPARE(view.frame().width(), static_cast<int>(std::lround(kWidth * view.devicePixelRatioF())));
    const Counts shown = count(view.composed_image());
    QVERIFY(shown.red > kMinCoverage * shown.total && shown.blue > kMinCoverage * shown.total);
    // What is on screen is the frame: grab the widget itself.
    const Counts grabbed = count(view.grab().toImage());
    QVERIFY(grabbed.red > kMinCoverage * grabbed.total);

    vtkCamera* camera = scene.renderer()->GetActiveCamera();
    double before[3];
    camera->GetPosition(before);
    const QPointF start(kWidth / 2.0, kHeight / 2.0);
    const QPointF end(kWidth / 2.0 + 80, kHeight / 2.0 + 30);
    QMouseEvent press(QEvent::MouseButtonPress, start, view.mapToGlobal(start), Qt::LeftButton, Qt::LeftButton,
                      Qt::NoModifier);
    QApplication::sendEvent(&view, &press);
    QVERIFY(scene.interactive());  // level of detail while the camera moves
    QMouseEvent move(QEvent::MouseMove, end, view.mapToGlobal(end), Qt::NoButton, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&view, &move);
    QMouseEvent release(QEvent::MouseButtonRelease, end, view.mapToGlobal(end), Qt::LeftButton, Qt::NoButton,
                        Qt::NoModifier);
    QApplication::sendEvent(&view, &release);
    QTRY_VERIFY(!scene.interactive());  // full detail once the motion has settled
    double after[3];
    camera->GetPosition(after);
    const double moved = std::hypot(after[0] - before[0], after[1] - before[1], after[2] - before[2]);
    QVERIFY2(moved > 1e-3, "a left-button drag must rotate the camera");

    const double distance = camera->GetDistance();
    QWheelEvent wheel(start, view.mapToGlobal(start), QPoint(), QPoint(0, 120), Qt::NoButton, Qt::NoModifier,
                      Qt::NoScrollPhase, false);
    QApplication::sendEvent(&view, &wheel);
    QVERIFY2(camera->GetDistance() < distance, "wheel forward must zoom in");
    QTRY_VERIFY(view.last_frame_ms() > 0);
  }
};

QTEST_MAIN(GuiViewTest)
#include "gui_view_test.moc"
