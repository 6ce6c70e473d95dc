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
// On Hopper (an sm_90a build on an sm_90 device) the split operands' sites run the warpgroup kernels further down
// (lse_wg_kernel, sums_wg_kernel: wgmma, 256 rows per block; their section's comment says why); the kernels above
// serve every other GPU, the single-product precisions and FLASHOT_WGMMA=0.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "device_common.cuh"
#include "error.hpp"
#include "mma.cuh"
#include "mma_device.cuh"
#include "wgmma.cuh"

namespace flashot::detail::cuda {
namespace {

constexpr int kMmaThreads = 128;                   // 4 warps
constexpr int kWarpRows = 32;                      // two m16 subtiles per warp
constexpr int kMmaBlockRows = 4 * kWarpRows;       // (BM) 128
constexpr int kMmaTile = 64;                       // (BN) columns per shared-memory tile: eight n8 subtiles

/// Dynamic shared memory of one kernel instantiation: two stages of the column tile (hi and lo arrays for split
/// operands, screened or not).
constexpr int mma_shared_bytes(int ks, int terms) {
  return 2 * (terms == 3 ? 2 : 1) * kMmaTile * (16 * ks + 8) * 2;
}

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


/// The sum of v over the four lanes that hold one row of an mma C fragment (lanes 4g .. 4g + 3), on each of them.
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/// The screen of a warp's tile (MT m16 subtiles × 64 columns) from its hi·hi scores s: whether some entry reaches
/// its row's floor, α·s + v_j ≥ floor (cut, margin included, is already in the floor; NaN counts as reaching).
/// Warp-uniform.
template <int MT>
__device__ __forceinline__ bool screen_keeps(const float (&s)[MT][8][4], const float* vt, float alpha,
                                             const float (&floor)[MT][2]) {
  const int t = threadIdx.x % 4;
  float top[MT][2];  // (m16, row g / g + 8)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) top[mt][0] = top[mt][1] = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const float2 b2 = *reinterpret_cast<const float2*>(&vt[nt * 8 + 2 * t]);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        top[mt][hh] = fmaxf(top[mt][hh], fmaf(alpha, s[mt][nt][2 * hh], b2.x));
        top[mt][hh] = fmaxf(top[mt][hh], fmaf(alpha, s[mt][nt][2 * hh + 1], b2.y));
      }
  }
  bool near = false;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) near |= !(top[mt][hh] < floor[mt][hh]);
  return __any_sync(0xffffffffu, near);
}

/// The one-pass step's entries of a warp's tile (MT m16 subtiles × 64 columns, this lane's rows g, g + 8 of each):
/// E = exp2(α·s + v_j + u) per entry, added to the rows' sums rs and, weighted by the rows' a, to this lane's column
/// sums col[2·nt + q] (columns nt·8 + 2t + q).
template <int MT>
__device__ __forceinline__ void add_entries(const float (&s)[MT][8][4], const float* vt, float alpha,
                                            const float (&u)[MT][2], const float (&a)[MT][2], float (&rs)[MT][2],
                                            float (&col)[16]) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const float2 b2 = *reinterpret_cast<const float2*>(&vt[nt * 8 + 2 * t]);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float p0 = fmaf(alpha, s[mt][nt][2 * hh], b2.x + u[mt][hh]);
        const float p1 = fmaf(alpha, s[mt][nt][2 * hh + 1], b2.y + u[mt][hh]);
        const float e0 = fast_exp2(p0), e1 = fast_exp2(p1);
        rs[mt][hh] += e0 + e1;
        col[2 * nt] = fmaf(a[mt][hh], e0, col[2 * nt]);
        col[2 * nt + 1] = fmaf(a[mt][hh], e1, col[2 * nt + 1]);
      }
  }
}

/// Warp tiles kept / looked at by one warp of a screened site (lane-uniform: every count follows a warp vote).
struct TileCounts {
  unsigned kept = 0, seen = 0;
  __device__ __forceinline__ void add(bool kept_tile) {
    ++seen;
    kept += kept_tile ? 1u : 0u;
  }
};

/// Whether a block of the SCREEN (or dense) kernel of a site runs: without a state only the dense kernel exists;
/// with one, the kernel that `use` names. `use` changes only in the dense launch's last block, after every block
/// of that launch has read it, and the screened launch of a pair always precedes the dense one.
template <bool SCREEN>
__device__ __forceinline__ bool site_runs(const ScreenState* st) {
  if (st == nullptr) return !SCREEN;
  return (*reinterpret_cast<const volatile int*>(&st->use) != 0) == SCREEN;
}

/// End of every block of a screened site's kernels: the screened launch's warps add their counts; the dense
/// launch's last block (whichever kernel ran) chooses the kernel of the next launch. After a screened launch: keep
/// screening while at most pays_percent of the warp tiles were kept — and, at an LSE site, once more after a first
/// launch that kept at most three quarters, whose seeds were column 0 — else run dense for `backoff` launches (8,
/// doubling up to kProbeMost while the screen keeps not paying) and then screen once again to re-measure (the plan
/// sharpens as ε falls). A state with siblings (the rows' LSE, the first site a cold solve screens) that decides
/// against its screen sends those that have not screened yet straight to dense as well (at n = 10k, d = 64 each
/// screened launch that keeps 60% of its tiles costs ≈ 50 µs more than the dense one). The dense kernels count
/// nothing: their running max is not seeded, so their count would not predict the screened kernel's.
inline constexpr int kProbeAfter = 8, kProbeMost = 64;

template <bool SCREEN>
__device__ __forceinline__ void close_site(ScreenState* st, bool ran, const TileCounts& counts) {
  if (st == nullptr) return;
  if (SCREEN && ran && threadIdx.x % 32 == 0 && counts.seen > 0) {
    atomicAdd(&st->kept, static_cast<unsigned long long>(counts.kept));
    atomicAdd(&st->seen, static_cast<unsigned long long>(counts.seen));
    __threadfence();  // before the block's end count (a site kernel decides in the same launch)
  }
  if constexpr (!SCREEN) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      if (atomicAdd(&st->done, 1u) == gridDim.x * gridDim.y - 1) {
        __threadfence();
        const unsigned long long kept = atomicAdd(&st->kept, 0ull), seen = atomicAdd(&st->seen, 0ull);
        st->last_low = seen > 0 && st->paid != 0 ? 1 : 0;  // the cut this launch's blocks read (paid changes here)
        if (st->pinned == 0) {
          if (seen > 0) {  // the screened kernel ran
            ++st->screened_runs;
            // The first launch's seeds were column 0, so it may keep more than the next would; but one that kept
            // over three quarters of its tiles is dense enough not to be tried again at once (n = 10k, d = 64).
            const bool pays = 100 * kept <= static_cast<unsigned long long>(st->pays_percent) * seen ||
                              (st->seeded != 0 && st->screened_runs == 1 && 4 * kept <= 3 * seen);
            st->use = pays ? 1 : 0;
            st->paid = pays ? 1 : 0;
            if (pays) {
              st->dense_left = 0;
              st->backoff = kProbeAfter;
            } else {
              st->dense_left = st->backoff;
              st->backoff = min(2 * st->backoff, kProbeMost);
              for (int k = 1; k <= st->siblings; ++k) {
                if (st[k].pinned == 0 && st[k].screened_runs == 0) {
                  st[k].use = 0;
                  st[k].dense_left = kProbeAfter;
                  st[k].next_low = 0;
                }
              }
            }
          } else if (st->use == 0 && --st->dense_left <= 0) {
            st->use = 1;
          }
        }
        st->next_low = st->use != 0 && st->paid != 0 ? 1 : 0;
        st->kept_total += kept;
        st->seen_total += seen;
        st->kept = 0;
        st->seen = 0;
        st->done = 0;
      }
    }
  }
}

