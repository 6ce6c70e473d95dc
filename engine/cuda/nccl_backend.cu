// CUDA shards combined on the devices with NCCL (docs/design.md §5, docs/multi-gpu.md). Each shard — one device,
// driven by this process — holds a contiguous range of x's rows and all of y; f-updates are local, and the g-update
// merges the shards' per-column base-2 log-sum-exps with two all-reduces over m-vectors (MAX, then SUM of
// 2^(L_s − M)), so an iteration never leaves the devices. One process drives several devices (ncclCommInitAll),
// or each MPI rank drives one (ncclCommInitRank, the id made on rank 0 and broadcast by the program's MPI_Bcast).
//
// Every rank holds the whole problem on the host (Problem copies it), so the host-side solve loop runs identically
// on every rank; results that live on row shards (f, P·V, top-k) are gathered with NCCL broadcasts, so every rank
// returns the same full answer.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <nccl.h>

#include "backend.hpp"
#include "device_buffer.hpp"
#include "error.hpp"
#include "kernels.cuh"
#include "nccl_combine.cuh"
#include "nccl_comm.hpp"
#include "shard_backend.hpp"
#include "shard_plan.hpp"

namespace flashot::detail {
namespace cuda {
namespace {

/// Opens an NCCL group for the scope: the collectives of several local devices issued from one thread must be
/// fused (they complete together).
class NcclGroup {
 public:
  NcclGroup() { FLASHOT_NCCL_CHECK(ncclGroupStart()); }
  ~NcclGroup() noexcept(false) {
    if (std::uncaught_exceptions() == 0) FLASHOT_NCCL_CHECK(ncclGroupEnd());
    else ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
};

template <class T>
ncclDataType_t nccl_type();
template <>
ncclDataType_t nccl_type<float>() { return ncclFloat32; }
template <>
ncclDataType_t nccl_type<std::int32_t>() { return ncclInt32; }

/// One shard resident on one device: its rows of x (with a, f) and all of y (with b, g).
struct Shard {
  int device = 0;
  int index = 0;  // global shard index = rank in the communicator
  ShardRange rows;
  cudaStream_t stream = nullptr;
  int n = 0, m = 0, d = 0;
  int resident_blocks = 0;
  DeviceBuffer<float> x, y, xn, yn, loga, logb, a, b, f, g;
  ReductionPlan plan_rows, plan_cols;
  DeviceBuffer<float2> part_rows, part_cols, part_ops;
  // Column combination (sized for max(m, queries)): this shard's L_s, the reduced max and sum, the shares.
  DeviceBuffer<float> lse, top, share, sum;
  DeviceBuffer<int> flags;  // [0] non-finite in an update; [1] ignored (−∞ log-sum-exps are legitimate there);
                            // [2] the one-pass step must be redone the two-pass way (on any shard)
  ReductionPlan plan_sums;
  DeviceBuffer<float> rsum, csum, tmp_f, tmp_g;  // one-pass symmetric step: (n_s), (m), (n_s), (m)
  DeviceBuffer<float> row_lse, wsum, vin, out, queries, query_norm2, gathered;
  DeviceBuffer<std::int32_t> columns, gathered_columns;

