// flashot_hvp_bench: times one Hessian-vector product ∇²_x OT_ε · v (differentiation.hpp) on a seeded problem and
// writes the problem, the potentials, v and the product to a folder, so tests/bench/hvp_peer.py can time
// FlashSinkhorn's hvp_x_sqeuclid_from_potentials on exactly the same inputs at the same CG tolerance and compare.
//
//   flashot_hvp_bench --n 100000 --d 3 --backend cuda --epsilon 0.1 --cg-tolerance 1e-6 --repeat 3 --out DIR
//
// DIR receives x.f32 (n×d), y.f32 (n×d), f.f32, g.f32 (n), v.f32 (n×d), hvp.f32 (n×d) as raw little-endian float32,
// and result.json with the timings. Printed: one line per figure. Engine-only (no Boost, no io): it runs on the GPU
// machine as built for it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashot/differentiation.hpp"
#include "flashot/flashot.hpp"

namespace {

struct Args {
  std::size_t n = 100000;
  std::size_t d = 3;
  std::string backend = "auto";
  double epsilon = 0.1;
  double cg_tolerance = 1e-6;
  int cg_max_iterations = 300;
  int repeat = 3;
  std::filesystem::path out = "hvp_bench_out";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key == "--help" || key == "-h") {
      std::cout << "flashot_hvp_bench [--n N] [--d D] [--backend cpu|cuda|auto] [--epsilon E] [--cg-tolerance T]\n"
                   "                  [--cg-max-iterations K] [--repeat R] [--out DIR]\n";
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument(key + " needs a value");
    const std::string value = argv[++i];
    if (key == "--n") a.n = std::stoul(value);
    else if (key == "--d") a.d = std::stoul(value);
    else if (key == "--backend") a.backend = value;
    else if (key == "--epsilon") a.epsilon = std::stod(value);
    else if (key == "--cg-tolerance") a.cg_tolerance = std::stod(value);
    else if (key == "--cg-max-iterations") a.cg_max_iterations = std::stoi(value);
    else if (key == "--repeat") a.repeat = std::stoi(value);
    else if (key == "--out") a.out = value;
    else throw std::invalid_argument("unknown option " + key);
  }
  if (a.n == 0 || a.d == 0 || a.repeat < 1 || !(a.epsilon > 0))
    throw std::invalid_argument("--n, --d, --repeat must be ≥ 1 and --epsilon > 0");
  return a;
}

/// The docs/design.md §2 benchmark problem: x ~ N(0, I)/√d·0.5, y ~ N(0.2, I)/√d·0.5 (diameter O(1) in every d).
std::vector<float> cloud(std::size_t n, std::size_t d, double shift, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<float> p(n * d);
  const double scale = 0.5 / std::sqrt(static_cast<double>(d));
  for (float& v : p) v = static_cast<float>(scale * g(rng) + shift);
  return p;
}

void write(const std::filesystem::path& path, const std::vector<float>& v) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    if (!out) throw std::runtime_error("cannot write " + tmp.string());
  }
  std::filesystem::rename(tmp, path);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    std::filesystem::create_directories(a.out);
    const std::vector<float> x = cloud(a.n, a.d, 0.0, 1), y = cloud(a.n, a.d, 0.2 / std::sqrt(double(a.d)), 2);
    const std::vector<float> v = cloud(a.n, a.d, 0.0, 3);
    flashot::BackendOptions bo;
    bo.backend = flashot::parse_backend(a.backend);
    const flashot::PointsView xv{x, a.n, a.d}, yv{y, a.n, a.d};

    flashot::Problem problem(xv, yv, {}, {}, bo);
    flashot::SolveOptions so;
    so.blur = std::sqrt(a.epsilon);  // ε-scaling down to ε
    so.tolerance = 1e-4;
    so.max_iterations = 2000;
    auto t0 = std::chrono::steady_clock::now();
    const flashot::SolveResult r = problem.solve(so);
    const double solve_s = seconds_since(t0);

    flashot::CgOptions cg;
    cg.tolerance = a.cg_tolerance;
    cg.max_iterations = a.cg_max_iterations;
    std::vector<double> setup, product, total;
    flashot::HessianProduct hv;
    for (int rep = 0; rep < a.repeat; ++rep) {
      t0 = std::chrono::steady_clock::now();
      flashot::TransportDerivatives td(xv, yv, {}, {}, r, bo);
      const double s = seconds_since(t0);
      const auto t1 = std::chrono::steady_clock::now();
      hv = td.hessian_product(v, cg);
      const double p = seconds_since(t1);
      setup.push_back(s);
      product.push_back(p);
      total.push_back(s + p);
    }
    const auto median = [](std::vector<double> t) {
      std::sort(t.begin(), t.end());
      return t[t.size() / 2];
    };
    write(a.out / "x.f32", x);
    write(a.out / "y.f32", y);
    write(a.out / "f.f32", r.f);
    write(a.out / "g.f32", r.g);
    write(a.out / "v.f32", v);
    write(a.out / "hvp.f32", hv.product);
    char json[2048];
    std::snprintf(json, sizeof json,
                  "{\n  \"n\": %zu, \"d\": %zu, \"epsilon\": %.17g, \"backend\": \"%s\", \"device\": \"%s\",\n"
                  "  \"solve_seconds\": %.6g, \"solve_iterations\": %d, \"solve_converged\": %s, "
                  "\"marginal_error\": %.6g,\n"
                  "  \"cg_tolerance\": %.6g, \"cg_iterations\": %d, \"cg_residual\": %.6g, \"cg_converged\": %s,\n"
                  "  \"setup_seconds\": %.6g, \"product_seconds\": %.6g, \"hvp_seconds\": %.6g, \"repeat\": %d\n}\n",
                  a.n, a.d, r.epsilon, r.backend.c_str(), r.device.c_str(), solve_s, r.iterations,
                  r.converged ? "true" : "false", r.marginal_error, a.cg_tolerance, hv.cg.iterations,
                  hv.cg.residual, hv.cg.converged ? "true" : "false", median(setup), median(product), median(total),
                  a.repeat);
    {
      const std::filesystem::path tmp = a.out / "result.json.tmp";
      std::ofstream(tmp) << json;
      std::filesystem::rename(tmp, a.out / "result.json");
    }
    std::printf("flashot hvp  n=%zu d=%zu eps=%g on %s (%s)\n", a.n, a.d, r.epsilon, r.backend.c_str(),
                r.device.c_str());
    std::printf("  solve            %.4f s  (%d iterations, marginal error %.3g)\n", solve_s, r.iterations,
                r.marginal_error);
    std::printf("  hvp (median)     %.4f s  = setup %.4f s + product %.4f s\n", median(total), median(setup),
                median(product));
    std::printf("  cg               %d iterations, true relative residual %.3g (%s)\n", hv.cg.iterations,
                hv.cg.residual, hv.cg.converged ? "converged" : "NOT converged");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashot_hvp_bench: %s\n", e.what());
    return 1;
  }
}
