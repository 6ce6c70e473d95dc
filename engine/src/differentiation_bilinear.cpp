// The default Backend::apply_bilinear: the bilinear weight ⟨u_i, w_j⟩ = Σ_c u_ic w_jc is split over c, so each term
// is an ordinary plan application of the derived value columns w_jc·v_j, contracted with u_ic afterwards.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backend.hpp"

namespace flashot::detail {

void Backend::apply_bilinear(const PlanParams& p, Side rows, std::span<const float> u, std::span<const float> w,
                             std::size_t e, std::span<const float> v, std::size_t k, std::span<float> out) const {
  if (e == 0 || k == 0) throw std::invalid_argument("apply_bilinear needs e ≥ 1 and k ≥ 1 (got e = " +
                                                    std::to_string(e) + ", k = " + std::to_string(k) + ")");
  const std::size_t rows_count = u.size() / e;
  const std::size_t keys = w.size() / e;
  if (u.size() != rows_count * e || w.size() != keys * e || v.size() != keys * k || out.size() != rows_count * k)
    throw std::invalid_argument("apply_bilinear: u, w, v, out sizes do not agree with e = " + std::to_string(e) +
                                " and k = " + std::to_string(k));
  // Enough columns per application to amortise its pass over the plan, few enough to keep the derived value matrix
  // and the output at O((n + m)·kMaxColumns).
  constexpr std::size_t kMaxColumns = 256;
  if (w.data() == v.data() && e == k) {
    // w = v (the Hessian's Σ_j P_ij y_j⟨y_j, u_i⟩): the moment Σ_j P_ij v_jc v_jc' is symmetric in (c, c'), so only
    // the e(e+1)/2 pairs c ≤ c' are applied.
    std::vector<std::pair<std::size_t, std::size_t>> pairs;
    for (std::size_t c = 0; c < e; ++c)
      for (std::size_t q = c; q < e; ++q) pairs.emplace_back(c, q);
    std::vector<double> acc(rows_count * k, 0.0);
    for (std::size_t p0 = 0; p0 < pairs.size(); p0 += kMaxColumns) {
      const std::size_t cols = std::min(kMaxColumns, pairs.size() - p0);
      // (keys, cols): column t holds v_{j,c}·v_{j,c'} for pair p0 + t
      std::vector<float> derived(keys * cols);
      for (std::size_t j = 0; j < keys; ++j)
        for (std::size_t t = 0; t < cols; ++t)
          derived[j * cols + t] = v[j * k + pairs[p0 + t].first] * v[j * k + pairs[p0 + t].second];
      std::vector<float> moment(rows_count * cols);
      apply(p, rows, derived, cols, false, moment);
      for (std::size_t i = 0; i < rows_count; ++i)
        for (std::size_t t = 0; t < cols; ++t) {
          const auto [c, q] = pairs[p0 + t];
          const double mct = moment[i * cols + t];
          acc[i * k + c] += mct * u[i * e + q];
          if (q != c) acc[i * k + q] += mct * u[i * e + c];
        }
    }
    std::transform(acc.begin(), acc.end(), out.begin(), [](double x) { return static_cast<float>(x); });
    return;
  }
  const std::size_t per_chunk = std::max<std::size_t>(1, kMaxColumns / k);
  std::vector<double> acc(rows_count * k, 0.0);
  for (std::size_t c0 = 0; c0 < e; c0 += per_chunk) {
    const std::size_t ce = std::min(per_chunk, e - c0);
    const std::size_t cols = ce * k;
    // (keys, ce·k): column block t holds w_{j,c0+t}·v_j
    std::vector<float> derived(keys * cols);
    for (std::size_t j = 0; j < keys; ++j)
      for (std::size_t t = 0; t < ce; ++t)
        for (std::size_t q = 0; q < k; ++q) derived[j * cols + t * k + q] = w[j * e + c0 + t] * v[j * k + q];
    std::vector<float> part(rows_count * cols);
    apply(p, rows, derived, cols, false, part);
    for (std::size_t i = 0; i < rows_count; ++i)
      for (std::size_t t = 0; t < ce; ++t) {
        const double ui = u[i * e + c0 + t];
        for (std::size_t q = 0; q < k; ++q) acc[i * k + q] += ui * part[i * cols + t * k + q];
      }
  }
  std::transform(acc.begin(), acc.end(), out.begin(), [](double x) { return static_cast<float>(x); });
}

}  // namespace flashot::detail
