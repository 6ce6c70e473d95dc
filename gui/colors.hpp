#pragma once
// Point colors for flashot-gui: a categorical palette with a legend, a continuous color map with a bar, one
// color per side, or colors a PLY file carries.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <QColor>

#include "flashot/io/anndata.hpp"

namespace flashot::gui {

struct LegendEntry {
  std::string label;
  QColor color;
  std::size_t count = 0;  ///< points of this category
};

struct Coloring {
  enum class Kind { kSolid, kCategorical, kContinuous, kDirect };
  Kind kind = Kind::kSolid;
  std::string title;
  std::vector<std::uint8_t> rgb;     ///< n·3
  std::vector<LegendEntry> legend;   ///< kCategorical (and kSolid: one entry)
  double min = 0;                    ///< kContinuous: the values the bar's ends stand for
  double max = 0;
};

/// Missing values (code −1, NaN) are drawn in this gray.
inline const QColor kMissingColor{190, 190, 190};
inline const QColor kSourceColor{31, 119, 180};
inline const QColor kTargetColor{255, 127, 14};
inline const QColor kMappedColor{44, 160, 44};

/// The k-th color of the categorical palette (20 distinct colors, then repeating, lighter).
QColor palette_color(std::size_t k);
/// The continuous map (viridis) at t ∈ [0, 1] (clamped).
QColor color_map(double t);

Coloring solid_coloring(std::size_t n, const QColor& color, const std::string& label);
/// codes in [0, categories) or −1. Throws std::invalid_argument for a code out of range (naming it).
Coloring categorical_coloring(std::span<const std::int32_t> codes, const std::vector<std::string>& categories,
                              const std::string& title);
/// NaN = missing. The bar spans the finite min..max (a constant column maps to the middle).
Coloring continuous_coloring(std::span<const double> values, const std::string& title);
/// A column as read from a file: categorical/string/boolean → categorical, numeric → continuous (numeric with at
/// most kMaxIntegerCategories distinct integer values → categorical).
Coloring column_coloring(const io::Column& column, const std::string& title);
/// Colors given per point (PLY red/green/blue).
Coloring direct_coloring(std::vector<std::uint8_t> rgb, const std::string& title);
/// Transferred labels: the class color, faded towards the missing gray as the confidence drops (1 = full color).
Coloring confidence_coloring(std::span<const std::int32_t> labels, std::span<const float> confidence,
                             const std::vector<std::string>& categories, const std::string& title);

inline constexpr std::size_t kMaxIntegerCategories = 24;

/// The same column in two data sets, colored with one palette or one range: categories are the union (the
/// source's in order, then the target's new ones), numbers share one min..max. A null column (absent on that
/// side) draws that side in the missing gray. The legend of the pair is `first.legend` (counts of both sides).
std::pair<Coloring, Coloring> joint_coloring(const io::Column* source, std::size_t n_source,
                                             const io::Column* target, std::size_t n_target,
                                             const std::string& title);

}  // namespace flashot::gui
