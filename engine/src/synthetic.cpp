// Seeded synthetic point clouds (flashot/synthetic.hpp). Every point draws from its own counter-based stream
// (splitmix64 of the seed and the index), so the output does not depend on the thread count.
#include "flashot/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace flashot::synthetic {

namespace {

struct Stream {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
  double normal() {
    const double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * v);
  }
};

Stream stream(std::uint64_t seed, std::uint64_t index, std::uint64_t salt) {
  Stream s{seed * 0xd1b54a32d192ed03ULL ^ salt};
  s.state ^= Stream{index + 0x632be59bd9b4e019ULL}.next();
  return s;
}

void unit_direction(Stream& r, double* u) {
  double norm = 0;
  do {
    norm = 0;
    for (int c = 0; c < 3; ++c) {
      u[c] = r.normal();
      norm += u[c] * u[c];
    }
  } while (norm < 1e-12);
  norm = std::sqrt(norm);
  for (int c = 0; c < 3; ++c) u[c] /= norm;
}

}  // namespace

std::string to_string(Shape s) {
  switch (s) {
    case Shape::kNormal: return "normal";
    case Shape::kUniform: return "uniform";
    case Shape::kClusters: return "clusters";
    case Shape::kSphere: return "sphere";
    case Shape::kTorus: return "torus";
    case Shape::kBumpy: return "bumpy";
  }
  return "unknown";
}

Shape parse_shape(const std::string& text) {
  for (Shape s : {Shape::kNormal, Shape::kUniform, Shape::kClusters, Shape::kSphere, Shape::kTorus, Shape::kBumpy})
    if (to_string(s) == text) return s;
  throw std::invalid_argument("data shape must be normal, uniform, clusters, sphere, torus or bumpy (got '" + text +
                              "')");
}

std::vector<float> generate(Shape shape, std::size_t n, std::size_t d, std::uint64_t seed, std::size_t clusters,
                            std::uint64_t sample) {
  if (d == 0) throw std::invalid_argument("synthetic data: d must be ≥ 1 (got 0)");
  const bool surface = shape == Shape::kSphere || shape == Shape::kTorus || shape == Shape::kBumpy;
  if (surface && d != 3)
    throw std::invalid_argument("synthetic data: the " + to_string(shape) + " surface needs d = 3 (got " +
                                std::to_string(d) + ")");
  std::vector<float> out(n * d);
  // Mixture components: centre, per-component linear map A (d × d) = random rotation-like matrix × scales.
  std::size_t k = clusters > 0 ? clusters : std::min<std::size_t>(256, std::max<std::size_t>(8, n / 2000));
  std::vector<double> centres, maps, weights;
  if (shape == Shape::kClusters) {
    Stream r = stream(seed, 0, 0xc1u);
    centres.resize(k * d);
    maps.resize(k * d * d);
    weights.resize(k);
    double total = 0;
    for (std::size_t c = 0; c < k; ++c) {
      for (std::size_t q = 0; q < d; ++q) centres[c * d + q] = 2.0 * r.uniform() - 1.0;
      for (std::size_t q = 0; q < d; ++q) {
        const double scale = 0.01 * std::pow(10.0, r.uniform());  // axis scale in [0.01, 0.1): anisotropic
        for (std::size_t p = 0; p < d; ++p) maps[(c * d + p) * d + q] = r.normal() / std::sqrt(double(d)) * scale;
      }
      weights[c] = total += 0.2 + r.uniform();
    }
    for (double& w : weights) w /= total;
  }
  // Bumps of the bumpy surface: seeded sums of a few products of sines.
  double bump[6][3];
  {
    Stream r = stream(seed, 0, 0xb0u);
    for (auto& b : bump) {
      b[0] = 0.04 + 0.04 * r.uniform();              // amplitude
      b[1] = std::floor(2 + 6 * r.uniform());        // frequency
      b[2] = 2 * std::numbers::pi * r.uniform();     // phase
    }
  }
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    Stream r = stream(seed ^ (sample * 0x2545f4914f6cdd1dULL), i + 1, static_cast<std::uint64_t>(shape) + 1);
    float* p = out.data() + i * d;
    switch (shape) {
      case Shape::kNormal:
        for (std::size_t c = 0; c < d; ++c) p[c] = static_cast<float>(r.normal());
        break;
      case Shape::kUniform:
        for (std::size_t c = 0; c < d; ++c) p[c] = static_cast<float>(2.0 * r.uniform() - 1.0);
        break;
      case Shape::kClusters: {
        const double u = r.uniform();
        const std::size_t c =
            std::min<std::size_t>(k - 1, std::upper_bound(weights.begin(), weights.end(), u) - weights.begin());
        std::vector<double> z(d);
        for (double& v : z) v = r.normal();
        for (std::size_t q = 0; q < d; ++q) {
          double v = centres[c * d + q];
          for (std::size_t s = 0; s < d; ++s) v += maps[(c * d + q) * d + s] * z[s];
          p[q] = static_cast<float>(v);
        }
        break;
      }
      case Shape::kSphere: {
        double u[3];
        unit_direction(r, u);
        const double radius = 1.0 + 0.002 * r.normal();
        for (int c = 0; c < 3; ++c) p[c] = static_cast<float>(radius * u[c]);
        break;
      }
      case Shape::kTorus: {
        // Area-uniform on the torus: accept the tube angle with probability (R + r cos v) / (R + r).
        const double R = 1.0, rt = 0.35;
        double a = 0, v = 0;
        do {
          a = 2 * std::numbers::pi * r.uniform();
          v = 2 * std::numbers::pi * r.uniform();
        } while (r.uniform() * (R + rt) > R + rt * std::cos(v));
        p[0] = static_cast<float>((R + rt * std::cos(v)) * std::cos(a));
        p[1] = static_cast<float>((R + rt * std::cos(v)) * std::sin(a));
        p[2] = static_cast<float>(rt * std::sin(v));
        break;
      }
      case Shape::kBumpy: {
        double u[3];
        unit_direction(r, u);
        const double theta = std::acos(std::clamp(u[2], -1.0, 1.0)), phi = std::atan2(u[1], u[0]);
        double radius = 1.0;
        for (int b = 0; b < 6; ++b)
          radius += bump[b][0] * std::sin(bump[b][1] * theta + bump[b][2]) * std::cos((b + 1) * phi + bump[b][2]);
        for (int c = 0; c < 3; ++c) p[c] = static_cast<float>(radius * u[c]);
        break;
      }
    }
  }
  return out;
}

