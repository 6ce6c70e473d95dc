#include "registration.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "flashot/workflow/checks.hpp"
#include "flashot/workflow/output_set.hpp"
#include "flashot/workflow/run_plan.hpp"
#include "parameters.hpp"

namespace flashot::gui {
namespace {

using workflow::value_text;

bool finite_at_least(double v, double low) { return std::isfinite(v) && v >= low; }

std::string format(const char* pattern, double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, v);
  return buffer;
}

}  // namespace

std::vector<std::string> validate(const RegistrationParameters& p) {
  std::vector<std::string> problems;
  if (std::find(std::begin(kRegistrationModels), std::end(kRegistrationModels), p.model) ==
      std::end(kRegistrationModels)) {
    problems.push_back("model must be rigid, similarity, affine or nonrigid (got '" + p.model + "')");
  }
  if (!finite_at_least(p.blur, 0)) problems.push_back("blur must be ≥ 0 (got " + value_text(p.blur) + ")");
  if (!finite_at_least(p.start_blur, 0)) {
    problems.push_back("start blur must be ≥ 0 (got " + value_text(p.start_blur) + ")");
  }
  if (!(p.anneal > 0 && p.anneal < 1)) problems.push_back("anneal must be in (0, 1) (got " + value_text(p.anneal) + ")");
  if (p.max_rounds < 1 || p.max_rounds > 100'000) {
    problems.push_back("max rounds must be in [1, 100000] (got " + std::to_string(p.max_rounds) + ")");
  }
  if (!finite_at_least(p.reach, 0)) problems.push_back("reach must be ≥ 0 (got " + value_text(p.reach) + ")");
  if (!finite_at_least(p.reach_target_relative, 0)) {
    problems.push_back("relative reach must be ≥ 0 (got " + value_text(p.reach_target_relative) + ")");
  }
  if (!finite_at_least(p.kernel_width, 0)) {
    problems.push_back("kernel width must be ≥ 0 (got " + value_text(p.kernel_width) + ")");
  }
  if (!finite_at_least(p.regularization, 0)) {
    problems.push_back("regularization must be ≥ 0 (got " + value_text(p.regularization) + ")");
  }
  if (p.control_points < 1) problems.push_back("control points must be ≥ 1 (got 0)");
  if (std::find(std::begin(kMultiscaleChoices), std::end(kMultiscaleChoices), p.multiscale) ==
      std::end(kMultiscaleChoices)) {
    problems.push_back("multiscale must be auto, on or off (got '" + p.multiscale + "')");
  }
  // The backend's own check (names the backends present) is AlignParameters'.
  AlignParameters backend_only;
  backend_only.backend = p.backend;
  for (const std::string& problem : validate(backend_only)) problems.push_back(problem);
  return problems;
}

workflow::RegistrationOptions registration_options(const RegistrationParameters& p) {
  const std::vector<std::string> problems = validate(p);
  if (!problems.empty()) throw std::invalid_argument(problems.front());
  workflow::RegistrationOptions o;
  if (p.model != "nonrigid") o.model = workflow::parse_transform_model(p.model);
  o.blur = p.blur;
  o.start_blur = p.start_blur;
  o.anneal = p.anneal;
  o.max_rounds = p.max_rounds;
  o.reach = p.reach;
  o.reach_target_relative = p.reach_target_relative;
  AlignParameters backend_only;
  backend_only.backend = p.backend;
  o.backend = backend_options(backend_only);
  o.multiscale = parse_multiscale(p.multiscale);
  return o;
}

workflow::NonrigidOptions nonrigid_options(const RegistrationParameters& p) {
  const workflow::RegistrationOptions r = registration_options(p);
  // As `flashot register --model nonrigid`: the shared fields, then the field's own.
  workflow::NonrigidOptions o;
  o.blur = r.blur;
  o.start_blur = r.start_blur;
  o.anneal = r.anneal;
  o.max_rounds = r.max_rounds;
  o.reach = r.reach;
  o.reach_source = r.reach_source;
  o.reach_target = r.reach_target;
  o.backend = r.backend;
  o.multiscale = r.multiscale;
  o.kernel_width = p.kernel_width;
  o.regularization = p.regularization;
  o.control_points = p.control_points;
  return o;
}

