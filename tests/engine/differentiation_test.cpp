// Gradients, Hessian-vector products, potential tangents and implicit gradients of OT_ε (differentiation.hpp) on
// every backend, against the fp64 dense derivatives (tests/support/differentiation_reference.hpp) and against
// central finite differences of tightly solved fp64 costs and gradients. Balanced, unbalanced, semi-unbalanced.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <numeric>
#include <string>
#include <tuple>

#include "backend_fixture.hpp"
#include "differentiation_reference.hpp"
#include "flashot/differentiation.hpp"
#include "problems.hpp"

namespace flashot::test {
namespace {

// Named tolerances. The engine solves in fp32 to a marginal error ≤ kSolveTolerance; its potentials then differ from
// the fp64 ones by ~1e-6 in cost units, which the derivatives amplify by up to 1/ε.
constexpr double kSolveTolerance = 1e-5;
constexpr double kCostTol = 1e-5;            // absolute, cost units (costs are O(0.1))
constexpr double kGradientRelTol = 2e-3;     // engine gradient vs fp64, relative to the largest entry
constexpr double kDirectionalRelTol = 2e-3;  // ⟨∇, v⟩ vs a central difference of the cost, relative
constexpr double kHessianRelTol = 5e-3;      // engine H·v vs the dense fp64 H·v, relative to the largest entry
constexpr double kTangentRelTol = 5e-3;      // δf, δg and implicit gradients vs the dense Jacobian
constexpr double kDenseFdRelTol = 1e-5;      // dense fp64 H·v vs central differences of fp64 gradients
constexpr double kEngineFdRelTol = 2e-2;     // engine H·v vs central differences of engine (fp32) gradients
constexpr double kFdStep = 1e-4;             // displacement for fp64 central differences (points of scale 0.5)
constexpr double kEngineFdStep = 5e-3;       // fp32 gradients need a larger step to stay above their rounding
// fp32 plan applications bound the attainable true residual of the implicit system near 1e-7 relative.
constexpr double kCgTolerance = 1e-6;
// The problems are tens of points: one CPU thread, since thread start-up and barriers would dominate.
constexpr int kThreads = 1;

struct Case {
  std::string name;
  ProblemShape shape;
  double epsilon = 0.05;
  Cost cost = Cost::kSquaredEuclidean;
  double reach_source = 0;  // reach (ρ = reach²), 0 = balanced side
  double reach_target = 0;
};

std::vector<Case> cases() {
  return {
      {"balanced_d2", {.n = 30, .m = 40, .d = 2, .seed = 21}},
      {"balanced_random_weights_d3", {.n = 36, .m = 28, .d = 3, .seed = 22, .random_weights = true}, 0.08},
      {"unbalanced_d3", {.n = 32, .m = 26, .d = 3, .seed = 23, .random_weights = true}, 0.05,
       Cost::kSquaredEuclidean, 0.6, 0.6},
      {"semi_unbalanced_half_cost_d3", {.n = 25, .m = 35, .d = 3, .seed = 24}, 0.03, Cost::kHalfSquaredEuclidean,
       0.8, 0},
  };
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

SolveOptions solve_options(const Case& c) {
  SolveOptions o;
  o.epsilon = c.epsilon;
  o.cost = c.cost;
  o.reach_source = c.reach_source;
  o.reach_target = c.reach_target;
  o.tolerance = kSolveTolerance;
  o.max_iterations = 20000;
  return o;
}

DenseTransport dense_of(const TestProblem& p, const Case& c) {
  return dense_transport(p.xv(), p.yv(), p.a, p.b, c.epsilon, c.cost, c.reach_source * c.reach_source,
                         c.reach_target * c.reach_target);
}

DenseDerivatives dense_at(const DenseTransport& t) {
  DensePotentials pot = dense_solve(t);
  EXPECT_TRUE(pot.converged) << "the fp64 reference did not reach its tolerance";
  return {t, std::move(pot.f), std::move(pot.g)};
}

bool balanced(const Case& c) { return c.reach_source == 0 && c.reach_target == 0; }

/// v − mean(v): balanced potentials (and weight gradients) are defined up to a constant.
template <class V>
std::vector<double> centred(const V& v) {
  double mean = 0;
  for (auto x : v) mean += static_cast<double>(x);
  mean /= static_cast<double>(v.size());
  std::vector<double> out;
  for (auto x : v) out.push_back(static_cast<double>(x) - mean);
  return out;
}

template <class A, class B>
double dot(const A& a, const B& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

/// A seeded weight direction proportional to the weights (keeps them ≥ 0 for small steps); with zero_sum, Σδ = 0 in
/// fp64 (keeps a balanced problem's masses equal).
std::vector<double> weight_direction(const std::vector<float>& w, std::uint64_t seed, bool zero_sum) {
  const std::vector<float> v = random_points(w.size(), 1, seed);
  double wv = 0, ws = 0;
  for (std::size_t i = 0; i < w.size(); ++i) wv += static_cast<double>(w[i]) * v[i], ws += w[i];
  const double shift = zero_sum ? wv / ws : 0.0;
  std::vector<double> out(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) out[i] = w[i] * (v[i] - shift);
  return out;
}

class DifferentiationTest : public ::testing::TestWithParam<std::tuple<std::string, Case>> {
 protected:
  struct Solved {
    TestProblem p;
    SolveResult r;
    TransportDerivatives derivatives;
  };
  static Solved solve(const std::string& backend, const Case& c) {
    TestProblem p = make_problem(c.shape);
    Problem problem(p.xv(), p.yv(), p.a, p.b, backend_options(backend, kThreads));
    SolveResult r = problem.solve(solve_options(c));
    EXPECT_TRUE(r.converged) << r.message << " marginal error " << r.marginal_error;
    TransportDerivatives d(p.xv(), p.yv(), p.a, p.b, r, backend_options(backend, kThreads));
    return {std::move(p), std::move(r), std::move(d)};
  }
};

TEST_P(DifferentiationTest, GradientsMatchTheDenseReference) {
  const auto& [backend, c] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const Solved s = solve(backend, c);
  const DenseDerivatives ref = dense_at(dense_of(s.p, c));
  const TransportGradient g = s.derivatives.gradient();
  EXPECT_NEAR(g.cost, ref.cost(), kCostTol);
  const std::vector<double> gx = ref.gradient_x(), gy = ref.gradient_y();
  EXPECT_LE(max_abs_diff(g.x, gx), kGradientRelTol * max_abs(gx));
  EXPECT_LE(max_abs_diff(g.y, gy), kGradientRelTol * max_abs(gy));
  const std::vector<double> ga = ref.gradient_a(), gb = ref.gradient_b();
  if (balanced(c)) {
    // Only the part that zero-sum weight changes see is defined.
    EXPECT_LE(max_abs_diff(centred(g.a), centred(ga)), kGradientRelTol * max_abs(centred(ga)));
    EXPECT_LE(max_abs_diff(centred(g.b), centred(gb)), kGradientRelTol * max_abs(centred(gb)));
  } else {
    EXPECT_LE(max_abs_diff(g.a, ga), kGradientRelTol * max_abs(ga));
    EXPECT_LE(max_abs_diff(g.b, gb), kGradientRelTol * max_abs(gb));
  }
}

TEST_P(DifferentiationTest, GradientsMatchCentralDifferencesOfTheCost) {
  const auto& [backend, c] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const Solved s = solve(backend, c);
  const TransportGradient g = s.derivatives.gradient();
  const DenseTransport base = dense_of(s.p, c);
  const auto cost_at = [](const DenseTransport& t) { return dense_at(t).cost(); };
  const auto check = [&](const std::string& what, std::vector<double> DenseTransport::*field,
                         const std::vector<float>& grad, const std::vector<double>& dir) {
    DenseTransport plus = base, minus = base;
    for (std::size_t i = 0; i < dir.size(); ++i) {
      (plus.*field)[i] += kFdStep * dir[i];
      (minus.*field)[i] -= kFdStep * dir[i];
    }
    const double fd = (cost_at(plus) - cost_at(minus)) / (2 * kFdStep);
    EXPECT_NEAR(dot(grad, dir), fd, kDirectionalRelTol * std::abs(fd) + 1e-9) << what;
  };
  const auto points_direction = [](std::size_t count, std::size_t d, std::uint64_t seed) {
    const std::vector<float> v = random_points(count, d, seed);
    return std::vector<double>(v.begin(), v.end());
  };
  check("x", &DenseTransport::x, g.x, points_direction(s.p.n, s.p.d, 31));
  check("y", &DenseTransport::y, g.y, points_direction(s.p.m, s.p.d, 32));
  check("a", &DenseTransport::a, g.a, weight_direction(s.p.a, 33, balanced(c)));
  check("b", &DenseTransport::b, g.b, weight_direction(s.p.b, 34, balanced(c)));
}

TEST_P(DifferentiationTest, HessianProductMatchesTheDenseHessian) {
  const auto& [backend, c] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const Solved s = solve(backend, c);
  const DenseDerivatives ref = dense_at(dense_of(s.p, c));
  const std::size_t nd = s.p.n * s.p.d;
  const std::vector<double> h = ref.hessian_x();
  CgOptions cg;
  cg.tolerance = kCgTolerance;
  std::vector<std::vector<float>> vs, products;
  for (std::uint64_t seed : {41u, 42u}) {
    const std::vector<float> v = random_points(s.p.n, s.p.d, seed);
    const HessianProduct hv = s.derivatives.hessian_product(v, cg);
    vs.push_back(v);
    products.push_back(hv.product);
    EXPECT_TRUE(hv.cg.converged) << "residual " << hv.cg.residual << " after " << hv.cg.iterations;
    EXPECT_GT(hv.cg.iterations, 0);
    EXPECT_LE(hv.cg.residual, kCgTolerance);
    const std::vector<double> expected = dense_times(h, nd, nd, v);
    EXPECT_LE(max_abs_diff(hv.product, expected), kHessianRelTol * max_abs(expected)) << "seed " << seed;
  }
  // A Hessian is symmetric: ⟨u, H v⟩ = ⟨v, H u⟩ (Newton's CG relies on it).
  const double uhv = dot(vs[0], products[1]), vhu = dot(vs[1], products[0]);
  EXPECT_NEAR(uhv, vhu, kHessianRelTol * std::max(std::abs(uhv), std::abs(vhu)));
}

TEST_P(DifferentiationTest, HessianProductMatchesCentralDifferencesOfEngineGradients) {
  const auto& [backend, c] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const Solved s = solve(backend, c);
  const std::vector<float> v = random_points(s.p.n, s.p.d, 43);
  CgOptions cg;
  cg.tolerance = kCgTolerance;
  const HessianProduct hv = s.derivatives.hessian_product(v, cg);
  const auto gradient_at = [&](double step) {
    std::vector<float> x = s.p.x;
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(x[i] + step * v[i]);
    Problem problem({x, s.p.n, s.p.d}, s.p.yv(), s.p.a, s.p.b, backend_options(backend, kThreads));
    SolveOptions o = solve_options(c);
    o.tolerance = 1e-6;
    o.initial_f = s.r.f;
    o.initial_g = s.r.g;
    const SolveResult r = problem.solve(o);
    return TransportDerivatives({x, s.p.n, s.p.d}, s.p.yv(), s.p.a, s.p.b, r, backend_options(backend, kThreads))
        .gradient()
        .x;
  };
  const std::vector<float> plus = gradient_at(kEngineFdStep), minus = gradient_at(-kEngineFdStep);
  std::vector<double> fd(plus.size());
  for (std::size_t i = 0; i < fd.size(); ++i) fd[i] = (static_cast<double>(plus[i]) - minus[i]) / (2 * kEngineFdStep);
  EXPECT_LE(max_abs_diff(hv.product, fd), kEngineFdRelTol * max_abs(fd));
}

TEST_P(DifferentiationTest, PotentialTangentAndImplicitGradientMatchTheDenseJacobian) {
  const auto& [backend, c] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const Solved s = solve(backend, c);
  const DenseDerivatives ref = dense_at(dense_of(s.p, c));
  const std::size_t n = s.p.n, m = s.p.m, nd = n * s.p.d;
  const std::vector<double> jac = ref.potential_jacobian();  // (n+m) × nd
  CgOptions cg;
  cg.tolerance = kCgTolerance;

  const std::vector<float> v = random_points(n, s.p.d, 51);
  const PotentialTangent t = s.derivatives.potential_tangent(v, cg);
  EXPECT_TRUE(t.cg.converged);
  std::vector<double> expected = dense_times(jac, n + m, nd, v);
  std::vector<double> got(t.f.begin(), t.f.end());
  got.insert(got.end(), t.g.begin(), t.g.end());
  if (balanced(c)) {
    // Move both representatives to Σδg = 0 along the null direction (−k, +k).
    for (std::vector<double>* w : {&expected, &got}) {
      double k = 0;
      for (std::size_t j = 0; j < m; ++j) k += (*w)[n + j];
      k /= static_cast<double>(m);
      for (std::size_t i = 0; i < n; ++i) (*w)[i] += k;
      for (std::size_t j = 0; j < m; ++j) (*w)[n + j] -= k;
    }
  }
  EXPECT_LE(max_abs_diff(got, expected), kTangentRelTol * max_abs(expected));

  // ∇_x ⟨df, f⟩ + ⟨dg, g⟩ = Jᵀ (df, dg); balanced losses must see f and g through f ⊕ g only (Σdf = Σdg).
  std::vector<float> df = random_points(n, 1, 52), dg = random_points(m, 1, 53);
  if (balanced(c)) {
    const double diff = (std::accumulate(df.begin(), df.end(), 0.0) - std::accumulate(dg.begin(), dg.end(), 0.0));
    for (float& x : dg) x = static_cast<float>(x + diff / static_cast<double>(m));
  }
  const ImplicitGradient ig = s.derivatives.implicit_gradient(df, dg, cg);
  EXPECT_TRUE(ig.cg.converged);
  std::vector<double> jt(nd, 0.0);
  for (std::size_t q = 0; q < n + m; ++q)
    for (std::size_t u = 0; u < nd; ++u) jt[u] += jac[q * nd + u] * (q < n ? df[q] : dg[q - n]);
  EXPECT_LE(max_abs_diff(ig.x, jt), kTangentRelTol * max_abs(jt));
}

TEST_P(DifferentiationTest, ConjugateGradientReportsItsBudgetAndResidual) {
  const auto& [backend, c] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const Solved s = solve(backend, c);
  const std::vector<float> v = random_points(s.p.n, s.p.d, 61);
  CgOptions tight;
  tight.tolerance = kCgTolerance;
  const HessianProduct full = s.derivatives.hessian_product(v, tight);
  ASSERT_TRUE(full.cg.converged);
  ASSERT_GT(full.cg.iterations, 2);
  CgOptions short_budget;
  short_budget.tolerance = kCgTolerance;
  short_budget.max_iterations = 2;
  const HessianProduct cut = s.derivatives.hessian_product(v, short_budget);
  EXPECT_FALSE(cut.cg.converged);
  EXPECT_EQ(cut.cg.iterations, 2);
  EXPECT_GT(cut.cg.residual, short_budget.tolerance);
  EXPECT_GT(cut.cg.initial_residual, 0);
  // A cut-short solve gives a different (worse) product than the converged one.
  EXPECT_GT(max_abs_diff(cut.product, full.product), 1e-6 * max_abs(full.product));
}

TEST_P(DifferentiationTest, DivergenceGradientMatchesCentralDifferences) {
  const auto& [backend, c] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const TestProblem p = make_problem(c.shape);
  const DivergenceResult solves = sinkhorn_divergence(p.xv(), p.yv(), p.a, p.b, solve_options(c),
                                                      backend_options(backend, kThreads));
  const DivergenceGradient g = sinkhorn_divergence_gradient(p.xv(), p.yv(), p.a, p.b, solves,
                                                            backend_options(backend, kThreads));
  const double rho_x = c.reach_source * c.reach_source, rho_y = c.reach_target * c.reach_target;
  // S = OT(x,y) − ½OT(x,x) − ½OT(y,y), every transport with the same per-side ρ (as flashot::sinkhorn_divergence).
  const auto divergence = [&](const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& a,
                              const std::vector<float>& b) {
    const PointsView xv{x, p.n, p.d}, yv{y, p.m, p.d};
    return dense_at(dense_transport(xv, yv, a, b, c.epsilon, c.cost, rho_x, rho_y)).cost() -
           0.5 * dense_at(dense_transport(xv, xv, a, a, c.epsilon, c.cost, rho_x, rho_y)).cost() -
           0.5 * dense_at(dense_transport(yv, yv, b, b, c.epsilon, c.cost, rho_x, rho_y)).cost();
  };
  EXPECT_NEAR(g.divergence, divergence(p.x, p.y, p.a, p.b), kCostTol);
  const std::vector<float> dir = random_points(p.n, p.d, 81);
  const auto moved = [&](double step) {
    std::vector<float> x = p.x;
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(x[i] + step * dir[i]);
    return x;
  };
  // fp32 coordinates: the step must be large against their rounding (1e-7 relative).
  constexpr double kStep = 1e-3;
  const std::vector<float> xp = moved(kStep), xm = moved(-kStep);
  double actual = 0;
  for (std::size_t i = 0; i < dir.size(); ++i) actual += (static_cast<double>(xp[i]) - xm[i]) * g.x[i];
  const double fd = divergence(xp, p.y, p.a, p.b) - divergence(xm, p.y, p.a, p.b);
  EXPECT_NEAR(actual, fd, kDirectionalRelTol * std::abs(fd) + 1e-9);
  // At x = y, a = b the divergence is 0 and stationary.
  const DivergenceResult same = sinkhorn_divergence(p.xv(), p.xv(), p.a, p.a, solve_options(c),
                                                    backend_options(backend, kThreads));
  const DivergenceGradient g0 = sinkhorn_divergence_gradient(p.xv(), p.xv(), p.a, p.a, same,
                                                             backend_options(backend, kThreads));
  EXPECT_NEAR(g0.divergence, 0.0, kCostTol);
  EXPECT_LE(max_abs(g0.x), kGradientRelTol * max_abs(g.x));
}

TEST_P(DifferentiationTest, RejectsBadInputsNamingThem) {
  const auto& [backend, c] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const Solved s = solve(backend, c);
  const auto message = [](auto&& call) {
    try {
      call();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  const std::vector<float> short_v(s.p.n * s.p.d - 1, 0.0f);
  EXPECT_NE(message([&] { (void)s.derivatives.hessian_product(short_v); }).find("v must hold n·d"), std::string::npos);
  CgOptions bad;
  bad.tolerance = 0;
  const std::vector<float> v(s.p.n * s.p.d, 1.0f);
  EXPECT_NE(message([&] { (void)s.derivatives.hessian_product(v, bad); }).find("cg.tolerance must be in (0, 1) (got 0)"),
            std::string::npos);
  SolveResult wrong = s.r;
  wrong.g.pop_back();
  EXPECT_NE(message([&] { TransportDerivatives(s.p.xv(), s.p.yv(), s.p.a, s.p.b, wrong); }).find("solution must come"),
            std::string::npos);
  SolveResult broken = s.r;
  broken.f[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(message([&] { TransportDerivatives(s.p.xv(), s.p.yv(), s.p.a, s.p.b, broken); }).find("solution.f[3]"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Backends, DifferentiationTest,
                         ::testing::Combine(::testing::ValuesIn(backends_under_test()), ::testing::ValuesIn(cases())),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param).name; });

// The dense reference itself, against central differences of tightly solved fp64 gradients (no engine involved).
class DenseReferenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(DenseReferenceTest, DenseHessianMatchesCentralDifferencesOfGradients) {
  const Case& c = GetParam();
  const TestProblem p = make_problem(c.shape);
  const DenseTransport base = dense_of(p, c);
  const std::size_t nd = p.n * p.d;
  const std::vector<double> h = dense_at(base).hessian_x();
  const std::vector<float> v = random_points(p.n, p.d, 71);
  const auto gradient_at = [&](double step) {
    DenseTransport t = base;
    for (std::size_t i = 0; i < nd; ++i) t.x[i] += step * v[i];
    return dense_at(t).gradient_x();
  };
  const std::vector<double> plus = gradient_at(kFdStep), minus = gradient_at(-kFdStep);
  std::vector<double> fd(nd);
  for (std::size_t i = 0; i < nd; ++i) fd[i] = (plus[i] - minus[i]) / (2 * kFdStep);
  EXPECT_LE(max_abs_diff(dense_times(h, nd, nd, v), fd), kDenseFdRelTol * max_abs(fd));
}

INSTANTIATE_TEST_SUITE_P(Cases, DenseReferenceTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace flashot::test
