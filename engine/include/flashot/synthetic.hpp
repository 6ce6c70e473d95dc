#pragma once
// Seeded synthetic point clouds for benchmarks, tests and samples (docs/multiscale.md, "Data"): nothing is
// downloaded, and the same (shape, n, d, seed) gives the same points on every machine and thread count.
// Plain C++20. Points are row-major float32 (n × d).

#include <cstddef>
#include <cstdint>
#include <random>
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

/// The dense benchmarks' draws (`flashot bench`, tests/bench/point_order_bench.cpp; docs/benchmarks.md): each takes
/// its values from `rng` in a fixed order, so one engine seeded the same gives the same problem in every program.
/// `count` N(0, 1) values.
std::vector<float> bench_normal(std::mt19937_64& rng, std::size_t count);
/// `count` points in d dimensions, the clustered data of tests/bench/peers/sweep.py: 8 centres ~ N(0, 3²·I), each
/// point a uniformly chosen centre plus N(0, 0.25²·I) noise (a sparse, multi-scale plan where N(0, 1) gives a dense
/// one).
std::vector<float> bench_clusters(std::mt19937_64& rng, std::size_t count, std::size_t d);
/// `count` weights U(0, 1) + 0.1, normalized to sum 1 (balanced OT needs equal masses on both sides; peers_bench.py
/// normalizes them the same way).
std::vector<float> bench_weights(std::mt19937_64& rng, std::size_t count);

}  // namespace flashot::synthetic
