// The one-GPU CUDA backend: one DeviceStep (device_step.hpp) holding every row, with no collectives. The multi-GPU
// backend (nccl_backend.cu) runs the same step on each device's rows.

#include <memory>
#include <string>

#include "backend.hpp"
#include "device_step.hpp"

namespace flashot::detail {
namespace cuda {
namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend(const BackendOptions& options, const ProblemData& data)
      : step_(options, options.device, data, data.x.n, nullptr) {}

  std::string name() const override { return "cuda"; }
  std::string device() const override { return step_.description(); }
  EngineStatistics statistics() const override { return step_.statistics(); }
  void set_pattern(std::shared_ptr<const BlockPattern> pattern) override {
    step_.set_pattern(pattern);
    pattern_ = std::move(pattern);
  }
  void set_potentials(std::span<const float> f, std::span<const float> g) override { step_.set_potentials(f, g); }
  void get_potentials(std::span<float> f, std::span<float> g) const override { step_.get_potentials(f, g); }
  bool iterate(const IterationParams& p, int count) override { return step_.iterate(p, count); }
  void softmin(const PlanParams& p, Side rows, std::span<float> out) const override { step_.softmin(p, rows, out); }
  void apply(const PlanParams& p, Side rows, std::span<const float> v, std::size_t k, bool normalized,
             std::span<float> out) const override {
    step_.apply(p, rows, v, k, normalized, out);
  }
  void apply_queries(const PlanParams& p, Side from, PointsView q, std::span<const float> v, std::size_t k,
                     std::span<float> out) const override {
    step_.apply_queries(p, from, q, v, k, out);
  }
  void top_k(const PlanParams& p, std::size_t k, std::span<std::int32_t> columns,
             std::span<float> values) const override {
    step_.top_k(p, k, columns, values);
  }
  void c_transform(double cost_scale, Side rows, std::span<const float> h, std::span<double> values,
                   std::span<std::int32_t> index) const override {
    step_.c_transform(cost_scale, rows, h, values, index);
  }
  void c_transform_rounded(double cost_scale, Side rows, std::span<const float> h, std::size_t,
                           std::vector<float>& values, std::vector<std::int32_t>& index) const override {
    step_.c_transform_rounded(cost_scale, rows, h, values, index);
  }
  void apply_bilinear(const PlanParams& p, Side rows, std::span<const float> u, std::span<const float> w,
                      std::size_t e, std::span<const float> v, std::size_t k, std::span<float> out) const override {
    // Shapes the fused pass does not serve (and argument errors) go to the default: plain applications.
    if (!step_.apply_bilinear(p, rows, u, w, e, v, k, out)) Backend::apply_bilinear(p, rows, u, w, e, v, k, out);
  }
  void apply_points(const PlanParams& p, Side rows, bool normalized, std::span<float> out) const override {
    step_.apply_points(p, rows, normalized, out);
  }
  void map_resident(const PlanParams& p, Side from, PointsView q, std::span<float> out) const override {
    step_.map_resident(p, from, q, out);
  }
  void points_gradient(const PlanParams& p, Side wrt, std::span<float> out) const override {
    step_.points_gradient(p, wrt, out);
  }
  void resident_primal_terms(const PlanParams& p, std::span<double> terms) const override {
    step_.resident_primal_terms(p, terms);
  }
  WeightedSums weighted_sums(Side side, std::size_t offset, std::span<const float> h, std::span<const float> hh,
                             double epsilon, double rho) const override {
    return step_.weighted_sums(side, offset, h, hh, epsilon, rho);
  }
  void batch_weighted_sums(Side side, std::span<const WeightedRange> ranges, std::span<const float> h,
                           std::span<const float> hh, std::span<WeightedSums> out) const override {
    step_.batch_weighted_sums(side, ranges, h, hh, out);
  }

 private:
  DeviceStep step_;
};

}  // namespace
}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options, const ProblemData& data) {
  return std::make_unique<cuda::CudaBackend>(options, data);
}

int cuda_device_count() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    // cudaErrorInsufficientDriver / cudaErrorNoDevice (no GPU, or a binary started where no driver is installed):
    // that is "no CUDA device", not a failure.
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace flashot::detail
