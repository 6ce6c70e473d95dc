// The hard c-transform's first pass on warpgroups (wgmma, sm_90a; c_transform.cuh, docs/engine.md "Hard
// c-transform"): the dense LSE pass's tile pipeline (WgTileCore of wg_tile.cuh: 256 rows per block, the column tiles
// arriving by bulk copies in the warpgroup layout DeviceStep already holds) with the candidate-list epilogue of the
// mma.sync pass (c_transform_mma.cu) instead of the log-sum-exp. Two products: SINGLE, hi·hi alone (WgTileCore's
// screened product with HI_ONLY, the cascade's first pass: a third of the tensor-core work and half the tile copies,
// a looser error bound); otherwise
// hi·hi + hi·lo + lo·hi, the mma.sync pass's split products with fp32 accumulation and the same error bound
// (c_transform.cu derives both). The cascade's second pass runs the three products over the rows the first left
// undecided: gathered on the device into a compact operand (ct_gather_rows_kernel), the grid sized for every row and
// each block finding its role from the count on the device (no host round trip). Used where the column side has its
// warpgroup tiles (MmaOperands::tiles: a Hopper GPU and an sm_90a build); elsewhere the mma.sync pass serves.

#include <algorithm>

#include "c_transform.cuh"
#include "error.hpp"
#include "wg_tile.cuh"

namespace flashot::detail::cuda {
namespace {

/// bias[j] = fp32(h_j − s‖q_j‖²) for j < ncols, −∞ up to whole column tiles (the pipeline's masked columns).
__global__ void ct_wg_bias_kernel(const float* __restrict__ h, const float* __restrict__ norm2, float s, int ncols,
                                  int padded, float* __restrict__ bias) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < padded) bias[j] = j < ncols ? h[j] - s * norm2[j] : -INFINITY;
}

/// Compact operands of the listed rows: row w of hi / lo = row list[w] of rop (w < *count), padded_d halves each.
__global__ void ct_gather_rows_kernel(const std::uint16_t* __restrict__ hi, const std::uint16_t* __restrict__ lo,
                                      int padded_d, const int* __restrict__ list, const int* __restrict__ count,
                                      std::uint16_t* __restrict__ out_hi, std::uint16_t* __restrict__ out_lo) {
  const int rows = *count;
  const int words = padded_d / 2;  // 32-bit words per row (padded_d is a multiple of 16)
  const std::size_t total = std::size_t(rows) * words;
  for (std::size_t e = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t w = e / words, k = e % words, from = std::size_t(list[w]) * words + k;
    reinterpret_cast<std::uint32_t*>(out_hi)[e] = reinterpret_cast<const std::uint32_t*>(hi)[from];
    reinterpret_cast<std::uint32_t*>(out_lo)[e] = reinterpret_cast<const std::uint32_t*>(lo)[from];
  }
}

/// Whether ct_wg_kernel<KS, MT, SINGLE> keeps its candidate lists in shared memory: two subtiles per warpgroup beyond
/// KS = 1 (the cascade's first pass, CTransformChoices::wg_subtiles). Their registers (two accumulators of 32, the
/// rows' A fragments of 4·KS each) leave no room for four lists of 7 (ptxas spilled 56 bytes at KS = 4 with them in
/// registers); only each list's rest stays in a register, and a list is read and written back only when a score
/// beats its rest (rare once the lists have settled).
template <int KS, int MT>
constexpr bool ct_shared_lists() {
  return MT == 2 && KS > 1;
}
/// Dynamic shared memory of ct_wg_kernel<KS, MT, SINGLE>: the tile pipeline's, then the lists (ct_shared_lists):
/// scores (list, k, thread) for k ≤ K, then columns (list, k, thread) for k < K, list = mt·2 + hh.
template <int KS, int MT, bool SINGLE>
constexpr int ct_wg_shared_bytes() {
  constexpr int core = (WgTileCore<KS, SINGLE, MT, SINGLE>::kSharedBytes + 15) / 16 * 16;
  return core + (ct_shared_lists<KS, MT>() ? MT * 2 * (2 * CtList::K + 1) * (kWgThreads / MT) * 4 : 0);
}

