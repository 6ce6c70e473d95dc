// The per-device step (device_step.hpp): points, weights and potentials resident on one device, every operation a
// streaming kernel on the step's own stream, and the iterations replayed as one CUDA graph of `count` iterations on
// one device (no host round-trip per iteration), or launched one by one between the shards' collectives on several
// (docs/multi-gpu.md).

#include <algorithm>
#include <utility>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "apply_mma.cuh"
#include "backend.hpp"
#include "blocks.cuh"
#include "c_transform.cuh"
#include "device_buffer.hpp"
#include "device_input.hpp"
#include "dispatch.hpp"
#include "error.hpp"
#include "kernels.cuh"
#include "mma.cuh"
#include "mma_launch.cuh"
#include "nccl_combine.cuh"
#include "device_step.hpp"

namespace flashot::detail {
namespace cuda {
namespace {

/// The screened one-pass sums are trusted down to 2^-kSumsFloor (settled: floors from 20 to 70 were measured): their screen then
/// drops each entry below 2^-(26 + kSumsFloor + log2 max(m, 1/min b)) instead of 2^-(96 + …). H200, n = 100k,
/// d = 64, ε = 0.1, 10 iterations: 81.0 ms (floor 70, the dense sums' range), 72.9 (40), 73.0 (30), 71.4 (20): the
/// sums keep 9% of their warp tiles instead of 19%, against two more fallen-back steps (docs/benchmarks.md).
constexpr float kSumsFloor = 20.f;
/// A screened site keeps screening while it keeps at most this share of the warp tiles (settled: 35 and 25 measured
/// no different at 10k and 100k, sixth session, docs/benchmarks.md).
constexpr int kScreenPaysPercent = 50;

static_assert(kBiasMaxD == kTensorBiasMaxD, "the dispatch's tensor-bias range is the biased sums' (mma.cuh)");

/// Host-side copy of one side with the per-point values the kernels need.
struct HostSide {
  std::vector<float> points, norm2, logw, weight;
  float largest = 0;   // max |coordinate| (the tensor-core operands' scale)
  float max_norm = 0;  // max ‖p‖ (the tile screen's error bound)
};

HostSide prepare_side(const PointsView& p, std::span<const float> w) {
  HostSide side;
  side.points.resize(p.n * p.d);
  side.norm2.resize(p.n);
  for (std::size_t i = 0; i < p.n; ++i) {
    double norm = 0;
    for (std::size_t k = 0; k < p.d; ++k) {
      const float c = p.data[i * p.d + k];
      side.points[i * p.d + k] = c;
      norm += double(c) * c;
      side.largest = std::max(side.largest, std::abs(c));
    }
    side.norm2[i] = static_cast<float>(norm);
    side.max_norm = std::max(side.max_norm, static_cast<float>(std::sqrt(norm)));
  }
  if (!w.empty()) {
    side.weight.assign(w.begin(), w.end());
    side.logw.resize(w.size());
    std::transform(w.begin(), w.end(), side.logw.begin(),
                   [](float v) { return v > 0 ? std::log(v) : -INFINITY; });
  }
  return side;
}

/// The tensor-core operands' convention: a power of two that puts the largest |coordinate| in [128, 256) — far from
/// fp16's overflow (65504) and keeping the low halves of a split out of the subnormal range. Only the exponent
/// changes. 1 when there is nothing finite to scale.
float operand_scale(float largest) {
  return largest > 0 && std::isfinite(largest) ? std::ldexp(1.0f, 7 - std::ilogb(largest)) : 1.0f;
}

struct GraphKey {
  double epsilon = 0, cost_scale = 0, damping_f = 0, damping_g = 0, relaxation = 0;
  Scheme scheme = Scheme::kSymmetric;
  int count = 0;
  const int* flags = nullptr;  // the scratch the graph was captured with (reserve may move it)
  const void* forecasts = nullptr;
  bool operator==(const GraphKey&) const = default;
};

}  // namespace

/// DeviceStep's state and operations (device_step.hpp has the contract).
class DeviceStep::Impl {
 public:
  Impl(const BackendOptions& options, int device, const ProblemData& data, std::size_t rows_total,
       const ShardLink* link, float largest);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  int device_id() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  std::string device() const;
  EngineStatistics statistics() const;
  void set_potentials(std::span<const float> f, std::span<const float> g);
  void get_potentials(std::span<float> f, std::span<float> g) const;
  bool iterate(const IterationParams& p, int count);
  void softmin(const PlanParams& p, Side rows, std::span<float> out) const;
  void apply(const PlanParams& p, Side rows, std::span<const float> v, std::size_t k, bool normalized,
             std::span<float> out) const;
  void apply_queries(const PlanParams& p, Side from, PointsView q, std::span<const float> v, std::size_t k,
                     std::span<float> out) const;
  void top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns, std::span<float> values) const;
  // The hard c-transform's inputs for `rows`: the two sides, and the tensor-core operands where the problem's soft
  // c-transforms use them (split fp16; null: fp32 scores).
  struct CtInputs {
    CTransformSides sides;
    const MmaOperands* rows_op;
    const MmaOperands* cols_op;
  };
  CtInputs ct_inputs(Side rows) const;
  void c_transform(double cost_scale, Side rows, std::span<const float> h, std::span<double> values,
                   std::span<std::int32_t> index) const;
  void c_transform_rounded(double cost_scale, Side rows, std::span<const float> h, std::vector<float>& values,
                           std::vector<std::int32_t>& index) const;
  bool apply_bilinear(const PlanParams& p, Side rows, std::span<const float> u, std::span<const float> w,
                      std::size_t e, std::span<const float> v, std::size_t k, std::span<float> out) const;
  // Over the resident points (device inputs, Backend::apply_points and the others).
  void apply_points(const PlanParams& p, Side rows, bool normalized, std::span<float> out) const;
  void map_resident(const PlanParams& p, Side from, PointsView q, std::span<float> out) const;
  void points_gradient(const PlanParams& p, Side wrt, std::span<float> out) const;
  void resident_primal_terms(const PlanParams& p, std::span<double> terms) const;
  WeightedSums weighted_sums(Side side, std::size_t offset, std::span<const float> h, std::span<const float> hh,
                             double epsilon, double rho) const;
  void batch_weighted_sums(Side side, std::span<const WeightedRange> ranges, std::span<const float> h,
                           std::span<const float> hh, std::span<WeightedSums> out) const;

  void set_pattern(std::shared_ptr<const BlockPattern> pattern);

 private:
  /// apply() with V (count of the other side × k) and out (rows × k) in device memory.
  void apply_resident(const PlanParams& p, Side rows, const float* v, std::size_t k, bool normalized,
                      float* out) const;
  /// apply_queries() with V in device memory.
  void apply_queries_on(const PlanParams& p, Side from, PointsView q, const float* v, std::size_t k,
                        std::span<float> out) const;

  // ---- Block-sparse mode (docs/block-sparse.md; the section at the end of this file) ---------------------------
  BlockLists block_lists(bool x_rows) const;
  /// The block-sparse LSE partials of side x_rows (as the dense path's side_lse): on the tensor cores where the
  /// problem runs there (split fp16), else the tiled fp32 kernel.
  /// self: the rows' own potential for the shifted register kernel (launch_block_lse), or null.
  void block_lse(bool x_rows, const float* h, int splits, float2* partials, const float* self = nullptr) const;
  /// The segment table of p (or the scalars) uploaded to seg_.
  void upload_segments(std::span<const SegmentParams> segments, const SegmentParams& scalars) const;
  bool block_iterate(const IterationParams& p, int count);
  void block_softmin(const PlanParams& p, Side rows, std::span<float> out) const;
  void block_apply(const PlanParams& p, Side rows, std::span<const float> v, std::size_t k, bool normalized,
                   std::span<float> out) const;
  /// block_apply with V and out in device memory (apply_resident under a pattern: a device batch's primal cost).
  /// One product pass of a block application over `lists` (after block_shift): out (rows × k) and wsum_ the raw
  /// sums, on the tensor cores when the scores are (launch_block_apply_mma), else launch_block_apply.
  void block_product(bool source, const BlockLists& lists, const float* v, int k, float* out) const;
  void block_apply_resident(const PlanParams& p, Side rows, const float* v, std::size_t k, bool normalized,
                            float* out) const;
  /// The plan shift of block_apply: lse_ (count of the rows' side) from the listed pairs, segments uploaded.
  BlockLists block_shift(const PlanParams& p, bool source) const;
  void block_top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns,
                   std::span<float> values) const;
  std::shared_ptr<const BlockPattern> pattern_;
  DeviceBuffer<int> pat_row_off_, pat_row_seg_, pat_col_off_, pat_col_seg_;
  DeviceBuffer<int2> pat_row_ranges_, pat_col_ranges_;
  int pat_splits_rows_ = 1, pat_splits_cols_ = 1;
  mutable DeviceBuffer<SegmentScale> seg_;

  /// The column-side LSE partials of a pass over this shard's rows (splits × count), in the form the finalize kernel
  /// merges: as they are on one device; on several, each shard's splits merged into one (max, sum) pair per column
  /// and the pairs of every shard gathered (shards × count): the finalize kernel's merge of them is the exact
  /// combination of docs/multi-gpu.md. guard (may be null): the merge is skipped unless *guard (its result is unused).
  FinalizeSide columns(FinalizeSide side, const int* guard = nullptr) const {
    if (link_ == nullptr) return side;
    colmine_.reserve(side.count);
    colall_.reserve(std::size_t(side.count) * link_->shards());
    launch_merge_partials(side.partials, side.splits, side.count, colmine_.get(), guard, stream_);
    link_->gather(colmine_.get(), colall_.get(), side.count, stream_);
    side.partials = colall_.get();
    side.splits = link_->shards();
    return side;
  }
  /// Sums `count` floats of a column-side result over the shards (nothing on one device).
  void sum_columns(float* data, std::size_t count) const {
    if (link_ != nullptr) link_->sum(data, count, stream_);
  }
  /// Makes forecasts_[index] the same on every shard: the widest predicted range, skip or fall-back where any shard
  /// says so, the highest floor (nothing on one device).
  void combine_forecast(int index) const;
  // The constructor's steps. Out of memory is refused before any upload, naming what the problem needs and what the
  // device has (step_resident_bytes against cudaMemGetInfo).
  void refuse_if_too_large(const BackendOptions& options, const ProblemData& data) const;
  /// Points, per-point values, zero potentials and the cold probe's samples. Host inputs (already centred) are
  /// copied as they are into x_ / y_; device inputs (ProblemData::device_x) are centred on the device from the
  /// caller's memory into them. Either way the norms, bounds and cold samples are computed on the device (one
  /// kernel per side, the host's rounding: device_input.hpp), so the host touches each point once, in the copy.
  /// hx, hy: the weights' values (prepare_side of no points), largest and max_norm filled in.
  void upload(const ProblemData& data, HostSide& hx, HostSide& hy);
  /// The tensor-core operands (converted on the device from the uploaded points) and the warpgroup kernels' tiles.
  void prepare_operands(const BackendOptions& options, const HostSide& hx, const HostSide& hy, float largest);
  /// The three screened sites (ScreenState) and their seeds.
  /// smallest_b: min(1, the smallest weight of b) (the sums' reach).
  void prepare_screening(const BackendOptions& options, float smallest_b);
  /// The reduction plans and the iteration's scratch, sized once so that captured graphs stay valid.
  void prepare_iteration(int sms);