/// The screened LSE's first running max of row r (lse_mma_kernel has the reasons): the score of column seeds[r], the
/// best column a screened pass last found for the row (any column is valid; 0 at first), by an fp32 dot product over
/// the row's quad of lanes, less one for the rounding between it and the tensor cores'.
__device__ __forceinline__ float seeded_max(const PointSet& rows, const PointSet& cols, const float* h,
                                            const Scale& sc, const int* seeds, int r, int t) {
  const int j = r < rows.count ? min(max(seeds[r], 0), cols.count - 1) : 0;
  float dot = 0.f;
  if (r < rows.count)
    for (int k = t; k < sc.d; k += 4)
      dot = fmaf(rows.points[std::size_t(r) * sc.d + k], cols.points[std::size_t(j) * sc.d + k], dot);
  dot += __shfl_xor_sync(0xffffffffu, dot, 1);
  dot += __shfl_xor_sync(0xffffffffu, dot, 2);
  return fmaxf(fmaf(sc.alpha, dot, column_bias(cols, h, sc, j)) - 1.f, kNoMax);
}

/// One online log-sum-exp step of a row held by a quad of lanes: top is this lane's max of the tile's 16 scores
/// value(0 .. 15); the quad's max rescales the running sum, then the exponentials are added.
template <typename Value>
__device__ __forceinline__ void online_lse_row(float top, Value value, float& run_max, float& run_sum) {
  top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
  top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
  if (top > run_max) {
    run_sum *= fast_exp2(run_max - top);
    run_max = top;
  }
  float sum = 0.f;
#pragma unroll
  for (int e = 0; e < 16; ++e) sum += fast_exp2(value(e) - run_max);
  run_sum += sum;
}

/// The row's best column for the next pass, from the quad's (score, column) pairs, stored by lane t = 0. Column
/// splits of one row race to store theirs: whichever lands, it is a column of that row, which is all a seed must be.
__device__ __forceinline__ void store_seed(float b, int c, int r, int count, int t, int* seeds) {
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, b, off);
    const int oc = __shfl_xor_sync(0xffffffffu, c, off);
    if (ob > b) b = ob, c = oc;
  }
  if (t == 0 && r < count && c >= 0) seeds[r] = c;
}

/// SCREEN (split operands only): each tile's scores start as hi·hi alone; a warp keeps the tile — adds the cross
/// products and sums it — only if some entry, raised by the hi·hi error bound, reaches within `cut` (log2 units) of
/// its row's running max (so a dropped tile adds less than 2^-cut of the max per entry; ScreenState). The dense
/// kernel of a screened site counts nothing (close_site).
template <int KS, int TERMS, bool BF16, bool SCREEN>
__global__ void __launch_bounds__(kMmaThreads) lse_mma_kernel(PointSet rows, PointSet cols, MmaOperands rop,
                                                              MmaOperands cop, const float* __restrict__ h,
                                                              Scale sc, float alpha, int cols_per_split,
                                                              float2* __restrict__ partials, const int* guard,
                                                              int* seeds, ScreenState* screen, float cut) {
  static_assert(!SCREEN || TERMS == 3, "only split operands are screened");
  if (guard != nullptr && *guard == 0) return;
  using Core = MmaTileCore<KS, TERMS, BF16, !SCREEN>;
  extern __shared__ __align__(16) std::uint16_t smem[];  // (2 stages, arrays, BN, DP + 8)
  __shared__ __align__(8) float vtile[2][kMmaThreads];  // (2 tiles, BN used of 128) column biases
  const bool runs = site_runs<SCREEN>(screen);
  TileCounts counts;
  if (runs) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int row0 = blockIdx.x * kMmaBlockRows + warp * kWarpRows;
    Core core;
    core.load_rows(rop, row0, rows.count);

    float run_max[2][2], run_sum[2][2];  // (m16 subtile, row g / g+8)
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) run_max[mt][hh] = kNoMax, run_sum[mt][hh] = 0.f;
    // Screened: each row's running max starts at an actual entry of its row (seeded_max). Without it the first
    // tiles would set the max, and a warp would keep every tile in which one of its 32 rows meets a new near-maximum.
    float best[2][2];  // (m16, row) best score among the kept tiles, and its column
    int best_col[2][2];
    if constexpr (SCREEN) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          best[mt][hh] = -INFINITY;
          best_col[mt][hh] = -1;
          run_max[mt][hh] = seeded_max(rows, cols, h, sc, seeds, row0 + mt * 16 + g + hh * 8, t);
        }
    }

    const int j_begin = blockIdx.y * cols_per_split;
    const int j_end = min(cols.count, j_begin + cols_per_split);
    const int tiles = (j_end - j_begin + kMmaTile - 1) / kMmaTile;
    const auto tile_start = [&](int it) { return j_begin + it * kMmaTile; };
    const auto bias_at = [&](int j) { return column_bias(cols, h, sc, j); };
    // Online log-sum-exp of rows g and g + 8 of each m16 subtile; the 4 lanes of a row share its max.
    const auto epilogue = [&](float (&s)[2][8][4], const float* vt, int, int it, const std::uint16_t* stage) {
      if constexpr (SCREEN) {
        float floor[2][2];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) floor[mt][hh] = run_max[mt][hh] - cut;
        const bool keep = screen_keeps(s, vt, alpha, floor);
        counts.add(keep);
        if (!keep) return;
        core.add_cross(stage, rop.lo, row0, rows.count, s);
      }
      // Scores v = α·s + v_j in place, then per row the tile's max, the rescaled running sum, the exponentials.
      // Screened: the biases are read per n8 subtile (all 16 held beside the cross products' operands cost that
      // kernel 40 registers: 208 instead of 168, two blocks per SM instead of three).
      float bias[SCREEN ? 1 : 8][2];  // (n8, 2) this lane's columns nt·8 + 2t + q
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const float2 b2 = *reinterpret_cast<const float2*>(&vt[nt * 8 + 2 * t]);
        if constexpr (SCREEN) {
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              s[mt][nt][2 * hh] = fmaf(alpha, s[mt][nt][2 * hh], b2.x);
              s[mt][nt][2 * hh + 1] = fmaf(alpha, s[mt][nt][2 * hh + 1], b2.y);
            }
        } else {
          bias[nt][0] = b2.x;
          bias[nt][1] = b2.y;
        }
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float top = kNoMax;
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              float v = s[mt][nt][2 * hh + q];
              if constexpr (SCREEN) {
                if (v > best[mt][hh]) best[mt][hh] = v, best_col[mt][hh] = tile_start(it) + nt * 8 + 2 * t + q;
              } else {
                v = fmaf(alpha, v, bias[nt][q]);
                s[mt][nt][2 * hh + q] = v;
              }
              top = fmaxf(top, v);
            }
          online_lse_row(
              top, [&](int e) { return s[mt][e / 2][2 * hh + e % 2]; }, run_max[mt][hh], run_sum[mt][hh]);
        }
    };
    core.template run_site_tiles<SCREEN, true>(smem, vtile, cop, tiles, j_end, tile_start, bias_at, epilogue,
                                               [](int, int) {});
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float sum = quad_sum(run_sum[mt][hh]);
        const int r = row0 + mt * 16 + g + hh * 8;
        if (t == 0 && r < rows.count)
          partials[std::size_t(blockIdx.y) * rows.count + r] = make_float2(run_max[mt][hh], sum);
        if constexpr (SCREEN) store_seed(best[mt][hh], best_col[mt][hh], r, rows.count, t, seeds);
      }
  }
  close_site<SCREEN>(screen, runs, counts);
}

