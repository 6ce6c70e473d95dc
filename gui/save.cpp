#include "save.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "flashot/workflow/checks.hpp"
#include "flashot/workflow/output_set.hpp"
#include "flashot/workflow/report.hpp"
#include "flashot/workflow/run_plan.hpp"
#include "flashot/io/anndata.hpp"

namespace flashot::gui {
namespace {

/// The CLI's check (workflow::RunPlan): `path` is not an input, and its folder exists and takes a new file. Throws
/// workflow::PathError (a std::invalid_argument) naming `what`, the path and the conflict.
void check_destination(const std::string& what, const std::filesystem::path& path, const Dataset& source,
                       const Dataset& target) {
  workflow::RunPlan plan;
  plan.input("SOURCE", source.path());
  plan.input("TARGET", target.path());
  plan.output(what, path).check();
}

}  // namespace

void save_aligned(const Dataset& source, const Dataset& target, const std::string& key,
                  const AlignmentOutcome& outcome, const std::filesystem::path& path) {
  workflow::require_extension(path, source.kind(), "the aligned " + source.path().filename().string());
  check_destination("the aligned data", path, source, target);
  workflow::AlignmentOutput output;
  output.mapped = outcome.mapped;
  if (outcome.transfer && outcome.labels) {
    output.label_names = outcome.labels;
    output.transfer = outcome.transfer;
  }
  output.scalars = {{"epsilon", outcome.result.epsilon},
                    {"cost", outcome.result.dual_cost},
                    {"marginal_error", outcome.result.marginal_error},
                    {"iterations", static_cast<double>(outcome.result.iterations)}};
  workflow::OutputSet outputs;
  const std::filesystem::path temporary = outputs.stage(path);
  workflow::write_enriched_copy(source.as_point_cloud(key, outcome.d), output, temporary);
  outputs.commit();
}

void save_coupling(const Dataset& source, const Dataset& target, const AlignmentOutcome& outcome,
                   const std::filesystem::path& path) {
  workflow::require_extension(path, workflow::FileKind::kH5ad, "the coupling");
  check_destination("the coupling", path, source, target);
  const TopKCoupling& c = outcome.coupling;
  io::SparseMatrix csr;
  csr.rows = c.rows;
  csr.cols = outcome.m;
  csr.indptr.assign(c.rows + 1, 0);
  std::vector<std::size_t> order(c.k);
  for (std::size_t i = 0; i < c.rows; ++i) {
    // CSR wants ascending column indices within a row; top_k gives them by decreasing mass.
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return c.columns[i * c.k + a] < c.columns[i * c.k + b]; });
    for (std::size_t e : order) {
      const float value = c.values[i * c.k + e];
      if (!(value > 0)) continue;
      csr.indices.push_back(c.columns[i * c.k + e]);
      csr.data.push_back(value);
    }
    csr.indptr[i + 1] = static_cast<std::int64_t>(csr.data.size());
  }
  workflow::OutputSet outputs;
  const std::filesystem::path temporary = outputs.stage(path);
  io::write_coupling_h5ad(temporary, source.names(), target.names(), csr);
  outputs.commit();
}

void save_report(const Dataset& source, const Dataset& target, const std::string& key,
                 const AlignmentOutcome& outcome, const std::filesystem::path& path) {
  check_destination("the report", path, source, target);
  nlohmann::json report = workflow::solve_json(outcome.result);
  report["options"] = workflow::options_json(outcome.options);
  report["inputs"] = {{"source", source.path().string()},
                      {"target", target.path().string()},
                      {"key", key},
                      {"n", outcome.n},
                      {"m", outcome.m},
                      {"d", outcome.d},
                      {"diameter", workflow::number(outcome.diameter)}};
  report["top_k"] = outcome.coupling.k;
  if (outcome.transfer && outcome.labels) {
    const auto& t = *outcome.transfer;
    double confidence = 0;
    for (float v : t.confidence) confidence += v;
    report["transfer"] = {{"column", outcome.labels->column},
                          {"classes", outcome.labels->categories.size()},
                          {"mean_confidence", workflow::number(t.points ? confidence / static_cast<double>(t.points) : 0)}};
  }
  report["versions"] = workflow::versions_json();
  report["program"] = "flashot-gui";
  workflow::write_text_atomically(path, report.dump(2) + "\n");
}

void save_image(const QImage& image, const std::filesystem::path& path) {
  workflow::RunPlan().output("the screenshot", path).check();
  workflow::OutputSet outputs;
  const std::filesystem::path temporary = outputs.stage(path);
  if (!image.save(QString::fromStdString(temporary.string()), "PNG")) {
    throw std::runtime_error("cannot write the image " + path.string());
  }
  outputs.commit();
}

}  // namespace flashot::gui
