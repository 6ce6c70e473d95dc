#include "qvtk_native_widget.hpp"

#include <QKeyEvent>
#include <QMouseEvent>
#include <QOpenGLContext>
#include <QWheelEvent>

#include <vtkCommand.h>
#include <vtkGenericOpenGLRenderWindow.h>
#include <vtkGenericRenderWindowInteractor.h>
#include <vtkInteractorStyleTrackballCamera.h>
#include <vtkNew.h>
#include <vtkOpenGLFramebufferObject.h>
#include <vtkOpenGLState.h>

#include <algorithm>
#include <chrono>

namespace flashot::gui {

QSurfaceFormat QvtkNativeWidget::default_format() {
  QSurfaceFormat format;
  format.setRenderableType(QSurfaceFormat::OpenGL);
  format.setVersion(3, 2);
  format.setProfile(QSurfaceFormat::CoreProfile);
  format.setDepthBufferSize(24);
  format.setStencilBufferSize(8);
  format.setSwapBehavior(QSurfaceFormat::DoubleBuffer);
  return format;
}

QvtkNativeWidget::QvtkNativeWidget(QWidget* parent) : QOpenGLWidget(parent) {
  setFormat(default_format());
  setFocusPolicy(Qt::StrongFocus);
  window_ = vtkGenericOpenGLRenderWindow::New();
  // Qt owns the context; VTK renders into its own framebuffers and this widget blits the result in paintGL().
  window_->SetOwnContext(false);
  window_->SetFrameBlitModeToNoBlit();
  window_->SetReadyForRendering(false);
  observer_tags_[0] = window_->AddObserver(vtkCommand::WindowMakeCurrentEvent, this, &QvtkNativeWidget::on_window_event);
  observer_tags_[1] = window_->AddObserver(vtkCommand::WindowIsCurrentEvent, this, &QvtkNativeWidget::on_window_event);

  interactor_ = vtkGenericRenderWindowInteractor::New();
  vtkNew<vtkInteractorStyleTrackballCamera> style;
  interactor_->SetInteractorStyle(style);
  interactor_->SetRenderWindow(window_);
  // The interactor moves the camera; rendering happens only in paintGL(), where Qt's context is current and bound.
  interactor_->EnableRenderOff();
  observer_tags_[2] = interactor_->AddObserver(vtkCommand::RenderEvent, this, &QvtkNativeWidget::on_interactor_render);
}

QvtkNativeWidget::~QvtkNativeWidget() {
  // QOpenGLWidget's destructor destroys the context after this object's members are gone: release VTK's GL
  // objects now and take the slot off the context's signal.
  if (context() != nullptr) disconnect(context(), nullptr, this, nullptr);
  release_graphics();
  interactor_->RemoveObserver(observer_tags_[2]);
  window_->RemoveObserver(observer_tags_[0]);
  window_->RemoveObserver(observer_tags_[1]);
  interactor_->SetRenderWindow(nullptr);
  interactor_->Delete();
  window_->Delete();
}

vtkGenericOpenGLRenderWindow* QvtkNativeWidget::render_window() const { return window_; }

vtkRenderWindowInteractor* QvtkNativeWidget::interactor() const { return interactor_; }

void QvtkNativeWidget::on_window_event(vtkObject*, unsigned long event, void* call_data) {
  if (event == vtkCommand::WindowMakeCurrentEvent) {
    // QOpenGLWidget::makeCurrent() also binds the widget's framebuffer behind vtkOpenGLState's cache; called in the
    // middle of VTK's framebuffer set-up it sends VTK's attachments to the widget's framebuffer. Inside paintGL()
    // the context is current already, so this is a no-op there.
    if (QOpenGLContext::currentContext() != context()) makeCurrent();
  } else if (event == vtkCommand::WindowIsCurrentEvent) {
    *static_cast<bool*>(call_data) = context() != nullptr && QOpenGLContext::currentContext() == context();
  }
}

void QvtkNativeWidget::on_interactor_render() { update(); }

void QvtkNativeWidget::initializeGL() {
  // A context can be replaced (the widget moved to another top-level window); VTK's GL objects die with it.
  connect(context(), &QOpenGLContext::aboutToBeDestroyed, this, &QvtkNativeWidget::release_graphics,
          Qt::UniqueConnection);
  update_vtk_size();
  window_->SetMapped(true);
  window_->SetReadyForRendering(true);
  window_->OpenGLInitContext();
}

void QvtkNativeWidget::release_graphics() {
  if (context() == nullptr || !window_->GetReadyForRendering()) return;
  makeCurrent();
  window_->Finalize();
  window_->SetReadyForRendering(false);
  doneCurrent();
}

void QvtkNativeWidget::update_vtk_size() {
  const qreal ratio = devicePixelRatioF();
  const int w = std::max(1, static_cast<int>(width() * ratio));
  const int h = std::max(1, static_cast<int>(height() * ratio));
  window_->SetSize(w, h);
  interactor_->UpdateSize(w, h);
}

void QvtkNativeWidget::resizeGL(int, int) { update_vtk_size(); }

void QvtkNativeWidget::paintGL() {
  const auto start = std::chrono::steady_clock::now();
  if (!window_->GetReadyForRendering()) window_->OpenGLInitContext();
  window_->SetReadyForRendering(true);
  vtkOpenGLState* state = window_->GetState();
  // Qt may have changed GL state since VTK last looked (it binds its framebuffer before paintGL, a QPainter on the
  // widget changes more): re-read it, and give Qt its state back when done. No experiment here needed the Reset
  // (docs/gui.md), but a stale cache is exactly what made the naive adapter draw black.
  state->Reset();
  state->Push();
  state->vtkglDepthFunc(GL_LEQUAL);
  window_->Render();

  const int* size = window_->GetSize();
  state->vtkglBindFramebuffer(GL_DRAW_FRAMEBUFFER, defaultFramebufferObject());
  state->vtkglDisable(GL_SCISSOR_TEST);
  window_->BlitDisplayFramebuffer(0, 0, 0, size[0], size[1], 0, 0, size[0], size[1], GL_COLOR_BUFFER_BIT,
                                  GL_NEAREST);
  // The widget's image is composited into the top-level window; an alpha below 1 in VTK's frame would let what
  // is behind the widget show through.
  state->vtkglColorMask(GL_FALSE, GL_FALSE, GL_FALSE, GL_TRUE);
  state->vtkglClearColor(0.0, 0.0, 0.0, 1.0);
  state->vtkglViewport(0, 0, size[0], size[1]);
  state->vtkglClear(GL_COLOR_BUFFER_BIT);
  state->Pop();
  last_frame_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  emit frame_rendered(last_frame_ms_);
}

void QvtkNativeWidget::forward_mouse(QMouseEvent* event, unsigned long vtk_event) {
  const QPointF p = event->position() * devicePixelRatioF();
  const bool ctrl = event->modifiers().testFlag(Qt::ControlModifier);
  const bool shift = event->modifiers().testFlag(Qt::ShiftModifier);
  const int repeat = event->type() == QEvent::MouseButtonDblClick ? 1 : 0;
  interactor_->SetEventInformationFlipY(static_cast<int>(p.x()), static_cast<int>(p.y()), ctrl, shift, 0, repeat);
  interactor_->SetAltKey(event->modifiers().testFlag(Qt::AltModifier) ? 1 : 0);
  interactor_->InvokeEvent(vtk_event, nullptr);
}

void QvtkNativeWidget::mousePressEvent(QMouseEvent* event) {
  switch (event->button()) {
    case Qt::LeftButton: forward_mouse(event, vtkCommand::LeftButtonPressEvent); break;
    case Qt::MiddleButton: forward_mouse(event, vtkCommand::MiddleButtonPressEvent); break;
    case Qt::RightButton: forward_mouse(event, vtkCommand::RightButtonPressEvent); break;
    default: break;
  }
}

void QvtkNativeWidget::mouseReleaseEvent(QMouseEvent* event) {
  switch (event->button()) {
    case Qt::LeftButton: forward_mouse(event, vtkCommand::LeftButtonReleaseEvent); break;
    case Qt::MiddleButton: forward_mouse(event, vtkCommand::MiddleButtonReleaseEvent); break;
    case Qt::RightButton: forward_mouse(event, vtkCommand::RightButtonReleaseEvent); break;
    default: break;
  }
}

void QvtkNativeWidget::mouseMoveEvent(QMouseEvent* event) { forward_mouse(event, vtkCommand::MouseMoveEvent); }

void QvtkNativeWidget::wheelEvent(QWheelEvent* event) {
  const QPointF p = event->position() * devicePixelRatioF();
  interactor_->SetEventInformationFlipY(static_cast<int>(p.x()), static_cast<int>(p.y()),
                                        event->modifiers().testFlag(Qt::ControlModifier),
                                        event->modifiers().testFlag(Qt::ShiftModifier));
  const int delta = event->angleDelta().y();
  if (delta > 0) interactor_->InvokeEvent(vtkCommand::MouseWheelForwardEvent, nullptr);
  if (delta < 0) interactor_->InvokeEvent(vtkCommand::MouseWheelBackwardEvent, nullptr);
  event->accept();
}

void QvtkNativeWidget::keyPressEvent(QKeyEvent* event) {
  // 'r' resets the camera; VTK's other keys ('3' stereo, 'w' wireframe, 'e' exit) change state a viewer of point
  // clouds does not show.
  if (event->key() == Qt::Key_R) {
    interactor_->SetKeyEventInformation(0, 0, 'r', 0, "r");
    interactor_->InvokeEvent(vtkCommand::KeyPressEvent, nullptr);
    interactor_->InvokeEvent(vtkCommand::CharEvent, nullptr);
    update();
    return;
  }
  QOpenGLWidget::keyPressEvent(event);
}

}  // namespace flashot::gui
