#pragma once
// flashot public API: entropic optimal transport between two point clouds for the squared Euclidean cost.
//
// Plain C++20 only: no CUDA, Qt, VTK, HDF5 or Boost types. All point arrays are row-major float32.
// Notation (docs/math.md): x (n×d) source points, y (m×d) target points, a (n), b (m) weights, ε > 0,
// cost C_ij = s·‖x_i − y_j‖² with s = 1 (Cost::kSquaredEuclidean) or s = ½ (Cost::kHalfSquaredEuclidean),
// dual potentials f (n), g (m), plan P_ij = a_i b_j exp((f_i + g_j − C_ij)/ε).
// Nothing of size n×m is ever allocated, by any backend, for any operation.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace flashot {

/// A read-only view of `n` points in `d` dimensions: `data` holds n·d float32 values, row-major.
struct PointsView {
  std::span<const float> data;
  std::size_t n = 0;
  std::size_t d = 0;
};

/// A read-only view of `n` points in `d` dimensions resident on CUDA device `device`: `data` is a device pointer to
/// n·d float32 values, row-major (a torch / CuPy tensor's memory, a cudaMalloc buffer). Only Problem::on_device
/// takes it; the engine copies the points device-to-device while the Problem is built and keeps no reference.
struct DevicePointsView {
  const float* data = nullptr;
  std::size_t n = 0;
  std::size_t d = 0;
  int device = 0;
};
/// Optional weights on a CUDA device for Problem::on_device: `data` null = uniform 1/n. `n` values, float32.
struct DeviceWeights {
  const float* data = nullptr;
  std::size_t n = 0;
  int device = 0;
};

enum class Cost { kSquaredEuclidean, kHalfSquaredEuclidean };
/// Symmetric: f and g updated together from the old pair, then averaged with it (GeomLoss).
/// Alternating: f from g, then g from the new f (Sinkhorn / OTT).
enum class Scheme { kSymmetric, kAlternating };
enum class BackendKind { kAuto, kCpu, kCuda };
/// Arithmetic of the score dot products on the CUDA backend (the CPU backend always uses fp32 with fp32/fp64
/// accumulation). kDefault picks per d what meets the documented accuracy (docs/accuracy.md).
enum class Precision { kDefault, kFp32, kTf32, kBf16 };
/// Tile screening of the CUDA backend's default (split fp16) tensor-core scores, 16 ≤ d ≤ 128 (docs/engine.md):
/// a tile whose every entry provably lies 2^26+ below what its sums keep is dropped after one of its three
/// products. Results equal the unscreened ones to fp32 rounding. kAuto screens while at most half of the tiles
/// are kept (small ε relative to the spread of the costs) and runs the unscreened kernels otherwise; kOff never
/// screens; kOn always does. Other paths and the CPU backend ignore it.
enum class Screening { kAuto, kOff, kOn };
/// Which kernel family evaluates the CUDA backend's scores (docs/engine.md, "Choosing the kernel"). kAuto picks the
/// measured fastest for d, n, m and the precision from the table in the repository; the others force a family,
/// for benchmarks and for measuring that table (`flashot bench --kernel`): kRegister (fp32, rows in registers,
/// d ≤ 16), kTiled (fp32 tiles, any d), kTensor (tensor cores, d ≤ 128, not with Precision::kFp32), kTensorBias
/// (kTensor whose one-pass sums also take the potentials' biases from the tensor cores, d ≤ 30, Precision::kDefault
/// only; on a GPU without the warpgroup kernels it is kTensor). The CPU backend ignores it.
enum class ScoreKernel { kAuto, kRegister, kTiled, kTensor, kTensorBias };
/// How the CUDA backend's warpgroup kernels with two m64 subtiles per warpgroup (d ≤ 16 on a Hopper GPU: the dense
/// LSE, the one-pass sums and their biased form at d ≤ 14) wait for a column tile's wgmma products (docs/engine.md,
/// "Overlapping the subtiles"). kOff: both subtiles' products, then their sums. kWithinTile: one wgmma group per
/// subtile; subtile 0 is summed while subtile 1's products run. kAcrossTiles (the default): kWithinTile, and the
/// next tile's subtile 0 is multiplied while subtile 1 is summed. The same products summed in the same order every
/// way.
enum class SubtileOverlap { kOff, kWithinTile, kAcrossTiles };
/// Instruction set of the CPU backend's kernels (engine/cpu/kernels_<isa>.cpp). kAuto: the widest this CPU runs.
/// Naming one the CPU lacks makes the Problem throw std::runtime_error.
enum class CpuIsa { kAuto, kGeneric, kAvx2, kAvx512 };
/// Multiscale block-sparse solving (SolveOptions::multiscale, docs/multiscale.md): kAuto picks it when n·m is at
/// least the backend's threshold (kMultiscaleAutoPairs on the CPU, kMultiscaleAutoPairsCuda on GPUs) and the solve
/// stops on a tolerance; kOn always (small problems may still fall back to dense stages); kOff never.
enum class Multiscale { kAuto, kOn, kOff };
/// The order in which the engine holds each side's points (BackendOptions::point_order, docs/engine.md, "Point
/// order"). kLocality sorts each side internally so that nearby points are neighbours (the leaf order of a PCA tree,
/// engine/src/multiscale_tree.hpp), solves in that order and returns every per-point result in the caller's order:
/// a tile of consecutive points then covers one region, so the CUDA backend's tile screen can skip the tiles of far
/// regions (clustered data). kInput keeps the caller's order. kAuto: kLocality for clustered host inputs on the CUDA
/// backend from n·m ≥ 10⁹ pairs and d ≥ 5 (clustered: both sides' leaves hold at most a tenth of their spread;
/// docs/engine.md says why), kInput otherwise. Results equal those in the caller's order up to the order of fp
/// summations. Device inputs (Problem::on_device) keep their order (kLocality is refused there).
enum class PointOrder { kAuto, kInput, kLocality };
/// Why a solve stopped.
enum class StopReason {
  kTolerance,        ///< marginal error ≤ tolerance at a check of the final ε stage: converged
  kIterationBudget,  ///< max_iterations spent in the final stage without reaching the tolerance
  kFixedIterations,  ///< fixed-ε mode with tolerance 0: ran exactly the iterations asked for
  kNonFinite,        ///< a potential or marginal became NaN/Inf; SolveResult::message names the stage
  kCancelled,        ///< the progress callback returned false
};
enum class Side { kSource, kTarget };