/// count == nullptr: rows 0 .. nrows − 1 of rop, row block blockIdx.x, column split blockIdx.y of cols_per_split
/// columns. Otherwise (the cascade's second pass) the first *count rows of rop (compact, gathered), a 1-D grid: block
/// b takes row block b % blocks and split b / blocks of ct_listed_splits(blocks, tiles, slots) (blocks past them
/// return), and stores its lists with the row stride *count.
/// The rows' error bounds of a first pass (ct_wg_kernel's floor against the row's best): E_i of the pass's scores
/// (bound; ct::score_bound from ‖p_i‖ = sqrt(rows_norm2[i]), max‖q‖ and max|bias| in maxima, as the merge computes
/// it). rows_norm2 null: no such floor (the cascade's second pass, whose compact rows are not the caller's).
struct CtRowBound {
  const float* rows_norm2 = nullptr;
  const unsigned* maxima = nullptr;
  float s = 0;
  ct::ScoreBound bound;
};

template <int KS, int MT, bool SINGLE>
__global__ void __launch_bounds__(kWgThreads / MT, MT)
    ct_wg_kernel(int nrows, const int* __restrict__ count, int slots, MmaOperands rop, MmaOperands cop, float alpha,
                 int ncols, int cols_per_split, CtRowBound rb, float* __restrict__ best, int* __restrict__ arg) {
  using Core = WgTileCore<KS, SINGLE, MT, SINGLE>;
  constexpr bool kShared = ct_shared_lists<KS, MT>();
  constexpr int kThreads = kWgThreads / MT, K = CtList::K;
  extern __shared__ __align__(128) std::uint8_t wg_smem[];
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  int row_block = blockIdx.x, split = blockIdx.y;
  if (count != nullptr) {
    nrows = *count;
    const int blocks = (nrows + kWgBlockRows - 1) / kWgBlockRows, tiles_all = column_tiles(ncols);
    const int splits = ct_listed_splits(blocks, tiles_all, slots);
    if (int(blockIdx.x) >= blocks * splits) return;
    row_block = blockIdx.x % blocks;
    split = blockIdx.x / blocks;
    cols_per_split = (tiles_all + splits - 1) / splits * kMmaTile;
  }
  const int block_row0 = row_block * kWgBlockRows;
  Core core;
  core.load_rows(wg_smem, rop, block_row0, nrows);
  // The lists: in registers, or (kShared) in shared memory with their rests in registers; each thread reads and
  // writes its own slots only.
  CtList list[kShared ? 1 : MT][2];  // (m16 subtile, row g / g + 8)
  // The quad's floor of row (mt, hh): the largest over the 4 lanes' lists of that row of max(rest, best − 3E_i)
  // (each only grows, so an older floor stays valid); a score ≤ it is skipped, for one of two reasons.
  // * ≤ a rest r: the lane with rest r holds K + 1 scores ≥ r of the row (its K candidates and the score that became
  //   its rest), so the score is at most the row's (K + 1)-th best: skipping it keeps the merge's certificate (every
  //   column outside the merged candidates scores ≤ the merged rest, the largest of the lanes' rests) and loses no
  //   top-K score.
  // * ≤ fp32(b − 3E_i), b a list's best (e3 = 3E_i, the pass's bound as the merge computes it, CtRowBound; +∞ for
  //   the cascade's second pass): then t < b − 2E_i (E_i ≥ the ulp of any score, its dot and bias terms being
  //   ≥ 5·2^−23 of their magnitudes, and the subtraction rounds by half an ulp), so t's exact score is < t + E_i <
  //   b − E_i ≤ that of b's column: t's column can be neither the argmin nor tied with it. So the argmin's column
  //   and every column tied with it are pushed, or lie ≤ a rest (then ≤ the merged rest, exactly < rest + E_i, and
  //   the merge leaves the row undecided); a row the merge decides (best − rest > 2E_i, the rest counting pushed
  //   scores only) has them among its candidates within 3E_i of the best, as before.
  // A lane's own rest alone would let each of the row's four lanes fire on its own quarter of the columns: on N(0, 1)
  // data at d = 64, n = m = 100k, a warp's 64 lists made some lane fire in about half of all tiles (ncu: 22.6 of 32
  // threads active); the quad's largest rest, about a quarter as often. The best − 3E_i floor leaves a row only the
  // scores within 3E_i of its best so far (some 0.6 where its fourth-best lies several units below): a row fires
  // about when it finds a new best.
  float floor_[MT][2];
  float e3[MT][2];
  const float max_q = rb.rows_norm2 != nullptr ? __uint_as_float(rb.maxima[0]) : 0.f;
  const float max_b = rb.rows_norm2 != nullptr ? __uint_as_float(rb.maxima[1]) : 0.f;
  float* const ls = reinterpret_cast<float*>(wg_smem + (WgTileCore<KS, SINGLE, MT, SINGLE>::kSharedBytes + 15) / 16 * 16);
  int* const la = reinterpret_cast<int*>(ls + MT * 2 * (K + 1) * kThreads);
  const auto slot_s = [&](int mt, int hh, int k) -> float& { return ls[((mt * 2 + hh) * (K + 1) + k) * kThreads + threadIdx.x]; };
  const auto slot_a = [&](int mt, int hh, int k) -> int& { return la[((mt * 2 + hh) * K + k) * kThreads + threadIdx.x]; };
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      if constexpr (kShared) {
#pragma unroll
        for (int k = 0; k <= K; ++k) slot_s(mt, hh, k) = -INFINITY;
#pragma unroll
        for (int k = 0; k < K; ++k) slot_a(mt, hh, k) = -1;
      } else {
        list[mt][hh].init();
      }
      floor_[mt][hh] = -INFINITY;
      const int r = block_row0 + Core::subtile_row(mt) + g + hh * 8;
      e3[mt][hh] = rb.rows_norm2 != nullptr && r < nrows
                       ? 3.f * ct::score_bound(rb.bound, rb.s, sqrtf(rb.rows_norm2[r]), max_q, max_b)
                       : INFINITY;
    }
  const int j_begin = split * cols_per_split;
  const int j_end = min(ncols, j_begin + cols_per_split);
  const int tiles = (j_end - j_begin + kMmaTile - 1) / kMmaTile;
  const auto tile_start = [&](int it) { return j_begin + it * kMmaTile; };
  // Columns past j_end are masked by their biases: a split's columns are whole tiles (cols_per_split and j_begin
  // are multiples of kMmaTile in both launches), and the columns past ncols score −∞ (ct_wg_bias_kernel).
  // Subtiles FIRST .. LAST − 1 (the whole tile under WgWait::kWhole or kNextTile, one subtile at a time under
  // kSubtiles). The lane's scores first, then per row their maximum (two independent chains per row) and one test
  // against the row's floor (floor_ above); only a row whose test fires pushes its scores above the floor, column
  // by column in order, and only a warp with a lane that fired refreshes the floors. Before (a test against the
  // lane's own rest and a branch per 8-column group, each waiting for its bias's shared-memory load) the first pass
  // took 6.26 ms under ncu at n = m = 100k, d = 64, and 1.96 ms with no epilogue at all.
  const auto epilogue = [&](float (&sc)[MT][8][4], const float* vt, int, int it, const std::uint8_t*, auto part) {
    constexpr int kFirst = decltype(part)::kFirst, kLast = decltype(part)::kLast;
    float top[MT][2][2];  // (m16 subtile, row g / g + 8, even / odd 8-column group): independent chains
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float2 bb = *reinterpret_cast<const float2*>(&vt[nt * 8 + 2 * t]);
#pragma unroll
      for (int mt = kFirst; mt < kLast; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          sc[mt][nt][2 * hh] = fmaf(alpha, sc[mt][nt][2 * hh], bb.x);
          sc[mt][nt][2 * hh + 1] = fmaf(alpha, sc[mt][nt][2 * hh + 1], bb.y);
          const float m = fmaxf(sc[mt][nt][2 * hh], sc[mt][nt][2 * hh + 1]);
          top[mt][hh][nt % 2] = nt < 2 ? m : fmaxf(top[mt][hh][nt % 2], m);
        }
    }
    bool fire[MT][2];
    bool any = false;
