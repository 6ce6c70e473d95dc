#pragma once
// One alignment as flashot-gui runs it, apart from any thread or widget: solve in the alignment space, then
// derive what the window shows (mapped source in the display space, strongest couplings, transferred labels).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dataset.hpp"
#include "flashot/workflow/dataset.hpp"
#include "flashot/flashot.hpp"
#include "parameters.hpp"

namespace flashot::gui {

struct AlignmentInput {
  Matrix source;                      ///< (n × d) alignment space
  Matrix target;                      ///< (m × d)
  std::vector<float> source_display;  ///< (n × 3) display space, may be empty (then no display mapping)
  std::vector<float> target_display;  ///< (m × 3)
  std::optional<workflow::Labels> target_labels;  ///< transferred onto the source
  AlignParameters parameters;
};

struct AlignmentOutcome {
  SolveResult result;
  SolveOptions options;  ///< as solved (progress callback dropped)
  BackendOptions backend;
  double diameter = 0;   ///< of both clouds (the engine's, Problem::diameter)
  std::size_t n = 0, m = 0, d = 0;
  std::vector<float> mapped;          ///< (n × d) barycentric projection into the target's alignment space
  std::vector<float> mapped_display;  ///< (n × 3) (P·Y_display)_i / (P·1)_i, empty without display input
  TopKCoupling coupling;              ///< top-k per source row
  std::optional<LabelTransfer> transfer;  ///< per source point
  std::optional<workflow::Labels> labels;      ///< the target's labels (categories, column name)
  bool cancelled() const { return result.reason == StopReason::kCancelled; }
};

/// Runs the solve and the queries. `progress` is called from the calling thread at every marginal-error check;
/// returning false cancels (the outcome then says cancelled() and carries no mapping). Throws
/// std::invalid_argument for invalid parameters or input (sizes, widths, non-finite values), std::runtime_error
/// for an unavailable backend.
AlignmentOutcome run_alignment(const AlignmentInput& input, const ProgressCallback& progress);

/// A line from each source point (at its mapped-layer position `from`, n × 3) to its strongest targets
/// (`to`, m × 3), the `max_lines` heaviest couplings in all; alpha ∝ mass / largest mass.
struct CouplingLines {
  std::vector<float> endpoints;     ///< L · 6
  std::vector<std::uint8_t> rgba;   ///< L · 4
};
CouplingLines coupling_lines(const TopKCoupling& coupling, std::span<const float> from, std::span<const float> to,
                             std::size_t max_lines);

}  // namespace flashot::gui
