// flashot bench: times exactly K fixed-ε Sinkhorn iterations on seeded N(0,1) points with random positive weights,
// the problem tests/bench/peers/peers.sh times for the peer implementations (weights U(0,1) + 0.1, as there).
// One warm-up solve, then the median wall time of R solves. With --csv the last stdout line is
// `method,n,m,d,eps,iters,median_ms` values. --data clusters: a Gaussian mixture instead; --kernel forces the CUDA
// score kernel family (measuring engine/cuda/dispatch_table.inc, docs/engine.md).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.hpp"
#include "flashot/flashot.hpp"
#include "flashot/synthetic.hpp"
#include "npy.hpp"

namespace flashot::cli {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t h = values.size() / 2;
  return values.size() % 2 == 1 ? values[h] : 0.5 * (values[h - 1] + values[h]);
}

std::string format_ms(double ms) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.3f", ms);
  return buffer;
}


/// The end-to-end job of issue 3 (1M × 1M, d = 50 on one H200 in under 60 s): every phase timed once.
/// The --data clouds of a pair: the historical normal / clusters generators (kept for the recorded benchmarks), or
/// a flashot/synthetic.hpp shape; --pair deformed makes y a known deformation of a second sample of x's shape.
struct BenchData {
  std::vector<float> x, y, a, b;
};

BenchData bench_data(const std::string& data, const std::string& pair, std::size_t n, std::size_t m, std::size_t d,
                     std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  BenchData out;
  if (data == "normal" || data == "clusters") {
    const bool clusters = data == "clusters";
    out.x = clusters ? synthetic::bench_clusters(rng, n, d) : synthetic::bench_normal(rng, n * d);
    out.y = clusters ? synthetic::bench_clusters(rng, m, d) : synthetic::bench_normal(rng, m * d);
  } else {
    const synthetic::Shape shape = synthetic::parse_shape(data == "mixture" ? "clusters" : data);
    // Same shape (the mixture's components fixed by n and `seed`), another independent sample.
    const std::size_t components = std::min<std::size_t>(256, std::max<std::size_t>(8, n / 2000));
    out.x = synthetic::generate(shape, n, d, seed, components, 0);
    out.y = synthetic::generate(shape, m, d, seed, components, 1);
  }
  if (pair == "deformed") out.y = synthetic::deform(out.y, d, seed + 2);
  // matched: y_i the image of x_i itself and b = a, so every part of the data (a mixture's cluster) holds the same
  // mass on both sides and the plan need not move mass between parts.
  if (pair == "matched") out.y = synthetic::deform(out.x, d, seed + 2);
  out.a = synthetic::bench_weights(rng, n);
  out.b = pair == "matched" ? out.a : synthetic::bench_weights(rng, m);
  return out;
}

struct EndToEnd {
  double eps = 0, blur_relative = 0, tolerance = 0, scaling = 0.5;
  int max_iterations = 10000;
  int check_every = 10;
  bool progress = false;  // one line per marginal-error check on stderr
  Scheme scheme = Scheme::kSymmetric;
  Multiscale multiscale = Multiscale::kAuto;
  double overrelaxation = kOverrelaxationAuto;
  std::string data, pair;
  std::uint64_t seed = 0;
  /// --save-points / --save-potentials folders (empty: not written), checked writable before any data is made.
  std::filesystem::path save_points, save_potentials;
};

/// --save-points: the generated problem exactly as the solver gets it (user order), for scripts that run other
/// solvers or exact evaluators on the same data (tests/bench/peers/multiscale_peers.py).
void save_points(const std::filesystem::path& folder, const BenchData& data, std::size_t n, std::size_t m,
                 std::size_t d) {
  write_npy(folder / "x.npy", data.x, {n, d});
  write_npy(folder / "y.npy", data.y, {m, d});
  write_npy(folder / "a.npy", data.a, {n});
  write_npy(folder / "b.npy", data.b, {m});
}

