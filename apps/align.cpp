// flashot align SOURCE TARGET -o OUT: entropic OT between two data sets; OUT is a copy of SOURCE (the query)
// enriched from TARGET (the reference): mapped points, transferred labels; optionally the sparse coupling, the
// solution for `flashot map`, and a JSON report. All outputs appear together or not at all.

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "align_groups.hpp"
#include "cli.hpp"
#include "flashot/workflow/checks.hpp"
#include "spatial.hpp"
#include "flashot/label_cost.hpp"
#include "flashot/workflow/dataset.hpp"
#include "flashot/workflow/label_cost.hpp"
#include "flashot/workflow/output_set.hpp"
#include "flashot/workflow/progress.hpp"
#include "flashot/workflow/report.hpp"
#include "flashot/workflow/run_plan.hpp"
#include "flashot/workflow/solution.hpp"

namespace flashot::cli {
namespace {

constexpr long long kDefaultCouplingK = 10;

using Clock = std::chrono::steady_clock;


workflow::ProgressDisplay::Style progress_style(const po::variables_map& vm) {
  if (vm.count("quiet")) return workflow::ProgressDisplay::Style::kQuiet;
  const std::string style = vm["progress"].as<std::string>();
  if (style == "auto") return workflow::ProgressDisplay::Style::kAuto;
  if (style == "bar") return workflow::ProgressDisplay::Style::kBar;
  if (style == "lines") return workflow::ProgressDisplay::Style::kLines;
  if (style == "none") return workflow::ProgressDisplay::Style::kQuiet;
  throw UsageError("--progress must be auto, bar, lines or none (got '" + style + "')");
}


}  // namespace

int align_main(const std::vector<std::string>& args) {
  po::options_description options("align options");
  options.add_options()
      ("help,h", "this help")
      ("output,o", po::value<std::string>()->required(), "OUT: enriched copy of SOURCE (same type as SOURCE)")
      ("key", po::value<std::string>(), "obsm entry to align (.h5ad; default X_pca)")
      ("use-x", "align X on the genes both files share instead of an obsm entry")
      ("source-where", po::value<std::string>(), "COL=VALUE: use only these SOURCE rows (obs column / PLY property)")
      ("target-where", po::value<std::string>(), "COL=VALUE: use only these TARGET rows")
      ("groupby", po::value<std::string>(),
       "COL: align each SOURCE group (obs COL / PLY property) to the TARGET group of the same value, all groups in "
       "one batched solve")
      ("blur", po::value<double>(), "final blur B in data units: epsilon = B^2 (default: --rel-blur x diameter)")
      ("rel-blur", po::value<double>()->default_value(kDefaultBlurRelative),
       "blur as a fraction of the data's diameter (bounding-box diagonal of both sets)")
      ("scaling", po::value<double>()->default_value(0.5), "epsilon-scaling factor per stage, in (0,1)")
      ("reach", po::value<double>()->default_value(0), "unbalanced OT: reach R in data units (rho = R^2); 0 = balanced")
      ("reach-source", po::value<double>()->default_value(0), "reach on the SOURCE marginal only (0 = --reach)")
      ("reach-target", po::value<double>()->default_value(0), "reach on the TARGET marginal only (0 = --reach)")
      ("tol", po::value<double>()->default_value(1e-3), "stop when the relative marginal error is below this")
      ("max-iters", po::value<long long>()->default_value(1000), "iteration budget of the final stage")
      ("scheme", po::value<std::string>()->default_value("alternating"),
       "alternating | symmetric (alternating converges in fewer iterations at the final blur)")
      ("half-cost", "cost |x-y|^2/2 instead of |x-y|^2")
      ("transfer-labels", po::value<std::string>(), "COL: transfer TARGET obs COL to SOURCE as COL_flashot")
      ("compare-labels", po::value<std::string>(),
       "COL: SOURCE's own labels (obs COL) to score the transferred ones against (needs --transfer-labels)")
      ("label-cost", po::value<std::string>(),
       "COL: add label-weight x W[label_i, label_j] to the cost, labels from obs COL of both files")
      ("label-weight", po::value<double>(), "lambda >= 0 of --label-cost (cost units, like blur^2)")
      ("label-table", po::value<std::string>(),
       "FILE.csv: W for --label-cost (header ,B1,B2,..; rows A,w,w,..: cost of SOURCE class A to TARGET class B); "
       "default 0 for the same label, 1 otherwise")
      ("coupling", po::value<std::string>(), "FILE.h5ad | .zarr | .zarr.zip: the top-k coupling (obs = SOURCE rows, var = TARGET rows)")
      ("coupling-k", po::value<long long>()->default_value(kDefaultCouplingK), "entries kept per SOURCE row")
      ("save-solution", po::value<std::string>(), "FILE: potentials and points for `flashot map`")
      ("zarr-format", po::value<int>()->default_value(3),
       "2 | 3: zarr format of a new .zarr / .zarr.zip output from an .h5ad input (a zarr input keeps its own)")
      ("report", po::value<std::string>(), "FILE.json: parameters, schedule, convergence, timings, versions")
      ("progress", po::value<std::string>()->default_value("auto"), "auto | bar | lines | none")
      ("quiet,q", "no progress and no summary on stderr")
      ("source", po::value<std::string>()->required(), "SOURCE (query) .h5ad or .ply")
      ("target", po::value<std::string>()->required(), "TARGET (reference) .h5ad or .ply");
  add_backend_options(options);
  add_multiscale_option(options);
  add_overrelaxation_option(options);
  add_spatial_options(options);  // --spatial: tissue slices by fused Gromov-Wasserstein (apps/spatial.cpp)
  po::positional_options_description positional;
  positional.add("source", 1).add("target", 1);
  const po::variables_map vm = parse(args, options, positional);
  const int zarr_format = vm["zarr-format"].as<int>();
  if (zarr_format != 2 && zarr_format != 3) {
    throw UsageError("--zarr-format must be 2 or 3 (got " + std::to_string(zarr_format) + ")");
  }
  if (vm.count("help")) {
    print_help("flashot align SOURCE TARGET -o OUT [options]",
               "Aligns SOURCE (the query) to TARGET (the reference) with entropic optimal transport. OUT is a copy\n"
               "of SOURCE with every source point's barycentric image in TARGET's space (.h5ad: obsm <key>_flashot;\n"
               ".ply: x,y,z mapped, originals kept as x_original, ...), and with --transfer-labels COL the obs\n"
               "columns COL_flashot and COL_flashot_confidence. The final epsilon is blur^2 in cost units; by\n"
               "default blur = 0.05 x the data's diameter, so unit-free data need no tuning.",
               options);
    return 0;
  }
  if (vm.count("groupby")) {
    for (const char* other : {"spatial", "coupling", "save-solution"})
      if (vm.count(other))
        throw UsageError(std::string("--groupby cannot be combined with --") + other +
                         " (one output per pair; run the groups one by one with --source-where/--target-where)");
  }
  if (vm.count("spatial")) return align_spatial_main(vm);
  const auto start = Clock::now();
  const std::filesystem::path source_path = vm["source"].as<std::string>();
  const std::filesystem::path target_path = vm["target"].as<std::string>();
  const std::filesystem::path out_path = vm["output"].as<std::string>();
  if (vm.count("label-table"))
    check_paths(vm, {{"SOURCE", source_path}, {"TARGET", target_path},
                     {"--label-table", std::filesystem::path(vm["label-table"].as<std::string>())}},
                {"output", "coupling", "save-solution", "report"});
  else
    check_paths(vm, {{"SOURCE", source_path}, {"TARGET", target_path}},
                {"output", "coupling", "save-solution", "report"});
  const bool label_cost = vm.count("label-cost") > 0;
  if (label_cost != (vm.count("label-weight") > 0))
    throw UsageError("--label-cost COL and --label-weight LAMBDA go together");
  if (vm.count("label-table") && !label_cost) throw UsageError("--label-table needs --label-cost");
  if (label_cost && vm.count("save-solution"))
    throw UsageError("--save-solution is not available with --label-cost (`flashot map` has no labels for new points)");
  const double label_weight = label_cost ? require_non_negative_double(vm, "label-weight") : 0.0;
  workflow::FileKind kind;
  try {
    kind = workflow::file_kind(source_path);
    workflow::require_extension(out_path, kind, "-o");
    if (vm.count("coupling")) {
      workflow::require_extension(vm["coupling"].as<std::string>(), workflow::FileKind::kH5ad, "--coupling");
    }
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }

  SolveOptions solve;
  solve.cost = vm.count("half-cost") ? Cost::kHalfSquaredEuclidean : Cost::kSquaredEuclidean;
  solve.scaling = require_positive_double(vm, "scaling");
  if (solve.scaling >= 1) throw UsageError("--scaling must be in (0, 1) (got " + format_double(solve.scaling) + ")");
  solve.reach = require_non_negative_double(vm, "reach");
  solve.reach_source = require_non_negative_double(vm, "reach-source");
  solve.reach_target = require_non_negative_double(vm, "reach-target");
  solve.tolerance = require_non_negative_double(vm, "tol");
  solve.multiscale = multiscale_option(vm);
  solve.overrelaxation = overrelaxation_option(vm);
  const long long max_iters = require_positive(vm, "max-iters");
  if (max_iters > 100'000'000) throw UsageError("--max-iters is too large (got " + std::to_string(max_iters) + ")");
  solve.max_iterations = int(max_iters);
  const double relative_blur = require_positive_double(vm, "rel-blur");
  try {
    solve.scheme = parse_scheme(vm["scheme"].as<std::string>());
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const long long coupling_k = require_positive(vm, "coupling-k");
  if (vm.count("compare-labels") && !vm.count("transfer-labels")) {
    throw UsageError("--compare-labels needs --transfer-labels (the labels it scores)");
  }
  const BackendOptions backend = backend_options(vm);
  workflow::LoadOptions load;
  if (vm.count("key")) load.key = vm["key"].as<std::string>();
  load.use_x = vm.count("use-x") > 0;
  try {
    if (vm.count("source-where")) load.source_where = workflow::parse_row_filter(vm["source-where"].as<std::string>(), "--source-where");
    if (vm.count("target-where")) load.target_where = workflow::parse_row_filter(vm["target-where"].as<std::string>(), "--target-where");
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const auto progress_kind = progress_style(vm);
  const bool quiet = vm.count("quiet") > 0;

  // ---- Load: the option values checked against the files' metadata first, then the data ----------------------
  const std::string label_column = vm.count("transfer-labels") ? vm["transfer-labels"].as<std::string>() : "";
  workflow::check_pair(source_path, target_path, load, label_column);
  const auto load_start = Clock::now();
  auto [source, target] = workflow::load_pair(source_path, target_path, load);
  std::optional<workflow::Labels> labels;
  if (!label_column.empty()) labels = workflow::read_labels(target, label_column);
  std::optional<workflow::Labels> truth;
  if (vm.count("compare-labels")) truth = workflow::read_labels(source, vm["compare-labels"].as<std::string>());
  const double load_seconds = seconds_since(load_start);
  if (vm.count("groupby")) {
    SolveOptions grouped = solve;
    if (vm.count("blur"))
      grouped.blur = require_positive_double(vm, "blur");
    else
      grouped.blur_relative = relative_blur;
    const std::filesystem::path report_path = vm.count("report") ? vm["report"].as<std::string>() : "";
    return align_groups({vm["groupby"].as<std::string>(), source, target, grouped,
                         vm.count("blur") ? "--blur" : "--rel-blur " + format_double(relative_blur) +
                                                           " x each group's diameter",
                         backend, labels, truth, out_path, report_path, quiet, start, load_seconds});
  }

  // ---- Solve: ε relative to the data's diameter (the engine's) unless --blur is given ---------------------------------
  std::optional<Problem> plain;
  std::optional<LabelCostProblem> labelled;
  nlohmann::json label_cost_report;
  if (label_cost) {
    const LabelCost cost = workflow::label_cost_from(source, target, vm["label-cost"].as<std::string>(), label_weight,
                                                     vm.count("label-table") ? vm["label-table"].as<std::string>() : "");
    labelled.emplace(source.view(), target.view(), std::span<const float>{}, std::span<const float>{}, cost, backend);
    label_cost_report = {{"column", vm["label-cost"].as<std::string>()}, {"weight", label_weight},
                         {"classes", cost.classes},
                         {"table", vm.count("label-table") ? vm["label-table"].as<std::string>() : "default 1 - delta"},
                         {"augmented_d", labelled->augmented_d()}};
  } else {
    plain.emplace(source.view(), target.view(), std::span<const float>{}, std::span<const float>{}, backend);
  }
  const double diameter = label_cost ? labelled->diameter() : plain->diameter();
  if (vm.count("blur")) {
    solve.blur = require_positive_double(vm, "blur");
  } else {
    if (!(diameter > 0)) {
      throw std::invalid_argument("all points coincide: the data have no scale for --rel-blur; give --blur");
    }
    solve.blur_relative = relative_blur;
  }
  const std::string blur_origin = vm.count("blur") ? "--blur" : "--rel-blur " + format_double(relative_blur) +
                                                                    " x diameter " + format_short(diameter);
  if (!quiet) {
    std::cerr << "flashot align: " << source.n() << " SOURCE rows (" << source.path.string() << ") -> " << target.n()
              << " TARGET rows (" << target.path.string() << "), " << source.representation << "; blur "
              << (vm.count("blur") ? format_short(solve.blur) + " (--blur)"
                                   : format_double(relative_blur) + " x diameter " + format_short(diameter) +
                                         " (--rel-blur)")
              << std::endl;
  }
  workflow::ProgressDisplay display("align", progress_kind, solve.tolerance);
  solve.progress = [show = display.callback()](const Progress& p) { return show(p) && !interrupted(); };
  catch_interrupt();
  SolveResult result;
  try {
    result = label_cost ? labelled->solve(solve) : plain->solve(solve);
  } catch (...) {
    std::signal(SIGINT, SIG_DFL);
    display.finish();
    throw;
  }
  std::signal(SIGINT, SIG_DFL);
  display.finish();
  if (result.reason == StopReason::kCancelled) {
    throw std::runtime_error("interrupted after " + std::to_string(result.iterations) + " iterations; nothing written");
  }
  if (result.reason == StopReason::kNonFinite) {
    throw std::runtime_error("the solve produced non-finite values (" + result.message +
                             "); try a larger --blur or --rel-blur");
  }

  // ---- Results ------------------------------------------------------------------------------------------------
  const auto output_start = Clock::now();
  workflow::AlignmentOutput output;
  output.mapped = label_cost ? labelled->barycentric(result, Side::kSource) : plain->barycentric(result, Side::kSource);
  output.scalars = {{"epsilon", result.epsilon}, {"cost", result.dual_cost}, {"marginal_error", result.marginal_error}};
  nlohmann::json label_report;
  std::optional<workflow::LabelAgreement> agreement;
  if (labels) {
    output.transfer = label_cost
                          ? labelled->transfer_labels(result, Side::kTarget, labels->codes, labels->categories.size())
                          : plain->transfer_labels(result, Side::kTarget, labels->codes, labels->categories.size());
    output.label_names = labels;
    std::size_t labelled = 0;
    double confidence = 0;
    std::vector<std::size_t> counts(labels->categories.size(), 0);
    for (std::size_t i = 0; i < output.transfer->points; ++i) {
      if (output.transfer->label[i] < 0) continue;
      ++labelled;
      confidence += output.transfer->confidence[i];
      ++counts[std::size_t(output.transfer->label[i])];
    }
    label_report = {{"column", labels->column},
                    {"output_column", labels->column + "_flashot"},
                    {"classes", labels->categories.size()},
                    {"labelled_rows", labelled},
                    {"mean_confidence", workflow::number(labelled ? confidence / double(labelled) : NAN)}};
    for (std::size_t k = 0; k < counts.size(); ++k) label_report["counts"][labels->categories[k]] = counts[k];
    if (truth) {
      agreement = workflow::label_agreement(*output.transfer, *labels, *truth);
      label_report["agreement"] = {{"column", truth->column},
                                   {"compared_rows", agreement->compared},
                                   {"agreeing_rows", agreement->agreeing},
                                   {"fraction", workflow::number(agreement->fraction())}};
    }
  }

  workflow::OutputSet outputs;
  workflow::write_enriched_copy(source, output, outputs.stage(out_path), zarr_format);
  if (vm.count("coupling")) {
    const TopKCoupling top = label_cost ? labelled->top_k(result, std::size_t(coupling_k))
                                        : plain->top_k(result, std::size_t(coupling_k));
    io::SparseMatrix coupling;
    coupling.rows = top.rows;
    coupling.cols = target.n();
    coupling.indptr.resize(top.rows + 1, 0);
    for (std::size_t i = 0; i < top.rows; ++i) {
      for (std::size_t k = 0; k < top.k; ++k) {
        const float value = top.values[i * top.k + k];
        if (!(value > 0)) continue;  // rows with fewer than k positive entries (unbalanced, tiny mass)
        coupling.indices.push_back(top.columns[i * top.k + k]);
        coupling.data.push_back(value);
      }
      coupling.indptr[i + 1] = std::int64_t(coupling.data.size());
    }
    io::write_coupling_h5ad(outputs.stage(vm["coupling"].as<std::string>()), source.names, target.names, coupling,
                            zarr_format);
  }
  if (vm.count("save-solution")) {
    workflow::Solution solution;
    solution.key = source.key;
    solution.representation = source.representation;
    solution.source = source.path.string();
    solution.target = target.path.string();
    solution.cost = result.cost;
    solution.epsilon = result.epsilon;
    solution.reach_source = result.reach_source;
    solution.reach_target = result.reach_target;
    solution.n = source.n();
    solution.m = target.n();
    solution.d = source.d;
    solution.x = source.points;
    solution.a.assign(source.n(), 1.0f / float(source.n()));
    solution.f = result.f;
    solution.y = target.points;
    solution.b.assign(target.n(), 1.0f / float(target.n()));
    solution.g = result.g;
    workflow::save_solution(outputs.stage(vm["save-solution"].as<std::string>()), solution);
  }
  const double output_seconds = seconds_since(output_start);

  nlohmann::json report = workflow::solve_json(result);
  report["command"] = "align";
  report["source"] = workflow::cloud_json(source);
  report["target"] = workflow::cloud_json(target);
  report["scale"] = {{"diameter", workflow::number(result.diameter)},
                     {"blur", workflow::number(std::sqrt(result.epsilon))},
                     {"blur_from", blur_origin},
                     {"epsilon_rule", "epsilon = blur^2 (cost units)"}};
  report["parameters"] = workflow::options_json(solve);
  report["parameters"]["backend_requested"] = to_string(backend.backend);
  report["parameters"]["threads"] = backend.threads;
  if (labels) report["label_transfer"] = label_report;
  if (label_cost) report["label_cost"] = label_cost_report;
  report["outputs"] = {{"aligned", out_path.string()}};
  for (const char* name : {"coupling", "save-solution", "report"}) {
    if (vm.count(name)) report["outputs"][name] = vm[name].as<std::string>();
  }
  report["timings"] = {{"load_seconds", load_seconds}, {"solve_seconds", result.seconds},
                       {"outputs_seconds", output_seconds}, {"total_seconds", seconds_since(start)}};
  report["peak_memory_bytes"] = workflow::peak_memory_bytes();
  report["versions"] = workflow::versions_json();
  if (vm.count("report")) {
    const std::filesystem::path report_path = vm["report"].as<std::string>();
    const std::string text = report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    workflow::write_text_atomically(outputs.stage(report_path), text);
  }
  outputs.commit();

  if (!quiet) {
    std::cerr << "flashot align: wrote " << out_path.string() << "\n" << workflow::solve_summary(result);
    if (labels) {
      std::cerr << "  labels '" << labels->column << "': " << label_report["labelled_rows"] << " of " << source.n()
                << " rows labelled, mean confidence " << label_report["mean_confidence"].dump() << "\n";
    }
    if (agreement) {
      char line[160];
      std::snprintf(line, sizeof line, "  label agreement %.4f with SOURCE's '%s' (%zu of %zu rows)\n",
                    agreement->fraction(), truth->column.c_str(), agreement->agreeing, agreement->compared);
      std::cerr << line;
    }
    std::cerr << "  peak memory " << workflow::peak_memory_bytes() / (1024 * 1024) << " MiB, total "
              << format_double(std::round(seconds_since(start) * 1000) / 1000) << " s" << std::endl;
  }
  return 0;
}

}  // namespace flashot::cli
