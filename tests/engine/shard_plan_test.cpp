// Host-side sharding logic (docs/multi-gpu.md): the row plan, the option checks, and the exact combination of
// per-shard log-sum-exps that both the host path and the devices' NCCL path use. Runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <random>
#include <stdexcept>
#include <vector>

#include "../../engine/src/shard_math.hpp"
#include "../../engine/src/shard_plan.hpp"
#include "flashot/distributed.hpp"
#include "flashot/flashot.hpp"
#include "problems.hpp"

namespace flashot::test {
namespace {

using detail::ShardRange;

constexpr double kInf = std::numeric_limits<double>::infinity();
// The combination is a handful of fp64 operations on values of magnitude ≤ 1e4: a few ulps of that.
constexpr double kCombineTol = 1e-9;
// fp32 emulation of the devices' two all-reduces (max, then sum of 2^(L_s − M)) against the fp64 truth, relative.
constexpr double kDeviceCombineRelTol = 1e-6;

/// −ε·log Σ_i exp(t_i/ε)… written the slow obvious way: t_i are the LSE arguments times ε, the result in cost units.
double direct_softmin(const std::vector<double>& t, double epsilon) {
  const double top = *std::max_element(t.begin(), t.end());
  double sum = 0;
  for (double v : t) sum += std::exp((v - top) / epsilon);
  return -(top + epsilon * std::log(sum));
}

TEST(ShardPlan, CoversEveryRowContiguouslyAndBalanced) {
  for (std::size_t rows : {1u, 2u, 7u, 64u, 100u, 1023u, 1024u, 3000u, 5000u, 100000u}) {
    for (int shards = 1; shards <= 8; ++shards) {
      if (static_cast<std::size_t>(shards) > rows) continue;
      for (std::size_t align : {std::size_t(1), std::size_t(64), detail::kShardRowAlign}) {
        const std::vector<ShardRange> plan = detail::plan_shards(rows, shards, align);
        ASSERT_EQ(plan.size(), static_cast<std::size_t>(shards));
        std::size_t next = 0, smallest = rows, largest = 0;
        for (const ShardRange& r : plan) {
          EXPECT_EQ(r.begin, next) << rows << " rows, " << shards << " shards, align " << align;
          EXPECT_GT(r.size(), 0u) << rows << " rows, " << shards << " shards, align " << align;
          next = r.end;
          smallest = std::min(smallest, r.size());
          largest = std::max(largest, r.size());
        }
        EXPECT_EQ(next, rows);
        // Whole blocks of `align` rows when every shard gets one, else of the lists' 256 rows (when 256 divides
        // align), else single rows.
        const std::size_t g = static_cast<std::size_t>(shards);
        const std::size_t unit = rows >= g * align                                  ? align
                                 : align % 256 == 0 && rows >= g * std::size_t(256) ? std::size_t(256)
                                                                                    : std::size_t(1);
        EXPECT_EQ(detail::shard_unit(rows, shards, align), unit) << rows << " rows, " << shards << " shards";
        EXPECT_LE(largest - smallest, unit) << rows << " rows, " << shards << " shards, align " << align;
        for (const ShardRange& r : plan) {
          EXPECT_EQ(r.begin % unit, 0u) << rows << " rows, " << shards << " shards, align " << align;
        }
      }
    }
  }
}

TEST(ShardPlan, AlignsBoundariesToBackendRowBlocks) {
  // 1M rows over 4 shards: blocks of 1024 rows, every boundary on a block, only the last shard's end partial.
  const std::vector<ShardRange> plan = detail::plan_shards(1000000, 4);
  EXPECT_EQ(plan[0], (ShardRange{0, 249856}));
  EXPECT_EQ(plan[1], (ShardRange{249856, 499712}));
  EXPECT_EQ(plan[2], (ShardRange{499712, 749568}));
  EXPECT_EQ(plan[3], (ShardRange{749568, 1000000}));
}

TEST(ShardPlan, RejectsImpossiblePlansNamingTheValues) {
  EXPECT_THROW(detail::plan_shards(10, 0), std::invalid_argument);
  try {
    detail::plan_shards(3, 4);
    FAIL() << "4 shards of 3 rows must be rejected";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("n = 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("got 4"), std::string::npos) << e.what();
  }
}

TEST(ShardOptions, CountsShardsAndRejectsContradictions) {
  BackendOptions o;
  EXPECT_EQ(detail::local_shard_count(o), 1);
  EXPECT_FALSE(detail::wants_sharding(o));
  o.shards = 3;
  EXPECT_EQ(detail::local_shard_count(o), 3);
  EXPECT_TRUE(detail::wants_sharding(o));
  o = {};
  o.devices = {2};
  EXPECT_EQ(detail::local_shard_count(o), 1);
  o.devices = {0, 1, 2, 3};
  EXPECT_EQ(detail::local_shard_count(o), 4);
  o.shards = 4;
  EXPECT_EQ(detail::local_shard_count(o), 4);
  o.shards = 2;
  EXPECT_THROW(detail::local_shard_count(o), std::invalid_argument);
  o = {};
  o.shards = -1;
  EXPECT_THROW(detail::local_shard_count(o), std::invalid_argument);
  o = {};
  o.devices = {0, -1};
  EXPECT_THROW(detail::local_shard_count(o), std::invalid_argument);
  o = {};
  o.ranks = 2;
  o.rank = 2;
  EXPECT_THROW(detail::local_shard_count(o), std::invalid_argument);
  o.rank = 1;
  EXPECT_EQ(detail::local_shard_count(o), 1);
  EXPECT_TRUE(detail::wants_sharding(o));
  o.devices = {0, 1};
  EXPECT_THROW(detail::local_shard_count(o), std::invalid_argument);
}

TEST(ShardOptions, ProblemRejectsMoreShardsThanRowsAndCpuRanks) {
  const TestProblem p = make_problem({.n = 3, .m = 5, .d = 2, .seed = 3});
  BackendOptions o;
  o.backend = BackendKind::kCpu;
  o.shards = 4;
  EXPECT_THROW(Problem(p.xv(), p.yv(), p.a, p.b, o), std::invalid_argument);
  o.shards = 0;
  o.ranks = 2;
  o.rank = 1;
  try {
    Problem problem(p.xv(), p.yv(), p.a, p.b, o);
    FAIL() << "a CPU problem over 2 ranks must be rejected";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("NCCL"), std::string::npos) << e.what();
  }
}

TEST(ShardCombine, EqualsTheSoftminOverAllRowsAtAnyScale) {
  std::mt19937_64 rng(41);
  for (double epsilon : {1e-3, 0.1, 10.0}) {
    for (double spread : {1.0, 1e2, 1e4}) {
      std::normal_distribution<double> normal(0.0, spread);
      std::vector<double> t(97);
      for (double& v : t) v = normal(rng);
      const double truth = direct_softmin(t, epsilon);
      for (int shards = 1; shards <= 5; ++shards) {
        const std::vector<ShardRange> plan = detail::plan_shards(t.size(), shards, 1);
        std::vector<double> h;
        for (const ShardRange& r : plan) h.push_back(direct_softmin({t.begin() + r.begin, t.begin() + r.end}, epsilon));
        const double combined = detail::combine_softmin(h, epsilon);
        // Large spreads at small ε would overflow a naive Σ exp(−h_s/ε); the max-stabilized form stays exact.
        ASSERT_TRUE(std::isfinite(combined)) << "ε " << epsilon << ", spread " << spread;
        EXPECT_NEAR(combined, truth, kCombineTol * std::max(1.0, std::abs(truth)))
            << "ε " << epsilon << ", spread " << spread << ", " << shards << " shards";
      }
    }
  }
}

TEST(ShardCombine, ShardsWithoutMassTakeNoPartAndNaNIsKept) {
  const double eps = 0.05;
  EXPECT_DOUBLE_EQ(detail::combine_softmin(std::vector<double>{kInf, 0.25, kInf}, eps), 0.25);
  EXPECT_EQ(detail::combine_softmin(std::vector<double>{kInf, kInf}, eps), kInf);
  EXPECT_TRUE(std::isnan(detail::combine_softmin(std::vector<double>{0.1, std::nan("")}, eps)));
  // Two equal halves: twice the mass, so ε·ln 2 lower.
  EXPECT_NEAR(detail::combine_softmin(std::vector<double>{0.3, 0.3}, eps), 0.3 - eps * std::log(2.0), kCombineTol);
}

TEST(ShardCombine, ColumnWiseCombinationChecksSizes) {
  const std::vector<float> s0{0.1f, 0.2f, 0.3f}, s1{0.3f, 0.2f, 0.1f}, short_one{0.0f};
  std::vector<double> out(3);
  const std::vector<std::span<const float>> ok{s0, s1};
  detail::combine_softmins(ok, 0.1, out);
  for (std::size_t j = 0; j < 3; ++j)
    EXPECT_NEAR(out[j], detail::combine_softmin(std::vector<double>{s0[j], s1[j]}, 0.1), kCombineTol);
  const std::vector<std::span<const float>> bad{s0, short_one};
  EXPECT_THROW(detail::combine_softmins(bad, 0.1, out), std::invalid_argument);
}

TEST(ShardCombine, MassSharesAreTheShardsFractionOfTheColumn) {
  const double eps = 0.2;
  std::vector<double> w(3);
  detail::shard_mass_shares(std::vector<double>{0.0, eps * std::log(2.0), kInf}, eps, w);
  // exp(0) : exp(−ln 2) : 0 = 2/3 : 1/3 : 0.
  EXPECT_NEAR(w[0], 2.0 / 3.0, kCombineTol);
  EXPECT_NEAR(w[1], 1.0 / 3.0, kCombineTol);
  EXPECT_EQ(w[2], 0.0);
  detail::shard_mass_shares(std::vector<double>{kInf, kInf, kInf}, eps, w);
  EXPECT_EQ(w, (std::vector<double>{0, 0, 0}));
  // Far-apart shards at small ε: no overflow, the nearer one takes (almost) everything.
  detail::shard_mass_shares(std::vector<double>{-500.0, 500.0, -499.99}, 1e-3, w);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, kCombineTol);
  EXPECT_GT(w[0], 0.99);
  EXPECT_THROW(detail::shard_mass_shares(std::vector<double>{0.0}, eps, w), std::invalid_argument);
}

TEST(ShardCombine, DeviceTwoAllReduceFormMatchesTheTruthInFp32) {
  // The combination in fp32, from each shard's m-vector of base-2 LSEs L_s: M = max_s L_s; e_s = lse_share(L_s, M);
  // S = Σ_s e_s; L = lse_total(M, S), with shards lacking mass in some columns. (The devices gather each shard's
  // (max, sum) pair instead and merge the pairs as the finalize kernel merges splits: the same arithmetic with
  // the shard's sum carried along; DeviceStep, engine/cuda/device_step.hpp.)
  std::mt19937_64 rng(43);
  std::normal_distribution<float> normal(0.0f, 300.0f);
  const int shards = 4;
  const std::size_t m = 257;
  std::vector<std::vector<float>> lse(shards, std::vector<float>(m));
  for (int s = 0; s < shards; ++s)
    for (std::size_t j = 0; j < m; ++j) lse[s][j] = (j % 7 == static_cast<std::size_t>(s)) ? -INFINITY : normal(rng);
  for (std::size_t j = 0; j < m; ++j) {
    float top = -INFINITY;
    for (int s = 0; s < shards; ++s) top = std::max(top, lse[s][j]);
    float sum = 0;
    for (int s = 0; s < shards; ++s) sum += detail::shard::lse_share(lse[s][j], top);
    const float device = detail::shard::lse_total(top, sum);
    double truth_top = -kInf;
    for (int s = 0; s < shards; ++s) truth_top = std::max(truth_top, double(lse[s][j]));
    double truth_sum = 0;
    for (int s = 0; s < shards; ++s) truth_sum += std::exp2(double(lse[s][j]) - truth_top);
    const double truth = truth_top + std::log2(truth_sum);
    EXPECT_NEAR(device, truth, kDeviceCombineRelTol * std::max(1.0, std::abs(truth))) << "column " << j;
  }
  // A column with no mass on any device stays −∞ (soft c-transform +∞), not NaN.
  EXPECT_EQ(detail::shard::lse_total(-INFINITY, detail::shard::lse_share(-INFINITY, -INFINITY)), -INFINITY);
}

/// Sets the launchers' variables for the scope of a test and puts back what the process had (the suite may itself
/// run under mpirun).
class LauncherEnvironment {
 public:
  LauncherEnvironment() {
    for (const char* name : kNames) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v == nullptr ? std::nullopt : std::optional<std::string>(v));
      unsetenv(name);
    }
  }
  ~LauncherEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value)
        setenv(name, value->c_str(), 1);
      else
        unsetenv(name);
    }
  }
  LauncherEnvironment(const LauncherEnvironment&) = delete;
  LauncherEnvironment& operator=(const LauncherEnvironment&) = delete;

 private:
  static constexpr const char* kNames[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "PMI_RANK",          "PMI_SIZE",          "MPI_LOCALRANKID",
                                           "SLURM_PROCID",      "SLURM_NTASKS",      "SLURM_LOCALID"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST(ProcessGroupTest, ReadsTheLaunchersEnvironment) {
  LauncherEnvironment env;
  ProcessGroup g = process_group_from_environment();
  EXPECT_EQ(g.rank, 0);
  EXPECT_EQ(g.ranks, 1);
  EXPECT_EQ(g.local_rank, 0);
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_LOCALID", "1", 1);
  g = process_group_from_environment();
  EXPECT_EQ(g.rank, 5);
  EXPECT_EQ(g.ranks, 8);
  EXPECT_EQ(g.local_rank, 1);
  // OpenMPI's variables win over Slurm's (mpirun inside a Slurm allocation sets both).
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
  g = process_group_from_environment();
  EXPECT_EQ(g.rank, 3);
  EXPECT_EQ(g.ranks, 4);
  EXPECT_EQ(g.local_rank, 3);
  setenv("OMPI_COMM_WORLD_RANK", "4", 1);
  EXPECT_THROW(process_group_from_environment(), std::invalid_argument);
  setenv("OMPI_COMM_WORLD_RANK", "two", 1);
  try {
    process_group_from_environment();
    FAIL() << "a rank that is not a number must be rejected";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("OMPI_COMM_WORLD_RANK"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("two"), std::string::npos) << e.what();
  }
}

TEST(ProcessGroupTest, RankOptionsDriveOneDevicePerRank) {
  const auto broadcast = [](void*, std::size_t) {};
  BackendOptions base;
  base.devices = {0, 1};
  base.shards = 2;
  base.precision = Precision::kFp32;
  const BackendOptions o = rank_options({2, 4, 1}, broadcast, base);
  EXPECT_EQ(o.backend, BackendKind::kCuda);
  EXPECT_EQ(o.rank, 2);
  EXPECT_EQ(o.ranks, 4);
  EXPECT_EQ(o.device, 1);
  EXPECT_TRUE(o.devices.empty());
  EXPECT_EQ(o.shards, 0);
  EXPECT_EQ(o.precision, Precision::kFp32);
  EXPECT_TRUE(static_cast<bool>(o.broadcast));
  EXPECT_EQ(detail::local_shard_count(o), 1);
  EXPECT_TRUE(detail::wants_sharding(o));
  EXPECT_THROW(rank_options({0, 2, 0}, nullptr), std::invalid_argument);
  EXPECT_THROW(rank_options({2, 2, 0}, broadcast), std::invalid_argument);
  EXPECT_NO_THROW(rank_options({0, 1, 0}, nullptr));
}

}  // namespace
}  // namespace flashot::test
