#include "screen_estimate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace flashot::test {

ScreenEstimate rows_screen_estimate(PointsView x, PointsView y, std::span<const float> b, std::span<const float> g,
                                    double epsilon, double cost_scale, std::span<const std::uint32_t> order_x,
                                    std::span<const std::uint32_t> order_y, std::size_t tile_rows,
                                    std::size_t tile_cols) {
  const std::size_t n = x.n, m = y.n, d = x.d;
  // Position of every point in its side's order.
  std::vector<std::size_t> col_pos(m), row_at(n);
  for (std::size_t p = 0; p < m; ++p) col_pos[order_y.empty() ? p : order_y[p]] = p;
  for (std::size_t p = 0; p < n; ++p) row_at[p] = order_x.empty() ? p : order_x[p];
  const std::size_t groups = (n + tile_rows - 1) / tile_rows, tiles = (m + tile_cols - 1) / tile_cols;
  // The screen's cut (natural log): entries more than 2^-(26 + log2 m) below the row's sum are dropped.
  const double cut = (26.0 + std::log2(double(m))) * std::log(2.0);
  std::vector<double> logb(m);
  for (std::size_t j = 0; j < m; ++j)
    logb[j] = b[j] > 0 ? std::log(double(b[j])) : -std::numeric_limits<double>::infinity();
  std::size_t kept = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : kept)
  for (std::size_t gi = 0; gi < groups; ++gi) {
    std::vector<unsigned char> keep(tiles, 0);
    std::vector<double> l(m);
    for (std::size_t p = gi * tile_rows; p < std::min(n, (gi + 1) * tile_rows); ++p) {
      const float* xi = x.data.data() + row_at[p] * d;
      double top = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < m; ++j) {
        const float* yj = y.data.data() + j * d;
        double c = 0;
        for (std::size_t k = 0; k < d; ++k) {
          const double t = double(xi[k]) - double(yj[k]);
          c += t * t;
        }
        l[j] = logb[j] + (double(g[j]) - cost_scale * c) / epsilon;
        top = std::max(top, l[j]);
      }
      double sum = 0;
      for (std::size_t j = 0; j < m; ++j) sum += std::exp(l[j] - top);
      const double level = top + std::log(sum) - cut;
      for (std::size_t j = 0; j < m; ++j)
        if (l[j] >= level) keep[col_pos[j] / tile_cols] = 1;
    }
    for (unsigned char k : keep) kept += k;
  }
  return {kept, groups * tiles};
}

}  // namespace flashot::test
