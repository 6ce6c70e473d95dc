#include "error.hpp"

#include <stdexcept>

namespace flashot::detail::cuda {

void throw_cuda_error(cudaError_t status, const char* expression, const char* file, int line) {
  // Clear a sticky-free error so the next call on this thread does not report it again.
  cudaGetLastError();
  throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(status) + " (" +
                           cudaGetErrorName(status) + ") in " + expression + " at " + file + ":" +
                           std::to_string(line));
}

void* allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* pointer = nullptr;
  const cudaError_t status = cudaMalloc(&pointer, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw std::runtime_error("CUDA out of memory: asked for " + std::to_string(bytes) + " bytes, " +
                             std::to_string(free_bytes) + " of " + std::to_string(total_bytes) +
                             " bytes free on the device");
  }
  check(status, "cudaMalloc", __FILE__, __LINE__);
  return pointer;
}

}  // namespace flashot::detail::cuda