std::vector<float> deform(std::span<const float> points, std::size_t d, std::uint64_t seed, double amplitude) {
  if (d == 0 || points.size() % d != 0)
    throw std::invalid_argument("deform: points must hold n·d values (got " + std::to_string(points.size()) +
                                " for d = " + std::to_string(d) + ")");
  Stream r = stream(seed, 0, 0xdefu);
  // Rotation: about the z axis (d ≥ 2) and then the x axis (d ≥ 3), angles up to 0.3 rad.
  const double a1 = 0.3 * (2 * r.uniform() - 1), a2 = 0.3 * (2 * r.uniform() - 1);
  std::vector<double> shift(d), phase(d);
  for (std::size_t c = 0; c < d; ++c) {
    shift[c] = 0.1 * (2 * r.uniform() - 1);
    phase[c] = 2 * std::numbers::pi * r.uniform();
  }
  const std::size_t n = points.size() / d;
  std::vector<float> out(points.size());
#pragma omp parallel
  {
    std::vector<double> v(d);  // one per thread, not one heap allocation per point
#pragma omp for schedule(static)
    for (std::size_t i = 0; i < n; ++i) {
      std::copy(points.begin() + i * d, points.begin() + (i + 1) * d, v.begin());
      if (d >= 2) {
        const double x = v[0], y = v[1];
        v[0] = std::cos(a1) * x - std::sin(a1) * y;
        v[1] = std::sin(a1) * x + std::cos(a1) * y;
      }
      if (d >= 3) {
        const double y = v[1], z = v[2];
        v[1] = std::cos(a2) * y - std::sin(a2) * z;
        v[2] = std::sin(a2) * y + std::cos(a2) * z;
      }
      for (std::size_t c = 0; c < d; ++c)
        out[i * d + c] = static_cast<float>(v[c] + shift[c] + amplitude * std::sin(2.0 * points[i * d + c] + phase[c]));
    }
  }
  return out;
}

std::vector<float> bench_normal(std::mt19937_64& rng, std::size_t count) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& v : values) v = normal(rng);
  return values;
}

std::vector<float> bench_clusters(std::mt19937_64& rng, std::size_t count, std::size_t d) {
  constexpr int kCentres = 8;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> centres(kCentres * d);
  for (float& c : centres) c = 3.0f * normal(rng);
  std::uniform_int_distribution<int> pick(0, kCentres - 1);
  std::vector<float> values(count * d);
  for (std::size_t i = 0; i < count; ++i) {
    const float* c = &centres[std::size_t(pick(rng)) * d];
    for (std::size_t k = 0; k < d; ++k) values[i * d + k] = c[k] + 0.25f * normal(rng);
  }
  return values;
}

std::vector<float> bench_weights(std::mt19937_64& rng, std::size_t count) {
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> values(count);
  double total = 0;
  for (float& v : values) total += (v = uniform(rng) + 0.1f);
  for (float& v : values) v = float(v / total);
  return values;
}

}  // namespace flashot::synthetic
