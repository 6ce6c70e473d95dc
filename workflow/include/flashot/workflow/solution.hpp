#pragma once
// A solved problem saved for `flashot map`: both point sets, weights and potentials, ε, cost and reach — what an
// out-of-sample map needs, with no re-solve.
//
// File format (docs/cli.md): the 17 bytes "FLASHOT-SOLUTION\n"; a uint64 little-endian byte count H; H bytes of
// UTF-8 JSON (format_version, n, m, d, epsilon, cost, reach_source, reach_target, key, representation, source,
// target, flashot_version, arrays: [[name, count], …]); then the arrays in that order as little-endian float32:
// x (n·d), a (n), f (n), y (m·d), b (m), g (m).

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot::workflow {

struct Solution {
  std::string key;             ///< the representation's key: obsm key, "X" or "xyz"
  std::string representation;  ///< for people
  std::string source;          ///< file names, for people
  std::string target;
  Cost cost = Cost::kSquaredEuclidean;
  double epsilon = 0;
  double reach_source = 0;
  double reach_target = 0;
  std::size_t n = 0, m = 0, d = 0;
  std::vector<float> x, a, f;  ///< (n×d), (n), (n)
  std::vector<float> y, b, g;  ///< (m×d), (m), (m)

  /// The potentials and parameters as a SolveResult for Problem's operations.
  SolveResult result() const;
};

/// Writes `solution` to `path` as it is (callers stage it in an OutputSet). Throws std::invalid_argument for
/// inconsistent sizes, std::runtime_error when writing fails.
void save_solution(const std::filesystem::path& path, const Solution& solution);
/// The header of a solution file alone (key, representation, n, m, d, ε, cost, reach; every array left empty),
/// checked as load_solution checks it, the file's size included: what `flashot map` compares its options with
/// before reading the arrays. Throws as load_solution.
Solution read_solution_header(const std::filesystem::path& path);
/// Reads a file written by save_solution. Throws std::runtime_error naming the path and what is wrong (not a
/// solution file, truncated, sizes that disagree with the header).
Solution load_solution(const std::filesystem::path& path);

}  // namespace flashot::workflow