  PointSet x_side() const { return {x.get(), xn.get(), loga.get(), a.get(), n}; }
  PointSet y_side() const { return {y.get(), yn.get(), logb.get(), b.get(), m}; }
  int* nonfinite() const { return flags.get(); }
  int* ignored() const { return flags.get() + 1; }
  int* redo() const { return flags.get() + 2; }
};

/// Copies one side to the device with ‖p‖² and ln w (−∞ for a zero weight).
void upload_side(PointsView p, std::span<const float> w, DeviceBuffer<float>& points, DeviceBuffer<float>& norm2,
                 DeviceBuffer<float>& logw, DeviceBuffer<float>& weight, cudaStream_t stream) {
  std::vector<float> n2(p.n), lw(w.size());
  for (std::size_t i = 0; i < p.n; ++i) {
    double s = 0;
    for (std::size_t c = 0; c < p.d; ++c) s += double(p.data[i * p.d + c]) * p.data[i * p.d + c];
    n2[i] = static_cast<float>(s);
  }
  std::transform(w.begin(), w.end(), lw.begin(), [](float v) { return v > 0 ? std::log(v) : -INFINITY; });
  points.upload(p.data, stream);
  norm2.upload(std::span<const float>(n2), stream);
  if (!w.empty()) {
    logw.upload(std::span<const float>(lw), stream);
    weight.upload(w, stream);
  }
  // The host vectors die with this function: the copies must be done.
  FLASHOT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

class NcclBackend final : public Backend {
 public:
  NcclBackend(const BackendOptions& options, const ProblemData& data);
  ~NcclBackend() override;
  NcclBackend(const NcclBackend&) = delete;
  NcclBackend& operator=(const NcclBackend&) = delete;

  std::string name() const override { return "cuda"; }
  std::string device() const override { return device_; }
  void set_potentials(std::span<const float> f, std::span<const float> g) override;
  void get_potentials(std::span<float> f, std::span<float> g) const override;
  bool iterate(const IterationParams& p, int count) override;
  void softmin(const PlanParams& p, Side rows, std::span<float> out) const override;
  void apply(const PlanParams& p, Side rows, std::span<const float> v, std::size_t k, bool normalized,
             std::span<float> out) const override;
  void apply_queries(const PlanParams& p, Side from, PointsView q, std::span<const float> v, std::size_t k,
                     std::span<float> out) const override;
  void top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns,
             std::span<float> values) const override;

 private:
  /// Per point of `r` against `c` with potential h, into out (r.count): LSE2 (kLse2) or the soft c-transform
  /// (kSoftmin).
  void lse2(Shard& s, const PointSet& r, const PointSet& c, const float* h, const Scale& sc, float* out,
            Finalize mode = Finalize::kLse2) const;
  /// From every shard's lse (count values, in Shard::lse): Shard::top = MAX over shards, Shard::sum = SUM of shares.
  void reduce_lse(int count) const;
  /// Sums `count` floats of `buffer(shard)` over the shards, in place.
  template <class Buffer>
  void sum_over_shards(Buffer buffer, std::size_t count) const;
  /// Rows of a (rows × width) result that live on the shards (the plan of rows in `parts`, one per global shard;
  /// local(s) the shard's part on its device) into host `out`, from every rank.
  template <class T, class Local, class Gathered>
  void gather_rows(const std::vector<ShardRange>& parts, std::size_t width, Local local, Gathered gathered,
                   std::span<T> out) const;
  void sync_all() const;
  /// Queues one iteration on every shard: two LSE passes (either scheme), or the one-exponential symmetric step.
  void enqueue_two_pass(const IterationParams& p, Finalize update) const;
  void enqueue_one_pass(const IterationParams& p) const;
  /// Streams, uploads and scratch of every local shard (the constructor's second half).
  void allocate(const ProblemData& data, const std::vector<int>& devices);
  void release_streams() noexcept;

  std::size_t n_ = 0, m_ = 0, d_ = 0;
  int rank_ = 0, ranks_ = 1;  // processes
  bool one_pass_ = false;
  std::vector<ShardRange> plan_;  // every global shard's rows
  mutable std::vector<Shard> shards_;  // the shards this process drives
  nccl::Communicators comms_;
  std::string device_;
};

NcclBackend::NcclBackend(const BackendOptions& options, const ProblemData& data)
    : n_(data.x.n), m_(data.y.n), d_(data.x.d), rank_(options.ranks > 1 ? options.rank : 0),
      ranks_(options.ranks) {
  if (data.x.n > std::size_t(INT32_MAX) || data.y.n > std::size_t(INT32_MAX))
    throw std::invalid_argument("CUDA shards take at most 2^31-1 points per side (got " +
                                std::to_string(std::max(data.x.n, data.y.n)) + ")");
  const int usable = cuda_device_count();
  std::vector<int> devices;
  if (ranks_ > 1) {
    devices = {options.devices.size() == 1 ? options.devices.front() : options.device};
  } else if (options.devices.size() > 1) {
    devices = options.devices;
  } else {
    throw std::invalid_argument("NCCL shards need one device per shard: list them in devices (got " +
                                std::to_string(local_shard_count(options)) +
                                " shards on one device; set nccl = false to combine those on the host)");
  }
  for (int dev : devices)
    if (dev < 0 || dev >= usable)
      throw std::runtime_error("CUDA device " + std::to_string(dev) + " asked for, but " + std::to_string(usable) +
                               " CUDA device(s) are usable on this machine");
  const int global = ranks_ > 1 ? ranks_ : static_cast<int>(devices.size());
  // The one-exponential symmetric step (docs/design.md §2) needs every weight positive, on every shard.
  one_pass_ = std::all_of(data.a.begin(), data.a.end(), [](float v) { return v > 0; }) &&
              std::all_of(data.b.begin(), data.b.end(), [](float v) { return v > 0; });
  plan_ = plan_shards(n_, global);
  comms_ = ranks_ > 1 ? nccl::Communicators::one_rank(nccl::unique_id_from_rank0(rank_, options.broadcast), rank_, ranks_,
                                                      devices.front())
                      : nccl::Communicators::single_process(devices);

  shards_.resize(devices.size());
  try {
    allocate(data, devices);
  } catch (...) {
    release_streams();
    throw;
  }
  device_ = std::to_string(global) + " row shards on " + device_ + " (NCCL, " +
            (ranks_ > 1 ? std::to_string(ranks_) + " MPI ranks" : std::to_string(devices.size()) + " devices") + ")";
}

void NcclBackend::allocate(const ProblemData& data, const std::vector<int>& devices) {
  for (std::size_t l = 0; l < devices.size(); ++l) {
    Shard& s = shards_[l];
    s.device = devices[l];
    s.index = ranks_ > 1 ? rank_ : static_cast<int>(l);
    s.rows = plan_[s.index];
    s.n = static_cast<int>(s.rows.size());
    s.m = static_cast<int>(m_);
    s.d = static_cast<int>(d_);
    DeviceScope scope(s.device);
    cudaDeviceProp prop{};
    FLASHOT_CUDA_CHECK(cudaGetDeviceProperties(&prop, s.device));
    if (l == 0) device_ = std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
    s.resident_blocks = prop.multiProcessorCount * 4;
    FLASHOT_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    upload_side({data.x.data.subspan(s.rows.begin * d_, s.rows.size() * d_), s.rows.size(), d_},
                data.a.subspan(s.rows.begin, s.rows.size()), s.x, s.xn, s.loga, s.a, s.stream);
    upload_side(data.y, data.b, s.y, s.yn, s.logb, s.b, s.stream);
    s.f.reserve(s.n);
    s.g.reserve(s.m);
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(s.f.get(), 0, sizeof(float) * s.n, s.stream));
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(s.g.get(), 0, sizeof(float) * s.m, s.stream));
    s.plan_rows = plan_lse(s.x_side(), s.y_side(), s.d, s.resident_blocks);
    s.plan_cols = plan_lse(s.y_side(), s.x_side(), s.d, s.resident_blocks);
    s.part_rows.reserve(std::size_t(s.plan_rows.splits) * s.n);
    s.part_cols.reserve(std::size_t(s.plan_cols.splits) * s.m);
    for (DeviceBuffer<float>* b : {&s.lse, &s.top, &s.share, &s.sum}) b->reserve(s.m);
    s.flags.reserve(3);
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(s.flags.get(), 0, 3 * sizeof(int), s.stream));
    if (one_pass_) {
      s.plan_sums = plan_symmetric(s.x_side(), s.y_side(), s.d, s.resident_blocks, prop.multiProcessorCount);
      s.rsum.reserve(s.n);
      s.csum.reserve(s.m);
      s.tmp_f.reserve(s.n);
      s.tmp_g.reserve(s.m);
      FLASHOT_CUDA_CHECK(cudaMemsetAsync(s.rsum.get(), 0, sizeof(float) * s.n, s.stream));
      FLASHOT_CUDA_CHECK(cudaMemsetAsync(s.csum.get(), 0, sizeof(float) * s.m, s.stream));
    }
  }
  sync_all();
}

NcclBackend::~NcclBackend() { release_streams(); }

void NcclBackend::release_streams() noexcept {
  // Nothing may throw here (destructor, or cleaning up after a failed constructor).
  int previous = 0;
  cudaGetDevice(&previous);
  for (Shard& s : shards_) {
    if (s.stream == nullptr) continue;
    cudaSetDevice(s.device);
    cudaStreamSynchronize(s.stream);
    cudaStreamDestroy(s.stream);
    s.stream = nullptr;
  }
  cudaSetDevice(previous);
}

void NcclBackend::sync_all() const {
  for (const Shard& s : shards_) {
    DeviceScope scope(s.device);
    FLASHOT_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  }
}

void NcclBackend::set_potentials(std::span<const float> f, std::span<const float> g) {
  for (Shard& s : shards_) {
    DeviceScope scope(s.device);
    s.f.upload(f.subspan(s.rows.begin, s.rows.size()), s.stream);
    s.g.upload(g, s.stream);
  }
  sync_all();
}

void NcclBackend::get_potentials(std::span<float> f, std::span<float> g) const {
  gather_rows<float>(plan_, 1, [](Shard& s) { return s.f.get(); }, [](Shard& s) -> DeviceBuffer<float>& { return s.gathered; }, f);
  Shard& first = shards_.front();
  DeviceScope scope(first.device);
  first.g.download(g, first.stream);
  FLASHOT_CUDA_CHECK(cudaStreamSynchronize(first.stream));
}

void NcclBackend::lse2(Shard& s, const PointSet& r, const PointSet& c, const float* h, const Scale& sc,
                       float* out, Finalize mode) const {
  const ReductionPlan plan = plan_lse(r, c, s.d, s.resident_blocks);
  s.part_ops.reserve(std::size_t(plan.splits) * r.count);
  launch_lse(r, c, h, sc, plan, s.part_ops.get(), nullptr, s.stream);
  const FinalizeSide side{s.part_ops.get(), plan.splits, r.norm2, out, nullptr, 1.f, r.count};
  launch_finalize(mode, side, {}, sc.epsilon, sc.s, nullptr, s.ignored(), s.stream);
}

void NcclBackend::reduce_lse(int count) const {
  {
    NcclGroup group;
    for (std::size_t l = 0; l < shards_.size(); ++l) {
      Shard& s = shards_[l];
      FLASHOT_NCCL_CHECK(ncclAllReduce(s.lse.get(), s.top.get(), count, ncclFloat32, ncclMax, comms_[l], s.stream));
    }
  }
  for (Shard& s : shards_) {
    DeviceScope scope(s.device);
    launch_lse_share(s.lse.get(), s.top.get(), s.share.get(), count, s.stream);
  }
  NcclGroup group;
  for (std::size_t l = 0; l < shards_.size(); ++l) {
    Shard& s = shards_[l];
    FLASHOT_NCCL_CHECK(ncclAllReduce(s.share.get(), s.sum.get(), count, ncclFloat32, ncclSum, comms_[l], s.stream));
  }
}

template <class Buffer>
void NcclBackend::sum_over_shards(Buffer buffer, std::size_t count) const {
  NcclGroup group;
  for (std::size_t l = 0; l < shards_.size(); ++l) {
    float* data = buffer(shards_[l]);
    FLASHOT_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comms_[l], shards_[l].stream));
  }
}

