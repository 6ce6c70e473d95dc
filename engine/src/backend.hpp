#pragma once
// The backend interface: what one device must do for the engine. Private to the engine.
//
// The Sinkhorn loop (engine/src/sinkhorn.cpp) is written once over these operations; each backend (cpu/, cuda/)
// implements them with tiled streaming kernels. Every operation is a variant of one primitive, the biased
// log-sum-exp over the other side ("soft c-transform", docs/design.md §1):
//   softmin_rows(h)_i = −ε · LSE_j [ log b_j + (h_j − C_ij)/ε ]          (n values; h = g)
//   softmin_cols(h)_j = −ε · LSE_i [ log a_i + (h_i − C_ij)/ε ]          (m values; h = f)
// and, for plan application, the same tile loop accumulating weighted rows of a value matrix.
// No operation allocates anything of size n×m.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "block_pattern.hpp"
#include "flashot/flashot.hpp"

namespace flashot::detail {

/// Host copies of the validated problem, handed to a backend once.
struct ProblemData {
  PointsView x;                // (n×d)
  PointsView y;                // (m×d)
  std::span<const float> a;    // (n) weights, never empty here (uniform filled in), sum > 0
  std::span<const float> b;    // (m)
  // Device-resident inputs (Problem::on_device): x and y above carry only n and d (empty data); the points are the
  // caller's device memory on `device`, not yet centred; the backend centres them on the device with `centre` (d
  // values, the same arithmetic as the host path) into its own buffers. `centre` empty: the points are centred
  // already (a batch's device concatenation, solve_batch_on_device) and are copied as they are. Null on the host
  // path.
  const float* device_x = nullptr;
  const float* device_y = nullptr;
  int device = -1;
  std::span<const double> centre = {};
  /// Device weights (Problem::on_device with DeviceWeights): the caller's memory on `device`, validated by
  /// scan_device_weights; a (b) above is then empty and min_a (min_b) is its smallest value. Null: a (b) holds the
  /// weights on the host (uniform for a device-input problem given none).
  const float* device_a = nullptr;
  const float* device_b = nullptr;
  float min_a = 0, min_b = 0;
  bool on_device() const { return device_x != nullptr; }
};

/// What the device scan of one side's weights found (Problem::on_device): the first entry that is not a finite
/// value ≥ 0 and that value (one float read back: an error path, not staging), the total in fp64 and the smallest.
struct DeviceWeightScan {
  long long bad_index = -1;  // −1: every weight finite and ≥ 0
  float bad_value = 0;
  double total = 0;
  float smallest = 0;
};
/// Checks that `w.data` is device memory on `w.device` (std::invalid_argument naming `name` otherwise) and scans its
/// w.n values on the device (engine/cuda/device_input.cu). Throws std::runtime_error in a build without CUDA.
DeviceWeightScan scan_device_weights(const DeviceWeights& w, const std::string& name);

/// One problem of a device batch (solve_batch_on_device) as the device preparation reads it: the caller's memory,
/// and where its rows and columns start in the concatenation (BatchLayout).
struct DeviceBatchInput {
  DevicePointsView x, y;
  DeviceWeights a, b;  // data null: uniform
  std::size_t row_begin = 0, col_begin = 0;
};
/// The device concatenation of a batch, as solve_batch builds it on the host: each problem centred on its own
/// bounding box's middle and padded to whole blocks with zero points, weights given or uniform (float(1/n)) with
/// zero padding. Owns the device buffers (freed with the last copy of `memory`).
struct DeviceBatch {
  const float* x = nullptr;  // (rows × d) on `device`
  const float* y = nullptr;  // (cols × d)
  const float* a = nullptr;  // (rows)
  const float* b = nullptr;  // (cols)
  std::shared_ptr<void> memory;
  std::vector<double> diameter;        // per problem: its bounding box's diagonal (as solve_batch's)
  std::vector<double> mass_a, mass_b;  // per problem: its total weights (fp64)
  float min_a = 0, min_b = 0;          // the smallest weight of each concatenated side, padding included
};
/// Checks that every pointer is device memory on `device`, scans every problem's points and given weights on the
/// device in one kernel each (engine/cuda/device_input.cu) and builds the concatenation. Throws
/// std::invalid_argument naming the problem, the input and (for a non-finite coordinate or a bad weight) the row,
/// column or index and value, the first problem's error first; std::runtime_error in a build without CUDA.
DeviceBatch prepare_device_batch(std::span<const DeviceBatchInput> problems, std::size_t rows, std::size_t cols,
                                 std::size_t d, int device);
DeviceBatch cuda_prepare_device_batch(std::span<const DeviceBatchInput> problems, std::size_t rows,
                                      std::size_t cols, std::size_t d, int device);

/// One side's sums over its weights w for potentials h and their soft c-transforms hh (the Sinkhorn loop's
/// reductions, engine/src/sinkhorn.cpp): marginal = Σ_{w_i > 0} |w_i·e^{(h_i − hh_i)/ε} − w_i·e^{−h_i/ρ}| (the
/// target w_i when ρ = 0), dual = Σ_i w_i·h_i (ρ = 0) or Σ_i w_i·ρ(1 − e^{−h_i/ρ}).
struct WeightedSums {
  double marginal = 0;
  double dual = 0;
};
/// One range of Backend::weighted_sums' batched form: the points [offset, offset + count) of a side, with their ε
/// and ρ (a batch's problem).
struct WeightedRange {
  std::size_t offset = 0, count = 0;
  double epsilon = 0, rho = 0;
};

/// Per-column bounds of the finite coordinates of a device point set, and the first row holding a non-finite one.
struct DeviceScan {
  std::vector<float> lo, hi;  // (d), +inf / −inf before any finite value
  long long bad_row = -1;     // −1: every coordinate finite
  std::vector<float> row;     // the bad row's d values (an error path: a few bytes, not staging)
};
/// Checks that `p` is device memory on `p.device` (std::invalid_argument naming `name` otherwise) and scans it on
/// the device (engine/cuda/device_input.cu), widening `scan.lo/hi`; only the first bad row is reported.
/// Throws std::runtime_error in a build without CUDA (registry.cpp).
void scan_device_points(const DevicePointsView& p, const std::string& name, DeviceScan& scan);
/// The refusals of device inputs that need no device: the CPU backend, several devices, shards or ranks, a build
/// without CUDA (std::runtime_error naming why).
void refuse_device_input(const BackendOptions& options, int device);

/// One Sinkhorn update, applied `count` times by Backend::iterate.
struct IterationParams {
  double epsilon = 0;
  double cost_scale = 1;      // s in C = s·‖x−y‖²
  Scheme scheme = Scheme::kSymmetric;
  double damping_f = 1;       // λ_x = 1/(1+ε/ρ_x), 1 when balanced
  double damping_g = 1;       // λ_y
  /// Over-relaxation ω ∈ [1, 2) (docs/engine.md, "Over-relaxation"): every blend of old and new potential moves ω
  /// times as far, pot ← pot + ω·w·(new − pot), w = ½ symmetric, 1 alternating. 1: the plain update, bit for bit.
  double relaxation = 1;
  /// With a pattern of several segments (docs/block-sparse.md): one entry per segment, read instead of the
  /// scalars above (the scheme stays common). Empty: every segment uses the scalars.
  std::span<const SegmentParams> segments = {};
};

/// The potentials an operation reads: f (n), g (m), ε and cost scale.
struct PlanParams {
  double epsilon = 0;
  double cost_scale = 1;
  /// Per segment (epsilon, cost_scale read; damping ignored), as IterationParams::segments. Empty: the scalars.
  std::span<const SegmentParams> segments = {};
};

/// The parameters of segment `s`: segments[s] when given, else the scalars (damping 1 for PlanParams).
inline SegmentParams segment_params(const IterationParams& p, std::size_t s) {
  return p.segments.empty() ? SegmentParams{p.epsilon, p.cost_scale, p.damping_f, p.damping_g, p.relaxation}
                            : p.segments[s];
}
inline SegmentParams segment_params(const PlanParams& p, std::size_t s) {
  return p.segments.empty() ? SegmentParams{p.epsilon, p.cost_scale, 1, 1} : p.segments[s];
}

/// The blend of every update: (1 − t)·old + t·fresh with t = ω/2 (symmetric) or ω (alternating). At ω = 1 it is
/// the plain update exactly: ½·old + ½·fresh = ½(old + fresh) in binary floating point, and t = 1 returns fresh.
template <class T>
inline T relax(T old, T fresh, T t) {
  return t == T(1) ? fresh : (T(1) - t) * old + t * fresh;
}
/// t of relax() for a scheme and ω.
inline double relax_weight(Scheme scheme, double omega) {
  return scheme == Scheme::kAlternating ? omega : 0.5 * omega;
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;    // "cpu" / "cuda"
  virtual std::string device() const = 0;  // human-readable

  /// Block-sparse visiting lists (engine/src/block_pattern.hpp, docs/block-sparse.md): every later operation
  /// visits only the listed (row block, column block) pairs; unlisted pairs are exactly zero plan entries, and
  /// blocks with no listed pair are inactive (iterate leaves their potentials as they are). nullptr: dense (the
  /// default; no extra work anywhere). The pattern's rows/cols must be n and m. apply_queries stays dense (queries
  /// belong to no block). May be called between any two operations (a batch drops converged problems' blocks).
  /// The default refuses a non-null pattern (std::runtime_error naming the backend).
  virtual void set_pattern(std::shared_ptr<const BlockPattern> pattern);
  const BlockPattern* pattern() const { return pattern_.get(); }

  /// Potentials resident on the backend: f (n), g (m), cost units.
  virtual void set_potentials(std::span<const float> f, std::span<const float> g) = 0;
  virtual void get_potentials(std::span<float> f, std::span<float> g) const = 0;

  /// `count` Sinkhorn updates of the resident (f, g):
  ///   symmetric:   f' = λ_x·softmin_rows(g), g' = λ_y·softmin_cols(f); f = ½(f+f'), g = ½(g+g')
  ///   alternating: f = λ_x·softmin_rows(g); g = λ_y·softmin_cols(f)
  /// and with over-relaxation ω (IterationParams::relaxation, per segment with a pattern) every assignment above
  /// becomes pot ← relax(pot, new, w·ω) = (1 − w·ω)·pot + w·ω·new, w = ½ symmetric, 1 alternating (relax() below).
  /// Returns false if a non-finite value appeared (the potentials are then unspecified).
  virtual bool iterate(const IterationParams& p, int count) = 0;

  /// out (n) = softmin_rows(g) and out (m) = softmin_cols(f) of the resident potentials (no update).
  virtual void softmin(const PlanParams& p, Side rows, std::span<float> out) const = 0;

  /// Plan application with the resident potentials. rows = kSource: out (n×k) = P·V with V (m×k);
  /// rows = kTarget: out (m×k) = Pᵀ·V with V (n×k). normalized: divide each out row by that row's plan mass.
  /// k may be in the thousands: implementations chunk over columns.
  virtual void apply(const PlanParams& p, Side rows, std::span<const float> v, std::size_t k, bool normalized,
                     std::span<float> out) const = 0;

  /// Out-of-sample: queries q (nq×d) in the space of side `from`; out (nq×k) = Σ_j w_qj V_j with
  /// w_qj = softmax_j(log b_j + (g_j − C(q, y_j))/ε) (from = kSource; kTarget uses x, a, f). V is (m×k) / (n×k).
  virtual void apply_queries(const PlanParams& p, Side from, PointsView q, std::span<const float> v, std::size_t k,
                             std::span<float> out) const = 0;

  /// The k largest entries P_ij of every row i: columns (n×k), values (n×k), sorted by decreasing value.
  virtual void top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns,
                     std::span<float> values) const = 0;