RegistrationInput registration_input(const Dataset& source, const Dataset& target, const std::string& key,
                                     const RegistrationParameters& parameters) {
  RegistrationInput input;
  input.key = key;
  input.parameters = parameters;
  for (const Dataset* d : {&source, &target}) {
    Matrix points = d->read_space(key);
    if (points.cols != 3) {
      throw std::invalid_argument("registration needs 3-D points: " + d->path().filename().string() + " has " +
                                  std::to_string(points.cols) + " columns in '" + key +
                                  "' (PLY xyz or a 3-column obsm entry)");
    }
    (d == &source ? input.source : input.target).assign(points.values.begin(), points.values.end());
  }
  return input;
}

RegistrationOutcome run_registration(const RegistrationInput& input, const RegistrationCallback& progress,
                                     const workflow::SolveProgress& solve_progress) {
  const RegistrationParameters& p = input.parameters;
  const std::size_t n = input.source.size() / 3, m = input.target.size() / 3;
  const PointsView source{input.source, n, 3};
  const PointsView target{input.target, m, 3};
  bool stopped = false;
  const workflow::RegistrationProgress callback = [&](int round, int rounds, double epsilon, double rms) {
    if (progress && !progress(round, rounds, epsilon, rms)) stopped = true;
    return !stopped;
  };
  RegistrationOutcome out;
  out.model = p.model;
  out.key = input.key;
  out.n = n;
  out.m = m;
  out.multiscale = p.multiscale;
  const auto summarize = [&out](const SolveResult& last) {
    for (const workflow::RegistrationRound& round : out.rounds) out.multiscale_rounds += round.multiscale;
    out.multiscale_reason = last.multiscale.reason;
    out.multiscale_kept_fraction = last.multiscale.used && !last.multiscale.stages.empty()
                                       ? last.multiscale.stages.back().kept_fraction
                                       : 1.0;
  };
  if (p.model == "nonrigid") {
    workflow::NonrigidOptions options = nonrigid_options(p);
    options.solve_progress = solve_progress;
    workflow::NonrigidResult r = workflow::register_nonrigid(source, target, options, callback);
    out.registered = std::move(r.moved);
    out.control_points = r.control_points.size() / 3;
    out.kernel_width = r.kernel_width;
    out.rms = r.rms;
    out.diameter = r.diameter;
    out.final_blur = std::sqrt(r.last_solve.epsilon);
    out.converged = r.converged;
    out.rounds = std::move(r.rounds);
    out.iterations = r.iterations;
    out.backend = r.backend;
    out.seconds = r.seconds;
    out.transported_mass = r.transported_mass;
    stopped = stopped || r.cancelled;
    summarize(r.last_solve);
  } else {
    workflow::RegistrationOptions options = registration_options(p);
    options.solve_progress = solve_progress;
    workflow::RegistrationResult r = workflow::register_clouds(source, target, options, callback);
    out.registered = r.transform.apply(input.source);
    out.transform = r.transform;
    out.rotation_degrees = r.transform.rotation_degrees();
    out.rotation_axis = r.transform.rotation_axis();
    out.rms = r.rms;
    out.diameter = r.diameter;
    out.final_blur = r.final_blur;
    out.transported_mass = r.transported_mass;
    out.converged = r.converged;
    out.warnings = workflow::registration_warnings(r);
    out.rounds = std::move(r.rounds);
    out.iterations = r.iterations;
    out.backend = r.backend;
    out.seconds = r.seconds;
    stopped = stopped || r.cancelled;
    summarize(r.last_solve);
  }
  out.cancelled = stopped;
  return out;
}

QString check_text(int round, int rounds, const Progress& check) {
  QString text = QStringLiteral("round %1/%2 · stage %3/%4%5 · ε %6 · iteration %7")
                     .arg(round)
                     .arg(rounds)
                     .arg(check.stage + 1)
                     .arg(check.stage_count)
                     .arg(check.coarse ? QStringLiteral(" (coarse level)") : QString())
                     .arg(check.epsilon, 0, 'g', 3)
                     .arg(check.iteration);
  // An intermediate ε stage reports after its iterations without measuring the error (NaN).
  if (std::isfinite(check.marginal_error)) text += QStringLiteral(" · marginal error %1").arg(check.marginal_error, 0, 'e', 2);
  return text;
}

