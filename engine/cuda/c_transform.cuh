#pragma once
// The hard c-transform on one device (docs/engine.md, "Hard c-transform"): for every row point p_i,
// value_i = min_j (s·‖p_i − q_j‖² − h_j) over the column points and the argmin, streamed, never rows × columns.
// Pass 1 keeps, per row and column split, a candidate list: the kCtCand best fp32 scores (t_ij = 2s⟨p_i, q_j⟩ + h_j −
// s‖q_j‖², maximised) with their columns, and the best score of every other column (CtList). A merge combines the
// splits; a row whose best beats that "rest" score by more than twice the scores' error bound is decided from its
// candidates alone (fp64 direct differences); the others (kCtCand + 1 near ties) are listed, and a refinement pass
// re-scans their whole row. The cascade (on warpgroups): pass 1 takes the hi·hi product alone, and only the
// rows its looser bound leaves undecided are scored again with the three split products, then merged as above.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <cuda_runtime.h>

#include "ct_bound.hpp"
#include "device_buffer.hpp"
#include "mma.cuh"

namespace flashot::detail::cuda {

/// Rows and columns of one c-transform, on the device.
struct CTransformSides {
  const float* rows = nullptr;        // (nrows × d)
  const float* rows_norm2 = nullptr;  // (nrows) ‖p‖² (fp32)
  int nrows = 0;
  const float* cols = nullptr;        // (ncols × d)
  const float* cols_norm2 = nullptr;  // (ncols)
  int ncols = 0;
  int d = 0;
};

/// Candidates kept per row in pass 1 (c_transform.cu's header: K = 3 makes a full re-scan need four near ties).
constexpr int kCtCand = 3;

/// Scratch of run_c_transform, grown on demand and kept by the caller between calls. best: (splits, kCtCand + 1,
/// nrows) scores, arg: (splits, kCtCand, nrows) their columns (CtList::store); index: the argmins; top: the best
/// score of each re-scanned row (the refinement's floor); list: the rows pass 1 left undecided, rescan: the rows
/// the refinement re-scans; counters: [0] rows in list, [1] rows in rescan, [2] rows the cascade's second pass
/// scored (CTransformCounts); hi, lo: the listed rows' operands (the cascade's second pass); rounded: the values in
/// fp32 (run_c_transform_rounded); host_h, host_out: page-locked staging of h on its way up and of the results on
/// their way down.
struct CTransformScratch {
  DeviceBuffer<float> h, best, bias, top, rounded;  // bias: the warpgroup pass's column biases (c_transform_wg.cu)
  DeviceBuffer<int> arg, index, list, rescan, counters;
  DeviceBuffer<unsigned> maxima;
  DeviceBuffer<double> values;
  DeviceBuffer<std::uint16_t> hi, lo;
  PinnedBuffer<float> host_h;
  PinnedBuffer<std::uint8_t> host_out;
  /// The tile pass's spatial order (c_transform_tiles.cu): Morton codes and their orders (rows, columns), the sorted
  /// sides' coordinates, norms and column potentials, the column tiles' boxes (kCtBoxStride floats per tile), every
  /// row block's home tile, the points' extent, the sort's temporary storage, and the sorted rows' results.
  struct Order {
    DeviceBuffer<unsigned> codes, codes_sorted, extent;
    DeviceBuffer<int> ids, row_ids, col_ids, homes, index;
    DeviceBuffer<float> rows, rows_norm2, cols, cols_norm2, h, box;
    DeviceBuffer<unsigned char> temp;
    DeviceBuffer<double> values;
  } order;
};

/// Kernel choices of one c-transform (CudaTuning's c_transform_* fields).
struct CTransformChoices {
  bool cascade = true;  // on warpgroups: the hi·hi pass first, the split products for its undecided rows
  int columns = 2;      // the register pass (d ≤ 4): columns per test of the candidate lists (1, 2 or 4)
  bool tiles = true;    // the register pass (d ≤ 4): Morton order and column tiles skipped by their boxes
  int tile_rows = 2;    // with tiles: rows per thread (2, 4 or 8)
  /// The cascade's first pass on warpgroups: m64 subtiles per warpgroup, 1 (512-thread blocks, the next tile's
  /// product issued before this one's epilogue) or 2 (two 256-thread blocks per SM, lists in shared memory; used for
  /// 16 < padded d ≤ 16·kCtWgSharedListsMaxKs, elsewhere 1).
  int wg_subtiles = 1;
};

/// Rows of the last run_c_transform by how they were decided (CTransformScratch::counters).
struct CTransformCounts {
  long long rescored = 0;   // scored again by the cascade's second pass
  long long rescanned = 0;  // re-scanned over all columns by the refinement
};
/// Reads the counts of the last run on `stream` (synchronizes it); zeros before any run.
CTransformCounts c_transform_counts(const CTransformScratch& scratch, cudaStream_t stream);

/// Fills values (nrows) and index (nrows, column indices) on the host; h (ncols) is the column potential (host).
/// sms: the device's multiprocessors (the column splits fill them). rop, cop: the rows' and columns' split-fp16
/// tensor-core operands (null: fp32 scores); used where c_transform_mma_serves them and d > 16. Synchronizes
/// `stream`.
void run_c_transform(const CTransformSides& sides, std::span<const float> h, double cost_scale, int sms,
                     const MmaOperands* rop, const MmaOperands* cop, const CTransformChoices& choices,
                     std::span<double> values, std::span<std::int32_t> index, CTransformScratch& scratch,
                     cudaStream_t stream);
/// run_c_transform in the form Problem::c_transform returns (Backend::c_transform_rounded): the values rounded to
/// fp32 on the device (to nearest, as the host's conversion of the fp64 value), both arrays copied down once into
/// scratch.host_out and from there into values and index (resized to nrows while the device works).
void run_c_transform_rounded(const CTransformSides& sides, std::span<const float> h, double cost_scale, int sms,
                             const MmaOperands* rop, const MmaOperands* cop, const CTransformChoices& choices,
                             std::vector<float>& values, std::vector<std::int32_t>& index,
                             CTransformScratch& scratch, cudaStream_t stream);

/// Floats per column tile in CTransformScratch::Order::box: 2s·min of each coordinate (rounded down), 2s·max (rounded
/// up), both for d ≤ 4 coordinates (0 past d), then the tile's largest h_j.
constexpr int kCtBoxStride = 9;
/// Columns per tile of the register pass's shared-memory stage in the caller's order.
constexpr int kCtTile = 256;
/// Columns per tile of the tile pass (its stage and its boxes): on the benchmark's data (N(0, 1), d = 3, n = m = 100k,
/// ψ ~ 0.1·N(0, 1)) a host model of the pass keeps some 15–21 % of 128-column tiles per row block, 20–28 % of
/// 256-column ones (256 or 512 rows per block, 4 or 8 splits).
constexpr int kCtBoxTile = 128;

/// The tile pass's sorted problem (c_transform_tiles.cu): sides and h in Morton order, the boxes of its tiles of
/// kCtBoxTile columns, each row block's home tile (the tile its middle row's code falls in), and the maps back to
/// the caller's order.
struct CtTileOrder {
  CTransformSides sides;                 // sorted rows and columns
  const float* h = nullptr;              // (ncols) sorted
  const float* box = nullptr;            // (tiles × kCtBoxStride)
  const int* homes = nullptr;            // (row blocks)
  const int* row_ids = nullptr;          // (nrows) caller's row of sorted row i
  const int* col_ids = nullptr;          // (ncols) caller's column of sorted column j
};
/// Sorts both sides (d ≤ 4) along a Morton curve of their common bounding box, fills the tiles' boxes (s: the cost
/// scale) and the homes of blocks of rows_per_block sorted rows, into scratch.order. h: the columns' potential on the
/// device.
CtTileOrder prepare_ct_tiles(const CTransformSides& sides, const float* h, float s, int rows_per_block,
                             CTransformScratch& scratch, cudaStream_t stream);

/// Whether the tensor-core pass (c_transform_mma.cu) serves these operands: split fp16, 16 ≤ padded d ≤ 128.
bool c_transform_mma_serves(const MmaOperands& rop, const MmaOperands& cop);
/// The first pass on the tensor cores: per column split, each row's candidate list (CtList) into scratch.best / arg;
/// h on the device.
void launch_c_transform_mma(const CTransformSides& sides, const MmaOperands& rop, const MmaOperands& cop,
                            const float* h, float s, int sms, CTransformScratch& scratch, int& splits,
                            cudaStream_t stream);

/// The largest KS (padded d = 16·KS) of the warpgroup pass (c_transform_wg.cu); beyond, the mma.sync pass.
constexpr int kCtWgMaxKs = 8;
/// Whether the warpgroup pass serves these operands: c_transform_mma_serves, and the column side has its warpgroup
/// tiles (MmaOperands::tiles: a Hopper GPU running an sm_90a build), padded d ≤ 16·kCtWgMaxKs.
bool c_transform_wg_serves(const MmaOperands& rop, const MmaOperands& cop);
/// The largest KS of the warpgroup pass with two subtiles and shared lists (CTransformChoices::wg_subtiles): two
/// of its blocks must share an SM.
constexpr int kCtWgSharedListsMaxKs = 4;
/// Subtiles per warpgroup of the warpgroup pass for operands of padded_d: CTransformChoices::wg_subtiles where it
/// serves (the hi·hi pass, single, at 16 < padded_d ≤ 16·kCtWgSharedListsMaxKs), else the pipeline's
/// (mma_launch.cuh wg_subtiles: 2 at padded d = 16, else 1). Its blocks per SM are as many.
int ct_wg_first_subtiles(int padded_d, bool single, int subtiles);
/// The first pass on warpgroups (wgmma): as launch_c_transform_mma (scratch.bias holds the column biases). single:
/// the hi·hi product alone (the cascade's first pass), else the three split products. subtiles:
/// CTransformChoices::wg_subtiles. bound: the error bound of the pass's scores (ct::hi_fp16_bound with single, else
/// ct::split_fp16_bound), with maxima (device: max‖q‖, max|bias|, as ct_maxima_kernel leaves them) for the rows' E_i:
/// every score below a lane's best by more than 3E_i is skipped (docs/engine.md, "The warpgroup pass's epilogue").
void launch_c_transform_wg(const CTransformSides& sides, const MmaOperands& rop, const MmaOperands& cop,
                           const float* h, float s, int sms, bool single, int subtiles, const ct::ScoreBound& bound,
                           const unsigned* maxima, CTransformScratch& scratch, int& splits, cudaStream_t stream);
/// Column splits for `blocks` row blocks of a kernel with `per_sm` resident blocks per multiprocessor: the fewest
/// that keep ≥ 90 % of the device's resident blocks busy over whole waves, at most one per column tile
/// (c_transform.cu).
int ct_splits(int blocks, int tiles, int per_sm, int sms);
/// The cascade's second pass: the rows scratch.list names (scratch.counters[0] of them, counted on the device; at
/// most sides.nrows) are gathered into scratch.hi / lo and scored with the three split products against every
/// column; their candidate lists go to scratch.best / arg as (splits, k, count) at compact row w (the w-th listed
/// row), splits = ct_listed_splits(count) (the merge computes the same). Needs launch_c_transform_wg's column biases
/// in scratch.bias (the same call's first pass). Writes nothing the host waits for.
void launch_c_transform_wg_listed(const CTransformSides& sides, const MmaOperands& rop, const MmaOperands& cop,
                                  float s, int sms, CTransformScratch& scratch, cudaStream_t stream);
/// Grows the scratch for launch_c_transform_wg_listed; called before the call's first launch (a buffer that grows
/// loses what earlier launches wrote).
void reserve_c_transform_wg_listed(const CTransformSides& sides, const MmaOperands& rop, int sms,
                                   CTransformScratch& scratch);
using ct::ct_listed_splits;  // the second pass's plan (engine/src/ct_bound.hpp)
using ct::ct_listed_grid;

#ifdef __CUDACC__
/// A row's candidate list: s[0] ≥ … ≥ s[K − 1] the best scores seen, a[k] their columns, s[K] the best score of every
/// other column seen (the "rest"; −∞ while none). Pushing a score costs one comparison unless it beats s[K].
struct CtList {
  static constexpr int K = kCtCand;
  float s[K + 1];
  int a[K];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int k = 0; k <= K; ++k) s[k] = -INFINITY;
#pragma unroll
    for (int k = 0; k < K; ++k) a[k] = -1;
  }
  /// Inserts (t, j), t > s[K]: bubbles down the list (an equal score stays behind, so columns keep their order);
  /// the score that falls off the end becomes the rest.
  __device__ __forceinline__ void insert(float t, int j) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const bool up = t > s[k];
      const float ts = up ? s[k] : t;
      const int tj = up ? a[k] : j;
      s[k] = up ? t : s[k];
      a[k] = up ? j : a[k];
      t = ts;
      j = tj;
    }
    s[K] = t;
  }
  __device__ __forceinline__ void push(float t, int j) {
    if (t > s[K]) insert(t, j);
  }
  /// Merges another list of disjoint columns.
  __device__ __forceinline__ void merge(const float (&os)[K + 1], const int (&oa)[K]) {
#pragma unroll
    for (int k = 0; k < K; ++k) push(os[k], oa[k]);
    s[K] = fmaxf(s[K], os[K]);
  }
  /// Merges the list of lane (this lane ^ offset).
  __device__ __forceinline__ void merge_lane(int offset) {
    float os[K + 1];
    int oa[K];
#pragma unroll
    for (int k = 0; k <= K; ++k) os[k] = __shfl_xor_sync(0xffffffffu, s[k], offset);
#pragma unroll
    for (int k = 0; k < K; ++k) oa[k] = __shfl_xor_sync(0xffffffffu, a[k], offset);
    merge(os, oa);
  }
  /// Stores at row i of column split `split`: scores (split, k, nrows), columns (split, k, nrows).
  __device__ __forceinline__ void store(float* best, int* arg, int split, int nrows, int i) const {
#pragma unroll
    for (int k = 0; k <= K; ++k) best[(std::size_t(split) * (K + 1) + k) * nrows + i] = s[k];
#pragma unroll
    for (int k = 0; k < K; ++k) arg[(std::size_t(split) * K + k) * nrows + i] = a[k];
  }
  __device__ __forceinline__ void load(const float* best, const int* arg, int split, int nrows, int i) {
#pragma unroll
    for (int k = 0; k <= K; ++k) s[k] = best[(std::size_t(split) * (K + 1) + k) * nrows + i];
#pragma unroll
    for (int k = 0; k < K; ++k) a[k] = arg[(std::size_t(split) * K + k) * nrows + i];
  }
};
#endif

}  // namespace flashot::detail::cuda
