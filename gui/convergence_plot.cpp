#include "convergence_plot.hpp"

#include <QPainter>
#include <QPainterPath>

#include <algorithm>
#include <cmath>

namespace flashot::gui {

ConvergencePlot::ConvergencePlot(QWidget* parent) : QWidget(parent) { setMinimumHeight(140); }

void ConvergencePlot::clear() {
  checks_.clear();
  tolerance_ = 0;
  update();
}

void ConvergencePlot::add_check(const MarginalCheck& check) {
  checks_.push_back(check);
  update();
}

void ConvergencePlot::set_checks(std::vector<MarginalCheck> checks, double tolerance) {
  checks_ = std::move(checks);
  tolerance_ = tolerance;
  update();
}

void ConvergencePlot::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  p.fillRect(rect(), palette().base());
  const QRect plot = rect().adjusted(48, 10, -10, -26);
  p.setPen(palette().color(QPalette::Mid));
  p.drawRect(plot);
  p.setPen(palette().color(QPalette::Text));
  p.drawText(QRect(plot.left(), plot.bottom() + 4, plot.width(), 20), Qt::AlignCenter, tr("iteration"));
  std::vector<const MarginalCheck*> shown;
  for (const auto& c : checks_) {
    if (std::isfinite(c.error) && c.error > 0) shown.push_back(&c);
  }
  if (shown.empty()) {
    p.drawText(plot, Qt::AlignCenter, tr("marginal error per check (log scale)"));
    return;
  }
  double lo = std::log10(shown.front()->error), hi = lo;
  for (const auto* c : shown) {
    lo = std::min(lo, std::log10(c->error));
    hi = std::max(hi, std::log10(c->error));
  }
  if (tolerance_ > 0) lo = std::min(lo, std::log10(tolerance_));
  lo = std::floor(lo);
  hi = std::max(std::ceil(hi), lo + 1);
  const double last = std::max(1, shown.back()->iteration);
  auto to_point = [&](double iteration, double error) {
    const double x = plot.left() + plot.width() * iteration / last;
    const double y = plot.bottom() - plot.height() * (std::log10(error) - lo) / (hi - lo);
    return QPointF(x, y);
  };
  // One band per ε stage, so a jump in error at a stage change reads as expected.
  double band_start = 0;
  bool shade = false;
  for (std::size_t i = 1; i <= shown.size(); ++i) {
    if (i == shown.size() || shown[i]->epsilon != shown[i - 1]->epsilon) {
      const double end = shown[i - 1]->iteration;
      if (shade) {
        const QPointF a = to_point(band_start, std::pow(10.0, hi));
        const QPointF b = to_point(end, std::pow(10.0, lo));
        p.fillRect(QRectF(a, b), QColor(0, 0, 0, 18));
      }
      shade = !shade;
      band_start = end;
    }
  }
  for (int decade = static_cast<int>(lo); decade <= static_cast<int>(hi); ++decade) {
    const QPointF at = to_point(0, std::pow(10.0, decade));
    p.setPen(QColor(0, 0, 0, 40));
    p.drawLine(QPointF(plot.left(), at.y()), QPointF(plot.right(), at.y()));
    p.setPen(palette().color(QPalette::Text));
    p.drawText(QRectF(0, at.y() - 8, plot.left() - 4, 16), Qt::AlignRight | Qt::AlignVCenter,
               QStringLiteral("1e%1").arg(decade));
  }
  if (tolerance_ > 0) {
    const QPointF at = to_point(0, tolerance_);
    p.setPen(QPen(QColor(200, 40, 40), 1, Qt::DashLine));
    p.drawLine(QPointF(plot.left(), at.y()), QPointF(plot.right(), at.y()));
  }
  QPainterPath path;
  path.moveTo(to_point(shown.front()->iteration, shown.front()->error));
  for (const auto* c : shown) path.lineTo(to_point(c->iteration, c->error));
  p.setPen(QPen(QColor(31, 119, 180), 2));
  p.drawPath(path);
  p.setBrush(QColor(31, 119, 180));
  for (const auto* c : shown) p.drawEllipse(to_point(c->iteration, c->error), 2.5, 2.5);
  p.setPen(palette().color(QPalette::Text));
  p.drawText(QRect(plot.right() - 60, plot.bottom() + 4, 60, 20), Qt::AlignRight,
             QString::number(shown.back()->iteration));
}

}  // namespace flashot::gui
