// Separable cost terms moved into potentials and weights (separable.hpp, docs/gromov-wasserstein.md §4).
#include "separable.hpp"

#include <algorithm>
#include <cmath>

namespace flashot::detail {

double side_rho(double common, double own) {
  const double reach = own > 0 ? own : common;
  return reach * reach;
}

SeparableTerms::SeparableTerms(double eps, double rho_x, double rho_y)
    : epsilon(eps), kappa_x(rho_x > 0 ? 1.0 / (eps + rho_x) : 0.0), kappa_y(rho_y > 0 ? 1.0 / (eps + rho_y) : 0.0) {}

void SeparableTerms::balance(std::vector<double>& a_terms, std::vector<double>& b_terms) const {
  if (a_terms.empty() || b_terms.empty()) return;
  const double min_a = *std::min_element(a_terms.begin(), a_terms.end());
  const double min_b = *std::min_element(b_terms.begin(), b_terms.end());
  double delta = 0;
  if (kappa_x > 0 && kappa_y > 0) delta = (kappa_y * min_b - kappa_x * min_a) / (kappa_x + kappa_y);
  else if (kappa_x > 0) delta = -min_a;
  else if (kappa_y > 0) delta = min_b;
  for (double& v : a_terms) v += delta;
  for (double& v : b_terms) v -= delta;
}

namespace {
std::vector<float> reweighted(std::span<const float> w, std::span<const double> terms, double kappa) {
  std::vector<float> out(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) out[i] = static_cast<float>(w[i] * std::exp(-kappa * terms[i]));
  return out;
}
}  // namespace

std::vector<float> SeparableTerms::source_weights(std::span<const float> a, std::span<const double> a_terms) const {
  return reweighted(a, a_terms, kappa_x);
}

std::vector<float> SeparableTerms::target_weights(std::span<const float> b, std::span<const double> b_terms) const {
  return reweighted(b, b_terms, kappa_y);
}

}  // namespace flashot::detail
