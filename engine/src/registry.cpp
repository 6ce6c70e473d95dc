// The backend registry: the only place in flashot that knows whether the CUDA backend was compiled in.
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend.hpp"
#include "shard_backend.hpp"
#include "shard_plan.hpp"

namespace flashot {

namespace detail {

#if defined(FLASHOT_WITH_CUDA)
constexpr bool kCudaCompiled = true;
#else
constexpr bool kCudaCompiled = false;
#endif

namespace {

// engine/cuda/ defines cuda_device_count and make_cuda_backend only when it is compiled in; inside a discarded
// `if constexpr` branch they are not odr-used, so a CPU-only build links without them.
int usable_cuda_devices() {
  if constexpr (kCudaCompiled) {
    return cuda_device_count();
  } else {
    return 0;
  }
}

std::unique_ptr<Backend> cuda_backend(const BackendOptions& options, const ProblemData& data) {
  if constexpr (kCudaCompiled) {
    return make_cuda_backend(options, data);
  } else {
    throw std::runtime_error(
        "backend 'cuda' asked for, but flashot was built without CUDA (FLASHOT_CUDA=OFF or no nvcc)");
  }
}

/// Several shards of one problem (docs/multi-gpu.md): CUDA shards on several devices or ranks combine on the devices
/// through NCCL unless the host combination is asked for; anything else (CPU shards, several shards on one device)
/// is sharded on the host over children made by make_backend.
std::unique_ptr<Backend> sharded_backend(const BackendOptions& options, const ProblemData& data) {
  if constexpr (kCudaCompiled) {
    const bool cuda = options.backend == BackendKind::kCuda ||
                      (options.backend == BackendKind::kAuto && usable_cuda_devices() > 0);
    const bool spread = options.devices.size() > 1 || options.ranks > 1;
    if (cuda && spread && options.nccl) return make_nccl_backend(options, data);
  }
  return make_sharded_backend(options, data, make_backend);
}

[[noreturn]] void no_resident_points(const char* what) {
  throw std::logic_error(std::string("Backend::") + what +
                         " serves device-input problems, which only the one-GPU CUDA backend takes");
}

}  // namespace

// ---- Device-resident inputs (Problem::on_device) ------------------------------------------------------------------

void refuse_device_input(const BackendOptions& options, int device) {
  const std::string where = "cuda:" + std::to_string(device);
  if (options.backend == BackendKind::kCpu)
    throw std::runtime_error("a device-input Problem needs the CUDA backend (x is on " + where +
                             "); build the Problem from host arrays for the CPU backend");
  if (options.devices.size() > 1 || options.shards > 1 || options.ranks > 1)
    throw std::runtime_error("multi-GPU solves take host inputs; device inputs run on one GPU (x is on " + where +
                             ", and the options ask for " + std::to_string(options.devices.size()) + " devices, " +
                             std::to_string(options.shards) + " shards, " + std::to_string(options.ranks) +
                             " ranks)");
  if (!kCudaCompiled)
    throw std::runtime_error("a device-input Problem needs the CUDA backend (x is on " + where +
                             "), but flashot was built without CUDA (FLASHOT_CUDA=OFF or no nvcc)");
  const int one = options.devices.size() == 1 ? options.devices[0] : options.device;
  if (one != device)
    throw std::invalid_argument("a device-input Problem runs on the device holding its points: x is on " + where +
                                " but the options ask for CUDA device " + std::to_string(one) +
                                " (set BackendOptions::device to " + std::to_string(device) + ")");
  const int devices = usable_cuda_devices();
  if (devices == 0)
    throw std::runtime_error("a device-input Problem needs the CUDA backend (x is on " + where +
                             "), but no CUDA device answers (no GPU or no driver)");
  if (device < 0 || device >= devices)
    throw std::invalid_argument("x is on " + where + ", but only " + std::to_string(devices) +
                                " CUDA device(s) are present");
}

void scan_device_points(const DevicePointsView& p, const std::string& name, DeviceScan& scan) {
  if constexpr (kCudaCompiled) {
    cuda_scan_device_points(p, name, scan);
  } else {
    throw std::runtime_error(name + " is on a CUDA device, but flashot was built without CUDA");
  }
}

DeviceWeightScan scan_device_weights(const DeviceWeights& w, const std::string& name) {
  if constexpr (kCudaCompiled) {
    return cuda_scan_device_weights(w, name);
  } else {
    throw std::runtime_error(name + " is on a CUDA device, but flashot was built without CUDA");
  }
}

DeviceBatch prepare_device_batch(std::span<const DeviceBatchInput> problems, std::size_t rows, std::size_t cols,
                                 std::size_t d, int device) {
  if constexpr (kCudaCompiled) {
    return cuda_prepare_device_batch(problems, rows, cols, d, device);
  } else {
    throw std::runtime_error("a device batch is on a CUDA device, but flashot was built without CUDA");
  }
}

void Backend::apply_points(const PlanParams&, Side, bool, std::span<float>) const { no_resident_points("apply_points"); }
void Backend::map_resident(const PlanParams&, Side, PointsView, std::span<float>) const {
  no_resident_points("map_resident");
}
void Backend::points_gradient(const PlanParams&, Side, std::span<float>) const {
  no_resident_points("points_gradient");
}
void Backend::resident_primal_terms(const PlanParams&, std::span<double>) const {
  no_resident_points("resident_primal_terms");
}
void Backend::c_transform_rounded(double cost_scale, Side rows, std::span<const float> h, std::size_t count,
                                  std::vector<float>& values, std::vector<std::int32_t>& index) const {
  std::vector<double> exact(count);
  index.resize(count);
  c_transform(cost_scale, rows, h, exact, index);
  values.resize(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(exact[i]);
}
void Backend::batch_weighted_sums(Side side, std::span<const WeightedRange> ranges, std::span<const float> h,
                                  std::span<const float> hh, std::span<WeightedSums> out) const {
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    const WeightedRange& r = ranges[k];
    out[k] = weighted_sums(side, r.offset, h.subspan(r.offset, r.count),
                           hh.empty() ? hh : hh.subspan(r.offset, r.count), r.epsilon, r.rho);
  }
}
WeightedSums Backend::weighted_sums(Side, std::size_t, std::span<const float>, std::span<const float>, double,
                                    double) const {
  throw std::logic_error("the " + name() + " backend keeps no weights of its own for the Sinkhorn loop's sums "
                         "(weighted_sums serves device weights: the CPU and one-GPU CUDA backends)");
}

std::unique_ptr<Backend> make_backend(const BackendOptions& options, const ProblemData& data) {
  if (data.on_device()) {
    refuse_device_input(options, data.device);
    return cuda_backend(options, data);
  }
  if (wants_sharding(options)) return sharded_backend(options, data);
  switch (options.backend) {
    case BackendKind::kCpu:
      return make_cpu_backend(options, data);
    case BackendKind::kAuto:
      if (usable_cuda_devices() > 0) return cuda_backend(options, data);
      return make_cpu_backend(options, data);
    case BackendKind::kCuda: {
      if (!kCudaCompiled) return cuda_backend(options, data);
      const int devices = usable_cuda_devices();
      if (devices == 0)
        throw std::runtime_error("backend 'cuda' asked for, but no CUDA device answers (no GPU or no driver)");
      if (options.device < 0 || options.device >= devices)
        throw std::runtime_error("CUDA device " + std::to_string(options.device) + " asked for, but only " +
                                 std::to_string(devices) + " device(s) are present");
      return cuda_backend(options, data);
    }
  }
  throw std::invalid_argument("backend kind " + std::to_string(static_cast<int>(options.backend)) + " is unknown");
}

}  // namespace detail

bool cuda_available() { return detail::usable_cuda_devices() > 0; }

std::vector<std::string> available_backends() {
  std::vector<std::string> names{"cpu"};
  if (cuda_available()) names.push_back("cuda");
  return names;
}

std::string version() { return FLASHOT_VERSION; }

DeviceMemory device_memory() {
  if constexpr (detail::kCudaCompiled) {
    return detail::cuda_device_memory();
  } else {
    return {};
  }
}

}  // namespace flashot
