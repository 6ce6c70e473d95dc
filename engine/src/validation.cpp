// Checks at the engine's API edge (validation.hpp).
#include "validation.hpp"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace flashot::detail {

std::string show(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

void require(bool ok, const std::string& what, double value) {
  if (!ok) throw std::invalid_argument(what + " (got " + show(value) + ")");
}

/// Shape and finiteness of one point set; `name` is how the caller knows it ("x", "queries", …).
void validate_points(const PointsView& p, const std::string& name) {
  validate_point_shape(p, name);
  for (std::size_t i = 0; i < p.n; ++i)
    for (std::size_t c = 0; c < p.d; ++c)
      if (!std::isfinite(p.data[i * p.d + c]))
        throw std::invalid_argument(non_finite_message(name, i, c, p.data[i * p.d + c]));
}

void validate_point_shape(const PointsView& p, const std::string& name) {
  if (p.n == 0) throw std::invalid_argument(name + " must not be empty (got " + name + ".n = 0)");
  if (p.d == 0) throw std::invalid_argument(name + ".d must be ≥ 1 (got 0)");
  if (p.data.size() != p.n * p.d)
    throw std::invalid_argument(name + ".data must hold " + name + ".n·" + name + ".d = " + std::to_string(p.n) +
                                "·" + std::to_string(p.d) + " = " + std::to_string(p.n * p.d) + " values (got " +
                                std::to_string(p.data.size()) + ")");
}

std::string non_finite_message(const std::string& name, std::size_t row, std::size_t column, double value) {
  return name + " has a non-finite coordinate at row " + std::to_string(row) + ", column " + std::to_string(column) +
         " (got " + show(value) + ")";
}

/// Weights: empty (uniform) or one finite non-negative value per point, with a positive total.
void validate_weights(std::span<const float> w, std::size_t n, const std::string& name, const std::string& points) {
  if (w.empty()) return;
  if (w.size() != n)
    throw std::invalid_argument(name + " must be empty (uniform) or hold " + points + ".n = " + std::to_string(n) +
                                " weights (got " + std::to_string(w.size()) + ")");
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(w[i]) || w[i] < 0)
      throw std::invalid_argument(name + "[" + std::to_string(i) + "] must be a finite weight ≥ 0 (got " +
                                  show(w[i]) + ")");
    total += w[i];
  }
  if (!(total > 0)) throw std::invalid_argument(name + " must have a positive total mass (got " + show(total) + ")");
}

void validate_cuda_tuning(const CudaTuning& t) {
  const int c = t.c_transform_columns;
  if (c != 0 && c != 1 && c != 2 && c != 4)
    throw std::invalid_argument("cuda.c_transform_columns must be 0 (default), 1, 2 or 4 (got " + std::to_string(c) +
                                ")");
  const int r = t.c_transform_tile_rows;
  if (r != 0 && r != 2 && r != 4 && r != 8)
    throw std::invalid_argument("cuda.c_transform_tile_rows must be 0 (default), 2, 4 or 8 (got " + std::to_string(r) +
                                ")");
}

void validate_point_order(PointOrder order, bool device_input) {
  if (order != PointOrder::kAuto && order != PointOrder::kInput && order != PointOrder::kLocality)
    throw std::invalid_argument("point_order must be auto, input or locality (got " +
                                std::to_string(static_cast<int>(order)) + ")");
  if (order == PointOrder::kLocality && device_input)
    throw std::invalid_argument("point_order = locality needs host inputs: a Problem::on_device problem keeps its "
                                "points in their order (use point_order = auto or input)");
}

std::vector<float> weights_or_uniform(std::span<const float> w, std::size_t n) {
  if (!w.empty()) return {w.begin(), w.end()};
  return std::vector<float>(n, static_cast<float>(1.0 / static_cast<double>(n)));
}

}  // namespace flashot::detail
