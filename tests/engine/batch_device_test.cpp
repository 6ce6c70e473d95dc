// Batches from device memory (flashot::solve_batch_on_device, docs/engine.md "Batches from device memory"): the same
// results as solve_batch on the same values from host arrays on the CUDA backend — equal and ragged sizes, weights
// given (with zeros) and uniform, per-problem schedules, reach and cost, warm starts, tolerance checks — and against
// the fp64 reference problem by problem; validation errors that name the problem and the input with solve_batch's
// messages. The refusals that need no device run everywhere; the CUDA comparisons skip without a device, and
// FLASHOT_REQUIRE_CUDA=1 fails them instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(FLASHOT_TEST_CUDA_RUNTIME)
#include <cuda_runtime.h>
#endif

#include "backend_fixture.hpp"
#include "flashot/batch.hpp"
#include "problems.hpp"
#include "reference.hpp"

namespace flashot::test {
namespace {

/// Any pointer: the refusals below come before the engine reads it.
const float kNotRead[1] = {0};

template <typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

DeviceBatchProblem unread(std::size_t n, std::size_t m, std::size_t d, int device = 0) {
  return {{kNotRead, n, d, device}, {kNotRead, m, d, device}, {}, {}, {}};
}

TEST(BatchOnDevice, CpuBackendIsRefusedByName) {
  BackendOptions o;
  o.backend = BackendKind::kCpu;
  const DeviceBatchProblem p[] = {unread(10, 12, 3)};
  const std::string m = message_of([&] { solve_batch_on_device(p, o); });
  EXPECT_EQ(m, "solve_batch_on_device needs the CUDA backend (the batch is on cuda:0); solve_batch takes host arrays "
               "for the CPU backend");
  EXPECT_THROW(solve_batch_on_device(p, o), std::runtime_error);
}

TEST(BatchOnDevice, SeveralGpusAreRefusedByName) {
  BackendOptions o;
  o.devices = {0, 1};
  const DeviceBatchProblem p[] = {unread(10, 12, 3)};
  EXPECT_NE(message_of([&] { solve_batch_on_device(p, o); })
                .find("multi-GPU solves take host inputs; device inputs run on one GPU"),
            std::string::npos);
}

TEST(BatchOnDevice, ShapesAreCheckedBeforeAnyDeviceCall) {
  EXPECT_EQ(message_of([] { solve_batch_on_device({}); }), "solve_batch_on_device needs at least one problem (got none)");
  const auto message = [](std::vector<DeviceBatchProblem> batch) {
    return message_of([&] { solve_batch_on_device(batch); });
  };
  EXPECT_EQ(message({unread(10, 12, 3), unread(0, 12, 3)}),
            "batch problem 1 is empty: its source has 0 points and its target 12 (every problem needs at least one "
            "point on each side)");
  EXPECT_EQ(message({unread(10, 12, 3), unread(10, 12, 2)}),
            "batch problem 1 has dimension x.d = 2, y.d = 2 but problem 0 has d = 3 (a batch shares one d ≥ 1)");
  DeviceBatchProblem null_y = unread(10, 12, 3);
  null_y.y.data = nullptr;
  EXPECT_EQ(message({unread(10, 12, 3), null_y}),
            "batch problem 1: y.data must point to y.n·y.d = 36 values on the device (got a null pointer)");
  DeviceBatchProblem short_a = unread(10, 12, 3);
  short_a.a = {kNotRead, 9, 0};
  EXPECT_EQ(message({short_a}), "batch problem 0: a must be empty (uniform) or hold x.n = 10 weights (got 9)");
  DeviceBatchProblem other_device = unread(10, 12, 3);
  other_device.b = {kNotRead, 12, 1};
  EXPECT_EQ(message({unread(10, 12, 3), other_device}),
            "batch problem 1: b is on cuda:1 but problem 0's x on cuda:0 (a batch runs on one device)");
  DeviceBatchProblem alternating = unread(10, 12, 3);
  alternating.options.scheme = Scheme::kAlternating;
  EXPECT_NE(message({unread(10, 12, 3), alternating}).find("batch problem 1 asks for the alternating scheme"),
            std::string::npos);
}

TEST(BatchOnDevice, WithoutAUsableDeviceTheRefusalSaysWhy) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present";
  const DeviceBatchProblem p[] = {unread(10, 12, 3)};
  const std::string m = message_of([&] { solve_batch_on_device(p); });
  EXPECT_TRUE(m.find("built without CUDA") != std::string::npos || m.find("no CUDA device answers") != std::string::npos)
      << m;
}

#if defined(FLASHOT_TEST_CUDA_RUNTIME)

constexpr double kPotentialTol = 2e-4;  // × max(1, max|f|), as tests/engine/batch_test.cpp
constexpr double kCostRelTol = 1e-4;
/// Device batch against host batch on the CUDA backend, relative to the largest magnitude: the two concatenations
/// hold the same values (the centring's rounding is the host's), so the alternating scheme's ordered reductions give
/// the same potentials to fp32 rounding; the symmetric scheme's atomic column sums add run-to-run rounding
/// (tests/engine/device_input_test.cpp measured up to 5.4·10⁻⁵ of |f| between two host-built solves).
constexpr double kSameAlternating = 1e-5;
constexpr double kSameSymmetric = 2e-4;

/// Floats in device memory, freed on scope exit.
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<float>& host) : size_(host.size()) {
    if (cudaMalloc(&data_, std::max<std::size_t>(size_, 1) * sizeof(float)) != cudaSuccess)
      throw std::runtime_error("cudaMalloc failed");
    if (cudaMemcpy(data_, host.data(), size_ * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy failed");
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  const float* get() const { return data_; }

 private:
  float* data_ = nullptr;
  std::size_t size_ = 0;
};

BackendOptions cuda_options() {
  BackendOptions o;
  o.backend = BackendKind::kCuda;
  return o;
}

/// A batch's problems on the device (and the same batch from host arrays), weights given or uniform.
struct Batch {
  std::vector<TestProblem> problems;
  std::vector<SolveOptions> options;
  bool weights = true;
  std::vector<std::unique_ptr<DeviceArray>> memory;

  std::vector<BatchProblem> host() const {
    std::vector<BatchProblem> out;
    for (std::size_t q = 0; q < problems.size(); ++q) {
      const TestProblem& p = problems[q];
      out.push_back({p.xv(), p.yv(), weights ? std::span<const float>(p.a) : std::span<const float>(),
                     weights ? std::span<const float>(p.b) : std::span<const float>(), options[q]});
    }
    return out;
  }
  std::vector<DeviceBatchProblem> device() {
    std::vector<DeviceBatchProblem> out;
    for (std::size_t q = 0; q < problems.size(); ++q) {
      const TestProblem& p = problems[q];
      const auto upload = [&](const std::vector<float>& v) {
        memory.push_back(std::make_unique<DeviceArray>(v));
        return memory.back()->get();
      };
      DeviceBatchProblem d{{upload(p.x), p.n, p.d, 0}, {upload(p.y), p.m, p.d, 0}, {}, {}, options[q]};
      if (weights) {
        d.a = {upload(p.a), p.n, 0};
        d.b = {upload(p.b), p.m, 0};
      }
      out.push_back(d);
    }
    return out;
  }
};

double relative(const std::vector<float>& got, const std::vector<float>& want) {
  return max_abs_diff(got, want) / std::max(1e-30, max_abs(want));
}

/// Every report of the device batch against the host batch's.
void expect_same(const std::vector<SolveResult>& device, const std::vector<SolveResult>& host, double tol,
                 bool same_iterations = true) {
  ASSERT_EQ(device.size(), host.size());
  for (std::size_t q = 0; q < host.size(); ++q) {
    SCOPED_TRACE("problem " + std::to_string(q));
    const SolveResult &d = device[q], &h = host[q];
    EXPECT_EQ(d.reason, h.reason) << d.message << " / " << h.message;
    if (same_iterations) {
      EXPECT_EQ(d.iterations, h.iterations);
    }
    EXPECT_DOUBLE_EQ(d.epsilon, h.epsilon);
    EXPECT_DOUBLE_EQ(d.diameter, h.diameter);
    EXPECT_EQ(d.backend, "cuda");
    ASSERT_EQ(d.f.size(), h.f.size());
    ASSERT_EQ(d.g.size(), h.g.size());
    if (d.iterations != h.iterations) continue;
    EXPECT_LE(relative(d.f, h.f), tol);
    EXPECT_LE(relative(d.g, h.g), tol);
    EXPECT_NEAR(d.dual_cost, h.dual_cost, tol * std::max(1e-3, std::abs(h.dual_cost)));
    if (std::isnan(h.primal_cost)) {
      EXPECT_TRUE(std::isnan(d.primal_cost));
    } else {
      EXPECT_NEAR(d.primal_cost, h.primal_cost, tol * std::max(1e-3, std::abs(h.primal_cost)));
    }
    EXPECT_NEAR(d.marginal_error, h.marginal_error, 1e-6 + 1e-3 * h.marginal_error);
  }
}

SolveOptions fixed(double epsilon, int iterations, Scheme scheme) {
  SolveOptions o;
  o.epsilon = epsilon;
  o.tolerance = 0;
  o.max_iterations = iterations;
  o.scheme = scheme;
  return o;
}

TEST(BatchOnDevice, EqualSizesUniformWeightsMatchTheHostBatch) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  for (const std::size_t d : {std::size_t{3}, std::size_t{64}}) {
    for (const Scheme scheme : {Scheme::kAlternating, Scheme::kSymmetric}) {
      SCOPED_TRACE("d = " + std::to_string(d) + ", " + to_string(scheme));
      Batch batch;
      batch.weights = false;
      for (int q = 0; q < 5; ++q) {
        // 512 points: whole blocks, no padding rows.
        batch.problems.push_back(make_problem({.n = 512, .m = 512, .d = d, .seed = std::uint64_t(80 + q)}));
        batch.options.push_back(fixed(0.05 * double(d), 25, scheme));
      }
      const std::vector<SolveResult> host = solve_batch(batch.host(), cuda_options());
      const std::vector<SolveResult> device = solve_batch_on_device(batch.device(), cuda_options());
      expect_same(device, host, scheme == Scheme::kAlternating ? kSameAlternating : kSameSymmetric);
    }
  }
}

TEST(BatchOnDevice, RaggedWeightedBatchMatchesTheHostBatchAndTheReference) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  for (const std::size_t d : {std::size_t{3}, std::size_t{20}}) {
    SCOPED_TRACE("d = " + std::to_string(d));
    Batch batch;
    batch.problems = {
        make_problem({.n = 300, .m = 200, .d = d, .seed = 41, .random_weights = true}),
        make_problem({.n = 40, .m = 530, .d = d, .seed = 42, .random_weights = true, .zero_fraction = 0.1}),
        make_problem({.n = 256, .m = 256, .d = d, .seed = 43, .random_weights = true, .spread = 0.3}),
        make_problem({.n = 700, .m = 90, .d = d, .seed = 44, .random_weights = true}),
    };
    batch.options.resize(4);
    batch.options[0] = fixed(0.05 * double(d), 30, Scheme::kAlternating);
    batch.options[1].blur = 0.1 * std::sqrt(double(d));  // ε-scaling, its own schedule
    batch.options[1].scaling = 0.6;
    batch.options[1].tolerance = 0;
    batch.options[1].max_iterations = 20;
    batch.options[1].scheme = Scheme::kAlternating;
    batch.options[2] = fixed(0.1 * double(d), 45, Scheme::kAlternating);
    batch.options[2].reach = 1.0;  // unbalanced, its own damping
    batch.options[3] = fixed(0.03 * double(d), 12, Scheme::kAlternating);
    batch.options[3].cost = Cost::kHalfSquaredEuclidean;
    const std::vector<SolveResult> host = solve_batch(batch.host(), cuda_options());
    const std::vector<SolveResult> device = solve_batch_on_device(batch.device(), cuda_options());
    expect_same(device, host, kSameAlternating);
    for (std::size_t q = 0; q < batch.problems.size(); ++q) {
      SCOPED_TRACE("problem " + std::to_string(q) + " against the fp64 reference");
      const TestProblem& p = batch.problems[q];
      const ReferenceResult ref = reference_solve(p.xv(), p.yv(), p.a, p.b, batch.options[q]);
      const SolveResult& r = device[q];
      EXPECT_EQ(r.iterations, ref.iterations);
      const double scale = std::max(1.0, std::max(max_abs(ref.f), max_abs(ref.g)));
      EXPECT_LE(max_abs_diff(r.f, ref.f), kPotentialTol * scale);
      EXPECT_LE(max_abs_diff(r.g, ref.g), kPotentialTol * scale);
      EXPECT_NEAR(r.dual_cost, ref.dual_cost, kCostRelTol * std::max(1e-3, std::abs(ref.dual_cost)));
      EXPECT_NEAR(r.primal_cost, ref.primal_cost, kCostRelTol * std::max(1e-3, std::abs(ref.primal_cost)));
      EXPECT_NEAR(r.marginal_error, ref.marginal_error, 1e-3 + 1e-2 * ref.marginal_error);
    }
  }
}

