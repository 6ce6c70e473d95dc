#pragma once
// The JSON report of a solve (`--report FILE.json`) and its one-paragraph summary for stderr.

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "flashot/flashot.hpp"
#include "flashot/workflow/dataset.hpp"

namespace flashot::workflow {

/// The solve as JSON: epsilon, cost (dual), primal_cost, converged, stop_reason, message, iterations,
/// marginal_error, backend, device, seconds, stages [{epsilon, iterations}], checks [{iteration, epsilon, error}].
/// Non-finite numbers become null (JSON has no NaN).
nlohmann::json solve_json(const SolveResult& result);
/// The options as JSON (cost, blur, epsilon, scaling, diameter, tolerance, …).
nlohmann::json options_json(const SolveOptions& options);
/// Peak resident memory of this process so far, bytes (getrusage).
std::size_t peak_memory_bytes();
/// Versions of flashot and the compiler that built it, as an object.
nlohmann::json versions_json();
/// A loaded point cloud as the reports describe it: file, representation, key, rows in the file and used, d, filter.
nlohmann::json cloud_json(const PointCloud& cloud);
/// A number for JSON: null when not finite.
nlohmann::json number(double value);

/// Multi-line human summary of a solve (for stderr): ε, cost, converged and why, iterations, error, time.
std::string solve_summary(const SolveResult& result);

}  // namespace flashot::workflow