#pragma unroll
    for (int mt = kFirst; mt < kLast; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        fire[mt][hh] = fmaxf(top[mt][hh][0], top[mt][hh][1]) > floor_[mt][hh];
        any |= fire[mt][hh];
      }
    if (!__any_sync(0xffffffffu, any)) return;
    if (any) {
      const int base = tile_start(it) + 2 * t;
#pragma unroll
      for (int mt = kFirst; mt < kLast; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
          if (fire[mt][hh]) {
            if constexpr (kShared) {
              CtList c;
#pragma unroll
              for (int k = 0; k <= K; ++k) c.s[k] = slot_s(mt, hh, k);
#pragma unroll
              for (int k = 0; k < K; ++k) c.a[k] = slot_a(mt, hh, k);
#pragma unroll
              for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                for (int q = 0; q < 2; ++q)
                  if (sc[mt][nt][2 * hh + q] > floor_[mt][hh]) c.push(sc[mt][nt][2 * hh + q], base + nt * 8 + q);
#pragma unroll
              for (int k = 0; k <= K; ++k) slot_s(mt, hh, k) = c.s[k];
#pragma unroll
              for (int k = 0; k < K; ++k) slot_a(mt, hh, k) = c.a[k];
              floor_[mt][hh] = fmaxf(floor_[mt][hh], fmaxf(c.s[K], c.s[0] - e3[mt][hh]));
            } else {
#pragma unroll
              for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                for (int q = 0; q < 2; ++q)
                  if (sc[mt][nt][2 * hh + q] > floor_[mt][hh])
                    list[mt][hh].push(sc[mt][nt][2 * hh + q], base + nt * 8 + q);
              floor_[mt][hh] = fmaxf(floor_[mt][hh], fmaxf(list[mt][hh].s[K], list[mt][hh].s[0] - e3[mt][hh]));
            }
          }
    }
    // Some lane of the warp pushed: every lane takes its quad's largest rest as its rows' floor (warp-uniform).
#pragma unroll
    for (int mt = kFirst; mt < kLast; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        floor_[mt][hh] = fmaxf(floor_[mt][hh], __shfl_xor_sync(0xffffffffu, floor_[mt][hh], 1));
        floor_[mt][hh] = fmaxf(floor_[mt][hh], __shfl_xor_sync(0xffffffffu, floor_[mt][hh], 2));
      }
  };
  // SINGLE with one subtile: the next tile's hi·hi product is issued before this tile's epilogue (run's OVERLAP; the
  // second accumulator fits at 128 registers, 512 threads; ptxas keeps its few spills out of the tile loop). Without
  // it the whole n = m = 100k, d = 64 call took 5.78 ms on the H200 (with the epilogue of a test per 8-column group).
  // Two subtiles with shared lists: subtile 0 is summed while subtile 1's product runs (kSubtiles). The three
  // products: no overlap (a second accumulator with the lists would not fit).
  constexpr WgWait kWait = SINGLE && MT == 1 ? WgWait::kNextTile : kShared ? WgWait::kSubtiles : WgWait::kWhole;
  core.template run<kWait>(wg_smem, cop, tiles, tile_start, epilogue, [](int, int) {});
  // The 4 lanes of a quad share a row: merge their lists.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      CtList c;
      if constexpr (kShared) {
#pragma unroll
        for (int k = 0; k <= K; ++k) c.s[k] = slot_s(mt, hh, k);
#pragma unroll
        for (int k = 0; k < K; ++k) c.a[k] = slot_a(mt, hh, k);
      } else {
        c = list[mt][hh];
      }
