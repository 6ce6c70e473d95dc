// Arrays across the Python boundary (arrays.hpp).
#include "arrays.hpp"

#include <limits>
#include <stdexcept>
#include <string>

#if defined(FLASHOT_PYTHON_CUDA)
#include <cuda_runtime.h>
#endif

namespace flashot::python {
namespace {

// DLPack device types (dlpack.h, DLDeviceType).
constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;
constexpr int kDLCUDAManaged = 13;

std::string shape_text(const nb::object& array) { return text_of(array.attr("shape")); }

std::string expected_text(int ndim, std::size_t width) {
  if (ndim == 1) return "a 1-D array";
  if (ndim == 3) return "a 3-D array (problems, rows, dimensions)";
  if (ndim < 0) return "a 1-D or 2-D array";
  return width > 0 ? "a 2-D array (rows, " + std::to_string(width) + ")" : "a 2-D array (rows, dimensions)";
}

/// (device type, device id) from __dlpack_device__, or nullopt when the object has none.
std::optional<std::pair<int, int>> dlpack_device(nb::handle object) {
  if (!nb::hasattr(object, "__dlpack_device__")) return std::nullopt;
  nb::tuple device = nb::tuple(object.attr("__dlpack_device__")());
  return std::make_pair(nb::cast<int>(device[0]), nb::cast<int>(device[1]));
}

#if defined(FLASHOT_PYTHON_CUDA)
void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(status));
}
#endif

}  // namespace

std::string text_of(nb::handle object) {
  nb::object text = nb::steal(PyObject_Str(object.ptr()));
  if (!text.is_valid()) throw nb::python_error();
  return nb::cast<std::string>(text);
}

bool cuda_copies() {
#if defined(FLASHOT_PYTHON_CUDA)
  return true;
#else
  return false;
#endif
}

#if defined(FLASHOT_PYTHON_CUDA)
/// Waits for the work queued on `device` (the producer's pending writes to an array), keeping the current device.
void synchronize_device(int device, const char* name) {
  int previous = 0;
  cuda_check(cudaGetDevice(&previous), "cudaGetDevice");
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  const cudaError_t status = cudaDeviceSynchronize();
  cudaSetDevice(previous);
  cuda_check(status, (std::string("waiting for ") + name + "'s producer on the device").c_str());
}
#else
void synchronize_device(int, const char*) {}
#endif

void FloatInput::stage_on_host(const char* name) {
  if (device_data_ == nullptr) return;
#if defined(FLASHOT_PYTHON_CUDA)
  owned_.resize(rows_ * cols_ * depth_);
  if (!owned_.empty()) {
    synchronize_device(device_, name);  // a deferred wait (from(…, synchronize = false)) happens here at the latest
    int previous = 0;
    cuda_check(cudaGetDevice(&previous), "cudaGetDevice");
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    const cudaError_t status =
        cudaMemcpy(owned_.data(), device_data_, owned_.size() * sizeof(float), cudaMemcpyDeviceToHost);
    cudaSetDevice(previous);
    cuda_check(status, (std::string("copying ") + name + " from the device").c_str());
  }
  values_ = owned_;
  device_data_ = nullptr;
  device_array_ = {};
#else
  (void)name;
#endif
}

