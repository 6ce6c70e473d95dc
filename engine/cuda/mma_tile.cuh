#pragma once
// Tensor-core log-sum-exp (d up to 128): the score tile 2⟨x_i, y_j⟩ comes from mma.sync m16n8k16 with fp32
// accumulation; the online max and the exp2 stay in fp32. The default precision splits every coordinate into two
// fp16 terms (x = x_hi + x_lo) and sums x_hi·y_hi + x_hi·y_lo + x_lo·y_hi: 22 bits of mantissa, fp32-class dot
// products at the tensor-core rate. Single-term fp16 / bf16 are the faster, coarser options (Precision::kTf32 /
// kBf16). Coordinates are scaled by a power of two so that fp16 neither overflows nor goes subnormal.
//
// Pipeline (MmaTileCore::run_tiles). A tile costs about as much tensor-core time (64 mma per warp in fp16) as MUFU
// time (64 ex2 per lane), so the loop is software-pipelined as in FlashAttention-3's intra-warp overlap: while the
// scores of column tile t sit in registers, the warp issues the mma of tile t + 1 into a second score array and then
// runs tile t's epilogue (bias FMA, exp2, row and column sums). Both are in one basic block without a barrier, so
// ptxas interleaves HMMA with MUFU.EX2 and the FMAs. Tile t + 2 streams into the shared-memory stage tile t vacated
// (cp.async, two stages); the column biases of tile t + 1 are loaded from global memory during tile t's math and
// stored to a second vtile buffer; the sums kernel's per-warp column sums are double-buffered too, so each tile
// costs one __syncthreads instead of two (LSE) or three (sums). The per-entry arithmetic and the order of every sum
// are unchanged. The second score array costs up to 64 registers (fewer resident blocks for some instantiations);
// the split operands beyond d = 64 would spill, and the single-product (fp16/bf16) ones lost more occupancy than the
// overlap gained (measured on the H200), so those run the same loop with one score array: the products of tile t
// right before its epilogue, tile t + 1 streaming in meanwhile. B fragments come from
// ldmatrix.x4 (two k16 steps per instruction) where that still fits, 32-bit shared loads elsewhere (overlap_fits,
// ldmatrix_pairs).
//
// The warpgroup (wgmma) kernels that replace these on Hopper for the split operands are in wg_tile.cuh; where each
// kernel lives: docs/engine.md, "Where the kernels live".

#include <cstdint>

#include "device_common.cuh"
#include "mma_device.cuh"
#include "mma_launch.cuh"

namespace flashot::detail::cuda {
namespace {

/// Loads four 8×8 b16 matrices from shared memory (ldmatrix .x4): lane L gives the address of row L % 8 of matrix
/// L / 8, and register q of lane (g, t) = (L / 4, L % 4) receives row g, elements 2t and 2t + 1 of matrix q — the
/// B-fragment layout of m16n8k16 when a matrix row is one column point's 8 consecutive coordinates.
__device__ __forceinline__ void load_matrices_x4(const std::uint16_t* row, std::uint32_t (&r)[4]) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

/// The pipeline of one instantiation, from ptxas -v and the SASS (CUDA 13.0, sm_90, __launch_bounds__(128)):
/// overlapped where its two live score arrays (2 × 64 registers, beside 8·KS registers of A fragments per operand
/// array) fit without spills and pay for the lost occupancy, i.e. the split (default) ones up to d = 64;
/// sequential otherwise. ldmatrix pairs (a quarter of the B-fragment loads) where ptxas still fits them and
/// interleaves HMMA with MUFU.EX2; elsewhere they made it spill, or schedule the whole epilogue before the products.
template <int KS, int TERMS>
constexpr bool overlap_fits() {
  // One fp16/bf16 product: the second score array cost more occupancy than the overlap gained (H200, d = 64:
  // 98.0 → 110.9 ms for 10 cold iterations overlapped, 95.4 ms not; docs/benchmarks.md).
  return TERMS == 3 && KS <= 4;
}

template <int KS, int TERMS, bool LSE>
constexpr bool ldmatrix_pairs() {
  return TERMS == 1 && KS <= (LSE ? 7 : 5);
}

/// The operands of one warp's 32 rows and the double-buffered column tiles, shared by the LSE and the one-pass sums
/// kernels. KS = padded d / 16; TERMS = 1 (one operand type) or 3 (hi·hi + hi·lo + lo·hi). LO_REGS = false (the
/// screened kernels, which rarely need them): the rows' lo halves stay in global memory (L2), not in registers, and
/// add_cross reads them when a tile is kept.
template <int KS, int TERMS, bool BF16, bool LO_REGS = true>
struct MmaTileCore {
  static constexpr int DP = 16 * KS;      // padded dimension (halves per point)
  static constexpr int kStride = DP + 8;  // halves per shared row: an odd number of 16-byte units, so the 8 rows
                                          // of one ldmatrix phase fall in 8 distinct bank groups
  static constexpr bool kLoInRegs = TERMS == 3 && LO_REGS;
  static constexpr int kArrays = TERMS == 3 ? 2 : 1;
  static constexpr int kStage = kArrays * kMmaTile * kStride;  // halves per pipeline stage

