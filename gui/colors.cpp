#include "colors.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

namespace flashot::gui {
namespace {

// Tableau 20 (the matplotlib/scanpy default for categories): neighbours differ in hue, pairs in lightness.
constexpr std::array<std::uint32_t, 20> kPalette = {
    0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf,
    0xaec7e8, 0xffbb78, 0x98df8a, 0xff9896, 0xc5b0d5, 0xc49c94, 0xf7b6d2, 0xc7c7c7, 0xdbdb8d, 0x9edae5};

// Viridis at 9 evenly spaced stops, interpolated linearly between them.
constexpr std::array<std::uint32_t, 9> kViridis = {0x440154, 0x472d7b, 0x3b528b, 0x2c728e, 0x21918c,
                                                   0x28ae80, 0x5ec962, 0xaddc30, 0xfde725};

void put(std::vector<std::uint8_t>& rgb, std::size_t i, const QColor& c) {
  rgb[3 * i] = static_cast<std::uint8_t>(c.red());
  rgb[3 * i + 1] = static_cast<std::uint8_t>(c.green());
  rgb[3 * i + 2] = static_cast<std::uint8_t>(c.blue());
}

struct Labels {
  std::vector<std::int32_t> codes;
  std::vector<std::string> categories;
};

std::vector<double> as_numbers(const io::Column& column) {
  std::vector<double> values(column.size(), std::numeric_limits<double>::quiet_NaN());
  if (column.kind != io::Column::Kind::kNumeric) return values;
  for (std::size_t i = 0; i < column.size(); ++i) {
    if (column.missing.empty() || column.missing[i] == 0) values[i] = column.numbers[i];
  }
  return values;
}

// A column as categories, or nullopt when it is continuous (non-integer numbers, or more than
// kMaxIntegerCategories distinct integers, or fewer than two).
std::optional<Labels> as_labels(const io::Column& column) {
  const std::size_t n = column.size();
  auto missing = [&](std::size_t i) { return !column.missing.empty() && column.missing[i] != 0; };
  Labels labels;
  labels.codes.assign(n, -1);
  switch (column.kind) {
    case io::Column::Kind::kCategorical:
      labels.categories = column.categories;
      for (std::size_t i = 0; i < n; ++i) {
        const std::int32_t code = column.codes[i];
        const bool valid = !missing(i) && code >= 0 && static_cast<std::size_t>(code) < column.categories.size();
        labels.codes[i] = valid ? code : -1;
      }
      return labels;
    case io::Column::Kind::kBoolean:
      labels.categories = {"false", "true"};
      for (std::size_t i = 0; i < n; ++i) labels.codes[i] = missing(i) ? -1 : (column.flags[i] ? 1 : 0);
      return labels;
    case io::Column::Kind::kString: {
      std::set<std::string> distinct;
      for (std::size_t i = 0; i < n; ++i) {
        if (!missing(i)) distinct.insert(column.strings[i]);
      }
      labels.categories.assign(distinct.begin(), distinct.end());
      std::map<std::string, std::int32_t> code_of;
      for (std::size_t k = 0; k < labels.categories.size(); ++k) {
        code_of.emplace(labels.categories[k], static_cast<std::int32_t>(k));
      }
      for (std::size_t i = 0; i < n; ++i) labels.codes[i] = missing(i) ? -1 : code_of.at(column.strings[i]);
      return labels;
    }
    case io::Column::Kind::kNumeric: {
      std::set<double> distinct;
      for (std::size_t i = 0; i < n; ++i) {
        const double v = column.numbers[i];
        if (missing(i) || std::isnan(v)) continue;
        if (!std::isfinite(v) || v != std::floor(v)) return std::nullopt;
        distinct.insert(v);
        if (distinct.size() > kMaxIntegerCategories) return std::nullopt;
      }
      if (distinct.size() < 2) return std::nullopt;
      const std::vector<double> levels(distinct.begin(), distinct.end());
      for (double v : levels) labels.categories.push_back(std::to_string(static_cast<long long>(v)));
      for (std::size_t i = 0; i < n; ++i) {
        const double v = column.numbers[i];
        if (missing(i) || std::isnan(v)) continue;
        labels.codes[i] =
            static_cast<std::int32_t>(std::lower_bound(levels.begin(), levels.end(), v) - levels.begin());
      }
      return labels;
    }
  }
  return std::nullopt;
}

}  // namespace

QColor palette_color(std::size_t k) {
  const QColor base(static_cast<QRgb>(kPalette[k % kPalette.size()]));
  const std::size_t round = k / kPalette.size();
  return round == 0 ? base : base.lighter(100 + static_cast<int>(std::min<std::size_t>(round, 4)) * 15);
}

QColor color_map(double t) {
  if (!std::isfinite(t)) return kMissingColor;
  t = std::clamp(t, 0.0, 1.0) * static_cast<double>(kViridis.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(t));
  const std::size_t hi = std::min(lo + 1, kViridis.size() - 1);
  const double w = t - static_cast<double>(lo);
  const QColor a(static_cast<QRgb>(kViridis[lo]));
  const QColor b(static_cast<QRgb>(kViridis[hi]));
  auto mix = [w](int x, int y) { return static_cast<int>(std::lround(x + w * (y - x))); };
  return QColor(mix(a.red(), b.red()), mix(a.green(), b.green()), mix(a.blue(), b.blue()));
}

Coloring solid_coloring(std::size_t n, const QColor& color, const std::string& label) {
  Coloring c;
  c.kind = Coloring::Kind::kSolid;
  c.title = label;
  c.rgb.resize(n * 3);
  for (std::size_t i = 0; i < n; ++i) put(c.rgb, i, color);
  c.legend.push_back({label, color, n});
  return c;
}

Coloring categorical_coloring(std::span<const std::int32_t> codes, const std::vector<std::string>& categories,
                              const std::string& title) {
  Coloring c;
  c.kind = Coloring::Kind::kCategorical;
  c.title = title;
  c.rgb.resize(codes.size() * 3);
  std::vector<std::size_t> counts(categories.size(), 0);
  std::size_t missing = 0;
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const std::int32_t code = codes[i];
    if (code < 0) {
      put(c.rgb, i, kMissingColor);
      ++missing;
      continue;
    }
    if (static_cast<std::size_t>(code) >= categories.size()) {
      throw std::invalid_argument(title + ": code " + std::to_string(code) + " at point " + std::to_string(i) +
                                  " is past the " + std::to_string(categories.size()) + " categories");
    }
    put(c.rgb, i, palette_color(static_cast<std::size_t>(code)));
    ++counts[static_cast<std::size_t>(code)];
  }
  for (std::size_t k = 0; k < categories.size(); ++k) c.legend.push_back({categories[k], palette_color(k), counts[k]});
  if (missing > 0) c.legend.push_back({"(missing)", kMissingColor, missing});
  return c;
}