  using DevSide = cuda::PointSet;
  DevSide x_side() const { return {x_.get(), xn_.get(), loga_.get(), a_.get(), n_, fp32_kernel_}; }
  DevSide y_side() const { return {y_.get(), yn_.get(), logb_.get(), b_.get(), m_, fp32_kernel_}; }
  void enqueue_iteration(const IterationParams& p, int index, int count);
  /// LSE partials of the rows of x (x_rows) or y against the other side, on the path chosen for this problem.
  /// biases_ready: the warpgroup kernels' column biases of h are already computed (else this launches that first).
  void side_lse(bool x_rows, const float* h, const Scale& sc, const ReductionPlan& plan, float2* partials,
                const int* guard, bool biases_ready = false) const;
  /// rows.count values of LSE2 over `cols` with potential h into lse (device), using partial buffer `partials`.
  /// combine: `cols` is this shard's rows of x (the result then covers all shards).
  void row_lse2(const DevSide& rows, const DevSide& cols, const float* h, const Scale& sc,
                DeviceBuffer<float2>& partials, float* lse, bool combine = false) const;
  void sync() const { FLASHOT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  /// *forecast = how the first one-pass step from zero potentials runs (unshifted, shifted into the sums' range, or
  /// skipped: decide_cold_step), judged on a sample of rows and columns (cold_x_ / cold_y_); enqueued on the stream.
  void cold_probe(const IterationParams& p, SumsForecast* forecast) const;
  /// Adds the outcome of the last launch's `count` one-pass steps to tally_ (statistics()).
  void tally_steps(int count);
  /// lse (device, rows' count) = the LSE2 that shifts the plan weights of side `source`'s rows: from the tensor
  /// cores when they serve this problem (the scores the weights are then formed from), else in fp32.
  void plan_shift(bool source, const Scale& sc, float* lse) const;
  /// out (r.count × k) += Σ_j exp2(score_ij − lse2_i) [⟨u_i, w_j⟩] V_j on the tensor cores, V (device, c.count × k);
  /// wsum += the weights' row sums.
  /// V (count × k, device) in the tensor-core product's form (launch_split_values), in the step's scratch.
  MmaValues split_values(int count, const float* v, int k) const;
  void apply_mma_pass(bool source, const Scale& sc, const float* lse, const float* v, int k,
                      const MmaBilinear* bilinear, float* out, float* wsum) const;

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  const ShardLink* link_ = nullptr;  // the other shards' collectives; null on one device
  std::size_t rows_total_ = 0;       // x's rows over all shards (the column chunks of apply must agree)
  mutable DeviceBuffer<float2> colmine_, colall_;  // columns(): this shard's merged pairs, every shard's
  int resident_blocks_ = 0;
  std::string device_name_;
  Precision precision_ = Precision::kDefault;
  int n_ = 0, m_ = 0, d_ = 0;
  bool one_pass_ = true;  // every weight > 0: the one-exponential symmetric step is usable
  bool cold_ = true;      // the potentials are all zero (a cold start): see cold_probe()
  bool use_mma_ = false;  // tensor-core scores for the soft c-transforms
  /// Whether the plan's operations (P·V, the bilinear form, the block products) have tensor-core kernels for this
  /// problem's operands: every tensor family up to d = 128; past it the solve's LSE and sums alone (kTensorMaxD).
  bool tensor_ops() const { return use_mma_ && xop_.padded_d <= kTensorNarrowMaxD; }
  // The family that evaluates the scores (dispatch.hpp), the same on every shard (chosen from all of x's rows).
  ScoreKernel kernel_ = ScoreKernel::kAuto;
  int fp32_kernel_ = 0;  // PointSet::fp32_kernel of both sides
  DeviceBuffer<std::uint16_t> xhi_, xlo_, yhi_, ylo_;
  // ScoreKernel::kTensorBias on warpgroups: the one-pass sums' biased operands, rebuilt each step
  // (launch_symmetric_sums_bias); null tiles where the family is another.
  DeviceBuffer<std::uint16_t> xbias_hi_, xbias_lo_;
  DeviceBuffer<std::uint8_t> ybias_tiles_;
  BiasOperands bias_ops_;
  // Warpgroup kernels: each side's operands as column tiles, and its column biases of the current pass.
  DeviceBuffer<std::uint8_t> xtiles_, ytiles_;
  DeviceBuffer<float> xbias_, ybias_;
  MmaOperands xop_, yop_;
  // Screened sites of the split operands (ScreenState; empty otherwise): 0 rows' LSE, 1 columns' LSE, 2 sums.
  mutable DeviceBuffer<cuda::ScreenState> screen_;
  mutable DeviceBuffer<int> seeds_x_, seeds_y_;  // each row's best column so far (launch_lse_mma)
  float sums_reach_ = 0;
  // The screened one-pass sums' trusted lower end (log2); kSumsMinLog2 where the sums run dense.
  float sums_floor_ = -kSumsFloor;
  cuda::ScreenState* screen_site(int site) const { return screen_.size() > 0 ? screen_.get() + site : nullptr; }
  /// Device flag of the sums site: whether its next launch will run screened (next) or its last one did; null
  /// without screening (the sums' floor then stays kSumsMinLog2).
  const int* sums_screened(bool next) const {
    if (bias_ops_.tiles != nullptr) return nullptr;  // the biased sums are never screened
    cuda::ScreenState* st = screen_site(2);
    return st == nullptr ? nullptr : next ? &st->next_low : &st->last_low;
  }

  DeviceBuffer<float> x_, y_, xn_, yn_, loga_, logb_, a_, b_, f_, g_;
  // Up to kColdSample evenly spaced points of each side and the farthest of kColdFar chunks ((points, ‖p‖², ln w, w)
  // packed), for cold_probe(); cold_far_: the far rows' indices (scratch).
  DeviceBuffer<float> cold_x_, cold_y_;
  DeviceBuffer<int> cold_far_;
  int cold_nx_ = 0, cold_ny_ = 0, cold_even_x_ = 0, cold_even_y_ = 0;
  mutable DeviceBuffer<float2> cold_part_;
  mutable DeviceBuffer<float> cold_out_;
  DevSide cold_side(bool x) const {
    const float* base = x ? cold_x_.get() : cold_y_.get();
    const int c = x ? cold_nx_ : cold_ny_;
    return {base, base + std::size_t(c) * d_, base + std::size_t(c) * (d_ + 1), base + std::size_t(c) * (d_ + 2), c};
  }
  // Iteration scratch, sized once so that captured graphs stay valid.
  ReductionPlan plan_rows_, plan_cols_, plan_sums_;
  DeviceBuffer<float2> part_rows_, part_cols_;
  DeviceBuffer<int> pat_redo_;  // one flag per row block of either side (launch_block_lse's shifted pass)
  DeviceBuffer<float> tmp_f_, tmp_g_, rsum_, csum_;
  // [0]: non-finite seen; [1 + k]: iteration k's one-pass step must be redone; [count + 1], [count + 2]: the strays
  // of a launch's first step, x's and y's (Strays::count).
  DeviceBuffer<int> flags_;
  // A launch's first step redoes the points whose sums left the range alone (kernels.cuh Strays; one device: a
  // shard's column strays would have to be listed in the same order on every shard). Their indices, the compact
  // sides they are packed into (the cold samples' layout), and the LSE partials of those.
  bool strays_on_ = false;
  int stray_cap_x_ = 0, stray_cap_y_ = 0;
  DeviceBuffer<int> stray_index_;
  DeviceBuffer<float> stray_x_, stray_y_;
  DeviceBuffer<float2> stray_part_;
  ReductionPlan plan_stray_x_, plan_stray_y_;
  DevSide stray_side(bool x, int count) const {
    const float* base = x ? stray_x_.get() : stray_y_.get();
    const int c = x ? stray_cap_x_ : stray_cap_y_;
    DevSide side{base, base + std::size_t(c) * d_, base + std::size_t(c) * (d_ + 1), base + std::size_t(c) * (d_ + 2), c};
    side.active = flags_.get() + count + (x ? 1 : 2);
    return side;
  }
  /// The reduction plan of a compact side of strays against the whole other side (redo_strays).
  ReductionPlan stray_plan(const DevSide& strays, const DevSide& cols) const;
  /// The first step's strays, packed, reduced against the whole other side in fp32 and committed (Strays).
  void redo_strays(const Scale& sc, const Strays& strays, int count, float lambda_f, float lambda_g, float weight);
  // [k]: the forecast iteration k's one-pass step goes by (skip, shift: sums_step), written by iteration k − 1's
  // commit; [0] by the host before each launch, outside the graph (and the cold check: a cold start far from ε
  // skips); [count]: the next launch's first step's.
  DeviceBuffer<SumsForecast> forecasts_;
  bool carry_forecast_ = false;  // forecasts_[count] is for the potentials as the last launch left them
  // The symmetric one-pass steps so far, by outcome (tally_steps; statistics()).
  struct {
    long long one_pass = 0, shifted = 0, skipped = 0, redone = 0, with_strays = 0, strays = 0;
  } tally_;
  bool capture_ = true;  // iterations captured as a graph (one device); launched one by one between collectives
  cudaGraphExec_t graph_ = nullptr;
  GraphKey graph_key_;
  // The graph before the current one, kept instantiated: over-relaxed solves alternate between a block of relaxed
  // iterations and the plain one before each check (engine/src/sinkhorn.cpp), which would otherwise re-capture twice
  // per check.
  cudaGraphExec_t spare_graph_ = nullptr;
  GraphKey spare_key_;
  // Operation scratch (grown on demand).
  mutable DeviceBuffer<float2> part_ops_;
  mutable DeviceBuffer<float> lse_, wsum_, vin_, out_, queries_, query_norm2_, softmin_out_;
  mutable DeviceBuffer<std::int32_t> topk_columns_;
  mutable DeviceBuffer<int> op_flag_;  // non-finite flag of the operations (not reported: they return values)
  // Tensor-core plan application: split fp16 values and bilinear operands.
  mutable DeviceBuffer<std::uint16_t> vhi_, vlo_, uhi_, ulo_, whi_, wlo_;
  mutable DeviceBuffer<float> vinv_, uin_, win_;
  mutable DeviceBuffer<unsigned> vmax_;
  // Operations over the resident points: results on the device, ones, per-row primal terms.
  mutable DeviceBuffer<float> rout_, rmass_, ones_;
  mutable DeviceBuffer<double> rterms_;
  mutable DeviceBuffer<float> wsum_h_, wsum_hh_;  // weighted_sums: the potentials and their transforms
  mutable DeviceBuffer<double> wsum_partials_;
  mutable DeviceBuffer<SumRange> wsum_ranges_;  // batch_weighted_sums' table
  mutable CTransformScratch ct_scratch_;  // the hard c-transform's (c_transform.cu)
  CTransformChoices ct_choices_;          // CudaTuning's c_transform_* fields
  int sms_ = 0;
};


/// Points per side that cold_probe() reduces: kColdSample evenly spaced, and the farthest from the centre of each of
/// kColdFar equal chunks. The lowest cold sums belong to the most isolated points, whose nearest neighbours are far;
/// evenly spaced points seldom include them (100k N(0,1) points, ε = 0.1: the evenly spaced sample's lowest log2 sum
/// was −62.8 at d = 8 where 4000 random rows reached −89.5), the points farthest from the centre of a cloud mostly
/// are them. A miss costs one pass (the step is redone), as before.
constexpr int kColdSample = 128, kColdFar = 256;

/// Strays (kernels.cuh) a launch's first step may redo alone, per side: a 16th of the side, at least 1024 (at most
/// the side), within 64 MiB of packed points. Past it the whole step is redone. The cold rule runs a step shifted
/// when the sample's evenly spaced points fit (decide_cold_step): with none of 2 × 128 of them out of range, more
/// than a 16th of the points out is unlikely ((15/16)^256 ≈ 7·10⁻⁸), and the LSE of the strays runs only over the
/// row blocks that hold some (PointSet::active).
static int stray_capacity(int count, int d) {
  const std::int64_t want = std::max<std::int64_t>(1024, count / 16);
  const std::int64_t fit = std::max<std::int64_t>(256, (std::int64_t(16) << 20) / (d + 3));
  return static_cast<int>(std::min<std::int64_t>({want, fit, std::int64_t(count)}));
}

DeviceStep::Impl::Impl(const BackendOptions& options, int device, const ProblemData& data, std::size_t rows_total,
                       const ShardLink* link, float largest)
    : device_(device),
      link_(link),
      rows_total_(rows_total),
      precision_(options.precision),
      n_(static_cast<int>(data.x.n)),
      m_(static_cast<int>(data.y.n)),
      d_(static_cast<int>(data.x.d)),
      kernel_(choose_kernel(d_, static_cast<std::int64_t>(rows_total), m_, options.precision, options.cuda.kernel)) {
  capture_ = link_ == nullptr;
  ct_choices_.cascade = options.cuda.c_transform_cascade;
  ct_choices_.columns = options.cuda.c_transform_columns == 0 ? 2 : options.cuda.c_transform_columns;
  ct_choices_.tiles = options.cuda.c_transform_tiles;
  ct_choices_.tile_rows = options.cuda.c_transform_tile_rows == 0 ? 2 : options.cuda.c_transform_tile_rows;
  const int devices = cuda_device_count();
  if (device_ < 0 || device_ >= devices) {
    throw std::runtime_error("CUDA device " + std::to_string(device_) + " asked for, but " +
                             std::to_string(devices) + " CUDA device(s) are usable on this machine");
  }
  if (data.x.n > std::size_t(INT32_MAX) || data.y.n > std::size_t(INT32_MAX)) {
    throw std::invalid_argument("the CUDA backend takes at most 2^31-1 points per side (got " +
                                std::to_string(std::max(data.x.n, data.y.n)) + ")");
  }
  DeviceScope scope(device_);
  cudaDeviceProp prop{};
  FLASHOT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  device_name_ = std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
  // Past d = 128 the tensor family is the warpgroup LSE and sums of split operands alone (dispatch.hpp
  // kTensorMaxD); elsewhere such a problem takes the fp32 tiled kernels, or, forced, is refused.
  const bool tensor_family = kernel_ == ScoreKernel::kTensor || kernel_ == ScoreKernel::kTensorBias;
  if (tensor_family && d_ > kTensorNarrowMaxD &&
      !(options.cuda.warpgroup_kernels && warpgroup_kernels_available())) {
    if (options.cuda.kernel != ScoreKernel::kAuto) {
      throw std::invalid_argument("kernel '" + to_string(kernel_) + "' serves d = " + std::to_string(d_) +
                                  " (past " + std::to_string(kTensorNarrowMaxD) +
                                  ") only on the warpgroup kernels of a Hopper GPU (sm_90a), and CUDA device " +
                                  std::to_string(device_) + " (" + device_name_ + ") " +
                                  (options.cuda.warpgroup_kernels ? "has none" : "has them turned off") +
                                  "; use kernel 'tiled' or 'auto'");
    }
    kernel_ = ScoreKernel::kTiled;
  }
  refuse_if_too_large(options, data);
  resident_blocks_ = prop.multiProcessorCount * 4;
  sms_ = prop.multiProcessorCount;
  FLASHOT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  try {
    // Problem hands over clouds already centred (the expanded score 2⟨x,y⟩ − ‖y‖² then has no large common offset);
    // device inputs are centred here, on the device.
    HostSide hx, hy;
    upload(data, hx, hy);
    use_mma_ = kernel_ == ScoreKernel::kTensor || kernel_ == ScoreKernel::kTensorBias;
    fp32_kernel_ = kernel_ == ScoreKernel::kRegister ? register_width(d_) : 0;
    if (use_mma_) {
      prepare_operands(options, hx, hy, largest);
      if (xop_.mode == MmaMode::kSplitFp16 && options.screening != Screening::kOff) {
        float smallest_b = data.device_b != nullptr ? std::min(1.0f, data.min_b) : 1.0f;
        for (float w : data.b) smallest_b = std::min(smallest_b, w);
        prepare_screening(options, smallest_b);
      }
    }
    prepare_iteration(prop.multiProcessorCount);
    sync();
  } catch (...) {
    // The destructor does not run for a constructor that throws: the stream goes here (the buffers free themselves).
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

void DeviceStep::Impl::refuse_if_too_large(const BackendOptions& options, const ProblemData& data) const {
  // Out of memory is refused up front, naming what the problem needs and what the device has, before any upload.
  const bool tensor = kernel_ == ScoreKernel::kTensor || kernel_ == ScoreKernel::kTensorBias;
  const bool split = tensor && precision_ != Precision::kBf16 && precision_ != Precision::kTf32;
  const bool warpgroup = split && options.cuda.warpgroup_kernels && warpgroup_kernels_available();
  const std::size_t need = step_resident_bytes(data.x.n, data.y.n, data.x.d, tensor, split, warpgroup,
                                               warpgroup && kernel_ == ScoreKernel::kTensorBias);
  std::size_t free_bytes = 0, total_bytes = 0;
  FLASHOT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (need > free_bytes) {
    const auto mib = [](std::size_t b) { return std::to_string((b + (1u << 20) - 1) >> 20) + " MiB"; };
    throw std::runtime_error(
        "CUDA out of memory: this problem's " + std::to_string(data.x.n) + " x " + std::to_string(data.y.n) +
        " points in d = " + std::to_string(data.x.d) + (link_ != nullptr ? " (one row shard)" : "") +
        " need about " + mib(need) + " on CUDA device " + std::to_string(device_) + " (" + device_name_ +
        "), which has " + mib(free_bytes) + " free of " + mib(total_bytes) +
        "; spread the rows over more GPUs (BackendOptions::devices, --gpus) or use a smaller problem");
  }
}

void DeviceStep::Impl::prepare_operands(const BackendOptions& options, const HostSide& hx, const HostSide& hy,
                                        float largest) {
  const MmaMode mode = precision_ == Precision::kBf16   ? MmaMode::kBf16
                       : precision_ == Precision::kTf32 ? MmaMode::kFp16
                                                        : MmaMode::kSplitFp16;
  const float scale = operand_scale(largest > 0 ? largest : std::max(hx.largest, hy.largest));
  const int padded = tensor_padded_d(d_);
  // Converted on the device from the fp32 points just uploaded (no second host copy).
  const bool split = mode == MmaMode::kSplitFp16;
  xhi_.reserve(std::size_t(n_) * padded);
  yhi_.reserve(std::size_t(m_) * padded);
  if (split) {
    xlo_.reserve(std::size_t(n_) * padded);
    ylo_.reserve(std::size_t(m_) * padded);
  }
  launch_split_rows(x_.get(), n_, d_, padded, scale, mode, xhi_.get(), xlo_.get(), stream_);
  launch_split_rows(y_.get(), m_, d_, padded, scale, mode, yhi_.get(), ylo_.get(), stream_);
  // CudaTuning::warpgroup_kernels = false keeps the mma.sync kernels on a Hopper GPU (comparisons).
  const bool warpgroup = split && options.cuda.warpgroup_kernels && warpgroup_kernels_available();
  if (warpgroup) {
    xtiles_.reserve(std::size_t(column_tiles(n_)) * tile_bytes(padded));
    ytiles_.reserve(std::size_t(column_tiles(m_)) * tile_bytes(padded));
    xbias_.reserve(std::size_t(column_tiles(n_)) * 64);
    ybias_.reserve(std::size_t(column_tiles(m_)) * 64);
    launch_tile_operands(xhi_.get(), xlo_.get(), n_, padded, xtiles_.get(), stream_);
    launch_tile_operands(yhi_.get(), ylo_.get(), m_, padded, ytiles_.get(), stream_);
    if (kernel_ == ScoreKernel::kTensorBias) {
      const int bias_padded = bias_padded_d(d_);
      xbias_hi_.reserve(std::size_t(n_) * bias_padded);
      xbias_lo_.reserve(std::size_t(n_) * bias_padded);
      ybias_tiles_.reserve(std::size_t(column_tiles(m_)) * tile_bytes(bias_padded));
      bias_ops_ = {xbias_hi_.get(), xbias_lo_.get(), ybias_tiles_.get(), bias_padded};
    }
  }
  // CudaTuning::subtile_overlap: split waits in the warpgroup kernels that have two subtiles (mma.cuh).
  const SubtileOverlap overlap = warpgroup ? options.cuda.subtile_overlap : SubtileOverlap::kOff;
  xop_ = {xhi_.get(), xlo_.get(), padded, scale, mode, hx.max_norm, warpgroup, xtiles_.get(), xbias_.get(), overlap};
  yop_ = {yhi_.get(), ylo_.get(), padded, scale, mode, hy.max_norm, warpgroup, ytiles_.get(), ybias_.get(), overlap};
}

void DeviceStep::Impl::prepare_screening(const BackendOptions& options, float smallest_b) {
  // Three sites (rows' and columns' LSE, the one-pass sums), each starting with the screened kernel.
  std::vector<cuda::ScreenState> fresh(3);
  sums_floor_ = -kSumsFloor;
  for (auto& site : fresh) {
    site.pinned = options.screening == Screening::kOn ? 1 : 0;
    site.pays_percent = kScreenPaysPercent;
  }
  fresh[0].siblings = 2;  // the rows' LSE is the first site a cold solve screens (ScreenState)
  fresh[2].seeded = 0;    // the sums have no seeds
  // The sums' low floor serves only a screen that pays (or is pinned on); a probe uses the kSumsMinLog2 cut.
  fresh[2].floor_gap = sums_floor_ - cuda::kSumsMinLog2;
  fresh[2].paid = fresh[2].pinned;
  fresh[2].next_low = fresh[2].pinned;
  screen_.upload(std::span<const cuda::ScreenState>(fresh), stream_);
  seeds_x_.reserve(n_);
  seeds_y_.reserve(m_);
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(seeds_x_.get(), 0, sizeof(int) * n_, stream_));
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(seeds_y_.get(), 0, sizeof(int) * m_, stream_));
  sums_reach_ = std::ceil(std::log2(std::max(double(m_), smallest_b > 0 ? 1.0 / smallest_b : 1.0)));
}

void DeviceStep::Impl::prepare_iteration(int sms) {
  if (use_mma_) {
    plan_rows_ = plan_lse_mma(x_side(), y_side(), xop_, resident_blocks_, sms);
    plan_cols_ = plan_lse_mma(y_side(), x_side(), yop_, resident_blocks_, sms);
    plan_sums_ = bias_ops_.tiles != nullptr ? plan_symmetric_bias(x_side(), y_side(), bias_ops_.padded_d, sms)
                                            : plan_symmetric_mma(x_side(), y_side(), xop_, resident_blocks_, sms);
  } else {
    plan_rows_ = plan_lse(x_side(), y_side(), d_, resident_blocks_);
    plan_cols_ = plan_lse(y_side(), x_side(), d_, resident_blocks_);
    plan_sums_ = plan_symmetric(x_side(), y_side(), d_, resident_blocks_, sms);
  }
  part_rows_.reserve(std::size_t(plan_rows_.splits) * n_);
  part_cols_.reserve(std::size_t(plan_cols_.splits) * m_);
  tmp_f_.reserve(n_);
  tmp_g_.reserve(m_);
  rsum_.reserve(n_);
  csum_.reserve(m_);
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(rsum_.get(), 0, sizeof(float) * n_, stream_));
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(csum_.get(), 0, sizeof(float) * m_, stream_));
  if (link_ != nullptr) {
    colmine_.reserve(m_);
    colall_.reserve(std::size_t(m_) * link_->shards());
  }
  strays_on_ = one_pass_ && link_ == nullptr;
  if (strays_on_) {
    stray_cap_x_ = stray_capacity(n_, d_);
    stray_cap_y_ = stray_capacity(m_, d_);
    stray_index_.reserve(std::size_t(stray_cap_x_) + stray_cap_y_);
    stray_x_.reserve(std::size_t(stray_cap_x_) * (d_ + 3));
    stray_y_.reserve(std::size_t(stray_cap_y_) * (d_ + 3));
    const DevSide sx{stray_x_.get(), nullptr, nullptr, nullptr, stray_cap_x_};
    const DevSide sy{stray_y_.get(), nullptr, nullptr, nullptr, stray_cap_y_};
    plan_stray_x_ = stray_plan(sx, y_side());
    plan_stray_y_ = stray_plan(sy, x_side());
    stray_part_.reserve(std::size_t(plan_stray_x_.splits) * stray_cap_x_ +
                        std::size_t(plan_stray_y_.splits) * stray_cap_y_);
  }
}

