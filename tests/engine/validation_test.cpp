// Bad input is rejected at the API edge with std::invalid_argument naming the input and the value; the registry
// refuses an unavailable backend with std::runtime_error; a large problem runs without any n×m buffer.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

#include "backend_fixture.hpp"
#include "problems.hpp"

namespace flashot::test {
namespace {

/// Runs `f`, expects std::invalid_argument, and checks that the message contains every fragment.
void expect_invalid(const std::function<void()>& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning " << *fragments.begin();
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    for (const std::string& part : fragments) EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  }
}

class ValidationTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { FLASHOT_REQUIRE_BACKEND(GetParam()); }
  BackendOptions options() const { return backend_options(GetParam()); }
  TestProblem p = make_problem({.n = 20, .m = 30, .d = 3, .seed = 41});
};

TEST_P(ValidationTest, BadPointsAndWeightsAreNamed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const BackendOptions o = options();
  {
    TestProblem q = p;
    q.x[3 * 3 + 1] = nan;
    expect_invalid([&] { Problem(q.xv(), q.yv(), q.a, q.b, o); }, {"x", "row 3", "column 1", "nan"});
  }
  {
    TestProblem q = p;
    q.y[5 * 3 + 2] = -inf;
    expect_invalid([&] { Problem(q.xv(), q.yv(), q.a, q.b, o); }, {"y", "row 5", "column 2", "inf"});
  }
  {
    TestProblem q = p;
    q.a[2] = -0.5f;
    expect_invalid([&] { Problem(q.xv(), q.yv(), q.a, q.b, o); }, {"a[2]", "-0.5"});
  }
  {
    TestProblem q = p;
    q.b[1] = nan;
    expect_invalid([&] { Problem(q.xv(), q.yv(), q.a, q.b, o); }, {"b[1]", "nan"});
  }
  {
    TestProblem q = p;
    std::fill(q.a.begin(), q.a.end(), 0.0f);
    expect_invalid([&] { Problem(q.xv(), q.yv(), q.a, q.b, o); }, {"a", "total mass", "got 0"});
  }
  expect_invalid([&] { Problem(p.xv(), p.yv(), std::span<const float>(p.a).first(4), p.b, o); },
                 {"a", "x.n = 20", "got 4"});
  expect_invalid([&] { Problem(p.xv(), {p.y, 45, 2}, {}, {}, o); }, {"x.d and y.d", "3 and 2"});
  expect_invalid([&] { Problem({{}, 0, 3}, p.yv(), {}, {}, o); }, {"x", "n = 0"});
  expect_invalid([&] { Problem(p.xv(), {p.y, 30, 0}, {}, {}, o); }, {"y.d", "got 0"});
  expect_invalid([&] { Problem({std::span<const float>(p.x).first(59), 20, 3}, p.yv(), {}, {}, o); },
                 {"x.data", "60", "got 59"});
  BackendOptions bad = o;
  bad.threads = -1;
  expect_invalid([&] { Problem(p.xv(), p.yv(), p.a, p.b, bad); }, {"threads", "-1"});
}