std::string to_string(Cost);
std::string to_string(Scheme);
std::string to_string(BackendKind);
std::string to_string(Precision);
std::string to_string(Screening);
std::string to_string(ScoreKernel);
std::string to_string(SubtileOverlap);
std::string to_string(StopReason);
std::string to_string(CpuIsa);
std::string to_string(Multiscale);
std::string to_string(PointOrder);
/// Parse the names printed by to_string ("cpu", "symmetric", …). Throws std::invalid_argument naming the text.
BackendKind parse_backend(const std::string&);
Scheme parse_scheme(const std::string&);
Precision parse_precision(const std::string&);
Screening parse_screening(const std::string&);
ScoreKernel parse_score_kernel(const std::string&);
SubtileOverlap parse_subtile_overlap(const std::string&);
CpuIsa parse_cpu_isa(const std::string&);
Multiscale parse_multiscale(const std::string&);
PointOrder parse_point_order(const std::string&);

/// Reported to the progress callback at every marginal-error check.
struct Progress {
  int stage = 0;               ///< 0-based index of the ε stage
  int stage_count = 0;         ///< number of ε stages in the schedule
  double epsilon = 0;          ///< ε of the current stage (cost units)
  int iteration = 0;           ///< iterations done so far, all stages together
  int max_iterations = 0;      ///< upper bound on `iteration` for the whole solve
  double marginal_error = 0;   ///< see SolveResult::marginal_error
  /// A multiscale solve's coarser level (cluster centres) settling at this ε before the points' stage: the error is
  /// that coarse problem's (docs/multiscale.md, "Schedule"). false for every check of the points themselves.
  bool coarse = false;
};
/// Return false to stop the solve; it then ends with StopReason::kCancelled (not an exception).
using ProgressCallback = std::function<bool(const Progress&)>;

