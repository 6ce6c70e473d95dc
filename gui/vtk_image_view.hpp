#pragma once
// The Qt adapter for PointCloudScene: a plain QWidget that shows the scene's offscreen frame as an image and
// drives the scene's VTK interactor style (trackball camera) with Qt's mouse, wheel and key events.
// No OpenGL context of Qt's is involved, so nothing of VTK's GL state has to be kept in step with Qt's
// (docs/gui.md explains why this route was chosen over a QOpenGLWidget adapter).

#include <QImage>
#include <QWidget>

#include <cstddef>
#include <functional>

class QPainter;
class QTimer;

namespace flashot::gui {

class PointCloudScene;

class VtkImageView : public QWidget {
  Q_OBJECT

 public:
  /// Frame time aimed at while the camera moves, and the bounds of the level-of-detail point budget.
  static constexpr double kInteractiveFrameMs = 50.0;
  static constexpr std::size_t kMinInteractivePoints = 30'000;
  static constexpr std::size_t kMaxInteractivePoints = 2'000'000;
  /// A still frame (camera at rest) draws every point when that fits in about kStillFrameMs at the measured cost
  /// per point; a larger scene (10⁷-point scans on a software renderer) is drawn still at the subset that fits, so
  /// the UI thread is never held for many seconds by one frame. Until a frame was measured, kInitialStillPoints.
  static constexpr double kStillFrameMs = 1000.0;
  static constexpr std::size_t kInitialStillPoints = 2'000'000;
  /// Full detail returns this long after the last camera motion, so a run of wheel steps or drags is drawn with
  /// level of detail throughout instead of paying a full frame after each one.
  static constexpr int kSettleMs = 300;

  /// `scene` must outlive the view.
  explicit VtkImageView(PointCloudScene& scene, QWidget* parent = nullptr);
  ~VtkImageView() override;

  /// Asks for a frame; requests made before the event loop gets to it are served by one render.
  void request_render();
  /// Renders now (blocking) at the widget's current size in device pixels.
  void render_now();
  /// Renders every point now, however long it takes (View ▸ Full detail now), even past the still budget.
  void render_full_now() {
    force_full_ = true;
    render_now();
  }
  /// Whether the last still frame drew a subset (the scene is larger than a still frame's budget).
  bool still_subset() const { return still_subset_; }
  std::size_t still_budget() const { return still_budget_; }
  /// The last frame, in device pixels.
  const QImage& frame() const { return frame_; }
  /// Wall time of the last render + read-back, milliseconds.
  double last_frame_ms() const { return last_frame_ms_; }
  /// Drawn over the frame after each paint (legends, color bars): painter in widget coordinates.
  void set_overlay(std::function<void(QPainter&, const QRect&)> overlay);
  /// The frame with the overlay drawn on it, as shown on screen (for screenshots).
  QImage composed_image();

 signals:
  void frame_rendered(double milliseconds);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;

 private:
  void forward_mouse(QMouseEvent* event, unsigned long vtk_event);
  void adapt_budget(std::size_t drawn);
  /// Points of the visible clouds at full detail.
  std::size_t visible_points() const;
  void on_interactor_render();
  void on_interaction_start();
  void on_interaction_end();

  PointCloudScene& scene_;
  QImage frame_;
  double last_frame_ms_ = 0;
  bool render_pending_ = false;
  std::size_t interactive_budget_ = 0;  ///< the moving-camera budget (the scene's budget is lent to still frames)
  std::size_t still_budget_ = kInitialStillPoints;
  bool still_subset_ = false;
  bool force_full_ = false;           ///< the last frame was a still frame drawn at still_budget_
  std::function<void(QPainter&, const QRect&)> overlay_;
  QTimer* settle_ = nullptr;
  unsigned long observer_tags_[3] = {0, 0, 0};
};

}  // namespace flashot::gui