Coloring continuous_coloring(std::span<const double> values, const std::string& title) {
  Coloring c;
  c.kind = Coloring::Kind::kContinuous;
  c.title = title;
  c.rgb.resize(values.size() * 3);
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (double v : values) {
    if (std::isfinite(v)) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (!(lo <= hi)) lo = hi = 0;
  c.min = lo;
  c.max = hi;
  const double span = hi - lo;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    put(c.rgb, i, !std::isfinite(v) ? kMissingColor : color_map(span > 0 ? (v - lo) / span : 0.5));
  }
  return c;
}

Coloring column_coloring(const io::Column& column, const std::string& title) {
  if (std::optional<Labels> labels = as_labels(column)) return categorical_coloring(labels->codes, labels->categories, title);
  return continuous_coloring(as_numbers(column), title);
}

Coloring direct_coloring(std::vector<std::uint8_t> rgb, const std::string& title) {
  Coloring c;
  c.kind = Coloring::Kind::kDirect;
  c.title = title;
  c.rgb = std::move(rgb);
  return c;
}

Coloring confidence_coloring(std::span<const std::int32_t> labels, std::span<const float> confidence,
                             const std::vector<std::string>& categories, const std::string& title) {
  if (labels.size() != confidence.size()) {
    throw std::invalid_argument(title + ": " + std::to_string(labels.size()) + " labels but " +
                                std::to_string(confidence.size()) + " confidences");
  }
  Coloring c = categorical_coloring(labels, categories, title);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0) continue;
    const double w = std::clamp(static_cast<double>(confidence[i]), 0.0, 1.0);
    const int gray[3] = {kMissingColor.red(), kMissingColor.green(), kMissingColor.blue()};
    for (int ch = 0; ch < 3; ++ch) {
      std::uint8_t& v = c.rgb[3 * i + static_cast<std::size_t>(ch)];
      v = static_cast<std::uint8_t>(std::lround(gray[ch] + w * (v - gray[ch])));
    }
  }
  return c;
}

}  // namespace flashot::gui

