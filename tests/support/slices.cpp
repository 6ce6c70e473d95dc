#include "slices.hpp"

#include <cmath>
#include <numbers>
#include <random>

namespace flashot::test {

int slice_region(double px, double py) {
  // An off-centre blob, then four curved layers.
  if ((px - 0.2) * (px - 0.2) + (py - 0.18) * (py - 0.18) < 0.15 * 0.15) return 4;
  const double s = py + 0.12 * std::sin(std::numbers::pi * (1.3 * px + 0.4)) + 0.25 * px * px;
  const int band = static_cast<int>(std::floor((s + 0.6) / 0.3));
  return band < 0 ? 0 : (band > 3 ? 3 : band);
}

void rigid_fit(const std::vector<float>& src, const std::vector<float>& dst, const std::vector<float>& w,
               double& angle, double t[2]) {
  double total = 0, ms[2] = {0, 0}, md[2] = {0, 0};
  for (std::size_t i = 0; i < w.size(); ++i) {
    total += w[i];
    for (int c = 0; c < 2; ++c) {
      ms[c] += w[i] * src[2 * i + c];
      md[c] += w[i] * dst[2 * i + c];
    }
  }
  for (int c = 0; c < 2; ++c) {
    ms[c] /= total;
    md[c] /= total;
  }
  double sc = 0, ss = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double ax = src[2 * i] - ms[0], ay = src[2 * i + 1] - ms[1];
    const double bx = dst[2 * i] - md[0], by = dst[2 * i + 1] - md[1];
    sc += w[i] * (ax * bx + ay * by);
    ss += w[i] * (ax * by - ay * bx);
  }
  angle = std::atan2(ss, sc);
  const double cs = std::cos(angle), sn = std::sin(angle);
  t[0] = md[0] - (cs * ms[0] - sn * ms[1]);
  t[1] = md[1] - (sn * ms[0] + cs * ms[1]);
}

SlicePair make_slice_pair(const SliceOptions& o) {
  constexpr int kClasses = 5;
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(-0.5, 0.5);
  SlicePair s;
  s.n = o.n_source;
  s.m = o.n_target;
  s.e = o.embedding_d;
  s.classes = kClasses;
  std::vector<double> means(kClasses * s.e);
  for (double& v : means) v = 2.0 * normal(rng);
  const auto embed = [&](int type, std::vector<float>& out, std::size_t row) {
    for (std::size_t c = 0; c < s.e; ++c)
      out[row * s.e + c] = static_cast<float>(means[type * s.e + c] + o.embedding_noise * normal(rng));
  };
  const double theta = o.rotation_degrees * std::numbers::pi / 180.0;
  s.rotation_radians = theta;
  s.translation[0] = o.translation_x * o.width;
  s.translation[1] = o.translation_y * o.width;
  const double cs = std::cos(theta), sn = std::sin(theta);
  // The deformation a·(sin 2πp_x, sin 2πp_y)/(2π) is a gradient field (no rotation in it) with zero mean over
  // the square, so the best rigid fit of the true correspondences is the rotation and translation given.
  const auto place = [&](double px, double py, float* out) {
    const double a = o.deformation / (2 * std::numbers::pi);
    const double qx = px + a * std::sin(2 * std::numbers::pi * px);
    const double qy = py + a * std::sin(2 * std::numbers::pi * py);
    out[0] = static_cast<float>(o.width * (cs * qx - sn * qy) + s.translation[0]);
    out[1] = static_cast<float>(o.width * (sn * qx + cs * qy) + s.translation[1]);
  };
  s.x.resize(s.n * 2);
  s.u.resize(s.n * s.e);
  s.label_x.resize(s.n);
  s.truth.resize(s.n * 2);
  // Each sample is re-centred on the tissue's centre, so that the known translation is also the one between the
  // samples (two random samples' centroids differ by ~1/√(12n) of the width otherwise).
  const auto positions = [&](std::size_t count, double extent) {
    std::vector<double> p(2 * count);
    double mean[2] = {0, 0};
    for (std::size_t i = 0; i < count; ++i)
      for (int c = 0; c < 2; ++c) mean[c] += (p[2 * i + c] = extent * unit(rng)) / static_cast<double>(count);
    for (std::size_t i = 0; i < count; ++i)
      for (int c = 0; c < 2; ++c) p[2 * i + c] -= mean[c];
    return p;
  };
  const std::vector<double> ps = positions(s.n, o.source_extent);
  for (std::size_t i = 0; i < s.n; ++i) {
    const double px = ps[2 * i], py = ps[2 * i + 1];
    s.x[2 * i] = static_cast<float>(o.width * px);
    s.x[2 * i + 1] = static_cast<float>(o.width * py);
    s.label_x[i] = slice_region(px, py);
    embed(s.label_x[i], s.u, i);
    place(px, py, &s.truth[2 * i]);
  }
  s.y.resize(s.m * 2);
  s.v.resize(s.m * s.e);
  s.label_y.resize(s.m);
  const std::vector<double> pt = positions(s.m, o.target_extent);
  for (std::size_t j = 0; j < s.m; ++j) {
    const double px = pt[2 * j], py = pt[2 * j + 1];
    s.label_y[j] = slice_region(px, py);
    embed(s.label_y[j], s.v, j);
    place(px, py, &s.y[2 * j]);
  }
  return s;
}

}  // namespace flashot::test
