#pragma once
// Seeded synthetic point clouds for benchmarks, tests and samples (docs/multiscale.md, "Data"): nothing is
// downloaded, and the same (shape, n, d, seed) gives the same points on every machine and thread count.
// Plain C++20. Points are row-major float32 (n × d).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace flashot::synthetic {

enum class Shape {
  kNormal,    ///< N(0, I_d)
  kUniform,   ///< uniform in the cube [−1, 1]^d
  kClusters,  ///< a mixture of many anisotropic Gaussian clusters in d dimensions (single-cell-like embeddings)
  kSphere,    ///< the unit sphere's surface, d = 3, with 0.2 % normal noise
  kTorus,     ///< a torus (radii 1 and 0.35), d = 3
  kBumpy,     ///< a bumpy closed surface (a sphere with seeded radial harmonics), d = 3, like a scanned mesh
};

std::string to_string(Shape);
/// "normal", "uniform", "clusters", "sphere", "torus", "bumpy"; throws std::invalid_argument naming the text.
Shape parse_shape(const std::string&);

/// n points of `shape` in d dimensions. The surfaces need d = 3 (std::invalid_argument otherwise). `clusters` is
/// the number of mixture components of kClusters (≥ 1; 0 picks min(256, max(8, n / 2000))). `seed` fixes the shape
/// (the mixture's components, the bumps); `sample` draws another independent sample of the same shape.
std::vector<float> generate(Shape shape, std::size_t n, std::size_t d, std::uint64_t seed, std::size_t clusters = 0,
                            std::uint64_t sample = 0);

/// A known smooth deformation of points (n × d): y = R·x + t + amplitude·sin(2x + φ) per axis, with R a seeded
/// rotation (in the first two or three axes), t a seeded shift of 0.1 and φ seeded phases. Same order as x: y_i is
/// the image of x_i (the ground-truth correspondence).
std::vector<float> deform(std::span<const float> points, std::size_t d, std::uint64_t seed, double amplitude = 0.1);

}  // namespace flashot::synthetic