/// Kernel choices of the CUDA backend a caller may change (docs/engine.md, "Tuning and statistics"). The defaults
/// are what the benchmarks settled on; results agree within fp32 rounding whatever is chosen. Plain types only.
/// Nothing here is read from the environment: the engine has no environment switches (the MPI launchers' rank
/// variables read by process_group_from_environment() describe the job, not the engine's arithmetic).
struct CudaTuning {
  /// On a Hopper GPU with an sm_90a build, the split-fp16 tensor-core sites run the warpgroup (wgmma) kernels;
  /// false keeps the mma.sync kernels there too (comparisons; scripts/gpu-check.sh runs the screened tests both
  /// ways). Ignored elsewhere.
  bool warpgroup_kernels = true;
  /// Forces a score kernel family (benchmarks and the dispatch table: `flashot bench --kernel`); kAuto, the
  /// measured choice, everywhere else. A family that cannot serve d makes the Problem throw std::invalid_argument.
  ScoreKernel kernel = ScoreKernel::kAuto;
  /// The hard c-transform (Problem::c_transform) on the warpgroup kernels: true scores every pair with one
  /// fp16 product first and scores again, with the three split products, only the rows that product's error bound
  /// leaves undecided; false scores every pair with the three products (comparisons). The argmins are exact either
  /// way (docs/engine.md, "Hard c-transform"). Ignored elsewhere.
  bool c_transform_cascade = true;
  /// The hard c-transform's register pass at d ≤ 4: columns scored per test of the rows' candidate lists, 1, 2 or
  /// 4; 0 = the default (2, the fastest on the H200: docs/engine.md). Results are identical whatever is chosen.
  /// Ignored elsewhere.
  int c_transform_columns = 0;
  /// The hard c-transform's register pass at d ≤ 4: true orders both sides along a Morton curve, gives every tile of
  /// 128 consecutive columns its bounding box and largest potential, and lets a block of rows skip every tile that
  /// cannot score above any of its rows' candidate lists (docs/engine.md, "Hard c-transform"); false scans every
  /// column in the given order. Results are identical either way. Ignored elsewhere.
  bool c_transform_tiles = true;
  /// With c_transform_tiles: rows per thread of the register pass, 2, 4 or 8 (a block of 128 threads holds 128
  /// times as many rows, whose spread decides which tiles it skips); 0 = the default (2, the fastest on the H200:
  /// docs/engine.md). Results are identical whatever is chosen. Ignored elsewhere.
  int c_transform_tile_rows = 0;
  /// The warpgroup kernels whose warpgroups hold two m64 subtiles (d ≤ 16 on a Hopper GPU: the dense LSE, the
  /// one-pass sums and their biased form at d ≤ 14): how they wait for a tile's products (SubtileOverlap). The
  /// same products summed in the same order: results equal every way up to the order of the kernels' atomic
  /// additions (docs/engine.md, "Overlapping the subtiles"). On the H200 kWithinTile measured 1–3 % faster than
  /// kOff, kAcrossTiles 3–7 % faster than kWithinTile (the alternating scheme 9.5 %), so kAcrossTiles is the
  /// default. `flashot bench --subtile-overlap off|on|across`. Ignored elsewhere.
  SubtileOverlap subtile_overlap = SubtileOverlap::kAcrossTiles;
};

/// Where the problem lives and how it computes. Fixed when the Problem is built.
struct BackendOptions {
  BackendKind backend = BackendKind::kAuto;  ///< kAuto: CUDA when a device is present, else CPU
  int threads = 0;                           ///< CPU threads; 0 = all hardware threads
  int device = 0;                            ///< CUDA device ordinal
  Precision precision = Precision::kDefault;
  Screening screening = Screening::kAuto;
  CpuIsa cpu_isa = CpuIsa::kAuto;  ///< the CPU backend's kernels (tests, comparisons)
  /// Each side's internal point order (PointOrder): every result is returned in the caller's order either way.
  PointOrder point_order = PointOrder::kAuto;
  CudaTuning cuda;                 ///< the CUDA backend's kernel choices
  // ---- Sharding one problem over several devices (docs/multi-gpu.md) ----------------------------------------
  /// CUDA device ordinals to spread one problem over. Empty or one entry: one device (`device`, or that entry).
  /// Several: the rows of x are cut into devices.size() contiguous balanced shards, one per device; each device
  /// holds all of y. Results equal the one-device results within rounding. CUDA only (kCuda or kAuto with CUDA).
  std::vector<int> devices;
  /// Shards of x's rows for one process; 0 = one per entry of `devices` (or no sharding). On the CPU the shards
  /// run one after another on the same threads (the host-side logic of the multi-GPU path, tested in CI).
  /// With several `devices` it must be 0 or devices.size().
  int shards = 0;
  /// CUDA shards: combine the per-device partial column log-sum-exps on the devices with NCCL collectives (no
  /// host round-trip per iteration). false: combine on the host (no NCCL involved; slower, same results).
  bool nccl = true;
  /// Multi-process runs (MPI ranks, one GPU each; see flashot/distributed.hpp): this process's rank and the
  /// number of ranks. Every rank builds the same Problem from all of x and y; rank r computes only shard r of x's
  /// rows, on `device`, and NCCL (bootstrapped through MPI) combines the ranks. ranks = 1: a single process.
  int rank = 0;
  int ranks = 1;
  /// ranks > 1: hands `size` bytes from rank 0 to every rank, e.g. an MPI_Bcast from rank 0 over MPI_COMM_WORLD
  /// (flashot/distributed.hpp). It carries only NCCL's bootstrap id (made on rank 0); the data moves through NCCL.
  std::function<void(void* bytes, std::size_t size)> broadcast;
};

