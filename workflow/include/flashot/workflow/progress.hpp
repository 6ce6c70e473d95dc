#pragma once
// Progress of a solve on stderr: a redrawn one-line bar on a terminal (stage, ε, iteration, marginal error,
// ETA), plain lines at most every few seconds otherwise (logs, CI), nothing when quiet.

#include <chrono>
#include <cstdio>
#include <string>

#include "flashot/flashot.hpp"

namespace flashot::workflow {

class ProgressDisplay {
 public:
  enum class Style { kAuto, kBar, kLines, kQuiet };
  /// kAuto picks kBar when `stream` is a terminal, else kLines. `label` prefixes every line ("align").
  /// `tolerance` lets the ETA extrapolate the marginal error's decay in the final stage.
  ProgressDisplay(std::string label, Style style, double tolerance, std::FILE* stream = stderr);
  /// Returns a callback for SolveOptions::progress; it never cancels. The display must outlive the solve.
  ProgressCallback callback();
  /// Ends the bar's line (call after the solve, also when it threw).
  void finish();
  /// The style picked (kAuto resolved).
  Style style() const { return style_; }

  /// Estimated seconds left: time per iteration so far × iterations expected. Expected iterations use the
  /// geometric decay of the marginal error between the last two checks of the final stage when it is
  /// decreasing, otherwise the remaining budget (then `upper_bound` is set). Exposed for tests.
  static double estimate_seconds_left(const Progress& previous, const Progress& current, double seconds_so_far,
                                      double tolerance, bool& upper_bound);

 private:
  void report(const Progress& p);
  std::string label_;
  Style style_;
  double tolerance_;
  std::FILE* stream_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_line_;
  Progress previous_;
  bool has_previous_ = false;
  bool bar_open_ = false;
};

}  // namespace flashot::workflow
