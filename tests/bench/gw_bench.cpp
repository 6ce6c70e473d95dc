// flashot_gw_bench: times entropic fused Gromov–Wasserstein on synthetic tissue slices (tests/support/slices.cpp)
// at a given size: wall time, outer and inner iterations, peak device memory. Prints figures, asserts nothing.
//   flashot_gw_bench [--n N] [--m M] [--e E] [--alpha A] [--blur B] [--backend cpu|cuda|auto] [--threads T]
//                    [--outer-tol T] [--inner-tol T] [--anderson MEMORY] [--block B] [--overrelaxation W] [--adaptive C]
//                    [--first-tol T] [--anneal R] [--anneal-factor F] [--anneal-tol T] [--anneal-iters K]
//                    [--scheme symmetric|alternating] [--max-inner N] [--check-every K] [--coarse N]
//                    [--coarse-factor F] [--rotation DEG] [--plateau 0|1] [--groups K] [--plain-groups 0|1] [--level-start 0|1] [--trigger F] [--spatial-groups K] [--coarse-stop 0|1] [--checks 0|1]
//                    [--outer-anderson K] [--settled-tol T]
//                    [--coarse-tol T] [--stratified 0|1] [--level-start-tol T] [--kernel auto|register|tiled|tensor|tensor-bias] [--precision P] [--dump DIR]
// Every outer iteration is printed (and flushed) as it finishes; then the totals and the recovery of the known
// rotation, translation and cell types. --dump writes the normalized inputs to DIR (tests/bench/gw_pot_bench.py).
// Coordinates and embedding are normalized as `flashot align --spatial` does (workflow/spatial.cpp): ε = blur².
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "flashot/flashot.hpp"
#include "flashot/gromov.hpp"
#include "slices.hpp"

using flashot::test::rigid_fit;