/// The blur relative to the data's diameter that `flashot align`, `flow` and flashot-gui use unless told otherwise
/// (SolveOptions::blur_relative): the unit-free counterpart of GeomLoss's blur 0.05 on data scaled to the unit cube.
inline constexpr double kDefaultBlurRelative = 0.05;

/// SolveOptions::overrelaxation: estimate ω from the checks (the default).
inline constexpr double kOverrelaxationAuto = 0;

struct SolveOptions {
  Cost cost = Cost::kSquaredEuclidean;
  /// Target blur: the final ε is blur² (in cost units). Ignored when `epsilon` > 0 or `blur_relative` > 0.
  double blur = 0.05;
  /// > 0: the blur relative to the data's diameter (`diameter` below: given, or the engine's own), so the final ε is
  /// (blur_relative · diameter)² and unit-free data need no tuning; kDefaultBlurRelative is what the flashot front
  /// ends use. Takes precedence over `blur`; ignored when `epsilon` > 0. Throws at solve when the diameter is 0.
  double blur_relative = 0;
  /// > 0: fixed ε, no ε-scaling (potentials start at zero, or at `initial_f/g`).
  double epsilon = 0;
  /// ε-scaling: ε_0 = s·diameter², ε_{k+1} = ε_k · scaling², down to blur². In (0, 1).
  double scaling = 0.5;
  /// 0: the diameter of the union of both clouds' bounding box. Otherwise used as given.
  double diameter = 0;
  /// Iterations at each intermediate ε stage (the final stage iterates until tolerance or budget).
  int stage_iterations = 1;
  /// Stop when marginal_error ≤ tolerance (checked every `check_every` iterations of the final stage).
  /// 0 disables the check (fixed-ε benchmark mode runs exactly max_iterations).
  double tolerance = 1e-3;
  int check_every = 10;
  /// Budget of iterations for the final stage.
  int max_iterations = 1000;
  Scheme scheme = Scheme::kSymmetric;
  /// Over-relaxation ω of the final ε stage's updates (docs/engine.md, "Over-relaxation"): each update moves the
  /// potentials ω times as far as the plain one, f ← f + ω·w·(λ·softmin(g) − f) with w = 1 (alternating) or ½
  /// (symmetric). 1: off (the plain iteration). In (1, 2): that fixed ω. kOverrelaxationAuto (0): ω estimated
  /// from the marginal errors of the checks (the plain rate r gives ω = 2/(1+√(1−r)) alternating, 2/(2−r)
  /// symmetric), backing off toward 1 whenever the error grows. Needs checks (tolerance > 0 or a progress
  /// callback); without them auto runs the plain iteration.
  double overrelaxation = kOverrelaxationAuto;
  /// Auto mode's ω before its first estimate, in [1, 2): a warm-started solve of a similar problem can begin at
  /// the last one's SolveResult::overrelaxation (fused GW's inner solves do). The safeguard backs it off as any ω.
  double overrelaxation_start = 1;
  /// Unbalanced OT: KL penalty strength ρ = reach² (cost units, like ε) on both marginals; 0 = balanced.
  double reach = 0;
  /// Per side; 0 = take `reach`. A side with reach 0 after that is balanced (semi-unbalanced problems).
  double reach_source = 0;
  double reach_target = 0;
  /// Warm start (optional): sizes n and m, or empty.
  std::vector<float> initial_f;
  std::vector<float> initial_g;
  ProgressCallback progress;
  /// After the iterations, compute the final marginal error (two soft c-transforms) and the primal cost ⟨P, C⟩
  /// (one plan application): about 1–3 iterations' worth of work. false leaves both NaN — for timing loops that
  /// compare iterations with other libraries' iterations (`flashot bench`).
  bool diagnostics = true;
  // ---- Multiscale block-sparse solving (docs/multiscale.md) ------------------------------------------------------
  /// kAuto: multiscale when n·m ≥ kMultiscaleAutoPairs (CPU) / kMultiscaleAutoPairsCuda (GPUs) and tolerance > 0
  /// (a fixed count of iterations at a fixed ε is the dense solver's); kOn: always; kOff: every pair visited at
  /// every iteration.
  Multiscale multiscale = Multiscale::kAuto;
  /// Certified truncation level τ: a (row block, column block) pair is skipped only when a bound proves every plan
  /// entry in it is ≤ e^{−τ}·a_i·b_j / max(1, total mass), so the mass skipped per row is ≤ e^{−τ} of the row's
  /// weight. > 0, or 0 (the default) for automatic: τ = clamp(ln(10³ / tolerance), 10, 20) — 11.5 at tolerance
  /// 10⁻², 16.1 at 10⁻⁴, 20 (far below the fp32 resolution of the cost) at tolerance 0 — so that the skipped mass
  /// stays a thousandth of the tolerance (docs/multiscale.md, "Truncation"). MultiscaleReport::truncation says which.
  double multiscale_truncation = 0;
  /// A stage whose kept fraction of block pairs is above this runs dense instead (pruning does not pay). In (0, 1].
  double multiscale_dense_fraction = 0.5;
  /// Seed of the clustering (k-means / PCA-tree splits for d > 4); results depend on it only within the truncation.
  std::uint64_t multiscale_seed = 0;
};

