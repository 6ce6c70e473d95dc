#pragma once
// RAII for the device: a typed buffer that owns one cudaMalloc allocation and frees it on destruction, and the
// current-device scope.

#include <cstddef>
#include <span>
#include <utility>

#include <cuda_runtime.h>

#include "error.hpp"

namespace flashot::detail::cuda {

/// Makes `device` current for the scope (the caller's device is restored), so Problems on different devices and
/// threads do not disturb each other.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    FLASHOT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) FLASHOT_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() {
    int current = previous_;
    cudaGetDevice(&current);
    if (current != previous_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};


template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count)
      : data_(static_cast<T*>(allocate(count * sizeof(T)))), count_(count) {}
  ~DeviceBuffer() { deallocate(data_, count_ * sizeof(T)); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      deallocate(data_, count_ * sizeof(T));
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// Grows (never shrinks) to at least `count` elements; the contents are not kept.
  void reserve(std::size_t count) {
    if (count > count_) *this = DeviceBuffer(count);
  }
  void upload(std::span<const T> host, cudaStream_t stream) {
    reserve(host.size());
    if (!host.empty()) {
      FLASHOT_CUDA_CHECK(cudaMemcpyAsync(data_, host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream));
    }
  }
  void download(std::span<T> host, cudaStream_t stream) const {
    if (!host.empty()) {
      FLASHOT_CUDA_CHECK(cudaMemcpyAsync(host.data(), data_, host.size_bytes(), cudaMemcpyDeviceToHost, stream));
    }
  }
  T* get() const { return data_; }
  std::size_t size() const { return count_; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

/// Page-locked host memory (cudaMallocHost) that one owner reuses: transfers from and to it run at the link's speed
/// and asynchronously, where pageable memory goes through the driver's own staging copies. Grows on demand.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);  // unchecked: called from destructors
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  /// Grows (never shrinks) to at least `count` elements; the contents are not kept.
  void reserve(std::size_t count) {
    if (count <= count_) return;
    if (data_ != nullptr) cudaFreeHost(std::exchange(data_, nullptr));
    count_ = 0;
    void* p = nullptr;
    FLASHOT_CUDA_CHECK(cudaMallocHost(&p, count * sizeof(T)));
    data_ = static_cast<T*>(p);
    count_ = count;
  }
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace flashot::detail::cuda