TEST(BatchOnDevice, MixedUniformAndGivenWeights) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const TestProblem p = make_problem({.n = 333, .m = 290, .d = 5, .seed = 90, .random_weights = true});
  const TestProblem q = make_problem({.n = 120, .m = 410, .d = 5, .seed = 91});
  const SolveOptions o = fixed(0.2, 40, Scheme::kAlternating);
  const DeviceArray px(p.x), py(p.y), pb(p.b), qx(q.x), qy(q.y), qa(q.a);
  // Problem 0: b given, a uniform; problem 1: a given (uniform values), b uniform.
  const DeviceBatchProblem device[] = {{{px.get(), p.n, 5, 0}, {py.get(), p.m, 5, 0}, {}, {pb.get(), p.m, 0}, o},
                                       {{qx.get(), q.n, 5, 0}, {qy.get(), q.m, 5, 0}, {qa.get(), q.n, 0}, {}, o}};
  const std::vector<float> none;
  // p.b does not sum to what uniform a does unless normalized: make_problem's weights sum to 1, as 1/n does.
  const BatchProblem host[] = {{p.xv(), p.yv(), none, p.b, o}, {q.xv(), q.yv(), q.a, none, o}};
  expect_same(solve_batch_on_device(device, cuda_options()), solve_batch(host, cuda_options()), kSameAlternating);
}

