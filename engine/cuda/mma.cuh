#pragma once
// Tensor-core operands: coordinates converted once to 16-bit types, zero-padded to a multiple of 16.

#include <cstddef>
#include <cstdint>

#include "flashot/flashot.hpp"
#include "kernels.cuh"

namespace flashot::detail::cuda {

enum class MmaMode {
  kSplitFp16,  // x = hi + lo, three fp16 products: fp32-class accuracy (the default for 16 ≤ d ≤ 128)
  kFp16,       // one fp16 product: 11-bit significand, like TF32 (Precision::kTf32)
  kBf16,       // one bf16 product: 8-bit significand (Precision::kBf16)
};

struct MmaOperands {
  const std::uint16_t* hi = nullptr;  // (count × padded_d) fp16 or bf16 bits of scale·x
  const std::uint16_t* lo = nullptr;  // (count × padded_d) fp16 bits of scale·x − hi (kSplitFp16 only)
  int padded_d = 0;
  float scale = 1;  // power of two applied to the coordinates before conversion
  MmaMode mode = MmaMode::kSplitFp16;
  float max_norm = 0;  // largest Euclidean norm of the (centred, unscaled) points: bounds the hi·hi product's error
  bool warpgroup = false;  // screened sites use the warpgroup (wgmma) kernels (warpgroup_kernels_available)
  // Warpgroup kernels only, where this side is the column side: the points as whole column tiles of 64 in the
  // kernels' shared-memory layout (tile_bytes(padded_d) each: hi then lo core matrices, zero past count;
  // launch_tile_operands), and the column biases of the current pass, padded with −∞ to whole tiles
  // (launch_column_biases). Each tile then arrives with one bulk copy.
  const std::uint8_t* tiles = nullptr;
  const float* bias = nullptr;
  // Warpgroup kernels of two subtiles per warpgroup (padded_d = 16, wg_subtiles): how the dense LSE and one-pass
  // sums wait for a tile's subtiles (kWithinTile: WgWait::kSubtiles, kAcrossTiles: kSubtilesAcross, kOff: kWhole;
  // CudaTuning::subtile_overlap). The rows' operands' value decides.
  SubtileOverlap subtile_overlap = SubtileOverlap::kOff;
};

/// Bytes of one column tile of split operands in the warpgroup kernels' layout (hi and lo core matrices of 64 points).
inline constexpr std::size_t tile_bytes(int padded_d) { return std::size_t(2) * 64 * padded_d * 2; }
/// Column tiles of `count` points (64 each; the biases are padded to tiles × 64).
inline constexpr int column_tiles(int count) { return (count + 63) / 64; }

/// Writes the split operands (hi, lo: count × padded_d, row-major) as column tiles into `out`
/// (column_tiles(count) × tile_bytes(padded_d) bytes).
void launch_tile_operands(const std::uint16_t* hi, const std::uint16_t* lo, int count, int padded_d, std::uint8_t* out,
                          cudaStream_t stream);
/// out_a[j] = v_j = log2e·((h_j − s‖q_j‖²)/ε + ln w_j) for the points of side a, −∞ from a.count up to
/// column_tiles(a.count) × 64; the same for side b (b.count may be 0). One launch.
void launch_column_biases(const PointSet& a, const float* ha, float* out_a, const PointSet& b, const float* hb,
                          float* out_b, const Scale& scale, cudaStream_t stream);

// ---- The one-pass sums with the biases on the tensor cores (docs/engine.md, "Biases on the tensor cores") ----
/// The largest d they serve: d + 2 slots ≤ 32.
inline constexpr int kBiasMaxD = 30;
/// log2 of the factor 2^c that the slots' 1s carry (and by which the biases' parts are divided): the parts then
/// cover |u|, |v| < 65504·2^c ≈ 2^24 log2 units, past which fp32 exponents have no fraction left.
inline constexpr int kBiasSlotLog2 = 8;
/// The biased operands' width: d coordinates and two or four bias slots, padded to 16 (d ≤ 14) or 32.
inline constexpr int bias_padded_d(int d) { return d + 2 <= 16 ? 16 : 32; }
/// K slots per bias: two (four fp16 parts, the bias's fp32 value exactly but for subnormal parts) where the padding
/// leaves four, else one (two parts).
inline constexpr int bias_slots(int d, int padded) { return (padded - d) / 2 >= 2 ? 2 : 1; }

/// The biased operands (device memory): the rows' A (count × padded_d fp16, hi and lo) and the columns' B as whole
/// tiles in the warpgroup kernels' layout (column_tiles(count) × tile_bytes(padded_d)).
struct BiasOperands {
  std::uint16_t* rows_hi = nullptr;
  std::uint16_t* rows_lo = nullptr;
  std::uint8_t* tiles = nullptr;
  int padded_d = 0;
};

/// The factors of the coordinates, ra·rb = α (Scale::alpha: log2 units per unit of ⟨x, y⟩): rb the power of two
/// nearest √α, so that both sides' coordinates stay below largest·√(2α). fits: that is below 2^15 (fp16's range, with
/// room for the lo halves' rounding); otherwise the ordinary sums serve the step. `largest` bounds every |coordinate|
/// of both sides and is the same on every shard, so the shards round as one GPU does.
struct BiasFactors {
  float ra = 0, rb = 0;
  bool fits = false;
};
BiasFactors bias_factors(float alpha, float largest);

/// The biased operands of one one-pass step (rows x, columns y), in one launch: rows' u_i = c1·(f_i − s‖x_i‖²) +
/// shift (the forecast's; a step that skips writes nothing), columns' v_j from vbias (launch_column_biases' values
/// for the step's potentials).
void launch_bias_operands(const PointSet& rows, const float* f, const PointSet& cols, const float* vbias,
                          const Scale& scale, const BiasFactors& factors, const SumsForecast* forecast,
                          const BiasOperands& out, cudaStream_t stream);

/// The plan of the biased sums (plan_lse_mma's for warpgroup operands of out.padded_d).
ReductionPlan plan_symmetric_bias(const PointSet& x, const PointSet& y, int padded_d, int sms);
/// launch_symmetric_sums_mma's contract (never screened) with the biases on the tensor cores: builds the biased
/// operands into `out` (launch_bias_operands; vbias: the column biases of g) and runs sums_bias_wg_kernel. Returns
/// false, launching nothing, where the coordinates' factors do not fit fp16 (bias_factors); the caller then runs
/// the ordinary sums.
bool launch_symmetric_sums_bias(const PointSet& x, const PointSet& y, const MmaOperands& xop, const MmaOperands& yop,
                                const float* f, const float* vbias, const Scale& scale, const ReductionPlan& plan,
                                const BiasOperands& out, float* rsum, float* csum, const SumsForecast* forecast,
                                cudaStream_t stream);

/// Whether the current device runs this build's warpgroup (wgmma, sm_90a) kernels: a Hopper GPU and an engine built
/// for it (CMake maps CUDA architecture 90 to 90a). Launches one tiny kernel; call outside graph capture.
bool warpgroup_kernels_available();

/// Adaptive state of one screened launch site (device memory, zero but for `use`; mma_site.cuh has the contract). Split
/// operands only: a column tile of a warp's rows is first multiplied with the hi halves alone; when no entry can
/// come within `reach` (log2 units) of what the sums keep — after allowing for the hi·hi product's error bound — the
/// tile is dropped, otherwise its hi·lo + lo·hi products are added and it is summed as usual. The result equals the
/// unscreened one up to fp32 rounding (dropped mass ≤ 2^-26 of every sum, by the choice of reach). Both a screened
/// and a dense kernel are launched; each reads `use` and only one runs; the dense launch's last block sets `use` for
/// the next launch from the fraction of tiles the screened one kept (close_site in mma_site.cuh has the rule).
struct ScreenState {
  unsigned long long kept = 0, seen = 0;  // warp tiles summed / looked at by the launch that ran
  unsigned done = 0;                      // blocks of the current dense launch that finished
  int use = 1;                            // 1: the screened kernel runs; 0: the dense one
  int pinned = 0;                         // 1: `use` never changes (Screening::kOn)
  int screened_runs = 0;                  // screened launches so far
  int dense_left = 0;                     // dense launches before the screen is tried again
  int pays_percent = 50;                  // the screen is kept while it keeps at most this share of warp tiles
  int backoff = 8;                        // dense launches after the next screened one that does not pay (doubles)
  int seeded = 1;                         // 1: an LSE site (its first launch's seeds are column 0); 0: the sums
  int siblings = 0;                       // states after this one that start dense if this one's screen never pays
  // The sums site's floor (launch_symmetric_sums_mma): its screened kernel drops entries down to the low floor's
  // cut only while its screen pays (a re-probe after dense launches uses the kSumsMinLog2 cut, floor_gap log2
  // units higher), so a probe that does not pay costs no fallen-back step.
  int paid = 0;           // the last screened launch paid (1 from the start where the screen is pinned on)
  float floor_gap = 0;    // cut difference between the high and the low floor (0: one floor)
  int last_low = 0;       // 1: the launch that just ended ran screened with the low floor (the finish check's floor)
  int next_low = 0;       // 1: the next launch will (the prediction's and the cold check's floor)
  // Totals over the site's life, for Problem::statistics() (EngineStatistics).
  unsigned long long kept_total = 0, seen_total = 0;
};

/// Tensor cores serve 16 ≤ d ≤ 128 (smaller d is cheaper on the FMA pipe; larger needs the generic path).
inline bool mma_supports(int d) { return d >= 16 && d <= 128; }

/// The plan of a site's launches: op.warpgroup (the warpgroup kernels: 256 rows per block, one block per SM, `sms`
/// of them at once, plan_waves) or the mma.sync kernels (128 rows, plan_reduction).
ReductionPlan plan_lse_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& op, int resident_blocks,
                           int sms);
