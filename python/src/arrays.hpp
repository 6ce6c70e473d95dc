#pragma once
// Arrays across the Python boundary: inputs taken without a copy where their layout allows (float32, C order, on
// the host; float32 C-order CUDA arrays where the caller can take device memory, Problem's points and weights),
// other DLPack arrays on a CUDA device copied to the host explicitly; outputs handed to numpy without a copy.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
// Every translation unit that casts std::string must see the same caster (an ODR trap otherwise).
#include <nanobind/stl/string.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot::python {

namespace nb = nanobind;

/// Read-only float32 values for the engine: a view of the caller's array when it is float32, C-contiguous and on
/// the host; otherwise a converted (numpy.ascontiguousarray) or, for a CUDA DLPack array, a device-to-host copy,
/// unless `on_device` is asked for: a float32 C-contiguous CUDA array is then kept as it is (the DLPack tensor held
/// alive, no copy) and read through device_data(); stage_on_host() makes the host copy later where the caller
/// cannot use it on the device. Holds whatever keeps the values alive. Built with the GIL held; its span may be
/// read without it.
class FloatInput {
 public:
  FloatInput() = default;
  /// `ndim` 1, 2 or 3 (or −1: 1 or 2); `name` is used in messages ("x", "a", ...). `width` > 0 requires that many
  /// columns (2-D). A CUDA array is waited for (its device synchronized) unless `synchronize` is false and it is kept
  /// on the device: the caller then calls synchronize_device once for several arrays (a batch).
  static FloatInput from(nb::handle object, const char* name, int ndim, std::size_t width = 0, bool on_device = false,
                         bool synchronize = true);
  /// A CUDA array kept on its device (from(..., on_device = true)): its memory, and the device ordinal; null / −1
  /// otherwise (values() is then empty until stage_on_host()).
  const float* device_data() const { return device_data_; }
  int device() const { return device_; }
  DevicePointsView device_points() const { return {device_data_, rows_, cols_, device_}; }
  DeviceWeights device_weights() const { return {device_data_, rows_, device_}; }
  /// Copies a kept CUDA array to the host (the copy route of mixed placements); nothing for host arrays.
  void stage_on_host(const char* name);
  std::span<const float> values() const { return values_; }
  std::size_t rows() const { return rows_; }
  std::size_t cols() const { return cols_; }
  /// The third axis of a 3-D array (1 otherwise): a (problems, rows, dimensions) batch is rows() × cols() × depth().
  std::size_t depth() const { return depth_; }
  int ndim() const { return ndim_; }
  PointsView points() const { return {values_, rows_, cols_}; }
  /// Whether the values are the caller's own memory (no copy was made).
  bool borrowed() const { return borrowed_; }
  /// "host" or "cuda:N": where the caller's array lived.
  const std::string& origin() const { return origin_; }

 private:
  nb::object keep_;               // the array viewed (or the converted one)
  std::vector<float> owned_;      // a CUDA array's host copy
  nb::ndarray<nb::device::cuda> device_array_;  // a CUDA array kept on its device (the DLPack tensor held alive)
  const float* device_data_ = nullptr;
  int device_ = -1;
  std::span<const float> values_;
  std::size_t rows_ = 0, cols_ = 0, depth_ = 1;
  int ndim_ = 0;
  bool borrowed_ = false;
  std::string origin_ = "host";
};

/// Waits for the work queued on CUDA device `device` (a producer's pending writes); nothing without CUDA. `name`
/// names the array in the error message.
void synchronize_device(int device, const char* name);

/// int32 labels (1-D), converted from any integer array.
std::vector<std::int32_t> int_labels(nb::handle object, const char* name);

/// A numpy array that takes ownership of `values` (no copy). shape: {n} or {n, k}.
nb::object to_numpy(std::vector<float>&& values, std::initializer_list<std::size_t> shape);
nb::object to_numpy(std::vector<std::int32_t>&& values, std::initializer_list<std::size_t> shape);
/// A read-only numpy view of `values`, kept alive by `owner` (the Python object that holds them).
nb::object view_numpy(const std::vector<float>& values, std::initializer_list<std::size_t> shape, nb::handle owner);
nb::object view_numpy(const std::vector<std::int32_t>& values, std::initializer_list<std::size_t> shape,
                      nb::handle owner);

/// str(object), as Python prints it.
std::string text_of(nb::handle object);

/// Whether this module was compiled with the CUDA runtime (CUDA DLPack arrays can be taken: kept on the device for
/// Problem, copied to the host elsewhere).
bool cuda_copies();

}  // namespace flashot::python