TEST(BatchOnDevice, WarmStartsAndToleranceChecks) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  // Checks every few iterations: the loop's marginal errors come from Backend::batch_weighted_sums over the
  // resident weights, every problem of the check in one call per side.
  Batch batch;
  for (int q = 0; q < 3; ++q) {
    batch.problems.push_back(make_problem({.n = std::size_t(200 + 70 * q), .m = std::size_t(260 - 30 * q), .d = 3,
                                           .seed = std::uint64_t(95 + q), .random_weights = true}));
    SolveOptions o;
    o.epsilon = 0.03 + 0.02 * q;
    o.tolerance = 1e-4;
    o.check_every = 5;
    o.max_iterations = 2000;
    o.scheme = Scheme::kAlternating;
    batch.options.push_back(o);
  }
  const std::vector<SolveResult> host = solve_batch(batch.host(), cuda_options());
  const std::vector<SolveResult> cold = solve_batch_on_device(batch.device(), cuda_options());
  // A check can fall one period apart when an error sits at the tolerance: compare where they agree.
  expect_same(cold, host, kSameAlternating, false);
  for (std::size_t q = 0; q < cold.size(); ++q) {
    ASSERT_TRUE(cold[q].converged) << cold[q].message;
    EXPECT_NEAR(cold[q].iterations, host[q].iterations, batch.options[q].check_every) << q;
    EXPECT_EQ(cold[q].checks.size(), std::size_t(cold[q].iterations / batch.options[q].check_every)) << q;
  }
  // Warm-started from the cold potentials: the first check stops every problem, as on the host path.
  for (std::size_t q = 0; q < cold.size(); ++q) {
    batch.options[q].initial_f = cold[q].f;
    batch.options[q].initial_g = cold[q].g;
  }
  const std::vector<SolveResult> warm_host = solve_batch(batch.host(), cuda_options());
  const std::vector<SolveResult> warm = solve_batch_on_device(batch.device(), cuda_options());
  expect_same(warm, warm_host, kSameAlternating);
  for (std::size_t q = 0; q < warm.size(); ++q) {
    EXPECT_TRUE(warm[q].converged) << q;
    EXPECT_EQ(warm[q].iterations, batch.options[q].check_every) << q;
    EXPECT_NEAR(warm[q].dual_cost, cold[q].dual_cost, 1e-4 * std::abs(cold[q].dual_cost)) << q;
  }
}