  // A fragments of this warp's 32 rows, kept in registers for the whole column range: (2 m16, KS k16, 4 regs).
  std::uint32_t a_hi[2][KS][4], a_lo[kLoInRegs ? 2 : 1][kLoInRegs ? KS : 1][4];

  __device__ __forceinline__ void load_rows(const MmaOperands& rop, int row0, int count) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int ks = 0; ks < KS; ++ks)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int r = row0 + mt * 16 + g + (q & 1) * 8;
          const int k = ks * 16 + 2 * t + (q >> 1) * 8;
          const bool ok = r < count;
          a_hi[mt][ks][q] = ok ? *reinterpret_cast<const std::uint32_t*>(rop.hi + std::size_t(r) * DP + k) : 0u;
          if constexpr (kLoInRegs)
            a_lo[mt][ks][q] = ok ? *reinterpret_cast<const std::uint32_t*>(rop.lo + std::size_t(r) * DP + k) : 0u;
        }
  }

  /// Starts the asynchronous copy of columns [j0, j0 + BN) ∩ [.., j_end) into `stage` (zeros beyond j_end).
  static __device__ __forceinline__ void load_tile(std::uint16_t* smem, const MmaOperands& cop, int stage, int j0,
                                                   int j_end) {
    constexpr int kVecs = kMmaTile * DP / 8;  // 16-byte vectors per array
    std::uint16_t* base = smem + stage * kStage;
    for (int e = threadIdx.x; e < kVecs; e += kMmaThreads) {
      const int c = e / (DP / 8), k8 = e % (DP / 8), j = j0 + c;
      const bool ok = j < j_end;
      const std::size_t src = std::size_t(ok ? j : 0) * DP + k8 * 8;
      copy_async16(base + c * kStride + k8 * 8, cop.hi + src, ok);
      if constexpr (TERMS == 3) copy_async16(base + kMmaTile * kStride + c * kStride + k8 * 8, cop.lo + src, ok);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  }

  /// The B fragments of n8 subtile nt, k16 steps ks and ks + 1, of one array of a stage: b[2·(s − ks) + h] holds
  /// coordinates s·16 + h·8 + 2t and + 1 of column point nt·8 + g (matrix m = lane / 8 starts at k = ks·16 + m·8).
  static __device__ __forceinline__ void load_b_pair(const std::uint16_t* array, int nt, int ks,
                                                     std::uint32_t (&b)[4]) {
    const int lane = threadIdx.x % 32, m = lane / 8;
    load_matrices_x4(array + (nt * 8 + lane % 8) * kStride + ks * 16 + (m >> 1) * 16 + (m & 1) * 8, b);
  }

  /// The products of k16 step ks into C fragments s[·][nt]: hi·hi, then hi·lo and lo·hi for split operands whose
  /// lo halves are resident (the screened kernels' hi·hi alone; add_cross is their second half).
  __device__ __forceinline__ void mma_step(float (&s)[2][8][4], int nt, int ks, std::uint32_t b0, std::uint32_t b1,
                                           std::uint32_t l0, std::uint32_t l1) const {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) mma_16816(s[mt][nt], a_hi[mt][ks], b0, b1, BF16);
    if constexpr (kLoInRegs) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        mma_16816(s[mt][nt], a_hi[mt][ks], l0, l1, BF16);
        mma_16816(s[mt][nt], a_lo[mt][ks], b0, b1, BF16);
      }
    }
  }

  /// s = ⟨row, column⟩ (scaled operands) of the warp's 32 × 64 tile: (m16, n8, C fragment), with mma_step's products.
  /// PAIRS loads the B fragments of two k16 steps per ldmatrix (a quarter of the shared loads, more live
  /// registers); otherwise two 32-bit loads per k16 step and array.
  template <bool PAIRS>
  __device__ __forceinline__ void scores(const std::uint16_t* stage_base, float (&s)[2][8][4]) const {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const std::uint16_t* ytile_hi = stage_base;
    const std::uint16_t* ytile_lo = stage_base + kMmaTile * kStride;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int q = 0; q < 4; ++q) s[mt][nt][q] = 0.f;
      constexpr int kPaired = PAIRS ? KS / 2 * 2 : 0;  // k16 steps loaded two at a time
