#include "vtk_image_view.hpp"

#include "point_cloud_scene.hpp"

#include <QElapsedTimer>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QResizeEvent>
#include <QTimer>
#include <QWheelEvent>

#include <vtkCommand.h>
#include <vtkInteractorObserver.h>
#include <vtkRenderWindowInteractor.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace flashot::gui {

VtkImageView::VtkImageView(PointCloudScene& scene, QWidget* parent)
    : QWidget(parent), scene_(scene), interactive_budget_(scene.interactive_budget()) {
  setFocusPolicy(Qt::StrongFocus);
  setMouseTracking(false);
  setAttribute(Qt::WA_OpaquePaintEvent);
  setMinimumSize(200, 150);
  settle_ = new QTimer(this);
  settle_->setSingleShot(true);
  settle_->setInterval(kSettleMs);
  connect(settle_, &QTimer::timeout, this, [this] {
    scene_.set_interactive(false);
    request_render();
  });
  vtkRenderWindowInteractor* interactor = scene_.interactor();
  observer_tags_[0] = interactor->AddObserver(vtkCommand::RenderEvent, this, &VtkImageView::on_interactor_render);
  vtkInteractorObserver* style = interactor->GetInteractorStyle();
  observer_tags_[1] =
      style->AddObserver(vtkCommand::StartInteractionEvent, this, &VtkImageView::on_interaction_start);
  observer_tags_[2] = style->AddObserver(vtkCommand::EndInteractionEvent, this, &VtkImageView::on_interaction_end);
}

VtkImageView::~VtkImageView() {
  vtkRenderWindowInteractor* interactor = scene_.interactor();
  interactor->RemoveObserver(observer_tags_[0]);
  interactor->GetInteractorStyle()->RemoveObserver(observer_tags_[1]);
  interactor->GetInteractorStyle()->RemoveObserver(observer_tags_[2]);
}

void VtkImageView::set_overlay(std::function<void(QPainter&, const QRect&)> overlay) {
  overlay_ = std::move(overlay);
  update();
}

void VtkImageView::request_render() {
  if (render_pending_) return;
  render_pending_ = true;
  QTimer::singleShot(0, this, [this] {
    if (render_pending_) render_now();
  });
}

void VtkImageView::render_now() {
  render_pending_ = false;
  const qreal ratio = devicePixelRatioF();
  const int width = std::max(1, static_cast<int>(std::lround(this->width() * ratio)));
  const int height = std::max(1, static_cast<int>(std::lround(this->height() * ratio)));
  QElapsedTimer timer;
  timer.start();
  const bool interactive = scene_.interactive();
  const std::size_t total = visible_points();
  // A still frame of more points than fit in kStillFrameMs draws the subset that fits (the level-of-detail
  // actors with the still budget lent to them).
  const bool subset = !interactive && total > still_budget_ && !force_full_;
  force_full_ = false;
  if (subset) {
    scene_.set_interactive_budget(still_budget_);
    scene_.set_interactive(true);
  }
  const std::size_t drawn = scene_.points_drawn();
  scene_.set_size(width, height);
  Frame frame = scene_.render();
  if (subset) {
    scene_.set_interactive(false);
    scene_.set_interactive_budget(interactive_budget_);
  }
  if (!interactive) still_subset_ = subset;
  QImage image(frame.width, frame.height, QImage::Format_RGB888);
  const auto row = static_cast<std::size_t>(frame.width) * 3;
  for (int y = 0; y < frame.height; ++y) {
    std::memcpy(image.scanLine(y), frame.rgb.data() + row * static_cast<std::size_t>(y), row);
  }
  image.setDevicePixelRatio(ratio);
  frame_ = std::move(image);
  last_frame_ms_ = static_cast<double>(timer.nsecsElapsed()) / 1e6;
  if (!interactive && drawn > 0) adapt_budget(drawn);
  update();
  emit frame_rendered(last_frame_ms_);
  // The measurement says everything fits now (a fast renderer after the first, cautious frame): draw it all.
  if (subset && still_budget_ >= total) request_render();
}

QImage VtkImageView::composed_image() {
  if (frame_.isNull() || render_pending_) render_now();
  QImage out = frame_.copy();
  out.setDevicePixelRatio(frame_.devicePixelRatio());
  QPainter painter(&out);
  painter.setRenderHint(QPainter::Antialiasing);
  if (overlay_) overlay_(painter, rect());
  painter.end();
  return out;
}

void VtkImageView::paintEvent(QPaintEvent*) {
  QPainter painter(this);
  if (frame_.isNull()) {
    painter.fillRect(rect(), Qt::white);
  } else {
    painter.drawImage(QPoint(0, 0), frame_);
  }
  painter.setRenderHint(QPainter::Antialiasing);
  if (overlay_) overlay_(painter, rect());
}