ReductionPlan DeviceStep::Impl::stray_plan(const DevSide& strays, const DevSide& cols) const {
  // The strays are a few row blocks at most (hundreds of points at d = 8–16, docs/benchmarks.md "Strays"), so the
  // plan of the whole capacity (about two waves of blocks over all of its row blocks) would give each active block
  // a long run of column tiles. Split the columns as for one row block filling two waves of 128 blocks, within
  // 32 MiB of partials.
  ReductionPlan plan = plan_lse(strays, cols, d_, resident_blocks_);
  DevSide one = strays;
  one.count = 1;
  const int most = static_cast<int>(std::clamp<std::int64_t>((std::int64_t(32) << 20) / (8 * std::int64_t(strays.count)),
                                                             2, 256));
  const ReductionPlan wide = plan_lse(one, cols, d_, most / 2);
  if (wide.splits > plan.splits) plan.splits = wide.splits, plan.cols_per_split = wide.cols_per_split;
  return plan;
}

void DeviceStep::Impl::redo_strays(const Scale& sc, const Strays& strays, int count, float lambda_f, float lambda_g,
                                   float weight) {
  // Rows: softmin over y of g (the row's one-pass transform f − ε ln ρ without the sums); columns: over x of f.
  launch_pack_strays(strays, x_side(), y_side(), d_, stray_x_.get(), stray_y_.get(), stream_);
  const DevSide sx = stray_side(true, count), sy = stray_side(false, count);
  float2* part_y = stray_part_.get() + std::size_t(plan_stray_x_.splits) * stray_cap_x_;
  launch_lse(sx, y_side(), g_.get(), sc, plan_stray_x_, stray_part_.get(), nullptr, stream_);
  launch_lse(sy, x_side(), f_.get(), sc, plan_stray_y_, part_y, nullptr, stream_);
  const StraySide rx{stray_part_.get(), plan_stray_x_.splits, sx.norm2, f_.get(), tmp_f_.get(), lambda_f};
  const StraySide ry{part_y, plan_stray_y_.splits, sy.norm2, g_.get(), tmp_g_.get(), lambda_g};
  launch_strays_commit(strays, rx, ry, sc.epsilon, sc.s, weight, forecasts_.get() + 1, stream_);
}

std::string DeviceStep::Impl::device() const {
  std::string scores = !use_mma_                         ? "fp32 FMA scores"
                       : xop_.mode == MmaMode::kSplitFp16 ? "split-fp16 tensor-core scores"
                       : xop_.mode == MmaMode::kFp16      ? "fp16 tensor-core scores"
                                                          : "bf16 tensor-core scores";
  if (screen_.size() > 0) scores += xop_.warpgroup ? ", screened (warpgroup)" : ", screened";
  if (bias_ops_.tiles != nullptr) scores += ", sums with the biases on the tensor cores";
  // Some warpgroup kernel has two subtiles (the LSE and the sums: wg_subtiles; the biased sums: wg_bias_subtiles).
  const bool two_subtiles = (xop_.padded_d >= 16 && wg_subtiles(xop_.padded_d / 16) == 2) ||
                            (bias_ops_.tiles != nullptr && wg_bias_subtiles(bias_ops_.padded_d / 16) == 2);
  if (xop_.subtile_overlap != SubtileOverlap::kOff && two_subtiles)
    scores += xop_.subtile_overlap == SubtileOverlap::kAcrossTiles ? ", subtiles overlapped across tiles"
                                                                  : ", subtiles overlapped";
  return device_name_ + ", " + scores;
}

DeviceStep::Impl::~Impl() {
  // No exception may leave a destructor: the CUDA calls here are unchecked on purpose.
  int previous = device_;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);
  if (graph_ != nullptr) cudaGraphExecDestroy(graph_);
  if (spare_graph_ != nullptr) cudaGraphExecDestroy(spare_graph_);
  cudaStreamDestroy(stream_);
  cudaSetDevice(previous);
}

void DeviceStep::Impl::set_potentials(std::span<const float> f, std::span<const float> g) {
  DeviceScope scope(device_);
  f_.upload(f, stream_);
  g_.upload(g, stream_);
  carry_forecast_ = false;  // the last launch's forecast was for other potentials
  cold_ = std::all_of(f.begin(), f.end(), [](float v) { return v == 0; }) &&
          std::all_of(g.begin(), g.end(), [](float v) { return v == 0; });
  sync();
}

void DeviceStep::Impl::get_potentials(std::span<float> f, std::span<float> g) const {
  DeviceScope scope(device_);
  f_.download(f, stream_);
  g_.download(g, stream_);
  sync();
}