/// Same contract as launch_lse, with the scores from the tensor cores. screen (may be null): the site's ScreenState;
/// seeds (rows.count column indices, read and written by the screened kernel): each row's best column so far.
void launch_lse_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
                    const float* h, const Scale& scale, const ReductionPlan& plan, float2* partials,
                    const int* guard, ScreenState* screen, int* seeds, cudaStream_t stream);

/// The one-pass symmetric step on tensor cores: the contract of launch_symmetric_sums (kernels.cuh), scores from
/// the operands' tensor-core products (skip as there). sums_reach: log2 of the largest of m and 1/min b_j, the
/// weight range that the screen's reach must cover; floor_log2: the smallest sum the finish kernel keeps (log2).
ReductionPlan plan_symmetric_mma(const PointSet& x, const PointSet& y, const MmaOperands& op, int resident_blocks,
                                 int sms);
void launch_symmetric_sums_mma(const PointSet& x, const PointSet& y, const MmaOperands& xop, const MmaOperands& yop,
                               const float* f, const float* g, const Scale& scale, const ReductionPlan& plan,
                               float* rsum, float* csum, const SumsForecast* forecast, ScreenState* screen,
                               float sums_reach, float floor_log2, cudaStream_t stream);

}  // namespace flashot::detail::cuda
