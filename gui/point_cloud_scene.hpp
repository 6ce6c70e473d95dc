#pragma once
// The 3-D scene of flashot-gui, in VTK only (no Qt): source, target and mapped-source point clouds plus coupling
// lines, rendered offscreen in VTK's own OpenGL context and read back as an RGB image. The Qt side
// (vtk_image_view.hpp) shows that image and feeds mouse/keyboard events to the interactor this scene owns.
// Why offscreen + read-back rather than a QOpenGLWidget adapter: see docs/gui.md (VTK 9.1 rendered nothing into a
// Qt 6 context; the read-back costs ~1 ms per frame at 1280×800).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

class vtkRenderWindow;
class vtkRenderWindowInteractor;
class vtkRenderer;

namespace flashot::gui {

enum class Layer { kSource = 0, kTarget = 1, kMapped = 2, kLinks = 3 };
inline constexpr int kLayerCount = 4;

/// An RGB image read back from the render window, top row first (QImage::Format_RGB888 layout, no row padding).
struct Frame {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> rgb;  ///< width·height·3
};

/// Per-point colors: n·3 bytes, RGB.
using Rgb = std::vector<std::uint8_t>;

class PointCloudScene {
 public:
  /// Points drawn, all clouds together, while the camera moves (level of detail); all points are drawn once it
  /// stops. The view adapts it to the measured frame time (set_interactive_budget).
  static constexpr std::size_t kDefaultInteractiveBudget = 300'000;

  PointCloudScene();
  ~PointCloudScene();
  PointCloudScene(const PointCloudScene&) = delete;
  PointCloudScene& operator=(const PointCloudScene&) = delete;

  /// Replaces a point layer (kSource, kTarget, kMapped): xyz is n·3, rgb n·3. Throws std::invalid_argument on
  /// size mismatch or for kLinks.
  void set_points(Layer layer, std::span<const float> xyz, std::span<const std::uint8_t> rgb);
  /// Recolors a point layer without touching positions (rgb n·3 of the layer's n).
  void set_colors(Layer layer, std::span<const std::uint8_t> rgb);
  /// The mapped layer moves between `from` (t = 0) and `to` (t = 1), both n·3; colors rgb n·3.
  void set_morph(std::span<const float> from, std::span<const float> to, std::span<const std::uint8_t> rgb);
  void set_morph_t(double t);
  double morph_t() const;
  /// Line segments: endpoints is L·6 (x0 y0 z0 x1 y1 z1), rgba L·4 (alpha carries the coupling mass).
  void set_links(std::span<const float> endpoints, std::span<const std::uint8_t> rgba);
  void clear(Layer layer);
  void set_visible(Layer layer, bool visible);
  bool visible(Layer layer) const;
  std::size_t point_count(Layer layer) const;
  void set_point_size(float pixels);
  void set_background(double r, double g, double b);
  /// Level of detail on (camera moving) or off.
  void set_interactive(bool interactive);
  bool interactive() const;
  /// Total points drawn while interactive (clamped to ≥ 1); every cloud keeps every k-th point, one k for all.
  void set_interactive_budget(std::size_t points);
  std::size_t interactive_budget() const;
  /// Points the next frame draws (all visible clouds, after level of detail).
  std::size_t points_drawn() const;
  void reset_camera();
  /// Looks at the scene from `elevation_degrees` below the +z axis (0 = straight down the z axis, y up), turned
  /// by `azimuth_degrees` about the view-up, then fits the camera to the data: the stacked slices' oblique view.
  void set_oblique_view(double elevation_degrees, double azimuth_degrees);

  void set_size(int width, int height);
  /// Renders one frame and reads it back.
  Frame render();

  vtkRenderWindow* render_window() const;
  vtkRenderWindowInteractor* interactor() const;
  vtkRenderer* renderer() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashot::gui