TEST(BatchOnDevice, BadInputsAreNamedAsSolveBatchNamesThem) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const TestProblem p = make_problem({.n = 50, .m = 60, .d = 2, .seed = 29, .random_weights = true});
  const auto same_message = [&](const TestProblem& second, std::vector<float> a1, std::vector<float> b1) {
    Batch batch;
    batch.problems = {p, second};
    batch.problems[1].a = std::move(a1);
    batch.problems[1].b = std::move(b1);
    batch.options.resize(2);
    std::string host = message_of([&] { solve_batch(batch.host(), cuda_options()); });
    std::string device = message_of([&] { solve_batch_on_device(batch.device(), cuda_options()); });
    EXPECT_NE(host.find("batch problem 1"), std::string::npos) << host;
    EXPECT_EQ(device, host);
    return device;
  };
  // Non-finite coordinates: the problem, cloud, row, column and value; the first one in problem order.
  for (const float v : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    TestProblem q = p;
    q.y[7 * 2 + 1] = v;
    q.y[9 * 2 + 0] = v;  // a later row: not the one named
    const std::string m = same_message(q, q.a, q.b);
    EXPECT_NE(m.find("batch problem 1: y has a non-finite coordinate at row 7, column 1"), std::string::npos) << m;
  }
  std::vector<float> bad_b = p.b;
  bad_b[5] = -1.0f;
  EXPECT_EQ(same_message(p, p.a, bad_b), "batch problem 1: b[5] must be a finite weight ≥ 0 (got -1)");
  std::vector<float> nan_a = p.a;
  nan_a[33] = std::numeric_limits<float>::quiet_NaN();
  same_message(p, nan_a, p.b);
  same_message(p, std::vector<float>(p.n, 0.0f), p.b);  // "a must have a positive total mass (got 0)"
  std::vector<float> heavy = p.b;
  for (float& w : heavy) w *= 2;  // balanced OT with unequal masses: solve_options' message
  same_message(p, p.a, heavy);
  // Host memory where device memory is expected.
  const DeviceArray x(p.x);
  const DeviceBatchProblem host_y[] = {{{x.get(), p.n, 2, 0}, {p.y.data(), p.m, 2, 0}, {}, {}, {}}};
  const std::string m = message_of([&] { solve_batch_on_device(host_y, cuda_options()); });
  EXPECT_EQ(m.find("batch problem 0: y.data must be CUDA device memory on cuda:0"), 0u) << m;
}

