#include "alignment.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace flashot::gui {
namespace {

constexpr double kMinLineAlpha = 25.0;  // the weakest line kept stays faintly visible

}  // namespace

AlignmentOutcome run_alignment(const AlignmentInput& input, const ProgressCallback& progress) {
  const Matrix& x = input.source;
  const Matrix& y = input.target;
  if (x.cols != y.cols) {
    throw std::invalid_argument("source has " + std::to_string(x.cols) + " dimensions but target has " +
                                std::to_string(y.cols));
  }
  if (!input.source_display.empty() && input.source_display.size() != x.rows * 3) {
    throw std::invalid_argument("source display space has " + std::to_string(input.source_display.size() / 3) +
                                " points, alignment space " + std::to_string(x.rows));
  }
  if (!input.target_display.empty() && input.target_display.size() != y.rows * 3) {
    throw std::invalid_argument("target display space has " + std::to_string(input.target_display.size() / 3) +
                                " points, alignment space " + std::to_string(y.rows));
  }
  if (input.target_labels && input.target_labels->codes.size() != y.rows) {
    throw std::invalid_argument("labels '" + input.target_labels->column + "' have " +
                                std::to_string(input.target_labels->codes.size()) + " entries for " +
                                std::to_string(y.rows) + " target points");
  }
  const PointsView xv{x.values, x.rows, x.cols};
  const PointsView yv{y.values, y.rows, y.cols};

  AlignmentOutcome out;
  out.n = x.rows;
  out.m = y.rows;
  out.d = x.cols;
  out.options = solve_options(input.parameters);
  out.backend = backend_options(input.parameters);

  Problem problem(xv, yv, {}, {}, out.backend);
  out.diameter = problem.diameter();
  SolveOptions options = out.options;
  options.progress = progress;
  out.result = problem.solve(options);
  if (out.cancelled()) return out;

  out.mapped = problem.barycentric(out.result, Side::kSource);
  if (!input.target_display.empty()) {
    // Where each source point's mass lands in the target's display space: (P·Y_show)_i / (P·1)_i.
    std::vector<float> weighted = problem.apply_plan(out.result, input.target_display, 3);
    const std::vector<float> rows = problem.row_marginal(out.result);
    out.mapped_display.resize(x.rows * 3);
    for (std::size_t i = 0; i < x.rows; ++i) {
      const float mass = rows[i];
      for (std::size_t c = 0; c < 3; ++c) {
        out.mapped_display[3 * i + c] =
            mass > 0 ? weighted[3 * i + c] / mass : input.source_display.empty() ? 0.0f : input.source_display[3 * i + c];
      }
    }
  }
  out.coupling = problem.top_k(out.result, std::min(input.parameters.top_k, y.rows));
  if (input.target_labels && !input.target_labels->categories.empty()) {
    out.transfer = problem.transfer_labels(out.result, Side::kTarget, input.target_labels->codes,
                                           input.target_labels->categories.size());
    out.labels = input.target_labels;
  }
  return out;
}

CouplingLines coupling_lines(const TopKCoupling& coupling, std::span<const float> from, std::span<const float> to,
                             std::size_t max_lines) {
  CouplingLines lines;
  const std::size_t total = coupling.rows * coupling.k;
  if (total == 0 || max_lines == 0) return lines;
  if (from.size() < coupling.rows * 3) {
    throw std::invalid_argument("coupling lines: " + std::to_string(from.size() / 3) + " source positions for " +
                                std::to_string(coupling.rows) + " rows");
  }
  std::vector<std::size_t> order(total);
  std::iota(order.begin(), order.end(), std::size_t{0});
  const std::size_t kept = std::min(max_lines, total);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kept), order.end(),
                    [&](std::size_t a, std::size_t b) { return coupling.values[a] > coupling.values[b]; });
  order.resize(kept);
  const float heaviest = coupling.values[order.front()];
  if (!(heaviest > 0)) return lines;
  for (std::size_t e : order) {
    const float mass = coupling.values[e];
    if (!(mass > 0)) break;
    const std::size_t i = e / coupling.k;
    const auto j = static_cast<std::size_t>(coupling.columns[e]);
    if (3 * j + 2 >= to.size()) {
      throw std::invalid_argument("coupling lines: target index " + std::to_string(j) + " past " +
                                  std::to_string(to.size() / 3) + " target positions");
    }
    lines.endpoints.insert(lines.endpoints.end(), {from[3 * i], from[3 * i + 1], from[3 * i + 2], to[3 * j],
                                                   to[3 * j + 1], to[3 * j + 2]});
    // Opacity by mass.
    const auto alpha = static_cast<std::uint8_t>(std::lround(kMinLineAlpha + (255.0 - kMinLineAlpha) * mass / heaviest));
    lines.rgba.insert(lines.rgba.end(), {90, 90, 90, alpha});
  }
  return lines;
}

}  // namespace flashot::gui