#pragma unroll
      for (int offset = 1; offset < 4; offset *= 2) c.merge_lane(offset);
      const int r = block_row0 + Core::subtile_row(mt) + g + hh * 8;
      if (t == 0 && r < nrows) c.store(best, arg, split, nrows, r);
    }
}

template <int KS, int MT, bool SINGLE>
void launch_wg_mt(dim3 grid, cudaStream_t stream, int nrows, const int* count, int slots, const MmaOperands& rop,
                  const MmaOperands& cop, float alpha, int ncols, int per, const CtRowBound& rb,
                  CTransformScratch& sc) {
  launch_kernel<ct_wg_kernel<KS, MT, SINGLE>>(grid, kWgThreads / MT, ct_wg_shared_bytes<KS, MT, SINGLE>(), stream,
                                              nrows, count, slots, rop, cop, alpha, ncols, per, rb, sc.best.get(),
                                              sc.arg.get());
}

/// mt: subtiles per warpgroup (ct_wg_first_subtiles).
template <int KS, bool SINGLE>
void launch_wg_ks(int mt, dim3 grid, cudaStream_t stream, int nrows, const int* count, int slots,
                  const MmaOperands& rop, const MmaOperands& cop, float alpha, int ncols, int per,
                  const CtRowBound& rb, CTransformScratch& sc) {
  if constexpr (SINGLE && KS > 1 && KS <= kCtWgSharedListsMaxKs) {
    if (mt == 2)
      return launch_wg_mt<KS, 2, SINGLE>(grid, stream, nrows, count, slots, rop, cop, alpha, ncols, per, rb, sc);
  }
  launch_wg_mt<KS, wg_subtiles(KS), SINGLE>(grid, stream, nrows, count, slots, rop, cop, alpha, ncols, per, rb, sc);
}