template <class T, class Local, class Gathered>
void NcclBackend::gather_rows(const std::vector<ShardRange>& parts, std::size_t width, Local local,
                              Gathered gathered, std::span<T> out) const {
  if (ranks_ == 1) {
    // Every part lives in this process: copy each down from its device.
    for (Shard& s : shards_) {
      if (std::size_t(s.index) >= parts.size()) continue;
      const ShardRange r = parts[s.index];
      DeviceScope scope(s.device);
      FLASHOT_CUDA_CHECK(cudaMemcpyAsync(out.data() + r.begin * width, local(s), r.size() * width * sizeof(T),
                                         cudaMemcpyDeviceToHost, s.stream));
    }
    sync_all();
    return;
  }
  // One shard per rank: every rank broadcasts its part into everyone's full copy, then copies it down.
  Shard& s = shards_.front();
  DeviceScope scope(s.device);
  auto& all = gathered(s);
  all.reserve(parts.back().end * width);
  {
    NcclGroup group;
    for (std::size_t root = 0; root < parts.size(); ++root) {
      const ShardRange r = parts[root];
      const T* send = root == std::size_t(s.index) ? local(s) : nullptr;
      FLASHOT_NCCL_CHECK(ncclBroadcast(send, all.get() + r.begin * width, r.size() * width, nccl_type<T>(),
                                       static_cast<int>(root), comms_[0], s.stream));
    }
  }
  all.download(out.first(parts.back().end * width), s.stream);
  FLASHOT_CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

void NcclBackend::enqueue_two_pass(const IterationParams& p, Finalize update) const {
  const auto lf = static_cast<float>(p.damping_f), lg = static_cast<float>(p.damping_g);
  for (Shard& s : shards_) {
    DeviceScope scope(s.device);
    const Scale sc = Scale::make(p.epsilon, p.cost_scale, s.d);
    const PointSet x = s.x_side(), y = s.y_side();
    const FinalizeSide rows{s.part_rows.get(), s.plan_rows.splits, s.xn.get(), s.f.get(), nullptr, lf, s.n};
    const FinalizeSide cols{s.part_cols.get(), s.plan_cols.splits, s.yn.get(), s.lse.get(), nullptr, 1.f, s.m};
    launch_lse(x, y, s.g.get(), sc, s.plan_rows, s.part_rows.get(), nullptr, s.stream);
    // Symmetric: g' from the old f, so the column pass is queued before f changes; alternating: from the new f.
    if (update == Finalize::kSymmetric)
      launch_lse(y, x, s.f.get(), sc, s.plan_cols, s.part_cols.get(), nullptr, s.stream);
    launch_finalize(update, rows, {}, p.epsilon, sc.s, nullptr, s.nonfinite(), s.stream);
    if (update == Finalize::kAlternating)
      launch_lse(y, x, s.f.get(), sc, s.plan_cols, s.part_cols.get(), nullptr, s.stream);
    launch_finalize(Finalize::kLse2, cols, {}, p.epsilon, sc.s, nullptr, s.ignored(), s.stream);
  }
  reduce_lse(static_cast<int>(m_));
  for (Shard& s : shards_) {
    DeviceScope scope(s.device);
    launch_combined_update(update, s.top.get(), s.sum.get(), s.yn.get(), p.epsilon, static_cast<float>(p.cost_scale),
                           lg, s.g.get(), s.m, s.nonfinite(), s.stream);
  }
}

void NcclBackend::enqueue_one_pass(const IterationParams& p) const {
  // One tile of exponentials gives row sums (local) and column sums (partial: SUM over the shards), as the one-GPU
  // backend does (docs/design.md §2); where a sum cannot be trusted on any shard, every shard redoes the step the
  // two-pass way (the guarded passes, then the commits choose).
  const auto lf = static_cast<float>(p.damping_f), lg = static_cast<float>(p.damping_g);
  for (Shard& s : shards_) {
    DeviceScope scope(s.device);
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(s.redo(), 0, sizeof(int), s.stream));
    launch_symmetric_sums(s.x_side(), s.y_side(), s.f.get(), s.g.get(), Scale::make(p.epsilon, p.cost_scale, s.d),
                          s.plan_sums, s.rsum.get(), s.csum.get(), nullptr, s.stream);
  }
  {
    NcclGroup group;
    for (std::size_t l = 0; l < shards_.size(); ++l) {
      Shard& s = shards_[l];
      FLASHOT_NCCL_CHECK(ncclAllReduce(s.csum.get(), s.csum.get(), m_, ncclFloat32, ncclSum, comms_[l], s.stream));
    }
  }
  for (Shard& s : shards_) {
    DeviceScope scope(s.device);
    launch_symmetric_finish(s.f.get(), s.g.get(), s.rsum.get(), s.csum.get(), s.b.get(), s.n, s.m, p.epsilon, lf, lg,
                            s.tmp_f.get(), s.tmp_g.get(), s.redo(), nullptr, s.stream);
  }
  {
    NcclGroup group;
    for (std::size_t l = 0; l < shards_.size(); ++l) {
      Shard& s = shards_[l];
      FLASHOT_NCCL_CHECK(ncclAllReduce(s.redo(), s.redo(), 1, ncclInt32, ncclMax, comms_[l], s.stream));
    }
  }
  for (Shard& s : shards_) {
    DeviceScope scope(s.device);
    const Scale sc = Scale::make(p.epsilon, p.cost_scale, s.d);
    const PointSet x = s.x_side(), y = s.y_side();
    const FinalizeSide rows{s.part_rows.get(), s.plan_rows.splits, s.xn.get(), s.f.get(), s.tmp_f.get(), lf, s.n};
    const FinalizeSide cols{s.part_cols.get(), s.plan_cols.splits, s.yn.get(), s.lse.get(), nullptr, 1.f, s.m};
    launch_lse(x, y, s.g.get(), sc, s.plan_rows, s.part_rows.get(), s.redo(), s.stream);
    launch_lse(y, x, s.f.get(), sc, s.plan_cols, s.part_cols.get(), s.redo(), s.stream);
    launch_finalize(Finalize::kCommit, rows, {}, p.epsilon, sc.s, s.redo(), s.nonfinite(), s.stream);
    // Without a redo the column partials are stale and this LSE2 is unused (the commit below takes tmp_g).
    launch_finalize(Finalize::kLse2, cols, {}, p.epsilon, sc.s, nullptr, s.ignored(), s.stream);
  }
  reduce_lse(static_cast<int>(m_));
  for (Shard& s : shards_) {
    DeviceScope scope(s.device);
    launch_combined_update(Finalize::kCommit, s.top.get(), s.sum.get(), s.yn.get(), p.epsilon,
                           static_cast<float>(p.cost_scale), lg, s.g.get(), s.m, s.nonfinite(), s.stream, s.redo(),
                           s.tmp_g.get());
  }
}

