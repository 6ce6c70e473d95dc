// The label-augmented cost (LabelCostProblem) on every backend against a dense fp64 log-domain Sinkhorn on the n×m
// cost C_ij = s‖x_i − y_j‖² + λ·W[l_i, l_j] built as a matrix (it never uses the augmented coordinates): potentials,
// plans' marginals, barycentric images, costs; λ = 0 equal to the plain solve, one class, empty classes, a given
// asymmetric W, unbalanced sides, warm starts, shards, bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "backend_fixture.hpp"
#include "flashot/label_cost.hpp"
#include "problems.hpp"

namespace flashot::test {
namespace {

struct Dense {
  std::vector<double> f, g, plan;  // plan (n × m)
};

/// Alternating log-domain Sinkhorn at fixed ε on the dense cost, until the potentials stop moving.
Dense dense_solve(const std::vector<double>& cost, std::size_t n, std::size_t m, const std::vector<float>& a,
                  const std::vector<float>& b, double eps, double rho_x, double rho_y) {
  Dense r;
  r.f.assign(n, 0.0);
  r.g.assign(m, 0.0);
  const double lx = rho_x > 0 ? 1 / (1 + eps / rho_x) : 1, ly = rho_y > 0 ? 1 / (1 + eps / rho_y) : 1;
  std::vector<double> t(std::max(n, m));
  for (int it = 0; it < 50000; ++it) {
    double change = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double mx = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < m; ++j) mx = std::max(mx, t[j] = std::log(b[j]) + (r.g[j] - cost[i * m + j]) / eps);
      double s = 0;
      for (std::size_t j = 0; j < m; ++j) s += std::exp(t[j] - mx);
      const double f = -lx * eps * (mx + std::log(s));
      change = std::max(change, std::abs(f - r.f[i]));
      r.f[i] = f;
    }
    for (std::size_t j = 0; j < m; ++j) {
      double mx = -std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < n; ++i) mx = std::max(mx, t[i] = std::log(a[i]) + (r.f[i] - cost[i * m + j]) / eps);
      double s = 0;
      for (std::size_t i = 0; i < n; ++i) s += std::exp(t[i] - mx);
      const double g = -ly * eps * (mx + std::log(s));
      change = std::max(change, std::abs(g - r.g[j]));
      r.g[j] = g;
    }
    if (change < 1e-10) break;
  }
  r.plan.resize(n * m);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j)
      r.plan[i * m + j] = a[i] * b[j] * std::exp((r.f[i] + r.g[j] - cost[i * m + j]) / eps);
  return r;
}

std::vector<double> dense_cost(const TestProblem& p, const LabelCost& l, double s) {
  const std::size_t L = l.classes;
  std::vector<double> c(p.n * p.m);
  for (std::size_t i = 0; i < p.n; ++i)
    for (std::size_t j = 0; j < p.m; ++j) {
      double dist = 0;
      for (std::size_t k = 0; k < p.d; ++k) {
        const double diff = static_cast<double>(p.x[i * p.d + k]) - p.y[j * p.d + k];
        dist += diff * diff;
      }
      const std::size_t la = static_cast<std::size_t>(l.source[i]), lb = static_cast<std::size_t>(l.target[j]);
      const double w = l.table.empty() ? (la == lb ? 0.0 : 1.0) : l.table[la * L + lb];
      c[i * p.m + j] = s * dist + l.weight * w;
    }
  return c;
}

class LabelCostTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto b = available_backends();
    if (std::find(b.begin(), b.end(), GetParam()) == b.end()) {
      if (GetParam() == "cuda" && cuda_required())
        FAIL() << "FLASHOT_REQUIRE_CUDA=1 but the CUDA backend is not available (not compiled in, or no device)";
      GTEST_SKIP() << "backend '" << GetParam() << "' is not available here (not compiled in, or no device)";
    }
  }
  BackendOptions options() const { return backend_options(GetParam()); }

  static SolveOptions tight(double eps) {
    SolveOptions o;
    o.epsilon = eps;
    o.tolerance = 2e-5;
    o.check_every = 5;
    o.max_iterations = 5000;
    return o;
  }

  /// Engine against the dense reference: potentials (up to the balanced gauge), marginals, barycentric images,
  /// primal and dual costs.
  void compare(const TestProblem& p, const LabelCost& l, const SolveOptions& o, const std::string& what) {
    LabelCostProblem problem(p.xv(), p.yv(), p.a, p.b, l, options());
    const SolveResult r = problem.solve(o);
    ASSERT_TRUE(r.converged) << what << ": " << r.message;
    const double s = o.cost == Cost::kHalfSquaredEuclidean ? 0.5 : 1.0;
    const double rho_x = std::pow(o.reach_source > 0 ? o.reach_source : o.reach, 2);
    const double rho_y = std::pow(o.reach_target > 0 ? o.reach_target : o.reach, 2);
    const std::vector<double> cost = dense_cost(p, l, s);
    const Dense ref = dense_solve(cost, p.n, p.m, p.a, p.b, r.epsilon, rho_x, rho_y);
    double span = 0;
    for (double v : cost) span = std::max(span, std::abs(v));
    // Balanced: f and g are fixed up to (f + k, g − k).
    double k = 0;
    if (rho_x == 0 && rho_y == 0) {
      for (std::size_t i = 0; i < p.n; ++i) k += (r.f[i] - ref.f[i]) / static_cast<double>(p.n);
    }
    const double ptol = 2e-3 * span;
    for (std::size_t i = 0; i < p.n; ++i) ASSERT_NEAR(r.f[i] - k, ref.f[i], ptol) << what << " f[" << i << "]";
    for (std::size_t j = 0; j < p.m; ++j) ASSERT_NEAR(r.g[j] + k, ref.g[j], ptol) << what << " g[" << j << "]";
    const std::vector<float> rows = problem.row_marginal(r), cols = problem.column_marginal(r);
    double mass = 0;
    for (double v : ref.plan) mass += v;
    for (std::size_t i = 0; i < p.n; ++i) {
      double rr = 0;
      for (std::size_t j = 0; j < p.m; ++j) rr += ref.plan[i * p.m + j];
      ASSERT_NEAR(rows[i], rr, 2e-3 * mass / static_cast<double>(p.n) + 1e-7) << what << " row mass " << i;
    }
    for (std::size_t j = 0; j < p.m; ++j) {
      double cc = 0;
      for (std::size_t i = 0; i < p.n; ++i) cc += ref.plan[i * p.m + j];
      ASSERT_NEAR(cols[j], cc, 2e-3 * mass / static_cast<double>(p.m) + 1e-7) << what << " column mass " << j;
    }
    const std::vector<float> bary = problem.barycentric(r, Side::kSource);
    ASSERT_EQ(bary.size(), p.n * p.d);
    for (std::size_t i = 0; i < p.n; ++i) {
      double rr = 0;
      std::vector<double> t(p.d, 0.0);
      for (std::size_t j = 0; j < p.m; ++j) {
        rr += ref.plan[i * p.m + j];
        for (std::size_t c = 0; c < p.d; ++c) t[c] += ref.plan[i * p.m + j] * p.y[j * p.d + c];
      }
      for (std::size_t c = 0; c < p.d; ++c) ASSERT_NEAR(bary[i * p.d + c], t[c] / rr, 1e-2) << what << " image " << i;
    }
    double primal = 0;
    for (std::size_t e = 0; e < cost.size(); ++e) primal += ref.plan[e] * cost[e];
    EXPECT_NEAR(r.primal_cost, primal, 2e-3 * std::abs(primal) + 1e-6) << what;
    double dual = 0;
    for (std::size_t i = 0; i < p.n; ++i)
      dual += rho_x > 0 ? p.a[i] * rho_x * (1 - std::exp(-ref.f[i] / rho_x)) : p.a[i] * ref.f[i];
    for (std::size_t j = 0; j < p.m; ++j)
      dual += rho_y > 0 ? p.b[j] * rho_y * (1 - std::exp(-ref.g[j] / rho_y)) : p.b[j] * ref.g[j];
    EXPECT_NEAR(r.dual_cost, dual, 2e-3 * std::abs(dual) + 1e-5) << what;
  }
};

LabelCost labels_for(const TestProblem& p, std::size_t classes, std::uint64_t seed, double weight) {
  LabelCost l;
  l.classes = classes;
  l.weight = weight;
  l.source = random_labels(p.n, classes, seed);
  l.target = random_labels(p.m, classes, seed + 1);
  return l;
}

TEST_P(LabelCostTest, DefaultTableMatchesTheDenseReference) {
  const TestProblem p = make_problem({.n = 70, .m = 60, .d = 3, .seed = 2, .random_weights = true});
  for (const Cost cost : {Cost::kSquaredEuclidean, Cost::kHalfSquaredEuclidean}) {
    SolveOptions o = tight(0.1);
    o.cost = cost;
    compare(p, labels_for(p, 4, 11, 0.4), o, GetParam() + " default W " + to_string(cost));
  }
}