/// One halving step of the column transpose-sum: of v[0, 2W) a lane keeps the upper half when `upper`, the lower
/// half otherwise, and adds the partner's copy (partner = lane ^ XOR). W is a template parameter so that every
/// index is a constant.
template <int W, int XOR>
__device__ __forceinline__ void column_halving(float (&v)[16], bool upper) {
#pragma unroll
  for (int k = 0; k < W; ++k) {
    const float lo = v[k], hi = v[k + W];
    v[k] = (upper ? hi : lo) + __shfl_xor_sync(0xffffffffu, upper ? lo : hi, XOR);
  }
}

/// The warp's column sums of one tile: the 8 lanes g = 0..7 with the same t hold partial sums of the same 16 columns;
/// halving over lane bits 4, 3, 2 leaves lane (g, t) with the totals of columns g·8 + 2t + {0, 1} in col[0], col[1].
__device__ __forceinline__ void total_column_sums(float (&col)[16]) {
  const int lane = threadIdx.x % 32;
  column_halving<8, 16>(col, lane & 16);
  column_halving<4, 8>(col, lane & 8);
  column_halving<2, 4>(col, lane & 4);
}

/// After the tile's barrier: the WARPS warps' column sums of tile it (buf) added up by
/// threads 0 .. BN − 1, one atomic per column (from tile_start(it)) that has mass.
template <int WARPS, typename TileStart>
__device__ __forceinline__ void drain_column_sums(const float (&buf)[WARPS][kMmaTile], TileStart tile_start, int it,
                                                  int j_end, float* csum) {
  if (threadIdx.x < kMmaTile) {
    const int j = tile_start(it) + threadIdx.x;
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) total += buf[w][threadIdx.x];
    if (j < j_end && total != 0.f) atomicAdd(&csum[j], total);
  }
}

/// The one-pass symmetric step on tensor cores (symmetric.cu has the contract and the fp32 kernels): each plan
/// entry E_ij = exp2(α⟨x_i,y_j⟩ + u_i + v_j) is evaluated once and feeds both the row sum Σ_j E_ij and the column
/// sum Σ_i a_i E_ij. SCREEN as for lse_mma_kernel, with the fixed bound 2^-cut on every entry in place of the
/// running max (the sums are kept down to 2^-70, so cut covers that, the count of terms and the weights).
template <int KS, int TERMS, bool BF16, bool SCREEN>
__global__ void __launch_bounds__(kMmaThreads) sums_mma_kernel(PointSet x, PointSet y, MmaOperands xop,
                                                               MmaOperands yop, const float* __restrict__ f,
                                                               const float* __restrict__ g, Scale sc, float alpha,
                                                               int cols_per_split, float* __restrict__ rsum,
                                                               float* __restrict__ csum, const SumsForecast* forecast,
                                                               ScreenState* screen, float cut) {
  static_assert(!SCREEN || TERMS == 3, "only split operands are screened");
  const SumsStep step = forecast != nullptr ? sums_step(*forecast) : SumsStep{};
  if (step.skip != 0) return;
  const float shift = step.shift;
  if (SCREEN && screen != nullptr && screen->paid == 0) cut += screen->floor_gap;  // ScreenState::paid
  using Core = MmaTileCore<KS, TERMS, BF16, !SCREEN>;
  extern __shared__ __align__(16) std::uint16_t smem[];                 // (2 stages, arrays, BN, DP + 8)
  __shared__ __align__(8) float vtile[2][kMmaThreads];                  // (2 tiles, BN used of 128) biases v_j
  __shared__ __align__(8) float colbuf[2][kMmaThreads / 32][kMmaTile];  // (2 tiles, warps, BN) column sums
  const bool runs = site_runs<SCREEN>(screen);
  TileCounts counts;
  if (runs) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gr = lane / 4, t = lane % 4;
    const int row0 = blockIdx.x * kMmaBlockRows + warp * kWarpRows;
    Core core;
    core.load_rows(xop, row0, x.count);

    float u[2][2], ar[2][2], rs[2][2];  // (m16 subtile, row g / g+8)
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = row0 + mt * 16 + gr + hh * 8;
        const bool valid = i < x.count;
        u[mt][hh] = valid ? sc.c1 * (f[i] - sc.s * x.norm2[i]) + shift : -INFINITY;
        ar[mt][hh] = valid ? x.weight[i] : 0.f;
        rs[mt][hh] = 0.f;
      }

    const int j_begin = blockIdx.y * cols_per_split;
    const int j_end = min(y.count, j_begin + cols_per_split);
    const int tiles = (j_end - j_begin + kMmaTile - 1) / kMmaTile;
    // Blocks of one split start at different tiles so that their column atomics do not all hit one address range.
    const auto tile_start = [&](int it) { return j_begin + ((it + blockIdx.x) % tiles) * kMmaTile; };
    const auto bias_at = [&](int j) { return column_bias(y, g, sc, j); };
    const auto epilogue = [&](float (&s)[2][8][4], const float* vt, int parity, int, const std::uint16_t* stage) {
      if constexpr (SCREEN) {
        float floor[2][2];  // an invalid row (u = −∞) has floor +∞: never kept
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) floor[mt][hh] = -cut - u[mt][hh];
        const bool keep = screen_keeps(s, vt, alpha, floor);
        counts.add(keep);
        if (!keep) {
          *reinterpret_cast<float2*>(&colbuf[parity][warp][gr * 8 + 2 * t]) = make_float2(0.f, 0.f);
          return;
        }
        core.add_cross(stage, xop.lo, row0, x.count, s);
      }
      float col[16];  // (n8, 2): Σ over this lane's four rows of a_i E_ij, columns nt·8 + 2t + q
