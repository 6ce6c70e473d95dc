#include "flashot/workflow/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace flashot::workflow {
namespace {

constexpr int kBarWidth = 24;
constexpr double kLineInterval = 5.0;  // seconds between plain progress lines

std::string format_seconds(double seconds) {
  char buffer[32];
  if (seconds < 60) {
    std::snprintf(buffer, sizeof buffer, "%.0fs", seconds);
  } else if (seconds < 3600) {
    std::snprintf(buffer, sizeof buffer, "%dm%02ds", int(seconds) / 60, int(seconds) % 60);
  } else {
    std::snprintf(buffer, sizeof buffer, "%dh%02dm", int(seconds) / 3600, (int(seconds) % 3600) / 60);
  }
  return buffer;
}

}  // namespace

ProgressDisplay::ProgressDisplay(std::string label, Style style, double tolerance, std::FILE* stream)
    : label_(std::move(label)), style_(style), tolerance_(tolerance), stream_(stream) {
  if (style_ == Style::kAuto) style_ = ::isatty(::fileno(stream_)) ? Style::kBar : Style::kLines;
  start_ = std::chrono::steady_clock::now();
  last_line_ = start_;
}

ProgressCallback ProgressDisplay::callback() {
  return [this](const Progress& p) {
    report(p);
    return true;
  };
}

double ProgressDisplay::estimate_seconds_left(const Progress& previous, const Progress& current,
                                              double seconds_so_far, double tolerance, bool& upper_bound) {
  upper_bound = true;
  if (current.iteration <= 0) return 0;
  const double per_iteration = seconds_so_far / current.iteration;
  double remaining = std::max(0, current.max_iterations - current.iteration);
  const bool final_stage = current.stage + 1 == current.stage_count && previous.stage == current.stage;
  // Sinkhorn converges linearly: err_k ≈ err_0·r^k, so the iterations to reach the tolerance follow from the
  // rate r seen between the last two checks.
  if (final_stage && tolerance > 0 && current.marginal_error > 0 && previous.marginal_error > current.marginal_error &&
      current.iteration > previous.iteration) {
    const double rate_per_iteration =
        std::log(current.marginal_error / previous.marginal_error) / (current.iteration - previous.iteration);
    const double needed = std::log(tolerance / current.marginal_error) / rate_per_iteration;
    if (std::isfinite(needed) && needed < remaining) {
      remaining = std::max(0.0, needed);
      upper_bound = false;
    }
  }
  return remaining * per_iteration;
}

void ProgressDisplay::report(const Progress& p) {
  if (style_ == Style::kQuiet) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  bool upper_bound = true;
  const double left = has_previous_ ? estimate_seconds_left(previous_, p, elapsed, tolerance_, upper_bound)
                                    : estimate_seconds_left(p, p, elapsed, tolerance_, upper_bound);
  previous_ = p;
  has_previous_ = true;
  char error[32] = "-";  // intermediate ε stages are not checked: the engine reports NaN there
  if (std::isfinite(p.marginal_error)) std::snprintf(error, sizeof error, "%.2e", p.marginal_error);
  char status[192];
  std::snprintf(status, sizeof status, "stage %d/%d  eps %.3g  iter %d/%d  err %s  ETA %s%s", p.stage + 1,
                p.stage_count, p.epsilon, p.iteration, p.max_iterations, error, upper_bound ? "<=" : "",
                format_seconds(left).c_str());
  if (style_ == Style::kBar) {
    const double fraction =
        p.max_iterations > 0 ? std::clamp(double(p.iteration) / p.max_iterations, 0.0, 1.0) : 0.0;
    const int filled = int(fraction * kBarWidth);
    std::string bar(std::size_t(filled), '#');
    bar.resize(kBarWidth, '.');
    std::fprintf(stream_, "\r\033[K%s [%s] %s", label_.c_str(), bar.c_str(), status);
    std::fflush(stream_);
    bar_open_ = true;
    return;
  }
  if (std::chrono::duration<double>(now - last_line_).count() < kLineInterval) return;
  last_line_ = now;
  std::fprintf(stream_, "%s: %s\n", label_.c_str(), status);
  std::fflush(stream_);
}

void ProgressDisplay::finish() {
  if (bar_open_) {
    std::fprintf(stream_, "\r\033[K");
    std::fflush(stream_);
    bar_open_ = false;
  }
}

}  // namespace flashot::workflow