TEST(BatchOnDevice, ABatchOfOneEqualsTheDeviceProblem) {
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  const TestProblem p = make_problem({.n = 512, .m = 768, .d = 8, .seed = 99, .random_weights = true});
  const DeviceArray x(p.x), y(p.y), a(p.a), b(p.b);
  const SolveOptions o = fixed(0.1, 60, Scheme::kAlternating);
  Problem problem = Problem::on_device({x.get(), p.n, 8, 0}, {y.get(), p.m, 8, 0}, {a.get(), p.n, 0},
                                       {b.get(), p.m, 0}, cuda_options());
  const SolveResult plain = problem.solve(o);
  const DeviceBatchProblem one{{x.get(), p.n, 8, 0}, {y.get(), p.m, 8, 0}, {a.get(), p.n, 0}, {b.get(), p.m, 0}, o};
  const SolveResult r = solve_batch_on_device({&one, 1}, cuda_options())[0];
  EXPECT_EQ(r.iterations, plain.iterations);
  // The batch runs the block-sparse kernels, the Problem the dense ones: fp32 rounding apart.
  EXPECT_LE(relative(r.f, plain.f), 1e-4);
  EXPECT_NEAR(r.dual_cost, plain.dual_cost, 1e-4 * std::abs(plain.dual_cost));
  EXPECT_NEAR(r.primal_cost, plain.primal_cost, 1e-4 * std::abs(plain.primal_cost));
  // The batch's result serves the device problem's plan operations.
  const std::vector<float> rows = problem.row_marginal(r);
  double err = 0;
  for (std::size_t i = 0; i < p.n; ++i) err += std::abs(rows[i] - p.a[i]);
  EXPECT_LE(err, 2 * r.marginal_error + 1e-4);
}

#else

TEST(BatchOnDevice, CudaTestsNeedTheCudaBuild) {
  if (cuda_required()) FAIL() << "FLASHOT_REQUIRE_CUDA=1 but this test binary was built without CUDA";
  GTEST_SKIP() << "built without CUDA: the device-batch comparisons need the CUDA runtime";
}

#endif

}  // namespace
}  // namespace flashot::test
