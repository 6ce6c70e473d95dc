#pragma once
// The solve parameters as the window edits them, validated before Align starts.

#include <cstddef>
#include <string>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot::gui {

struct AlignParameters {
  /// Target blur in the data's units (ε = blur², squared-Euclidean cost). 0 = automatic: the engine's
  /// kDefaultBlurRelative of the diameter of both clouds (SolveOptions::blur_relative, the CLI's --rel-blur
  /// default), so unit-free data (PCA scores, millimetres) get a sensible ε.
  double blur = 0;
  double scaling = 0.5;        ///< ε-scaling factor, in (0, 1)
  double reach = 0;            ///< unbalanced KL reach in data units (ρ = reach²); 0 = balanced
  double tolerance = 1e-3;     ///< marginal error to stop at
  int max_iterations = 1000;   ///< budget of the final ε stage
  std::string scheme = "alternating";  ///< the CLI's default: fewer iterations at the final blur
  std::string backend = "auto";
  std::size_t top_k = 3;       ///< couplings kept per source point (lines, saved coupling)
  std::size_t max_lines = 1500;  ///< coupling lines drawn at most (the strongest)
  std::string transfer_column;   ///< target obs column whose labels go to the source; empty = none
};

inline constexpr std::size_t kMaxTopK = 64;
inline constexpr std::size_t kMaxLines = 200'000;

/// Every problem with `p`, one message each naming the parameter and the value (empty when valid), e.g.
/// "blur must be ≥ 0 (got -0.1)", "backend 'cuda' is not available here (available: cpu)".
std::vector<std::string> validate(const AlignParameters& p);

/// The engine's options for `p` (an automatic blur becomes SolveOptions::blur_relative; the engine then refuses
/// data whose points all coincide). Throws std::invalid_argument with the first message of validate() when `p`
/// is invalid.
SolveOptions solve_options(const AlignParameters& p);
BackendOptions backend_options(const AlignParameters& p);

}  // namespace flashot::gui