TEST_P(LabelCostTest, AsymmetricTableBalancedAndUnbalanced) {
  const TestProblem p = make_problem({.n = 64, .m = 72, .d = 5, .seed = 3, .random_weights = true});
  LabelCost l = labels_for(p, 3, 21, 0.7);
  l.table = {0.0, 1.0, 2.5,  //
             0.3, 0.1, 1.7,  //
             4.0, 0.0, 0.6};
  compare(p, l, tight(0.12), GetParam() + " asymmetric W balanced");
  SolveOptions u = tight(0.12);
  u.reach = 0.7;
  compare(p, l, u, GetParam() + " asymmetric W unbalanced");
  SolveOptions semi = tight(0.12);
  semi.reach_target = 0.5;
  compare(p, l, semi, GetParam() + " asymmetric W semi-unbalanced");
}

TEST_P(LabelCostTest, EmptyClassesAndOneClass) {
  const TestProblem p = make_problem({.n = 50, .m = 55, .d = 2, .seed = 4});
  LabelCost l;
  l.classes = 6;  // classes 4 and 5 appear on no side, class 3 on the source only, class 2 on the target only
  l.weight = 0.5;
  for (std::size_t i = 0; i < p.n; ++i) l.source.push_back(std::int32_t(std::vector<int>{0, 1, 3}[i % 3]));
  for (std::size_t j = 0; j < p.m; ++j) l.target.push_back(std::int32_t(std::vector<int>{0, 1, 2}[j % 3]));
  compare(p, l, tight(0.1), GetParam() + " empty classes, default W");
  l.table.assign(36, 0.0);
  for (std::size_t k = 0; k < 36; ++k) l.table[k] = 0.1 * double((k * 7) % 11);
  compare(p, l, tight(0.1), GetParam() + " empty classes, given W");
  // One class: W = [0] adds nothing, and a constant W = [c] adds the constant λc to every entry.
  LabelCost one = labels_for(p, 1, 5, 2.0);
  compare(p, one, tight(0.1), GetParam() + " one class");
  one.table = {0.75};
  compare(p, one, tight(0.1), GetParam() + " one class, constant W");
}

double largest_relative_difference(const std::vector<float>& u, const std::vector<float>& v) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < u.size(); ++i) {
    diff = std::max(diff, std::abs(double(u[i]) - double(v[i])));
    scale = std::max(scale, std::abs(double(v[i])));
  }
  return diff / std::max(scale, 1e-30);
}

TEST_P(LabelCostTest, ZeroWeightIsThePlainSolve) {
  const TestProblem p = make_problem({.n = 90, .m = 80, .d = 3, .seed = 6});
  const LabelCost l = labels_for(p, 5, 31, 0.0);
  SolveOptions o;
  o.blur_relative = 0.1;
  LabelCostProblem labelled(p.xv(), p.yv(), p.a, p.b, l, options());
  Problem plain(p.xv(), p.yv(), p.a, p.b, options());
  EXPECT_EQ(labelled.augmented_d(), p.d);
  const SolveResult a = labelled.solve(o), b = plain.solve(o);
  EXPECT_EQ(a.epsilon, b.epsilon);
  EXPECT_EQ(a.iterations, b.iterations);
  if (GetParam() == "cpu") {  // one reduction order: the same problem gives the same bits
    EXPECT_EQ(a.f, b.f);
    EXPECT_EQ(a.g, b.g);
    EXPECT_DOUBLE_EQ(a.dual_cost, b.dual_cost);
    return;
  }
  // On CUDA the one-pass sums add the blocks' partials with float atomics, in an order that can differ between two
  // launches; so two Problems of the same points need not agree to the last bit either. What λ = 0 must give is
  // that solve within 10⁻⁵ relative (an fp32 rounding of each of the ≈ 100 additions of a potential's steps); the
  // spread of a second plain Problem is printed beside it (H200: both 5.2·10⁻⁸ in f, docs/benchmarks.md).
  Problem again(p.xv(), p.yv(), p.a, p.b, options());
  const SolveResult c = again.solve(o);
  const double labelled_f = largest_relative_difference(a.f, b.f), labelled_g = largest_relative_difference(a.g, b.g);
  const double plain_f = largest_relative_difference(c.f, b.f), plain_g = largest_relative_difference(c.g, b.g);
  std::cout << "relative differences from the plain solve: labelled f " << labelled_f << ", g " << labelled_g
            << "; a second plain Problem f " << plain_f << ", g " << plain_g << std::endl;
  EXPECT_LE(labelled_f, 1e-5);
  EXPECT_LE(labelled_g, 1e-5);
  EXPECT_NEAR(a.dual_cost, b.dual_cost, 1e-6 * std::abs(b.dual_cost));
}