template <bool SINGLE>
void launch_wg(int ks, int mt, dim3 grid, cudaStream_t stream, int nrows, const int* count, int slots,
               const MmaOperands& rop, const MmaOperands& cop, float alpha, int ncols, int per, const CtRowBound& rb,
               CTransformScratch& sc) {
  switch (ks) {
    case 1: launch_wg_ks<1, SINGLE>(mt, grid, stream, nrows, count, slots, rop, cop, alpha, ncols, per, rb, sc); break;
    case 2: launch_wg_ks<2, SINGLE>(mt, grid, stream, nrows, count, slots, rop, cop, alpha, ncols, per, rb, sc); break;
    case 3: launch_wg_ks<3, SINGLE>(mt, grid, stream, nrows, count, slots, rop, cop, alpha, ncols, per, rb, sc); break;
    case 4: launch_wg_ks<4, SINGLE>(mt, grid, stream, nrows, count, slots, rop, cop, alpha, ncols, per, rb, sc); break;
    case 5: launch_wg_ks<5, SINGLE>(mt, grid, stream, nrows, count, slots, rop, cop, alpha, ncols, per, rb, sc); break;
    case 6: launch_wg_ks<6, SINGLE>(mt, grid, stream, nrows, count, slots, rop, cop, alpha, ncols, per, rb, sc); break;
    case 7: launch_wg_ks<7, SINGLE>(mt, grid, stream, nrows, count, slots, rop, cop, alpha, ncols, per, rb, sc); break;
    case 8: launch_wg_ks<8, SINGLE>(mt, grid, stream, nrows, count, slots, rop, cop, alpha, ncols, per, rb, sc); break;
    default:
      throw std::invalid_argument("c_transform: no warpgroup kernel for padded d = " + std::to_string(16 * ks));
  }
  FLASHOT_CUDA_CHECK_LAUNCH();
}

// Two blocks of two subtiles with their shared lists must share an SM (227 KB): four stages of a tile's hi and lo
// halves (the pipeline's layout, lo unused by the hi·hi pass) and 28 KB of lists each. KS = 5 would fit, but ptxas
// then spills the rows' A fragments at 128 registers and waits for every wgmma before the next (as C7514 does).
static_assert(2 * ct_wg_shared_bytes<kCtWgSharedListsMaxKs, 2, true>() <= 227 * 1024,
              "two blocks of the shared-list pass fit an SM");

}  // namespace

bool c_transform_wg_serves(const MmaOperands& rop, const MmaOperands& cop) {
  return c_transform_mma_serves(rop, cop) && cop.warpgroup && cop.tiles != nullptr &&
         rop.padded_d <= 16 * kCtWgMaxKs;
}

int ct_wg_first_subtiles(int padded_d, bool single, int subtiles) {
  const int ks = padded_d / 16;
  return single && subtiles == 2 && ks > 1 && ks <= kCtWgSharedListsMaxKs ? 2 : wg_subtiles(ks);
}

