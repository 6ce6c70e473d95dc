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

}  // namespace

std::unique_ptr<Backend> make_backend(const BackendOptions& options, const ProblemData& data) {
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