bool NcclBackend::iterate(const IterationParams& p, int count) {
  if (count <= 0) return true;
  const Finalize update = p.scheme == Scheme::kSymmetric ? Finalize::kSymmetric : Finalize::kAlternating;
  for (int it = 0; it < count; ++it) {
    if (update == Finalize::kSymmetric && one_pass_)
      enqueue_one_pass(p);
    else
      enqueue_two_pass(p, update);
  }
  // Every rank must stop together: the non-finite flags are reduced over the shards before anyone reads them.
  {
    NcclGroup group;
    for (std::size_t l = 0; l < shards_.size(); ++l)
      FLASHOT_NCCL_CHECK(ncclAllReduce(shards_[l].nonfinite(), shards_[l].nonfinite(), 1, ncclInt32, ncclMax,
                                       comms_[l], shards_[l].stream));
  }
  int nonfinite = 0;
  for (Shard& s : shards_) {
    DeviceScope scope(s.device);
    int flag = 0;
    FLASHOT_CUDA_CHECK(cudaMemcpyAsync(&flag, s.nonfinite(), sizeof(int), cudaMemcpyDeviceToHost, s.stream));
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(s.nonfinite(), 0, sizeof(int), s.stream));
    FLASHOT_CUDA_CHECK(cudaStreamSynchronize(s.stream));
    nonfinite |= flag;
  }
  return nonfinite == 0;
}

