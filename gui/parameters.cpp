#include "parameters.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "flashot/workflow/dataset.hpp"

namespace flashot::gui {
namespace {

using workflow::value_text;

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) out += (i ? ", " : "") + words[i];
  return out;
}

}  // namespace

std::vector<std::string> validate(const AlignParameters& p) {
  std::vector<std::string> problems;
  if (!(p.blur >= 0) || !std::isfinite(p.blur)) problems.push_back("blur must be ≥ 0 (got " + value_text(p.blur) + ")");
  if (!(p.scaling > 0 && p.scaling < 1)) problems.push_back("scaling must be in (0, 1) (got " + value_text(p.scaling) + ")");
  if (!(p.reach >= 0) || !std::isfinite(p.reach)) problems.push_back("reach must be ≥ 0 (got " + value_text(p.reach) + ")");
  if (!(p.tolerance >= 0) || !std::isfinite(p.tolerance)) {
    problems.push_back("tolerance must be ≥ 0 (got " + value_text(p.tolerance) + ")");
  }
  if (p.max_iterations < 1) {
    problems.push_back("max iterations must be ≥ 1 (got " + std::to_string(p.max_iterations) + ")");
  }
  try {
    parse_scheme(p.scheme);
  } catch (const std::invalid_argument&) {
    problems.push_back("scheme must be symmetric or alternating (got '" + p.scheme + "')");
  }
  try {
    const BackendKind kind = parse_backend(p.backend);
    const std::vector<std::string> present = available_backends();
    if (kind != BackendKind::kAuto && std::find(present.begin(), present.end(), p.backend) == present.end()) {
      problems.push_back("backend '" + p.backend + "' is not available here (available: " + join(present) + ")");
    }
  } catch (const std::invalid_argument&) {
    problems.push_back("backend must be auto, cpu or cuda (got '" + p.backend + "')");
  }
  if (p.top_k < 1 || p.top_k > kMaxTopK) {
    problems.push_back("top-k must be in [1, " + std::to_string(kMaxTopK) + "] (got " + std::to_string(p.top_k) + ")");
  }
  if (p.max_lines > kMaxLines) {
    problems.push_back("coupling lines must be ≤ " + std::to_string(kMaxLines) + " (got " +
                       std::to_string(p.max_lines) + ")");
  }
  return problems;
}

SolveOptions solve_options(const AlignParameters& p) {
  const std::vector<std::string> problems = validate(p);
  if (!problems.empty()) throw std::invalid_argument(problems.front());
  SolveOptions o;
  if (p.blur > 0) {
    o.blur = p.blur;
  } else {
    o.blur_relative = kDefaultBlurRelative;
  }
  o.scaling = p.scaling;
  o.reach = p.reach;  // the engine squares it: ρ = reach²
  o.tolerance = p.tolerance;
  o.max_iterations = p.max_iterations;
  o.scheme = parse_scheme(p.scheme);
  return o;
}

BackendOptions backend_options(const AlignParameters& p) {
  BackendOptions o;
  o.backend = parse_backend(p.backend);
  return o;
}

}  // namespace flashot::gui
