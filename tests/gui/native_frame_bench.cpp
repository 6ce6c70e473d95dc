// Frame time of the flashot-gui scene drawn through QvtkNativeWidget (VTK in Qt's own GL context), to compare with
// flashot_gui_frame_bench (VTK offscreen, frame read back and shown as an image). Prints figures; no assertions.
// Usage: flashot_gui_native_frame_bench [points-per-cloud] [width] [height] [frames-per-case]. Needs an X display (xvfb-run).

#include <QApplication>
#include <QImage>
#include <QOpenGLContext>
#include <QOpenGLFunctions>
#include <QWindow>

#include <vtkGenericOpenGLRenderWindow.h>
#include <vtkRenderer.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "point_cloud_scene.hpp"
#include "qvtk_native_widget.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The same noisy torus knot as flashot_gui_frame_bench, so the figures compare.
void make_cloud(std::size_t n, unsigned seed, float shift, std::vector<float>& xyz, std::vector<std::uint8_t>& rgb) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 6.2831853f);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  xyz.resize(n * 3);
  rgb.resize(n * 3);
  for (std::size_t i = 0; i < n; ++i) {
    const float t = u(rng);
    const float r = 2.0f + std::cos(3.0f * t);
    xyz[3 * i] = r * std::cos(2.0f * t) + noise(rng) + shift;
    xyz[3 * i + 1] = r * std::sin(2.0f * t) + noise(rng);
    xyz[3 * i + 2] = std::sin(3.0f * t) + noise(rng);
    rgb[3 * i] = static_cast<std::uint8_t>(40 + 200 * t / 6.2831853f);
    rgb[3 * i + 1] = 90;
    rgb[3 * i + 2] = static_cast<std::uint8_t>(230 - 200 * t / 6.2831853f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'000'000;
  const int width = argc > 2 ? std::atoi(argv[2]) : 1280;
  const int height = argc > 3 ? std::atoi(argv[3]) : 800;
  const int frames = argc > 4 ? std::max(1, std::atoi(argv[4])) : 10;

  std::vector<float> source, target;
  std::vector<std::uint8_t> source_rgb, target_rgb;
  make_cloud(n, 1, 0.0f, source, source_rgb);
  make_cloud(n, 2, 0.5f, target, target_rgb);

  flashot::gui::PointCloudScene scene;
  scene.set_size(width, height);
  scene.set_points(flashot::gui::Layer::kSource, source, source_rgb);
  scene.set_points(flashot::gui::Layer::kTarget, target, target_rgb);
  scene.set_morph(source, target, source_rgb);
  scene.reset_camera();

  flashot::gui::QvtkNativeWidget widget;
  // The scene's renderer (its actors, level of detail and camera) is drawn by the native widget instead of the
  // scene's own offscreen window, which never renders here.
  widget.render_window()->AddRenderer(scene.renderer());
  // As the scene's own window: no multisampling (VTK's default of 8 samples costs ~2.5× per frame on llvmpipe).
  widget.render_window()->SetMultiSamples(0);
  widget.resize(width, height);
  widget.show();
  while (widget.windowHandle() == nullptr || !widget.windowHandle()->isExposed()) {
    QApplication::processEvents(QEventLoop::WaitForMoreEvents, 100);
  }
  std::printf("native widget: %zu points per cloud, 3 clouds, %dx%d\n", n, width, height);

  auto start = Clock::now();
  QImage frame = widget.grabFramebuffer();
  std::printf("first frame (uploads buffers), grabbed: %.1f ms\n", ms_since(start));
  std::size_t lit = 0;
  const QImage rgb = frame.convertToFormat(QImage::Format_RGB888);
  for (int y = 0; y < rgb.height(); ++y) {
    const auto* line = rgb.constScanLine(y);
    for (int x = 0; x < rgb.width(); ++x) {
      if (line[3 * x] != 255 || line[3 * x + 1] != 255 || line[3 * x + 2] != 255) ++lit;
    }
  }
  std::printf("non-background pixels: %.1f%%\n", 100.0 * static_cast<double>(lit) / (rgb.width() * rgb.height()));

  // Two figures per case: repaint() = render + blit + composition into the window, finished (glFinish), the cost
  // of a frame on screen; grabFramebuffer() = render + blit + read-back to a QImage, the image route's equivalent.
  auto measure = [&](const char* what, auto&& step) {
    double shown = 0, grabbed = 0, paint = 0;
    for (int i = 0; i < frames; ++i) {
      step(i);
      auto s = Clock::now();
      widget.repaint();
      widget.makeCurrent();
      QOpenGLContext::currentContext()->functions()->glFinish();
      shown += ms_since(s);
      paint += widget.last_frame_ms();
      step(i);
      s = Clock::now();
      widget.grabFramebuffer();
      grabbed += ms_since(s);
    }
    std::printf("%-40s on screen %7.1f ms (%5.1f frames/s; paintGL %7.1f ms)   grabbed %7.1f ms\n", what,
                shown / frames, 1000.0 * frames / shown, paint / frames, grabbed / frames);
  };
  measure("full detail, camera still", [](int) {});
  scene.set_interactive(true);
  for (std::size_t budget : {300'000u, 100'000u, 30'000u}) {
    scene.set_interactive_budget(budget);
    char label[64];
    std::snprintf(label, sizeof label, "level of detail, %zu points drawn", scene.points_drawn());
    measure(label, [](int) {});
  }
  scene.set_interactive(false);
  measure("t slider step, full detail", [&](int i) { scene.set_morph_t(0.05 * i); });
  widget.render_window()->RemoveRenderer(scene.renderer());
  return 0;
}