void NcclBackend::softmin(const PlanParams& p, Side rows, std::span<float> out) const {
  if (rows == Side::kSource) {
    for (Shard& s : shards_) {
      DeviceScope scope(s.device);
      const Scale sc = Scale::make(p.epsilon, p.cost_scale, s.d);
      s.out.reserve(s.n);
      lse2(s, s.x_side(), s.y_side(), s.g.get(), sc, s.out.get(), Finalize::kSoftmin);
    }
    gather_rows<float>(plan_, 1, [](Shard& s) { return s.out.get(); },
                       [](Shard& s) -> DeviceBuffer<float>& { return s.gathered; }, out);
    return;
  }
  for (Shard& s : shards_) {
    DeviceScope scope(s.device);
    lse2(s, s.y_side(), s.x_side(), s.f.get(), Scale::make(p.epsilon, p.cost_scale, s.d), s.lse.get());
  }
  reduce_lse(static_cast<int>(m_));
  Shard& first = shards_.front();
  for (Shard& s : shards_) {
    DeviceScope scope(s.device);
    s.out.reserve(s.m);
    launch_combined_update(Finalize::kSoftmin, s.top.get(), s.sum.get(), s.yn.get(), p.epsilon,
                           static_cast<float>(p.cost_scale), 1.f, s.out.get(), s.m, s.ignored(), s.stream);
  }
  DeviceScope scope(first.device);
  first.out.download(out.first(m_), first.stream);
  sync_all();
}

