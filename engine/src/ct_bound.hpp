#pragma once
// Error bounds of the hard c-transform's fp32 scores t_ij = 2s⟨p_i, q_j⟩ + bias_j, bias_j = fp32(h_j − s‖q_j‖²)
// (engine/cuda/c_transform.cu's header derives them; docs/engine.md, "Hard c-transform"). Written once for the host
// and the device, and unit-tested on the host against emulated fp16 products (tests/engine/ct_bound_test.cpp).
//
// Every score of a pass is within E_i of its exact value, with M_q = max_j ‖q_j‖ and M_b = max_j |bias_j|:
//   E_i = 1.01·(dot·2s‖p_i‖·M_q + sub·2s·(‖p_i‖·sub_p + M_q·sub_q) + unit·2s + bias·M_b + norm·s·M_q²)
// (the 1% covers the rounding of E_i's own evaluation in fp32).

#include <math.h>

#if defined(__CUDACC__)
#define FLASHOT_CT_HOST_DEVICE __host__ __device__
#define FLASHOT_CT_FORCEINLINE __forceinline__
#else
#define FLASHOT_CT_HOST_DEVICE
#define FLASHOT_CT_FORCEINLINE inline
#endif

namespace flashot::detail::ct {

/// The coefficients of E_i (above) of one kind of score.
struct ScoreBound {
  float dot = 0, sub = 0, sub_p = 0, sub_q = 0, unit = 0, bias = 0, norm = 0;
};

/// The bias's rounding: ‖q‖² is rounded from fp64 to fp32 (2^−24 of it), s·‖q‖² (2^−24) and the difference
/// (2^−24 of |bias|); the first two are relative to s‖q‖², not to the bias, which cancels it when h_j ≈ s‖q_j‖².
inline constexpr float kNormTerm = 0x1p-22f;

/// fp32 FMA scores over d coordinates (the register, tiled and refinement passes): twice γ_{d+2} of the dot product,
/// the scaled coordinates and the bias.
inline ScoreBound fp32_bound(int d) {
  ScoreBound b;
  b.dot = b.bias = float(d + 4) * 0x1p-23f;
  b.norm = kNormTerm;
  return b;
}

/// Split-fp16 tensor-core scores (hi·hi + hi·lo + lo·hi, fp32 accumulation of 3d products) of operands P = row_scale·p,
/// Q = col_scale·q (powers of two), each held as hi + lo with |P − hi − lo| ≤ 2^−22|P| + 2^−25.
inline ScoreBound split_fp16_bound(int d, float row_scale, float col_scale) {
  ScoreBound b = fp32_bound(d);
  b.dot = float(3 * d + 8) * 0x1p-22f;
  b.sub = 0x1p-25f * sqrtf(float(d));
  b.sub_p = 1.f / col_scale;
  b.sub_q = 1.f / row_scale;
  return b;
}

/// Scores of the hi·hi product alone (the cascade's first pass): hi = fp16(P), |P − hi| ≤ 2^−11|P| + 2^−25, the d
/// products exact in fp32 and accumulated in fp32: per coordinate |PQ − hi_P hi_Q| ≤ (2^−10 + 2^−22)|P||Q| +
/// (1 + 2^−11)·2^−25(|P| + |Q|) + 2^−50, the accumulation d·2^−22 of Σ|hi_P hi_Q|, the final FMA 2^−24.
inline ScoreBound hi_fp16_bound(int d, float row_scale, float col_scale) {
  ScoreBound b = fp32_bound(d);
  b.dot = 0x1p-10f + float(d + 8) * 0x1p-22f;
  b.sub = 1.001f * 0x1p-25f * sqrtf(float(d));
  b.sub_p = 1.f / col_scale;
  b.sub_q = 1.f / row_scale;
  b.unit = 1.001f * float(d) * 0x1p-50f / (row_scale * col_scale);
  return b;
}

/// E_i of a row of norm norm_p, scale s (the cost's factor), M_q = max_norm_q, M_b = max_bias.
FLASHOT_CT_HOST_DEVICE inline float score_bound(const ScoreBound& b, float s, float norm_p, float max_norm_q,
                                                float max_bias) {
  const float two_s = 2.f * s;
  return 1.01f * (b.dot * two_s * norm_p * max_norm_q + b.sub * two_s * (norm_p * b.sub_p + max_norm_q * b.sub_q) +
                  b.unit * two_s + b.bias * max_bias + b.norm * s * max_norm_q * max_norm_q);
}

/// Products and sums rounded outwards, for the tile pass's bound: on the device the directed-rounding instructions, on
/// the host one ulp beyond the nearest rounding (at least as far out).
FLASHOT_CT_HOST_DEVICE FLASHOT_CT_FORCEINLINE float ct_mul_down(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rd(a, b);
#else
  return nextafterf(a * b, -INFINITY);
#endif
}
FLASHOT_CT_HOST_DEVICE FLASHOT_CT_FORCEINLINE float ct_mul_up(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_ru(a, b);
#else
  return nextafterf(a * b, INFINITY);
#endif
}
FLASHOT_CT_HOST_DEVICE FLASHOT_CT_FORCEINLINE float ct_add_up(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_ru(a, b);
#else
  return nextafterf(a + b, INFINITY);
#endif
}

/// The tile pass's skip test (engine/cuda/c_transform.cu, ct_small_kernel): true only when no column q_j of a tile
/// scores above `rest` exactly for the row p, t_ij = 2s⟨p, q_j⟩ + h_j − s‖q_j‖² = s‖p‖² − s‖p − q_j‖² + h_j. x =
/// fp32(2s·p) (D coordinates), xn = Σ x_k² (fp32 FMA in coordinate order); lower / upper: the tile's 2s·min_j q_jk
/// rounded down and 2s·max_j q_jk rounded up (ct_mul_down / ct_mul_up); hmax = max_j h_j; four_s = 4s (s > 0).
/// Over the box 4s·t ≤ ‖2sp‖² − Σ_k e_k² + 4s·hmax, e_k the distance of 2s·p_k from [lower_k, upper_k]. The fp32
/// evaluation (x's rounding included) errs by at most some 20·2^−24 of ‖x‖² + Σe² + 4s·|hmax| (each e_k² by ≤ 2^−22·
/// (e_k² + x_k²), the sums and the product by 2^−24 of their terms); the margin takes 2^−18 of it, the bound is
/// rounded up and 4s·rest down. tests/engine/ct_bound_test.cpp checks it against the box's exact maximum.
template <int D>
FLASHOT_CT_HOST_DEVICE FLASHOT_CT_FORCEINLINE bool ct_tile_below(const float (&x)[D], float xn, const float* lower,
                                                 const float* upper, float hmax, float four_s, float rest) {
  float e2 = 0.f;
#if defined(__CUDA_ARCH__)
#pragma unroll  // x stays in registers
#endif
  for (int k = 0; k < D; ++k) {
    const float e = fmaxf(fmaxf(lower[k] - x[k], x[k] - upper[k]), 0.f);
    e2 = fmaf(e, e, e2);
  }
  const float bound = fmaf(four_s, hmax, xn - e2);
  const float margin = 0x1p-18f * (xn + e2 + four_s * fabsf(hmax));
  return ct_add_up(bound, margin) < ct_mul_down(four_s, rest);
}

/// The cascade's second pass (engine/cuda/c_transform_wg.cu) runs over `count` listed rows, known on the device
/// only, in blocks of `block_rows`: column splits for `blocks` row blocks, enough that `slots` blocks run (the
/// device's resident blocks), at least one and at most one per column tile (`tiles`). The kernel and the merge both
/// compute it from the count.
FLASHOT_CT_HOST_DEVICE inline int ct_listed_splits(int blocks, int tiles, int slots) {
  const int want = blocks > 0 ? (slots + blocks - 1) / blocks : 1;
  const int most = tiles < 1 ? 1 : tiles;
  return want < 1 ? 1 : (want > most ? most : want);
}
/// The 1-D grid launched for it, sized on the host for every count ≤ nrows: blocks·splits ≤ slots + blocks − 1 <
/// this (block b takes row block b % blocks and split b / blocks; the blocks past blocks·splits return).
inline int ct_listed_grid(int nrows, int slots, int block_rows = 256) {
  return slots + (nrows + block_rows - 1) / block_rows;
}

}  // namespace flashot::detail::ct
