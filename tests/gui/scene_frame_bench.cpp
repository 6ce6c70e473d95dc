// Frame time of the flashot-gui scene at large point counts (prints figures; no timed assertions).
// Usage: flashot_gui_frame_bench [points-per-cloud] [width] [height]. Needs an X display (xvfb-run).

#include "point_cloud_scene.hpp"

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

// A noisy torus knot: a shape with depth, so frames are not trivially cheap.
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
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'000'000;
  const int width = argc > 2 ? std::atoi(argv[2]) : 1280;
  const int height = argc > 3 ? std::atoi(argv[3]) : 800;
  constexpr int kFrames = 10;

  std::vector<float> source, target;
  std::vector<std::uint8_t> source_rgb, target_rgb;
  make_cloud(n, 1, 0.0f, source, source_rgb);
  make_cloud(n, 2, 0.5f, target, target_rgb);

  flashot::gui::PointCloudScene scene;
  scene.set_size(width, height);
  auto start = Clock::now();
  scene.set_points(flashot::gui::Layer::kSource, source, source_rgb);
  scene.set_points(flashot::gui::Layer::kTarget, target, target_rgb);
  scene.set_morph(source, target, source_rgb);
  scene.reset_camera();
  std::printf("scene: %zu points per cloud, 3 clouds, %dx%d; set-up %.1f ms\n", n, width, height, ms_since(start));

  start = Clock::now();
  flashot::gui::Frame frame = scene.render();
  std::printf("first frame (uploads buffers): %.1f ms\n", ms_since(start));
  std::size_t lit = 0;
  for (std::size_t p = 0; p < frame.rgb.size(); p += 3) {
    if (frame.rgb[p] != 255 || frame.rgb[p + 1] != 255 || frame.rgb[p + 2] != 255) ++lit;
  }
  std::printf("non-background pixels: %.1f%%\n", 100.0 * static_cast<double>(lit) / (frame.rgb.size() / 3.0));

  auto measure = [&](const char* what, auto&& step) {
    double total = 0, worst = 0;
    for (int i = 0; i < kFrames; ++i) {
      const auto s = Clock::now();
      step(i);
      scene.render();
      const double t = ms_since(s);
      total += t;
      worst = std::max(worst, t);
    }
    std::printf("%-44s mean %7.1f ms  worst %7.1f ms  (%.1f frames/s)\n", what, total / kFrames, worst,
                1000.0 * kFrames / total);
  };
  measure("full detail, camera still", [](int) {});
  scene.set_interactive(true);
  for (std::size_t budget : {300'000u, 100'000u, 30'000u}) {
    scene.set_interactive_budget(budget);
    char label[64];
    std::snprintf(label, sizeof label, "level of detail, %zu points drawn", scene.points_drawn());
    measure(label, [](int) {});
  }
  scene.set_interactive_budget(100'000);
  measure("t slider held, 100k points drawn", [&](int i) { scene.set_morph_t(0.1 * i); });
  scene.set_interactive(false);
  measure("t slider step, full detail", [&](int i) { scene.set_morph_t(0.1 * i); });
  return 0;
}