  /// Bilinear-weighted plan application. rows = kSource: out (n×k), out_i = Σ_j P_ij ⟨u_i, w_j⟩ v_j with u (n×e),
  /// w (m×e), v (m×k); rows = kTarget: out (m×k), out_j = Σ_i P_ij ⟨u_j, w_i⟩ v_i with u (m×e), w (n×e), v (n×k).
  /// It is the second-moment term Σ_j P_ij y_j⟨y_j, v_i⟩ of the Hessian (engine/src/differentiation.cpp). The
  /// default (engine/src/differentiation_bilinear.cpp) calls `apply` on chunks of the e·k derived columns
  /// w_je·v_j, O((n+m)·k·chunk) memory; a backend can instead fuse it into one pass (a second dot product per tile).
  virtual void apply_bilinear(const PlanParams& p, Side rows, std::span<const float> u, std::span<const float> w,
                              std::size_t e, std::span<const float> v, std::size_t k, std::span<float> out) const;

  /// Hard c-transform (docs/engine.md, "Hard c-transform"): rows = kSource: values_i = min_j (s·‖x_i − y_j‖² − h_j)
  /// over all m columns with h (m); rows = kTarget: values_j = min_i (s·‖x_i − y_j‖² − h_i) with h (n). index: the
  /// argmin, the lowest index among exact ties. Every value is the fp64 direct difference at the argmin, and the
  /// argmin is exact to fp64: the fast fp32 scores only pick it where their error bound cannot flip it, and a row
  /// with a near tie is re-decided from fp64 direct differences. Weights play no part (every point is a candidate).
  virtual void c_transform(double cost_scale, Side rows, std::span<const float> h, std::span<double> values,
                           std::span<std::int32_t> index) const = 0;
  /// c_transform as Problem::c_transform returns it: values (resized to count, the rows' side) each the fp64 value
  /// rounded to the nearest fp32, index (resized to count) the argmins. The default calls c_transform and rounds on
  /// the host; the CUDA backend rounds on the device and copies both arrays down once (docs/engine.md, "Hard
  /// c-transform").
  virtual void c_transform_rounded(double cost_scale, Side rows, std::span<const float> h, std::size_t count,
                                   std::vector<float>& values, std::vector<std::int32_t>& index) const;

