#pragma once
// Warpgroup (wgmma, sm_90a) kernels of the split operands' sites: their tile pipeline (WgTileCore).
//
// Why: on the H200 the screened mma.sync kernels (lse_mma.cuh, sums_mma.cuh) are bound by L2 → shared-memory traffic,
// not by the tensor cores — every 128-row block streams all column tiles' hi and lo halves (2 × 12.8 MB at n = 100k,
// d = 64: 20 GB per pass, L2 throughput at 90%, tests/bench/wgmma_probe.cu under ncu). These kernels give each column
// tile to 256 rows (four warpgroups, 512 threads, one block per SM; at d <= 16 two warpgroups of 128 rows, 256
// threads, two blocks per SM: WgTileCore's MT, mma_launch.cuh wg_subtiles), which halves the traffic, and take the screen's
// hi·hi product from wgmma (B from shared memory through a descriptor, A from registers), which leaves the issue slots
// of mma.sync to the kept tiles. Each warp decides for its own 16 × 64 tile (a finer grain than the mma.sync kernels'
// 32 × 64), adds the cross products of a kept tile with mma.sync (ldmatrix from the same core matrices) and sums it.
// The dense variants (SCREEN = false) take all three products from wgmma. The per-entry arithmetic, the screen's bound
// (screen_margin, cut) and the site protocol (site_runs, close_site) are those of the mma.sync kernels (mma_site.cuh);
// a screened site is one launch of its site kernel (lse_wg_site_kernel, sums_wg_site_kernel), which runs either body.

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "device_common.cuh"
#include "mma_device.cuh"
#include "mma_launch.cuh"
#include "mma_tile.cuh"
#include "wgmma.cuh"

