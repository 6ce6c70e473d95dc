// The Sinkhorn loop's weighted reductions (marginal error, dual cost) taken from the backend's own weights
// (Backend::weighted_sums, SolveInputs::resident: what a Problem::on_device problem with device weights uses, so
// that the weights never pass through host memory) give what the loop's host path gives from host weights: exactly
// on the CPU backend (the same reduction in the same order), within fp64 summation order on the CUDA backend (its
// blocks' partial sums). Both are checked against a plain fp64 evaluation of the formulas written out here. The
// batched form (Backend::batch_weighted_sums: every problem of a device batch in one call) equals its one-range calls
// bit for bit, and a batch's loop with resident weights reports what its host-weights loop reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../../engine/src/backend.hpp"
#include "../../engine/src/sinkhorn.hpp"
#include "backend_fixture.hpp"
#include "problems.hpp"

namespace flashot::test {
namespace {

/// Σ_{w>0} |w·e^{(h−hh)/ε} − w·e^{−h/ρ}| (target w when ρ = 0) and Σ w·h or Σ w·ρ(1 − e^{−h/ρ}), in long double.
std::pair<long double, long double> reference_sums(const std::vector<float>& w, const std::vector<float>& h,
                                                   const std::vector<float>& hh, double eps, double rho) {
  long double marginal = 0, dual = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const long double wi = w[i], hi = h[i];
    dual += rho > 0 ? wi * rho * (1 - std::exp(-hi / rho)) : wi * hi;
    if (!(w[i] > 0)) continue;
    const long double mass = wi * std::exp((hi - hh[i]) / eps);
    marginal += std::abs(mass - (rho > 0 ? wi * std::exp(-hi / rho) : wi));
  }
  return {marginal, dual};
}

class WeightedSumsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(WeightedSumsTest, BackendSumsMatchTheHostReduction) {
  const std::string name = GetParam();
  FLASHOT_REQUIRE_BACKEND(name);
  // A fifth of the weights exactly zero: the marginal skips them, the dual counts 0·h.
  const TestProblem p = make_problem({.n = 700, .m = 500, .d = 3, .seed = 71, .random_weights = true,
                                      .zero_fraction = 0.2});
  const auto backend = detail::make_backend(backend_options(name, 2), detail::ProblemData{p.xv(), p.yv(), p.a, p.b});
  const std::vector<float> f = random_points(p.n, 1, 72, 0.3), fh = random_points(p.n, 1, 73, 0.3);
  const std::vector<float> g = random_points(p.m, 1, 74, 0.3), gh = random_points(p.m, 1, 75, 0.3);
  // The CPU backend runs the host reduction itself: bit for bit. CUDA: fp64 partial sums in another order.
  const double tol = name == "cpu" ? 0.0 : 1e-12;
  for (const double rho : {0.0, 0.7}) {
    for (const auto& [side, w, h, hh] :
         {std::tuple{Side::kSource, &p.a, &f, &fh}, std::tuple{Side::kTarget, &p.b, &g, &gh}}) {
      const double eps = 0.05;
      const detail::WeightedSums host = detail::weighted_sums(*w, *h, *hh, eps, rho);
      const double host_dual = detail::weighted_sums(*w, *h, {}, eps, rho).dual;
      const detail::WeightedSums got = backend->weighted_sums(side, 0, *h, *hh, eps, rho);
      const double got_dual = backend->weighted_sums(side, 0, *h, {}, eps, rho).dual;
      const auto [ref_marginal, ref_dual] = reference_sums(*w, *h, *hh, eps, rho);
      SCOPED_TRACE("rho " + std::to_string(rho) + (side == Side::kSource ? ", rows" : ", columns"));
      EXPECT_NEAR(got.marginal, host.marginal, tol * std::abs(host.marginal));
      EXPECT_NEAR(got_dual, host_dual, tol * std::abs(host_dual));
      EXPECT_EQ(got.dual, 0.0);  // hh given: the marginal only
      EXPECT_NEAR(host.marginal, double(ref_marginal), 1e-12 * double(std::abs(ref_marginal)));
      EXPECT_NEAR(host_dual, double(ref_dual), 1e-12 * double(std::abs(ref_dual)) + 1e-15);
      // A range of the side (a batch's problem): the same sums as the host reduction of that slice.
      const std::size_t offset = 37, count = 200;
      const std::span<const float> ws(w->data() + offset, count), hs(h->data() + offset, count),
          hhs(hh->data() + offset, count);
      const detail::WeightedSums part = backend->weighted_sums(side, offset, hs, hhs, eps, rho);
      const detail::WeightedSums want = detail::weighted_sums(ws, hs, hhs, eps, rho);
      EXPECT_NEAR(part.marginal, want.marginal, tol * std::abs(want.marginal));
    }
  }
  std::vector<float> too_many(p.n + 1, 0.0f);
  EXPECT_THROW(backend->weighted_sums(Side::kSource, 0, too_many, {}, 1.0, 0.0), std::invalid_argument);
}

TEST_P(WeightedSumsTest, LoopWithResidentWeightsReportsWhatTheHostPathReports) {
  const std::string name = GetParam();
  FLASHOT_REQUIRE_BACKEND(name);
  const TestProblem p = make_problem({.n = 300, .m = 240, .d = 3, .seed = 76, .random_weights = true,
                                      .zero_fraction = 0.1});
  double diameter = 0;
  {
    const Problem problem(p.xv(), p.yv(), p.a, p.b, backend_options("cpu", 2));
    diameter = problem.diameter();
  }
  double mass_a = 0;
  for (float w : p.a) mass_a += w;
  for (const double reach : {0.0, 0.5}) {
    // A fixed number of iterations, checked every 5 (the callback asks for the checks): both runs take the same
    // steps on their own fresh backends, whatever the reduction's last bits.
    SolveOptions o;
    o.blur = 0.05;
    o.tolerance = 0;
    o.check_every = 5;
    o.max_iterations = 60;
    o.reach = reach;
    o.progress = [](const Progress&) { return true; };
    const detail::ProblemData data{p.xv(), p.yv(), p.a, p.b};
    const auto host_backend = detail::make_backend(backend_options(name, 2), data);
    const SolveResult host = detail::run_sinkhorn(*host_backend, {p.a, p.b, diameter}, o);
    const auto resident_backend = detail::make_backend(backend_options(name, 2), data);
    const detail::SolveInputs resident{{}, {}, diameter, true, p.n, p.m, mass_a};
    const SolveResult got = detail::run_sinkhorn(*resident_backend, resident, o);
    SCOPED_TRACE("reach " + std::to_string(reach));
    ASSERT_EQ(got.checks.size(), host.checks.size());
    EXPECT_GT(host.checks.size(), 10u);
    EXPECT_EQ(got.iterations, host.iterations);
    EXPECT_EQ(got.reason, host.reason);
    if (name == "cpu") {  // the same potentials, the same reduction: identical reports
      EXPECT_EQ(got.f, host.f);
      EXPECT_EQ(got.marginal_error, host.marginal_error);
      EXPECT_EQ(got.dual_cost, host.dual_cost);
      for (std::size_t c = 0; c < host.checks.size(); ++c) EXPECT_EQ(got.checks[c].error, host.checks[c].error);
    } else {
      // Two CUDA runs may differ in the potentials' last bits (the order of their reductions): the resident run is
      // held to a few times what a second host-weights run differs by, or the device tests' 1e-6 on the error.
      const auto again_backend = detail::make_backend(backend_options(name, 2), data);
      const SolveResult again = detail::run_sinkhorn(*again_backend, {p.a, p.b, diameter}, o);
      const auto near = [](double got, double want, double other, double floor) {
        return std::abs(got - want) <= std::max(floor, 4 * std::abs(other - want));
      };
      EXPECT_PRED4(near, got.marginal_error, host.marginal_error, again.marginal_error, 1e-6);
      EXPECT_PRED4(near, got.dual_cost, host.dual_cost, again.dual_cost, 1e-6 * std::abs(host.dual_cost));
      for (std::size_t c = 0; c < host.checks.size(); ++c)
        EXPECT_PRED4(near, got.checks[c].error, host.checks[c].error, again.checks[c].error, 1e-6);
    }
    EXPECT_TRUE(std::isfinite(host.marginal_error));
  }
}

TEST_P(WeightedSumsTest, BatchedRangesEqualTheirOneRangeCalls) {
  const std::string name = GetParam();
  FLASHOT_REQUIRE_BACKEND(name);
  const TestProblem p = make_problem({.n = 700, .m = 500, .d = 3, .seed = 77, .random_weights = true,
                                      .zero_fraction = 0.2});
  const auto backend = detail::make_backend(backend_options(name, 2), detail::ProblemData{p.xv(), p.yv(), p.a, p.b});
  const std::vector<float> f = random_points(p.n, 1, 78, 0.3), fh = random_points(p.n, 1, 79, 0.3);
  // Ranges of a batch's problems (each its own ε and ρ), one of a single point, one empty, one over the whole side.
  const std::vector<detail::WeightedRange> ranges = {
      {0, 256, 0.05, 0.0}, {256, 300, 0.1, 0.7}, {556, 1, 0.2, 0.0}, {600, 0, 0.05, 0.0}, {0, 700, 0.07, 0.3}};
  for (const bool marginal : {true, false}) {
    const std::span<const float> hh = marginal ? std::span<const float>(fh) : std::span<const float>();
    std::vector<detail::WeightedSums> got(ranges.size());
    backend->batch_weighted_sums(Side::kSource, ranges, f, hh, got);
    for (std::size_t k = 0; k < ranges.size(); ++k) {
      const detail::WeightedRange& r = ranges[k];
      const detail::WeightedSums one =
          r.count == 0 ? detail::WeightedSums{}
                       : backend->weighted_sums(Side::kSource, r.offset, std::span<const float>(f).subspan(r.offset, r.count),
                                                marginal ? hh.subspan(r.offset, r.count) : hh, r.epsilon, r.rho);
      SCOPED_TRACE("range " + std::to_string(k) + (marginal ? ", marginal" : ", dual"));
      // Every backend: bit for bit (the CUDA launch reduces each range with its one-range call's blocks).
      EXPECT_EQ(got[k].marginal, one.marginal);
      EXPECT_EQ(got[k].dual, one.dual);
    }
  }
}

TEST_P(WeightedSumsTest, BatchLoopWithResidentWeightsReportsWhatTheHostPathReports) {
  // The loop of a device batch (solve_batch_on_device) on any backend: a two-problem concatenation, padded to whole
  // blocks, run with host weights and with resident ones (the backend's own; the CPU backend keeps them on the host).
  const std::string name = GetParam();
  FLASHOT_REQUIRE_BACKEND(name);
  const std::vector<TestProblem> ps = {
      make_problem({.n = 300, .m = 240, .d = 3, .seed = 80, .random_weights = true, .zero_fraction = 0.1}),
      make_problem({.n = 200, .m = 260, .d = 3, .seed = 81, .random_weights = true})};
  detail::BatchLayout layout;
  layout.row_blocks.push_back(0);
  layout.col_blocks.push_back(0);
  const auto whole = [](std::size_t n) { return (n + detail::kBlockSize - 1) / detail::kBlockSize * detail::kBlockSize; };
  for (const TestProblem& p : ps) {
    layout.row_begin.push_back(layout.rows);
    layout.col_begin.push_back(layout.cols);
    layout.rows += whole(p.n);
    layout.cols += whole(p.m);
    layout.row_blocks.push_back(std::int32_t(layout.rows / detail::kBlockSize));
    layout.col_blocks.push_back(std::int32_t(layout.cols / detail::kBlockSize));
  }
  std::vector<float> x(layout.rows * 3, 0.0f), y(layout.cols * 3, 0.0f), a(layout.rows, 0.0f), b(layout.cols, 0.0f);
  for (std::size_t q = 0; q < ps.size(); ++q) {
    std::copy(ps[q].x.begin(), ps[q].x.end(), x.begin() + layout.row_begin[q] * 3);
    std::copy(ps[q].y.begin(), ps[q].y.end(), y.begin() + layout.col_begin[q] * 3);
    std::copy(ps[q].a.begin(), ps[q].a.end(), a.begin() + layout.row_begin[q]);
    std::copy(ps[q].b.begin(), ps[q].b.end(), b.begin() + layout.col_begin[q]);
  }
  const detail::ProblemData data{{x, layout.rows, 3}, {y, layout.cols, 3}, a, b};
  std::vector<detail::SolveInputs> host(2), resident(2);
  std::vector<SolveOptions> options(2);
  for (std::size_t q = 0; q < ps.size(); ++q) {
    const TestProblem& p = ps[q];
    double mass_a = 0;
    for (float w : p.a) mass_a += w;
    host[q] = {std::span<const float>(a).subspan(layout.row_begin[q], p.n),
               std::span<const float>(b).subspan(layout.col_begin[q], p.m), 2.0};
    resident[q] = {{}, {}, 2.0, true, p.n, p.m, mass_a};
    options[q].blur = 0.1 + 0.05 * double(q);
    options[q].tolerance = 1e-4;
    options[q].check_every = 5;
    options[q].reach = q == 1 ? 0.5 : 0.0;
    options[q].scheme = Scheme::kAlternating;
  }
  const std::vector<const SolveOptions*> opts = {&options[0], &options[1]};
  const auto host_backend = detail::make_backend(backend_options(name, 2), data);
  const std::vector<SolveResult> want = detail::run_sinkhorn_batch(*host_backend, host, opts, &layout);
  const auto resident_backend = detail::make_backend(backend_options(name, 2), data);
  const std::vector<SolveResult> got = detail::run_sinkhorn_batch(*resident_backend, resident, opts, &layout);
  for (std::size_t q = 0; q < ps.size(); ++q) {
    SCOPED_TRACE("problem " + std::to_string(q));
    EXPECT_TRUE(want[q].converged) << want[q].message;
    EXPECT_GT(want[q].checks.size(), 1u);
    if (name == "cpu") {  // the same reductions over the same host weights: identical reports
      EXPECT_EQ(got[q].iterations, want[q].iterations);
      EXPECT_EQ(got[q].f, want[q].f);
      EXPECT_EQ(got[q].marginal_error, want[q].marginal_error);
      EXPECT_EQ(got[q].dual_cost, want[q].dual_cost);
      ASSERT_EQ(got[q].checks.size(), want[q].checks.size());
      for (std::size_t c = 0; c < want[q].checks.size(); ++c)
        EXPECT_EQ(got[q].checks[c].error, want[q].checks[c].error);
    } else {  // fp64 sums in another order: a check may fall one period apart at the tolerance
      EXPECT_NEAR(got[q].iterations, want[q].iterations, options[q].check_every);
      EXPECT_EQ(got[q].converged, want[q].converged);
      EXPECT_NEAR(got[q].dual_cost, want[q].dual_cost, 1e-5 * std::abs(want[q].dual_cost));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, WeightedSumsTest, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace flashot::test
