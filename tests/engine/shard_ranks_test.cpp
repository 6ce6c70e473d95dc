// The engine as MPI ranks, one GPU each (docs/multi-gpu.md): under `mpirun -np N flashot_engine_tests
// --gtest_filter='ShardRanks*'` every rank builds the same problem with flashot::rank_options, NCCL is bootstrapped
// through MPI_Bcast, and every rank must get the one-GPU results. Launched as a single process, it skips.
// Where no MPI library is at hand (the lent GPU image), the same ranks can be started by hand with the variables an
// Open MPI launcher sets (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK) and FLASHOT_TEST_RENDEZVOUS=<a fresh folder>: the
// bootstrap id then goes from rank 0 to the others through a file there instead of MPI_Bcast (the engine takes any
// broadcast function; only this test's transport differs):
//   for r in 0 1; do OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=$r
//     FLASHOT_TEST_RENDEZVOUS=/tmp/rv FLASHOT_REQUIRE_CUDA=1 flashot_engine_tests --gtest_filter='ShardRanks*' & done
// (one command line; scripts/gpu-scaling.sh runs it)
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend_fixture.hpp"
#include "flashot/distributed.hpp"
#include "problems.hpp"

#if __has_include(<mpi.h>)
#include <mpi.h>
#define FLASHOT_TEST_MPI 1
#else
#define FLASHOT_TEST_MPI 0
#endif

