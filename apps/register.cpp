// flashot register SOURCE.ply TARGET.ply -o OUT.ply --model rigid|similarity|affine|nonrigid: OT-based
// registration (app/registration.hpp; nonrigid: nonrigid.hpp). Prints the 4×4 transform (or, nonrigid, the field's
// size) and the RMS; OUT is SOURCE moved, with the original coordinates kept as x_original, y_original, z_original.

#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <unistd.h>

#include "cli.hpp"
#include "flashot/workflow/dataset.hpp"
#include "flashot/workflow/output_set.hpp"
#include "flashot/workflow/registration.hpp"
#include "flashot/workflow/report.hpp"
#include "flashot/workflow/run_plan.hpp"
#include "flashot/workflow/nonrigid.hpp"

namespace flashot::cli {

namespace {

nlohmann::json rounds_json(const std::vector<workflow::RegistrationRound>& rounds) {
  nlohmann::json out = nlohmann::json::array();
  for (const workflow::RegistrationRound& r : rounds) {
    out.push_back({{"epsilon", r.epsilon}, {"iterations", r.iterations}, {"rms", r.rms},
                   {"displacement", r.displacement}, {"converged", r.converged}, {"multiscale", r.multiscale}});
  }
  return out;
}

/// " (multiscale in 12 of 12 rounds)", or nothing when no round's solve ran it.
std::string multiscale_note(const std::vector<workflow::RegistrationRound>& rounds) {
  std::size_t used = 0;
  for (const workflow::RegistrationRound& r : rounds) used += r.multiscale;
  if (used == 0) return "";
  return " (multiscale in " + std::to_string(used) + " of " + std::to_string(rounds.size()) + " rounds)";
}

// --model nonrigid: the field is no 4×4 matrix, so the output, report and printout differ from the affine models.
int register_nonrigid_main(const po::variables_map& vm, const workflow::PointCloud& source, const workflow::PointCloud& target,
                           const workflow::NonrigidOptions& field, const workflow::RegistrationProgress& progress,
                           const std::filesystem::path& out_path, bool quiet, bool terminal) {
  const workflow::NonrigidResult result = workflow::register_nonrigid(source.view(), target.view(), field, progress);
  if (!quiet && terminal) std::fprintf(stderr, "\r\033[K");
  workflow::AlignmentOutput output;
  output.mapped = result.moved;
  workflow::OutputSet outputs;
  workflow::write_enriched_copy(source, output, outputs.stage(out_path));
  if (vm.count("report")) {
    nlohmann::json report = workflow::solve_json(result.last_solve);
    report["command"] = "register";
    report["model"] = "nonrigid";
    report["iterations"] = result.iterations;
    report["converged"] = result.converged;
    report["final_solve_converged"] = result.last_solve.converged;
    report["rms"] = result.rms;
    report["diameter"] = result.diameter;
    report["kernel_width"] = result.kernel_width;
    report["control_points"] = result.control_points.size() / 3;
    report["source"] = {{"file", vm["source"].as<std::string>()}, {"points", source.n()}};
    report["target"] = {{"file", vm["target"].as<std::string>()}, {"points", target.n()}};
    report["rounds"] = rounds_json(result.rounds);
    report["parameters"] = {{"blur", field.blur}, {"start_blur", field.start_blur}, {"anneal", field.anneal},
                            {"max_rounds", field.max_rounds}, {"reach", field.reach},
                            {"reach_source", field.reach_source}, {"reach_target", field.reach_target},
                            {"regularization", field.regularization},
                            {"backend_requested", to_string(field.backend.backend)},
                            {"multiscale", to_string(field.multiscale)}};
    report["total_seconds"] = result.seconds;
    report["peak_memory_bytes"] = workflow::peak_memory_bytes();
    report["versions"] = workflow::versions_json();
    workflow::write_text_atomically(outputs.stage(vm["report"].as<std::string>()),
                               report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  outputs.commit();
  std::printf("nonrigid field: %zu control points, kernel width %.6g\nrms %.6g (weighted, to the OT correspondences)\n",
              result.control_points.size() / 3, result.kernel_width, result.rms);
  if (!quiet) {
    std::fprintf(stderr, "flashot register: %s after %zu rounds (%d Sinkhorn iterations) in %.3f s on %s%s; wrote %s\n",
                 result.converged ? "converged" : "NOT converged", result.rounds.size(), result.iterations,
                 result.seconds, result.backend.c_str(), multiscale_note(result.rounds).c_str(),
                 out_path.string().c_str());
  }
  return 0;
}

}  // namespace

int register_main(const std::vector<std::string>& args) {
  po::options_description options("register options");
  options.add_options()
      ("help,h", "this help")
      ("output,o", po::value<std::string>()->required(), "OUT.ply: SOURCE moved onto TARGET")
      ("model", po::value<std::string>()->default_value("rigid"), "rigid | similarity | affine | nonrigid")
      ("kernel-width", po::value<double>(), "nonrigid: smoothness scale of the displacement (default 0.1 x diameter)")
      ("regularization", po::value<double>()->default_value(1e-2), "nonrigid: weight of the field's RKHS norm")
      ("control-points", po::value<long long>()->default_value(200), "nonrigid: kernel centres on the source")
      ("blur", po::value<double>(), "final blur in data units (default 0.01 x diameter)")
      ("start-blur", po::value<double>(), "first round's blur (default 0.5 x diameter)")
      ("anneal", po::value<double>()->default_value(0.7), "blur factor between rounds, in (0,1)")
      ("max-rounds", po::value<long long>()->default_value(60), "most OT + Procrustes rounds")
      ("reach", po::value<double>()->default_value(0), "partial overlap: reach in data units on both sides")
      ("reach-source", po::value<double>()->default_value(0), "reach on SOURCE only (0 = --reach)")
      ("reach-target", po::value<double>()->default_value(0), "reach on TARGET only (0 = --reach)")
      ("rel-reach", po::value<double>()->default_value(workflow::RegistrationOptions::kDefaultReachTargetRelative),
       "without --reach*: TARGET's reach = this x diameter, SOURCE balanced (a scan is part of the model); "
       "0 = balanced")
      ("report", po::value<std::string>(), "FILE.json: transform, RMS, rounds, convergence, timings")
      ("quiet,q", "print only the transform and RMS");
  add_backend_options(options);
  add_multiscale_option(options);
  po::positional_options_description positional;
  add_ply_pair_options(options, positional);
  const po::variables_map vm = parse(args, options, positional);
  if (vm.count("help")) {
    print_help("flashot register SOURCE.ply TARGET.ply -o OUT.ply [--model rigid|similarity|affine|nonrigid]",
               "Registers SOURCE onto TARGET like ICP, with entropic-OT correspondences instead of nearest\n"
               "neighbours: each round solves OT between the moved SOURCE and TARGET, takes every source point's\n"
               "barycentric target (weighted by the mass it sends) and fits the transform by weighted Procrustes;\n"
               "blur shrinks from coarse to fine over the rounds. By default TARGET is unbalanced with a reach of\n"
               "0.02 x the diameter (--rel-reach), so a partial scan of a whole model registers; --reach,\n"
               "--reach-source, --reach-target set reaches in data units instead. Prints the 4x4 transform and the\n"
               "RMS, and warns when the result looks off. --model nonrigid fits a\n"
               "smooth Gaussian-kernel displacement field instead (coherent-point-drift M-step on OT targets).",
               options);
    return 0;
  }
  const PlyPair paths = ply_pair(vm);
  const std::filesystem::path& source_path = paths.source;
  const std::filesystem::path& target_path = paths.target;
  const std::filesystem::path& out_path = paths.output;
  workflow::RegistrationOptions reg;
  try {
    if (vm["model"].as<std::string>() != "nonrigid") reg.model = workflow::parse_transform_model(vm["model"].as<std::string>());
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (vm.count("blur")) reg.blur = require_positive_double(vm, "blur");
  if (vm.count("start-blur")) reg.start_blur = require_positive_double(vm, "start-blur");
  reg.anneal = require_positive_double(vm, "anneal");
  if (reg.anneal >= 1) throw UsageError("--anneal must be in (0, 1) (got " + format_double(reg.anneal) + ")");
  const long long rounds = require_positive(vm, "max-rounds");
  if (rounds > 100'000) throw UsageError("--max-rounds is too large (got " + std::to_string(rounds) + ")");
  reg.max_rounds = int(rounds);
  reg.reach = require_non_negative_double(vm, "reach");
  reg.reach_source = require_non_negative_double(vm, "reach-source");
  reg.reach_target = require_non_negative_double(vm, "reach-target");
  reg.reach_target_relative = require_non_negative_double(vm, "rel-reach");
  reg.backend = backend_options(vm);
  reg.multiscale = multiscale_option(vm);
  const bool quiet = vm.count("quiet") > 0;
  const bool nonrigid = vm["model"].as<std::string>() == "nonrigid";
  workflow::NonrigidOptions field;
  if (nonrigid) {
    field.blur = reg.blur;
    field.start_blur = reg.start_blur;
    field.anneal = reg.anneal;
    field.max_rounds = reg.max_rounds;
    field.reach = reg.reach;
    field.reach_source = reg.reach_source;
    field.reach_target = reg.reach_target;
    field.backend = reg.backend;
    field.multiscale = reg.multiscale;
    if (vm.count("kernel-width")) field.kernel_width = require_positive_double(vm, "kernel-width");
    field.regularization = require_non_negative_double(vm, "regularization");
    field.control_points = std::size_t(require_positive(vm, "control-points"));
  }

  workflow::check_pair(source_path, target_path, {});  // PLY headers: a vertex element with x, y, z
  const workflow::PointCloud source = workflow::load_points(source_path, "");
  const workflow::PointCloud target = workflow::load_points(target_path, "");
  const bool terminal = isatty(fileno(stderr));
  const workflow::RegistrationProgress progress = [&](int round, int max_rounds, double epsilon, double rms) {
    if (quiet) return true;
    std::fprintf(stderr, terminal ? "\r\033[Kregister: round %d/%d  eps %.3g  rms %.4g" : "register: round %d/%d  eps %.3g  rms %.4g\n",
                 round, max_rounds, epsilon, rms);
    std::fflush(stderr);
    return true;
  };
  if (nonrigid) return register_nonrigid_main(vm, source, target, field, progress, out_path, quiet, terminal);
  const workflow::RegistrationResult result = workflow::register_clouds(source.view(), target.view(), reg, progress);
  if (!quiet && terminal) std::fprintf(stderr, "\r\033[K");

  workflow::AlignmentOutput output;
  output.mapped = result.transform.apply(source.points);
  workflow::OutputSet outputs;
  workflow::write_enriched_copy(source, output, outputs.stage(out_path));

  const std::vector<std::string> warnings = workflow::registration_warnings(result);
  const auto& A = result.transform.linear;
  const auto& t = result.transform.translation;
  nlohmann::json matrix = nlohmann::json::array();
  for (int r = 0; r < 3; ++r) matrix.push_back({A[3 * r], A[3 * r + 1], A[3 * r + 2], t[std::size_t(r)]});
  matrix.push_back({0.0, 0.0, 0.0, 1.0});
  if (vm.count("report")) {
    nlohmann::json report = workflow::solve_json(result.last_solve);
    report["command"] = "register";
    report["iterations"] = result.iterations;
    report["converged"] = result.converged;
    report["final_solve_converged"] = result.last_solve.converged;
    report["model"] = workflow::to_string(reg.model);
    report["transform"] = matrix;
    report["rotation_degrees"] = result.transform.rotation_degrees();
    report["scale"] = result.transform.scale;
    report["rms"] = result.rms;
    report["diameter"] = result.diameter;
    report["source"] = {{"file", source_path.string()}, {"points", source.n()}};
    report["target"] = {{"file", target_path.string()}, {"points", target.n()}};
    report["rounds"] = rounds_json(result.rounds);
    report["parameters"] = {{"blur", reg.blur}, {"start_blur", reg.start_blur}, {"anneal", reg.anneal},
                            {"max_rounds", reg.max_rounds}, {"reach", reg.reach},
                            {"reach_source", reg.reach_source}, {"reach_target", reg.reach_target},
                            {"rel_reach", reg.reach_target_relative},
                            {"backend_requested", to_string(reg.backend.backend)},
                            {"multiscale", to_string(reg.multiscale)}};
    report["final_blur"] = result.final_blur;
    report["reach_used"] = {{"source", result.reach_source}, {"target", result.reach_target}};
    report["transported_mass"] = result.transported_mass;
    report["warnings"] = warnings;
    report["total_seconds"] = result.seconds;
    report["peak_memory_bytes"] = workflow::peak_memory_bytes();
    report["versions"] = workflow::versions_json();
    workflow::write_text_atomically(outputs.stage(vm["report"].as<std::string>()),
                               report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  outputs.commit();

  std::printf("transform (%s, y = A x + t):\n", workflow::to_string(reg.model).c_str());
  for (const auto& r : matrix) {
    std::printf("  % .6f % .6f % .6f % .6f\n", r[0].get<double>(), r[1].get<double>(), r[2].get<double>(),
                r[3].get<double>());
  }
  std::printf("rotation %.4f degrees, scale %.6f\nrms %.6g (weighted, to the OT correspondences)\n",
              result.transform.rotation_degrees(), result.transform.scale, result.rms);
  if (!quiet) {
    std::fprintf(stderr, "flashot register: %s after %zu rounds (%d Sinkhorn iterations) in %.3f s on %s%s; wrote %s\n",
                 result.converged ? "converged" : "NOT converged", result.rounds.size(), result.iterations,
                 result.seconds, result.backend.c_str(), multiscale_note(result.rounds).c_str(),
                 out_path.string().c_str());
  }
  // Warnings show even with --quiet: they are about the answer, not the progress.
  for (const std::string& w : warnings) std::fprintf(stderr, "flashot register: warning: %s\n", w.c_str());
  return 0;
}

}  // namespace flashot::cli