namespace flashot::detail::cuda {
namespace {

/// The rows' A fragments of one warp (16 rows), the column tiles' staging (hi, lo as interleaved core matrices;
/// biases) in four stages (eight at KS <= 2; past KS = 8 as many as fit 200 KB) filled by bulk copies (run), and
/// the products: SCREEN, the wgmma hi·hi product and, for kept tiles, the
/// mma.sync cross products (rows' lo from shared memory); otherwise (the dense kernels) all three products by
/// wgmma, the rows' lo halves in registers.
///
/// HI_ONLY (SCREEN only; the hard c-transform's cascade, c_transform_wg.cu): the hi·hi product and nothing else, so
/// each tile's bulk copy brings its hi half alone (the stage's lo half stays unwritten) and the rows' lo halves are
/// not loaded: half the L2 → shared-memory traffic of a screened tile.
///
/// MT: m64 subtiles per warpgroup (issue 21). Every block has kWgBlockRows rows (past KS = 8, wg_wide: 128 rows, two
/// warpgroups of one subtile, kBlockRows); with MT = 2 it has half the warps
/// (two warpgroups of 128 rows, each warp 2 × 16 rows: rows mt·64 + (warp % 4)·16 of its warpgroup's 128), so that
/// a lane sums four rows per column before the column transpose-sum and a tile's fixed costs (its arrival, the
/// wgmma fence and wait, the stage count) serve 64 entries per lane instead of 32, and two blocks share an SM.
/// How WgTileCore::run waits for a tile's wgmma products before its epilogue.
enum class WgWait {
  kWhole,     // one group per tile, waited for whole (wait_group 0), then one epilogue of all subtiles
  kNextTile,  // kWhole's, with tile it + 1's group issued before tile it's epilogue: two accumulators (MT = 1)
  // MT = 2: one group per subtile (both issued at once); wait_group 1 → subtile 0's epilogue, while subtile 1's
  // products run on the tensor cores; wait_group 0 → subtile 1's. No second accumulator: the same registers as
  // kWhole, the same products and, for an epilogue that sums each subtile's entries in kWhole's order, the same
  // results bit for bit (CudaTuning::subtile_overlap; docs/engine.md, "Overlapping the subtiles").
  kSubtiles,
  // MT = 2, kSubtiles' groups and epilogues, and tile it + 1's subtile 0 issued as soon as tile it's subtile 0 is
  // summed: subtile 1's epilogue then runs while the next tile's subtile 0 is multiplied. Tiles go in pairs (every
  // group is waited for within the loop's body), so three epilogues of four have products in flight behind them
  // (kSubtiles: one of two). Still no second accumulator: a subtile's registers are written again only after its
  // epilogue (CudaTuning::subtile_overlap = SubtileOverlap::kAcrossTiles).
  kSubtilesAcross,
};

/// The m64 subtiles [FIRST, LAST) whose products one epilogue call of WgTileCore::run may read (the others' may still
/// be in flight): the whole tile (0, MT) under WgWait::kWhole and kNextTile, (0, 1) then (1, 2) under kSubtiles and
/// kSubtilesAcross. A
/// call with FIRST = 0 is a tile's first, one with LAST = MT its last.
template <int FIRST, int LAST>
struct WgSubtiles {
  static constexpr int kFirst = FIRST, kLast = LAST;
};

template <int KS, bool SCREEN, int MT = 1, bool HI_ONLY = false>
struct WgTileCore {
  static_assert(MT == 1 || MT == 2, "one or two m64 subtiles per warpgroup");
  static_assert(SCREEN || !HI_ONLY, "HI_ONLY is the screen's product alone");
  static constexpr bool kRowsLo = SCREEN && !HI_ONLY;                // the rows' lo halves in shared memory
  static constexpr int kThreads = wg_wide(KS) ? wg_threads(KS) : kWgThreads / MT;  // the block's threads
  static constexpr int kBlockRows = wg_block_rows(KS);                // the block's rows (64·MT per warpgroup)
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kChunks = 2 * KS;                              // 16-byte chunks per point
  static constexpr int kArrayBytes = kMmaTile * kChunks * 16;         // one array of one column tile
  static constexpr int kStageBytes = 2 * kArrayBytes + kMmaTile * 4;  // hi, lo, biases
  static constexpr int kRowsLoBytes = kBlockRows * kChunks * 16;      // the block's rows' lo halves
  // Eight stages where a stage is small (KS <= 2: 4.3 / 8.4 KB): a warp may then run up to seven tiles ahead of the
  // block's slowest before it waits for a fetch (ncu, 100k, d = 8: 11 % of the warps' stall samples were that wait
  // with four stages; docs/benchmarks.md "Column slots and eight stages").
  // Past KS = 8 (wg_wide: 48 or 64 KB a stage) as many as fit 200 KB beside the rows' lo halves: 2 screened and 3
  // dense at KS = 16, 3 and 4 at KS = 12.
  static constexpr int kStages = KS <= 2   ? 8
                                 : KS <= 8 ? 4
                                           : (200 * 1024 - (kRowsLo ? kRowsLoBytes : 0)) / kStageBytes;
  static_assert(kStages >= 2, "a pipeline of two stages at least");
  static constexpr int kAcrossChain = 2;  // tiles per chain of WgWait::kSubtilesAcross
  static constexpr int kRowsLoAt = kStages * kStageBytes;              // after the stages (SCREEN)
  static constexpr int kBarriersAt = kRowsLoAt + (kRowsLo ? kRowsLoBytes : 0);  // one shared barrier per stage
  static constexpr int kCopiedBytes = HI_ONLY ? kArrayBytes : 2 * kArrayBytes;  // of a tile's operands, per stage
  static constexpr int kCountersAt = kBarriersAt + 8 * kStages;                // warps done with each stage
  static constexpr int kSharedBytes = kCountersAt + 4 * kStages;
  static_assert(2 * kArrayBytes == int(tile_bytes(16 * KS)), "a stage holds one tile of launch_tile_operands");

  std::uint32_t a_hi[MT][KS][4], a_lo[MT][SCREEN ? 1 : KS][4];

  /// The first of the 16 rows of this warp's subtile mt, relative to the block's first row.
  __device__ __forceinline__ static int subtile_row(int mt) {
    const int warp = threadIdx.x / 32;
    return (warp / 4) * 64 * MT + mt * 64 + (warp % 4) * 16;
  }