void launch_c_transform_wg(const CTransformSides& sd, const MmaOperands& rop, const MmaOperands& cop,
                           const float* h, float s, int sms, bool single, int subtiles, const ct::ScoreBound& bound,
                           const unsigned* maxima, CTransformScratch& sc, int& splits, cudaStream_t stream) {
  const int ks = rop.padded_d / 16;
  const int mt = ct_wg_first_subtiles(rop.padded_d, single, subtiles);
  const int blocks = div_up(sd.nrows, kWgBlockRows);
  const int tiles = column_tiles(sd.ncols);
  // Whole waves of blocks (mt of them per SM), in whole tiles per split.
  splits = ct_splits(blocks, tiles, mt, sms);
  const int per = div_up(tiles, splits) * kMmaTile;
  splits = div_up(sd.ncols, per);
  sc.best.reserve(std::size_t(splits) * (kCtCand + 1) * sd.nrows);
  sc.arg.reserve(std::size_t(splits) * kCtCand * sd.nrows);
  const int padded = tiles * kMmaTile;
  sc.bias.reserve(padded);
  ct_wg_bias_kernel<<<div_up(padded, 256), 256, 0, stream>>>(h, sd.cols_norm2, s, sd.ncols, padded, sc.bias.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
  MmaOperands columns = cop;
  columns.bias = sc.bias.get();
  // The operands hold scale·p: ⟨p, q⟩ = ⟨P, Q⟩ / (scale_rows·scale_cols).
  const float alpha = 2.f * s / (rop.scale * cop.scale);
  const dim3 grid(blocks, splits);
  const CtRowBound rb{sd.rows_norm2, maxima, s, bound};
  if (single)
    launch_wg<true>(ks, mt, grid, stream, sd.nrows, nullptr, 0, rop, columns, alpha, sd.ncols, per, rb, sc);
  else
    launch_wg<false>(ks, mt, grid, stream, sd.nrows, nullptr, 0, rop, columns, alpha, sd.ncols, per, rb, sc);
}

void reserve_c_transform_wg_listed(const CTransformSides& sd, const MmaOperands& rop, int sms,
                                   CTransformScratch& sc) {
  const int grid = ct_listed_grid(sd.nrows, wg_subtiles(rop.padded_d / 16) * sms, kWgBlockRows);
  // blocks·splits ≤ grid blocks of kWgBlockRows rows each: the lists of every count fit.
  sc.best.reserve(std::size_t(grid) * kWgBlockRows * (kCtCand + 1));
  sc.arg.reserve(std::size_t(grid) * kWgBlockRows * kCtCand);
  sc.hi.reserve(std::size_t(sd.nrows) * rop.padded_d);
  sc.lo.reserve(std::size_t(sd.nrows) * rop.padded_d);
}

void launch_c_transform_wg_listed(const CTransformSides& sd, const MmaOperands& rop, const MmaOperands& cop,
                                  float s, int sms, CTransformScratch& sc, cudaStream_t stream) {
  const int ks = rop.padded_d / 16;
  const int slots = wg_subtiles(ks) * sms;
  const int grid = ct_listed_grid(sd.nrows, slots, kWgBlockRows);
  const std::size_t halves = std::size_t(sd.nrows) * rop.padded_d;
  ct_gather_rows_kernel<<<std::max(1, std::min(4 * sms, div_up(int(std::min<std::size_t>(halves / 2, 1 << 30)), 256))),
                          256, 0, stream>>>(rop.hi, rop.lo, rop.padded_d, sc.list.get(), sc.counters.get(),
                                            sc.hi.get(), sc.lo.get());
  FLASHOT_CUDA_CHECK_LAUNCH();
  MmaOperands rows = rop;
  rows.hi = sc.hi.get();
  rows.lo = sc.lo.get();
  MmaOperands columns = cop;
  columns.bias = sc.bias.get();
  const float alpha = 2.f * s / (rop.scale * cop.scale);
  launch_wg<false>(ks, wg_subtiles(ks), dim3(grid), stream, sd.nrows, sc.counters.get(), slots, rows, columns, alpha,
                   sd.ncols, 0, CtRowBound{}, sc);
}

}  // namespace flashot::detail::cuda