/// SolveOptions::multiscale = kAuto runs multiscale from this many point pairs n·m up on the CPU backend (measured:
/// docs/multiscale.md).
inline constexpr double kMultiscaleAutoPairs = 1.0e10;
/// The same on the CUDA backend, where a dense iteration at 10¹⁰ pairs takes 3–6 ms (docs/multiscale.md, "Auto").
inline constexpr double kMultiscaleAutoPairsCuda = 1.0e12;

struct StageReport {
  double epsilon = 0;
  int iterations = 0;
};
/// One stage of a multiscale solve on one level: which share of the (row block, column block) pairs its iterations
/// visited. With a tolerance, the coarser level also settles at the points' first ε before its potentials come
/// down: a `coarse` entry with the same ε as the next one (SolveResult::stages counts both in that ε's iterations).
struct MultiscaleStage {
  double epsilon = 0;
  int iterations = 0;
  bool coarse = false;             ///< solved on cluster centres (weighted by cluster mass), not on the points
  bool dense = false;              ///< ran dense: pruning did not pay (kept fraction > multiscale_dense_fraction)
  unsigned long long kept_pairs = 0;   ///< block pairs visited (cluster pairs on a coarse stage)
  unsigned long long total_pairs = 0;  ///< all block pairs
  double kept_fraction = 1;        ///< share of the n·m point pairs inside the visited block pairs
  int rechecks = 0;                ///< times the block lists were re-derived from moved potentials in this stage
  /// Iterations undone and run again on wider lists: one iteration rose by over τ·ε and the lists certified for its
  /// input and output added pairs (docs/multiscale.md, "Watched iterations"). Their lists count in rechecks.
  int redone = 0;
  /// The largest rise of one iteration's potentials over its input, rows and columns together, in units of ε (before
  /// any redo): a few ε in the normal course of a solve, tens or more where the stage started from potentials whose
  /// lists lacked pairs its first iterations needed. 0 for a stage without lists.
  double largest_rise = 0;
};
/// What a multiscale solve did (SolveResult::multiscale); `used` false for a dense solve.
struct MultiscaleReport {
  bool used = false;
  std::string reason;              ///< why multiscale was or was not used
  std::string hierarchy;           ///< "morton" (d ≤ 4) or "pca-tree"
  std::size_t row_block = 0, column_block = 0;   ///< points per block on each side
  std::size_t row_blocks = 0, column_blocks = 0;
  std::size_t coarse_rows = 0, coarse_columns = 0;  ///< clusters of the coarse problem
  double truncation = 0;           ///< τ used (SolveOptions::multiscale_truncation, or the automatic one)
  double dense_fraction = 0;       ///< SolveOptions::multiscale_dense_fraction
  /// True when the final lists were re-derived from the final potentials and nothing outside them can exceed the
  /// threshold (SolveOptions::multiscale_truncation); false when the budget ran out first.
  bool certified = false;
  double hierarchy_seconds = 0;    ///< building both cluster hierarchies
  double pattern_seconds = 0;      ///< deriving block lists, all stages together
  std::vector<MultiscaleStage> stages;
};
struct MarginalCheck {
  int iteration = 0;  ///< total iterations done when the check ran
  double epsilon = 0;
  double error = 0;
  double overrelaxation = 1;  ///< the ω of the iterations before this check (SolveOptions::overrelaxation)
};