void NcclBackend::apply(const PlanParams& p, Side rows, std::span<const float> v, std::size_t k, bool normalized,
                        std::span<float> out) const {
  if (k == 0) return;
  const bool source = rows == Side::kSource;
  for (Shard& s : shards_) {
    DeviceScope scope(s.device);
    const Scale sc = Scale::make(p.epsilon, p.cost_scale, s.d);
    const PointSet r = source ? s.x_side() : s.y_side(), c = source ? s.y_side() : s.x_side();
    const float* h = source ? s.g.get() : s.f.get();
    const float* pot = source ? s.f.get() : s.g.get();
    s.row_lse.reserve(r.count);
    s.wsum.reserve(r.count);
    lse2(s, r, c, h, sc, s.row_lse.get());
    // P·V reads all of V (one row per target); Pᵀ·U reads this shard's rows of U.
    s.vin.upload(source ? v.first(m_ * k) : v.subspan(s.rows.begin * k, s.rows.size() * k), s.stream);
    s.out.reserve(std::size_t(r.count) * k);
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(s.out.get(), 0, sizeof(float) * r.count * k, s.stream));
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(s.wsum.get(), 0, sizeof(float) * r.count, s.stream));
    launch_apply(r, c, h, sc, s.row_lse.get(), s.vin.get(), static_cast<int>(k), plan_apply(r, c, s.resident_blocks),
                 s.out.get(), s.wsum.get(), s.stream);
    launch_apply_scale(r, pot, s.row_lse.get(), s.wsum.get(), static_cast<int>(k), normalized, sc, s.out.get(),
                       s.stream);
    if (!source && normalized) {
      // The shard's normalized result, weighted by its share of the column's mass (from its LSE2 over its rows).
      FLASHOT_CUDA_CHECK(cudaMemcpyAsync(s.lse.get(), s.row_lse.get(), sizeof(float) * m_, cudaMemcpyDeviceToDevice,
                                         s.stream));
    }
  }
  if (source) {
    gather_rows<float>(plan_, k, [](Shard& s) { return s.out.get(); },
                       [](Shard& s) -> DeviceBuffer<float>& { return s.gathered; }, out);
    return;
  }
  if (normalized) {
    reduce_lse(static_cast<int>(m_));
    for (Shard& s : shards_) {
      DeviceScope scope(s.device);
      launch_weight_by_share(s.lse.get(), s.top.get(), s.sum.get(), s.out.get(), s.m, static_cast<int>(k), s.stream);
    }
  }
  sum_over_shards([](Shard& s) { return s.out.get(); }, m_ * k);
  Shard& first = shards_.front();
  DeviceScope scope(first.device);
  first.out.download(out.first(m_ * k), first.stream);
  sync_all();
}