TEST_P(ValidationTest, BadSolveOptionsAreNamed) {
  Problem problem(p.xv(), p.yv(), p.a, p.b, options());
  const auto with = [&](const std::function<void(SolveOptions&)>& change) {
    return [&problem, change] {
      SolveOptions o;
      change(o);
      problem.solve(o);
    };
  };
  expect_invalid(with([](SolveOptions& o) { o.epsilon = -0.1; }), {"epsilon", "-0.1"});
  expect_invalid(with([](SolveOptions& o) { o.epsilon = std::nan(""); }), {"epsilon", "nan"});
  expect_invalid(with([](SolveOptions& o) { o.blur = 0; }), {"blur", "got 0"});
  expect_invalid(with([](SolveOptions& o) { o.blur_relative = -0.05; }), {"blur_relative", "-0.05"});
  expect_invalid(with([](SolveOptions& o) { o.blur_relative = std::nan(""); }), {"blur_relative", "nan"});
  expect_invalid(with([](SolveOptions& o) { o.scaling = 1.5; }), {"scaling", "1.5"});
  expect_invalid(with([](SolveOptions& o) { o.reach = -1; }), {"reach", "-1"});
  expect_invalid(with([](SolveOptions& o) { o.reach_target = -2; }), {"reach_target", "-2"});
  expect_invalid(with([](SolveOptions& o) { o.tolerance = -1e-3; }), {"tolerance", "-0.001"});
  expect_invalid(with([](SolveOptions& o) { o.check_every = 0; }), {"check_every", "got 0"});
  expect_invalid(with([](SolveOptions& o) { o.max_iterations = -5; }), {"max_iterations", "-5"});
  expect_invalid(with([](SolveOptions& o) { o.stage_iterations = 0; }), {"stage_iterations", "got 0"});
  expect_invalid(with([](SolveOptions& o) { o.diameter = -1; }), {"diameter", "-1"});
  expect_invalid(with([](SolveOptions& o) { o.initial_f = {1, 2, 3}; }), {"initial_f", "n = 20", "got 3"});
  expect_invalid(with([](SolveOptions& o) { o.initial_g = std::vector<float>(30, std::nanf("")); }),
                 {"initial_g[0]", "nan"});
  // Balanced OT between unequal masses has no solution: refused, unless one side is unbalanced.
  TestProblem q = p;
  for (float& w : q.b) w *= 2;
  Problem unequal(q.xv(), q.yv(), q.a, q.b, options());
  expect_invalid([&] { unequal.solve(SolveOptions{}); }, {"sum(a) = 1", "sum(b) = 2"});
  SolveOptions semi;
  semi.reach_target = 0.5;
  semi.max_iterations = 5;
  EXPECT_NO_THROW(unequal.solve(semi));
}

TEST_P(ValidationTest, RelativeBlurNeedsAScale) {
  // Every point at the same place: no diameter to take a relative blur of, so the solve is refused up front, and
  // an absolute blur or a given diameter is still accepted.
  const std::vector<float> same(3 * 5, 0.25f);
  Problem problem({same, 5, 3}, {same, 5, 3}, {}, {}, options());
  EXPECT_EQ(problem.diameter(), 0.0);
  SolveOptions o;
  o.blur_relative = 0.05;
  expect_invalid([&] { problem.solve(o); }, {"blur_relative", "diameter 0"});
  o.diameter = 2.0;
  EXPECT_DOUBLE_EQ(problem.solve(o).epsilon, 0.1 * 0.1);
  o.diameter = 0;
  o.blur_relative = 0;
  o.blur = 0.1;
  EXPECT_DOUBLE_EQ(problem.solve(o).epsilon, 0.1 * 0.1);
}

TEST_P(ValidationTest, BadOperationArgumentsAreNamed) {
  Problem problem(p.xv(), p.yv(), p.a, p.b, options());
  SolveOptions o;
  o.epsilon = 0.05;
  o.max_iterations = 20;
  const SolveResult r = problem.solve(o);
  expect_invalid([&] { problem.top_k(r, 0); }, {"k", "got 0"});
  std::vector<std::int32_t> labels(20, 0);
  expect_invalid([&] { problem.transfer_labels(r, Side::kSource, labels, 0); }, {"classes", "got 0"});
  labels[7] = 5;
  expect_invalid([&] { problem.transfer_labels(r, Side::kSource, labels, 3); }, {"labels[7]", "classes = 3", "got 5"});
  expect_invalid([&] { problem.transfer_labels(r, Side::kTarget, labels, 6); }, {"labels", "m = 30", "got 20"});
  const std::vector<float> v(29 * 2);
  expect_invalid([&] { problem.apply_plan(r, v, 2); }, {"v", "m·k = 60", "got 58"});
  expect_invalid([&] { problem.apply_plan_transpose(r, v, 0); }, {"k", "got 0"});
  const std::vector<float> q(8);
  expect_invalid([&] { problem.map_points(r, {q, 4, 2}, Side::kSource); }, {"queries.d", "d = 3", "got 2"});
  SolveResult other = r;
  other.f.resize(7);
  expect_invalid([&] { problem.barycentric(other, Side::kSource); }, {"result", "n = 20", "got 7"});
}

