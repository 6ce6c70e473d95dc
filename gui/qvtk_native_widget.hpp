#pragma once
// A QOpenGLWidget hosting a vtkGenericOpenGLRenderWindow: VTK 9.1 renders in Qt 6's own GL context, into VTK's
// framebuffers, and each paintGL() blits VTK's frame into the widget's framebuffer (no read-back to the CPU).
// Qt mouse, wheel and key events drive a trackball-camera interactor style.
//
// The one rule that makes it draw (docs/gui.md, "The native QOpenGLWidget adapter"): VTK's MakeCurrent request
// must not rebind a framebuffer behind vtkOpenGLState's back. QOpenGLWidget::makeCurrent() binds the widget's
// framebuffer with a raw glBindFramebuffer; VTK calls MakeCurrent() while it builds its own framebuffers, so its
// cached binding went stale and its color and depth attachments landed in the widget's framebuffer, leaving VTK's
// framebuffer without attachments and every frame black. The widget therefore answers MakeCurrent only when Qt's
// context is not already current, and renders only inside paintGL(), where it is.

#include <QOpenGLWidget>
#include <QSurfaceFormat>

class vtkGenericOpenGLRenderWindow;
class vtkGenericRenderWindowInteractor;
class vtkObject;
class vtkRenderWindowInteractor;

namespace flashot::gui {

class QvtkNativeWidget : public QOpenGLWidget {
  Q_OBJECT

 public:
  /// What VTK 9.1 needs from Qt's context (OpenGL 3.2 core, depth and stencil). Pass it to
  /// QSurfaceFormat::setDefaultFormat() before the QApplication is created; the widget also requests it.
  static QSurfaceFormat default_format();

  explicit QvtkNativeWidget(QWidget* parent = nullptr);
  ~QvtkNativeWidget() override;
  QvtkNativeWidget(const QvtkNativeWidget&) = delete;
  QvtkNativeWidget& operator=(const QvtkNativeWidget&) = delete;

  /// Add renderers here. Render by calling update() (or let the interactor ask); calling Render() on the window
  /// outside paintGL() is not supported.
  vtkGenericOpenGLRenderWindow* render_window() const;
  /// Trackball-camera interactor fed by the widget's Qt events; its render requests become update().
  vtkRenderWindowInteractor* interactor() const;
  /// Wall time of the last paintGL(): VTK's render and the blit, milliseconds (GL work still queued in the driver
  /// is not included; grabFramebuffer() waits for it).
  double last_frame_ms() const { return last_frame_ms_; }

 signals:
  void frame_rendered(double milliseconds);

 protected:
  void initializeGL() override;
  void resizeGL(int width, int height) override;
  void paintGL() override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;

 private:
  void on_window_event(vtkObject* caller, unsigned long event, void* call_data);
  void on_interactor_render();
  void release_graphics();
  void forward_mouse(QMouseEvent* event, unsigned long vtk_event);
  void update_vtk_size();

  vtkGenericOpenGLRenderWindow* window_ = nullptr;
  vtkGenericRenderWindowInteractor* interactor_ = nullptr;
  unsigned long observer_tags_[3] = {0, 0, 0};
  double last_frame_ms_ = 0;
};

}  // namespace flashot::gui
