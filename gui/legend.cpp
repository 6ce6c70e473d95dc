#include "legend.hpp"

#include <QCoreApplication>
#include <QFontMetrics>
#include <QLinearGradient>

#include <algorithm>

#include "colors.hpp"

namespace flashot::gui {

void paint_legend(QPainter& painter, const QRect& view, const Coloring& coloring) {
  if (coloring.kind == Coloring::Kind::kDirect) return;
  painter.save();
  QFont font = painter.font();
  font.setPointSizeF(9);
  painter.setFont(font);
  const QFontMetrics metrics(font);
  const int line = metrics.height() + 2;
  const QString title = QString::fromStdString(coloring.title);
  if (coloring.kind == Coloring::Kind::kContinuous) {
    const int width = std::max(150, metrics.horizontalAdvance(title) + 16);
    const QRect box(view.right() - width - 10, view.top() + 10, width, line * 2 + 30);
    painter.setPen(QColor(0, 0, 0, 60));
    painter.setBrush(QColor(255, 255, 255, 220));
    painter.drawRoundedRect(box, 4, 4);
    painter.setPen(Qt::black);
    painter.drawText(box.adjusted(8, 4, -8, 0), Qt::AlignLeft | Qt::AlignTop, title);
    const QRect bar(box.left() + 8, box.top() + line + 6, box.width() - 16, 12);
    QLinearGradient gradient(bar.topLeft(), bar.topRight());
    for (int s = 0; s <= 8; ++s) gradient.setColorAt(s / 8.0, color_map(s / 8.0));
    painter.fillRect(bar, gradient);
    painter.drawText(QRect(bar.left(), bar.bottom() + 2, bar.width(), line), Qt::AlignLeft,
                     QString::number(coloring.min, 'g', 4));
    painter.drawText(QRect(bar.left(), bar.bottom() + 2, bar.width(), line), Qt::AlignRight,
                     QString::number(coloring.max, 'g', 4));
    painter.restore();
    return;
  }
  const int shown = std::min<int>(static_cast<int>(coloring.legend.size()), kLegendMaxEntries);
  const int more = static_cast<int>(coloring.legend.size()) - shown;
  int width = metrics.horizontalAdvance(title);
  for (int i = 0; i < shown; ++i) {
    width = std::max(width, 18 + metrics.horizontalAdvance(QString::fromStdString(coloring.legend[static_cast<std::size_t>(i)].label)));
  }
  width = std::min(width + 16, view.width() / 3);
  const bool titled = !title.isEmpty();
  const int rows = (titled ? 1 : 0) + shown + (more > 0 ? 1 : 0);
  const QRect box(view.right() - width - 10, view.top() + 10, width, rows * line + 8);
  painter.setPen(QColor(0, 0, 0, 60));
  painter.setBrush(QColor(255, 255, 255, 220));
  painter.drawRoundedRect(box, 4, 4);
  painter.setPen(Qt::black);
  int y = box.top() + 4;
  if (titled) {
    painter.drawText(QRect(box.left() + 8, y, box.width() - 16, line), Qt::AlignLeft | Qt::AlignVCenter,
                     metrics.elidedText(title, Qt::ElideRight, box.width() - 16));
    y += line;
  }
  for (int i = 0; i < shown; ++i) {
    const LegendEntry& e = coloring.legend[static_cast<std::size_t>(i)];
    painter.fillRect(QRect(box.left() + 8, y + line / 2 - 5, 10, 10), e.color);
    painter.drawText(QRect(box.left() + 24, y, box.width() - 32, line), Qt::AlignLeft | Qt::AlignVCenter,
                     metrics.elidedText(QString::fromStdString(e.label), Qt::ElideRight, box.width() - 32));
    y += line;
  }
  if (more > 0) {
    painter.drawText(QRect(box.left() + 8, y, box.width() - 16, line), Qt::AlignLeft | Qt::AlignVCenter,
                     QCoreApplication::translate("legend", "+%1 more").arg(more));
  }
  painter.restore();
}

void paint_caption(QPainter& painter, const QRect& view, const QString& text) {
  if (text.isEmpty()) return;
  painter.save();
  QFont font = painter.font();
  font.setPointSizeF(9);
  painter.setFont(font);
  const QFontMetrics metrics(font);
  const QRect box(view.left() + 10, view.bottom() - metrics.height() - 14, metrics.horizontalAdvance(text) + 16,
                  metrics.height() + 8);
  painter.setPen(Qt::NoPen);
  painter.setBrush(QColor(255, 255, 255, 200));
  painter.drawRoundedRect(box, 4, 4);
  painter.setPen(QColor(40, 40, 40));
  painter.drawText(box, Qt::AlignCenter, text);
  painter.restore();
}

}  // namespace flashot::gui