#pragma unroll
      for (int ks = 0; ks < kPaired; ks += 2) {
        std::uint32_t b[4], l[4] = {0u, 0u, 0u, 0u};
        load_b_pair(ytile_hi, nt, ks, b);
        if constexpr (kLoInRegs) load_b_pair(ytile_lo, nt, ks, l);
        mma_step(s, nt, ks, b[0], b[1], l[0], l[1]);
        mma_step(s, nt, ks + 1, b[2], b[3], l[2], l[3]);
      }
#pragma unroll
      for (int ks = kPaired; ks < KS; ++ks) {
        const int o = (nt * 8 + g) * kStride + ks * 16 + 2 * t;
        const std::uint32_t b0 = *reinterpret_cast<const std::uint32_t*>(&ytile_hi[o]);
        const std::uint32_t b1 = *reinterpret_cast<const std::uint32_t*>(&ytile_hi[o + 8]);
        std::uint32_t l0 = 0u, l1 = 0u;
        if constexpr (kLoInRegs) {
          l0 = *reinterpret_cast<const std::uint32_t*>(&ytile_lo[o]);
          l1 = *reinterpret_cast<const std::uint32_t*>(&ytile_lo[o + 8]);
        }
        mma_step(s, nt, ks, b0, b1, l0, l1);
      }
    }
  }

  /// s += hi·lo + lo·hi of the tile in `stage_base` (after scores<·, kHi>), for split operands whose rows' lo halves
  /// are not in registers (LO_REGS = false): those (rows lo from row0, count rows) are read from global memory one
  /// k16 step at a time; the columns' come from the stage.
  __device__ __forceinline__ void add_cross(const std::uint16_t* stage_base, const std::uint16_t* rows_lo, int row0,
                                            int count, float (&s)[2][8][4]) const {
    static_assert(TERMS == 3 && !LO_REGS, "cross products on demand need split operands with lo in global memory");
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const std::uint16_t* ytile_hi = stage_base;
    const std::uint16_t* ytile_lo = stage_base + kMmaTile * kStride;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      // Keeps ptxas from hoisting every step's loads to the top (240+ registers, two blocks per SM instead of
      // three, for a path that runs on a minority of the tiles).
      __syncwarp();
      std::uint32_t alo[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int r = row0 + mt * 16 + g + (q & 1) * 8;
          const int k = ks * 16 + 2 * t + (q >> 1) * 8;
          alo[mt][q] = r < count ? *reinterpret_cast<const std::uint32_t*>(rows_lo + std::size_t(r) * DP + k) : 0u;
        }
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int o = (nt * 8 + g) * kStride + ks * 16 + 2 * t;
        const std::uint32_t b0 = *reinterpret_cast<const std::uint32_t*>(&ytile_hi[o]);
        const std::uint32_t b1 = *reinterpret_cast<const std::uint32_t*>(&ytile_hi[o + 8]);
        const std::uint32_t l0 = *reinterpret_cast<const std::uint32_t*>(&ytile_lo[o]);
        const std::uint32_t l1 = *reinterpret_cast<const std::uint32_t*>(&ytile_lo[o + 8]);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_16816(s[mt][nt], a_hi[mt][ks], l0, l1, BF16);
          mma_16816(s[mt][nt], alo[mt], b0, b1, BF16);
        }
      }
    }
  }

  /// The pipeline over this block's column tiles it = 0 .. tiles − 1 (tile it starts at column tile_start(it);
  /// columns ≥ j_end are masked; bias_at(j) is column j's bias). epilogue(s, vt, parity, it, stage) consumes the
  /// scores s of tile it with its biases vt[0, BN) (stage: the tile's shared-memory operands, which the epilogue may
  /// read only without OVERLAP — the screened kernels add their cross products from it); after the tile's barrier,
  /// drain(parity, it) may read what that epilogue wrote to shared memory (buffers indexed by parity = it % 2 are
  /// rewritten two tiles later, after a barrier).
  ///
  /// OVERLAP: step it holds the scores of tile it, computes those of tile it + 1 into the other array, then runs
  /// the epilogue of tile it. Stage it % 2 holds tile it; tile it + 2 is copied into it during step it (tile it
  /// was read in step it − 1, before that step's barrier) and waited for before step it's barrier. Without
  /// OVERLAP: one array; tile it + 1 is copied into stage (it + 1) % 2 while tile it is multiplied and consumed.
  /// Either way vtile[p] (biases of tile it, p = it % 2; 128 entries, so that every thread stores without a
  /// branch) is written before the barrier that precedes its reader, and after the barrier that follows the
  /// previous reader of the same buffer. PAIRS: the overlapped loop's scores use ldmatrix pairs.
  template <bool OVERLAP, bool PAIRS, typename TileStart, typename Bias, typename Epilogue, typename Drain>
  __device__ __forceinline__ void run_tiles(std::uint16_t* smem, float (&vtile)[2][kMmaThreads],
                                            const MmaOperands& cop, int tiles, int j_end, TileStart tile_start,
                                            Bias bias_at, Epilogue epilogue, Drain drain) const {
    if (tiles <= 0) return;
    const int c = threadIdx.x % kMmaTile;
    // Column c's bias of tile it (with OVERLAP, loaded at the start of step it − 1 and stored at its end).
    const auto bias_of = [&](int it) {
      const int j = tile_start(it) + c;
      const float b = bias_at(min(j, j_end - 1));
      return j < j_end ? b : -INFINITY;
    };
    if constexpr (!OVERLAP) {
      // One score array: tile it + 1 streams in while tile it's products and epilogue run back to back.
      load_tile(smem, cop, 0, tile_start(0), j_end);
      vtile[0][threadIdx.x] = bias_of(0);
      asm volatile("cp.async.wait_group 0;\n" ::);
      __syncthreads();
      for (int it = 0; it < tiles; ++it) {
        const int parity = it & 1;
        if (it + 1 < tiles) load_tile(smem, cop, parity ^ 1, tile_start(it + 1), j_end);
        float s[2][8][4];
        const std::uint16_t* stage = smem + parity * kStage;
        scores<false>(stage, s);
        epilogue(s, vtile[parity], parity, it, stage);
        vtile[parity ^ 1][threadIdx.x] = bias_of(it + 1);
        asm volatile("cp.async.wait_group 0;\n" ::);  // tile it + 1
        __syncthreads();
        drain(parity, it);
      }
      return;
    }
    const auto step = [&](float (&s)[2][8][4], float (&s_next)[2][8][4], int it, int parity) {
      if (it + 2 < tiles) load_tile(smem, cop, parity, tile_start(it + 2), j_end);
      const float next_bias = bias_of(it + 1);
      scores<PAIRS>(smem + (parity ^ 1) * kStage, s_next);
      epilogue(s, vtile[parity], parity, it, nullptr);
      vtile[parity ^ 1][threadIdx.x] = next_bias;
      asm volatile("cp.async.wait_group 0;\n" ::);  // tile it + 2, read by the next step
      __syncthreads();
      drain(parity, it);
    };
    const auto finish = [&](float (&s)[2][8][4], int it, int parity) {
      epilogue(s, vtile[parity], parity, it, nullptr);
      __syncthreads();
      drain(parity, it);
    };

    load_tile(smem, cop, 0, tile_start(0), j_end);
    if (tiles > 1) load_tile(smem, cop, 1, tile_start(1), j_end);
    vtile[0][threadIdx.x] = bias_of(0);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    float sa[2][8][4], sb[2][8][4];
    scores<PAIRS>(smem, sa);
    __syncthreads();  // step 0 refills stage 0
    // Unrolled by two so that the score arrays swap roles without register moves.
    int it = 0;
    for (; it + 1 < tiles; it += 2) {
      step(sa, sb, it, 0);
      if (it + 2 == tiles) {
        finish(sb, it + 1, 1);
        return;
      }
      step(sb, sa, it + 1, 1);
    }
    finish(sa, it, 0);  // tiles is odd: it = tiles − 1
  }

  /// run_tiles as a kernel of a screened site runs it (LSE: the log-sum-exp kernel, else the sums kernel): the
  /// screened kernel one product per tile, nothing overlapped (its epilogue adds the cross products of kept
  /// tiles); the dense one with this instantiation's pipeline.
  template <bool SCREEN, bool LSE, typename TileStart, typename Bias, typename Epilogue, typename Drain>
  __device__ __forceinline__ void run_site_tiles(std::uint16_t* smem, float (&vtile)[2][kMmaThreads],
                                                 const MmaOperands& cop, int tiles, int j_end, TileStart tile_start,
                                                 Bias bias_at, Epilogue epilogue, Drain drain) const {
    if constexpr (SCREEN) {
      run_tiles<false, false>(smem, vtile, cop, tiles, j_end, tile_start, bias_at, epilogue, drain);
    } else {
      run_tiles<overlap_fits<KS, TERMS>(), ldmatrix_pairs<KS, TERMS, LSE>()>(
          smem, vtile, cop, tiles, j_end, tile_start, bias_at, epilogue, drain);
    }
  }
};

}  // namespace
}  // namespace flashot::detail::cuda