void DeviceStep::Impl::enqueue_iteration(const IterationParams& p, int index, int count) {
  const Scale sc = Scale::make(p.epsilon, p.cost_scale, d_);
  const DevSide x = x_side(), y = y_side();
  const auto lf = static_cast<float>(p.damping_f), lg = static_cast<float>(p.damping_g);
  int* nonfinite = flags_.get();
  const auto omega = static_cast<float>(p.relaxation);
  const FinalizeSide rows{part_rows_.get(), plan_rows_.splits, xn_.get(), f_.get(), tmp_f_.get(), lf, n_, omega};
  const FinalizeSide cols{part_cols_.get(), plan_cols_.splits, yn_.get(), g_.get(), tmp_g_.get(), lg, m_, omega};
  if (p.scheme == Scheme::kAlternating) {
    side_lse(true, g_.get(), sc, plan_rows_, part_rows_.get(), nullptr);
    launch_finalize(Finalize::kAlternating, rows, {}, p.epsilon, sc.s, nullptr, nonfinite, stream_);
    side_lse(false, f_.get(), sc, plan_cols_, part_cols_.get(), nullptr);
    launch_finalize(Finalize::kAlternating, columns(cols), {}, p.epsilon, sc.s, nullptr, nonfinite, stream_);
  } else if (!one_pass_) {
    side_lse(true, g_.get(), sc, plan_rows_, part_rows_.get(), nullptr);
    side_lse(false, f_.get(), sc, plan_cols_, part_cols_.get(), nullptr);
    launch_finalize(Finalize::kSymmetric, rows, columns(cols), p.epsilon, sc.s, nullptr, nonfinite, stream_);
  } else {
    // Far from the fixed point (a cold start) the one-pass sums leave their range and the step is redone with the
    // two-pass reductions. Each step's commit predicts the next step's sums: in range, or shifted into it, or too
    // wide (the next step skips its sums; launch_finalize).
    int* redo = flags_.get() + 1 + index;
    const SumsForecast* forecast = forecasts_.get() + index;
    // The sums and both fallback reductions read the potentials of the iteration's start: one set of column biases
    // serves them, computed by a launch of their own for a launch's first iteration and by the previous iteration's
    // commit after that (it writes the potentials they come from).
    if (xop_.warpgroup && index == 0) {
      launch_column_biases(y, g_.get(), ybias_.get(), x, f_.get(), xbias_.get(), sc, stream_);
    }
    // The biased sums where this family has them and the coordinates' factors fit fp16 (bias_factors).
    const bool biased = bias_ops_.tiles != nullptr &&
                        launch_symmetric_sums_bias(x, y, xop_, yop_, f_.get(), ybias_.get(), sc, plan_sums_,
                                                   bias_ops_, rsum_.get(), csum_.get(), forecast, stream_);
    if (biased) {
      // launched
    } else if (use_mma_) {
      // Never screened beside the biased sums: their finish reads no screen flags (sums_screened).
      launch_symmetric_sums_mma(x, y, xop_, yop_, f_.get(), g_.get(), sc, plan_sums_, rsum_.get(), csum_.get(),
                                forecast, bias_ops_.tiles != nullptr ? nullptr : screen_site(2), sums_reach_,
                                sums_floor_, stream_);
    } else {
      launch_symmetric_sums(x, y, f_.get(), g_.get(), sc, plan_sums_, rsum_.get(), csum_.get(), forecast, stream_);
    }
    // Shards: the column sums over all of x's rows (every shard then finishes the same columns), and one verdict.
    sum_columns(csum_.get(), m_);
    // A launch's first step (cold, or carried over from the last launch) redoes its strays alone (Strays).
    Strays strays;
    if (strays_on_ && index == 0) {
      strays = {stray_index_.get(), flags_.get() + count + 1, stray_cap_x_, stray_cap_y_};
    }
    launch_symmetric_finish(f_.get(), g_.get(), rsum_.get(), csum_.get(), b_.get(), n_, m_, p.epsilon, lf, lg,
                            tmp_f_.get(), tmp_g_.get(), redo, forecast, stream_, sums_screened(false), sums_floor_,
                            forecasts_.get() + index + 1, sums_screened(true), 0.5f * omega, strays);
    if (strays.index != nullptr) redo_strays(sc, strays, count, lf, lg, 0.5f * omega);
    if (link_ != nullptr) link_->max_unsigned(redo, 1, stream_);
    side_lse(true, g_.get(), sc, plan_rows_, part_rows_.get(), redo, true);
    side_lse(false, f_.get(), sc, plan_cols_, part_cols_.get(), redo, true);
    FinalizeSide rows_next = rows, cols_next = columns(cols, redo);  // + the next iteration's column biases
    if (xop_.warpgroup && index + 1 < count) {
      rows_next.bias = xbias_.get(), rows_next.logw = x.logw, rows_next.c1 = sc.c1;
      cols_next.bias = ybias_.get(), cols_next.logw = y.logw, cols_next.c1 = sc.c1;
    }
    launch_finalize(Finalize::kCommit, rows_next, cols_next, p.epsilon, sc.s, redo, nonfinite, stream_,
                    forecasts_.get() + index + 1, sums_screened(true), sums_floor_);
    combine_forecast(index + 1);
  }
}

void DeviceStep::Impl::side_lse(bool x_rows, const float* h, const Scale& sc, const ReductionPlan& plan,
                           float2* partials, const int* guard, bool biases_ready) const {
  const DevSide r = x_rows ? x_side() : y_side(), c = x_rows ? y_side() : x_side();
  if (use_mma_) {
    if (xop_.warpgroup && !biases_ready)
      launch_column_biases(c, h, x_rows ? ybias_.get() : xbias_.get(), {}, nullptr, nullptr, sc, stream_);
    launch_lse_mma(r, c, x_rows ? xop_ : yop_, x_rows ? yop_ : xop_, h, sc, plan, partials, guard,
                   screen_site(x_rows ? 0 : 1), x_rows ? seeds_x_.get() : seeds_y_.get(), stream_);
  } else {
    launch_lse(r, c, h, sc, plan, partials, guard, stream_);
  }
}

bool DeviceStep::Impl::iterate(const IterationParams& p, int count) {
  if (count <= 0) return true;
  if (pattern_) return block_iterate(p, count);
  DeviceScope scope(device_);
  flags_.reserve(std::size_t(count) + 3);
  forecasts_.reserve(std::size_t(count) + 1);
  const GraphKey key{p.epsilon, p.cost_scale, p.damping_f, p.damping_g,     p.relaxation,
                     p.scheme,  count,        flags_.get(), forecasts_.get()};
  const bool same = key == graph_key_;
  if (!same) carry_forecast_ = false;
  if (capture_ && !same) {  // the spare becomes current (reused when it matches); the current one the spare
    std::swap(graph_, spare_graph_);
    std::swap(graph_key_, spare_key_);
  }
  const bool have = graph_ != nullptr && key == graph_key_;
  graph_key_ = key;
  if (capture_ && !have) {
    if (graph_ != nullptr) {
      FLASHOT_CUDA_CHECK(cudaGraphExecDestroy(graph_));
      graph_ = nullptr;
    }
    FLASHOT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      FLASHOT_CUDA_CHECK(cudaMemsetAsync(flags_.get(), 0, sizeof(int) * (std::size_t(count) + 3), stream_));
      FLASHOT_CUDA_CHECK(cudaMemsetAsync(forecasts_.get() + 1, 0, sizeof(SumsForecast) * count, stream_));
      for (int k = 0; k < count; ++k) enqueue_iteration(p, k, count);
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(stream_, &broken);
      if (broken != nullptr) cudaGraphDestroy(broken);
      graph_key_ = {};
      throw;
    }
    cudaGraph_t graph = nullptr;
    FLASHOT_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    const cudaError_t status = cudaGraphInstantiate(&graph_, graph, 0);
    cudaGraphDestroy(graph);
    if (status != cudaSuccess) graph_key_ = {};
    FLASHOT_CUDA_CHECK(status);
  }
  // The first step: what the last launch's last step predicted for it, where that launch ran these very iterations
  // on the potentials it left (else no skip, no shift; the cold probe may still say skip).
  if (carry_forecast_) {  // false after set_potentials (so after a cold start too)
    FLASHOT_CUDA_CHECK(cudaMemcpyAsync(forecasts_.get(), forecasts_.get() + count, sizeof(SumsForecast),
                                       cudaMemcpyDeviceToDevice, stream_));
  } else {
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(forecasts_.get(), 0, sizeof(SumsForecast), stream_));
  }
  if (cold_ && one_pass_ && p.scheme == Scheme::kSymmetric) cold_probe(p, forecasts_.get());
  cold_ = false;
  carry_forecast_ = true;
  if (capture_) {
    FLASHOT_CUDA_CHECK(cudaGraphLaunch(graph_, stream_));
  } else {
    // Shards: the same iterations, launched one by one, the collectives between them (no graph: NCCL calls of
    // several devices driven from one process stay outside stream capture).
    combine_forecast(0);
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(flags_.get(), 0, sizeof(int) * (std::size_t(count) + 3), stream_));
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(forecasts_.get() + 1, 0, sizeof(SumsForecast) * count, stream_));
    for (int k = 0; k < count; ++k) enqueue_iteration(p, k, count);
    link_->max_unsigned(flags_.get(), 1, stream_);  // every shard stops together
  }
  int nonfinite = 0;
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(&nonfinite, flags_.get(), sizeof(int), cudaMemcpyDeviceToHost, stream_));
  sync();
  if (one_pass_ && p.scheme == Scheme::kSymmetric) tally_steps(count);
  return nonfinite == 0;
}

void DeviceStep::Impl::combine_forecast(int index) const {
  if (link_ == nullptr) return;
  // SumsForecast: eight words whose MAX is the combination (order-preserving keys of the ranges' ends, the flags),
  // then the floor, a float whose MAX is the highest floor (the strictest of the shards' next launches).
  static_assert(offsetof(SumsForecast, floor) == 8 * sizeof(unsigned) && sizeof(SumsForecast) == 9 * sizeof(unsigned));
  SumsForecast* f = forecasts_.get() + index;
  link_->max_unsigned(f, 8, stream_);
  link_->max_float(&f->floor, 1, stream_);
}

void DeviceStep::Impl::tally_steps(int count) {
  std::vector<int> flags(std::size_t(count) + 3);
  std::vector<SumsForecast> forecasts(count);
  flags_.download(flags, stream_);
  forecasts_.download(forecasts, stream_);
  sync();
  for (int k = 0; k < count; ++k) {
    const SumsStep step = sums_step(forecasts[k]);
    if (step.skip != 0) {
      ++tally_.skipped;
    } else if (flags[1 + k] != 0) {
      ++tally_.redone;
    } else {
      ++tally_.one_pass;
      if (step.shift != 0) ++tally_.shifted;
      if (k == 0 && strays_on_) {
        const long long strays = std::min(flags[count + 1], stray_cap_x_) + std::min(flags[count + 2], stray_cap_y_);
        tally_.strays += strays;
        if (strays > 0) ++tally_.with_strays;
      }
    }
  }
}

void DeviceStep::Impl::cold_probe(const IterationParams& p, SumsForecast* forecast) const {
  // From zero potentials the first one-pass row sums are ρ_i = Σ_j b_j e^(−C_ij/ε) = e^(−c(0)_i/ε): for ε well below
  // the distances to the nearest points they underflow, spread over more log2 units than the range holds at
  // d = 16 and above (ε = 0.1), and the step must skip; at d = 5–12 they fit once shifted; for ε near the costs'
  // spread (the first stage of ε-scaling, d = 3 at ε = 0.1) they are in range as they are. The samples' soft
  // c-transforms of zero (fp32 reductions, kColdSample + kColdFar rows against every column, each way) decide
  // (decide_cold_step).
  // On a shard the columns' sample is reduced against this shard's rows only: a lower sum than over all rows, but
  // no lower than 1/shards of it for the column whose shard sum is highest: kColdHighMargin (2^4) covers 16 shards,
  // and beyond that a column sum above the range makes the finish kernel redo the step. The shards' samples are
  // combined (combine_forecast) and judged as one.
  if (cold_nx_ == 0 || cold_ny_ == 0) return;
  const Scale sc = Scale::make(p.epsilon, p.cost_scale, d_);
  const DevSide sx = cold_side(true), sy = cold_side(false);
  const ReductionPlan px = plan_lse(sx, y_side(), d_, resident_blocks_);
  const ReductionPlan py = plan_lse(sy, x_side(), d_, resident_blocks_);
  cold_part_.reserve(std::size_t(px.splits) * sx.count + std::size_t(py.splits) * sy.count);
  op_flag_.reserve(1);
  cold_out_.reserve(std::size_t(sx.count) + sy.count);
  float2* part_y = cold_part_.get() + std::size_t(px.splits) * sx.count;
  launch_lse(sx, y_side(), g_.get(), sc, px, cold_part_.get(), nullptr, stream_);
  launch_lse(sy, x_side(), f_.get(), sc, py, part_y, nullptr, stream_);
  const FinalizeSide a{cold_part_.get(), px.splits, sx.norm2, cold_out_.get(), nullptr, 1.f, sx.count};
  const FinalizeSide b{part_y, py.splits, sy.norm2, cold_out_.get() + sx.count, nullptr, 1.f, sy.count};
  launch_finalize(Finalize::kSoftmin, a, b, p.epsilon, sc.s, nullptr, op_flag_.get(), stream_);
  launch_cold_check(cold_out_.get(), sx.count, cold_even_x_, sy.count, cold_even_y_, strays_on_, p.epsilon, forecast,
                    stream_, sums_screened(true), sums_floor_);
}

