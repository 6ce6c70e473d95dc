// CUDA shards combined on the devices with NCCL (docs/design.md §5, docs/multi-gpu.md). Each shard is a DeviceStep
// (device_step.hpp) — the one-GPU backend's step, with every score path (tensor cores, warpgroup kernels, screening,
// the one-exponential symmetric step, the precision options) — over a contiguous range of x's rows and all of y.
// This file adds only the collectives the step asks for (NcclLink) and the gathering of row-side results. One
// process drives several devices (ncclCommInitAll, one host thread per device while a step runs, each thread
// calling its own communicator), or each MPI rank drives one (ncclCommInitRank, the id made on rank 0 and broadcast
// by the program's MPI_Bcast).
//
// Every rank holds the whole problem on the host (Problem copies it), so the host-side solve loop runs identically
// on every rank; results that live on row shards (f, P·V, top-k) are gathered with NCCL broadcasts, so every rank
// returns the same full answer.

#include <algorithm>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nccl.h>

#include "backend.hpp"
#include "device_buffer.hpp"
#include "device_step.hpp"
#include "error.hpp"
#include "nccl_comm.hpp"
#include "shard_backend.hpp"
#include "shard_plan.hpp"

namespace flashot::detail {
namespace cuda {
namespace {

template <class T>
ncclDataType_t nccl_type();
template <>
ncclDataType_t nccl_type<float>() { return ncclFloat32; }
template <>
ncclDataType_t nccl_type<std::int32_t>() { return ncclInt32; }
template <>
ncclDataType_t nccl_type<double>() { return ncclFloat64; }

/// A shard's collectives: one communicator, called only from the thread that drives its device.
class NcclLink final : public ShardLink {
 public:
  NcclLink(ncclComm_t comm, int shards) : comm_(comm), shards_(shards) {}
  int shards() const override { return shards_; }
  void sum(float* data, std::size_t count, cudaStream_t stream) const override {
    FLASHOT_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, stream));
  }
  void max_unsigned(void* data, std::size_t count, cudaStream_t stream) const override {
    FLASHOT_NCCL_CHECK(ncclAllReduce(data, data, count, ncclUint32, ncclMax, comm_, stream));
  }
  void max_float(float* data, std::size_t count, cudaStream_t stream) const override {
    FLASHOT_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat32, ncclMax, comm_, stream));
  }
  void gather(const float2* mine, float2* all, std::size_t count, cudaStream_t stream) const override {
    FLASHOT_NCCL_CHECK(ncclAllGather(mine, all, 2 * count, ncclFloat32, comm_, stream));
  }

 private:
  ncclComm_t comm_;
  int shards_;
};

class NcclBackend final : public Backend {
 public:
  NcclBackend(const BackendOptions& options, const ProblemData& data);
  ~NcclBackend() override;
  NcclBackend(const NcclBackend&) = delete;
  NcclBackend& operator=(const NcclBackend&) = delete;

  std::string name() const override { return "cuda"; }
  std::string device() const override { return device_; }
  EngineStatistics statistics() const override;
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
  void apply_bilinear(const PlanParams& p, Side rows, std::span<const float> u, std::span<const float> w,
                      std::size_t e, std::span<const float> v, std::size_t k, std::span<float> out) const override;
  void c_transform(double cost_scale, Side side, std::span<const float> h, std::span<double> values,
                   std::span<std::int32_t> index) const override;

 private:
  /// Runs fn(l) for every local shard l: inline for one, one thread per device for several (each thread calls only
  /// its own communicator, so the collectives of the devices meet without NCCL groups). An exception on one device
  /// would leave the others waiting in a collective: the communicators are aborted (the backend is then unusable)
  /// and the first exception is rethrown.
  template <class Fn>
  void each(Fn fn) const;
  /// This shard's rows (global shard index of local shard l).
  ShardRange rows(std::size_t l) const { return plan_[index(l)]; }
  std::size_t index(std::size_t l) const { return ranks_ > 1 ? std::size_t(rank_) : l; }
  /// Every rank's part of a (parts × width) row-side result into `out` on every rank: in one process each local
  /// shard wrote its part already; over ranks, grouped NCCL broadcasts (one per part, unequal sizes allowed).
  template <class T>
  void share_rows(const std::vector<ShardRange>& parts, std::size_t width, std::span<T> out) const;
  /// Scratch for column-side results of local shards other than the first (they equal the first's).
  std::span<float> scratch(std::size_t l, std::size_t count) const {
    scratch_[l].resize(count);
    return scratch_[l];
  }