struct SolveResult {
  std::vector<float> f;  ///< (n) dual potential on the source, cost units
  std::vector<float> g;  ///< (m) dual potential on the target, cost units
  Cost cost = Cost::kSquaredEuclidean;
  double epsilon = 0;       ///< the final ε
  double diameter = 0;      ///< the diameter the ε schedule and `blur_relative` used (SolveOptions::diameter or the data's)
  double reach_source = 0;  ///< effective ρ per side (0 = balanced)
  double reach_target = 0;
  /// Dual objective: ⟨a,f⟩ + ⟨b,g⟩ (balanced); ⟨a, ρ_x(1−e^{−f/ρ_x})⟩ + ⟨b, ρ_y(1−e^{−g/ρ_y})⟩ (unbalanced).
  double dual_cost = 0;
  /// Primal transport cost ⟨P, C⟩ of the current plan (without the entropy term).
  double primal_cost = 0;
  bool converged = false;
  StopReason reason = StopReason::kIterationBudget;
  std::string message;  ///< human-readable reason, naming the stage for kNonFinite
  /// ‖P1 − a⊙e^{−f/ρ_x}‖₁ + ‖Pᵀ1 − b⊙e^{−g/ρ_y}‖₁, divided by the total mass of a (e^{…} = 1 when balanced).
  double marginal_error = 0;
  int iterations = 0;  ///< all stages together
  /// The over-relaxation ω of the final stage's last iterations (1: plain; SolveOptions::overrelaxation).
  double overrelaxation = 1;
  std::vector<StageReport> stages;
  std::vector<MarginalCheck> checks;
  double seconds = 0;   ///< wall time of the solve
  std::string backend;  ///< "cpu" or "cuda"
  std::string device;   ///< e.g. "2 threads, AVX2" or "NVIDIA H200 (sm_90)"
  /// Multiscale block-sparse solve report (docs/multiscale.md); plan operations on a result with `used` visit the
  /// certified block pairs of its potentials only.
  MultiscaleReport multiscale;
};

/// What the CUDA backend's adaptive kernels did since the Problem was built (Problem::statistics). Counts, never
/// timings; zero on the CPU backend. Over several shards: the steps once (every shard takes the same steps), the
/// screened tiles summed over the shards this process drives.
struct ScreenSiteStatistics {
  unsigned long long kept_tiles = 0;  ///< warp tiles that the screened kernels summed
  unsigned long long seen_tiles = 0;  ///< warp tiles that the screened kernels looked at
  bool next_screened = false;         ///< whether the site's next launch runs screened (else dense)
};
struct EngineStatistics {
  /// Symmetric one-exponential steps (docs/engine.md): stood in one pass (of which `shifted_steps` with a shift),
  /// skipped their sums (the forecast or the cold probe sent them to the two-pass reductions), or computed their
  /// sums and were redone.
  long long one_pass_steps = 0, shifted_steps = 0, skipped_steps = 0, redone_steps = 0;
  /// Of the steps that stood in one pass, those that redid some points alone (their sums had left the trusted range:
  /// a launch's first step, far from the fixed point), and how many points that was over all of them (CUDA, one GPU).
  long long steps_with_strays = 0, strays = 0;
  /// Tile screening (Screening) of the three sites; all zero when the problem is not screened.
  bool screened = false;
  ScreenSiteStatistics rows_lse, columns_lse, sums;
  /// Bytes of the caller's inputs (x, y and the weights given) that passed through host memory on their way to the
  /// backend since the Problem was built: (n+m)·d·4 plus 4 per given weight for a Problem built from host arrays
  /// (the engine centres and validates them on the host); 0 for Problem::on_device, with uniform or device weights,
  /// whatever operations run (solve with diagnostics, every plan operation, gradient): device weights are validated
  /// by a scan kernel and the Sinkhorn loop's weighted sums are taken on the device (docs/engine.md,
  /// "Device-resident inputs"). Counted on every backend.
  unsigned long long input_host_bytes = 0;
  /// The last hard c-transform (Problem::c_transform) on the CUDA backend, summed over shards: rows scored again by
  /// the cascade's second pass (CudaTuning::c_transform_cascade), rows re-scanned over all columns (near ties that
  /// the candidate lists could not decide). Zero on the CPU backend and before any c-transform.
  long long c_transform_rescored = 0, c_transform_rescanned = 0;
};

/// Class mass per point after transporting labels through the plan.
struct LabelTransfer {
  std::size_t points = 0;
  std::size_t classes = 0;
  std::vector<float> probabilities;  ///< (points × classes), rows sum to 1 (or 0 if a point got no labelled mass)
  std::vector<std::int32_t> label;   ///< argmax class, −1 if no labelled mass arrived
  std::vector<float> confidence;     ///< the argmax probability
  std::vector<float> entropy;        ///< Shannon entropy of the row, nats
};

/// The k largest plan entries of every row (source point), sorted by decreasing mass.
struct TopKCoupling {
  std::size_t rows = 0;
  std::size_t k = 0;                  ///< min(k asked, m)
  std::vector<std::int32_t> columns;  ///< (rows × k) target indices
  std::vector<float> values;          ///< (rows × k) plan entries P_ij
};

