// How well the multiscale solver's certified lists prune (docs/multiscale.md, "How well the lists prune"): solves
// a seeded pair with multiscale on, prints every stage (ε, blur, kept fraction, iterations), the leaf-block radii,
// and, for the final potentials, the kept fraction the bound lists against the fraction an exact check needs (every
// entry of the block pair evaluated, on a sample of row blocks): the bound's slack. Prints figures; never a test.
//
//   flashot_multiscale_prune_bench N D DATA [BLUR_RELATIVE] [TOLERANCE] [ROW_BLOCK_SAMPLE] [DENSE_FRACTION]
//                                  [MAX_ITERATIONS] [DENSE_TOO] [SCHEME] [STAGE_ITERATIONS]
// DENSE_TOO = 1 also solves dense at the same ε and tolerance and prints both costs and times.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "flashot/flashot.hpp"
#include "flashot/synthetic.hpp"
#include "multiscale_pattern.hpp"
#include "multiscale_tree.hpp"

using namespace flashot;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s N D DATA [BLUR_RELATIVE=0.01] [TOLERANCE=1e-2] [ROW_BLOCKS=40] [DENSE_FRACTION=0.5]\n"
                 "       [MAX_ITERATIONS=5000] [DENSE_TOO=0] [SCHEME=symmetric] [STAGE_ITERATIONS=1] [OVERRELAXATION=0]\n",
                 argv[0]);
    return 2;
  }
  const std::size_t n = std::stoul(argv[1]), d = std::stoul(argv[2]);
  const synthetic::Shape shape = synthetic::parse_shape(argv[3]);
  const double blur_relative = argc > 4 ? std::stod(argv[4]) : 0.01;
  const double tolerance = argc > 5 ? std::stod(argv[5]) : 1e-2;
  const std::size_t sample_blocks = argc > 6 ? std::stoul(argv[6]) : 40;
  const double dense_fraction = argc > 7 ? std::stod(argv[7]) : 0.5;
  const int max_iterations = argc > 8 ? std::stoi(argv[8]) : 5000;
  const bool dense_too = argc > 9 && std::string(argv[9]) == "1";
  const Scheme scheme = argc > 10 ? parse_scheme(argv[10]) : Scheme::kSymmetric;
  const int stage_iterations = argc > 11 ? std::stoi(argv[11]) : 1;
  const double overrelaxation = argc > 12 ? std::stod(argv[12]) : kOverrelaxationAuto;  // 1: off, 0: auto
  // The pair of `flashot bench --pair deformed`: y a known deformation of a second sample of x's shape.
  const std::vector<float> x = synthetic::generate(shape, n, d, 0, 0, 0);
  const std::vector<float> y = synthetic::deform(synthetic::generate(shape, n, d, 0, 0, 1), d, 2);
  BackendOptions bo;
  bo.backend = BackendKind::kCpu;
  Problem problem({x, n, d}, {y, n, d}, {}, {}, bo);
  SolveOptions o;
  o.blur_relative = blur_relative;
  o.tolerance = tolerance;
  o.max_iterations = max_iterations;
  o.scheme = scheme;
  o.stage_iterations = stage_iterations;
  o.overrelaxation = overrelaxation;
  o.multiscale = Multiscale::kOn;
  o.multiscale_dense_fraction = dense_fraction;
  const auto t0 = std::chrono::steady_clock::now();
  const SolveResult r = problem.solve(o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const MultiscaleReport& ms = r.multiscale;
  std::printf("n = m = %zu, d = %zu, %s, diameter %.4g, final blur %.4g (eps %.4g), %zu x %zu blocks, coarse %zu x %zu\n",
              n, d, argv[3], r.diameter, std::sqrt(r.epsilon), r.epsilon, ms.row_blocks, ms.column_blocks,
              ms.coarse_rows, ms.coarse_columns);
  std::printf("%s scheme, overrelaxation option %g, final omega %.3f\n", scheme == Scheme::kAlternating ? "alternating" : "symmetric",
              overrelaxation, r.overrelaxation);
  std::printf("%s: %d iterations, %.2f s (hierarchy %.2f s, lists %.2f s), marginal error %.3g, certified %d\n",
              r.message.c_str(), r.iterations, seconds, ms.hierarchy_seconds, ms.pattern_seconds, r.marginal_error,
              ms.certified ? 1 : 0);
  std::printf("stage  eps        blur/diam  coarse dense iters  kept_pairs/total        kept_fraction rechecks redone rise/eps\n");
  for (std::size_t k = 0; k < ms.stages.size(); ++k) {
    const MultiscaleStage& s = ms.stages[k];
    std::printf("%5zu  %-9.3g  %-9.4f  %-6d %-5d %-6d %10llu/%-12llu %-13.4g %-8d %-6d %.3g\n", k, s.epsilon,
                std::sqrt(s.epsilon) / r.diameter, s.coarse ? 1 : 0, s.dense ? 1 : 0, s.iterations, s.kept_pairs,
                s.total_pairs, s.kept_fraction, s.rechecks, s.redone, s.largest_rise);
  }
  std::printf("dual cost %.10g, primal cost %.10g\n", r.dual_cost, r.primal_cost);
  std::printf("checks (iteration: marginal error, omega):");
  for (const MarginalCheck& c : r.checks) std::printf(" %d: %.3g %.3f", c.iteration, c.error, c.overrelaxation);
  std::printf("\n");
  if (dense_too) {
    o.multiscale = Multiscale::kOff;
    const auto td = std::chrono::steady_clock::now();
    const SolveResult rd = problem.solve(o);
    const double dense_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - td).count();
    std::printf("dense: %s, %d iterations, %.2f s (%.4g s per iteration; multiscale %.4g), dual cost %.10g, primal "
                "cost %.10g; relative differences dual %.3g, primal %.3g\n",
                rd.message.c_str(), rd.iterations, dense_s, dense_s / rd.iterations, seconds / r.iterations,
                rd.dual_cost, rd.primal_cost, std::abs(r.dual_cost - rd.dual_cost) / std::abs(rd.dual_cost),
                std::abs(r.primal_cost - rd.primal_cost) / std::abs(rd.primal_cost));
  }

  // The bound against the exact need, on the final potentials (own trees, same block size).
  const std::vector<float> a(n, 1.0f / static_cast<float>(n));
  const auto tx = detail::build_cluster_tree({x, n, d}, a, detail::kBlockSize, 7);
  const auto ty = detail::build_cluster_tree({y, n, d}, a, detail::kBlockSize, 8);
  for (const auto* t : {&tx, &ty}) {
    const auto& rad = t->radius[t->height];
    double mean = 0, big = 0;
    for (double v : rad) mean += v, big = std::max(big, v);
    std::printf("%s leaf-block radius: mean %.4g, max %.4g (%.3g / %.3g of the final blur)\n",
                t == &tx ? "x" : "y", mean / rad.size(), big, mean / rad.size() / std::sqrt(r.epsilon),
                big / std::sqrt(r.epsilon));
  }
  const auto xp = detail::permute_rows(x, d, tx.order), yp = detail::permute_rows(y, d, ty.order);
  std::vector<float> fp(n), gp(n);
  for (std::size_t p = 0; p < n; ++p) fp[p] = r.f[tx.order[p]], gp[p] = r.g[ty.order[p]];
  detail::PatternRequest q;
  q.epsilon = r.epsilon;
  q.cost_scale = 1;
  q.truncation = r.multiscale.truncation;
  q.mass = 1;
  q.max_pairs = tx.blocks * ty.blocks;
  const auto tb = std::chrono::steady_clock::now();
  const detail::PatternResult pr = detail::certified_pattern(tx, ty, xp, yp, fp, gp, q);
  const double bound_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - tb).count();
  const double threshold = -r.epsilon * r.multiscale.truncation;
  const std::size_t stride = std::max<std::size_t>(1, tx.blocks / sample_blocks);
  std::size_t listed = 0, needed = 0, rows = 0, missed = 0;
  for (std::size_t rb = 0; rb < tx.blocks; rb += stride, ++rows) {
    std::vector<char> in(ty.blocks, 0);
    for (const auto& range : pr.pattern->row_list(rb))
      for (int c = range.begin; c < range.end; ++c) in[c] = 1;
    const std::size_t i0 = rb * detail::kBlockSize, i1 = std::min(n, i0 + detail::kBlockSize);
#pragma omp parallel for schedule(dynamic) reduction(+ : listed, needed, missed)
    for (std::size_t cb = 0; cb < ty.blocks; ++cb) {
      const std::size_t j0 = cb * detail::kBlockSize, j1 = std::min(n, j0 + detail::kBlockSize);
      double best = -1e300;
      for (std::size_t i = i0; i < i1; ++i)
        for (std::size_t j = j0; j < j1; ++j) {
          double c2 = 0;
          for (std::size_t c = 0; c < d; ++c) {
            const double u = double{xp[i * d + c]} - yp[j * d + c];
            c2 += u * u;
          }
          best = std::max(best, double{fp[i]} + gp[j] - c2);
        }
      listed += in[cb];
      needed += best > threshold;
      missed += best > threshold && !in[cb];
    }
  }
  std::printf("final potentials: bound lists %.4g of the block pairs (%.2f s); on %zu sampled row blocks the bound "
              "lists %.4g, the exact check needs %.4g (slack x%.2f), %zu needed pairs unlisted\n",
              pr.kept_fraction, bound_s, rows, double(listed) / (rows * ty.blocks), double(needed) / (rows * ty.blocks),
              needed ? double(listed) / needed : 0.0, missed);
  return missed == 0 ? 0 : 1;
}
