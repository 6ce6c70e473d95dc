// flashot align SOURCE TARGET --spatial KEY [--key EMB] [--alpha A] [--model M]: two tissue slices aligned by
// entropic fused Gromov–Wasserstein on the coordinates in obsm KEY (2-D or 3-D) and, when given, the embedding
// obsm EMB. OUT is a copy of SOURCE with obsm KEY_flashot (the source coordinates in the target's frame), the
// transferred labels, and optionally the top-k coupling and a JSON report, as the plain align writes them.

#include "spatial.hpp"

#include <chrono>
#include <cmath>
#include <csignal>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "flashot/workflow/dataset.hpp"
#include "flashot/workflow/output_set.hpp"
#include "flashot/workflow/report.hpp"
#include "flashot/workflow/spatial.hpp"

namespace flashot::cli {
namespace {

using Clock = std::chrono::steady_clock;



}  // namespace

void add_spatial_options(po::options_description& options) {
  options.add_options()
      ("spatial", po::value<std::string>(),
       "KEY: align tissue slices by fused Gromov-Wasserstein on the coordinates in obsm KEY (2-D or 3-D); "
       "--key EMB adds an embedding")
      ("alpha", po::value<double>()->default_value(0.5), "--spatial: weight of the spatial (GW) term in [0, 1]")
      ("model", po::value<std::string>()->default_value("rigid"),
       "--spatial: rigid | affine | nonrigid, how SOURCE's coordinates move into TARGET's frame")
      ("max-outer", po::value<long long>()->default_value(100), "--spatial: outer (linearization) iterations at most")
      ("outer-tol", po::value<double>()->default_value(1e-5),
       "--spatial: stop when the objective changes by less than this (relative)");
}

int align_spatial_main(const po::variables_map& vm) {
  const auto start = Clock::now();
  const std::filesystem::path source_path = vm["source"].as<std::string>();
  const std::filesystem::path target_path = vm["target"].as<std::string>();
  const std::filesystem::path out_path = vm["output"].as<std::string>();
  const std::string spatial_key = vm["spatial"].as<std::string>();
  check_paths(vm, {{"SOURCE", source_path}, {"TARGET", target_path}}, {"output", "coupling", "report"});
  // Options of the plain align that have no meaning here are refused rather than ignored.
  for (const char* name : {"use-x", "half-cost", "save-solution"})
    if (vm.count(name)) throw UsageError(std::string("--") + name + " cannot be combined with --spatial");
  for (const char* name : {"reach-source", "reach-target"})
    if (!vm[name].defaulted()) throw UsageError(std::string("--") + name + " cannot be combined with --spatial (use --reach)");
  try {
    if (workflow::file_kind(source_path) != workflow::FileKind::kH5ad ||
        workflow::file_kind(target_path) != workflow::FileKind::kH5ad)
      throw UsageError("--spatial aligns two .h5ad slices (got " + source_path.string() + " and " +
                       target_path.string() + ")");
    if (workflow::file_kind(out_path) != workflow::FileKind::kH5ad)
      throw UsageError("-o " + out_path.string() + " must be .h5ad");
    if (vm.count("coupling") && workflow::file_kind(vm["coupling"].as<std::string>()) != workflow::FileKind::kH5ad)
      throw UsageError("--coupling " + vm["coupling"].as<std::string>() + " must be .h5ad");
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }

  workflow::SpatialOptions so;
  so.alpha = vm["alpha"].as<double>();
  if (!(so.alpha >= 0 && so.alpha <= 1)) throw UsageError("--alpha must be in [0, 1] (got " + format_double(so.alpha) + ")");
  try {
    so.model = workflow::parse_spatial_model(vm["model"].as<std::string>());
    so.scheme = parse_scheme(vm["scheme"].as<std::string>());
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  so.blur = vm.count("blur") ? require_positive_double(vm, "blur") : require_positive_double(vm, "rel-blur");
  so.reach = require_non_negative_double(vm, "reach");
  so.inner_tolerance = require_positive_double(vm, "tol");
  so.outer_tolerance = require_non_negative_double(vm, "outer-tol");
  const long long max_outer = require_positive(vm, "max-outer");
  const long long max_iters = require_positive(vm, "max-iters");
  if (max_outer > 1'000'000) throw UsageError("--max-outer is too large (got " + std::to_string(max_outer) + ")");
  if (max_iters > 100'000'000) throw UsageError("--max-iters is too large (got " + std::to_string(max_iters) + ")");
  so.max_outer = int(max_outer);
  // The plain align's default budget (one solve to convergence) is not the loop's: left at its default, each
  // inner solve gets GromovOptions' per-outer-iteration budget (docs/gromov-wasserstein.md §6).
  so.inner_max_iterations = vm["max-iters"].defaulted() ? GromovOptions{}.inner_max_iterations : int(max_iters);
  so.backend = backend_options(vm);
  const long long coupling_k = require_positive(vm, "coupling-k");
  const bool quiet = vm.count("quiet") > 0 || vm["progress"].as<std::string>() == "none";
  std::optional<workflow::RowFilter> source_where, target_where;
  try {
    if (vm.count("source-where")) source_where = workflow::parse_row_filter(vm["source-where"].as<std::string>(), "--source-where");
    if (vm.count("target-where")) target_where = workflow::parse_row_filter(vm["target-where"].as<std::string>(), "--target-where");
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }

  // ---- Load: the coordinates, and the embedding of the same rows ----------------------------------------------
  const auto load_start = Clock::now();
  const workflow::PointCloud source = workflow::load_points(source_path, spatial_key, source_where);
  const workflow::PointCloud target = workflow::load_points(target_path, spatial_key, target_where);
  if (source.d != target.d)
    throw std::invalid_argument("obsm['" + spatial_key + "'] has " + std::to_string(source.d) + " columns in " +
                                source_path.string() + " and " + std::to_string(target.d) + " in " +
                                target_path.string() + ": the slices' coordinates must have one dimension");
  if (source.d < 2 || source.d > 3)
    throw std::invalid_argument("obsm['" + spatial_key + "'] must hold 2-D or 3-D coordinates (got " +
                                std::to_string(source.d) + " columns in " + source_path.string() + ")");
  std::optional<workflow::PointCloud> source_emb, target_emb;
  if (vm.count("key")) {
    const std::string key = vm["key"].as<std::string>();
    source_emb = workflow::load_points(source_path, key, source_where);
    target_emb = workflow::load_points(target_path, key, target_where);
    if (source_emb->d != target_emb->d)
      throw std::invalid_argument("obsm['" + key + "'] has " + std::to_string(source_emb->d) + " columns in " +
                                  source_path.string() + " and " + std::to_string(target_emb->d) + " in " +
                                  target_path.string());
  } else if (!vm["alpha"].defaulted() && so.alpha < 1) {
    throw UsageError("--alpha " + format_double(so.alpha) + " weighs an embedding term: give it with --key EMB");
  }
  std::optional<workflow::Labels> labels;
  if (vm.count("transfer-labels")) labels = workflow::read_labels(target, vm["transfer-labels"].as<std::string>());
  const double load_seconds = seconds_since(load_start);

  // ---- Solve ----------------------------------------------------------------------------------------------------
  if (!quiet) {
    std::cerr << "flashot align --spatial: " << source.n() << " SOURCE cells (" << source_path.string() << ") -> "
              << target.n() << " TARGET cells (" << target_path.string() << "), obsm['" << spatial_key << "']"
              << (source_emb ? " + " + source_emb->representation : std::string(" (coordinates only)"))
              << ", alpha " << format_short(source_emb ? so.alpha : 1.0) << ", blur " << format_short(so.blur)
              << std::endl;
  }
  so.progress = [](const GromovProgress&) { return !interrupted(); };
  catch_interrupt();
  workflow::SpatialAlignment aligned;
  try {
    aligned = workflow::align_slices(source.view(), target.view(),
                                     source_emb ? source_emb->view() : PointsView{},
                                     target_emb ? target_emb->view() : PointsView{}, so);
  } catch (...) {
    std::signal(SIGINT, SIG_DFL);
    throw;
  }
  std::signal(SIGINT, SIG_DFL);
  const GromovResult& result = aligned.result;
  if (result.reason == StopReason::kCancelled)
    throw std::runtime_error("interrupted after " + std::to_string(result.outer_iterations) +
                             " outer iterations; nothing written");
  if (result.reason == StopReason::kNonFinite)
    throw std::runtime_error("the solve produced non-finite values (" + result.message + "); try a larger --blur");

  // ---- Results ----------------------------------------------------------------------------------------------------
  const auto output_start = Clock::now();
  const Problem& plan_problem = aligned.problem->problem();
  workflow::AlignmentOutput output;
  output.mapped = aligned.aligned;
  output.scalars = {{"epsilon", result.epsilon}, {"objective", result.objective},
                    {"gw_cost", result.gw_cost}, {"feature_cost", result.feature_cost},
                    {"alpha", source_emb ? so.alpha : 1.0}, {"coordinate_scale", aligned.scales.coordinates}};
  if (so.model == workflow::SpatialModel::kRigid) output.scalars.emplace_back("rotation_degrees", aligned.rotation_degrees);
  nlohmann::json label_report;
  if (labels) {
    output.transfer = plan_problem.transfer_labels(result.plan, Side::kTarget, labels->codes, labels->categories.size());
    output.label_names = labels;
    std::size_t labelled = 0;
    double confidence = 0;
    for (std::size_t i = 0; i < output.transfer->points; ++i) {
      if (output.transfer->label[i] < 0) continue;
      ++labelled;
      confidence += output.transfer->confidence[i];
    }
    label_report = {{"column", labels->column}, {"output_column", labels->column + "_flashot"},
                    {"classes", labels->categories.size()}, {"labelled_rows", labelled},
                    {"mean_confidence", workflow::number(labelled ? confidence / double(labelled) : NAN)}};
  }
  workflow::OutputSet outputs;
  workflow::write_enriched_copy(source, output, outputs.stage(out_path));
  if (vm.count("coupling")) {
    const TopKCoupling top = plan_problem.top_k(result.plan, std::size_t(coupling_k));
    io::SparseMatrix coupling;
    coupling.rows = top.rows;
    coupling.cols = target.n();
    coupling.indptr.resize(top.rows + 1, 0);
    for (std::size_t i = 0; i < top.rows; ++i) {
      for (std::size_t k = 0; k < top.k; ++k) {
        const float value = top.values[i * top.k + k];
        if (!(value > 0)) continue;
        coupling.indices.push_back(top.columns[i * top.k + k]);
        coupling.data.push_back(value);
      }
      coupling.indptr[i + 1] = std::int64_t(coupling.data.size());
    }
    io::write_coupling_h5ad(outputs.stage(vm["coupling"].as<std::string>()), source.names, target.names, coupling);
  }
  const double output_seconds = seconds_since(output_start);

  nlohmann::json report;
  report["command"] = "align --spatial";
  report["source"] = workflow::cloud_json(source);
  report["target"] = workflow::cloud_json(target);
  if (source_emb) report["embedding"] = {{"key", source_emb->key}, {"d", source_emb->d}};
  report["parameters"] = {{"alpha", source_emb ? so.alpha : 1.0}, {"blur", so.blur}, {"epsilon", result.epsilon},
                          {"reach", so.reach}, {"model", workflow::to_string(so.model)},
                          {"inner_tolerance", so.inner_tolerance}, {"outer_tolerance", so.outer_tolerance},
                          {"max_outer", so.max_outer}, {"max_iterations", so.inner_max_iterations},
                          {"scheme", to_string(so.scheme)}, {"backend_requested", to_string(so.backend.backend)},
                          {"threads", so.backend.threads}};
  report["scales"] = {{"coordinates", aligned.scales.coordinates}, {"features", aligned.scales.features},
                      {"rule", "coordinates x s: mean squared distance within a slice 1; embedding x s: mean "
                               "squared distance between slices 1; epsilon = blur^2 in these units"}};
  report["gromov"] = {{"objective", workflow::number(result.objective)},
                      {"gw_cost", workflow::number(result.gw_cost)},
                      {"feature_cost", workflow::number(result.feature_cost)},
                      {"converged", result.converged},
                      {"stop_reason", to_string(result.reason)},
                      {"message", result.message},
                      {"outer_iterations", result.outer_iterations},
                      {"inner_iterations", result.inner_iterations},
                      {"seconds", result.seconds}};
  for (const GromovIteration& it : result.history)
    report["gromov"]["history"].push_back({{"outer", it.outer}, {"objective", workflow::number(it.objective)},
                                           {"change", workflow::number(it.change)},
                                           {"inner_iterations", it.inner_iterations},
                                           {"inner_converged", it.inner_converged},
                                           {"marginal_error", workflow::number(it.marginal_error)},
                                           {"mass", workflow::number(it.mass)}, {"seconds", it.seconds}});
  report["last_solve"] = workflow::solve_json(result.plan);
  report["transform"] = {{"model", workflow::to_string(so.model)}, {"linear", aligned.linear},
                         {"translation", aligned.translation}, {"rms", workflow::number(aligned.rms)}};
  if (so.model == workflow::SpatialModel::kRigid) report["transform"]["rotation_degrees"] = aligned.rotation_degrees;
  if (labels) report["label_transfer"] = label_report;
  report["outputs"] = {{"aligned", out_path.string()}};
  for (const char* name : {"coupling", "report"})
    if (vm.count(name)) report["outputs"][name] = vm[name].as<std::string>();
  report["timings"] = {{"load_seconds", load_seconds}, {"solve_seconds", result.seconds},
                       {"outputs_seconds", output_seconds}, {"total_seconds", seconds_since(start)}};
  report["peak_memory_bytes"] = workflow::peak_memory_bytes();
  report["peak_device_memory_bytes"] = device_memory().peak_bytes;
  report["versions"] = workflow::versions_json();
  if (vm.count("report")) {
    const std::string text = report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    workflow::write_text_atomically(outputs.stage(vm["report"].as<std::string>()), text);
  }
  outputs.commit();

  if (!quiet) {
    std::cerr << "flashot align --spatial: wrote " << out_path.string() << " (obsm['" << spatial_key
              << "_flashot'], " << workflow::to_string(so.model) << ")\n  " << result.message << "\n  objective "
              << format_short(result.objective) << " (GW " << format_short(result.gw_cost) << ", embedding "
              << format_short(result.feature_cost) << "), epsilon " << format_short(result.epsilon) << "\n";
    if (so.model == workflow::SpatialModel::kRigid)
      std::cerr << "  rotation " << format_short(aligned.rotation_degrees) << " degrees, rms to the plan's images "
                << format_short(aligned.rms) << "\n";
    if (labels)
      std::cerr << "  labels '" << labels->column << "': " << label_report["labelled_rows"] << " of " << source.n()
                << " cells labelled, mean confidence " << label_report["mean_confidence"].dump() << "\n";
    std::cerr << "  total " << format_double(std::round(seconds_since(start) * 1000) / 1000) << " s" << std::endl;
  }
  return 0;
}

}  // namespace flashot::cli
