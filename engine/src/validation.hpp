#pragma once
// Checks at the engine's API edge, shared by Problem (problem.cpp) and TransportDerivatives (differentiation.cpp):
// each throws std::invalid_argument naming the input and the value it got.

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot::detail {

/// A double as the messages print it.
std::string show(double v);
/// Throws std::invalid_argument("<what> (got <value>)") unless `ok`: the engine's one range check.
void require(bool ok, const std::string& what, double value);
/// Shape and finiteness of one point set; `name` is how the caller knows it ("x", "queries", …).
void validate_points(const PointsView& p, const std::string& name);
/// validate_points without the scan of the values: n ≥ 1, d ≥ 1, data.size() = n·d (same messages).
void validate_point_shape(const PointsView& p, const std::string& name);
/// "<name> has a non-finite coordinate at row <row>, column <column> (got <value>)": validate_points' message, also
/// what Problem::on_device reports from its device scan.
std::string non_finite_message(const std::string& name, std::size_t row, std::size_t column, double value);
/// Weights: empty (uniform) or one finite non-negative value per point of `points` (n of them), positive total.
void validate_weights(std::span<const float> w, std::size_t n, const std::string& name, const std::string& points);
/// CudaTuning's values (checked on every backend, so that a bad value fails the same everywhere).
void validate_cuda_tuning(const CudaTuning& t);
/// BackendOptions::point_order: one of the three values, and not kLocality for device inputs (std::invalid_argument).
void validate_point_order(PointOrder order, bool device_input);
/// The weights as given, or uniform 1/n when empty (validate first).
std::vector<float> weights_or_uniform(std::span<const float> w, std::size_t n);

}  // namespace flashot::detail