#pragma unroll
      for (int c = 0; c < 16; ++c) col[c] = 0.f;
      add_entries(s, vt, alpha, u, ar, rs, col);
      total_column_sums(col);
      *reinterpret_cast<float2*>(&colbuf[parity][warp][gr * 8 + 2 * t]) = make_float2(col[0], col[1]);
    };
    const auto drain = [&](int parity, int it) { drain_column_sums(colbuf[parity], tile_start, it, j_end, csum); };
    core.template run_site_tiles<SCREEN, false>(smem, vtile, yop, tiles, j_end, tile_start, bias_at, epilogue,
                                                drain);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float sum = quad_sum(rs[mt][hh]);
        const int i = row0 + mt * 16 + gr + hh * 8;
        if (t == 0 && i < x.count) atomicAdd(&rsum[i], sum);
      }
  }
  close_site<SCREEN>(screen, runs, counts);
}

// ---- Warpgroup (wgmma, sm_90a) kernels of the split operands' sites ---------------------------------------------
//
// Why: on the H200 the screened kernels above are bound by L2 → shared-memory traffic, not by the tensor cores —
// every 128-row block streams all column tiles' hi and lo halves (2 × 12.8 MB at n = 100k, d = 64: 20 GB per pass,
// L2 throughput at 90%, tests/bench/wgmma_probe.cu under ncu). These kernels give each column tile to 256 rows
// (four warpgroups, 512 threads, one block per SM), which halves the traffic, and take the screen's hi·hi product
// from wgmma (B from shared memory through a descriptor, A from registers), which leaves the issue slots of mma.sync
// to the kept tiles. Each warp decides for its own 16 × 64 tile (a finer grain than the 32 × 64 above), adds the
// cross products of a kept tile with mma.sync (ldmatrix from the same core matrices) and sums it. The dense
// variants (SCREEN = false) take all three products from wgmma. The per-entry arithmetic, the screen's bound
// (screen_margin, cut) and the site protocol (site_runs, close_site) are those of the kernels above; a screened site
// is one launch of its site kernel (lse_wg_site_kernel, sums_wg_site_kernel), which runs either body.

constexpr int kWgThreads = 512;           // four warpgroups
constexpr int kWgBlockRows = 256;         // 16 rows per warp
constexpr int kWgWarps = kWgThreads / 32;

/// The rows' A fragments of one warp (16 rows), the column tiles' staging (hi, lo as interleaved core matrices;
/// biases) in four stages filled by bulk copies (run), and the products: SCREEN, the wgmma hi·hi product and, for kept tiles, the
/// mma.sync cross products (rows' lo from shared memory); otherwise (the dense kernels) all three products by
/// wgmma, the rows' lo halves in registers.
template <int KS, bool SCREEN>
struct WgTileCore {
  static constexpr int kChunks = 2 * KS;                              // 16-byte chunks per point
  static constexpr int kArrayBytes = kMmaTile * kChunks * 16;         // one array of one column tile
  static constexpr int kStageBytes = 2 * kArrayBytes + kMmaTile * 4;  // hi, lo, biases
  static constexpr int kStages = 4;
  static constexpr int kRowsLoBytes = kWgBlockRows * kChunks * 16;     // the block's rows' lo halves
  static constexpr int kRowsLoAt = kStages * kStageBytes;              // after the stages (SCREEN)
  static constexpr int kBarriersAt = kRowsLoAt + (SCREEN ? kRowsLoBytes : 0);  // one shared barrier per stage
  static constexpr int kCountersAt = kBarriersAt + 8 * kStages;                // warps done with each stage
  static constexpr int kSharedBytes = kCountersAt + 4 * kStages;
  static_assert(2 * kArrayBytes == int(tile_bytes(16 * KS)), "a stage holds one tile of launch_tile_operands");

  std::uint32_t a_hi[KS][4], a_lo[SCREEN ? 1 : KS][4];