  /// WeightedSums of the points [offset, offset + h.size()) of side `side` over the backend's own copy of their
  /// weights: the marginal sum when hh is given (dual left 0), the dual sum when hh is empty (marginal 0). What the
  /// Sinkhorn loop reads where the weights live only on the backend (SolveInputs::resident: device weights, which
  /// never pass through host memory). The CPU backend sums its host weights exactly as the loop's host path does
  /// (detail::weighted_sums); the CUDA backend reduces its resident weights on the device; the default throws
  /// std::logic_error naming the backend.
  virtual WeightedSums weighted_sums(Side side, std::size_t offset, std::span<const float> h,
                                     std::span<const float> hh, double epsilon, double rho) const;
  /// The same for several ranges at once (a batch's problems): out[k] = weighted_sums(side, r.offset,
  /// h[r.offset, +r.count), hh likewise, r.epsilon, r.rho) with r = ranges[k]; h and hh (empty: dual sums) span the
  /// whole side. The default calls the one-range form per range; the CUDA backend reduces every range in one launch
  /// with one upload and one download, each range's sums bit for bit those of its one-range call.
  virtual void batch_weighted_sums(Side side, std::span<const WeightedRange> ranges, std::span<const float> h,
                                   std::span<const float> hh, std::span<WeightedSums> out) const;