namespace flashot::gui {

std::pair<Coloring, Coloring> joint_coloring(const io::Column* source, std::size_t n_source,
                                             const io::Column* target, std::size_t n_target,
                                             const std::string& title) {
  const std::optional<Labels> a = source ? as_labels(*source) : std::nullopt;
  const std::optional<Labels> b = target ? as_labels(*target) : std::nullopt;
  const bool categorical = (source == nullptr || a) && (target == nullptr || b);
  if (categorical) {
    std::vector<std::string> categories = a ? a->categories : std::vector<std::string>{};
    std::map<std::string, std::int32_t> code_of;
    for (std::size_t k = 0; k < categories.size(); ++k) code_of.emplace(categories[k], static_cast<std::int32_t>(k));
    auto remap = [&](const std::optional<Labels>& labels, std::size_t n) {
      std::vector<std::int32_t> codes(n, -1);
      if (!labels) return codes;
      for (std::size_t i = 0; i < n; ++i) {
        const std::int32_t code = labels->codes[i];
        if (code < 0) continue;
        const std::string& name = labels->categories[static_cast<std::size_t>(code)];
        auto [it, added] = code_of.emplace(name, static_cast<std::int32_t>(categories.size()));
        if (added) categories.push_back(name);
        codes[i] = it->second;
      }
      return codes;
    };
    const std::vector<std::int32_t> codes_a = remap(a, n_source);
    const std::vector<std::int32_t> codes_b = remap(b, n_target);
    Coloring first = categorical_coloring(codes_a, categories, title);
    Coloring second = categorical_coloring(codes_b, categories, title);
    std::map<std::string, std::size_t> counts;
    for (const auto& e : second.legend) counts[e.label] = e.count;
    for (auto& e : first.legend) {
      e.count += counts[e.label];
      counts.erase(e.label);
    }
    if (counts.count("(missing)") != 0) first.legend.push_back({"(missing)", kMissingColor, counts["(missing)"]});
    return {std::move(first), std::move(second)};
  }
  std::vector<double> values = source ? as_numbers(*source) : std::vector<double>(n_source, std::nan(""));
  const std::vector<double> more = target ? as_numbers(*target) : std::vector<double>(n_target, std::nan(""));
  values.insert(values.end(), more.begin(), more.end());
  const Coloring both = continuous_coloring(values, title);
  Coloring first = both;
  Coloring second = both;
  first.rgb.assign(both.rgb.begin(), both.rgb.begin() + static_cast<std::ptrdiff_t>(n_source * 3));
  second.rgb.assign(both.rgb.begin() + static_cast<std::ptrdiff_t>(n_source * 3), both.rgb.end());
  return {std::move(first), std::move(second)};
}

}  // namespace flashot::gui