  /// This warp's rows (row0 .. row0 + 15) into registers (hi; lo too for the dense kernels) and, SCREEN, the
  /// block's rows' lo halves (kWgBlockRows rows from block_row0, zeros past count) into shared memory as core
  /// matrices: cp.async, waited for by run() before its first barrier.
  __device__ __forceinline__ void load_rows(std::uint8_t* smem, const MmaOperands& rop, int block_row0, int row0,
                                            int count) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = row0 + g + (q & 1) * 8, k = ks * 16 + 2 * t + (q >> 1) * 8;
        const std::size_t at = std::size_t(r) * 16 * KS + k;
        a_hi[ks][q] = r < count ? *reinterpret_cast<const std::uint32_t*>(rop.hi + at) : 0u;
        if constexpr (!SCREEN) a_lo[ks][q] = r < count ? *reinterpret_cast<const std::uint32_t*>(rop.lo + at) : 0u;
      }
    if constexpr (SCREEN) {
      constexpr int kQuads = (kChunks + 3) / 4, kUnits = (kWgBlockRows / 8) * kQuads;
      for (int u = threadIdx.x / 32; u < kUnits; u += kWgWarps) {
        const int p = (u / kQuads) * 8 + lane % 8, c = (u % kQuads) * 4 + lane / 8, r = block_row0 + p;
        if (c < kChunks)
          copy_async16(smem + kRowsLoAt + wgmma::core_offset(p, c, kChunks),
                       rop.lo + std::size_t(r < count ? r : 0) * 16 * KS + c * 8, r < count);
      }
    }
  }

  /// Issues d = ⟨row, column⟩ of the warpgroup's 64 rows × the stage's 64 columns (this warp's 16 rows in d, one
  /// m16 subtile in MmaTileCore's (m16, n8, C fragment) layout) as one wgmma group: hi·hi alone (SCREEN), else
  /// hi·hi + hi·lo + lo·hi.
  __device__ __forceinline__ void issue_product(std::uint32_t stage_address, float (&d)[1][8][4]) const {
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
      wgmma::mma_n64(d[0], a_hi[ks], wgmma::descriptor(stage_address + ks * 256, kChunks), ks > 0);
    if constexpr (!SCREEN) {
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        wgmma::mma_n64(d[0], a_hi[ks], wgmma::descriptor(stage_address + kArrayBytes + ks * 256, kChunks), true);
        wgmma::mma_n64(d[0], a_lo[ks], wgmma::descriptor(stage_address + ks * 256, kChunks), true);
      }
    }
    wgmma::commit();
  }

  /// d += hi·lo + lo·hi of this warp's 16 rows and the stage's columns: the rows' lo A fragments by ldmatrix from
  /// the block's rows_lo (load_rows), the columns' hi and lo B fragments by one ldmatrix.x4 per (column group, k16
  /// step) from the stage's core matrices.
  __device__ __forceinline__ void add_cross(const std::uint8_t* stage, const std::uint8_t* smem,
                                            float (&d)[1][8][4]) const {
    const int lane = threadIdx.x % 32, q = lane / 8, warp = threadIdx.x / 32;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      __syncwarp();  // as in MmaTileCore::add_cross: keeps ptxas from hoisting every step's loads
      // A matrices: rows 0-7 / 8-15 of the warp (q & 1) × chunk 2ks / 2ks + 1 (q >> 1): a0 .. a3 of m16n8k16.
      const int a_at = wgmma::core_offset(warp * 16 + (q & 1) * 8 + lane % 8, 2 * ks + (q >> 1), kChunks);
      std::uint32_t alo[4];
      load_matrices_x4(reinterpret_cast<const std::uint16_t*>(smem + kRowsLoAt + a_at), alo);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        // B matrices: hi chunk 2ks, hi chunk 2ks + 1, lo chunk 2ks, lo chunk 2ks + 1 of column group nt.
        std::uint32_t b[4];
        load_matrices_x4(reinterpret_cast<const std::uint16_t*>(
                             stage + (q >> 1) * kArrayBytes +
                             wgmma::core_offset(nt * 8 + lane % 8, 2 * ks + (q & 1), kChunks)),
                         b);
        mma_16816(d[0][nt], a_hi[ks], b[2], b[3], false);
        mma_16816(d[0][nt], alo, b[0], b[1], false);
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
  /// OVERLAP (dense kernels whose registers hold a second accumulator): tile it + 1's product is issued before tile
  /// it's epilogue.
  template <bool OVERLAP, typename TileStart, typename Epilogue, typename Drain>
  __device__ __forceinline__ void run(std::uint8_t* smem, const MmaOperands& cop, int tiles, TileStart tile_start,
                                      Epilogue epilogue, Drain drain) const {
    static_assert(!(OVERLAP && SCREEN), "the screened kernels change their scores on some paths only (kept tiles)");
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
      wgmma::arrive_expect_bytes(bar, 2 * kArrayBytes + kMmaTile * 4);
      wgmma::bulk_copy(stage, cop.tiles + std::size_t(j0 / kMmaTile) * (2 * kArrayBytes), 2 * kArrayBytes, bar);
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
      const bool mine = leader && wgmma::count_in(done_address + 4 * s) == kWgWarps - 1;
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
    const auto consume = [&](float (&d)[1][8][4], int it) {
      const int s = it % kStages;
      const std::uint8_t* stage = smem + s * kStageBytes;
      epilogue(d, reinterpret_cast<const float*>(stage + 2 * kArrayBytes), s, it, stage);
      release(it);
    };
    const auto stage_address = [&](int it) { return smem_address + (it % kStages) * kStageBytes; };
    if constexpr (OVERLAP) {
      // Two accumulators: tile it + 1's product runs on the tensor cores while tile it is summed (FlashAttention-3's
      // intra-warpgroup overlap). Unrolled by two so that they swap roles without moves, and every group is waited
      // for within the body (a group in flight across the back edge makes ptxas serialise every wgmma: C7514).
      // Past the last tile the product reads a stage that no copy writes any more, and its result is not used.
      float da[1][8][4], db[1][8][4];
      arrived(0);
      issue_product(stage_address(0), da);
      const auto step = [&](float (&cur)[1][8][4], float (&next)[1][8][4], int it) {
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
    } else {
      for (int it = 0; it < tiles; ++it) {
        arrived(it);
        float d[1][8][4];
        issue_product(stage_address(it), d);
        wgmma::wait<0>();
        wgmma::fence_operands(d[0]);
        consume(d, it);
      }
    }
  }
};

// The largest instantiation (d = 128, screened: four stages of hi, lo and biases, the rows' lo halves) plus the sums
// kernel's static column buffers must fit the 227 KB a Hopper block may have.
static_assert(WgTileCore<8, true>::kSharedBytes + WgTileCore<8, true>::kStages * kMmaTile * sizeof(float) <= 227 * 1024,
              "warpgroup kernels' shared memory exceeds a Hopper block's");

/// The log-sum-exp of split operands on warpgroups, 256 rows per block: lse_mma_kernel<KS, 3, false, SCREEN>'s
/// contract (SCREEN: each warp screens its 16 × 64 tile; otherwise every entry is summed, three wgmma products).
template <int KS, bool SCREEN>
__device__ __forceinline__ void lse_wg_body(PointSet rows, PointSet cols, MmaOperands rop, MmaOperands cop,
                                            const float* __restrict__ h, Scale sc, float alpha, int cols_per_split,
                                            float2* __restrict__ partials, int* seeds, ScreenState* screen,
                                            float cut) {
  using Core = WgTileCore<KS, SCREEN>;
  extern __shared__ __align__(128) std::uint8_t wg_smem[];
  TileCounts counts;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * kWgBlockRows + warp * 16;
  Core core;
  core.load_rows(wg_smem, rop, blockIdx.x * kWgBlockRows, row0, rows.count);
  // Screened: running max seeded at the row's best column of the last screened pass (lse_mma_kernel has the
  // reasons).
  float run_max[2] = {kNoMax, kNoMax}, run_sum[2] = {0.f, 0.f}, best[2] = {-INFINITY, -INFINITY};
  int best_col[2] = {-1, -1};
#pragma unroll
  for (int hh = 0; hh < 2 && SCREEN; ++hh) run_max[hh] = seeded_max(rows, cols, h, sc, seeds, row0 + g + hh * 8, t);
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(cols.count, j_begin + cols_per_split);
  const int tiles = (j_end - j_begin + kMmaTile - 1) / kMmaTile;
  const auto tile_start = [&](int it) { return j_begin + it * kMmaTile; };
  const auto epilogue = [&](float (&s)[1][8][4], const float* vt, int, int it, const std::uint8_t* stage) {
    if constexpr (SCREEN) {
      const float floor[1][2] = {{run_max[0] - cut, run_max[1] - cut}};
      const bool keep = screen_keeps(s, vt, alpha, floor);
      counts.add(keep);
      if (!keep) return;
      core.add_cross(stage, wg_smem, s);
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float2 b2 = *reinterpret_cast<const float2*>(&vt[nt * 8 + 2 * t]);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        s[0][nt][2 * hh] = fmaf(alpha, s[0][nt][2 * hh], b2.x);
        s[0][nt][2 * hh + 1] = fmaf(alpha, s[0][nt][2 * hh + 1], b2.y);
      }
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float top = kNoMax;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const float v = s[0][nt][2 * hh + q];
          if (SCREEN && v > best[hh]) best[hh] = v, best_col[hh] = tile_start(it) + nt * 8 + 2 * t + q;
          top = fmaxf(top, v);
        }
      online_lse_row(top, [&](int e) { return s[0][e / 2][2 * hh + e % 2]; }, run_max[hh], run_sum[hh]);
    }
  };
  core.template run<!SCREEN && KS <= 4>(wg_smem, cop, tiles, tile_start, epilogue, [](int, int) {});
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float sum = quad_sum(run_sum[hh]);
    const int r = row0 + g + hh * 8;
    if (t == 0 && r < rows.count)
      partials[std::size_t(blockIdx.y) * rows.count + r] = make_float2(run_max[hh], sum);
    if constexpr (SCREEN) store_seed(best[hh], best_col[hh], r, rows.count, t, seeds);
  }
  close_site<SCREEN>(screen, true, counts);
}

