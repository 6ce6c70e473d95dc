// Plan application (Backend::apply) and the fused bilinear application (Backend::apply_bilinear) on every backend
// against the fp64 dense plan, over the dimensions that select the CUDA kernels (d = 3: fp32 small-d kernels;
// 16 ≤ d ≤ 128: tensor cores, including the padded d = 50 and d = 100), value widths from one column to several
// 128-column chunks, both sides, normalized or not, with zero weights on both sides.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "../../engine/src/backend.hpp"
#include "backend_fixture.hpp"
#include "problems.hpp"
#include "reference.hpp"

namespace flashot::test {
namespace {

constexpr double kPlanRelTol = 1e-4;  // fp32-class plan applications, relative to the largest entry
// Single fp16 / bf16 scores (Precision::kTf32 / kBf16) at a temperature where their rounding moves the weights by
// well under a percent; a wrong kernel is off by the size of the entries.
constexpr double kCoarsePrecisionRelTol = 1e-2;

/// A seeded problem with zero weights on both sides, both clouds shifted by the same vector so that the source is
/// centred (as Problem hands them to a backend), and potentials after some Sinkhorn updates on `backend`.
struct AppliedProblem {
  TestProblem p;
  std::unique_ptr<detail::Backend> backend;
  detail::PlanParams params;
  std::vector<double> f, g;
};

AppliedProblem make_setup(const std::string& backend, std::size_t d, Precision precision = Precision::kDefault,
                 double epsilon_per_dim = 0.05) {
  AppliedProblem s;
  s.p = make_problem({.n = 300, .m = 250, .d = d, .seed = 300 + d, .random_weights = true, .zero_fraction = 0.1});
  for (std::size_t k = 0; k < d; ++k) {
    double mean = 0;
    for (std::size_t i = 0; i < s.p.n; ++i) mean += s.p.x[i * d + k];
    mean /= double(s.p.n);
    for (std::size_t i = 0; i < s.p.n; ++i) s.p.x[i * d + k] -= static_cast<float>(mean);
    for (std::size_t j = 0; j < s.p.m; ++j) s.p.y[j * d + k] -= static_cast<float>(mean);
  }
  // The cost grows with d: ε in proportion keeps the plan neither a permutation nor uniform.
  const double eps = epsilon_per_dim * double(d);
  BackendOptions options = backend_options(backend, 1);
  options.precision = precision;
  s.backend = detail::make_backend(options, detail::ProblemData{s.p.xv(), s.p.yv(), s.p.a, s.p.b});
  detail::IterationParams it;
  it.epsilon = eps;
  it.scheme = Scheme::kAlternating;
  EXPECT_TRUE(s.backend->iterate(it, 20));
  std::vector<float> f(s.p.n), g(s.p.m);
  s.backend->get_potentials(f, g);
  s.f.assign(f.begin(), f.end());
  s.g.assign(g.begin(), g.end());
  s.params = {eps, 1.0};
  return s;
}

ReferencePlan reference_plan(const AppliedProblem& s) {
  return ReferencePlan(s.p.xv(), s.p.yv(), s.p.a, s.p.b, s.f, s.g, s.params.epsilon, Cost::kSquaredEuclidean);
}

/// The dense P·V (source) or Pᵀ·V (target), divided by the row marginals when normalized; rows of zero marginal
/// (zero weight) are left out of the comparison when normalized (0/0 in the reference), through `keep`.
std::vector<double> dense_apply(const ReferencePlan& plan, Side rows, const std::vector<float>& v, std::size_t k,
                                bool normalized, std::vector<bool>& keep) {
  std::vector<double> out = rows == Side::kSource ? plan.apply(v, k) : plan.apply_transpose(v, k);
  const std::vector<double> mass = rows == Side::kSource ? plan.row_marginal() : plan.column_marginal();
  keep.assign(mass.size(), true);
  if (!normalized) return out;
  for (std::size_t i = 0; i < mass.size(); ++i) {
    keep[i] = mass[i] > 0;
    for (std::size_t q = 0; q < k; ++q) out[i * k + q] = keep[i] ? out[i * k + q] / mass[i] : 0.0;
  }
  return out;
}

/// Largest |got − want| over the kept rows, relative to the largest kept |want|.
double kept_rel_diff(const std::vector<float>& got, const std::vector<double>& want, const std::vector<bool>& keep,
                     std::size_t k) {
  double diff = 0, top = 0;
  for (std::size_t i = 0; i < keep.size(); ++i) {
    if (!keep[i]) continue;
    for (std::size_t q = 0; q < k; ++q) {
      diff = std::max(diff, std::abs(double(got[i * k + q]) - want[i * k + q]));
      top = std::max(top, std::abs(want[i * k + q]));
    }
  }
  return diff / std::max(top, 1e-300);
}

/// Σ P_ij ⟨u_i, w_j⟩ v_j (source rows) or Σ_i P_ij ⟨u_j, w_i⟩ v_i (target rows) from the dense plan.
std::vector<double> dense_bilinear(const ReferencePlan& plan, Side rows, const std::vector<float>& u,
                                   const std::vector<float>& w, std::size_t e, const std::vector<float>& v,
                                   std::size_t k) {
  const bool source = rows == Side::kSource;
  const std::size_t nr = source ? plan.n() : plan.m(), nc = source ? plan.m() : plan.n();
  std::vector<double> out(nr * k, 0.0);
  for (std::size_t i = 0; i < nr; ++i)
    for (std::size_t j = 0; j < nc; ++j) {
      const double pij = source ? plan.at(i, j) : plan.at(j, i);
      if (pij == 0) continue;
      double uw = 0;
      for (std::size_t c = 0; c < e; ++c) uw += static_cast<double>(u[i * e + c]) * w[j * e + c];
      for (std::size_t q = 0; q < k; ++q) out[i * k + q] += pij * uw * v[j * k + q];
    }
  return out;
}

std::string side_name(Side s) { return s == Side::kSource ? "source" : "target"; }

class PlanApplicationTest : public ::testing::TestWithParam<std::tuple<std::string, std::size_t>> {};

TEST_P(PlanApplicationTest, ApplyMatchesTheDensePlanForEveryWidthSideAndNormalization) {
  const auto [backend, d] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const AppliedProblem s = make_setup(backend, d);
  const ReferencePlan plan = reference_plan(s);
  for (std::size_t k : {1, 7, 64, 300})
    for (Side rows : {Side::kSource, Side::kTarget})
      for (bool normalized : {false, true}) {
        const std::size_t nr = rows == Side::kSource ? s.p.n : s.p.m, nc = rows == Side::kSource ? s.p.m : s.p.n;
        const std::vector<float> v = random_points(nc, k, 400 + k);
        std::vector<float> out(nr * k);
        s.backend->apply(s.params, rows, v, k, normalized, out);
        std::vector<bool> keep;
        const std::vector<double> want = dense_apply(plan, rows, v, k, normalized, keep);
        EXPECT_LE(kept_rel_diff(out, want, keep, k), kPlanRelTol)
            << "k = " << k << ", rows = " << side_name(rows) << (normalized ? ", normalized" : "");
      }
}

TEST_P(PlanApplicationTest, BilinearMatchesTheDensePlanOnBothSides) {
  const auto [backend, d] = GetParam();
  FLASHOT_REQUIRE_BACKEND(backend);
  const AppliedProblem s = make_setup(backend, d);
  const ReferencePlan plan = reference_plan(s);
  for (Side rows : {Side::kSource, Side::kTarget}) {
    const bool source = rows == Side::kSource;
    const std::size_t nr = source ? s.p.n : s.p.m, nc = source ? s.p.m : s.p.n;
    // The Hessian's call (engine/src/differentiation.cpp): w = v = the other side's points, e = k = d.
    const std::vector<float>& other = source ? s.p.y : s.p.x;
    const std::vector<float> u = random_points(nr, d, 500);
    std::vector<float> moment(nr * d);
    s.backend->apply_bilinear(s.params, rows, u, other, d, other, d, moment);
    const std::vector<double> want_moment = dense_bilinear(plan, rows, u, other, d, other, d);
    EXPECT_LE(max_abs_diff(moment, want_moment), kPlanRelTol * max_abs(want_moment)) << side_name(rows);
    // General shapes: e ≠ k, w ≠ v, one column and several value chunks.
    for (const auto& [e, k] : {std::pair<std::size_t, std::size_t>{d, 1}, {16, 7}, {d, 300}}) {
      const std::vector<float> ue = random_points(nr, e, 501 + e), we = random_points(nc, e, 502 + e);
      const std::vector<float> v = random_points(nc, k, 503 + k);
      std::vector<float> out(nr * k);
      s.backend->apply_bilinear(s.params, rows, ue, we, e, v, k, out);
      const std::vector<double> want = dense_bilinear(plan, rows, ue, we, e, v, k);
      EXPECT_LE(max_abs_diff(out, want), kPlanRelTol * max_abs(want))
          << side_name(rows) << ", e = " << e << ", k = " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PlanApplicationTest,
                         ::testing::Combine(::testing::ValuesIn(backends_under_test()),
                                            ::testing::Values<std::size_t>(3, 16, 50, 64, 100)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_d" + std::to_string(std::get<1>(info.param));
                         });

TEST(CudaPlanApplication, CoarserTensorCorePrecisionsApplyThePlanOfTheirOwnPotentials) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  for (std::size_t d : {16, 64})
    for (Precision precision : {Precision::kTf32, Precision::kBf16}) {
      const AppliedProblem s = make_setup("cuda", d, precision, 0.15);
      const ReferencePlan plan = reference_plan(s);
      const std::size_t k = 70;
      const std::vector<float> v = random_points(s.p.m, k, 600);
      std::vector<float> out(s.p.n * k);
      s.backend->apply(s.params, Side::kSource, v, k, true, out);
      std::vector<bool> keep;
      const std::vector<double> want = dense_apply(plan, Side::kSource, v, k, true, keep);
      EXPECT_LE(kept_rel_diff(out, want, keep, k), kCoarsePrecisionRelTol)
          << "d = " << d << ", " << to_string(precision);
    }
}

}  // namespace
}  // namespace flashot::test