int end_to_end(std::size_t n, std::size_t m, std::size_t d, const EndToEnd& e, const BackendOptions& backend) {
  const double eps = e.eps, tolerance = e.tolerance, scaling = e.scaling;
  const Scheme scheme = e.scheme;
  const auto generate_start = std::chrono::steady_clock::now();
  const BenchData data = bench_data(e.data, e.pair, n, m, d, e.seed);
  const double generate = seconds_since(generate_start);
  if (!e.save_points.empty()) save_points(e.save_points, data, n, m, d);
  const std::vector<float>& x = data.x;
  const std::vector<float>& y = data.y;
  const std::vector<float>& a = data.a;
  const std::vector<float>& b = data.b;
  const auto start = std::chrono::steady_clock::now();
  Problem problem(PointsView{x, n, d}, PointsView{y, m, d}, a, b, backend);
  const double upload = seconds_since(start);
  SolveOptions solve;
  solve.blur = std::sqrt(eps);
  solve.blur_relative = e.blur_relative;
  solve.multiscale = e.multiscale;
  solve.overrelaxation = e.overrelaxation;
  solve.scaling = scaling;
  solve.tolerance = tolerance;
  solve.max_iterations = e.max_iterations;
  solve.check_every = e.check_every;
  solve.scheme = scheme;
  const auto solve_start = std::chrono::steady_clock::now();
  if (e.progress) {
    // Where a long solve spends its time (stage by stage) even when it is stopped before it prints its result.
    solve.progress = [solve_start](const Progress& p) {
      std::cerr << "progress: " << format_double(seconds_since(solve_start)) << " s, stage " << p.stage + 1 << "/"
                << p.stage_count << ", eps " << format_double(p.epsilon) << ", iteration " << p.iteration
                << ", marginal error " << format_double(p.marginal_error)
                << (p.coarse ? " (coarser level settling)" : "") << std::endl;
      return true;
    };
  }
  const SolveResult result = problem.solve(solve);
  const double solve_seconds = seconds_since(solve_start);
  if (result.reason == StopReason::kNonFinite) throw std::runtime_error("the solve failed: " + result.message);
  const auto project_start = std::chrono::steady_clock::now();
  const std::vector<float> projected = problem.barycentric(result, Side::kSource);
  const double project_seconds = seconds_since(project_start);
  const double total = seconds_since(start);
  double checksum = 0;
  for (float v : projected) checksum += v;
  const DeviceMemory memory = device_memory();
  // One JSON object, written by hand: `bench` is the engine-only part of the CLI (FLASHOT_IO=OFF builds on a GPU
  // machine have no JSON library).
  const auto text = [](const std::string& v) {
    std::string quoted = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    return quoted + "\"";
  };
  const auto number = [](double v) { return std::isfinite(v) ? format_double(v) : std::string("null"); };
  std::cout << "{\"method\":" << text("flashot_" + problem.backend_name()) << ",\"device\":"
            << text(problem.device_name()) << ",\"n\":" << n << ",\"m\":" << m << ",\"d\":" << d
            << ",\"epsilon\":" << number(eps) << ",\"scaling\":" << number(scaling)
            << ",\"scheme\":" << text(to_string(scheme)) << ",\"tolerance\":" << number(tolerance)
            << ",\"iterations\":" << result.iterations << ",\"overrelaxation\":" << number(result.overrelaxation)
            << ",\"stages\":" << result.stages.size()
            << ",\"converged\":" << (result.converged ? "true" : "false")
            << ",\"marginal_error\":" << number(result.marginal_error) << ",\"upload_s\":" << number(upload)
            << ",\"solve_s\":" << number(solve_seconds) << ",\"barycentric_s\":" << number(project_seconds)
            << ",\"total_s\":" << number(total) << ",\"projection_sum\":" << number(checksum)
            << ",\"device_peak_bytes\":" << memory.peak_bytes << ",\"device_peak_bytes_per_point_dim\":"
            << number(double(memory.peak_bytes) / (double(n + m) * double(d))) << ",\"data\":" << text(e.data)
            << ",\"pair\":" << text(e.pair) << ",\"generate_s\":" << number(generate)
            << ",\"final_epsilon\":" << number(result.epsilon) << ",\"dual_cost\":" << number(result.dual_cost)
            << ",\"primal_cost\":" << number(result.primal_cost) << ",\"multiscale\":{\"used\":"
            << (result.multiscale.used ? "true" : "false") << ",\"certified\":"
            << (result.multiscale.certified ? "true" : "false") << ",\"hierarchy_s\":"
            << number(result.multiscale.hierarchy_seconds) << ",\"pattern_s\":"
            << number(result.multiscale.pattern_seconds) << ",\"stages\":[";
  for (std::size_t k = 0; k < result.multiscale.stages.size(); ++k) {
    const MultiscaleStage& s = result.multiscale.stages[k];
    std::cout << (k ? "," : "") << "{\"epsilon\":" << number(s.epsilon) << ",\"iterations\":" << s.iterations
              << ",\"coarse\":" << (s.coarse ? "true" : "false") << ",\"dense\":" << (s.dense ? "true" : "false")
              << ",\"kept_pairs\":" << s.kept_pairs << ",\"total_pairs\":" << s.total_pairs
              << ",\"kept_fraction\":" << number(s.kept_fraction) << ",\"rechecks\":" << s.rechecks
              << ",\"redone\":" << s.redone << ",\"largest_rise\":" << number(s.largest_rise) << "}";
  }
  std::cout << "]}}" << std::endl;
  if (!e.save_potentials.empty()) {
    // solve.json last: once it is there, f.npy and g.npy are this solve's.
    write_npy(e.save_potentials / "f.npy", result.f, {n});
    write_npy(e.save_potentials / "g.npy", result.g, {m});
    const double s = result.cost == Cost::kHalfSquaredEuclidean ? 0.5 : 1.0;
    std::ostringstream json;
    json << "{\"n\":" << n << ",\"m\":" << m << ",\"d\":" << d << ",\"data\":" << text(e.data)
         << ",\"pair\":" << text(e.pair) << ",\"seed\":" << e.seed << ",\"backend\":"
         << text(problem.backend_name()) << ",\"epsilon\":" << number(result.epsilon) << ",\"cost_scale\":"
         << number(s) << ",\"plan\":" << text("P_ij = a_i b_j exp((f_i + g_j - s |x_i - y_j|^2) / epsilon)")
         << ",\"diameter\":" << number(result.diameter) << ",\"scheme\":" << text(to_string(scheme))
         << ",\"multiscale\":" << (result.multiscale.used ? "true" : "false")
         << ",\"tolerance\":" << number(tolerance) << ",\"iterations\":" << result.iterations
         << ",\"solve_s\":" << number(solve_seconds) << ",\"upload_s\":" << number(upload)
         << ",\"converged\":" << (result.converged ? "true" : "false") << ",\"marginal_error\":"
         << number(result.marginal_error) << ",\"marginal_error_norm\":"
         << text("(|P 1 - a|_1 + |P^T 1 - b|_1) / sum(a)") << ",\"dual_cost\":" << number(result.dual_cost)
         << ",\"primal_cost\":" << number(result.primal_cost) << "}\n";
    write_file_atomically(e.save_potentials / "solve.json", json.str());
  }
  return 0;
}

}  // namespace

