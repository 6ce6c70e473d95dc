// flashot align SOURCE TARGET --groupby COL: every group of SOURCE (the rows sharing a value of obs / vertex
// property COL) aligned to the TARGET group with the same value, all groups in one batched solve
// (flashot::solve_batch, docs/engine.md "Batches"), the results written into the one output as the single-pair
// command writes them (docs/cli.md).

#include <algorithm>
#include <cmath>
#include <csignal>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "align_groups.hpp"
#include "flashot/batch.hpp"
#include "flashot/workflow/output_set.hpp"
#include "flashot/workflow/report.hpp"

namespace flashot::cli {

namespace {

/// Rows of `cloud` whose group code is `code`, their points gathered (row-major).
std::vector<float> gather(const workflow::PointCloud& cloud, const std::vector<std::size_t>& rows) {
  std::vector<float> out(rows.size() * cloud.d);
  for (std::size_t r = 0; r < rows.size(); ++r)
    std::copy_n(cloud.points.begin() + std::ptrdiff_t(rows[r] * cloud.d), cloud.d, out.begin() + std::ptrdiff_t(r * cloud.d));
  return out;
}

}  // namespace

int align_groups(const GroupedAlign& g) {
  const std::string& column = g.column;
  const workflow::PointCloud& source = g.source;
  const workflow::PointCloud& target = g.target;
  // read_labels names the option it serves as --transfer-labels; here it serves --groupby.
  const auto read = [&](const workflow::PointCloud& cloud) {
    try {
      return workflow::read_labels(cloud, column);
    } catch (const std::invalid_argument& e) {
      std::string text = e.what();
      const std::string from = "--transfer-labels";
      for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at)) text.replace(at, from.size(), "--groupby");
      throw std::invalid_argument(text);
    }
  };
  const workflow::Labels sgroups = read(source);
  const workflow::Labels tgroups = read(target);

  // Groups: every value SOURCE holds, each matched to TARGET's rows of the same value (by its text).
  std::size_t missing = 0;
  for (const std::int32_t c : sgroups.codes) missing += c < 0;
  if (missing > 0)
    throw std::invalid_argument("--groupby " + column + ": " + std::to_string(missing) + " of " +
                                std::to_string(source.n()) + " SOURCE rows have no value in '" + column +
                                "' (drop them with --source-where, or fill them in)");
  std::map<std::string, std::int32_t> tcode;
  for (std::size_t k = 0; k < tgroups.categories.size(); ++k) tcode[tgroups.categories[k]] = std::int32_t(k);
  struct Group {
    std::string value;
    std::vector<std::size_t> srows, trows;
  };
  std::vector<Group> groups;
  std::vector<std::int32_t> group_of_code(sgroups.categories.size(), -1);
  for (std::size_t i = 0; i < source.n(); ++i) {
    std::int32_t& gi = group_of_code[std::size_t(sgroups.codes[i])];
    if (gi < 0) {
      gi = std::int32_t(groups.size());
      groups.push_back({sgroups.categories[std::size_t(sgroups.codes[i])], {}, {}});
    }
    groups[std::size_t(gi)].srows.push_back(i);
  }
  std::vector<std::int32_t> group_of_tcode(tgroups.categories.size(), -1);
  for (std::size_t q = 0; q < groups.size(); ++q) {
    const auto it = tcode.find(groups[q].value);
    if (it != tcode.end()) group_of_tcode[std::size_t(it->second)] = std::int32_t(q);
  }
  for (std::size_t j = 0; j < target.n(); ++j)
    if (tgroups.codes[j] >= 0 && group_of_tcode[std::size_t(tgroups.codes[j])] >= 0)
      groups[std::size_t(group_of_tcode[std::size_t(tgroups.codes[j])])].trows.push_back(j);
  for (const Group& grp : groups) {
    if (!grp.trows.empty()) continue;
    std::string present;
    std::vector<std::string> values;
    for (std::size_t k = 0; k < tgroups.categories.size(); ++k) {
      const bool used = std::any_of(tgroups.codes.begin(), tgroups.codes.end(), [&](std::int32_t c) { return c == std::int32_t(k); });
      if (used) values.push_back(tgroups.categories[k]);
    }
    for (std::size_t k = 0; k < values.size() && k < 20; ++k) present += (k ? ", " : "") + values[k];
    if (values.size() > 20) present += ", …";
    throw std::invalid_argument("--groupby " + column + ": SOURCE group '" + grp.value + "' (" +
                                std::to_string(grp.srows.size()) + " rows) has no rows in TARGET " +
                                target.path.string() + " (its values: " + (present.empty() ? "none" : present) + ")");
  }

  // One batched solve; each group's ε from its own diameter (--rel-blur) unless --blur is given.
  std::vector<std::vector<float>> xs(groups.size()), ys(groups.size());
  std::vector<BatchProblem> problems(groups.size());
  for (std::size_t q = 0; q < groups.size(); ++q) {
    xs[q] = gather(source, groups[q].srows);
    ys[q] = gather(target, groups[q].trows);
    problems[q].x = {xs[q], groups[q].srows.size(), source.d};
    problems[q].y = {ys[q], groups[q].trows.size(), target.d};
    problems[q].options = g.solve;
    problems[q].options.progress = [](const Progress&) { return !interrupted(); };
  }
  if (!g.quiet) {
    std::cerr << "flashot align: " << source.n() << " SOURCE rows (" << source.path.string() << ") -> " << target.n()
              << " TARGET rows (" << target.path.string() << "), " << source.representation << ", " << groups.size()
              << (groups.size() == 1 ? " group" : " groups") << " of '" << column << "' in one batched solve; "
              << g.blur_origin << std::endl;
  }
  catch_interrupt();
  std::vector<SolveResult> results;
  try {
    results = solve_batch(problems, g.backend);
  } catch (...) {
    std::signal(SIGINT, SIG_DFL);
    throw;
  }
  std::signal(SIGINT, SIG_DFL);
  for (std::size_t q = 0; q < groups.size(); ++q) {
    if (results[q].reason == StopReason::kCancelled)
      throw std::runtime_error("interrupted after " + std::to_string(results[q].iterations) +
                               " iterations; nothing written");
    if (results[q].reason == StopReason::kNonFinite)
      throw std::runtime_error("group '" + groups[q].value + "': the solve produced non-finite values (" +
                               results[q].message + "); try a larger --blur or --rel-blur");
  }

  // ---- Results: each group's plan operations through a Problem of its own points and the batch's potentials ---
  const auto output_start = std::chrono::steady_clock::now();
  workflow::AlignmentOutput output;
  output.mapped.assign(source.n() * source.d, std::nanf(""));
  const std::size_t classes = g.labels ? g.labels->categories.size() : 0;
  LabelTransfer transfer;
  if (g.labels) {
    transfer.points = source.n();
    transfer.classes = classes;
    transfer.probabilities.assign(source.n() * classes, 0.0f);
    transfer.label.assign(source.n(), -1);
    transfer.confidence.assign(source.n(), 0.0f);
    transfer.entropy.assign(source.n(), 0.0f);
  }
  nlohmann::json group_report = nlohmann::json::array();
  double cost = 0, worst_error = 0;
  for (std::size_t q = 0; q < groups.size(); ++q) {
    const SolveResult& r = results[q];
    Problem problem(problems[q].x, problems[q].y, {}, {}, g.backend);
    const std::vector<float> mapped = problem.barycentric(r, Side::kSource);
    for (std::size_t i = 0; i < groups[q].srows.size(); ++i)
      std::copy_n(mapped.begin() + std::ptrdiff_t(i * source.d), source.d,
                  output.mapped.begin() + std::ptrdiff_t(groups[q].srows[i] * source.d));
    if (g.labels) {
      std::vector<std::int32_t> codes(groups[q].trows.size());
      for (std::size_t j = 0; j < codes.size(); ++j) codes[j] = g.labels->codes[groups[q].trows[j]];
      const LabelTransfer t = problem.transfer_labels(r, Side::kTarget, codes, classes);
      for (std::size_t i = 0; i < groups[q].srows.size(); ++i) {
        const std::size_t row = groups[q].srows[i];
        std::copy_n(t.probabilities.begin() + std::ptrdiff_t(i * classes), classes,
                    transfer.probabilities.begin() + std::ptrdiff_t(row * classes));
        transfer.label[row] = t.label[i];
        transfer.confidence[row] = t.confidence[i];
        transfer.entropy[row] = t.entropy[i];
      }
    }
    const double share = double(groups[q].srows.size()) / double(source.n());
    cost += share * r.dual_cost;
    worst_error = std::max(worst_error, r.marginal_error);
    nlohmann::json entry = workflow::solve_json(r);
    entry["value"] = groups[q].value;
    entry["source_rows"] = groups[q].srows.size();
    entry["target_rows"] = groups[q].trows.size();
    group_report.push_back(entry);
  }
  output.scalars = {{"groups", double(groups.size())}, {"cost", cost}, {"marginal_error", worst_error}};
  nlohmann::json label_report;
  if (g.labels) {
    output.transfer = transfer;
    output.label_names = g.labels;
    std::size_t labelled = 0;
    double confidence = 0;
    for (std::size_t i = 0; i < source.n(); ++i)
      if (transfer.label[i] >= 0) ++labelled, confidence += transfer.confidence[i];
    label_report = {{"column", g.labels->column},
                    {"output_column", g.labels->column + "_flashot"},
                    {"classes", classes},
                    {"labelled_rows", labelled},
                    {"mean_confidence", workflow::number(labelled ? confidence / double(labelled) : NAN)}};
    if (g.truth) {
      const workflow::LabelAgreement agreement = workflow::label_agreement(transfer, *g.labels, *g.truth);
      label_report["agreement"] = {{"column", g.truth->column},
                                   {"compared_rows", agreement.compared},
                                   {"agreeing_rows", agreement.agreeing},
                                   {"fraction", workflow::number(agreement.fraction())}};
    }
  }

  workflow::OutputSet outputs;
  workflow::write_enriched_copy(source, output, outputs.stage(g.out_path));
  const double output_seconds = seconds_since(output_start);
  nlohmann::json report;
  report["command"] = "align";
  report["groupby"] = {{"column", column}, {"groups", groups.size()}, {"weighted_cost", workflow::number(cost)},
                       {"largest_marginal_error", workflow::number(worst_error)}};
  report["groups"] = group_report;
  report["source"] = workflow::cloud_json(source);
  report["target"] = workflow::cloud_json(target);
  report["scale"] = {{"blur_from", g.blur_origin}, {"epsilon_rule", "epsilon = blur^2 (cost units), per group"}};
  report["parameters"] = workflow::options_json(g.solve);
  report["parameters"]["backend_requested"] = to_string(g.backend.backend);
  report["parameters"]["threads"] = g.backend.threads;
  if (g.labels) report["label_transfer"] = label_report;
  report["outputs"] = {{"aligned", g.out_path.string()}};
  if (!g.report_path.empty()) report["outputs"]["report"] = g.report_path.string();
  const double solve_seconds = results.empty() ? 0.0 : results.front().seconds;
  report["timings"] = {{"load_seconds", g.load_seconds}, {"solve_seconds", solve_seconds},
                       {"outputs_seconds", output_seconds}, {"total_seconds", seconds_since(g.start)}};
  report["peak_memory_bytes"] = workflow::peak_memory_bytes();
  report["versions"] = workflow::versions_json();
  if (!g.report_path.empty()) {
    const std::string text = report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    workflow::write_text_atomically(outputs.stage(g.report_path), text);
  }
  outputs.commit();

  if (!g.quiet) {
    std::size_t converged = 0;
    for (const SolveResult& r : results) converged += r.converged;
    std::cerr << "flashot align: wrote " << g.out_path.string() << "\n  " << groups.size() << " groups of '" << column
              << "' in " << format_double(std::round(solve_seconds * 1000) / 1000) << " s, " << converged
              << " converged, largest marginal error " << format_short(worst_error) << ", size-weighted cost "
              << format_short(cost) << "\n";
    if (g.labels)
      std::cerr << "  labels '" << g.labels->column << "': " << label_report["labelled_rows"] << " of " << source.n()
                << " rows labelled, mean confidence " << label_report["mean_confidence"].dump() << "\n";
    std::cerr << "  peak memory " << workflow::peak_memory_bytes() / (1024 * 1024) << " MiB, total "
              << format_double(std::round(seconds_since(g.start) * 1000) / 1000) << " s" << std::endl;
  }
  return 0;
}

}  // namespace flashot::cli
