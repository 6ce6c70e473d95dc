#pragma once
// Streaming tile kernels of the CPU backend, compiled once per instruction set (kernels_<isa>.cpp) and picked at
// run time. Every kernel reduces query rows against all keys without storing more than one score tile:
//   t_ij = scale·⟨q_i, k_j⟩ + bias_j      (log2 units; bias_j = −∞ removes key j)
// the biased dot-product score of docs/design.md §1 with log2(e) folded into scale and bias.

#include <cstddef>

#include "flashot/flashot.hpp"

namespace flashot::cpu {

/// Keys are stored transposed and padded so that a tile of columns loads as whole vectors of any width we use.
inline constexpr std::size_t kKeyPad = 16;
/// Query rows and key columns per score tile: (kTileRows, kTileCols) fp32 = 16 KiB, stays in L1.
inline constexpr std::size_t kTileRows = 16;
inline constexpr std::size_t kTileCols = 256;
/// Value columns handled per pass of the weighted kernel; P·V with more columns is chunked (no n×k×… scratch).
inline constexpr std::size_t kValueChunk = 32;

struct KeySet {
  /// Coordinates in panels of kKeyPad keys, each panel (d, kKeyPad) row-major: key j, dimension c is at
  /// t[(j / kKeyPad)·d·kKeyPad + c·kKeyPad + j % kKeyPad], so a vector of keys streams contiguously over c.
  /// Padding keys are zero.
  const float* t = nullptr;
  std::size_t count = 0;     ///< real keys
  std::size_t ld = 0;        ///< padded count, a multiple of kKeyPad
  std::size_t d = 0;
};

struct QuerySet {
  const float* x = nullptr;  ///< (count × d) row-major
  std::size_t count = 0;
  std::size_t d = 0;
};

/// One reduction: scores of queries against keys. `bias` has keys.ld entries (−∞ in the padding).
struct ScoreSpec {
  QuerySet queries;
  KeySet keys;
  const float* bias = nullptr;
  float scale = 0;
};

struct IsaKernels {
  const char* name;
  /// Rows [begin, end): Σ_j 2^{t_ij} = sum[i]·2^{max[i]} over the key columns [key_begin, key_end) (multiples of
  /// kTileCols except at ld), merged into the running (max, sum) already in the arrays (start from (−∞, 0)).
  void (*lse)(const ScoreSpec& s, std::size_t begin, std::size_t end, std::size_t key_begin, std::size_t key_end,
              float* max, double* sum);
  /// Rows [begin, end): out[(i − begin)·ldo + c] += Σ_j 2^{t_ij − shift[i]} · vt[c·keys.ld + j], c < k ≤ kValueChunk,
  /// over key columns [key_begin, key_end). vt is (k × keys.ld), zero in the padding.
  void (*weighted)(const ScoreSpec& s, std::size_t begin, std::size_t end, std::size_t key_begin,
                   std::size_t key_end, const double* shift, const float* vt, std::size_t k, double* out,
                   std::size_t ldo);
  /// One exponential per entry for the symmetric update, rows [begin, end) × keys [key_begin, key_end):
  /// E_ij = 2^{clamp(t_ij + alpha_i, ±100)}, row_sum[i] += Σ_j wk_j·E_ij, col_sum[j] += Σ_i wq_i·E_ij.
  /// wk has keys.ld entries (zero in the padding); the caller checks the sums' range (no max shift here).
  void (*fused)(const ScoreSpec& s, std::size_t begin, std::size_t end, std::size_t key_begin, std::size_t key_end,
                const float* alpha, const float* wq, const float* wk, double* row_sum, double* col_sum);
  /// Score tile of rows [begin, begin + rows) (rows ≤ kTileRows) against key columns [j0, j0 + cols)
  /// (cols ≤ kTileCols, j0 + cols ≤ ld): tile[r·kTileCols + j].
  void (*scores)(const ScoreSpec& s, std::size_t begin, std::size_t rows, std::size_t j0, std::size_t cols,
                 float* tile);
  /// y[i] = 2^x[i] with x[i] clamped to [−100, 100]: the exponential inside every kernel above, exposed for its
  /// accuracy test (tests/engine/cpu_exp2_test.cpp).
  void (*exp2_clamped)(const float* x, std::size_t n, float* y);
};

const IsaKernels& generic_kernels();
const IsaKernels& avx2_kernels();
const IsaKernels& avx512_kernels();

/// The kernels BackendOptions::cpu_isa names (kAuto: the widest this CPU runs; tests and comparisons narrow it).
/// Throws std::runtime_error for a set this CPU cannot run.
const IsaKernels& select_kernels(CpuIsa isa);

}  // namespace flashot::cpu