namespace flashot::test {
namespace {

// Sharded and one-GPU runs are both fp32 evaluations of the same plan: each is held to its own accuracy, twice
// tests/engine/reference_test.cpp's tolerances against the fp64 reference (shard_backend_test.cpp's kDeviceTol).
constexpr double kRankPotentialTol = 4e-4;  // × max(1, max|f|, max|g|)
constexpr double kRankPlanRelTol = 2e-4;    // relative to the largest entry
constexpr double kRankPointTol = 2e-4;      // × the data scale

/// The fp32 error model of one plan entry, for comparing two evaluations of the same plan (one GPU, ranks) on the
/// same potentials: a score t_ij = α⟨x_i, y_j⟩ + v_j (log2 units, engine/cuda/kernels.cuh) is a sum of terms as
/// large as T = log2(e)/ε · (2s·max‖x‖·max‖y‖ + max|h| + s·max(‖x‖², ‖y‖²)), each rounded to fp32 (2^-24 relative;
/// split-fp16 products carry ≈ 2^-22 of the product term, which the factor 4 covers). Each evaluation rounds a few
/// such terms, in its own order (per-shard merges, other split points), so two of them differ in t by up to about
/// 4·2^-24·T and in the entry by ln 2 times that, relatively. Sums of entries (P·V, Pᵀ·U) and single entries (top-k)
/// are held to it; ratios of sums (barycentric points, maps) to twice it times the data scale. Where it is smaller
/// than the fixed tolerances above (moderate ε), those stay.
double entry_tolerance(const TestProblem& p, const SolveResult& r, double epsilon) {
  const auto largest_norm = [](const std::vector<float>& points, std::size_t d) {
    double best = 0;
    for (std::size_t i = 0; i < points.size() / d; ++i) {
      double n2 = 0;
      for (std::size_t c = 0; c < d; ++c) n2 += double(points[i * d + c]) * points[i * d + c];
      best = std::max(best, std::sqrt(n2));
    }
    return best;
  };
  const double nx = largest_norm(p.x, p.d), ny = largest_norm(p.y, p.d);
  const double h = std::max(max_abs(r.f), max_abs(r.g));
  const double terms = 1.4426950408889634 / epsilon * (2 * nx * ny + h + std::max(nx * nx, ny * ny));
  return 4 * std::ldexp(1.0, -24) * terms * 0.6931471805599453;
}

#if FLASHOT_TEST_MPI
void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void init_mpi_once() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  MPI_Init(nullptr, nullptr);
  std::atexit(finalize_mpi);
}
#endif

/// The bootstrap broadcast through files in `folder` (rank 0 writes id-<call>, the others wait for it).
std::function<void(void*, std::size_t)> file_broadcast(const std::string& folder, int rank) {
  auto calls = std::make_shared<int>(0);
  return [folder, rank, calls](void* bytes, std::size_t size) {
    const std::filesystem::path path = std::filesystem::path(folder) / ("id-" + std::to_string((*calls)++));
    if (rank == 0) {
      std::filesystem::create_directories(folder);
      const std::filesystem::path temp = path.string() + ".tmp";
      std::ofstream(temp, std::ios::binary).write(static_cast<const char*>(bytes), static_cast<std::streamsize>(size));
      std::filesystem::rename(temp, path);
      return;
    }
    for (int waited = 0; !std::filesystem::exists(path); ++waited) {
      if (waited > 6000) throw std::runtime_error("no bootstrap id from rank 0 at " + path.string() + " in 60 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::ifstream(path, std::ios::binary).read(static_cast<char*>(bytes), static_cast<std::streamsize>(size));
  };
}

TEST(ShardRanks, EveryRankGetsTheOneGpuResults) {
  const ProcessGroup group = process_group_from_environment();
  if (group.ranks < 2)
    GTEST_SKIP() << "run as MPI ranks (mpirun -np N, N ≥ 2, one GPU each) to test the multi-process path";
  const char* rendezvous = std::getenv("FLASHOT_TEST_RENDEZVOUS");
  std::function<void(void*, std::size_t)> broadcast;
  if (rendezvous != nullptr) {
    broadcast = file_broadcast(rendezvous, group.rank);
  } else {
#if !FLASHOT_TEST_MPI
    FAIL() << "launched as " << group.ranks << " ranks, but this test binary was built without MPI (set "
           << "FLASHOT_TEST_RENDEZVOUS to bootstrap through files)";
#else
    init_mpi_once();
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ASSERT_EQ(world, group.ranks) << "MPI_COMM_WORLD and the launcher's environment disagree";
    broadcast = [](void* bytes, std::size_t size) {
      MPI_Bcast(bytes, static_cast<int>(size), MPI_BYTE, 0, MPI_COMM_WORLD);
    };
#endif
  }
  FLASHOT_REQUIRE_BACKEND(std::string("cuda"));
  // d = 3: the fp32 paths; d = 64: split-fp16 tensor cores, warpgroup kernels on Hopper, screening.
  for (std::size_t d : {std::size_t(3), std::size_t(64)}) {
  SCOPED_TRACE("d = " + std::to_string(d));
  const TestProblem p = make_problem({.n = 3000, .m = 2500, .d = d, .seed = 61, .random_weights = true});
  SolveOptions o;
  o.blur = 0.05;
  o.tolerance = 0;
  o.max_iterations = 30;
  BackendOptions single;
  single.backend = BackendKind::kCuda;
  single.device = group.local_rank;
  Problem one(p.xv(), p.yv(), p.a, p.b, single);
  Problem ranks(p.xv(), p.yv(), p.a, p.b, rank_options(group, broadcast));
  EXPECT_NE(ranks.device_name().find(one.device_name()), std::string::npos) << ranks.device_name();
  const SolveResult r1 = one.solve(o);
  const SolveResult rr = ranks.solve(o);
  ASSERT_EQ(rr.reason, r1.reason) << rr.message;
  const double fscale = std::max({1.0, max_abs(r1.f), max_abs(r1.g)});
  EXPECT_LE(max_abs_diff(rr.f, r1.f), kRankPotentialTol * fscale) << "rank " << group.rank;
  EXPECT_LE(max_abs_diff(rr.g, r1.g), kRankPotentialTol * fscale) << "rank " << group.rank;

  const double entry = entry_tolerance(p, r1, r1.epsilon);
  const double plan_tol = std::max(kRankPlanRelTol, entry), point_tol = std::max(kRankPointTol, 2 * entry);
  std::printf("[ ranks    ] rank %d d=%zu eps=%g: plan entries held to %.3g relative (fp32 model %.3g)\n", group.rank,
              d, r1.epsilon, plan_tol, entry);
  const std::size_t k = 4;
  const std::vector<float> v = random_points(p.m, k, 62), u = random_points(p.n, k, 63);
  const std::vector<float> pv = one.apply_plan(r1, v, k), ptu = one.apply_plan_transpose(r1, u, k);
  EXPECT_LE(max_abs_diff(ranks.apply_plan(r1, v, k), pv), plan_tol * max_abs(pv));
  EXPECT_LE(max_abs_diff(ranks.apply_plan_transpose(r1, u, k), ptu), plan_tol * max_abs(ptu));
  const double scale = std::max(max_abs(p.x), max_abs(p.y));
  const std::vector<float> q = random_points(50, p.d, 64, 0.5);
  for (Side side : {Side::kSource, Side::kTarget}) {
    EXPECT_LE(max_abs_diff(ranks.barycentric(r1, side), one.barycentric(r1, side)), point_tol * scale);
    EXPECT_LE(max_abs_diff(ranks.map_points(r1, {q, 50, p.d}, side), one.map_points(r1, {q, 50, p.d}, side)),
              point_tol * scale);
  }
  const TopKCoupling t1 = one.top_k(r1, 3), tr = ranks.top_k(r1, 3);
  EXPECT_LE(max_abs_diff(tr.values, t1.values), plan_tol * max_abs(t1.values));
  const EngineStatistics s1 = one.statistics(), sr = ranks.statistics();
  EXPECT_EQ(sr.one_pass_steps + sr.skipped_steps + sr.redone_steps,
            s1.one_pass_steps + s1.skipped_steps + s1.redone_steps);
  }
}

}  // namespace
}  // namespace flashot::test