/// The hard c-transform of one side (Problem::c_transform, docs/engine.md "Hard c-transform"): for every point i of
/// that side, value_i = min_j (C_ij − h_j) over every point j of the other side, and the argmin j* (the lowest
/// index among exact ties). Semi-dual and semi-discrete OT, hard assignments from (soft) potentials.
struct CTransform {
  Side rows = Side::kSource;          ///< the side whose points were minimised for
  Cost cost = Cost::kSquaredEuclidean;
  std::vector<float> values;          ///< (count) min_j (C_ij − h_j), cost units
  std::vector<std::int32_t> index;    ///< (count) the argmin j* on the other side
};
/// Gradients of the hard c-transform (almost everywhere: where the argmin is unique), as a vector-Jacobian product
/// with a cotangent w (one weight per value; empty = all ones): ∂value_i/∂p_i = 2s(p_i − q_{j*}), ∂value_i/∂h = −e_{j*}.
struct CTransformGradient {
  std::vector<float> points;     ///< (count × d) w_i · 2s(p_i − q_{j*_i}): the gradient w.r.t. the minimised side
  std::vector<float> potential;  ///< (other side's count) −Σ_{i: j*_i = j} w_i: the gradient w.r.t. h
  std::vector<float> other;      ///< (other side's count × d) −Σ_{i: j*_i = j} w_i·2s(p_i − q_j): w.r.t. the other side
};

/// An OT problem resident on one backend: points and weights are copied in once, then solved and queried.
/// Not thread-safe: use one Problem per thread. Movable, not copyable.
class Problem {
 public:
  /// x (n×d) source, y (m×d) target; a (n), b (m) non-negative weights, or empty for uniform 1/n, 1/m.
  /// Throws std::invalid_argument naming the input and value for: empty sets, d mismatch or 0, data size not n·d,
  /// non-finite coordinates (names the row), negative or non-finite weights (names the index), zero total mass,
  /// weight vectors of the wrong size. Throws std::runtime_error when the backend asked for is unavailable.
  Problem(PointsView x, PointsView y, std::span<const float> a = {}, std::span<const float> b = {},
          const BackendOptions& options = {});
  /// A Problem from points already on a CUDA device (docs/engine.md, "Device-resident inputs"): x and y must be on
  /// the same device, which must be `options.device`; the CUDA backend runs it on that one device (kAuto or kCuda).
  /// The points are validated (finite, named row and column: the same messages as the host constructor), bounded,
  /// centred and copied device-to-device into the backend's own buffers without passing through host memory
  /// (EngineStatistics::input_host_bytes stays 0); the caller's memory is read only while this runs, and must hold
  /// its values by then (work queued on the device's legacy default stream, or on any blocking stream, is waited
  /// for; other streams must be synchronized by the caller). Every operation of a host-built Problem is available
  /// and gives the same results. Weights: null = uniform; device weights stay on the device (validated by a scan
  /// kernel, copied device-to-device, the loop's weighted sums taken there). Throws std::invalid_argument as the
  /// host constructor (and for pointers that are not device memory on that device), std::runtime_error for the CPU
  /// backend ("a device-input Problem needs the CUDA backend …"), several devices, shards or ranks ("multi-GPU
  /// solves take host inputs …"), or a build without CUDA.
  static Problem on_device(DevicePointsView x, DevicePointsView y, DeviceWeights a = {}, DeviceWeights b = {},
                           const BackendOptions& options = {});
  ~Problem();
  Problem(Problem&&) noexcept;
  Problem& operator=(Problem&&) noexcept;
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  std::size_t n() const;
  std::size_t m() const;
  std::size_t d() const;
  std::string backend_name() const;  ///< "cpu" / "cuda"
  std::string device_name() const;
  /// What the backend's adaptive kernels did so far (EngineStatistics; zero on the CPU).
  EngineStatistics statistics() const;
  /// Diagonal of the bounding box of both clouds together (data units): what ε-scaling and `blur_relative` use
  /// unless SolveOptions::diameter is given.
  double diameter() const;

  /// Runs the ε-scaling (or fixed-ε) Sinkhorn loop. Throws std::invalid_argument for bad options (ε ≤ 0,
  /// scaling ∉ (0,1), negative reach, …). Non-convergence and non-finite values are reported, not thrown.
  SolveResult solve(const SolveOptions& options);

