// flashot flow: gradient / Newton flow of SOURCE towards TARGET through the entropic OT cost (flow.hpp), and the
// subcommand that reads and writes PLY.
#include "flow.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>

#include <unistd.h>

#include "cli.hpp"
#include "flashot/workflow/checks.hpp"
#include "flashot/workflow/dataset.hpp"
#include "flashot/workflow/output_set.hpp"
#include "flashot/workflow/report.hpp"
#include "flashot/workflow/run_plan.hpp"
#include "flashot/io/ply.hpp"

namespace flashot::workflow {

std::string to_string(FlowLoss loss) { return loss == FlowLoss::kDivergence ? "divergence" : "ot"; }

FlowLoss parse_flow_loss(const std::string& text) {
  if (text == "divergence") return FlowLoss::kDivergence;
  if (text == "ot") return FlowLoss::kTransport;
  throw std::invalid_argument("loss must be divergence or ot (got '" + text + "')");
}

namespace {

double dot(const std::vector<double>& u, const std::vector<double>& v) {
  double s = 0;
  for (std::size_t i = 0; i < u.size(); ++i) s += u[i] * v[i];
  return s;
}

/// One solved transport between two clouds, warm-started from the previous step's potentials.
struct Transport {
  std::vector<float> f, g;

  std::pair<TransportDerivatives, SolveResult> solve(PointsView x, PointsView y, const FlowOptions& o, double epsilon,
                                                     const std::string& what, int step) {
    Problem problem(x, y, {}, {}, o.backend);
    SolveOptions so;
    so.cost = o.cost;
    so.reach = o.reach;
    so.tolerance = o.solve_tolerance;
    so.max_iterations = o.solve_iterations;
    if (f.empty()) {
      // First solve: ε-scaling from the diameter down to the blur — the flow's ε once known (epsilon > 0), else the
      // option's blur, else the engine's default relative to the diameter. Later ones start from the last
      // potentials, which are already close: a fixed ε keeps them.
      if (epsilon > 0) {
        so.blur = std::sqrt(epsilon);
      } else if (o.blur > 0) {
        so.blur = o.blur;
      } else {
        so.blur_relative = kDefaultBlurRelative;
      }
    } else {
      so.epsilon = epsilon;
      so.initial_f = f;
      so.initial_g = g;
    }
    SolveResult r = problem.solve(so);
    if (r.reason == StopReason::kNonFinite)
      throw std::runtime_error("flow step " + std::to_string(step) + ": the " + what + " solve failed: " + r.message);
    f = r.f;
    g = r.g;
    TransportDerivatives d(x, y, {}, {}, r, o.backend);
    return {std::move(d), std::move(r)};
  }
};

}  // namespace

FlowResult run_flow(PointsView source, PointsView target, const FlowOptions& o, const FlowProgress& progress) {
  require(o.steps >= 1, "steps must be ≥ 1", o.steps);
  require(o.step_size > 0 && o.step_size <= 1, "step_size must be in (0, 1]", o.step_size);
  require(o.blur >= 0 && std::isfinite(o.blur), "blur must be ≥ 0 (0 = kDefaultBlurRelative × the diameter)", o.blur);
  require(o.reach >= 0 && std::isfinite(o.reach), "reach must be ≥ 0", o.reach);
  require(o.damping >= 0 && std::isfinite(o.damping), "damping must be ≥ 0", o.damping);
  require(o.newton_iterations >= 1, "newton_iterations must be ≥ 1", o.newton_iterations);
  require(o.newton_tolerance > 0 && o.newton_tolerance < 1, "newton_tolerance must be in (0, 1)", o.newton_tolerance);
  require(o.save_every >= 1, "save_every must be ≥ 1", o.save_every);
  require(o.solve_iterations >= 1, "solve_iterations must be ≥ 1", o.solve_iterations);
  if (source.d != target.d)
    throw std::invalid_argument("source and target must have the same dimension (got " + std::to_string(source.d) +
                                " and " + std::to_string(target.d) + ")");
  const auto start = std::chrono::steady_clock::now();
  const std::size_t n = source.n, d = source.d;
  const double s = o.cost == Cost::kHalfSquaredEuclidean ? 0.5 : 1.0;
  FlowResult result;
  // One ε for every solve of the flow (the self-transports too, or the divergence is not debiased): the first
  // source–target solve sets it, from the blur given or relative to that pair's diameter.
  double epsilon = 0;

  std::vector<float> x(source.data.begin(), source.data.end());
  Transport cross, self_x, self_y;
  double self_y_cost = 0;
  bool self_y_solved = false;
  result.saved_steps.push_back(0);
  result.positions.push_back(x);

  // The loss and its gradient at x; the cross-transport derivatives are kept for Newton's Hessian products.
  const auto evaluate = [&](FlowStep& st) {
    const PointsView xv{x, n, d};
    auto [dxy, rxy] = cross.solve(xv, target, o, epsilon, "source–target", st.step);
    if (epsilon == 0) {
      epsilon = rxy.epsilon;
      result.blur = std::sqrt(epsilon);
    }
    if (o.loss == FlowLoss::kDivergence && !self_y_solved) {
      self_y_cost = self_y.solve(target, target, o, epsilon, "target–target", 0).first.cost();
      self_y_solved = true;
    }
    TransportGradient grad = dxy.gradient();
    st.loss = grad.cost;
    st.sinkhorn_iterations += rxy.iterations;
    st.solves_converged = st.solves_converged && rxy.converged;
    if (o.loss == FlowLoss::kDivergence) {
      auto [dxx, rxx] = self_x.solve(xv, xv, o, epsilon, "source–source", st.step);
      const TransportGradient gxx = dxx.gradient();
      for (std::size_t i = 0; i < grad.x.size(); ++i) grad.x[i] -= 0.5f * (gxx.x[i] + gxx.y[i]);
      st.loss -= 0.5 * gxx.cost + 0.5 * self_y_cost;
      st.sinkhorn_iterations += rxx.iterations;
      st.solves_converged = st.solves_converged && rxx.converged;
    }
    return std::make_pair(std::move(dxy), std::vector<double>(grad.x.begin(), grad.x.end()));
  };

  const double mass = 1.0 / static_cast<double>(n);  // uniform a_i
  const double metric = 2 * s * mass;                 // the leading diagonal of the Hessian, 2s·a_i
  // Backtracking: a step whose loss rises is halved up to kMaxHalvings times. The evaluation at the accepted point
  // is the next step's, so a step that is accepted at once costs nothing extra.
  constexpr int kMaxHalvings = 6;
  FlowStep current;
  auto [dxy, grad] = evaluate(current);
  for (int step = 0; step < o.steps; ++step) {
    FlowStep st = current;
    st.step = step;
    if (step > 0) st.sinkhorn_iterations = 0;  // the start point's solves were counted as the last step's trial
    st.gradient_norm = std::sqrt(dot(grad, grad));
    std::vector<double> dir(grad.size());
    for (std::size_t i = 0; i < grad.size(); ++i) dir[i] = -grad[i] / metric;
    if (o.newton) {
      // Truncated PCG on (H + λ·metric) d = −∇ with the preconditioner metric·I; stop at negative curvature and keep
      // the last direction (the preconditioned gradient if it happens at once).
      std::vector<double> b(grad.size()), sol(grad.size(), 0.0);
      for (std::size_t i = 0; i < grad.size(); ++i) b[i] = -grad[i];
      std::vector<double> res = b, z(grad.size()), p(grad.size());
      for (std::size_t i = 0; i < z.size(); ++i) z[i] = res[i] / metric;
      p = z;
      double rz = dot(res, z);
      const double b_norm = std::sqrt(dot(b, b));
      bool moved = false;
      for (int k = 0; k < o.newton_iterations && b_norm > 0; ++k) {
        const std::vector<float> pf(p.begin(), p.end());
        const HessianProduct hp = dxy.hessian_product(pf, o.hvp_cg);
        st.hvp_cg_iterations += hp.cg.iterations;
        st.hvp_converged = st.hvp_converged && hp.cg.converged;
        std::vector<double> q(p.size());
        for (std::size_t i = 0; i < q.size(); ++i) q[i] = hp.product[i] + o.damping * metric * p[i];
        const double pq = dot(p, q);
        if (!(pq > 0)) break;
        const double alpha = rz / pq;
        for (std::size_t i = 0; i < sol.size(); ++i) {
          sol[i] += alpha * p[i];
          res[i] -= alpha * q[i];
        }
        moved = true;
        ++st.newton_iterations;
        if (std::sqrt(dot(res, res)) <= o.newton_tolerance * b_norm) break;
        for (std::size_t i = 0; i < z.size(); ++i) z[i] = res[i] / metric;
        const double rz_next = dot(res, z);
        const double beta = rz_next / rz;
        rz = rz_next;
        for (std::size_t i = 0; i < p.size(); ++i) p[i] = z[i] + beta * p[i];
      }
      if (moved) dir = sol;
    }
    const std::vector<float> before = x;
    double tau = o.step_size;
    for (int halving = 0;; ++halving) {
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(before[i] + tau * dir[i]);
      FlowStep next;
      next.step = step + 1;
      auto evaluated = evaluate(next);
      st.sinkhorn_iterations += next.sinkhorn_iterations;
      st.solves_converged = st.solves_converged && next.solves_converged;
      if (next.loss <= st.loss || halving == kMaxHalvings) {
        dxy = std::move(evaluated.first);
        grad = std::move(evaluated.second);
        current = next;
        break;
      }
      tau *= 0.5;
    }
    st.step_size = tau;
    for (std::size_t i = 0; i < n; ++i) {
      double moved2 = 0;
      for (std::size_t k = 0; k < d; ++k) moved2 += (x[i * d + k] - before[i * d + k]) * (x[i * d + k] - before[i * d + k]);
      st.displacement = std::max(st.displacement, std::sqrt(moved2));
    }
    result.steps.push_back(st);
    const bool last = step + 1 == o.steps;
    const bool stop = progress && !progress(step + 1, o.steps, current.loss);
    if ((step + 1) % o.save_every == 0 || last || stop) {
      result.saved_steps.push_back(step + 1);
      result.positions.push_back(x);
    }
    if (stop) break;
  }
  result.final_loss = current.loss;
  result.backend = dxy.backend_name();
  result.device = dxy.device_name();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace flashot::workflow

namespace flashot::cli {

int flow_main(const std::vector<std::string>& args) {
  po::options_description options("flow options");
  options.add_options()
      ("help,h", "this help")
      ("output,o", po::value<std::string>()->required(), "OUT.ply: the trajectory (see below)")
      ("steps", po::value<long long>()->default_value(50), "number of flow steps")
      ("step-size", po::value<double>(), "tau in (0,1] (default 0.25; 1 with --newton)")
      ("blur", po::value<double>(), "blur in data units (default 0.05 x diameter of both clouds); epsilon = blur^2")
      ("loss", po::value<std::string>()->default_value("divergence"), "divergence | ot")
      ("reach", po::value<double>()->default_value(0), "unbalanced: reach in data units (0 = balanced)")
      ("half-cost", "cost |x-y|^2/2 instead of |x-y|^2")
      ("newton", "Newton flow: direction from the Hessian by truncated CG over Hessian-vector products")
      ("damping", po::value<double>()->default_value(0.1), "Newton: Levenberg-Marquardt damping lambda >= 0")
      ("newton-iterations", po::value<long long>()->default_value(10), "Newton: outer CG iterations per step")
      ("cg-tolerance", po::value<double>()->default_value(1e-4), "relative residual of each Hessian-vector CG")
      ("cg-max-iterations", po::value<long long>()->default_value(200), "iteration budget of each Hessian-vector CG")
      ("save-every", po::value<long long>()->default_value(1), "keep positions every K steps")
      ("report", po::value<std::string>(), "FILE.json: per-step loss, gradient norm, displacement, iterations")
      ("quiet,q", "no progress on stderr");
  add_backend_options(options);
  po::positional_options_description positional;
  add_ply_pair_options(options, positional);
  const po::variables_map vm = parse(args, options, positional);
  if (vm.count("help")) {
    print_help("flashot flow SOURCE.ply TARGET.ply -o OUT.ply [--steps N] [--step-size T] [--newton]",
               "Moves SOURCE towards TARGET by a gradient flow of the debiased Sinkhorn divergence (--loss ot:\n"
               "of the entropic OT cost): each step solves OT (warm-started from the last step) and moves every\n"
               "point by -T x its gradient / (2 a_i). --newton takes damped Newton steps instead, the direction\n"
               "from Hessian-vector products (implicit differentiation, conjugate gradient).\n"
               "OUT is SOURCE with x, y, z at the final positions and float vertex properties x_step<k>,\n"
               "y_step<k>, z_step<k> for every saved step k (x_step0 is the input).",
               options);
    return 0;
  }
  const PlyPair paths = ply_pair(vm);
  const std::filesystem::path& source_path = paths.source;
  const std::filesystem::path& target_path = paths.target;
  const std::filesystem::path& out_path = paths.output;
  workflow::FlowOptions fo;
  try {
    fo.loss = workflow::parse_flow_loss(vm["loss"].as<std::string>());
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const long long steps = require_positive(vm, "steps");
  if (steps > 1'000'000) throw UsageError("--steps is too large (got " + std::to_string(steps) + ")");
  fo.steps = static_cast<int>(steps);
  fo.newton = vm.count("newton") > 0;
  fo.step_size = fo.newton ? 1.0 : 0.25;
  if (vm.count("step-size")) fo.step_size = require_positive_double(vm, "step-size");
  if (fo.step_size > 1) throw UsageError("--step-size must be in (0, 1] (got " + format_double(fo.step_size) + ")");
  if (vm.count("blur")) fo.blur = require_positive_double(vm, "blur");
  fo.reach = require_non_negative_double(vm, "reach");
  if (vm.count("half-cost")) fo.cost = Cost::kHalfSquaredEuclidean;
  fo.damping = require_non_negative_double(vm, "damping");
  fo.newton_iterations = static_cast<int>(std::min<long long>(require_positive(vm, "newton-iterations"), 100'000));
  fo.hvp_cg.tolerance = require_positive_double(vm, "cg-tolerance");
  if (fo.hvp_cg.tolerance >= 1)
    throw UsageError("--cg-tolerance must be in (0, 1) (got " + format_double(fo.hvp_cg.tolerance) + ")");
  fo.hvp_cg.max_iterations = static_cast<int>(std::min<long long>(require_positive(vm, "cg-max-iterations"), 1'000'000));
  fo.save_every = static_cast<int>(std::min<long long>(require_positive(vm, "save-every"), fo.steps));
  fo.backend = backend_options(vm);
  const bool quiet = vm.count("quiet") > 0;

  workflow::check_pair(source_path, target_path, {});  // PLY headers: a vertex element with x, y, z
  const workflow::PointCloud source = workflow::load_points(source_path, "");
  const workflow::PointCloud target = workflow::load_points(target_path, "");
  const bool terminal = isatty(fileno(stderr));
  const workflow::FlowProgress progress = [&](int step, int total, double loss) {
    if (quiet) return true;
    std::fprintf(stderr, terminal ? "\r\033[Kflow: step %d/%d  loss %.6g" : "flow: step %d/%d  loss %.6g\n", step,
                 total, loss);
    std::fflush(stderr);
    return true;
  };
  const workflow::FlowResult result = workflow::run_flow(source.view(), target.view(), fo, progress);
  if (!quiet && terminal) std::fprintf(stderr, "\r\033[K");

  // The trajectory: SOURCE's own file (every element and property kept), x/y/z at the final positions, one float
  // property triple per saved step.
  io::PlyFile ply = *source.ply;
  io::PlyElement* vertex = ply.find("vertex");
  if (vertex == nullptr) throw std::runtime_error(source_path.string() + " has no vertex element");
  const std::vector<float>& last = result.positions.back();
  static const char* const kAxes[3] = {"x", "y", "z"};
  for (std::size_t k = 0; k < 3; ++k) {
    io::PlyProperty* coordinate = vertex->find(kAxes[k]);
    for (std::size_t r = 0; r < source.n(); ++r) coordinate->values[source.rows[r]] = last[r * 3 + k];
  }
  for (std::size_t f = 0; f < result.saved_steps.size(); ++f)
    for (std::size_t k = 0; k < 3; ++k) {
      io::PlyProperty p;
      p.name = std::string(kAxes[k]) + "_step" + std::to_string(result.saved_steps[f]);
      p.type = io::PlyType::kFloat32;
      p.values.assign(vertex->count, std::numeric_limits<double>::quiet_NaN());
      for (std::size_t r = 0; r < source.n(); ++r) p.values[source.rows[r]] = result.positions[f][r * 3 + k];
      vertex->properties.push_back(std::move(p));
    }
  ply.comments.push_back("flashot flow: " + std::to_string(result.steps.size()) + " steps, loss " +
                         workflow::to_string(fo.loss) + (fo.newton ? ", Newton" : ", gradient") + ", blur " +
                         format_double(result.blur) + ", step size " + format_double(fo.step_size));
  workflow::OutputSet outputs;
  io::write_ply(outputs.stage(out_path), ply);

  if (vm.count("report")) {
    nlohmann::json report;
    report["command"] = "flow";
    report["loss"] = workflow::to_string(fo.loss);
    report["newton"] = fo.newton;
    report["blur"] = result.blur;
    report["step_size"] = fo.step_size;
    report["final_loss"] = result.final_loss;
    report["saved_steps"] = result.saved_steps;
    report["steps"] = nlohmann::json::array();
    for (const workflow::FlowStep& st : result.steps)
      report["steps"].push_back({{"step", st.step}, {"loss", st.loss}, {"gradient_norm", st.gradient_norm},
                                 {"displacement", st.displacement}, {"step_size", st.step_size},
                                 {"sinkhorn_iterations", st.sinkhorn_iterations},
                                 {"solves_converged", st.solves_converged},
                                 {"newton_iterations", st.newton_iterations},
                                 {"hvp_cg_iterations", st.hvp_cg_iterations}, {"hvp_converged", st.hvp_converged}});
    report["source"] = {{"file", source_path.string()}, {"points", source.n()}};
    report["target"] = {{"file", target_path.string()}, {"points", target.n()}};
    report["backend"] = result.backend;
    report["device"] = result.device;
    report["total_seconds"] = result.seconds;
    report["versions"] = workflow::versions_json();
    workflow::write_text_atomically(outputs.stage(vm["report"].as<std::string>()),
                               report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  outputs.commit();
  const double first = result.steps.empty() ? result.final_loss : result.steps.front().loss;
  std::printf("loss %.6g -> %.6g after %zu steps (%s flow, blur %.4g)\n", first, result.final_loss,
              result.steps.size(), fo.newton ? "Newton" : "gradient", result.blur);
  if (!quiet)
    std::fprintf(stderr, "flashot flow: %.3f s on %s; wrote %s\n", result.seconds, result.backend.c_str(),
                 out_path.string().c_str());
  return 0;
}

}  // namespace flashot::cli
