#pragma once
// Legends drawn over the 3-D view: category swatches or a color bar, in the top-right corner.

#include <QPainter>
#include <QRect>
#include <QString>

#include "colors.hpp"

namespace flashot::gui {

inline constexpr int kLegendMaxEntries = 24;

/// Draws the legend of `coloring` inside `view` (widget coordinates). A categorical legend lists at most
/// kLegendMaxEntries categories, then "+N more".
void paint_legend(QPainter& painter, const QRect& view, const Coloring& coloring);
/// A small caption at the bottom-left (what is shown, t, frame time).
void paint_caption(QPainter& painter, const QRect& view, const QString& text);

}  // namespace flashot::gui
