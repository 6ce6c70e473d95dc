#include "flashot/workflow/report.hpp"

#include <sys/resource.h>

#include <cmath>
#include <cstdio>

namespace flashot::workflow {

nlohmann::json number(double value) { return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(); }

nlohmann::json solve_json(const SolveResult& r) {
  nlohmann::json j;
  j["epsilon"] = number(r.epsilon);
  j["cost"] = number(r.dual_cost);
  j["primal_cost"] = number(r.primal_cost);
  j["converged"] = r.converged;
  j["stop_reason"] = to_string(r.reason);
  j["message"] = r.message;
  j["iterations"] = r.iterations;
  j["marginal_error"] = number(r.marginal_error);
  j["backend"] = r.backend;
  j["device"] = r.device;
  j["cost_function"] = to_string(r.cost);
  j["reach_source"] = number(r.reach_source);
  j["reach_target"] = number(r.reach_target);
  j["solve_seconds"] = number(r.seconds);
  j["stages"] = nlohmann::json::array();
  for (const StageReport& s : r.stages) j["stages"].push_back({{"epsilon", number(s.epsilon)}, {"iterations", s.iterations}});
  nlohmann::json ms;
  ms["used"] = r.multiscale.used;
  ms["reason"] = r.multiscale.reason;
  if (r.multiscale.used) {
    ms["certified"] = r.multiscale.certified;
    ms["hierarchy"] = r.multiscale.hierarchy;
    ms["block"] = r.multiscale.row_block;
    ms["row_blocks"] = r.multiscale.row_blocks;
    ms["column_blocks"] = r.multiscale.column_blocks;
    ms["coarse_rows"] = r.multiscale.coarse_rows;
    ms["coarse_columns"] = r.multiscale.coarse_columns;
    ms["truncation"] = number(r.multiscale.truncation);
    ms["hierarchy_seconds"] = number(r.multiscale.hierarchy_seconds);
    ms["pattern_seconds"] = number(r.multiscale.pattern_seconds);
    ms["stages"] = nlohmann::json::array();
    for (const MultiscaleStage& s : r.multiscale.stages)
      ms["stages"].push_back({{"epsilon", number(s.epsilon)}, {"iterations", s.iterations}, {"coarse", s.coarse},
                              {"dense", s.dense}, {"kept_pairs", s.kept_pairs}, {"total_pairs", s.total_pairs},
                              {"kept_fraction", number(s.kept_fraction)}, {"rechecks", s.rechecks},
                              {"redone", s.redone}, {"largest_rise", number(s.largest_rise)}});
  }
  j["multiscale"] = ms;
  j["checks"] = nlohmann::json::array();
  for (const MarginalCheck& c : r.checks) {
    j["checks"].push_back({{"iteration", c.iteration}, {"epsilon", number(c.epsilon)}, {"error", number(c.error)}});
  }
  return j;
}

nlohmann::json options_json(const SolveOptions& o) {
  return {{"cost", to_string(o.cost)},          {"blur", number(o.blur)},
          {"blur_relative", number(o.blur_relative)},
          {"epsilon", number(o.epsilon)},       {"scaling", number(o.scaling)},
          {"diameter", number(o.diameter)},     {"stage_iterations", o.stage_iterations},
          {"tolerance", number(o.tolerance)},   {"check_every", o.check_every},
          {"max_iterations", o.max_iterations}, {"scheme", to_string(o.scheme)},
          {"reach", number(o.reach)},           {"reach_source", number(o.reach_source)},
          {"reach_target", number(o.reach_target)}};
}

std::size_t peak_memory_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return std::size_t(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

nlohmann::json versions_json() {
  return {{"flashot", version()}, {"compiler", __VERSION__}, {"cxx_standard", long(__cplusplus)}};
}

std::string solve_summary(const SolveResult& r) {
  char text[512];
  std::snprintf(text, sizeof text,
                "  epsilon %.4g (cost %s), OT cost %.6g (primal %.6g)\n"
                "  %s after %d iterations in %zu stages (%s), marginal error %.3g\n"
                "  %.3f s on %s (%s)\n",
                r.epsilon, to_string(r.cost).c_str(), r.dual_cost, r.primal_cost,
                r.converged ? "converged" : "NOT converged", r.iterations, r.stages.size(), to_string(r.reason).c_str(),
                r.marginal_error, r.seconds, r.backend.c_str(), r.device.c_str());
  std::string summary = text;
  if (!r.message.empty()) summary += "  " + r.message + "\n";
  return summary;
}

nlohmann::json cloud_json(const PointCloud& c) {
  return {{"file", c.path.string()}, {"representation", c.representation}, {"key", c.key},
          {"rows_in_file", c.file_rows}, {"rows_used", c.n()}, {"d", c.d},
          {"where", c.filter_text.empty() ? nlohmann::json() : nlohmann::json(c.filter_text)}};
}

}  // namespace flashot::workflow
