#pragma once
// Device-resident inputs (Problem::on_device, docs/engine.md "Device-resident inputs"): the kernels that do on the
// device what the host path does on its host copies (engine/src/validation.cpp, problem.cpp, device_step.cu's
// prepare_side), with the same arithmetic so that both paths give the same results, the device-side pieces of
// the operations that read the points (gradient, primal cost), and the weights' logarithms and weighted sums.
// Private to engine/cuda/.

#include <cstddef>

#include <cuda_runtime.h>

namespace flashot::detail::cuda {

/// Bounds of the centred points of one side, from centre_points (what prepare_side computes on the host).
struct SideBounds {
  float largest = 0;   // max |coordinate|
  float max_norm = 0;  // max ‖p‖
};

/// out (n × d) = (float)((double)in − centre[c]) and norm2 (n) = (float)Σ_c (double)out² in column order (the host
/// path's rounding exactly); bounds (2 unsigned, zeroed by the caller) += the side's max |coordinate| and max ‖p‖ as
/// the bit patterns of non-negative floats. centre: d doubles on the device, or null for points already centred (the
/// host path's: `in` is then read as it is, and out may be null: only the norms and bounds are written).
void launch_centre_points(const float* in, std::size_t n, int d, const double* centre, float* out, float* norm2,
                          unsigned* bounds, cudaStream_t stream);
SideBounds decode_bounds(const unsigned bounds[2]);

/// A sample of a side packed as the cold probe reads them, (points, ‖p‖², ln w, w) of `even` + `far_count` rows:
/// `even` evenly spaced rows i = k·count/even, then the farthest row from the centre (the largest ‖p‖²) of each of
/// `far_count` equal chunks (far: device scratch of far_count ints).
void launch_pack_sample(const float* points, const float* norm2, const float* logw, const float* weight, int count,
                        int even, int far_count, int* far, int d, float* packed, cudaStream_t stream);

/// v (m × (d+2)) = [y | ‖y‖² | 1]: the primal cost's value matrix from the resident points and norms.
void launch_moment_values(const float* points, const float* norm2, int m, int d, float* v, cudaStream_t stream);

/// out (count × d) = (float)(factor·r_i·((double)p_i − t_i)): Problem::gradient's formula over the resident points.
void launch_points_gradient(const float* points, const float* t, const float* r, int count, int d, double factor,
                            float* out, cudaStream_t stream);

/// terms (n doubles) = r_i·(‖x_i − T_i‖² + max(0, E_i − ‖T_i‖²)) with r = out[i, d+1], T_i = out[i, :d]/r,
/// E_i = out[i, d]/r (0 where r ≤ 0): the per-row terms of Problem's primal cost, summed on the host in row order.
void launch_primal_terms(const float* points, const float* out, int n, int d, double* terms, cudaStream_t stream);

/// logw (n) = ln w_i, −∞ for w_i = 0: what prepare_side computes on the host (device_step.cu), for device weights.
void launch_log_weights(const float* w, std::size_t n, float* logw, cudaStream_t stream);

/// The blocks launch_weighted_sums reduces n points with (a function of n only: the sums are deterministic).
int weighted_sum_blocks(std::size_t n);
/// Backend::weighted_sums over device weights w (n), potentials h (n) and, when hh is not null, their soft
/// c-transforms: partials (2 × weighted_sum_blocks(n) doubles) = each block's (marginal, dual), summed by the caller
/// in block order. hh given: marginal only; null: dual only.
void launch_weighted_sums(const float* w, const float* h, const float* hh, std::size_t n, double epsilon, double rho,
                          double* partials, cudaStream_t stream);

/// One range of launch_batch_weighted_sums: points [offset, offset + count) with their ε and ρ, reduced by `blocks`
/// blocks (weighted_sum_blocks(count)) whose partials start at partials[2·first_block].
struct SumRange {
  std::size_t offset = 0, count = 0;
  double epsilon = 0, rho = 0;
  int first_block = 0, blocks = 0;
};
/// launch_weighted_sums for `count` ranges (device table) in one launch (grid widest × count): each range's partials
/// are those its own launch_weighted_sums would give, bit for bit.
void launch_batch_weighted_sums(const float* w, const float* h, const float* hh, const SumRange* ranges, int count,
                                int widest, double* partials, cudaStream_t stream);

/// fills `count` floats with `value`.
void launch_fill(float* data, std::size_t count, float value, cudaStream_t stream);

}  // namespace flashot::detail::cuda