/// The dense kernel of a site that is not screened (a screened site launches lse_wg_site_kernel).
template <int KS>
__global__ void __launch_bounds__(kWgThreads, 1)
    lse_wg_kernel(PointSet rows, PointSet cols, MmaOperands rop, MmaOperands cop, const float* __restrict__ h, Scale sc,
                  float alpha, int cols_per_split, float2* __restrict__ partials, const int* guard, int* seeds,
                  ScreenState* screen, float cut) {
  if (guard != nullptr && *guard == 0) return;
  lse_wg_body<KS, false>(rows, cols, rop, cop, h, sc, alpha, cols_per_split, partials, seeds, screen, cut);
}

/// A screened site in one launch (rather than a screened and a dense launch of which one returns at once): the
/// screened or the dense body, as the site's state says; the decision for the next launch is taken at the end of
/// either (close_site).
template <int KS>
__global__ void __launch_bounds__(kWgThreads, 1)
    lse_wg_site_kernel(PointSet rows, PointSet cols, MmaOperands rop, MmaOperands cop, const float* __restrict__ h,
                       Scale sc, float alpha, int cols_per_split, float2* __restrict__ partials, const int* guard,
                       int* seeds, ScreenState* screen, float cut) {
  if (guard != nullptr && *guard == 0) return;
  if (site_runs<true>(screen)) {
    lse_wg_body<KS, true>(rows, cols, rop, cop, h, sc, alpha, cols_per_split, partials, seeds, screen, cut);
    close_site<false>(screen, false, TileCounts{});
  } else {
    lse_wg_body<KS, false>(rows, cols, rop, cop, h, sc, alpha, cols_per_split, partials, seeds, screen, cut);
  }
}

/// The one-pass sums of split operands on warpgroups, 256 rows per block: sums_mma_kernel<KS, 3, false, SCREEN>'s
/// contract.
template <int KS, bool SCREEN>
__device__ __forceinline__ void sums_wg_body(PointSet x, PointSet y, MmaOperands xop, MmaOperands yop,
                                             const float* __restrict__ f, const float* __restrict__ g, Scale sc,
                                             float alpha, int cols_per_split, float* __restrict__ rsum,
                                             float* __restrict__ csum, float shift, ScreenState* screen,
                                             float cut) {
  using Core = WgTileCore<KS, SCREEN>;
  extern __shared__ __align__(128) std::uint8_t wg_smem[];
  // (stage, BN): the column sums of the stage's tile, added by every warp (shared atomics), taken by drain.
  __shared__ float colacc[Core::kStages][kMmaTile];
  for (int e = threadIdx.x; e < Core::kStages * kMmaTile; e += kWgThreads) colacc[e / kMmaTile][e % kMmaTile] = 0.f;
  TileCounts counts;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gr = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * kWgBlockRows + warp * 16;
  Core core;
  core.load_rows(wg_smem, xop, blockIdx.x * kWgBlockRows, row0, x.count);
  float u[1][2], ar[1][2], rs[1][2] = {};  // (m16, row g / g + 8)
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int i = row0 + gr + hh * 8;
    const bool valid = i < x.count;
    u[0][hh] = valid ? sc.c1 * (f[i] - sc.s * x.norm2[i]) + shift : -INFINITY;
    ar[0][hh] = valid ? x.weight[i] : 0.f;
  }
  const int j_begin = blockIdx.y * cols_per_split;
  const int j_end = min(y.count, j_begin + cols_per_split);
  const int tiles = (j_end - j_begin + kMmaTile - 1) / kMmaTile;
  const auto tile_start = [&](int it) { return j_begin + ((it + blockIdx.x) % tiles) * kMmaTile; };
  const auto epilogue = [&](float (&s)[1][8][4], const float* vt, int slot, int, const std::uint8_t* stage) {
    if constexpr (SCREEN) {
      const float floor[1][2] = {{-cut - u[0][0], -cut - u[0][1]}};  // an invalid row (u = −∞) is never kept
      const bool keep = screen_keeps(s, vt, alpha, floor);
      counts.add(keep);
      if (!keep) return;
      core.add_cross(stage, wg_smem, s);
    }
    float col[16] = {};  // (n8, 2): Σ over this lane's two rows of a_i E_ij, columns nt·8 + 2t + q
    add_entries(s, vt, alpha, u, ar, rs, col);
    total_column_sums(col);
    atomicAdd(&colacc[slot][gr * 8 + 2 * t], col[0]);
    atomicAdd(&colacc[slot][gr * 8 + 2 * t + 1], col[1]);
  };
  // By the last warp done with the tile's stage: lane L takes columns L and L + 32 (and leaves zeros). Every
  // access to colacc is atomic, so the order of the warps' additions is the only thing the schedule changes.
  const auto drain = [&](int stage, int it) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = lane + 32 * h, j = tile_start(it) + c;
      const float total = atomicExch(&colacc[stage][c], 0.f);
      if (j < j_end && total != 0.f) atomicAdd(&csum[j], total);
    }
  };
  core.template run<!SCREEN && KS <= 4>(wg_smem, yop, tiles, tile_start, epilogue, drain);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float sum = quad_sum(rs[0][hh]);
    const int i = row0 + gr + hh * 8;
    if (t == 0 && i < x.count) atomicAdd(&rsum[i], sum);
  }
  close_site<SCREEN>(screen, true, counts);
}

/// The dense kernel of a sums site that is not screened (a screened one launches sums_wg_site_kernel).
template <int KS>
__global__ void __launch_bounds__(kWgThreads, 1)
    sums_wg_kernel(PointSet x, PointSet y, MmaOperands xop, MmaOperands yop, const float* __restrict__ f,
                   const float* __restrict__ g, Scale sc, float alpha, int cols_per_split, float* __restrict__ rsum,
                   float* __restrict__ csum, const SumsForecast* forecast, ScreenState* screen, float cut) {
  const SumsStep step = forecast != nullptr ? sums_step(*forecast) : SumsStep{};
  if (step.skip != 0) return;
  const float shift = step.shift;
  sums_wg_body<KS, false>(x, y, xop, yop, f, g, sc, alpha, cols_per_split, rsum, csum, shift, screen, cut);
}