TaskWorker::Job registration_job(std::shared_ptr<const RegistrationInput> input) {
  return [input = std::move(input)](const TaskWorker::Report& report) -> std::shared_ptr<const void> {
    auto outcome = std::make_shared<RegistrationOutcome>(run_registration(
        *input,
        [&](int round, int rounds, double epsilon, double rms) {
          return report(QStringLiteral("round %1/%2 · ε %3 · rms %4")
                            .arg(round)
                            .arg(rounds)
                            .arg(epsilon, 0, 'g', 3)
                            .arg(rms, 0, 'g', 4),
                        round, rounds);
        },
        [&](int round, const Progress& check) {
          // The bar counts the rounds done; the line follows the running solve.
          const int rounds = input->parameters.max_rounds;
          return report(check_text(round, rounds, check), round - 1, rounds);
        }));
    if (outcome->cancelled) return nullptr;  // TaskWorker answers a null result with cancelled()
    return outcome;
  };
}

std::string describe(const RegistrationOutcome& o) {
  std::string text;
  if (o.transform) {
    const auto& a = o.transform->linear;
    const auto& t = o.transform->translation;
    text += o.model + " transform (y = A x + t):\n";
    for (int r = 0; r < 3; ++r) {
      char row[160];
      std::snprintf(row, sizeof row, "  % .6f % .6f % .6f  % .6g\n", a[3 * r], a[3 * r + 1], a[3 * r + 2],
                    t[std::size_t(r)]);
      text += row;
    }
    text += "   0         0         0          1\n";
    char line[256];
    std::snprintf(line, sizeof line, "rotation %.4f° about (%.4f, %.4f, %.4f)\nscale %.6f\ntranslation (%.6g, %.6g, %.6g)\n",
                  o.rotation_degrees, o.rotation_axis[0], o.rotation_axis[1], o.rotation_axis[2], o.transform->scale,
                  t[0], t[1], t[2]);
    text += line;
  } else {
    char line[160];
    std::snprintf(line, sizeof line, "nonrigid field: %zu control points, kernel width %.6g\n", o.control_points,
                  o.kernel_width);
    text += line;
  }
  text += "rms " + format("%.6g", o.rms) + " (" + format("%.4g", o.diameter > 0 ? o.rms / o.diameter : 0.0) +
          " × diameter; weighted, to the OT correspondences)\n";
  text += "transported mass " + format("%.4f", o.transported_mass) + " of the source's\n";
  if (o.multiscale_rounds > 0) {
    text += "multiscale (" + o.multiscale + "): " + std::to_string(o.multiscale_rounds) + " of " +
            std::to_string(o.rounds.size()) + " rounds; the last visited " +
            format("%.3g", 100 * o.multiscale_kept_fraction) + "% of the point pairs\n";
  } else {
    text += "multiscale (" + o.multiscale + "): not used (" + o.multiscale_reason + ")\n";
  }
  char line[200];
  std::snprintf(line, sizeof line, "%s after %zu rounds (%d Sinkhorn iterations), final blur %.4g, %.2f s on %s\n",
                o.converged ? "converged" : "NOT converged", o.rounds.size(), o.iterations, o.final_blur, o.seconds,
                o.backend.c_str());
  text += line;
  for (const std::string& w : o.warnings) text += "warning: " + w + "\n";
  return text;
}

void save_registered(const Dataset& source, const Dataset& target, const RegistrationOutcome& outcome,
                     const std::filesystem::path& path) {
  if (outcome.registered.size() != source.size() * 3) {
    throw std::invalid_argument("the registration has " + std::to_string(outcome.registered.size() / 3) +
                                " points but " + source.path().filename().string() + " has " +
                                std::to_string(source.size()));
  }
  workflow::require_extension(path, source.kind(), "the registered " + source.path().filename().string());
  workflow::RunPlan plan;
  plan.input("SOURCE", source.path());
  plan.input("TARGET", target.path());
  plan.output("the registered cloud", path).check();
  workflow::AlignmentOutput output;
  output.mapped = outcome.registered;
  if (source.kind() == workflow::FileKind::kH5ad) {
    output.scalars = {{"registration_rms", outcome.rms}, {"registration_transported_mass", outcome.transported_mass}};
    if (outcome.transform) output.scalars.emplace_back("registration_rotation_degrees", outcome.rotation_degrees);
  }
  workflow::OutputSet outputs;
  workflow::write_enriched_copy(source.as_point_cloud(outcome.key, 3), output, outputs.stage(path));
  outputs.commit();
}

}  // namespace flashot::gui