int bench_main(const std::vector<std::string>& args) {
  po::options_description options("bench options");
  options.add_options()
      ("help,h", "this help")
      ("n", po::value<long long>()->required(), "source points")
      ("m", po::value<long long>(), "target points (default: n)")
      ("d", po::value<long long>()->default_value(3), "dimension")
      ("eps", po::value<double>()->default_value(0.1), "fixed epsilon (cost units, cost = |x-y|^2)")
      ("iters", po::value<long long>()->default_value(10), "iterations per solve (exactly; no tolerance check)")
      ("scheme", po::value<std::string>()->default_value("symmetric"), "symmetric | alternating")
      ("repeats", po::value<long long>()->default_value(10), "timed solves after one warm-up; the median is reported")
      ("seed", po::value<long long>()->default_value(0), "random seed of points and weights")
      ("data", po::value<std::string>()->default_value("normal"),
       "points: normal (N(0,1)) | clusters (8 centres ~ N(0,9), noise N(0,1/16); tests/bench/peers/sweep.py)")
      ("kernel", po::value<std::string>()->default_value("auto"),
       "CUDA score kernel family, for benchmarks and for measuring the dispatch table (docs/engine.md, \"Choosing "
       "the kernel\"): auto | register (d <= 16) | tiled | tensor (d <= 128; to 256 on Hopper) | tensor-bias (d <= 30: tensor, "
       "its one-pass sums' biases on the tensor cores too)")
      ("subtile-overlap", po::value<std::string>()->default_value("across"),
       "off | on | across. CUDA, Hopper, d <= 16 (tensor, tensor-bias): the warpgroup kernels sum a tile's first "
       "subtile while the second's products run (on), and, across (the default), the second while the next tile's "
       "first subtile is multiplied (CudaTuning::subtile_overlap; docs/engine.md, \"Overlapping the subtiles\"); "
       "same results every way, for A/B timing")
      ("csv", "print only `method,n,m,d,eps,iters,median_ms` values on stdout (for scripts)")
      ("end-to-end", "instead: one whole job, timed once: upload, epsilon-scaling solve down to --eps until the "
                     "marginal error is at most --tolerance, barycentric projection of the source; prints one JSON "
                     "object with the phases' seconds and the peak device memory")
      ("tolerance", po::value<double>()->default_value(1e-3), "--end-to-end: marginal-error tolerance")
      ("max-iterations", po::value<long long>()->default_value(10000),
       "--end-to-end: iteration budget of the whole solve (all stages)")
      ("check-every", po::value<long long>()->default_value(10),
       "--end-to-end: iterations of the final stage between marginal-error checks")
      ("progress", "--end-to-end: print every marginal-error check (seconds, stage, epsilon, iteration, error) "
                   "on stderr")
      ("scaling", po::value<double>()->default_value(0.5), "--end-to-end: epsilon-scaling factor on the blur")
      ("blur-relative", po::value<double>()->default_value(0),
       "--end-to-end: final blur as a fraction of the diameter (> 0 overrides --eps), e.g. 0.01")
      ("pair", po::value<std::string>()->default_value("independent"),
       "--end-to-end: independent (two samples) | deformed (y a known smooth deformation of a sample of x's shape) | "
       "matched (y the same deformation of x itself, b = a: m = n)")
      ("save-points", po::value<std::string>(),
       "--end-to-end: write the generated problem into this folder (made if missing): x.npy, y.npy (float32, n x d "
       "and m x d), a.npy, b.npy (float32 weights, each summing to 1), in the order the solver gets them")
      ("save-potentials", po::value<std::string>(),
       "--end-to-end: write the solve's f.npy, g.npy (float32 potentials, cost units, the points' order) and "
       "solve.json (epsilon, cost scale s, iterations, seconds, marginal error as reported, dual cost) into this "
       "folder (made if missing)");
  add_multiscale_option(options);
  add_overrelaxation_option(options);
  add_backend_options(options);
  const po::variables_map vm = parse(args, options);
  if (vm.count("help")) {
    print_help("flashot bench --n N [--m M] [--d D] [--eps E] [--iters K] [--backend cpu|cuda] [--csv]",
               "Times K fixed-epsilon Sinkhorn iterations on seeded N(0,1) points with random positive weights:\n"
               "one warm-up solve, then the median wall time of --repeats solves. The problem never changes\n"
               "between repeats (the potentials restart at zero).",
               options);
    return 0;
  }
  const auto n = static_cast<std::size_t>(require_positive(vm, "n"));
  const auto m = vm.count("m") ? static_cast<std::size_t>(require_positive(vm, "m")) : n;
  const auto d = static_cast<std::size_t>(require_positive(vm, "d"));
  const double eps = require_positive_double(vm, "eps");
  const auto iters = require_positive(vm, "iters");
  const auto repeats = require_positive(vm, "repeats");
  if (iters > 1'000'000'000) throw UsageError("--iters is too large (got " + std::to_string(iters) + ")");
  BackendOptions backend = backend_options(vm);
  const std::string data = vm["data"].as<std::string>();
  if (data != "normal" && data != "clusters" && data != "mixture" && data != "uniform" && data != "sphere" &&
      data != "torus" && data != "bumpy")
    throw UsageError("--data must be normal, clusters, mixture, uniform, sphere, torus or bumpy (got '" + data + "')");
  if ((data == "sphere" || data == "torus" || data == "bumpy") && d != 3)
    throw UsageError("--data " + data + " is a surface in 3-D: --d must be 3 (got " + std::to_string(d) + ")");
  const std::string pair = vm["pair"].as<std::string>();
  if (pair != "independent" && pair != "deformed" && pair != "matched")
    throw UsageError("--pair must be independent, deformed or matched (got '" + pair + "')");
  if (pair == "matched" && m != n)
    throw UsageError("--pair matched needs --m equal to --n (got " + std::to_string(m) + " and " + std::to_string(n) +
                     ")");
  const Multiscale multiscale = multiscale_option(vm);
  try {
    backend.cuda.kernel = parse_score_kernel(vm["kernel"].as<std::string>());
    const std::string overlap = vm["subtile-overlap"].as<std::string>();
    if (overlap != "on" && overlap != "off" && overlap != "across")
      throw UsageError("--subtile-overlap must be off, on or across (got '" + overlap + "')");
    backend.cuda.subtile_overlap = parse_subtile_overlap(overlap);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const double overrelaxation = overrelaxation_option(vm);  // checked on every path; used with --end-to-end
  if (vm.count("end-to-end")) {
    const double tolerance = require_positive_double(vm, "tolerance");
    const double scaling = require_positive_double(vm, "scaling");
    if (scaling >= 1) throw UsageError("--scaling must be in (0, 1) (got " + format_double(scaling) + ")");
    Scheme scheme;
    try {
      scheme = parse_scheme(vm["scheme"].as<std::string>());
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    EndToEnd e;
    e.eps = eps;
    e.blur_relative = require_non_negative_double(vm, "blur-relative");
    e.tolerance = tolerance;
    e.scaling = scaling;
    e.scheme = scheme;
    e.multiscale = multiscale;
    e.overrelaxation = overrelaxation;
    e.data = data;
    e.pair = pair;
    e.seed = static_cast<std::uint64_t>(vm["seed"].as<long long>());
    const long long budget = require_positive(vm, "max-iterations");
    if (budget > 1'000'000'000)
      throw UsageError("--max-iterations is too large (got " + std::to_string(budget) + ")");
    e.max_iterations = static_cast<int>(budget);
    const long long check_every = require_positive(vm, "check-every");
    if (check_every > 1'000'000'000)
      throw UsageError("--check-every is too large (got " + std::to_string(check_every) + ")");
    e.check_every = static_cast<int>(check_every);
    e.progress = vm.count("progress") > 0;
    if (vm.count("save-points")) {
      e.save_points = vm["save-points"].as<std::string>();
      prepare_output_folder("--save-points", e.save_points);
    }
    if (vm.count("save-potentials")) {
      e.save_potentials = vm["save-potentials"].as<std::string>();
      prepare_output_folder("--save-potentials", e.save_potentials);
    }
    return end_to_end(n, m, d, e, backend);
  }
  for (const char* option : {"save-points", "save-potentials"})
    if (vm.count(option)) throw UsageError(std::string("--") + option + " needs --end-to-end");
  SolveOptions solve;
  try {
    solve.scheme = parse_scheme(vm["scheme"].as<std::string>());
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  solve.epsilon = eps;
  solve.tolerance = 0;
  solve.max_iterations = static_cast<int>(iters);
  solve.diagnostics = false;  // time the iterations alone, as the peers in tests/bench/peers/peers.sh are timed
  solve.multiscale = multiscale;

  const bool clusters = data == "clusters";
  const BenchData generated = bench_data(data, pair, n, m, d, static_cast<std::uint64_t>(vm["seed"].as<long long>()));
  const std::vector<float>& x = generated.x;
  const std::vector<float>& y = generated.y;
  const std::vector<float>& a = generated.a;
  const std::vector<float>& b = generated.b;
  // Building the Problem (copies, the locality order's sort when it is used: docs/engine.md, "Point order") is not
  // part of the timed solves; its time goes to stderr.
  const auto build_start = std::chrono::steady_clock::now();
  Problem problem(PointsView{x, n, d}, PointsView{y, m, d}, a, b, backend);
  const std::chrono::duration<double, std::milli> build_ms = std::chrono::steady_clock::now() - build_start;

  const auto timed_solve = [&] {
    const auto start = std::chrono::steady_clock::now();
    const SolveResult result = problem.solve(solve);
    const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
    if (result.reason == StopReason::kNonFinite) {
      throw std::runtime_error("the solve produced non-finite values, so its timing means nothing: " +
                               result.message);
    }
    if (result.stages.empty() || result.stages.back().iterations != static_cast<int>(iters)) {
      throw std::runtime_error("the final stage ran " + std::to_string(result.iterations) + " iterations instead of " +
                               std::to_string(iters));
    }
    return elapsed.count();
  };
  timed_solve();
  std::vector<double> times;
  for (long long r = 0; r < repeats; ++r) times.push_back(timed_solve());
  const double median_ms = median(times);
  const auto [min_it, max_it] = std::minmax_element(times.begin(), times.end());

  const std::string method = "flashot_" + problem.backend_name();
  const std::string problem_text = (clusters ? "clusters " : "") + std::string("kernel=") +
                                   to_string(backend.cuda.kernel) +
                                   (backend.cuda.subtile_overlap == SubtileOverlap::kOff      ? ""
                                    : backend.cuda.subtile_overlap == SubtileOverlap::kWithinTile ? " subtile-overlap"
                                                                                                  : " subtile-overlap=across") +
                                   " n=" + std::to_string(n) + " m=" + std::to_string(m) + " d=" + std::to_string(d) +
                                   " eps=" + format_double(eps) + " iters=" + std::to_string(iters) + " (" +
                                   to_string(solve.scheme) + ")";
  // 2·n·m exponentials per iteration is the two-LSE scheme's count (docs/design.md §2); a backend doing fewer still
  // gets the same denominator, so the figure compares implementations on equal terms.
  const double exps_per_second = 2.0 * double(n) * double(m) * double(iters) / (median_ms * 1e-3);
  char rate[64];
  std::snprintf(rate, sizeof rate, "%.3g", exps_per_second);
  const std::string summary = method + " on " + problem.device_name() + ": " + problem_text + ": median " +
                              format_ms(median_ms) + " ms over " + std::to_string(repeats) + " solves (min " +
                              format_ms(*min_it) + ", max " + format_ms(*max_it) + "), " +
                              format_ms(median_ms / double(iters)) + " ms/iteration, " + rate +
                              " kernel entries/s (2nm per iteration)";
  // What the engine did over the warm-up and the timed solves (docs/engine.md: the one-pass steps' outcomes, the
  // screened sites' kept tiles), on stderr: which path a timing measured.
  const EngineStatistics st = problem.statistics();
  const auto site = [](const ScreenSiteStatistics& s) {
    return std::to_string(s.kept_tiles) + "/" + std::to_string(s.seen_tiles);
  };
  std::cerr << "problem built in " << format_ms(build_ms.count()) << " ms (point order "
            << to_string(backend.point_order) << ")" << std::endl;
  std::cerr << "statistics over " << (repeats + 1) << " solves: one-pass steps " << st.one_pass_steps
            << " (shifted " << st.shifted_steps << "), skipped " << st.skipped_steps << ", redone "
            << st.redone_steps;
  if (st.steps_with_strays > 0)
    std::cerr << "; " << st.strays << " points redone alone in " << st.steps_with_strays << " steps";
  if (st.screened)
    std::cerr << "; screened tiles kept/seen: rows " << site(st.rows_lse) << ", columns " << site(st.columns_lse)
              << ", sums " << site(st.sums);
  std::cerr << std::endl;
  if (vm.count("csv")) {
    std::cerr << summary << std::endl;
    std::cout << method << ',' << n << ',' << m << ',' << d << ',' << format_double(eps) << ',' << iters << ','
              << format_ms(median_ms) << std::endl;  // --kernel and --data are the caller's to record
  } else {
    std::cout << summary << std::endl;
  }
  return 0;
}

}  // namespace flashot::cli