  /// This warp's rows (block_row0 + subtile_row(mt) .. + 15 for each subtile) into registers (hi; lo too for the
  /// dense kernels) and, SCREEN, the block's rows' lo halves (kBlockRows rows from block_row0, zeros past count)
  /// into shared memory as core matrices: cp.async, waited for by run() before its first barrier.
  __device__ __forceinline__ void load_rows(std::uint8_t* smem, const MmaOperands& rop, int block_row0, int count) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int ks = 0; ks < KS; ++ks)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int r = block_row0 + subtile_row(mt) + g + (q & 1) * 8, k = ks * 16 + 2 * t + (q >> 1) * 8;
          const std::size_t at = std::size_t(r) * 16 * KS + k;
          a_hi[mt][ks][q] = r < count ? *reinterpret_cast<const std::uint32_t*>(rop.hi + at) : 0u;
          if constexpr (!SCREEN)
            a_lo[mt][ks][q] = r < count ? *reinterpret_cast<const std::uint32_t*>(rop.lo + at) : 0u;
        }
    if constexpr (kRowsLo) {
      constexpr int kQuads = (kChunks + 3) / 4, kUnits = (kBlockRows / 8) * kQuads;
      for (int u = threadIdx.x / 32; u < kUnits; u += kWarps) {
        const int p = (u / kQuads) * 8 + lane % 8, c = (u % kQuads) * 4 + lane / 8, r = block_row0 + p;
        if (c < kChunks)
          copy_async16(smem + kRowsLoAt + wgmma::core_offset(p, c, kChunks),
                       rop.lo + std::size_t(r < count ? r : 0) * 16 * KS + c * 8, r < count);
      }
    }
  }

  /// Issues d = ⟨row, column⟩ of the warpgroup's 64·MT rows × the stage's 64 columns (this warp's 16 rows of
  /// subtile mt in d[mt], in MmaTileCore's (m16, n8, C fragment) layout) as one wgmma group, or, GROUP_PER_SUBTILE,
  /// one group per subtile in subtile order: hi·hi alone (SCREEN), else hi·hi + hi·lo + lo·hi. The products and
  /// their order within a subtile are the same either way.
  template <bool GROUP_PER_SUBTILE = false>
  __device__ __forceinline__ void issue_product(std::uint32_t stage_address, float (&d)[MT][8][4]) const {
    wgmma::fence();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      subtile_products(stage_address, d, mt);
      if constexpr (GROUP_PER_SUBTILE) wgmma::commit();
    }
    if constexpr (!GROUP_PER_SUBTILE) wgmma::commit();
  }

  /// issue_product's products of subtile MTI alone, as one wgmma group (WgWait::kSubtilesAcross).
  template <int MTI>
  __device__ __forceinline__ void issue_subtile(std::uint32_t stage_address, float (&d)[MT][8][4]) const {
    wgmma::fence();
    subtile_products(stage_address, d, MTI);
    wgmma::commit();
  }

  /// The wgmma products of subtile mt (no fence, no commit): hi·hi, then, dense, hi·lo + lo·hi.
  __device__ __forceinline__ void subtile_products(std::uint32_t stage_address, float (&d)[MT][8][4],
                                                   int mt) const {
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
      wgmma::mma_n64(d[mt], a_hi[mt][ks], wgmma::descriptor(stage_address + ks * 256, kChunks), ks > 0);
    if constexpr (!SCREEN) {
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        wgmma::mma_n64(d[mt], a_hi[mt][ks], wgmma::descriptor(stage_address + kArrayBytes + ks * 256, kChunks),
                       true);
        wgmma::mma_n64(d[mt], a_lo[mt][ks], wgmma::descriptor(stage_address + ks * 256, kChunks), true);
      }
    }
  }

  /// d += hi·lo + lo·hi of this warp's 16 rows and the stage's columns: the rows' lo A fragments by ldmatrix from
  /// the block's rows_lo (load_rows), the columns' hi and lo B fragments by one ldmatrix.x4 per (column group, k16
  /// step) from the stage's core matrices.
  __device__ __forceinline__ void add_cross(const std::uint8_t* stage, const std::uint8_t* smem,
                                            float (&d)[MT][8][4]) const {
    const int lane = threadIdx.x % 32, q = lane / 8;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      __syncwarp();  // as in MmaTileCore::add_cross: keeps ptxas from hoisting every step's loads
      // A matrices: rows 0-7 / 8-15 of the subtile (q & 1) × chunk 2ks / 2ks + 1 (q >> 1): a0 .. a3 of m16n8k16.
      std::uint32_t alo[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int a_at = wgmma::core_offset(subtile_row(mt) + (q & 1) * 8 + lane % 8, 2 * ks + (q >> 1), kChunks);
        load_matrices_x4(reinterpret_cast<const std::uint16_t*>(smem + kRowsLoAt + a_at), alo[mt]);
      }
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        // B matrices: hi chunk 2ks, hi chunk 2ks + 1, lo chunk 2ks, lo chunk 2ks + 1 of column group nt.
        std::uint32_t b[4];
        load_matrices_x4(reinterpret_cast<const std::uint16_t*>(
                             stage + (q >> 1) * kArrayBytes +
                             wgmma::core_offset(nt * 8 + lane % 8, 2 * ks + (q & 1), kChunks)),
                         b);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816(d[mt][nt], a_hi[mt][ks], b[2], b[3], false);
          mma_16816(d[mt][nt], alo[mt], b[0], b[1], false);
        }
      }
    }
  }

  /// The loop over this block's column tiles (as MmaTileCore::run_tiles: tile it at tile_start(it), a multiple of
  /// the tile width; the columns ≥ j_end are masked by their biases, −∞ in cop.bias), without block barriers: tile
  /// it lives in stage it % kStages and arrives by two bulk copies (operands, biases) counted on that stage's shared
  /// barrier; each warp waits for it, multiplies (its warpgroup's wgmma, waited for before the epilogue), runs
  /// epilogue(d, vt, stage index, it, stage), and counts itself done with the stage; the last of the block's warps
  /// to do so runs drain(stage index, it) (what the epilogues left in shared memory for that stage) and fetches tile
  /// it + kStages into the stage. So a warpgroup may run up to kStages − 1 tiles ahead of another: one multiplies
  /// while another sums, and a warp with a costly tile (a screened kernel's kept one) delays no other warpgroup.
  /// The epilogue is called as epilogue(d, vt, stage index, it, stage, WgSubtiles<FIRST, LAST>{}) and reads the
  /// products of subtiles FIRST .. LAST − 1 alone: once per tile with (0, MT), or, WAIT = WgWait::kSubtiles or
  /// kSubtilesAcross, once per subtile, in tile order either way. WgWait::kNextTile (dense kernels, and HI_ONLY ones, whose registers hold a second accumulator):
  /// tile it + 1's product is issued before tile it's epilogue.
  template <WgWait WAIT, typename TileStart, typename Epilogue, typename Drain>
  __device__ __forceinline__ void run(std::uint8_t* smem, const MmaOperands& cop, int tiles, TileStart tile_start,
                                      Epilogue epilogue, Drain drain) const {
    constexpr bool OVERLAP = WAIT == WgWait::kNextTile;
    static_assert(!(OVERLAP && kRowsLo), "the screened kernels change their scores on some paths only (kept tiles)");
    static_assert(!(OVERLAP && MT > 1), "two accumulators of two subtiles exceed the registers");
    constexpr bool SPLIT = WAIT == WgWait::kSubtiles || WAIT == WgWait::kSubtilesAcross;
    static_assert(!SPLIT || (MT == 2 && !kRowsLo),
                  "split waits serve two subtiles whose every tile is summed (the screen decides for both at once)");
    asm volatile("cp.async.commit_group;\n" ::: "memory");  // the rows' lo halves (SCREEN, load_rows)
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    if (tiles <= 0) return;
    const std::uint32_t smem_address = wgmma::shared_address(smem);
    const auto barrier_of = [&](int s) { return smem_address + kBarriersAt + 8 * s; };
    int* done = reinterpret_cast<int*>(smem + kCountersAt);
    const std::uint32_t done_address = smem_address + kCountersAt;
    if (threadIdx.x == 0) {
      for (int s = 0; s < kStages; ++s) {
        wgmma::barrier_init(barrier_of(s), 1);
        done[s] = 0;
      }
    }
    __syncthreads();  // the barriers, the counters and every thread's rows
    // One thread: tile it into its stage (the stage's previous tile is done with by every warp).
    const auto fetch = [&](int it) {
      const int j0 = tile_start(it), s = it % kStages;
      const std::uint32_t stage = smem_address + s * kStageBytes, bar = barrier_of(s);
      wgmma::arrive_expect_bytes(bar, kCopiedBytes + kMmaTile * 4);
      wgmma::bulk_copy(stage, cop.tiles + std::size_t(j0 / kMmaTile) * (2 * kArrayBytes), kCopiedBytes, bar);
      wgmma::bulk_copy(stage + 2 * kArrayBytes, cop.bias + j0, kMmaTile * 4, bar);
    };
    if (threadIdx.x == 0)
      for (int it = 0; it < kStages && it < tiles; ++it) fetch(it);
    const auto arrived = [&](int it) { wgmma::barrier_wait(barrier_of(it % kStages), (it / kStages) & 1); };
    // Done with tile it's stage: this warp's reads of it (and its warpgroup's products) are complete, its writes for
    // drain are made visible by the count's release (and acquired by the last warp's count, whose leader's lanes
    // follow it after __syncwarp).
    const auto release = [&](int it) {
      const int s = it % kStages;
      __syncwarp();
      const bool leader = wgmma::elect_one();
      const bool mine = leader && wgmma::count_in(done_address + 4 * s) == kWarps - 1;
      if (__any_sync(0xffffffffu, mine)) {
        __syncwarp();  // the leader's acquire, for every lane's reads in drain
        drain(s, it);
        __syncwarp();
        if (leader) {
          done[s] = 0;  // read again only after tile it + kStages arrives (the fetch's arrival releases this store)
          if (it + kStages < tiles) fetch(it + kStages);
        }
      }
    };
    const auto consume = [&](float (&d)[MT][8][4], int it) {
      const int s = it % kStages;
      const std::uint8_t* stage = smem + s * kStageBytes;
      epilogue(d, reinterpret_cast<const float*>(stage + 2 * kArrayBytes), s, it, stage, WgSubtiles<0, MT>{});
      release(it);
    };
    const auto stage_address = [&](int it) { return smem_address + (it % kStages) * kStageBytes; };
    if constexpr (OVERLAP) {
      // Two accumulators: tile it + 1's product runs on the tensor cores while tile it is summed (FlashAttention-3's
      // intra-warpgroup overlap). Unrolled by two so that they swap roles without moves, and every group is waited
      // for within the body (a group in flight across the back edge makes ptxas serialise every wgmma: C7514).
      // Past the last tile the product reads a stage that no copy writes any more, and its result is not used.
      float da[MT][8][4], db[MT][8][4];
      arrived(0);
      issue_product(stage_address(0), da);
      const auto step = [&](float (&cur)[MT][8][4], float (&next)[MT][8][4], int it) {
        if (it + 1 < tiles) arrived(it + 1);
        issue_product(stage_address(it + 1), next);
        wgmma::wait<1>();  // tile it's product
        wgmma::fence_operands(cur[0]);
        consume(cur, it);
      };
      int it = 0;
      for (; it + 1 < tiles; it += 2) {
        step(da, db, it);
        step(db, da, it + 1);
        wgmma::wait<0>();  // tile it + 2's, issued before tile it + 1's epilogue
        wgmma::fence_operands(da[0]);
      }
      if (it < tiles) step(da, db, it);
      wgmma::wait<0>();
    } else if constexpr (WAIT == WgWait::kSubtiles) {
      // Subtile 0 is summed while subtile 1's products run; both groups are waited for within the body.
      for (int it = 0; it < tiles; ++it) {
        arrived(it);
        float d[MT][8][4];
        issue_product<true>(stage_address(it), d);
        const int s = it % kStages;
        const std::uint8_t* stage = smem + s * kStageBytes;
        const float* vt = reinterpret_cast<const float*>(stage + 2 * kArrayBytes);
        wgmma::wait<1>();  // subtile 0's group
        wgmma::fence_operands(d[0]);
        epilogue(d, vt, s, it, stage, WgSubtiles<0, 1>{});
        wgmma::wait<0>();  // subtile 1's
        wgmma::fence_operands(d[1]);
        epilogue(d, vt, s, it, stage, WgSubtiles<1, 2>{});
        release(it);
      }
    } else if constexpr (WAIT == WgWait::kSubtilesAcross) {
      // Chains of kAcrossChain tiles, every group waited for within a chain (a group in flight across the loop's
      // back edge makes ptxas serialise every wgmma: C7514): tile it + 1's subtile 0 is multiplied during tile it's
      // subtile 1 epilogue, its subtile 1 during its subtile 0 epilogue, so 2·L − 1 epilogues of a chain of L have
      // products behind them (kSubtiles: one of two). The last tiles short of a chain run one at a time, as
      // kSubtiles does.
      float d[MT][8][4];
      const auto sum_subtile = [&](int it, auto part) {
        const int s = it % kStages;
        const std::uint8_t* stage = smem + s * kStageBytes;
        epilogue(d, reinterpret_cast<const float*>(stage + 2 * kArrayBytes), s, it, stage, part);
      };
      const auto chain = [&](int it, auto length) {
        constexpr int L = decltype(length)::value;
        arrived(it);
        issue_product<true>(stage_address(it), d);  // one group per subtile
#pragma unroll
        for (int u = 0; u < L; ++u) {
          wgmma::wait<1>();  // tile it + u's subtile 0
          wgmma::fence_operands(d[0]);
          sum_subtile(it + u, WgSubtiles<0, 1>{});
          if (u + 1 < L) {
            arrived(it + u + 1);
            issue_subtile<0>(stage_address(it + u + 1), d);
            wgmma::wait<1>();  // tile it + u's subtile 1
          } else {
            wgmma::wait<0>();
          }
          wgmma::fence_operands(d[1]);
          sum_subtile(it + u, WgSubtiles<1, 2>{});
          release(it + u);
          if (u + 1 < L) issue_subtile<1>(stage_address(it + u + 1), d);
        }
      };
      int it = 0;
      for (; it + kAcrossChain <= tiles; it += kAcrossChain) chain(it, std::integral_constant<int, kAcrossChain>{});
      for (; it < tiles; ++it) chain(it, std::integral_constant<int, 1>{});
    } else {
      for (int it = 0; it < tiles; ++it) {
        arrived(it);
        float d[MT][8][4];
        issue_product(stage_address(it), d);
        wgmma::wait<0>();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) wgmma::fence_operands(d[mt]);
        consume(d, it);
      }
    }
  }
};