  /// What the adaptive kernels did so far (Problem::statistics); zero where there is nothing adaptive.
  virtual EngineStatistics statistics() const { return {}; }

  // ---- Operations over the backend's own resident (centred) points: what a device-input Problem
  // (ProblemData::device_x) uses where the host path passes its host copy of the points as V. Only the CUDA
  // backend serves device inputs; the defaults throw std::logic_error.
  /// out (count(rows) × d) = P·Y (rows = kSource) or Pᵀ·X (kTarget), divided by the row's mass when normalized.
  virtual void apply_points(const PlanParams& p, Side rows, bool normalized, std::span<float> out) const;
  /// apply_queries with V = the resident points of the other side than `from` (the entropic map).
  virtual void map_resident(const PlanParams& p, Side from, PointsView q, std::span<float> out) const;
  /// out (count(wrt) × d) = 2s·r_i·(p_i − T_i), Problem::gradient with the resident points p and T = apply_points.
  virtual void points_gradient(const PlanParams& p, Side wrt, std::span<float> out) const;
  /// The per-row terms of ⟨P, C⟩ of the resident potentials, before the cost scale: terms (n) = r_i·(‖x_i − T_i‖² +
  /// max(0, E_i − ‖T_i‖²)) as Problem's host primal cost computes them (the variance form over V = [y | ‖y‖² | 1]),
  /// 0 where r_i ≤ 0; the caller sums them in row order (a batch: each problem's rows, with its segment's scale).
  virtual void resident_primal_terms(const PlanParams& p, std::span<double> terms) const;

 protected:
  std::shared_ptr<const BlockPattern> pattern_;  // null: dense
};

/// Adds the screened tiles of `more` to `into` (shards); the steps are taken from `into` (every shard takes the same).
void add_screening(EngineStatistics& into, const EngineStatistics& more);

/// The backend registry: the only place that knows whether CUDA was compiled in (engine/src/registry.cpp).
/// Throws std::runtime_error when `kind` is kCuda and no CUDA device can be used, naming why.
std::unique_ptr<Backend> make_backend(const BackendOptions& options, const ProblemData& data);

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options, const ProblemData& data);
/// Defined in engine/cuda/, linked only when CUDA is compiled in; registry.cpp calls them under its one #if.
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options, const ProblemData& data);
/// Number of usable CUDA devices; 0 when the driver is missing or no device answers (never throws).
int cuda_device_count();
/// What flashot::device_memory() reports (engine/cuda/error.cpp).
DeviceMemory cuda_device_memory();
/// scan_device_points and scan_device_weights on the device (engine/cuda/device_input.cu).
void cuda_scan_device_points(const DevicePointsView& p, const std::string& name, DeviceScan& scan);
DeviceWeightScan cuda_scan_device_weights(const DeviceWeights& w, const std::string& name);

/// The host reduction behind WeightedSums (engine/src/sinkhorn.cpp), in index order, with Backend::weighted_sums'
/// convention (hh given: marginal; empty: dual): what the loop computes from host weights and what the CPU
/// backend's weighted_sums returns.
WeightedSums weighted_sums(std::span<const float> w, std::span<const float> h, std::span<const float> hh,
                           double epsilon, double rho);

}  // namespace flashot::detail