TEST_P(LabelCostTest, TheLabelTermKeepsMassWithinClasses) {
  // Two classes on both sides; a large λ moves (almost) no mass between them.
  const TestProblem p = make_problem({.n = 80, .m = 80, .d = 2, .seed = 9});
  LabelCost l = labels_for(p, 2, 41, 50.0);
  // Equal class masses on both sides (uniform weights): balanced transport can keep every class to itself.
  for (std::size_t i = 0; i < p.n; ++i) l.source[i] = std::int32_t(i % 2);
  for (std::size_t j = 0; j < p.m; ++j) l.target[j] = std::int32_t(j % 2);
  LabelCostProblem problem(p.xv(), p.yv(), {}, {}, l, options());
  SolveOptions o = tight(0.1);
  const SolveResult r = problem.solve(o);
  const LabelTransfer t = problem.transfer_labels(r, Side::kTarget, l.target, 2);
  for (std::size_t i = 0; i < p.n; ++i) EXPECT_EQ(t.label[i], l.source[i]) << "row " << i;
}

TEST_P(LabelCostTest, WarmStartFromASavedResult) {
  const TestProblem p = make_problem({.n = 60, .m = 70, .d = 3, .seed = 7, .random_weights = true});
  LabelCost l = labels_for(p, 3, 51, 0.6);
  l.table = {0, 2, 1, 1, 0, 3, 0.5, 1, 0};
  for (const double reach : {0.0, 0.8}) {
    SolveOptions o = tight(0.1);
    o.reach = reach;
    LabelCostProblem first(p.xv(), p.yv(), p.a, p.b, l, options());
    const SolveResult r = first.solve(o);
    ASSERT_TRUE(r.converged);
    // A fresh problem (as from a saved solution) warm-started at the true potentials is converged at once.
    LabelCostProblem second(p.xv(), p.yv(), p.a, p.b, l, options());
    SolveOptions w = o;
    w.initial_f = r.f;
    w.initial_g = r.g;
    const SolveResult again = second.solve(w);
    EXPECT_TRUE(again.converged);
    EXPECT_LE(again.iterations, o.check_every) << "reach " << reach;
    for (std::size_t i = 0; i < p.n; ++i) EXPECT_NEAR(again.f[i], r.f[i], 1e-4) << "reach " << reach;
    // And the saved result drives the fresh problem's plan operations.
    const std::vector<float> m1 = first.row_marginal(r), m2 = second.row_marginal(r);
    for (std::size_t i = 0; i < p.n; ++i) EXPECT_NEAR(m1[i], m2[i], 1e-6);
  }
}

TEST_P(LabelCostTest, ShardsGiveTheOneDeviceResult) {
  const TestProblem p = make_problem({.n = 81, .m = 64, .d = 3, .seed = 8});
  LabelCost l = labels_for(p, 3, 61, 0.5);
  l.table = {0, 1, 2, 1, 0, 1, 2, 1, 0.5};
  BackendOptions sharded = options();
  sharded.shards = 3;
  sharded.nccl = false;
  LabelCostProblem one(p.xv(), p.yv(), {}, {}, l, options()), three(p.xv(), p.yv(), {}, {}, l, sharded);
  const SolveResult a = one.solve(tight(0.1)), b = three.solve(tight(0.1));
  for (std::size_t i = 0; i < p.n; ++i) EXPECT_NEAR(a.f[i], b.f[i], 1e-4);
  for (std::size_t j = 0; j < p.m; ++j) EXPECT_NEAR(a.g[j], b.g[j], 1e-4);
}

TEST_P(LabelCostTest, RefusesBadInputNamingIt) {
  const TestProblem p = make_problem({.n = 10, .m = 12, .d = 2, .seed = 1});
  const auto refused = [&](LabelCost l, const std::string& needle) {
    try {
      LabelCostProblem problem(p.xv(), p.yv(), {}, {}, l, options());
      ADD_FAILURE() << "expected a refusal naming " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  LabelCost good = labels_for(p, 3, 1, 1.0);
  LabelCost l = good;
  l.source.pop_back();
  refused(l, "labels.source");
  l = good;
  l.target[4] = 3;
  refused(l, "labels.target[4]");
  l = good;
  l.classes = 0;
  refused(l, "classes");
  l = good;
  l.table.assign(8, 0.0);
  refused(l, "classes² = 9");
  l = good;
  l.table.assign(9, 0.0);
  l.table[5] = std::numeric_limits<double>::infinity();
  refused(l, "labels.table[1, 2]");
  l = good;
  l.weight = -1;
  refused(l, "labels.weight");
}

INSTANTIATE_TEST_SUITE_P(Backends, LabelCostTest, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace flashot::test
