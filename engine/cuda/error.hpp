#pragma once
// The CUDA backend's one error check: every CUDA runtime call and kernel launch goes through FLASHOT_CUDA_CHECK,
// which turns a failure into std::runtime_error naming the CUDA error, the file and the line.

#include <cstddef>
#include <string>

#include <cuda_runtime.h>

namespace flashot::detail::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* expression, const char* file, int line);

inline void check(cudaError_t status, const char* expression, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, expression, file, line);
}

/// Device allocation that names the size asked for when the device is out of memory. Counted in
/// flashot::device_memory() until released with deallocate (same size).
void* allocate(std::size_t bytes);
void deallocate(void* pointer, std::size_t bytes) noexcept;

}  // namespace flashot::detail::cuda

#define FLASHOT_CUDA_CHECK(expression) \
  ::flashot::detail::cuda::check((expression), #expression, __FILE__, __LINE__)
/// After a kernel launch: launch-configuration errors surface here, not at the next synchronisation.
#define FLASHOT_CUDA_CHECK_LAUNCH() FLASHOT_CUDA_CHECK(cudaPeekAtLastError())