/// The sums of a screened site in one launch (lse_wg_site_kernel).
template <int KS>
__global__ void __launch_bounds__(kWgThreads, 1)
    sums_wg_site_kernel(PointSet x, PointSet y, MmaOperands xop, MmaOperands yop, const float* __restrict__ f,
                        const float* __restrict__ g, Scale sc, float alpha, int cols_per_split,
                        float* __restrict__ rsum, float* __restrict__ csum, const SumsForecast* forecast,
                        ScreenState* screen, float cut) {
  const SumsStep step = forecast != nullptr ? sums_step(*forecast) : SumsStep{};
  if (step.skip != 0) return;
  const float shift = step.shift;
  if (site_runs<true>(screen)) {
    if (screen->paid == 0) cut += screen->floor_gap;  // ScreenState::paid
    sums_wg_body<KS, true>(x, y, xop, yop, f, g, sc, alpha, cols_per_split, rsum, csum, shift, screen, cut);
    close_site<false>(screen, false, TileCounts{});
  } else {
    sums_wg_body<KS, false>(x, y, xop, yop, f, g, sc, alpha, cols_per_split, rsum, csum, shift, screen, cut);
  }
}

/// Unit u of column_tiles(count) × 2 arrays × 64 points × chunks 16-byte units: (tile, array, point, chunk) →
/// the core-matrix offset of that point and chunk in its tile (WgTileCore's stage layout); zeros past count.
__global__ void tile_operands_kernel(const std::uint16_t* __restrict__ hi, const std::uint16_t* __restrict__ lo,
                                     int count, int padded_d, std::uint8_t* __restrict__ out, std::size_t units) {
  const int chunks = padded_d / 8;
  const std::size_t per_array = std::size_t(kMmaTile) * chunks, per_tile = 2 * per_array;
  for (std::size_t u = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; u < units;
       u += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t tile = u / per_tile, rest = u % per_tile;
    const int array = static_cast<int>(rest / per_array), v = static_cast<int>(rest % per_array);
    const int p = v / chunks, c = v % chunks;
    const std::size_t j = tile * kMmaTile + p;
    uint4 value = make_uint4(0u, 0u, 0u, 0u);
    if (j < std::size_t(count)) value = *reinterpret_cast<const uint4*>((array == 0 ? hi : lo) + j * padded_d + c * 8);
    *reinterpret_cast<uint4*>(out + tile * tile_bytes(padded_d) + array * per_array * 16 +
                              wgmma::core_offset(p, c, chunks)) = value;
  }
}

/// Thread i: side a's bias of column i (i < a_padded), else side b's of column i − a_padded (launch_column_biases).
__global__ void column_biases_kernel(PointSet a, const float* __restrict__ ha, float* __restrict__ out_a,
                                     int a_padded, PointSet b, const float* __restrict__ hb,
                                     float* __restrict__ out_b, int b_padded, Scale sc) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < a_padded) {
    out_a[i] = i < a.count ? column_bias(a, ha, sc, i) : -INFINITY;
  } else if (i - a_padded < b_padded) {
    const int j = i - a_padded;
    out_b[j] = j < b.count ? column_bias(b, hb, sc, j) : -INFINITY;
  }
}

/// 1 in *out when this build's image of the kernels has the warpgroup instructions (compiled for sm_90a).
__global__ void wgmma_image_kernel(int* out) {
#ifdef FLASHOT_WGMMA_DEVICE
  *out = 1;
#else
  *out = 0;
#endif
}

/// Calls fn(std::integral_constant<int, KS>{}) for the run-time KS = padded d / 16 (1..8).
template <typename Fn>
void dispatch_ks(int ks, Fn&& fn) {
  switch (ks) {
    case 1: fn(std::integral_constant<int, 1>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    case 3: fn(std::integral_constant<int, 3>{}); break;
    case 4: fn(std::integral_constant<int, 4>{}); break;
    case 5: fn(std::integral_constant<int, 5>{}); break;
    case 6: fn(std::integral_constant<int, 6>{}); break;
    case 7: fn(std::integral_constant<int, 7>{}); break;
    case 8: fn(std::integral_constant<int, 8>{}); break;
    default: throw std::logic_error("tensor-core path asked for d > 128");
  }
}

/// Calls fn(std::integral_constant<int, TERMS>{}, std::bool_constant<BF16>{}) for the operands' mode.
template <typename Fn>
void dispatch_mode(MmaMode mode, Fn&& fn) {
  if (mode == MmaMode::kSplitFp16) {
    fn(std::integral_constant<int, 3>{}, std::false_type{});
  } else if (mode == MmaMode::kFp16) {
    fn(std::integral_constant<int, 1>{}, std::false_type{});
  } else {
    fn(std::integral_constant<int, 1>{}, std::true_type{});
  }
}

}  // namespace

// A warpgroup block's fixed cost in column tiles (plan_waves): its rows, two tiles in flight before its first
// product, the seeds, the partials.
constexpr int kWgOverheadTiles = 2;

ReductionPlan plan_lse_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& op, int resident_blocks,
                           int sms) {
  if (op.warpgroup) return plan_waves(rows.count, cols.count, kWgBlockRows, kMmaTile, sms, kWgOverheadTiles);
  return plan_reduction(rows.count, cols.count, kMmaBlockRows, kMmaTile, resident_blocks);
}


namespace {

/// log2 units by which a hi·hi score may fall short of (or exceed) the split one: |Δ⟨x̃,ỹ⟩| ≤ 2^-10·Σ|x̃_k||ỹ_k|
/// (each half rounded to 11 bits) plus the subnormal halves' 2^-25 per coordinate, bounded with the largest norms
/// (Cauchy–Schwarz) and a factor of two to spare, times the score's factor α/(scale_x·scale_y).
float screen_margin(const MmaOperands& a, const MmaOperands& b, float alpha) {
  const double xa = double(a.scale) * a.max_norm, yb = double(b.scale) * b.max_norm;
  const double bound = std::ldexp(xa * yb, -9) + std::ldexp(std::sqrt(double(a.padded_d)) * (xa + yb + 1), -18);
  return static_cast<float>(std::abs(double(alpha)) * bound);
}

/// A screened site launches its screened kernel, then its dense one (ScreenState); otherwise the dense one alone.
/// Where the operands allow it (MmaOperands::warpgroup), the warpgroup kernels replace both (256 rows per block,
/// their own shared memory; `grid` then comes from their plan, plan_lse_mma), a screened site as one launch of its
/// site kernel (which runs either body).
template <auto Screened, auto Dense, auto WgSite, auto WgDense, typename... Args>
void launch_site(dim3 grid, int bytes, bool warpgroup, int wg_screened_bytes, int wg_dense_bytes,
                 cudaStream_t stream, ScreenState* screen, float cut, Args... args) {
  if constexpr (Screened == nullptr) screen = nullptr;
  if constexpr (WgDense != nullptr) {
    if (warpgroup) {  // the plan is the warpgroup kernels' (plan_lse_mma)
      if (screen != nullptr) {
        const int bytes = std::max(wg_screened_bytes, wg_dense_bytes);
        allow_shared_bytes<WgSite>(bytes);
        WgSite<<<grid, kWgThreads, bytes, stream>>>(args..., screen, cut);
        return;
      }
      allow_shared_bytes<WgDense>(wg_dense_bytes);
      WgDense<<<grid, kWgThreads, wg_dense_bytes, stream>>>(args..., screen, cut);
      return;
    }
  }
  if constexpr (Screened != nullptr) {
    if (screen != nullptr) {
      allow_shared_bytes<Screened>(bytes);
      Screened<<<grid, kMmaThreads, bytes, stream>>>(args..., screen, cut);
    }
  }
  allow_shared_bytes<Dense>(bytes);
  Dense<<<grid, kMmaThreads, bytes, stream>>>(args..., screen, cut);
}

}  // namespace