int main(int argc, char** argv) {
  std::size_t n = 20000, m = 20000, e = 50;
  double alpha = 0.5, blur = 0.05, outer_tol = 1e-5, inner_tol = 1e-4;
  flashot::BackendOptions bo;
  double first_tol = 1e-2, anneal = 1, anneal_factor = 0.5, adaptive = 0, anneal_tol = 1e-2;
  const flashot::GromovOptions defaults;
  int max_inner = defaults.inner_max_iterations, anneal_iters = 0, anderson = defaults.anderson_memory,
      block = defaults.anderson_block, coarse = defaults.coarse_points, check_every = defaults.check_every;
  double level_start_tol = defaults.level_start_tolerance;
  double coarse_tol = defaults.coarse_tolerance, trigger = defaults.correction_trigger;
  int outer_anderson = defaults.outer_anderson_memory;
  double settled_tol = defaults.settled_moment_tolerance;
  double coarse_factor = defaults.coarse_factor, rotation = 30, overrelaxation = defaults.overrelaxation;
  int checks = 0;  // 1: print every marginal-error check of the inner solves
  int plateau = defaults.plateau_search, groups = defaults.correction_groups,
      plain_groups = defaults.plain_group_correction, coarse_stop = defaults.coarse_stop_on_moments,
      spatial_groups = defaults.correction_spatial_groups,
      level_start = defaults.level_start_correction, stratified = defaults.coarse_stratified;
  std::string scheme = "alternating", dump;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc % 2 == 0) {  // every option takes one value: a lone word would otherwise be ignored silently
    std::fprintf(stderr, "option %s has no value (every option takes one: --n 20000 --backend cuda ...)\n", argv[argc - 1]);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--n") n = std::stoull(v);
    else if (k == "--m") m = std::stoull(v);
    else if (k == "--e") e = std::stoull(v);
    else if (k == "--alpha") alpha = std::stod(v);
    else if (k == "--blur") blur = std::stod(v);
    else if (k == "--outer-tol") outer_tol = std::stod(v);
    else if (k == "--inner-tol") inner_tol = std::stod(v);
    else if (k == "--backend") bo.backend = flashot::parse_backend(v);
    else if (k == "--threads") bo.threads = std::stoi(v);
    else if (k == "--kernel") bo.cuda.kernel = flashot::parse_score_kernel(v);
    else if (k == "--precision") bo.precision = flashot::parse_precision(v);
    else if (k == "--anneal") anneal = std::stod(v);
    else if (k == "--anneal-factor") anneal_factor = std::stod(v);
    else if (k == "--adaptive") adaptive = std::stod(v);
    else if (k == "--anneal-tol") anneal_tol = std::stod(v);
    else if (k == "--scheme") scheme = v;
    else if (k == "--anneal-iters") anneal_iters = std::stoi(v);
    else if (k == "--anderson") anderson = std::stoi(v);
    else if (k == "--block") block = std::stoi(v);
    else if (k == "--overrelaxation") overrelaxation = std::stod(v);
    else if (k == "--first-tol") first_tol = std::stod(v);
    else if (k == "--dump") dump = v;
    else if (k == "--max-inner") max_inner = std::stoi(v);
    else if (k == "--check-every") check_every = std::stoi(v);
    else if (k == "--coarse") coarse = std::stoi(v);
    else if (k == "--coarse-factor") coarse_factor = std::stod(v);
    else if (k == "--rotation") rotation = std::stod(v);
    else if (k == "--checks") checks = std::stoi(v);
    else if (k == "--plateau") plateau = std::stoi(v);
    else if (k == "--groups") groups = std::stoi(v);
    else if (k == "--plain-groups") plain_groups = std::stoi(v);
    else if (k == "--level-start") level_start = std::stoi(v);
    else if (k == "--trigger") trigger = std::stod(v);
    else if (k == "--spatial-groups") spatial_groups = std::stoi(v);
    else if (k == "--coarse-stop") coarse_stop = std::stoi(v);
    else if (k == "--coarse-tol") coarse_tol = std::stod(v);
    else if (k == "--stratified") stratified = std::stoi(v);
    else if (k == "--level-start-tol") level_start_tol = std::stod(v);
    else if (k == "--outer-anderson") outer_anderson = std::stoi(v);
    else if (k == "--settled-tol") settled_tol = std::stod(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  flashot::test::SliceOptions so;
  so.n_source = n;
  so.n_target = m;
  so.embedding_d = e;
  so.rotation_degrees = rotation;
  const flashot::test::SlicePair s = flashot::test::make_slice_pair(so);
  // The CLI's units: coordinates so that the mean squared distance within a slice is 1 (a unit square has
  // variance 1/6 per axis: 1/3 for both slices' two axes together), embedding so that the mean ‖u − v‖² is 1.
  const auto scale = [](std::vector<float> v, std::size_t d) {
    double mean_sq = 0;
    std::vector<double> mean(d, 0.0);
    const std::size_t rows = v.size() / d;
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t c = 0; c < d; ++c) mean[c] += v[i * d + c];
    for (double& c : mean) c /= static_cast<double>(rows);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t c = 0; c < d; ++c) mean_sq += (v[i * d + c] - mean[c]) * (v[i * d + c] - mean[c]);
    mean_sq /= static_cast<double>(rows);
    const float f = static_cast<float>(1.0 / std::sqrt(2 * mean_sq));
    for (float& x : v) x *= f;
    return v;
  };
  const std::vector<float> x = scale(s.x, 2), y = scale(s.y, 2), u = scale(s.u, e), v = scale(s.v, e);
  if (!dump.empty()) {  // the normalized inputs as text, for tests/bench/gw_pot_bench.py
    const auto write = [&](const char* name, const std::vector<float>& values, std::size_t cols) {
      std::FILE* f = std::fopen((dump + "/" + name).c_str(), "w");
      if (!f) throw std::runtime_error("cannot write " + dump + "/" + name);
      for (std::size_t i = 0; i < values.size(); ++i) std::fprintf(f, "%.9g%c", values[i], (i + 1) % cols ? ' ' : '\n');
      std::fclose(f);
    };
    write("x.txt", x, 2);
    write("y.txt", y, 2);
    write("u.txt", u, e);
    write("v.txt", v, e);
  }
  const double y_factor = s.y.empty() ? 1.0 : static_cast<double>(y[0]) / s.y[0];
  std::printf("fused GW n=%zu m=%zu e=%zu spatial d=2 alpha=%g eps=%g backend=%s\n", n, m, e, alpha, blur * blur,
              flashot::to_string(bo.backend).c_str());
  const auto t0 = std::chrono::steady_clock::now();
  flashot::GromovProblem problem({{x, n, 2}, {y, m, 2}, {u, n, e}, {v, m, e}, {}, {}}, bo);
  flashot::GromovOptions o;
  o.alpha = alpha;
  o.epsilon = blur * blur;
  o.outer_tolerance = outer_tol;
  o.inner_tolerance = inner_tol;
  o.annealing_start = anneal;
  o.annealing_factor = anneal_factor;
  o.adaptive_tolerance = adaptive;
  o.annealing_tolerance = anneal_tol;
  o.annealing_iterations = anneal_iters;
  o.anderson_memory = anderson;
  o.anderson_block = block;
  o.overrelaxation = overrelaxation;
  o.first_tolerance = first_tol;
  o.inner_max_iterations = max_inner;
  o.check_every = check_every;
  o.plateau_search = plateau != 0;
  o.correction_groups = groups;
  o.plain_group_correction = plain_groups != 0;
  o.level_start_correction = level_start != 0;
  o.correction_trigger = trigger;
  o.correction_spatial_groups = spatial_groups;
  o.coarse_stop_on_moments = coarse_stop != 0;
  o.coarse_tolerance = coarse_tol;
  o.outer_anderson_memory = outer_anderson;
  o.settled_moment_tolerance = settled_tol;
  o.coarse_points = coarse;
  o.coarse_factor = coarse_factor;
  o.coarse_stratified = stratified != 0;
  o.level_start_tolerance = level_start_tol;
  o.scheme = scheme == "symmetric" ? flashot::Scheme::kSymmetric : flashot::Scheme::kAlternating;
  o.report = [](const flashot::GromovIteration& it) {
    std::printf("  %6zu x %-6zu outer %3d  eps %.3g  tol %.2g  objective %.6g  change %.3g  moments %.2g  inner %5d  "
                "marginal error %.2g  |f|,|g| <= %.3g  %.3f s%s\n",
                it.n, it.m, it.outer, it.epsilon, it.inner_tolerance, it.objective, it.change, it.moment_change,
                it.inner_iterations, it.marginal_error, it.largest_potential, it.seconds,
                it.extrapolated ? "  (extrapolated cost)" : "");
  };
  if (checks)
    o.progress = [](const flashot::GromovProgress& pr) {
      if (std::isfinite(pr.marginal_error) && pr.inner_iteration > 0)
        std::printf("      outer %d  inner %d  marginal error %.3g\n", pr.outer, pr.inner_iteration, pr.marginal_error);
      return true;
    };
  const flashot::GromovResult r = problem.solve(o);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const flashot::DeviceMemory mem = flashot::device_memory();
  std::printf("backend %s (%s)\n", r.plan.backend.c_str(), r.plan.device.c_str());
  std::printf("wall %.3f s (solve %.3f s), outer %d, inner %d, converged %s, peak device memory %.1f MB\n%s\n",
              wall, r.seconds, r.outer_iterations, r.inner_iterations, r.converged ? "yes" : "no",
              mem.peak_bytes / 1e6, r.message.c_str());
  std::printf("coarse levels: %zu outer iterations, %d inner, %.3f s; full level: %.3f s, %d group corrections, "
              "%d extrapolated costs\n",
              r.coarse_history.size(), r.coarse_inner_iterations, r.coarse_seconds, r.seconds - r.coarse_seconds,
              r.group_corrections, r.outer_extrapolations);
  // The engine's potentials of the last inner solve: their size against ε decides what fp32 resolves of them
  // (docs/gromov-wasserstein.md §9).
  if (!r.plan.f.empty() && !r.plan.g.empty()) {
    const auto [f_lo, f_hi] = std::minmax_element(r.plan.f.begin(), r.plan.f.end());
    const auto [g_lo, g_hi] = std::minmax_element(r.plan.g.begin(), r.plan.g.end());
    std::printf("potentials: f in [%.4g, %.4g], g in [%.4g, %.4g] (eps %.3g)\n", *f_lo, *f_hi, *g_lo, *g_hi,
                r.plan.epsilon);
  }
  // Recovery of the known motion and cell types (the test GromovSlices checks these at 800 × 1000).
  std::vector<float> mapped = problem.map_coordinates(r);
  for (float& c : mapped) c = static_cast<float>(c / y_factor);
  double angle = 0, t[2];
  rigid_fit(s.x, mapped, std::vector<float>(n, 1.0f), angle, t);
  const flashot::LabelTransfer lt =
      problem.problem().transfer_labels(r.plan, flashot::Side::kTarget, s.label_y, s.classes);
  std::size_t right = 0;
  for (std::size_t i = 0; i < n; ++i) right += lt.label[i] == s.label_x[i];
  std::printf("recovery: rotation %.3f deg (true %.3f), translation (%.4f, %.4f) (true (%.4f, %.4f)) of the width, "
              "labels %.4f\n",
              angle * 180 / 3.14159265358979, so.rotation_degrees, t[0], t[1], s.translation[0], s.translation[1],
              static_cast<double>(right) / static_cast<double>(n));
  return 0;
}