  // ---- Operations on a solved problem: all streaming, O((n+m)·(d+k)) memory. -------------------------------
  /// P·V: V is (m×k) row-major, result (n×k). Chunked over columns for large k.
  std::vector<float> apply_plan(const SolveResult& s, std::span<const float> v, std::size_t k) const;
  /// Pᵀ·U: U is (n×k), result (m×k).
  std::vector<float> apply_plan_transpose(const SolveResult& s, std::span<const float> u, std::size_t k) const;
  /// Row sums P·1 (n) and column sums Pᵀ·1 (m).
  std::vector<float> row_marginal(const SolveResult& s) const;
  std::vector<float> column_marginal(const SolveResult& s) const;
  /// Barycentric projection: from = kSource gives T(x_i) = (P Y)_i / (P 1)_i, (n×d); kTarget gives (Pᵀ X)_j/(Pᵀ1)_j.
  std::vector<float> barycentric(const SolveResult& s, Side from) const;
  /// Out-of-sample entropic map of new points on side `from` through the other side's potential (no re-solve):
  /// T(q) = Σ_j softmax_j(log b_j + (g_j − C(q, y_j))/ε) y_j for from = kSource. Result (queries.n × d).
  std::vector<float> map_points(const SolveResult& s, PointsView queries, Side from) const;
  /// Labels live on side `labels_on` (one per point, in [0, classes) or −1 = missing); the mass is transported
  /// to the other side. Throws std::invalid_argument for a wrong size, classes = 0, or a label ≥ classes.
  LabelTransfer transfer_labels(const SolveResult& s, Side labels_on, std::span<const std::int32_t> labels,
                                std::size_t classes) const;
  /// ∇_x of the regularized OT cost (Danskin): (n×d) = s·2·(r_i x_i − (P Y)_i); likewise ∇_y (m×d).
  std::vector<float> gradient(const SolveResult& s, Side wrt) const;
  /// Top-k entries of every row of P. Throws std::invalid_argument for k = 0.
  TopKCoupling top_k(const SolveResult& s, std::size_t k) const;

  /// Hard c-transform of side `rows` against the other side's potential h (m values for rows = kSource, n for
  /// kTarget; cost units), with cost C = s‖x − y‖² of `cost`: value_i = min_j (C_ij − h_j) and its argmin. Streaming,
  /// O((n + m)·d) memory. Values are fp64 direct differences at the argmin, the argmin exact to fp64 (near ties of
  /// the fast scores are re-decided in fp64). Throws std::invalid_argument for a wrong size or non-finite h.
  CTransform c_transform(Side rows, std::span<const float> h, Cost cost = Cost::kSquaredEuclidean) const;
  /// The same through a solution's potentials: rows = kSource minimises C_ij − g_j, kTarget C_ij − f_i.
  CTransform c_transform(const SolveResult& s, Side rows) const;
  /// Gradients of Σ_i w_i·value_i (CTransformGradient) for a c-transform of this problem; w empty = all ones.
  /// Throws std::invalid_argument when t does not match this problem or w has the wrong size.
  CTransformGradient c_transform_gradient(const CTransform& t, std::span<const float> w = {}) const;

  struct Impl;

 private:
  Problem() = default;
  std::unique_ptr<Impl> impl_;
};

/// Debiased Sinkhorn divergence S(a,b) = OT(a,b) − ½OT(a,a) − ½OT(b,b) (dual costs), three solves with the
/// same options. Throws as Problem and Problem::solve.
struct DivergenceResult {
  double divergence = 0;
  SolveResult xy, xx, yy;
};
DivergenceResult sinkhorn_divergence(PointsView x, PointsView y, std::span<const float> a, std::span<const float> b,
                                     const SolveOptions& options, const BackendOptions& backend = {});
/// The same from points on a CUDA device: its three Problems are built with Problem::on_device (throws as that).
DivergenceResult sinkhorn_divergence_on_device(DevicePointsView x, DevicePointsView y, DeviceWeights a,
                                               DeviceWeights b, const SolveOptions& options,
                                               const BackendOptions& backend = {});

/// Backends compiled in and usable on this machine ("cpu", and "cuda" when a device answers).
std::vector<std::string> available_backends();
/// True when the CUDA backend was compiled in AND a device is present (a missing driver counts as no device).
bool cuda_available();
/// The library version, e.g. "0.1.0".
std::string version();

/// Device memory the CUDA backend holds in this process, over every device: now and the most held at once since
/// the process started (points, potentials, scratch; not the CUDA context or graphs). Zeros without CUDA.
struct DeviceMemory {
  std::size_t current_bytes = 0;
  std::size_t peak_bytes = 0;
};
DeviceMemory device_memory();

}  // namespace flashot
