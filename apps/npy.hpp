#pragma once
// NumPy .npy files (format 1.0: magic, a header dict, raw little-endian C-order data) for `flashot bench`'s
// --save-points / --save-potentials, which hand the exact inputs and results to Python scripts
// (tests/bench/peers/multiscale_peers.py). Writing only; each file goes through a hidden temporary in its own
// folder, renamed over the destination once complete, so a killed run never leaves a truncated file under the
// final name.

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flashot::cli {

/// The .npy header for float32 ('<f4') data of `shape` (C order): magic, version 1.0, the dict padded with spaces
/// and a newline so that the data starts at a multiple of 64 bytes. Throws std::invalid_argument when the dict does
/// not fit format 1.0's 16-bit length (never for shapes of rank ≤ 8).
std::string npy_header(std::span<const std::size_t> shape);

/// Writes `values` (row-major, the product of `shape` values) as a float32 .npy file at `path`. Throws
/// std::invalid_argument when the sizes disagree and std::runtime_error naming the path when it cannot be written.
void write_npy(const std::filesystem::path& path, std::span<const float> values, std::vector<std::size_t> shape);

/// Writes `bytes` to `path` through a temporary in the same folder and a rename (as write_npy). Throws
/// std::runtime_error naming the path.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

/// Makes `folder` (and its parents) unless it exists, then proves that a file can be created in it. Throws
/// UsageError (cli.hpp) naming `what` (the option) and the path when it exists as something other than a folder,
/// cannot be created, or is not writable: the check a run makes before its long work.
void prepare_output_folder(const std::string& what, const std::filesystem::path& folder);

}  // namespace flashot::cli