void DeviceStep::Impl::row_lse2(const DevSide& rows, const DevSide& cols, const float* h, const Scale& sc,
                           DeviceBuffer<float2>& partials, float* lse, bool combine) const {
  const ReductionPlan plan = plan_lse(rows, cols, d_, resident_blocks_);
  partials.reserve(std::size_t(plan.splits) * rows.count);
  launch_lse(rows, cols, h, sc, plan, partials.get(), nullptr, stream_);
  const FinalizeSide side{partials.get(), plan.splits, rows.norm2, lse, nullptr, 1.f, rows.count};
  launch_finalize(Finalize::kLse2, combine ? columns(side) : side, {}, sc.epsilon, sc.s, nullptr, op_flag_.get(),
                  stream_);
}

void DeviceStep::Impl::softmin(const PlanParams& p, Side rows, std::span<float> out) const {
  if (pattern_) return block_softmin(p, rows, out);
  DeviceScope scope(device_);
  const Scale sc = Scale::make(p.epsilon, p.cost_scale, d_);
  const bool source = rows == Side::kSource;
  const DevSide r = source ? x_side() : y_side(), c = source ? y_side() : x_side();
  const float* h = source ? g_.get() : f_.get();
  // The same reduction as the iterations, so that a converged solve reports a small marginal error.
  const ReductionPlan& plan = source ? plan_rows_ : plan_cols_;
  part_ops_.reserve(std::size_t(plan.splits) * r.count);
  softmin_out_.reserve(r.count);
  op_flag_.reserve(1);
  side_lse(source, h, sc, plan, part_ops_.get(), nullptr);
  const FinalizeSide side{part_ops_.get(), plan.splits, r.norm2, softmin_out_.get(), nullptr, 1.f, r.count};
  launch_finalize(Finalize::kSoftmin, source ? side : columns(side), {}, p.epsilon, sc.s, nullptr, op_flag_.get(),
                  stream_);
  softmin_out_.download(out.first(r.count), stream_);
  sync();
}

namespace {
/// Columns of V per device pass: all of k unless V and the output would take more than this many bytes.
constexpr std::size_t kApplyBytes = std::size_t(1) << 30;

std::size_t apply_columns_per_pass(std::size_t rows, std::size_t cols, std::size_t k) {
  const std::size_t per_column = (rows + cols) * sizeof(float);
  std::size_t columns = std::max<std::size_t>(kApplyBytes / per_column, 1);
  if (columns >= k) return k;
  return std::max<std::size_t>(columns / kApplyChunk, 1) * kApplyChunk;
}
}  // namespace

void DeviceStep::Impl::apply(const PlanParams& p, Side rows, std::span<const float> v, std::size_t k, bool normalized,
                        std::span<float> out) const {
  if (k == 0) return;
  if (pattern_) return block_apply(p, rows, v, k, normalized, out);
  DeviceScope scope(device_);
  const Scale sc = Scale::make(p.epsilon, p.cost_scale, d_);
  const bool source = rows == Side::kSource;
  const DevSide r = source ? x_side() : y_side(), c = source ? y_side() : x_side();
  const float* h = source ? g_.get() : f_.get();
  const float* pot = source ? f_.get() : g_.get();
  lse_.reserve(r.count);
  wsum_.reserve(r.count);
  op_flag_.reserve(1);
  plan_shift(source, sc, lse_.get());
  // Pᵀ·V is summed over the shards chunk by chunk: every shard cuts k alike (x's rows over all shards, not its own).
  const std::size_t kc = apply_columns_per_pass(rows_total_, std::size_t(m_), k);
  std::vector<float> staging(kc < k ? std::max(std::size_t(r.count), std::size_t(c.count)) * kc : 0);
  for (std::size_t c0 = 0; c0 < k; c0 += kc) {
    const std::size_t width = std::min(kc, k - c0);
    if (width == k) {
      vin_.upload(v.first(std::size_t(c.count) * k), stream_);
    } else {
      sync();  // staging is reused: the previous pass's copies must be done
      for (int j = 0; j < c.count; ++j)
        std::memcpy(&staging[std::size_t(j) * width], &v[std::size_t(j) * k + c0], width * sizeof(float));
      vin_.upload(std::span<const float>(staging.data(), std::size_t(c.count) * width), stream_);
    }
    out_.reserve(std::size_t(r.count) * width);
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(out_.get(), 0, sizeof(float) * r.count * width, stream_));
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(wsum_.get(), 0, sizeof(float) * r.count, stream_));
    if (tensor_ops()) {
      apply_mma_pass(source, sc, lse_.get(), vin_.get(), static_cast<int>(width), nullptr, out_.get(), wsum_.get());
    } else {
      const ReductionPlan plan = plan_apply(r, c, d_, static_cast<int>(width), resident_blocks_);
      launch_apply(r, c, h, sc, lse_.get(), vin_.get(), static_cast<int>(width), plan, out_.get(), wsum_.get(),
                   stream_);
    }
    if (!source) {  // shards: every shard's sums, all shifted by the columns' combined LSE (plan_shift)
      sum_columns(out_.get(), std::size_t(r.count) * width);
      sum_columns(wsum_.get(), r.count);
    }
    launch_apply_scale(r, pot, lse_.get(), wsum_.get(), static_cast<int>(width), normalized, sc, out_.get(),
                       stream_);
    if (width == k) {
      out_.download(out.first(std::size_t(r.count) * k), stream_);
      sync();
    } else {
      out_.download(std::span<float>(staging.data(), std::size_t(r.count) * width), stream_);
      sync();
      for (int i = 0; i < r.count; ++i)
        std::memcpy(&out[std::size_t(i) * k + c0], &staging[std::size_t(i) * width], width * sizeof(float));
    }
  }
}

void DeviceStep::Impl::plan_shift(bool source, const Scale& sc, float* lse) const {
  const DevSide r = source ? x_side() : y_side(), c = source ? y_side() : x_side();
  const float* h = source ? g_.get() : f_.get();
  if (!use_mma_) {
    row_lse2(r, c, h, sc, part_ops_, lse, !source);
    return;
  }
  const ReductionPlan& plan = source ? plan_rows_ : plan_cols_;
  part_ops_.reserve(std::size_t(plan.splits) * r.count);
  side_lse(source, h, sc, plan, part_ops_.get(), nullptr);
  const FinalizeSide side{part_ops_.get(), plan.splits, r.norm2, lse, nullptr, 1.f, r.count};
  launch_finalize(Finalize::kLse2, source ? side : columns(side), {}, sc.epsilon, sc.s, nullptr, op_flag_.get(),
                  stream_);
}

MmaValues DeviceStep::Impl::split_values(int count, const float* v, int k) const {
  const std::size_t split = std::size_t(mma_values_rows(k)) * mma_values_stride(count);
  vhi_.reserve(split);
  vlo_.reserve(split);
  vinv_.reserve(mma_values_rows(k));
  vmax_.reserve(k);
  return launch_split_values(v, count, k, vhi_.get(), vlo_.get(), vinv_.get(), vmax_.get(), stream_);
}

void DeviceStep::Impl::apply_mma_pass(bool source, const Scale& sc, const float* lse, const float* v, int k,
                                 const MmaBilinear* bilinear, float* out, float* wsum) const {
  const DevSide r = source ? x_side() : y_side(), c = source ? y_side() : x_side();
  const MmaValues values = split_values(c.count, v, k);
  const ReductionPlan plan = plan_apply_mma(r, c, resident_blocks_);
  launch_apply_mma(r, c, source ? xop_ : yop_, source ? yop_ : xop_, source ? g_.get() : f_.get(), sc, lse, values,
                   bilinear, plan, out, wsum, stream_);
}

namespace {
/// Largest Euclidean norm of the rows of a (count × e) matrix, and its operand_scale.
struct RowBounds {
  double norm = 0;
  float scale = 1;
};
RowBounds row_bounds(std::span<const float> a, std::size_t e) {
  RowBounds out;
  float largest = 0;
  for (std::size_t i = 0; i < a.size() / e; ++i) {
    double n2 = 0;
    for (std::size_t c = 0; c < e; ++c) {
      const float x = a[i * e + c];
      n2 += double(x) * x;
      largest = std::max(largest, std::abs(x));
    }
    out.norm = std::max(out.norm, std::sqrt(n2));
  }
  out.scale = operand_scale(largest);
  return out;
}
}  // namespace

bool DeviceStep::Impl::apply_bilinear(const PlanParams& p, Side rows, std::span<const float> u,
                                      std::span<const float> w, std::size_t e, std::span<const float> v,
                                      std::size_t k, std::span<float> out) const {
  if (pattern_) return false;  // the default's plain applications follow the pattern
  const int ei = static_cast<int>(std::min<std::size_t>(e, INT32_MAX));
  const bool tensor = tensor_ops() && mma_supports(ei);
  const bool fma = !tensor_ops() && bilinear_fma_supports(d_, ei);
  if (e == 0 || k == 0 || (!tensor && !fma)) {
    // Other shapes (and the argument errors) go to the default: plain applications of derived columns.
    return false;
  }
  const bool source = rows == Side::kSource;
  const DevSide r = source ? x_side() : y_side(), c = source ? y_side() : x_side();
  if (u.size() != std::size_t(r.count) * e || w.size() != std::size_t(c.count) * e ||
      v.size() != std::size_t(c.count) * k || out.size() != std::size_t(r.count) * k)
    throw std::invalid_argument("apply_bilinear: u, w, v, out sizes do not agree with e = " + std::to_string(e) +
                                " and k = " + std::to_string(k));
  DeviceScope scope(device_);
  const Scale sc = Scale::make(p.epsilon, p.cost_scale, d_);
  const float* h = source ? g_.get() : f_.get();
  const float* pot = source ? f_.get() : g_.get();
  const int ki = static_cast<int>(k);
  lse_.reserve(r.count);
  wsum_.reserve(r.count);
  op_flag_.reserve(1);
  uin_.upload(u, stream_);
  win_.upload(w, stream_);
  vin_.upload(v, stream_);
  plan_shift(source, sc, lse_.get());
  out_.reserve(std::size_t(r.count) * k);
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(out_.get(), 0, sizeof(float) * r.count * k, stream_));
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(wsum_.get(), 0, sizeof(float) * r.count, stream_));
  if (tensor) {
    // ⟨u_i, w_j⟩ ≤ max‖u‖·max‖w‖ (Cauchy–Schwarz): a power of two maps the stored products into [−1, 1], so that
    // the bilinear weights stay in fp16's range.
    const RowBounds bu = row_bounds(u, e), bw = row_bounds(w, e);
    const double bound = bu.norm * bu.scale * bw.norm * bw.scale;
    int exponent = 0;
    if (bound > 0 && std::isfinite(bound)) std::frexp(bound, &exponent);
    const int padded = (ei + 15) / 16 * 16;
    uhi_.reserve(std::size_t(r.count) * padded);
    ulo_.reserve(std::size_t(r.count) * padded);
    whi_.reserve(std::size_t(c.count) * padded);
    wlo_.reserve(std::size_t(c.count) * padded);
    const MmaMode split = MmaMode::kSplitFp16;
    launch_split_rows(uin_.get(), r.count, ei, padded, bu.scale, split, uhi_.get(), ulo_.get(), stream_);
    launch_split_rows(win_.get(), c.count, ei, padded, bw.scale, split, whi_.get(), wlo_.get(), stream_);
    const MmaBilinear bilinear{{uhi_.get(), ulo_.get(), padded, bu.scale, MmaMode::kSplitFp16},
                               {whi_.get(), wlo_.get(), padded, bw.scale, MmaMode::kSplitFp16},
                               static_cast<float>(std::ldexp(1.0, -exponent))};
    apply_mma_pass(source, sc, lse_.get(), vin_.get(), ki, &bilinear, out_.get(), wsum_.get());
  } else {
    const ReductionPlan plan = plan_apply_bilinear_fma(r, c, resident_blocks_);
    launch_apply_bilinear_fma(r, c, h, sc, lse_.get(), uin_.get(), win_.get(), ei, vin_.get(), ki, plan, out_.get(),
                              wsum_.get(), stream_);
  }
  if (!source) {  // shards: every shard's sums, shifted alike (plan_shift)
    sum_columns(out_.get(), std::size_t(r.count) * k);
    sum_columns(wsum_.get(), r.count);
  }
  launch_apply_scale(r, pot, lse_.get(), wsum_.get(), ki, false, sc, out_.get(), stream_);
  out_.download(out, stream_);
  sync();
  return true;
}

void DeviceStep::Impl::apply_queries(const PlanParams& p, Side from, PointsView q, std::span<const float> v,
                                std::size_t k, std::span<float> out) const {
  if (q.d != std::size_t(d_)) {
    throw std::invalid_argument("queries have " + std::to_string(q.d) + " dimensions, the problem has " +
                                std::to_string(d_));
  }
  if (q.n == 0 || k == 0) return;
  DeviceScope scope(device_);
  vin_.upload(v.first(std::size_t(from == Side::kSource ? m_ : n_) * k), stream_);
  apply_queries_on(p, from, q, vin_.get(), k, out);
}

