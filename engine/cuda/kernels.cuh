#pragma once
// Kernels of the CUDA backend and their launchers. Every kernel streams tiles of the two point sets through shared
// memory and never forms the n×m matrix (docs/design.md §1–2).
//
// Notation (base-2 log domain, log2(e) folded into the scale): for a "row" side R (points p_i) reduced against a
// "column" side K (points q_j, weights w_j, potential h_j), with cost C = s·‖p − q‖² and temperature ε,
//   score_ij = α·⟨p_i, q_j⟩ + v_j,   α = 2·s·log2(e)/ε,   v_j = log2(e)·((h_j − s‖q_j‖²)/ε + ln w_j)
// so that softmin_R(h)_i = −ε·LSE_j[ln w_j + (h_j − C_ij)/ε] = s‖p_i‖² − ε·ln2·LSE2_j(score_ij).

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "one_pass.hpp"
#include "tiling.hpp"

namespace flashot::detail::cuda {

/// One point set resident on the device (centred coordinates).
struct PointSet {
  const float* points = nullptr;  // (count × d) row-major
  const float* norm2 = nullptr;   // (count) ‖p‖²
  const float* logw = nullptr;    // (count) ln weight (−inf for a zero weight)
  const float* weight = nullptr;  // (count)
  int count = 0;
  /// The fp32 score kernel for this side as the rows: −1 by d alone (dispatch.hpp default_fp32_width), 0 tiled,
  /// D > 0 the register kernels of width D ≥ d (dispatch.hpp). The CUDA backend sets it from its kernel choice.
  int fp32_kernel = -1;
  /// Device count of the rows in use (may be null: all `count`): the fp32 LSE kernels (launch_lse) skip the row
  /// blocks at or beyond *active. A compact side whose size is known on the device only (Strays) sets it.
  const int* active = nullptr;
};

/// Scalars of one kernel-matrix evaluation.
struct Scale {
  float alpha = 0;  // 2·s·log2(e)/ε
  float c1 = 0;     // log2(e)/ε
  float s = 1;      // cost scale
  float epsilon = 0;
  int d = 0;
  static Scale make(double epsilon, double cost_scale, int d);
};

/// The fp32 kernel that serves `rows` at dimension d: the register kernels' width D (small_d.cuh), or 0 for the
/// tiled kernels (PointSet::fp32_kernel).
int fp32_width(const PointSet& rows, int d);

// ---- log-sum-exp reductions (softmin) ------------------------------------------------------------------------
/// Rows per block and columns per tile of the LSE kernel used for `d`.
ReductionPlan plan_lse(const PointSet& rows, const PointSet& cols, int d, int resident_blocks);
/// partials (plan.splits × rows.count) receive (running max, sum of exp2(score − max)) per row and split.
/// guard: when non-null, the kernel does nothing unless *guard != 0 (the one-pass fallback, docs/design.md §2).
void launch_lse(const PointSet& rows, const PointSet& cols, const float* h, const Scale& scale, const ReductionPlan& plan,
                float2* partials, const int* guard, cudaStream_t stream);

/// What finalize does with the merged LSE of one side.
enum class Finalize {
  kLse2,         // out_i = LSE2_i (base-2 log-normaliser)
  kSoftmin,      // out_i = s‖p_i‖² − ε·ln2·LSE2_i
  kSymmetric,    // pot_i = ½(pot_i + λ·softmin_i); with ω: pot_i + ½ω(λ·softmin_i − pot_i)
  kAlternating,  // pot_i = λ·softmin_i; with ω: pot_i + ω(λ·softmin_i − pot_i)
  kCommit,       // one-pass step: pot_i = ½(pot_i + tmp_i) (with ω as kSymmetric) unless *flag, then as kSymmetric
};
struct FinalizeSide {
  const float2* partials = nullptr;
  int splits = 1;
  const float* norm2 = nullptr;
  float* out = nullptr;        // pot (updates) or out (kLse2 / kSoftmin)
  const float* tmp = nullptr;  // kCommit: the one-pass result
  float lambda = 1;
  int count = 0;
  float omega = 1;  // over-relaxation ω (IterationParams::relaxation) of the update modes
  // When bias is non-null, the updated potential's column biases v_i = c1·(out_i − s‖p_i‖²) + log2e·logw_i are
  // written too (what launch_column_biases would compute from it; the next iteration's warpgroup kernels read them).
  float* bias = nullptr;
  const float* logw = nullptr;
  float c1 = 0;
};
/// Finalizes up to two sides in one launch; side b may have count 0. Sets *nonfinite when a result is not finite.
/// forecast (kCommit only, may be null): the next step's. When this step was redone (*flag), its commit predicts,
/// to first order, the next one-pass step's log2 sums — the next row sum is e^((f' − c(g'))/ε) with f' the new
/// potential, and c(g') is taken as c(g), the soft c-transform just computed — and records their range as
/// `fallback` (and `fell_back`), with the lower end of the range the next launch trusts (floor_log2 where
/// `screened` says the screened floor applies to it, else kSumsMinLog2); a step that stands leaves the finish
/// kernel's forecast. The next step's kernels read it as a SumsStep (sums_step, one_pass.hpp): unshifted in range,
/// shifted into it, or skipped. A wrong guess costs one pass either way (the finish kernel still checks).
void launch_finalize(Finalize mode, const FinalizeSide& a, const FinalizeSide& b, double epsilon, float s,
                     const int* flag, int* nonfinite, cudaStream_t stream, SumsForecast* forecast = nullptr,
                     const int* screened = nullptr, float floor_log2 = kSumsMinLog2);
/// The cold step's forecast (*forecast, device) from the soft c-transforms of zero potentials in `softmin`
/// (device, a sample of both sides: count_x of x's points, the first even_x of them evenly spaced, then count_y of
/// y's, the first even_y evenly spaced): the range of the one-pass step's log2 sums e^(−softmin/ε) they predict,
/// judged by decide_cold_step against [floor, kSumsMaxLog2] (floor = floor_log2 where `screened` says the screened
/// floor applies, else kSumsMinLog2) as sums_step reads it from cold_forecast: run unshifted, run shifted, or skip.
/// strays: the step redoes its strays alone (Strays), so only the evenly spaced points' lowest sum must fit.
void launch_cold_check(const float* softmin, int count_x, int even_x, int count_y, int even_y, bool strays,
                       double epsilon, SumsForecast* forecast, cudaStream_t stream, const int* screened = nullptr,
                       float floor_log2 = kSumsMinLog2);

// ---- one-pass symmetric step (row and column sums of one tile of exponentials, docs/design.md §2) ------------------
/// sms: the device's SM count (the small-d plan balances their work, plan_balanced).
ReductionPlan plan_symmetric(const PointSet& x, const PointSet& y, int d, int resident_blocks, int sms);
/// rsum (n) += Σ_j E_ij and csum (m) += Σ_i a_i E_ij with E_ij = exp2(α⟨x_i,y_j⟩ + u_i + v_j),
/// u_i = log2e·(f_i − s‖x_i‖²)/ε, v_j = log2e·((g_j − s‖y_j‖²)/ε + ln b_j). rsum/csum must start at zero.
/// forecast (may be null: no skip, no shift): the step's SumsStep (sums_step): when it says skip the kernel does
/// nothing (the previous step predicted that this one would fall back to the two-pass reductions anyway); every
/// exponent is raised by its shift.
void launch_symmetric_sums(const PointSet& x, const PointSet& y, const float* f, const float* g, const Scale& scale,
                           const ReductionPlan& plan, float* rsum, float* csum, const SumsForecast* forecast,
                           cudaStream_t stream);
/// The points of a one-pass step whose sums left the trusted range, to be redone alone instead of the whole step
/// (docs/engine.md, "The CUDA backend"): the finish kernel appends x's to index[0, cap_x) and y's to
/// index[cap_x, cap_x + cap_y), counting them in count[0] and count[1] (zero before the step); past a side's
/// capacity it flags the whole step instead. launch_pack_strays packs them as compact sides, the fp32 LSE reduces
/// those against the whole other side, and launch_strays_commit writes their results and forecasts.
struct Strays {
  int* index = nullptr;  // null: no strays, any sum out of range redoes the whole step
  int* count = nullptr;
  int cap_x = 0, cap_y = 0;
};

/// tmp_f = λx(f − ε ln rsum), tmp_g = λy(g − ε ln(csum/b)) (the sums' shift taken out); rsum/csum reset to zero;
/// *flag = 1 when a (shifted) sum is too small or not finite for the result to be trusted. forecast (may be null):
/// the sums' (their SumsStep); when it says skip the sums were skipped, so only *flag = 1 is set. next (may be
/// null; zero before the launch): the next step's forecast, its `sums` range — what the commit's blend of pot and
/// tmp with weight commit_weight (½, or ½ω with over-relaxation) implies
/// for the next step's sums, to first order (launch_finalize) — and the floor the next launch trusts (floor_log2
/// where `next_screened` says the screened floor applies to it). strays (index non-null): a sum out of range is
/// recorded there (up to the side's capacity) rather than flagged, and left out of the forecast.
void launch_symmetric_finish(const float* f, const float* g, float* rsum, float* csum, const float* b, int n, int m,
                             double epsilon, float lambda_f, float lambda_g, float* tmp_f, float* tmp_g, int* flag,
                             const SumsForecast* forecast, cudaStream_t stream, const int* screened = nullptr,
                             float floor_log2 = kSumsMinLog2, SumsForecast* next = nullptr,
                             const int* next_screened = nullptr, float commit_weight = 0.5f, Strays strays = {});
/// Packs the strays of x (points (x.count × d), ‖p‖², ln w, w) into packed_x as a compact side of cap_x points
/// (the cold samples' layout: cap_x × d coordinates, then cap_x of each value), y's into packed_y.
void launch_pack_strays(const Strays& strays, const PointSet& x, const PointSet& y, int d, float* packed_x,
                        float* packed_y, cudaStream_t stream);
/// One side's strays after their LSE: the compact side's merged partials (splits × cap) and ‖p‖², and where the
/// results go (the side's potential, one-pass results and λ).
struct StraySide {
  const float2* partials = nullptr;
  int splits = 1;
  const float* norm2 = nullptr;
  const float* pot = nullptr;
  float* tmp = nullptr;
  float lambda = 1;
};
/// tmp[i] = λ·softmin_i of every stray (the soft c-transform from its LSE, as the finish kernel writes it from the
/// sums), and its first-order forecast of the next step's log2 sum added to next->sums (launch_symmetric_finish).
void launch_strays_commit(const Strays& strays, const StraySide& x, const StraySide& y, double epsilon, float s,
                          float commit_weight, SumsForecast* next, cudaStream_t stream);

// ---- plan application --------------------------------------------------------------------------------------
/// out (rows.count × k) += Σ_j exp2(score_ij − lse2_i) · V_j for the column range of each split; V is
/// (cols.count × k). wsum (rows.count) += Σ_j exp2(score_ij − lse2_i). out and wsum must start at zero.
/// The plan depends on the kernel chosen for (d, k): call it with the launch's d and k.
ReductionPlan plan_apply(const PointSet& rows, const PointSet& cols, int d, int k, int resident_blocks);
/// A plan every P·V kernel accepts (the tiled kernel's geometry), when d and k are not known yet.
ReductionPlan plan_apply(const PointSet& rows, const PointSet& cols, int resident_blocks);
void launch_apply(const PointSet& rows, const PointSet& cols, const float* h, const Scale& scale, const float* lse2,
                  const float* v, int k, const ReductionPlan& plan, float* out, float* wsum, cudaStream_t stream);
/// out_i,: *= mass_i / wsum_i with mass_i = 1 (normalized) or the row's plan mass
/// exp2(log2e·((f_i − s‖p_i‖²)/ε + ln w_i) + lse2_i).
void launch_apply_scale(const PointSet& rows, const float* pot, const float* lse2, const float* wsum, int k,
                        bool normalized, const Scale& scale, float* out, cudaStream_t stream);

// ---- top-k entries per row -----------------------------------------------------------------------------------
/// For each row i of x: the k largest P_ij, sorted by decreasing value.
void launch_top_k(const PointSet& x, const PointSet& y, const float* f, const float* g, const Scale& scale, int k,
                  std::int32_t* columns, float* values, cudaStream_t stream);

}  // namespace flashot::detail::cuda