void launch_lse_mma(const PointSet& rows, const PointSet& cols, const MmaOperands& rop, const MmaOperands& cop,
                    const float* h, const Scale& scale, const ReductionPlan& plan, float2* partials,
                    const int* guard, ScreenState* screen, int* seeds, cudaStream_t stream) {
  const dim3 grid(plan.row_blocks, plan.splits);
  const float alpha = scale.alpha / (rop.scale * cop.scale);
  // A dropped tile's entries are each below 2^-reach of the row max: at most cols.count·2^-reach < 2^-26 of the sum.
  const float cut = 26.f + std::ceil(std::log2(float(std::max(cols.count, 1)))) + screen_margin(rop, cop, alpha);
  dispatch_mode(rop.mode, [&](auto terms, auto bf16) {
    dispatch_ks(rop.padded_d / 16, [&](auto ks) {
      constexpr int kKs = decltype(ks)::value, kTerms = decltype(terms)::value;
      constexpr bool kBf16 = decltype(bf16)::value;
      constexpr bool kSplit = kTerms == 3;
      launch_site<kSplit ? lse_mma_kernel<kKs, 3, false, true> : nullptr, lse_mma_kernel<kKs, kTerms, kBf16, false>,
                  kSplit ? lse_wg_site_kernel<kKs> : nullptr, kSplit ? lse_wg_kernel<kKs> : nullptr>(
          grid, mma_shared_bytes(kKs, kTerms), rop.warpgroup, WgTileCore<kKs, true>::kSharedBytes,
          WgTileCore<kKs, false>::kSharedBytes, stream, screen, cut, rows, cols, rop, cop, h, scale, alpha,
          plan.cols_per_split, partials, guard, seeds);
    });
  });
  FLASHOT_CUDA_CHECK_LAUNCH();
}

ReductionPlan plan_symmetric_mma(const PointSet& x, const PointSet& y, const MmaOperands& op, int resident_blocks,
                                 int sms) {
  return plan_lse_mma(x, y, op, resident_blocks, sms);
}

void launch_symmetric_sums_mma(const PointSet& x, const PointSet& y, const MmaOperands& xop, const MmaOperands& yop,
                               const float* f, const float* g, const Scale& scale, const ReductionPlan& plan,
                               float* rsum, float* csum, const SumsForecast* forecast, ScreenState* screen,
                               float sums_reach, float floor_log2, cudaStream_t stream) {
  const dim3 grid(plan.row_blocks, plan.splits);
  const float alpha = scale.alpha / (xop.scale * yop.scale);
  // The finish kernel keeps sums down to 2^floor (floor_log2 ≤ 0); dropped entries are each below 2^-cut, at most m
  // of them per row sum and total weight 1 per column sum (≥ 2^floor·b_j): cut = 26 − floor + log2 max(m, 1/min b)
  // keeps them < 2^-26 of every sum.
  const float cut = 26.f - floor_log2 + sums_reach + screen_margin(xop, yop, alpha);
  dispatch_mode(xop.mode, [&](auto terms, auto bf16) {
    dispatch_ks(xop.padded_d / 16, [&](auto ks) {
      constexpr int kKs = decltype(ks)::value, kTerms = decltype(terms)::value;
      constexpr bool kBf16 = decltype(bf16)::value;
      constexpr bool kSplit = kTerms == 3;
      launch_site<kSplit ? sums_mma_kernel<kKs, 3, false, true> : nullptr,
                  sums_mma_kernel<kKs, kTerms, kBf16, false>, kSplit ? sums_wg_site_kernel<kKs> : nullptr,
                  kSplit ? sums_wg_kernel<kKs> : nullptr>(
          grid, mma_shared_bytes(kKs, kTerms), xop.warpgroup, WgTileCore<kKs, true>::kSharedBytes,
          WgTileCore<kKs, false>::kSharedBytes, stream, screen, cut, x, y, xop, yop, f, g, scale, alpha,
          plan.cols_per_split, rsum, csum, forecast);
    });
  });
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_tile_operands(const std::uint16_t* hi, const std::uint16_t* lo, int count, int padded_d, std::uint8_t* out,
                          cudaStream_t stream) {
  const std::size_t units = std::size_t(column_tiles(count)) * 2 * kMmaTile * (padded_d / 8);
  if (units == 0) return;
  const int blocks = static_cast<int>(std::min<std::size_t>((units + 255) / 256, 4096));
  tile_operands_kernel<<<blocks, 256, 0, stream>>>(hi, lo, count, padded_d, out, units);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

void launch_column_biases(const PointSet& a, const float* ha, float* out_a, const PointSet& b, const float* hb,
                          float* out_b, const Scale& scale, cudaStream_t stream) {
  const int a_padded = column_tiles(a.count) * kMmaTile, b_padded = column_tiles(b.count) * kMmaTile;
  const int total = a_padded + b_padded;
  if (total == 0) return;
  column_biases_kernel<<<div_up(total, 256), 256, 0, stream>>>(a, ha, out_a, a_padded, b, hb, out_b, b_padded,
                                                               scale);
  FLASHOT_CUDA_CHECK_LAUNCH();
}

bool warpgroup_kernels_available() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  // Asked once per device: the probe's cudaFree synchronises the device, which other Problems' streams would feel.
  static std::atomic<signed char> known[64];  // 0 not asked yet, 1 no, 2 yes
  if (device < 64 && known[device].load() != 0) return known[device].load() == 2;
  int* flag = nullptr;
  if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  int value = 0;
  wgmma_image_kernel<<<1, 1>>>(flag);
  // No image for this device (an sm_90a build on another GPU) is an answer, not an error.
  const bool ran = cudaGetLastError() == cudaSuccess &&
                   cudaMemcpy(&value, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(flag);
  cudaGetLastError();
  const bool available = ran && value == 1;
  if (device < 64) known[device].store(available ? 2 : 1);
  return available;
}

}  // namespace flashot::detail::cuda