void DeviceStep::Impl::apply_queries_on(const PlanParams& p, Side from, PointsView q, const float* v, std::size_t k,
                                        std::span<float> out) const {
  const Scale sc = Scale::make(p.epsilon, p.cost_scale, d_);
  // Queries live in the space of side `from` and are mapped through the other side's potential.
  const bool source = from == Side::kSource;
  const DevSide c = source ? y_side() : x_side();
  const float* h = source ? g_.get() : f_.get();
  const HostSide hq = prepare_side(q, {});
  queries_.upload(std::span<const float>(hq.points), stream_);
  query_norm2_.upload(std::span<const float>(hq.norm2), stream_);
  const DevSide r{queries_.get(), query_norm2_.get(), nullptr, nullptr, static_cast<int>(q.n)};
  lse_.reserve(q.n);
  wsum_.reserve(q.n);
  op_flag_.reserve(1);
  // Target queries are mapped through x: on shards, through every shard's rows (combined LSE, summed results);
  // source queries through y, which every shard holds whole.
  row_lse2(r, c, h, sc, part_ops_, lse_.get(), !source);
  const ReductionPlan plan = plan_apply(r, c, d_, static_cast<int>(k), resident_blocks_);
  out_.reserve(q.n * k);
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(out_.get(), 0, sizeof(float) * q.n * k, stream_));
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(wsum_.get(), 0, sizeof(float) * q.n, stream_));
  launch_apply(r, c, h, sc, lse_.get(), v, static_cast<int>(k), plan, out_.get(), wsum_.get(), stream_);
  if (!source) {
    sum_columns(out_.get(), q.n * k);
    sum_columns(wsum_.get(), q.n);
  }
  launch_apply_scale(r, nullptr, lse_.get(), wsum_.get(), static_cast<int>(k), true, sc, out_.get(), stream_);
  out_.download(out.first(q.n * k), stream_);
  sync();
}

void DeviceStep::Impl::top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns,
                        std::span<float> values) const {
  if (k == 0 || k > std::size_t(m_)) {
    throw std::invalid_argument("top_k needs 1 <= k <= m = " + std::to_string(m_) + " (got " + std::to_string(k) +
                                ")");
  }
  if (pattern_) return block_top_k(p, k, columns, values);
  DeviceScope scope(device_);
  const Scale sc = Scale::make(p.epsilon, p.cost_scale, d_);
  topk_columns_.reserve(std::size_t(n_) * k);
  out_.reserve(std::size_t(n_) * k);
  launch_top_k(x_side(), y_side(), f_.get(), g_.get(), sc, static_cast<int>(k), topk_columns_.get(), out_.get(),
               stream_);
  topk_columns_.download(columns.first(std::size_t(n_) * k), stream_);
  out_.download(values.first(std::size_t(n_) * k), stream_);
  sync();
}

// ---- The upload (host or device inputs) and the operations over the resident points (device inputs): each does
// what the host path does with its host copies, with the same arithmetic (device_input.cu).

void DeviceStep::Impl::upload(const ProblemData& data, HostSide& hx, HostSide& hy) {
  // Host weights (host inputs, and a device-input side given none: uniform): their values as prepare_side makes
  // them (zero points). Device weights (ProblemData::device_a/b) never come to the host: copied on the device and
  // their logarithms taken there; the scan's smallest weight says whether all are > 0.
  hx = prepare_side({{}, 0, data.x.d}, data.a);
  hy = prepare_side({{}, 0, data.y.d}, data.b);
  const auto positive = [](std::span<const float> w, const float* device_w, float smallest) {
    return device_w != nullptr ? smallest > 0 : std::all_of(w.begin(), w.end(), [](float v) { return v > 0; });
  };
  one_pass_ = positive(data.a, data.device_a, data.min_a) && positive(data.b, data.device_b, data.min_b);
  DeviceBuffer<double> centre(d_);
  DeviceBuffer<unsigned> bounds(4);
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(bounds.get(), 0, sizeof(unsigned) * 4, stream_));
  x_.reserve(std::size_t(n_) * d_);
  y_.reserve(std::size_t(m_) * d_);
  xn_.reserve(n_);
  yn_.reserve(m_);
  if (data.on_device()) {
    // The caller's memory is read by the centring kernels only: it is ready, Problem::on_device's scan
    // synchronized the legacy default stream after the producers' work.
    // An empty centre: the points are centred already (a device batch's concatenation) and copied as they are.
    centre.upload(data.centre, stream_);
    const double* by = data.centre.empty() ? nullptr : centre.get();
    launch_centre_points(data.device_x, n_, d_, by, x_.get(), xn_.get(), bounds.get(), stream_);
    launch_centre_points(data.device_y, m_, d_, by, y_.get(), yn_.get(), bounds.get() + 2, stream_);
  } else {
    // Host inputs: one copy of the caller's centred points (pageable: a batch of 64 × 4096 points in d = 64 is
    // 134 MB, ~10 ms at the staged copy's rate; pinning them first would cost about as much), norms on the device.
    x_.upload(data.x.data, stream_);
    y_.upload(data.y.data, stream_);
    launch_centre_points(x_.get(), n_, d_, nullptr, nullptr, xn_.get(), bounds.get(), stream_);
    launch_centre_points(y_.get(), m_, d_, nullptr, nullptr, yn_.get(), bounds.get() + 2, stream_);
  }
  unsigned found[4];
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(found, bounds.get(), sizeof found, cudaMemcpyDeviceToHost, stream_));
  const auto weights = [&](const float* device_w, std::size_t count, const HostSide& host, DeviceBuffer<float>& w,
                           DeviceBuffer<float>& logw) {
    if (device_w == nullptr) {
      logw.upload(std::span<const float>(host.logw), stream_);
      w.upload(std::span<const float>(host.weight), stream_);
      return;
    }
    // The caller's memory is ready (Problem::on_device's scan synchronized the legacy default stream).
    w.reserve(count);
    logw.reserve(count);
    FLASHOT_CUDA_CHECK(
        cudaMemcpyAsync(w.get(), device_w, sizeof(float) * count, cudaMemcpyDeviceToDevice, stream_));
    launch_log_weights(w.get(), count, logw.get(), stream_);
  };
  weights(data.device_a, std::size_t(n_), hx, a_, loga_);
  weights(data.device_b, std::size_t(m_), hy, b_, logb_);
  if (one_pass_) {
    // The cold probe's samples (kColdSample evenly spaced points and kColdFar far ones per side), packed on the
    // device from the resident sides.
    const int even_x = std::min(n_, kColdSample), even_y = std::min(m_, kColdSample);
    const int far_x = std::min(n_, kColdFar), far_y = std::min(m_, kColdFar);
    cold_even_x_ = even_x, cold_even_y_ = even_y;
    cold_nx_ = even_x + far_x;
    cold_ny_ = even_y + far_y;
    cold_x_.reserve(std::size_t(cold_nx_) * (d_ + 3));
    cold_y_.reserve(std::size_t(cold_ny_) * (d_ + 3));
    cold_far_.reserve(std::size_t(far_x) + far_y);
    launch_pack_sample(x_.get(), xn_.get(), loga_.get(), a_.get(), n_, even_x, far_x, cold_far_.get(), d_,
                       cold_x_.get(), stream_);
    launch_pack_sample(y_.get(), yn_.get(), logb_.get(), b_.get(), m_, even_y, far_y, cold_far_.get() + far_x, d_,
                       cold_y_.get(), stream_);
  }
  f_.reserve(n_);
  g_.reserve(m_);
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(f_.get(), 0, sizeof(float) * n_, stream_));
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(g_.get(), 0, sizeof(float) * m_, stream_));
  sync();  // `found` and the temporaries above
  const SideBounds bx = decode_bounds(found), by = decode_bounds(found + 2);
  hx.largest = bx.largest;
  hx.max_norm = bx.max_norm;
  hy.largest = by.largest;
  hy.max_norm = by.max_norm;
}

void DeviceStep::Impl::apply_resident(const PlanParams& p, Side rows, const float* v, std::size_t k, bool normalized,
                                      float* out) const {
  if (k == 0) return;
  if (pattern_) return block_apply_resident(p, rows, v, k, normalized, out);
  const Scale sc = Scale::make(p.epsilon, p.cost_scale, d_);
  const bool source = rows == Side::kSource;
  const DevSide r = source ? x_side() : y_side(), c = source ? y_side() : x_side();
  const float* h = source ? g_.get() : f_.get();
  const float* pot = source ? f_.get() : g_.get();
  lse_.reserve(r.count);
  wsum_.reserve(r.count);
  op_flag_.reserve(1);
  plan_shift(source, sc, lse_.get());
  // The passes of apply(), with the column chunks of V and out copied on the device (strided copies).
  const std::size_t kc = apply_columns_per_pass(rows_total_, std::size_t(m_), k);
  for (std::size_t c0 = 0; c0 < k; c0 += kc) {
    const std::size_t width = std::min(kc, k - c0);
    const float* vpass = v;
    float* opass = out;
    if (width < k) {
      vin_.reserve(std::size_t(c.count) * width);
      FLASHOT_CUDA_CHECK(cudaMemcpy2DAsync(vin_.get(), width * sizeof(float), v + c0, k * sizeof(float),
                                           width * sizeof(float), c.count, cudaMemcpyDeviceToDevice, stream_));
      vpass = vin_.get();
      out_.reserve(std::size_t(r.count) * width);
      opass = out_.get();
    }
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(opass, 0, sizeof(float) * r.count * width, stream_));
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(wsum_.get(), 0, sizeof(float) * r.count, stream_));
    if (tensor_ops()) {
      apply_mma_pass(source, sc, lse_.get(), vpass, static_cast<int>(width), nullptr, opass, wsum_.get());
    } else {
      const ReductionPlan plan = plan_apply(r, c, d_, static_cast<int>(width), resident_blocks_);
      launch_apply(r, c, h, sc, lse_.get(), vpass, static_cast<int>(width), plan, opass, wsum_.get(), stream_);
    }
    if (!source) {
      sum_columns(opass, std::size_t(r.count) * width);
      sum_columns(wsum_.get(), r.count);
    }
    launch_apply_scale(r, pot, lse_.get(), wsum_.get(), static_cast<int>(width), normalized, sc, opass, stream_);
    if (width < k)
      FLASHOT_CUDA_CHECK(cudaMemcpy2DAsync(out + c0, k * sizeof(float), opass, width * sizeof(float),
                                           width * sizeof(float), r.count, cudaMemcpyDeviceToDevice, stream_));
  }
}

void DeviceStep::Impl::apply_points(const PlanParams& p, Side rows, bool normalized, std::span<float> out) const {
  DeviceScope scope(device_);
  const bool source = rows == Side::kSource;
  const std::size_t count = std::size_t(source ? n_ : m_) * d_;
  rout_.reserve(count);
  apply_resident(p, rows, source ? y_.get() : x_.get(), d_, normalized, rout_.get());
  rout_.download(out.first(count), stream_);
  sync();
}

void DeviceStep::Impl::map_resident(const PlanParams& p, Side from, PointsView q, std::span<float> out) const {
  if (q.d != std::size_t(d_)) {
    throw std::invalid_argument("queries have " + std::to_string(q.d) + " dimensions, the problem has " +
                                std::to_string(d_));
  }
  if (q.n == 0) return;
  DeviceScope scope(device_);
  apply_queries_on(p, from, q, from == Side::kSource ? y_.get() : x_.get(), d_, out);
}

void DeviceStep::Impl::points_gradient(const PlanParams& p, Side wrt, std::span<float> out) const {
  DeviceScope scope(device_);
  const bool source = wrt == Side::kSource;
  const int count = source ? n_ : m_;
  const std::size_t values = std::size_t(count) * d_;
  // T (normalized P·Y), the row masses r = P·1 (apply with V = ones, as Problem's marginal), then 2s·r·(p − T).
  rout_.reserve(2 * values);
  rmass_.reserve(count);
  const std::size_t others = source ? m_ : n_;
  if (ones_.size() < others) {
    ones_.reserve(others);
    launch_fill(ones_.get(), ones_.size(), 1.0f, stream_);
  }
  apply_resident(p, wrt, source ? y_.get() : x_.get(), d_, true, rout_.get());
  apply_resident(p, wrt, ones_.get(), 1, false, rmass_.get());
  launch_points_gradient(source ? x_.get() : y_.get(), rout_.get(), rmass_.get(), count, d_, 2.0 * p.cost_scale,
                         rout_.get() + values, stream_);
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(out.data(), rout_.get() + values, sizeof(float) * values,
                                     cudaMemcpyDeviceToHost, stream_));
  sync();
}

WeightedSums DeviceStep::Impl::weighted_sums(Side side, std::size_t offset, std::span<const float> h,
                                            std::span<const float> hh, double epsilon, double rho) const {
  const std::size_t total = side == Side::kSource ? std::size_t(n_) : std::size_t(m_);
  if (offset > total || h.size() > total - offset || (!hh.empty() && hh.size() != h.size()))
    throw std::invalid_argument("weighted_sums: points [" + std::to_string(offset) + ", " +
                                std::to_string(offset + h.size()) + ") of a side of " + std::to_string(total));
  WeightedSums sums;
  if (h.empty()) return sums;
  DeviceScope scope(device_);
  wsum_h_.upload(h, stream_);
  if (!hh.empty()) wsum_hh_.upload(hh, stream_);
  const int blocks = weighted_sum_blocks(h.size());
  wsum_partials_.reserve(2 * std::size_t(blocks));
  const float* w = (side == Side::kSource ? a_.get() : b_.get()) + offset;
  launch_weighted_sums(w, wsum_h_.get(), hh.empty() ? nullptr : wsum_hh_.get(), h.size(), epsilon, rho,
                       wsum_partials_.get(), stream_);
  std::vector<double> partials(2 * std::size_t(blocks));
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(partials.data(), wsum_partials_.get(), sizeof(double) * partials.size(),
                                     cudaMemcpyDeviceToHost, stream_));
  sync();
  for (int k = 0; k < blocks; ++k) {  // block order: the same sums every run
    sums.marginal += partials[2 * k];
    sums.dual += partials[2 * k + 1];
  }
  return sums;
}