  std::size_t n_ = 0, m_ = 0, d_ = 0;
  int rank_ = 0, ranks_ = 1;  // processes
  std::vector<ShardRange> plan_;  // every global shard's rows
  mutable nccl::Communicators comms_;
  std::vector<std::unique_ptr<NcclLink>> links_;
  std::vector<std::unique_ptr<DeviceStep>> steps_;  // the shards this process drives
  mutable std::vector<std::vector<float>> scratch_;
  mutable bool broken_ = false;
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
  plan_ = plan_shards(n_, global);
  comms_ = ranks_ > 1 ? nccl::Communicators::one_rank(nccl::unique_id_from_rank0(rank_, options.broadcast), rank_,
                                                      ranks_, devices.front())
                      : nccl::Communicators::single_process(devices);
  for (std::size_t l = 0; l < devices.size(); ++l) links_.push_back(std::make_unique<NcclLink>(comms_[l], global));
  steps_.resize(devices.size());
  scratch_.resize(devices.size());
  // One operand scale for every shard: a point is then rounded to the tensor cores' operands as on one GPU.
  const float largest = std::max(largest_coordinate(data.x), largest_coordinate(data.y));
  each([&](std::size_t l) {
    const ShardRange r = rows(l);
    const ProblemData mine{{data.x.data.subspan(r.begin * d_, r.size() * d_), r.size(), d_},
                           data.y,
                           data.a.subspan(r.begin, r.size()),
                           data.b};
    steps_[l] = std::make_unique<DeviceStep>(options, devices[l], mine, n_, links_[l].get(), largest);
  });
  device_ = std::to_string(global) + " row shards on " + steps_.front()->description() + " (NCCL, " +
            (ranks_ > 1 ? std::to_string(ranks_) + " MPI ranks" : std::to_string(devices.size()) + " devices") + ")";
}

NcclBackend::~NcclBackend() {
  // The steps (streams, buffers) go before the communicators they used.
  steps_.clear();
}

