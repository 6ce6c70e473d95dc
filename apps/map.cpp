// flashot map --solution FILE POINTS -o OUT: the out-of-sample entropic map of new points through a saved solution,
// T(q) = Σ_j softmax_j(log b_j + (g_j − C(q, y_j))/ε) y_j — no re-solve (Problem::map_points). --hard: each point
// goes to exactly one target point, j*(q) = argmin_j (C(q, y_j) − g_j) (Problem::c_transform), T(q) = y_{j*}.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "flashot/workflow/dataset.hpp"
#include "flashot/workflow/output_set.hpp"
#include "flashot/workflow/report.hpp"
#include "flashot/workflow/run_plan.hpp"
#include "flashot/workflow/solution.hpp"

namespace flashot::cli {

int map_main(const std::vector<std::string>& args) {
  po::options_description options("map options");
  options.add_options()
      ("help,h", "this help")
      ("solution", po::value<std::string>()->required(), "FILE written by `flashot align --save-solution`")
      ("output,o", po::value<std::string>()->required(), "OUT: copy of POINTS with the mapped points")
      ("key", po::value<std::string>(), "obsm entry of POINTS (.h5ad; default: the key the solution was made with)")
      ("where", po::value<std::string>(), "COL=VALUE: map only these rows")
      ("zarr-format", po::value<int>()->default_value(3),
       "2 | 3: zarr format of a new .zarr / .zarr.zip output from an .h5ad input (a zarr input keeps its own)")
      ("hard", "hard assignment: each point goes to the one target point argmin_j (C(q, y_j) - g_j)")
      ("assignment", po::value<std::string>(),
       "FILE.csv (with --hard): row,target_index,value per mapped row (value = min_j C(q, y_j) - g_j)")
      ("report", po::value<std::string>(), "FILE.json")
      ("quiet,q", "no summary on stderr")
      ("points", po::value<std::string>()->required(), "POINTS .h5ad or .ply, in the solution's SOURCE space");
  add_backend_options(options);
  po::positional_options_description positional;
  positional.add("points", 1);
  const po::variables_map vm = parse(args, options, positional);
  const int zarr_format = vm["zarr-format"].as<int>();
  if (zarr_format != 2 && zarr_format != 3) {
    throw UsageError("--zarr-format must be 2 or 3 (got " + std::to_string(zarr_format) + ")");
  }
  if (vm.count("help")) {
    print_help("flashot map --solution FILE POINTS -o OUT [--key KEY]",
               "Maps new points (cells of another batch, more scan points) into the TARGET space of a saved\n"
               "alignment, through its potential g: each point goes to the softmin-weighted mean of the target\n"
               "points. Nothing is re-solved. OUT is written as `flashot align` writes its output.",
               options);
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  const std::filesystem::path points_path = vm["points"].as<std::string>();
  const std::filesystem::path out_path = vm["output"].as<std::string>();
  const std::filesystem::path solution_path = vm["solution"].as<std::string>();
  check_paths(vm, {{"--solution", solution_path}, {"POINTS", points_path}}, {"output", "assignment", "report"});
  const bool hard = vm.count("hard") > 0;
  if (vm.count("assignment") && !hard) throw UsageError("--assignment needs --hard (the index it writes)");
  try {
    if (workflow::file_kind(out_path) != workflow::file_kind(points_path)) {
      throw UsageError("-o " + out_path.string() + " must be the same type of file as " + points_path.string());
    }
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const BackendOptions backend = backend_options(vm);
  std::optional<workflow::RowFilter> where;
  try {
    if (vm.count("where")) where = workflow::parse_row_filter(vm["where"].as<std::string>(), "--where");
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }

  // The solution's header and POINTS' metadata first: a wrong key or dimension is named before any array is read.
  const workflow::Solution header = workflow::read_solution_header(solution_path);
  if (header.key == "X") {
    throw std::invalid_argument(solution_path.string() +
                                ": solutions made with --use-x cannot map new files (the genes are not saved)");
  }
  const std::string key = vm.count("key") ? vm["key"].as<std::string>() : header.key;
  const std::size_t d = workflow::check_points(points_path, key, where, "POINTS",
                                               vm.count("key") ? "--key" : "the solution's key");
  if (d != header.d) {
    const bool ply = workflow::file_kind(points_path) == workflow::FileKind::kPly;
    throw std::invalid_argument("POINTS " + points_path.string() + " is " + std::to_string(d) + "-d (" +
                                (ply ? "vertex x,y,z" : "obsm['" + key + "']") + ") but the solution " +
                                solution_path.string() + " is " + std::to_string(header.d) + "-d");
  }
  const workflow::Solution solution = workflow::load_solution(solution_path);
  const workflow::PointCloud points = workflow::load_points(points_path, key, where);
  Problem problem(PointsView{solution.x, solution.n, solution.d}, PointsView{solution.y, solution.m, solution.d},
                  solution.a, solution.b, backend);
  const SolveResult result = solution.result();
  workflow::AlignmentOutput output;
  std::string assignment_text;
  std::size_t distinct = 0;
  if (hard) {
    // The points against the solution's targets through g: one c-transform, no plan (docs/engine.md).
    Problem queries(points.view(), PointsView{solution.y, solution.m, solution.d}, {}, solution.b, backend);
    const CTransform t = queries.c_transform(Side::kSource, solution.g, solution.cost);
    output.mapped.resize(points.n() * solution.d);
    std::vector<bool> hit(solution.m, false);
    assignment_text = "row,target_index,value\n";
    for (std::size_t i = 0; i < points.n(); ++i) {
      const std::size_t j = static_cast<std::size_t>(t.index[i]);
      std::copy_n(solution.y.begin() + j * solution.d, solution.d, output.mapped.begin() + i * solution.d);
      distinct += hit[j] ? 0 : 1;
      hit[j] = true;
      assignment_text += std::to_string(i) + "," + std::to_string(j) + "," + format_double(t.values[i]) + "\n";
    }
  } else {
    output.mapped = problem.map_points(result, points.view(), Side::kSource);
  }
  output.scalars = {{"epsilon", solution.epsilon}};

  workflow::OutputSet outputs;
  workflow::write_enriched_copy(points, output, outputs.stage(out_path), zarr_format);
  if (vm.count("assignment"))
    workflow::write_text_atomically(outputs.stage(vm["assignment"].as<std::string>()), assignment_text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (vm.count("report")) {
    nlohmann::json report = {
        {"command", "map"}, {"solution", solution_path.string()}, {"points", points_path.string()},
        {"representation", points.representation}, {"rows_mapped", points.n()}, {"epsilon", solution.epsilon},
        {"backend", problem.backend_name()}, {"device", problem.device_name()}, {"output", out_path.string()},
        {"mode", hard ? "hard" : "entropic"}, {"total_seconds", seconds}, {"peak_memory_bytes", workflow::peak_memory_bytes()},
        {"versions", workflow::versions_json()}};
    if (hard) report["distinct_targets"] = distinct;
    workflow::write_text_atomically(outputs.stage(vm["report"].as<std::string>()),
                               report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  outputs.commit();
  if (!vm.count("quiet")) {
    if (hard) std::cerr << "flashot map: hard assignment to " << distinct << " distinct target points" << std::endl;
    std::cerr << "flashot map: mapped " << points.n() << " rows of " << points_path.string() << " ("
              << points.representation << ") through " << vm["solution"].as<std::string>() << " (epsilon "
              << format_short(solution.epsilon) << ", " << solution.m << " target points) into " << out_path.string()
              << " on " << problem.backend_name() << " in " << format_double(std::round(seconds * 1000) / 1000)
              << " s" << std::endl;
  }
  return 0;
}

}  // namespace flashot::cli