void DeviceStep::Impl::batch_weighted_sums(Side side, std::span<const WeightedRange> ranges, std::span<const float> h,
                                           std::span<const float> hh, std::span<WeightedSums> out) const {
  const std::size_t total = side == Side::kSource ? std::size_t(n_) : std::size_t(m_);
  if (h.size() != total || (!hh.empty() && hh.size() != total) || out.size() != ranges.size())
    throw std::invalid_argument("batch_weighted_sums: h must span the side's " + std::to_string(total) +
                                " points (got " + std::to_string(h.size()) + ")");
  // Each range reduced by weighted_sum_blocks(count) blocks as its one-range call, partials in range order.
  std::vector<SumRange> table;
  int widest = 0, blocks = 0;
  for (const WeightedRange& r : ranges) {
    if (r.offset > total || r.count > total - r.offset)
      throw std::invalid_argument("batch_weighted_sums: points [" + std::to_string(r.offset) + ", " +
                                  std::to_string(r.offset + r.count) + ") of a side of " + std::to_string(total));
    const int b = r.count == 0 ? 0 : weighted_sum_blocks(r.count);
    table.push_back({r.offset, r.count, r.epsilon, r.rho, blocks, b});
    blocks += b;
    widest = std::max(widest, b);
  }
  std::fill(out.begin(), out.end(), WeightedSums{});
  if (blocks == 0) return;
  DeviceScope scope(device_);
  wsum_h_.upload(h, stream_);
  if (!hh.empty()) wsum_hh_.upload(hh, stream_);
  wsum_ranges_.upload(std::span<const SumRange>(table), stream_);
  wsum_partials_.reserve(2 * std::size_t(blocks));
  launch_batch_weighted_sums(side == Side::kSource ? a_.get() : b_.get(), wsum_h_.get(),
                             hh.empty() ? nullptr : wsum_hh_.get(), wsum_ranges_.get(), int(table.size()), widest,
                             wsum_partials_.get(), stream_);
  std::vector<double> partials(2 * std::size_t(blocks));
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(partials.data(), wsum_partials_.get(), sizeof(double) * partials.size(),
                                     cudaMemcpyDeviceToHost, stream_));
  sync();
  for (std::size_t q = 0; q < table.size(); ++q)
    for (int k = table[q].first_block; k < table[q].first_block + table[q].blocks; ++k) {  // block order
      out[q].marginal += partials[2 * std::size_t(k)];
      out[q].dual += partials[2 * std::size_t(k) + 1];
    }
}

void DeviceStep::Impl::resident_primal_terms(const PlanParams& p, std::span<double> terms) const {
  DeviceScope scope(device_);
  const std::size_t k = std::size_t(d_) + 2;
  // V = [y | ‖y‖² | 1] in rmass_, the pass into rout_, the per-row terms to the caller.
  rmass_.reserve(std::size_t(m_) * k);
  rout_.reserve(std::size_t(n_) * k);
  rterms_.reserve(n_);
  launch_moment_values(y_.get(), yn_.get(), m_, d_, rmass_.get(), stream_);
  apply_resident(p, Side::kSource, rmass_.get(), k, false, rout_.get());
  launch_primal_terms(x_.get(), rout_.get(), n_, d_, rterms_.get(), stream_);
  rterms_.download(terms.first(std::size_t(n_)), stream_);
  sync();
}

void DeviceStep::Impl::c_transform(double cost_scale, Side rows, std::span<const float> h, std::span<double> values,
                                   std::span<std::int32_t> index) const {
  DeviceScope scope(device_);
  const CtInputs in = ct_inputs(rows);
  run_c_transform(in.sides, h, cost_scale, sms_, in.rows_op, in.cols_op, ct_choices_, values, index, ct_scratch_,
                  stream_);
}

void DeviceStep::Impl::c_transform_rounded(double cost_scale, Side rows, std::span<const float> h,
                                           std::vector<float>& values, std::vector<std::int32_t>& index) const {
  DeviceScope scope(device_);
  const CtInputs in = ct_inputs(rows);
  run_c_transform_rounded(in.sides, h, cost_scale, sms_, in.rows_op, in.cols_op, ct_choices_, values, index,
                          ct_scratch_, stream_);
}

DeviceStep::Impl::CtInputs DeviceStep::Impl::ct_inputs(Side rows) const {
  const bool source = rows == Side::kSource;
  const DevSide r = source ? x_side() : y_side();
  const DevSide c = source ? y_side() : x_side();
  return {CTransformSides{r.points, r.norm2, r.count, c.points, c.norm2, c.count, d_},
          use_mma_ ? (source ? &xop_ : &yop_) : nullptr, use_mma_ ? (source ? &yop_ : &xop_) : nullptr};
}

EngineStatistics DeviceStep::Impl::statistics() const {
  EngineStatistics out;
  out.one_pass_steps = tally_.one_pass;
  out.shifted_steps = tally_.shifted;
  out.skipped_steps = tally_.skipped;
  out.redone_steps = tally_.redone;
  out.steps_with_strays = tally_.with_strays;
  out.strays = tally_.strays;
  DeviceScope scope(device_);
  const CTransformCounts ct = c_transform_counts(ct_scratch_, stream_);
  out.c_transform_rescored = ct.rescored;
  out.c_transform_rescanned = ct.rescanned;
  if (screen_.size() == 0) return out;
  ScreenState sites[3];
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(sites, screen_.get(), sizeof sites, cudaMemcpyDeviceToHost, stream_));
  sync();
  out.screened = true;
  ScreenSiteStatistics* into[3] = {&out.rows_lse, &out.columns_lse, &out.sums};
  for (int i = 0; i < 3; ++i) {
    into[i]->kept_tiles = sites[i].kept_total;
    into[i]->seen_tiles = sites[i].seen_total;
    into[i]->next_screened = sites[i].use != 0;
  }
  return out;
}

std::size_t step_resident_bytes(std::size_t n, std::size_t m, std::size_t d, bool tensor_cores, bool split,
                                bool warpgroup, bool biased) {
  const std::size_t points = n + m;
  // Coordinates; ‖p‖², ln w, w; f, g, their one-pass results and sums; LSE partials of a pass (a few splits of
  // (max, sum) pairs at most where the rows are few, about one where they are many): 8 bytes twice per point.
  std::size_t bytes = points * d * sizeof(float) + points * 3 * sizeof(float) + points * 6 * sizeof(float) +
                      points * 2 * 8;
  if (tensor_cores) {
    const std::size_t padded = static_cast<std::size_t>(tensor_padded_d(static_cast<int>(std::min<std::size_t>(d, 4096))));
    bytes += points * padded * 2 * (split ? 2 : 1);  // 16-bit operands (hi, lo)
    if (warpgroup) bytes += (points + 128) * padded * 4 + (points + 128) * sizeof(float);  // column tiles, biases
    // The biased sums' operands: the rows' hi and lo, the columns' tiles (bias_padded_d ≤ 32, d ≤ kBiasMaxD).
    if (biased) bytes += (points + 64) * std::size_t(bias_padded_d(static_cast<int>(std::min<std::size_t>(d, 32)))) * 4;
  }
  // The first step's strays: their indices and packed points, and their LSE partials (stray_plan).
  for (const std::size_t side : {n, m}) {
    const auto cap = static_cast<std::size_t>(stray_capacity(static_cast<int>(std::min<std::size_t>(side, INT32_MAX)),
                                                             static_cast<int>(d)));
    bytes += cap * (d + 4) * sizeof(float) + std::min<std::size_t>(std::size_t(32) << 20, cap * 256 * 8);
  }
  return bytes + (std::size_t(16) << 20);  // flags, forecasts, screen states, the samples, the graph's scratch
}

DeviceStep::DeviceStep(const BackendOptions& options, int device, const ProblemData& data, std::size_t rows_total,
                       const ShardLink* link, float largest)
    : impl_(std::make_unique<Impl>(options, device, data, rows_total, link, largest)) {}

float largest_coordinate(const PointsView& p) {
  float largest = 0;
  for (const float c : p.data.first(p.n * p.d)) largest = std::max(largest, std::abs(c));
  return largest;
}
DeviceStep::~DeviceStep() = default;
int DeviceStep::device() const { return impl_->device_id(); }
cudaStream_t DeviceStep::stream() const { return impl_->stream(); }
std::string DeviceStep::description() const { return impl_->device(); }
EngineStatistics DeviceStep::statistics() const { return impl_->statistics(); }
void DeviceStep::set_potentials(std::span<const float> f, std::span<const float> g) { impl_->set_potentials(f, g); }
void DeviceStep::get_potentials(std::span<float> f, std::span<float> g) const { impl_->get_potentials(f, g); }
bool DeviceStep::iterate(const IterationParams& p, int count) { return impl_->iterate(p, count); }
void DeviceStep::softmin(const PlanParams& p, Side rows, std::span<float> out) const { impl_->softmin(p, rows, out); }
void DeviceStep::apply(const PlanParams& p, Side rows, std::span<const float> v, std::size_t k, bool normalized,
                       std::span<float> out) const {
  impl_->apply(p, rows, v, k, normalized, out);
}
bool DeviceStep::apply_bilinear(const PlanParams& p, Side rows, std::span<const float> u, std::span<const float> w,
                                std::size_t e, std::span<const float> v, std::size_t k, std::span<float> out) const {
  return impl_->apply_bilinear(p, rows, u, w, e, v, k, out);
}
void DeviceStep::apply_queries(const PlanParams& p, Side from, PointsView q, std::span<const float> v, std::size_t k,
                               std::span<float> out) const {
  impl_->apply_queries(p, from, q, v, k, out);
}
void DeviceStep::c_transform(double cost_scale, Side rows, std::span<const float> h, std::span<double> values,
                             std::span<std::int32_t> index) const {
  impl_->c_transform(cost_scale, rows, h, values, index);
}
void DeviceStep::c_transform_rounded(double cost_scale, Side rows, std::span<const float> h,
                                     std::vector<float>& values, std::vector<std::int32_t>& index) const {
  impl_->c_transform_rounded(cost_scale, rows, h, values, index);
}

void DeviceStep::top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns,
                       std::span<float> values) const {
  impl_->top_k(p, k, columns, values);
}
void DeviceStep::apply_points(const PlanParams& p, Side rows, bool normalized, std::span<float> out) const {
  impl_->apply_points(p, rows, normalized, out);
}
void DeviceStep::map_resident(const PlanParams& p, Side from, PointsView q, std::span<float> out) const {
  impl_->map_resident(p, from, q, out);
}
void DeviceStep::points_gradient(const PlanParams& p, Side wrt, std::span<float> out) const {
  impl_->points_gradient(p, wrt, out);
}
void DeviceStep::resident_primal_terms(const PlanParams& p, std::span<double> terms) const {
  impl_->resident_primal_terms(p, terms);
}
void DeviceStep::batch_weighted_sums(Side side, std::span<const WeightedRange> ranges, std::span<const float> h,
                                     std::span<const float> hh, std::span<WeightedSums> out) const {
  impl_->batch_weighted_sums(side, ranges, h, hh, out);
}
WeightedSums DeviceStep::weighted_sums(Side side, std::size_t offset, std::span<const float> h,
                                       std::span<const float> hh, double epsilon, double rho) const {
  return impl_->weighted_sums(side, offset, h, hh, epsilon, rho);
}

void DeviceStep::set_pattern(std::shared_ptr<const BlockPattern> pattern) { impl_->set_pattern(std::move(pattern)); }

// ---- Block-sparse mode (docs/block-sparse.md): the lists on the device and the tiled kernels of blocks.cu --------

void DeviceStep::Impl::set_pattern(std::shared_ptr<const BlockPattern> pattern) {
  static_assert(kPatternBlock == static_cast<int>(kBlockSize), "blocks.cuh and block_pattern.hpp agree");
  if (pattern && link_ != nullptr)
    throw std::runtime_error("block-sparse patterns on several GPUs are not supported yet (docs/block-sparse.md)");
  if (pattern && (pattern->rows() != std::size_t(n_) || pattern->cols() != std::size_t(m_)))
    throw std::invalid_argument("block pattern of " + std::to_string(pattern->rows()) + " × " +
                                std::to_string(pattern->cols()) + " points for a problem of " + std::to_string(n_) +
                                " × " + std::to_string(m_));
  DeviceScope scope(device_);
  pattern_ = std::move(pattern);
  if (!pattern_) return;
  const auto ranges = [](const std::vector<BlockRange>& r) {
    std::vector<int2> out(r.size());
    for (std::size_t q = 0; q < r.size(); ++q) out[q] = make_int2(r[q].begin, r[q].end);
    return out;
  };
  const std::vector<int2> rr = ranges(pattern_->row_ranges()), cr = ranges(pattern_->col_ranges());
  pat_row_off_.upload(std::span<const int>(pattern_->row_offsets()), stream_);
  pat_row_seg_.upload(std::span<const int>(pattern_->row_segment()), stream_);
  pat_col_off_.upload(std::span<const int>(pattern_->col_offsets()), stream_);
  pat_col_seg_.upload(std::span<const int>(pattern_->col_segment()), stream_);
  pat_row_ranges_.upload(std::span<const int2>(rr), stream_);
  pat_col_ranges_.upload(std::span<const int2>(cr), stream_);
  // Splits: about two waves of thread blocks over the active 64-row tiles, never more than the longest list's tiles.
  const auto splits = [&](bool rows) {
    const std::size_t blocks = rows ? pattern_->row_blocks() : pattern_->col_blocks();
    const std::size_t points = rows ? std::size_t(n_) : std::size_t(m_);
    const std::size_t other = rows ? std::size_t(m_) : std::size_t(n_);
    std::int64_t active_tiles = 0, most = 1;
    for (std::size_t b = 0; b < blocks; ++b) {
      const auto list = pattern_->list(rows, b);
      if (list.empty()) continue;
      const auto [p0, p1] = BlockPattern::block_points(b, points);
      active_tiles += std::int64_t((p1 - p0 + 63) / 64);  // 64-row thread blocks (blocks.cu)
      std::int64_t tiles = 0;
      for (const BlockRange& r : list) {
        const std::size_t jb = std::size_t(r.begin) * kBlockSize, je = std::min(other, std::size_t(r.end) * kBlockSize);
        tiles += std::int64_t((je - jb + 63) / 64);  // 64-column tiles
      }
      most = std::max(most, tiles);
    }
    const std::int64_t wanted = 2 * std::int64_t(std::max(resident_blocks_, 1));
    return static_cast<int>(std::clamp<std::int64_t>((wanted + std::max<std::int64_t>(active_tiles, 1) - 1) /
                                                         std::max<std::int64_t>(active_tiles, 1),
                                                     1, most));
  };
  pat_splits_rows_ = splits(true);
  pat_splits_cols_ = splits(false);
  part_rows_.reserve(std::size_t(pat_splits_rows_) * n_);
  part_cols_.reserve(std::size_t(pat_splits_cols_) * m_);
  pat_redo_.reserve(std::max(pattern_->row_blocks(), pattern_->col_blocks()));
  flags_.reserve(1);
  op_flag_.reserve(1);
  sync();
}