INSTANTIATE_TEST_SUITE_P(Backends, ValidationTest, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return info.param; });

TEST(Registry, NamesRoundTripAndUnknownNamesAreRefused) {
  for (BackendKind b : {BackendKind::kAuto, BackendKind::kCpu, BackendKind::kCuda})
    EXPECT_EQ(parse_backend(to_string(b)), b);
  for (Scheme s : {Scheme::kSymmetric, Scheme::kAlternating}) EXPECT_EQ(parse_scheme(to_string(s)), s);
  for (Precision p : {Precision::kDefault, Precision::kFp32, Precision::kTf32, Precision::kBf16})
    EXPECT_EQ(parse_precision(to_string(p)), p);
  for (Screening s : {Screening::kAuto, Screening::kOff, Screening::kOn}) EXPECT_EQ(parse_screening(to_string(s)), s);
  expect_invalid([] { parse_backend("gpu"); }, {"backend", "'gpu'"});
  expect_invalid([] { parse_scheme("jacobi"); }, {"scheme", "'jacobi'"});
  expect_invalid([] { parse_precision("fp8"); }, {"precision", "'fp8'"});
  expect_invalid([] { parse_screening("yes"); }, {"screening", "'yes'"});
  EXPECT_FALSE(version().empty());
}

TEST(Registry, AutoPicksWhatIsPresentAndCudaIsRefusedWhenAbsent) {
  const std::vector<std::string> present = available_backends();
  ASSERT_FALSE(present.empty());
  EXPECT_EQ(present.front(), "cpu");
  EXPECT_EQ(cuda_available(), std::find(present.begin(), present.end(), "cuda") != present.end());
  const TestProblem p = make_problem({.n = 10, .m = 12, .d = 2, .seed = 42});
  Problem automatic(p.xv(), p.yv());
  EXPECT_EQ(automatic.backend_name(), cuda_available() ? "cuda" : "cpu");
  if (cuda_available()) return;
  if (cuda_required()) FAIL() << "FLASHOT_REQUIRE_CUDA=1 but the CUDA backend is not available";
  BackendOptions cuda;
  cuda.backend = BackendKind::kCuda;
  try {
    Problem forced(p.xv(), p.yv(), {}, {}, cuda);
    ADD_FAILURE() << "a CUDA problem was built without CUDA";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
}

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST(Memory, LargeProblemNeverHoldsAnNByMBuffer) {
  // n·m = 10⁹ plan entries: 4 GB as fp32, while the problem's own data are a few MB. ctest runs every test in its
  // own process, so the peak resident size measures this test alone.
  const std::size_t n = 200000, m = 5000, d = 3;
  const std::vector<float> x = random_points(n, d, 43), y = random_points(m, d, 44);
  const long before = peak_rss_kib();
  BackendOptions cpu;
  cpu.backend = BackendKind::kCpu;
  Problem problem({x, n, d}, {y, m, d}, {}, {}, cpu);
  SolveOptions o;
  o.epsilon = 0.5;
  o.tolerance = 0;
  o.max_iterations = 1;
  const SolveResult r = problem.solve(o);
  ASSERT_NE(r.reason, StopReason::kNonFinite) << r.message;
  const std::vector<float> t = problem.barycentric(r, Side::kSource);
  const TopKCoupling top = problem.top_k(r, 2);
  EXPECT_EQ(t.size(), n * d);
  EXPECT_EQ(top.columns.size(), n * 2);
  const double grown_mib = static_cast<double>(peak_rss_kib() - before) / 1024.0;
  const double plan_mib = static_cast<double>(n) * m * sizeof(float) / (1024.0 * 1024.0);
  // A quarter of the plan: far below one n×m buffer, with room for a sanitizer's quarantine and shadow memory.
  EXPECT_LT(grown_mib, 0.25 * plan_mib) << "peak memory grew by " << grown_mib << " MiB";
}

}  // namespace
}  // namespace flashot::test
