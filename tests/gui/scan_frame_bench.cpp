// Frame times of the registration view on a large scan (prints figures; no timed assertions): a target cloud and
// the registered source of N points each (a noisy sampled surface, like a LiDAR scan), the view flashot-gui shows
// after Register (target + registered source; the unregistered source hidden). Measures the upload, full-detail
// frames, and level-of-detail frames while the camera turns, for several interactive budgets.
// Usage: flashot_gui_scan_frame_bench [points-per-cloud] [width] [height] [frames]. Needs an X display (xvfb-run).

#include "point_cloud_scene.hpp"

#include <vtkCamera.h>
#include <vtkRenderer.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// A bumpy sphere sampled in scan order (latitude bands), colored by height.
void make_scan(std::size_t n, unsigned seed, float shift, std::vector<float>& xyz, std::vector<std::uint8_t>& rgb) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.004f);
  xyz.resize(n * 3);
  rgb.resize(n * 3);
  const double bands = std::sqrt(static_cast<double>(n));
  for (std::size_t i = 0; i < n; ++i) {
    const double band = std::floor(static_cast<double>(i) / bands);
    const double theta = M_PI * (band + 0.5) / bands;
    const double phi = 2 * M_PI * (static_cast<double>(i) - band * bands) / bands;
    const double r = 1 + 0.08 * std::sin(5 * theta) * std::cos(7 * phi);
    xyz[3 * i] = static_cast<float>(r * std::sin(theta) * std::cos(phi)) + noise(rng) + shift;
    xyz[3 * i + 1] = static_cast<float>(r * std::sin(theta) * std::sin(phi)) + noise(rng);
    xyz[3 * i + 2] = static_cast<float>(r * std::cos(theta)) + noise(rng);
    const double h = 0.5 + 0.5 * std::cos(theta);
    rgb[3 * i] = static_cast<std::uint8_t>(40 + 200 * h);
    rgb[3 * i + 1] = 110;
    rgb[3 * i + 2] = static_cast<std::uint8_t>(230 - 200 * h);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10'000'000;
  const int width = argc > 2 ? std::atoi(argv[2]) : 1280;
  const int height = argc > 3 ? std::atoi(argv[3]) : 800;
  const int frames = argc > 4 ? std::atoi(argv[4]) : 5;

  std::vector<float> source, target;
  std::vector<std::uint8_t> source_rgb, target_rgb;
  auto start = Clock::now();
  make_scan(n, 1, 0.0f, source, source_rgb);
  make_scan(n, 2, 0.02f, target, target_rgb);
  std::printf("data: 2 x %zu points generated in %.0f ms\n", n, ms_since(start));

  flashot::gui::PointCloudScene scene;
  scene.set_size(width, height);
  start = Clock::now();
  scene.set_points(flashot::gui::Layer::kSource, source, source_rgb);
  scene.set_points(flashot::gui::Layer::kTarget, target, target_rgb);
  scene.set_morph(source, source, source_rgb);  // the registered cloud (here: the source itself)
  scene.set_visible(flashot::gui::Layer::kSource, false);
  scene.reset_camera();
  std::printf("scene: target + registered source, %zu points each, %dx%d; set-up %.0f ms\n", n, width, height,
              ms_since(start));

  start = Clock::now();
  scene.render();
  std::printf("first frame (uploads buffers): %.0f ms\n", ms_since(start));
  vtkCamera* camera = scene.renderer()->GetActiveCamera();
  auto measure = [&](const char* what, bool turn) {
    double total = 0, worst = 0;
    for (int i = 0; i < frames; ++i) {
      const auto s = Clock::now();
      if (turn) camera->Azimuth(3);
      scene.render();
      const double t = ms_since(s);
      total += t;
      worst = std::max(worst, t);
    }
    std::printf("%-52s mean %8.1f ms  worst %8.1f ms  (%.1f frames/s)\n", what, total / frames, worst,
                1000.0 * frames / total);
  };
  measure("full detail, camera still", false);
  scene.set_interactive(true);
  for (std::size_t budget : {2'000'000u, 1'000'000u, 300'000u, 100'000u}) {
    const auto s = Clock::now();
    scene.set_interactive_budget(budget);
    const double rebuild = ms_since(s);
    char label[96];
    std::snprintf(label, sizeof label, "LOD, camera turning, %zu drawn (subset %.0f ms)", scene.points_drawn(), rebuild);
    measure(label, true);
  }
  scene.set_interactive(false);
  measure("full detail, camera turning", true);
  return 0;
}