BlockLists DeviceStep::Impl::block_lists(bool x_rows) const {
  if (x_rows)
    return {pat_row_off_.get(), pat_row_ranges_.get(), pat_row_seg_.get(), static_cast<int>(pattern_->row_blocks())};
  return {pat_col_off_.get(), pat_col_ranges_.get(), pat_col_seg_.get(), static_cast<int>(pattern_->col_blocks())};
}

void DeviceStep::Impl::upload_segments(std::span<const SegmentParams> segments, const SegmentParams& scalars) const {
  const std::size_t count = pattern_->segments();
  if (!segments.empty() && segments.size() < count)
    throw std::invalid_argument(std::to_string(segments.size()) + " segment parameters for a block pattern of " +
                                std::to_string(count) + " segments");
  std::vector<SegmentScale> table(count);
  for (std::size_t s = 0; s < count; ++s) {
    const SegmentParams sp = segments.empty() ? scalars : segments[s];
    const Scale sc = Scale::make(sp.epsilon, sp.cost_scale, d_);
    table[s].alpha = sc.alpha;
    table[s].c1 = sc.c1;
    table[s].s = sc.s;
    table[s].epsilon_ln2 = static_cast<float>(sp.epsilon * 0.6931471805599453);
    table[s].lambda_f = static_cast<float>(sp.damping_f);
    table[s].lambda_g = static_cast<float>(sp.damping_g);
    table[s].omega = static_cast<float>(sp.relaxation);
  }
  seg_.upload(std::span<const SegmentScale>(table), stream_);
}

void DeviceStep::Impl::block_lse(bool x_rows, const float* h, int splits, float2* partials, const float* self) const {
  const DevSide r = x_rows ? x_side() : y_side(), c = x_rows ? y_side() : x_side();
  const MmaOperands& rop = x_rows ? xop_ : yop_;
  const MmaOperands& cop = x_rows ? yop_ : xop_;
  if (use_mma_ && block_wg_serves(rop, cop)) {
    // Hopper: the warpgroup tile core over the listed tiles (docs/block-sparse.md); the column biases of this pass
    // go to the column side's bias buffer (free while a pattern is set: the dense kernels recompute theirs).
    launch_block_lse_wg(r, c, rop, cop, h, block_lists(x_rows), block_lists(!x_rows).segment, seg_.get(),
                        x_rows ? ybias_.get() : xbias_.get(), splits, partials, stream_);
    return;
  }
  if (use_mma_ && block_mma_serves(xop_) && block_mma_serves(yop_)) {
    launch_block_lse_mma(r, c, x_rows ? xop_ : yop_, x_rows ? yop_ : xop_, h, block_lists(x_rows), seg_.get(), splits,
                         partials, stream_);
    return;
  }
  launch_block_lse(r, c, h, d_, block_lists(x_rows), seg_.get(), splits, partials, stream_, self,
                   self != nullptr ? pat_redo_.get() : nullptr);
}

bool DeviceStep::Impl::block_iterate(const IterationParams& p, int count) {
  DeviceScope scope(device_);
  upload_segments(p.segments, SegmentParams{p.epsilon, p.cost_scale, p.damping_f, p.damping_g, p.relaxation});
  const DevSide x = x_side(), y = y_side();
  const BlockLists lx = block_lists(true), ly = block_lists(false);
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(flags_.get(), 0, sizeof(int), stream_));
  const bool alternating = p.scheme == Scheme::kAlternating;
  for (int it = 0; it < count; ++it) {
    // The iterations' passes take the register kernel's shifted form where it serves (d ≤ 4): each row's exponents
    // against the log2-sum its current potential implies (launch_block_lse).
    block_lse(true, g_.get(), pat_splits_rows_, part_rows_.get(), f_.get());
    if (alternating)
      launch_block_finalize(Finalize::kAlternating, part_rows_.get(), pat_splits_rows_, x, lx, seg_.get(), true,
                            f_.get(), flags_.get(), stream_);
    block_lse(false, f_.get(), pat_splits_cols_, part_cols_.get(), g_.get());
    if (!alternating)
      launch_block_finalize(Finalize::kSymmetric, part_rows_.get(), pat_splits_rows_, x, lx, seg_.get(), true,
                            f_.get(), flags_.get(), stream_);
    launch_block_finalize(alternating ? Finalize::kAlternating : Finalize::kSymmetric, part_cols_.get(),
                          pat_splits_cols_, y, ly, seg_.get(), false, g_.get(), flags_.get(), stream_);
  }
  int nonfinite = 0;
  FLASHOT_CUDA_CHECK(cudaMemcpyAsync(&nonfinite, flags_.get(), sizeof(int), cudaMemcpyDeviceToHost, stream_));
  sync();
  cold_ = false;
  carry_forecast_ = false;
  return nonfinite == 0;
}

void DeviceStep::Impl::block_softmin(const PlanParams& p, Side rows, std::span<float> out) const {
  DeviceScope scope(device_);
  upload_segments(p.segments, SegmentParams{p.epsilon, p.cost_scale, 1, 1});
  const bool source = rows == Side::kSource;
  const DevSide r = source ? x_side() : y_side(), c = source ? y_side() : x_side();
  const BlockLists lists = block_lists(source);
  const int splits = source ? pat_splits_rows_ : pat_splits_cols_;
  part_ops_.reserve(std::size_t(splits) * r.count);
  softmin_out_.reserve(r.count);
  block_lse(source, source ? g_.get() : f_.get(), splits, part_ops_.get());
  launch_block_finalize(Finalize::kSoftmin, part_ops_.get(), splits, r, lists, seg_.get(), source,
                        softmin_out_.get(), nullptr, stream_);
  softmin_out_.download(out.first(r.count), stream_);
  sync();
}

BlockLists DeviceStep::Impl::block_shift(const PlanParams& p, bool source) const {
  upload_segments(p.segments, SegmentParams{p.epsilon, p.cost_scale, 1, 1});
  const DevSide r = source ? x_side() : y_side(), c = source ? y_side() : x_side();
  const BlockLists lists = block_lists(source);
  const float* h = source ? g_.get() : f_.get();
  const int splits = source ? pat_splits_rows_ : pat_splits_cols_;
  part_ops_.reserve(std::size_t(splits) * r.count);
  lse_.reserve(r.count);
  wsum_.reserve(r.count);
  launch_block_lse(r, c, h, d_, lists, seg_.get(), splits, part_ops_.get(), stream_);
  launch_block_finalize(Finalize::kLse2, part_ops_.get(), splits, r, lists, seg_.get(), source, lse_.get(), nullptr,
                        stream_);
  return lists;
}

void DeviceStep::Impl::block_product(bool source, const BlockLists& lists, const float* v, int k, float* out) const {
  const DevSide r = source ? x_side() : y_side(), c = source ? y_side() : x_side();
  const float* h = source ? g_.get() : f_.get();
  if (!tensor_ops()) {
    launch_block_apply(r, c, h, d_, lists, seg_.get(), lse_.get(), v, k, out, wsum_.get(), stream_);
    return;
  }
  // The dense application's tensor-core product over the listed tiles: split-fp16 weights and values, each k16
  // step's products summed in fp32 (apply_mma.cu). The fp32 FMA kernel multiplied a 64-wide chunk of V per entry.
  const MmaValues values = split_values(c.count, v, k);
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float) * std::size_t(r.count) * k, stream_));
  FLASHOT_CUDA_CHECK(cudaMemsetAsync(wsum_.get(), 0, sizeof(float) * std::size_t(r.count), stream_));
  launch_block_apply_mma(r, c, source ? xop_ : yop_, source ? yop_ : xop_, h, lists, seg_.get(), lse_.get(), values,
                         out, wsum_.get(), stream_);
}

void DeviceStep::Impl::block_apply_resident(const PlanParams& p, Side rows, const float* v, std::size_t k,
                                            bool normalized, float* out) const {
  const bool source = rows == Side::kSource;
  const DevSide r = source ? x_side() : y_side(), c = source ? y_side() : x_side();
  const BlockLists lists = block_shift(p, source);
  const float* pot = source ? f_.get() : g_.get();
  // block_apply's passes, with the column chunks of V and out copied on the device (apply_resident's).
  const std::size_t kc = apply_columns_per_pass(std::size_t(r.count), std::size_t(c.count), k);
  for (std::size_t c0 = 0; c0 < k; c0 += kc) {
    const std::size_t width = std::min(kc, k - c0);
    const float* vpass = v;
    float* opass = out;
    if (width < k) {
      vin_.reserve(std::size_t(c.count) * width);
      FLASHOT_CUDA_CHECK(cudaMemcpy2DAsync(vin_.get(), width * sizeof(float), v + c0, k * sizeof(float),
                                           width * sizeof(float), c.count, cudaMemcpyDeviceToDevice, stream_));
      vpass = vin_.get();
      out_.reserve(std::size_t(r.count) * width);
      opass = out_.get();
    }
    block_product(source, lists, vpass, static_cast<int>(width), opass);
    launch_block_apply_scale(r, lists, seg_.get(), pot, lse_.get(), wsum_.get(), static_cast<int>(width), normalized,
                             opass, stream_);
    if (width < k)
      FLASHOT_CUDA_CHECK(cudaMemcpy2DAsync(out + c0, k * sizeof(float), opass, width * sizeof(float),
                                           width * sizeof(float), r.count, cudaMemcpyDeviceToDevice, stream_));
  }
}

void DeviceStep::Impl::block_apply(const PlanParams& p, Side rows, std::span<const float> v, std::size_t k,
                                   bool normalized, std::span<float> out) const {
  DeviceScope scope(device_);
  const bool source = rows == Side::kSource;
  const DevSide r = source ? x_side() : y_side(), c = source ? y_side() : x_side();
  const BlockLists lists = block_shift(p, source);
  const float* pot = source ? f_.get() : g_.get();
  // The lists transpose the sides, so each side's rows own their sums: no atomics, no shard sums. V in chunks that
  // keep V and the output under kApplyBytes.
  const std::size_t kc = apply_columns_per_pass(std::size_t(r.count), std::size_t(c.count), k);
  std::vector<float> staging(kc < k ? std::max(std::size_t(r.count), std::size_t(c.count)) * kc : 0);
  for (std::size_t c0 = 0; c0 < k; c0 += kc) {
    const std::size_t width = std::min(kc, k - c0);
    if (width == k) {
      vin_.upload(v.first(std::size_t(c.count) * k), stream_);
    } else {
      sync();
      for (int j = 0; j < c.count; ++j)
        std::memcpy(&staging[std::size_t(j) * width], &v[std::size_t(j) * k + c0], width * sizeof(float));
      vin_.upload(std::span<const float>(staging.data(), std::size_t(c.count) * width), stream_);
    }
    out_.reserve(std::size_t(r.count) * width);
    block_product(source, lists, vin_.get(), static_cast<int>(width), out_.get());
    launch_block_apply_scale(r, lists, seg_.get(), pot, lse_.get(), wsum_.get(), static_cast<int>(width), normalized,
                             out_.get(), stream_);
    if (width == k) {
      out_.download(out.first(std::size_t(r.count) * k), stream_);
      sync();
    } else {
      out_.download(std::span<float>(staging.data(), std::size_t(r.count) * width), stream_);
      sync();
      for (int i = 0; i < r.count; ++i)
        std::memcpy(&out[std::size_t(i) * k + c0], &staging[std::size_t(i) * width], width * sizeof(float));
    }
  }
}

void DeviceStep::Impl::block_top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns,
                                   std::span<float> values) const {
  DeviceScope scope(device_);
  upload_segments(p.segments, SegmentParams{p.epsilon, p.cost_scale, 1, 1});
  topk_columns_.reserve(std::size_t(n_) * k);
  out_.reserve(std::size_t(n_) * k);
  launch_block_top_k(x_side(), y_side(), f_.get(), g_.get(), d_, block_lists(true), seg_.get(), static_cast<int>(k),
                     topk_columns_.get(), out_.get(), stream_);
  topk_columns_.download(columns.first(std::size_t(n_) * k), stream_);
  out_.download(values.first(std::size_t(n_) * k), stream_);
  sync();
}

}  // namespace cuda
}  // namespace flashot::detail
