#pragma once
// Two tissue slices stacked in 3-D (issue 24's view of `flashot align --spatial`): the target slice in the plane
// z = 0, the source slice above it at z = gap, its cells at their raw coordinates or at the aligned ones (obsm
// `<KEY>_flashot` of an align --spatial output, or a slice alignment run here), coupled cells joined by lines.
// Plain data in, plain data out; the window hands the result to the VTK scene.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dataset.hpp"
#include "flashot/flashot.hpp"

namespace flashot::gui {

/// The obsm entries both slices have with 2 or 3 columns, `spatial` first; the source's `<KEY>_flashot` entries are
/// left out (they are the aligned copy of KEY, not a space of their own).
std::vector<std::string> common_spatial_keys(const Dataset& source, const Dataset& target);

/// The top-k coupling `flashot align --coupling` (or the GUI's Save coupling) writes: X a CSR matrix, obs = source
/// cells, var = target cells. Returned as rows × k (k = the longest row; shorter rows padded with value 0).
/// Throws std::invalid_argument naming the file when its shape is not n × m or X is not CSR.
TopKCoupling read_coupling(const std::filesystem::path& path, std::size_t n, std::size_t m);

struct SliceStackInput {
  std::vector<float> source;          ///< (n × dims) raw source coordinates
  std::vector<float> source_aligned;  ///< (n × dims) in the target's frame; empty = none
  std::vector<float> target;          ///< (m × dims)
  std::size_t dims = 2;               ///< 2 or 3
  bool use_aligned = true;            ///< draw the aligned source (when there is one)
  double spacing = 0.35;              ///< gap between the planes, × the target slice's extent
  const TopKCoupling* coupling = nullptr;  ///< may be null
  std::size_t max_lines = 2000;       ///< the heaviest couplings drawn
};

struct SliceStack {
  std::vector<float> source_xyz;  ///< (n × 3) at z = gap (+ its own z for 3-D coordinates)
  std::vector<float> target_xyz;  ///< (m × 3) at z = 0 (+ its own z)
  std::vector<float> line_endpoints;      ///< L · 6
  std::vector<std::uint8_t> line_rgba;    ///< L · 4, alpha ∝ plan weight / the heaviest drawn
  double extent = 0;  ///< the target slice's largest bounding-box side
  double gap = 0;     ///< spacing × extent
  bool aligned = false;  ///< the source is drawn at its aligned coordinates
};

/// Builds the stack. Raw source coordinates (no aligned ones, or use_aligned off) are shifted so their centroid
/// lies over the target's, so the planes overlap; aligned ones are drawn as they are. Throws
/// std::invalid_argument for sizes that disagree or a spacing that is negative or not finite.
SliceStack build_slice_stack(const SliceStackInput& input);

struct SliceAlignParameters {
  double alpha = 1;      ///< weight of the spatial (GW) term; < 1 needs an embedding
  double blur = 0.05;    ///< in align --spatial's normalized units (its default)
  double reach = 0;
  std::string model = "rigid";  ///< rigid | affine | nonrigid
  std::size_t top_k = 5;
  int max_outer = 100;  ///< outer (linearization) iterations at most (align --spatial's --max-outer)
  std::string backend = "auto";
};

struct SliceAlignmentOutcome {
  std::vector<float> aligned;  ///< (n × dims) the source moved into the target's frame
  TopKCoupling coupling;
  std::string model;
  double rotation_degrees = 0;
  double rms = 0;
  double objective = 0;
  bool converged = false;
  int outer_iterations = 0;
  std::string message;
};

/// `progress(outer, max_outer, objective)`; false cancels (the outcome is then empty: aligned.empty()).
using SliceProgress = std::function<bool(int, int, double)>;

/// `flashot align --spatial`'s solve (workflow::align_slices) on coordinates x (n × dims), y (m × dims) and, when
/// given, embeddings u, v (same width). Throws std::invalid_argument for bad parameters or data.
SliceAlignmentOutcome run_slice_alignment(const Matrix& x, const Matrix& y, const Matrix* u, const Matrix* v,
                                          const SliceAlignParameters& parameters, const SliceProgress& progress);

}  // namespace flashot::gui