void NcclBackend::apply_queries(const PlanParams& p, Side from, PointsView q, std::span<const float> v,
                                std::size_t k, std::span<float> out) const {
  if (q.d != d_)
    throw std::invalid_argument("queries have " + std::to_string(q.d) + " dimensions, the problem has " +
                                std::to_string(d_));
  if (q.n == 0 || k == 0) return;
  const bool source = from == Side::kSource;
  // Source queries are mapped through y and g (on every shard): the queries are shared out. Target queries are
  // mapped through x, a and f (split over the shards): every shard maps all of them, weighted by mass share.
  const std::vector<ShardRange> parts =
      source ? plan_shards(q.n, static_cast<int>(std::min(plan_.size(), q.n)), 1) : std::vector<ShardRange>{};
  for (Shard& s : shards_) {
    const ShardRange r = source ? (std::size_t(s.index) < parts.size() ? parts[s.index] : ShardRange{}) : ShardRange{0, q.n};
    DeviceScope scope(s.device);
    for (DeviceBuffer<float>* b : {&s.lse, &s.top, &s.share, &s.sum}) b->reserve(std::max<std::size_t>(m_, q.n));
    if (r.size() == 0) continue;
    const Scale sc = Scale::make(p.epsilon, p.cost_scale, s.d);
    const PointsView mine{q.data.subspan(r.begin * q.d, r.size() * q.d), r.size(), q.d};
    DeviceBuffer<float> unused_logw, unused_weight;
    upload_side(mine, {}, s.queries, s.query_norm2, unused_logw, unused_weight, s.stream);
    const PointSet rows{s.queries.get(), s.query_norm2.get(), nullptr, nullptr, static_cast<int>(r.size())};
    const PointSet c = source ? s.y_side() : s.x_side();
    const float* h = source ? s.g.get() : s.f.get();
    s.row_lse.reserve(r.size());
    s.wsum.reserve(r.size());
    lse2(s, rows, c, h, sc, s.row_lse.get());
    s.vin.upload(source ? v.first(m_ * k) : v.subspan(s.rows.begin * k, s.rows.size() * k), s.stream);
    s.out.reserve(r.size() * k);
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(s.out.get(), 0, sizeof(float) * r.size() * k, s.stream));
    FLASHOT_CUDA_CHECK(cudaMemsetAsync(s.wsum.get(), 0, sizeof(float) * r.size(), s.stream));
    launch_apply(rows, c, h, sc, s.row_lse.get(), s.vin.get(), static_cast<int>(k),
                 plan_apply(rows, c, s.resident_blocks), s.out.get(), s.wsum.get(), s.stream);
    launch_apply_scale(rows, nullptr, s.row_lse.get(), s.wsum.get(), static_cast<int>(k), true, sc, s.out.get(),
                       s.stream);
    if (!source)
      FLASHOT_CUDA_CHECK(cudaMemcpyAsync(s.lse.get(), s.row_lse.get(), sizeof(float) * q.n, cudaMemcpyDeviceToDevice,
                                         s.stream));
  }
  if (source) {
    gather_rows<float>(parts, k, [](Shard& s) { return s.out.get(); },
                       [](Shard& s) -> DeviceBuffer<float>& { return s.gathered; }, out);
    return;
  }
  reduce_lse(static_cast<int>(q.n));
  for (Shard& s : shards_) {
    DeviceScope scope(s.device);
    launch_weight_by_share(s.lse.get(), s.top.get(), s.sum.get(), s.out.get(), static_cast<int>(q.n),
                           static_cast<int>(k), s.stream);
  }
  sum_over_shards([](Shard& s) { return s.out.get(); }, q.n * k);
  Shard& first = shards_.front();
  DeviceScope scope(first.device);
  first.out.download(out.first(q.n * k), first.stream);
  sync_all();
}