template <class Fn>
void NcclBackend::each(Fn fn) const {
  if (broken_)
    throw std::runtime_error("this multi-GPU problem is unusable: an earlier error on one of its devices aborted "
                             "its NCCL communicators");
  const std::size_t count = links_.size();
  if (count == 1) {
    fn(std::size_t(0));
    return;
  }
  std::exception_ptr first;
  std::mutex guard;
  std::vector<std::thread> threads;
  threads.reserve(count);
  for (std::size_t l = 0; l < count; ++l) {
    threads.emplace_back([&, l] {
      try {
        fn(l);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(guard);
        if (!first) {
          first = std::current_exception();
          // The other devices may wait in a collective this one will never join: abort them.
          comms_.abort();
          broken_ = true;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

template <class T>
void NcclBackend::share_rows(const std::vector<ShardRange>& parts, std::size_t width, std::span<T> out) const {
  if (ranks_ == 1) return;
  const DeviceStep& s = *steps_.front();
  DeviceScope scope(s.device());
  DeviceBuffer<T> all(parts.back().end * width);
  const ShardRange mine = parts[rank_];
  if (mine.size() > 0)
    FLASHOT_CUDA_CHECK(cudaMemcpyAsync(all.get() + mine.begin * width, out.data() + mine.begin * width,
                                       mine.size() * width * sizeof(T), cudaMemcpyHostToDevice, s.stream()));
  FLASHOT_NCCL_CHECK(ncclGroupStart());
  for (std::size_t root = 0; root < parts.size(); ++root) {
    const ShardRange r = parts[root];
    const ncclResult_t status = ncclBroadcast(all.get() + r.begin * width, all.get() + r.begin * width,
                                              r.size() * width, nccl_type<T>(), static_cast<int>(root), comms_[0],
                                              s.stream());
    if (status != ncclSuccess) {
      ncclGroupEnd();
      FLASHOT_NCCL_CHECK(status);
    }
  }
  FLASHOT_NCCL_CHECK(ncclGroupEnd());
  all.download(out.first(parts.back().end * width), s.stream());
  FLASHOT_CUDA_CHECK(cudaStreamSynchronize(s.stream()));
}

EngineStatistics NcclBackend::statistics() const {
  // Every shard takes the same steps (its verdicts are combined); the screened tiles add up.
  EngineStatistics total = steps_.front()->statistics();
  for (std::size_t l = 1; l < steps_.size(); ++l) add_screening(total, steps_[l]->statistics());
  return total;
}

void NcclBackend::set_potentials(std::span<const float> f, std::span<const float> g) {
  each([&](std::size_t l) { steps_[l]->set_potentials(f.subspan(rows(l).begin, rows(l).size()), g); });
}

void NcclBackend::get_potentials(std::span<float> f, std::span<float> g) const {
  each([&](std::size_t l) {
    steps_[l]->get_potentials(f.subspan(rows(l).begin, rows(l).size()), l == 0 ? g : scratch(l, m_));
  });
  share_rows<float>(plan_, 1, f);
}

bool NcclBackend::iterate(const IterationParams& p, int count) {
  std::vector<char> ok(steps_.size(), 1);
  each([&](std::size_t l) { ok[l] = steps_[l]->iterate(p, count) ? 1 : 0; });
  return std::all_of(ok.begin(), ok.end(), [](char v) { return v != 0; });
}

void NcclBackend::softmin(const PlanParams& p, Side rows_side, std::span<float> out) const {
  const bool source = rows_side == Side::kSource;
  each([&](std::size_t l) {
    const ShardRange r = rows(l);
    steps_[l]->softmin(p, rows_side, source ? out.subspan(r.begin, r.size()) : l == 0 ? out : scratch(l, m_));
  });
  if (source) share_rows<float>(plan_, 1, out);
}

void NcclBackend::apply(const PlanParams& p, Side rows_side, std::span<const float> v, std::size_t k,
                        bool normalized, std::span<float> out) const {
  if (k == 0) return;
  const bool source = rows_side == Side::kSource;
  each([&](std::size_t l) {
    const ShardRange r = rows(l);
    // P·V reads all of V (one row per target) and gives this shard's rows; Pᵀ·U reads this shard's rows of U and
    // gives every column (summed over the shards by the step).
    if (source) {
      steps_[l]->apply(p, rows_side, v.first(m_ * k), k, normalized, out.subspan(r.begin * k, r.size() * k));
    } else {
      steps_[l]->apply(p, rows_side, v.subspan(r.begin * k, r.size() * k), k, normalized,
                       l == 0 ? out.first(m_ * k) : scratch(l, m_ * k));
    }
  });
  if (source) share_rows<float>(plan_, k, out);
}

void NcclBackend::apply_bilinear(const PlanParams& p, Side rows_side, std::span<const float> u,
                                 std::span<const float> w, std::size_t e, std::span<const float> v, std::size_t k,
                                 std::span<float> out) const {
  const bool source = rows_side == Side::kSource;
  const std::size_t r = source ? n_ : m_, c = source ? m_ : n_;  // rows and columns of this application
  if (e == 0 || k == 0 || u.size() != r * e || w.size() != c * e || v.size() != c * k || out.size() != r * k) {
    Backend::apply_bilinear(p, rows_side, u, w, e, v, k, out);  // the default names the argument errors
    return;
  }
  std::vector<char> fused(steps_.size(), 1);
  each([&](std::size_t l) {
    const ShardRange r = rows(l);
    const auto slice = [&](std::span<const float> a, std::size_t width) {
      return a.subspan(r.begin * width, r.size() * width);
    };
    fused[l] = source ? steps_[l]->apply_bilinear(p, rows_side, slice(u, e), w, e, v, k, out.subspan(r.begin * k, r.size() * k))
                      : steps_[l]->apply_bilinear(p, rows_side, u, slice(w, e), e, slice(v, k), k,
                                                  l == 0 ? out : scratch(l, m_ * k));
  });
  // The fused pass serves a shape on every shard or on none (it depends on d, e and the precision only).
  if (fused.front() == 0) {
    Backend::apply_bilinear(p, rows_side, u, w, e, v, k, out);
    return;
  }
  if (source) share_rows<float>(plan_, k, out);
}

void NcclBackend::apply_queries(const PlanParams& p, Side from, PointsView q, std::span<const float> v,
                                std::size_t k, std::span<float> out) const {
  if (q.d != d_)
    throw std::invalid_argument("queries have " + std::to_string(q.d) + " dimensions, the problem has " +
                                std::to_string(d_));
  if (q.n == 0 || k == 0) return;
  const bool source = from == Side::kSource;
  if (source) {
    // Mapped through y and g, which every shard holds: the queries are shared out and the parts gathered.
    const std::vector<ShardRange> parts = plan_shards(q.n, static_cast<int>(std::min(plan_.size(), q.n)), 1);
    each([&](std::size_t l) {
      if (index(l) >= parts.size()) return;
      const ShardRange r = parts[index(l)];
      steps_[l]->apply_queries(p, from, {q.data.subspan(r.begin * q.d, r.size() * q.d), r.size(), q.d},
                               v.first(m_ * k), k, out.subspan(r.begin * k, r.size() * k));
    });
    std::vector<ShardRange> all = parts;
    all.resize(plan_.size(), ShardRange{q.n, q.n});  // ranks without queries broadcast nothing
    share_rows<float>(all, k, out);
    return;
  }
  // Mapped through x, a and f (split over the shards): every shard maps all of them over its rows, combined.
  each([&](std::size_t l) {
    const ShardRange r = rows(l);
    steps_[l]->apply_queries(p, from, q, v.subspan(r.begin * k, r.size() * k), k,
                             l == 0 ? out.first(q.n * k) : scratch(l, q.n * k));
  });
}

void NcclBackend::top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns,
                        std::span<float> values) const {
  if (k == 0 || k > m_)
    throw std::invalid_argument("top_k needs 1 <= k <= m = " + std::to_string(m_) + " (got " + std::to_string(k) +
                                ")");
  each([&](std::size_t l) {
    const ShardRange r = rows(l);
    steps_[l]->top_k(p, k, columns.subspan(r.begin * k, r.size() * k), values.subspan(r.begin * k, r.size() * k));
  });
  share_rows<std::int32_t>(plan_, k, columns);
  share_rows<float>(plan_, k, values);
}

void NcclBackend::c_transform(double cost_scale, Side side, std::span<const float> h, std::span<double> values,
                              std::span<std::int32_t> argmin) const {
  if (side == Side::kSource) {
    // Every row of x lives on one shard, which holds all of y: local, then every rank gets every part.
    each([&](std::size_t l) {
      const ShardRange r = rows(l);
      steps_[l]->c_transform(cost_scale, side, h, values.subspan(r.begin, r.size()), argmin.subspan(r.begin, r.size()));
    });
    share_rows<double>(plan_, 1, values);
    share_rows<std::int32_t>(plan_, 1, argmin);
    return;
  }
  // Columns: every shard minimises over its own rows; the parts (shards × m) are shared and the smallest value
  // wins, the lower shard (lower global index) on an exact tie, as on one device.
  const std::size_t shards = plan_.size();
  std::vector<double> part(shards * m_, std::numeric_limits<double>::infinity());
  std::vector<std::int32_t> arg(shards * m_, 0);
  each([&](std::size_t l) {
    const ShardRange r = rows(l);
    const std::size_t g = index(l);
    steps_[l]->c_transform(cost_scale, side, h.subspan(r.begin, r.size()), std::span<double>(part).subspan(g * m_, m_),
                           std::span<std::int32_t>(arg).subspan(g * m_, m_));
  });
  std::vector<ShardRange> parts(shards);
  for (std::size_t g = 0; g < shards; ++g) parts[g] = ShardRange{g * m_, (g + 1) * m_};
  share_rows<double>(parts, 1, std::span<double>(part));
  share_rows<std::int32_t>(parts, 1, std::span<std::int32_t>(arg));
  for (std::size_t j = 0; j < m_; ++j) {
    double best = part[j];
    std::int32_t at = arg[j] + static_cast<std::int32_t>(plan_[0].begin);
    for (std::size_t g = 1; g < shards; ++g)
      if (part[g * m_ + j] < best) {
        best = part[g * m_ + j];
        at = arg[g * m_ + j] + static_cast<std::int32_t>(plan_[g].begin);
      }
    values[j] = best;
    argmin[j] = at;
  }
}

}  // namespace
}  // namespace cuda

std::unique_ptr<Backend> make_nccl_backend(const BackendOptions& options, const ProblemData& data) {
  return std::make_unique<cuda::NcclBackend>(options, data);
}

}  // namespace flashot::detail
