#pragma once
// Seeded synthetic tissue slices for the fused Gromov–Wasserstein tests and benchmarks: cells of a few types laid
// out in regions (curved layers and an off-centre blob, so that no rotation or mirror image of the layout matches
// itself), an expression embedding per cell (a mean per type plus noise), and a target slice that is another
// sample of the same tissue, mildly deformed, rotated and translated.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace flashot::test {

struct SliceOptions {
  std::size_t n_source = 1500;
  std::size_t n_target = 2000;
  double width = 1.0;             // side of the square tissue, in coordinate units
  double rotation_degrees = 30;   // target = R(θ)·(p + deformation(p)) + translation
  double translation_x = 0.3;     // in units of width
  double translation_y = -0.2;
  double deformation = 0.01;      // amplitude of the irrotational deformation, in units of width
  std::size_t embedding_d = 10;
  double embedding_noise = 0.3;   // per-coordinate standard deviation around the type's mean (means ~ N(0, 4))
  /// Fraction of the tissue's side the source slice covers (1: all of it; < 1: a centred sub-square, for
  /// unbalanced alignment of slices of different extent).
  double source_extent = 1.0;
  /// The same for the target slice (a centred sub-square of the tissue, sampled with all n_target cells: denser).
  double target_extent = 1.0;
  std::uint64_t seed = 7;
};

struct SlicePair {
  std::size_t n = 0, m = 0, e = 0;
  int classes = 0;
  std::vector<float> x, y;                      // (n×2), (m×2) coordinates
  std::vector<float> u, v;                      // (n×e), (m×e) embeddings
  std::vector<std::int32_t> label_x, label_y;   // cell types
  std::vector<float> truth;                     // (n×2) where each source cell lies in the target's frame
  double rotation_radians = 0;
  double translation[2] = {0, 0};               // in coordinate units
};

/// Deterministic in options.seed.
SlicePair make_slice_pair(const SliceOptions& options);

/// Weighted 2-D Procrustes: the rotation angle (radians) and translation t that best map src (n×2) onto dst (n×2)
/// in the weighted least-squares sense (w: n weights).
void rigid_fit(const std::vector<float>& src, const std::vector<float>& dst, const std::vector<float>& w,
               double& angle, double t[2]);

/// The cell type at tissue position (px, py) ∈ [−½, ½]² (the layout, for tests that need it).
int slice_region(double px, double py);

}  // namespace flashot::test