FloatInput FloatInput::from(nb::handle object, const char* name, int ndim, std::size_t width, bool on_device,
                            bool synchronize) {
  FloatInput in;
  const auto check_shape = [&](std::size_t got_ndim, std::size_t rows, std::size_t cols, std::size_t depth,
                               const std::string& shape) {
    const bool ndim_ok = ndim < 0 ? (got_ndim == 1 || got_ndim == 2) : int(got_ndim) == ndim;
    if (!ndim_ok || (got_ndim == 2 && width > 0 && cols != width))
      throw std::invalid_argument(std::string(name) + " must be " + expected_text(ndim, width) + " (got shape " +
                                  shape + ")");
    in.rows_ = rows;
    in.cols_ = got_ndim >= 2 ? cols : 1;
    in.depth_ = got_ndim == 3 ? depth : 1;
    in.ndim_ = int(got_ndim);
  };
  const auto device = dlpack_device(object);
  if (device && (device->first == kDLCUDA || device->first == kDLCUDAManaged)) {
    in.origin_ = "cuda:" + std::to_string(device->second);
    using CudaArray = nb::ndarray<nb::device::cuda>;
    CudaArray array;
    if (!nb::try_cast(object, array, false))
      throw std::invalid_argument(std::string(name) + ": the CUDA array could not be taken through DLPack");
    nb::object as_object = nb::borrow(object);
    if (array.dtype() != nb::dtype<float>())
      throw std::invalid_argument(std::string(name) + " is a CUDA array of another dtype than float32: convert it "
                                  "on the device first (e.g. tensor.float())");
    // C order: every axis of length > 1 has the stride of the axes after it (or the array is empty).
    const std::size_t got_ndim = array.ndim();
    const std::size_t rows = got_ndim >= 1 ? array.shape(0) : 0;
    const std::size_t cols = got_ndim >= 2 ? array.shape(1) : 1;
    const std::size_t depth = got_ndim >= 3 ? array.shape(2) : 1;
    check_shape(got_ndim, rows, cols, depth, shape_text(as_object));
    bool contiguous = true;
    std::int64_t expected = 1;
    for (std::size_t k = got_ndim; k-- > 0;) {
      if (array.shape(k) > 1 && array.stride(k) != expected) contiguous = false;
      expected *= std::int64_t(array.shape(k));
    }
    contiguous = contiguous || rows * cols * depth == 0;
    if (!contiguous)
      throw std::invalid_argument(std::string(name) + " is a CUDA array that is not C-contiguous: make it so on "
                                  "the device first (e.g. tensor.contiguous())");
#if defined(FLASHOT_PYTHON_CUDA)
    // Kept on the device: the DLPack tensor stays alive with this input, and the engine reads it in place
    // (Problem::on_device), after the producer's pending work on that device. Otherwise, or when the caller then
    // finds it cannot use device memory (stage_on_host), one explicit device-to-host copy (docs/python.md,
    // "CUDA arrays").
    if (synchronize && on_device) synchronize_device(device->second, name);  // stage_on_host waits by itself
    in.device_array_ = array;
    in.device_data_ = static_cast<const float*>(array.data());
    in.device_ = device->second;
    in.keep_ = as_object;
    if (!on_device || rows * cols * depth == 0) in.stage_on_host(name);
    return in;
#else
    (void)on_device;
    (void)synchronize;
    throw std::runtime_error(std::string(name) + " is on a CUDA device, but this flashot module was built without "
                             "CUDA: move it to the host first (e.g. tensor.cpu())");
#endif
  }
  if (device && device->first != kDLCPU && device->first != kDLCUDAHost)
    throw std::invalid_argument(std::string(name) + " lives on DLPack device type " + std::to_string(device->first) +
                                ", which flashot cannot read (host and CUDA arrays are taken)");

  using HostArray = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;
  HostArray array;
  if (nb::try_cast(object, array, false)) {
    in.keep_ = nb::borrow(object);
    in.borrowed_ = true;
  } else {
    nb::module_ numpy = nb::module_::import_("numpy");
    nb::object converted;
    try {
      converted = numpy.attr("ascontiguousarray")(object, nb::arg("dtype") = nb::str("float32"));
    } catch (nb::python_error& e) {
      throw std::invalid_argument(std::string(name) + " cannot be read as float32 values: " + e.what());
    }
    if (!nb::try_cast(converted, array, false))
      throw std::invalid_argument(std::string(name) + " cannot be read as float32 values");
    in.keep_ = converted;
  }
  const std::size_t got_ndim = array.ndim();
  check_shape(got_ndim, got_ndim >= 1 ? array.shape(0) : 0, got_ndim >= 2 ? array.shape(1) : 1,
              got_ndim >= 3 ? array.shape(2) : 1, shape_text(in.keep_));
  in.values_ = std::span<const float>(array.data(), in.rows_ * in.cols_ * in.depth_);
  return in;
}

std::vector<std::int32_t> int_labels(nb::handle object, const char* name) {
  nb::module_ numpy = nb::module_::import_("numpy");
  nb::object array = numpy.attr("asarray")(object);
  const std::string kind = text_of(array.attr("dtype").attr("kind"));
  if (kind != "i" && kind != "u" && kind != "b")
    throw std::invalid_argument(std::string(name) + " must be integer codes (got dtype " +
                                text_of(array.attr("dtype")) + ")");
  nb::object wide = numpy.attr("ascontiguousarray")(array, nb::arg("dtype") = nb::str("int64"));
  nb::ndarray<const std::int64_t, nb::c_contig, nb::device::cpu> values;
  if (!nb::try_cast(wide, values, false) || values.ndim() != 1)
    throw std::invalid_argument(std::string(name) + " must be a 1-D array (got shape " + shape_text(wide) + ")");
  std::vector<std::int32_t> out(values.shape(0));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t v = values.data()[i];
    if (v < -1 || v > std::numeric_limits<std::int32_t>::max())
      throw std::invalid_argument(std::string(name) + "[" + std::to_string(i) + "] must be ≥ 0, or −1 for missing (got " +
                                  std::to_string(v) + ")");
    out[i] = std::int32_t(v);
  }
  return out;
}

namespace {
template <typename T>
nb::object owned(std::vector<T>&& values, std::initializer_list<std::size_t> shape) {
  auto* heap = new std::vector<T>(std::move(values));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T>(heap->data(), shape.size(), shape.begin(), owner));
}
template <typename T>
nb::object viewed(const std::vector<T>& values, std::initializer_list<std::size_t> shape, nb::handle owner) {
  return nb::cast(nb::ndarray<nb::numpy, const T>(values.data(), shape.size(), shape.begin(), owner));
}
}  // namespace

nb::object to_numpy(std::vector<float>&& values, std::initializer_list<std::size_t> shape) {
  return owned(std::move(values), shape);
}
nb::object to_numpy(std::vector<std::int32_t>&& values, std::initializer_list<std::size_t> shape) {
  return owned(std::move(values), shape);
}
nb::object view_numpy(const std::vector<float>& values, std::initializer_list<std::size_t> shape, nb::handle owner) {
  return viewed(values, shape, owner);
}
nb::object view_numpy(const std::vector<std::int32_t>& values, std::initializer_list<std::size_t> shape,
                      nb::handle owner) {
  return viewed(values, shape, owner);
}

}  // namespace flashot::python