// Every sums instantiation with its static column slots (a row per warp and stage) must fit the 227 KB a Hopper
// block may have — the largest: d = 128, screened (four stages of hi, lo and biases, the rows' lo halves), and
// d = 32 (eight stages, sixteen warps) — and at KS = 1, where two blocks of two subtiles share an SM, twice that
// must fit the SM's 228 KB (1 KB of each block is the driver's).
template <int KS, bool SCREEN, int MT = wg_subtiles(KS)>
constexpr std::size_t wg_slot_bytes() {
  using Core = WgTileCore<KS, SCREEN, MT>;
  return std::size_t(Core::kStages) * Core::kWarps * kMmaTile * sizeof(float);
}
template <int KS, bool SCREEN, int MT = wg_subtiles(KS)>
constexpr std::size_t wg_sums_shared_bytes() {
  return WgTileCore<KS, SCREEN, MT>::kSharedBytes + wg_slot_bytes<KS, SCREEN, MT>();
}
/// A sums site kernel's: the larger body's dynamic shared memory and both bodies' static slots.
template <int KS>
constexpr std::size_t wg_site_shared_bytes() {
  return std::max(WgTileCore<KS, true>::kSharedBytes, WgTileCore<KS, false>::kSharedBytes) +
         wg_slot_bytes<KS, true>() + wg_slot_bytes<KS, false>();
}
static_assert(wg_sums_shared_bytes<8, true>() <= 227 * 1024 && wg_sums_shared_bytes<2, true>() <= 227 * 1024,
              "warpgroup kernels' shared memory exceeds a Hopper block's");
// The wide kernels (KS = 12, 16: as many stages as fit 200 KB, wg_tile's kStages).
static_assert(wg_site_shared_bytes<16>() <= 227 * 1024 && wg_site_shared_bytes<12>() <= 227 * 1024,
              "the wide warpgroup kernels' shared memory exceeds a Hopper block's");
static_assert(2 * (wg_sums_shared_bytes<1, true>() + 1024) <= 228 * 1024,
              "two blocks of the d <= 16 warpgroup kernels exceed a Hopper SM's shared memory");
// The biased sums at KS = 2 (two subtiles, wg_bias_subtiles; dense): two blocks per SM.
static_assert(2 * (wg_sums_shared_bytes<2, false, wg_bias_subtiles(2)>() + 1024) <= 228 * 1024,
              "two blocks of the KS = 2 biased sums exceed a Hopper SM's shared memory");


}  // namespace
}  // namespace flashot::detail::cuda
