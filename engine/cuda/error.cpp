#include "error.hpp"

#include "backend.hpp"

#include <algorithm>
#include <atomic>
#include <stdexcept>

namespace flashot::detail::cuda {

void throw_cuda_error(cudaError_t status, const char* expression, const char* file, int line) {
  // Clear a sticky-free error so the next call on this thread does not report it again.
  cudaGetLastError();
  throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(status) + " (" +
                           cudaGetErrorName(status) + ") in " + expression + " at " + file + ":" +
                           std::to_string(line));
}

namespace {
// Bytes held through allocate(), process-wide (every device), and the most ever held at once.
std::atomic<std::size_t> held_bytes{0};
std::atomic<std::size_t> peak_bytes{0};
}  // namespace

void* allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* pointer = nullptr;
  const cudaError_t status = cudaMalloc(&pointer, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    int device = -1;
    cudaGetDevice(&device);
    throw std::runtime_error("CUDA out of memory: asked for " + std::to_string(bytes) + " bytes, " +
                             std::to_string(free_bytes) + " of " + std::to_string(total_bytes) +
                             " bytes free on CUDA device " + std::to_string(device));
  }
  check(status, "cudaMalloc", __FILE__, __LINE__);
  const std::size_t now = held_bytes.fetch_add(bytes) + bytes;
  std::size_t peak = peak_bytes.load();
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {
  }
  return pointer;
}

void deallocate(void* pointer, std::size_t bytes) noexcept {
  if (pointer == nullptr) return;
  cudaFree(pointer);  // unchecked: called from destructors
  held_bytes.fetch_sub(bytes);
}

}  // namespace flashot::detail::cuda

namespace flashot::detail {

DeviceMemory cuda_device_memory() { return {cuda::held_bytes.load(), cuda::peak_bytes.load()}; }

}  // namespace flashot::detail::cuda