void NcclBackend::top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns,
                        std::span<float> values) const {
  if (k == 0 || k > m_)
    throw std::invalid_argument("top_k needs 1 <= k <= m = " + std::to_string(m_) + " (got " + std::to_string(k) +
                                ")");
  for (Shard& s : shards_) {
    DeviceScope scope(s.device);
    s.columns.reserve(std::size_t(s.n) * k);
    s.out.reserve(std::size_t(s.n) * k);
    launch_top_k(s.x_side(), s.y_side(), s.f.get(), s.g.get(), Scale::make(p.epsilon, p.cost_scale, s.d),
                 static_cast<int>(k), s.columns.get(), s.out.get(), s.stream);
  }
  gather_rows<std::int32_t>(plan_, k, [](Shard& s) { return s.columns.get(); },
                            [](Shard& s) -> DeviceBuffer<std::int32_t>& { return s.gathered_columns; }, columns);
  gather_rows<float>(plan_, k, [](Shard& s) { return s.out.get(); },
                     [](Shard& s) -> DeviceBuffer<float>& { return s.gathered; }, values);
}

}  // namespace
}  // namespace cuda

std::unique_ptr<Backend> make_nccl_backend(const BackendOptions& options, const ProblemData& data) {
  return std::make_unique<cuda::NcclBackend>(options, data);
}

}  // namespace flashot::detail