void VtkImageView::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  request_render();
}

void VtkImageView::forward_mouse(QMouseEvent* event, unsigned long vtk_event) {
  const qreal ratio = devicePixelRatioF();
  vtkRenderWindowInteractor* interactor = scene_.interactor();
  const QPointF p = event->position() * ratio;
  const bool ctrl = event->modifiers().testFlag(Qt::ControlModifier);
  const bool shift = event->modifiers().testFlag(Qt::ShiftModifier);
  const int repeat = event->type() == QEvent::MouseButtonDblClick ? 1 : 0;
  interactor->SetEventInformationFlipY(static_cast<int>(p.x()), static_cast<int>(p.y()), ctrl, shift, 0, repeat);
  interactor->SetAltKey(event->modifiers().testFlag(Qt::AltModifier) ? 1 : 0);
  interactor->InvokeEvent(vtk_event, nullptr);
}

void VtkImageView::mousePressEvent(QMouseEvent* event) {
  switch (event->button()) {
    case Qt::LeftButton: forward_mouse(event, vtkCommand::LeftButtonPressEvent); break;
    case Qt::MiddleButton: forward_mouse(event, vtkCommand::MiddleButtonPressEvent); break;
    case Qt::RightButton: forward_mouse(event, vtkCommand::RightButtonPressEvent); break;
    default: break;
  }
}

void VtkImageView::mouseReleaseEvent(QMouseEvent* event) {
  switch (event->button()) {
    case Qt::LeftButton: forward_mouse(event, vtkCommand::LeftButtonReleaseEvent); break;
    case Qt::MiddleButton: forward_mouse(event, vtkCommand::MiddleButtonReleaseEvent); break;
    case Qt::RightButton: forward_mouse(event, vtkCommand::RightButtonReleaseEvent); break;
    default: break;
  }
}

void VtkImageView::mouseMoveEvent(QMouseEvent* event) { forward_mouse(event, vtkCommand::MouseMoveEvent); }

void VtkImageView::wheelEvent(QWheelEvent* event) {
  const qreal ratio = devicePixelRatioF();
  const QPointF p = event->position() * ratio;
  vtkRenderWindowInteractor* interactor = scene_.interactor();
  interactor->SetEventInformationFlipY(static_cast<int>(p.x()), static_cast<int>(p.y()),
                                       event->modifiers().testFlag(Qt::ControlModifier),
                                       event->modifiers().testFlag(Qt::ShiftModifier));
  const int delta = event->angleDelta().y();
  if (delta > 0) {
    interactor->InvokeEvent(vtkCommand::MouseWheelForwardEvent, nullptr);
  } else if (delta < 0) {
    interactor->InvokeEvent(vtkCommand::MouseWheelBackwardEvent, nullptr);
  }
  event->accept();
}

void VtkImageView::keyPressEvent(QKeyEvent* event) {
  // Only the keys whose VTK meaning fits a point-cloud viewer: 'r' resets the camera. Others ('3' stereo,
  // 'w' wireframe, 'e' exit) would change state the GUI does not show.
  if (event->key() == Qt::Key_R) {
    vtkRenderWindowInteractor* interactor = scene_.interactor();
    interactor->SetKeyEventInformation(0, 0, 'r', 0, "r");
    interactor->InvokeEvent(vtkCommand::KeyPressEvent, nullptr);
    interactor->InvokeEvent(vtkCommand::CharEvent, nullptr);
    request_render();
    return;
  }
  QWidget::keyPressEvent(event);
}

void VtkImageView::adapt_budget(std::size_t drawn) {
  // Frame time grows linearly with the points drawn (measured, docs/gui.md); aim the moving-camera frames at
  // kInteractiveFrameMs from the cost per point of the last full frame.
  const double per_point = last_frame_ms_ / static_cast<double>(drawn);
  const auto budget = static_cast<std::size_t>(kInteractiveFrameMs / std::max(per_point, 1e-9));
  interactive_budget_ = std::clamp<std::size_t>(budget, kMinInteractivePoints, kMaxInteractivePoints);
  scene_.set_interactive_budget(interactive_budget_);
  still_budget_ = std::max(interactive_budget_, static_cast<std::size_t>(std::min(kStillFrameMs / std::max(per_point, 1e-12), 1e15)));
}

std::size_t VtkImageView::visible_points() const {
  std::size_t total = 0;
  for (Layer layer : {Layer::kSource, Layer::kTarget, Layer::kMapped})
    if (scene_.visible(layer)) total += scene_.point_count(layer);
  return total;
}

void VtkImageView::on_interactor_render() { request_render(); }

void VtkImageView::on_interaction_start() {
  settle_->stop();
  scene_.set_interactive(true);
}

void VtkImageView::on_interaction_end() {
  settle_->start();
  request_render();
}

}  // namespace flashot::gui
