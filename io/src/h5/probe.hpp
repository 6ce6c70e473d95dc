#pragma once
// What a file is, before HDF5 is asked to open it: the plain-words answer for files HDF5 would only describe by its
// internals (an empty file, one cut short, one that is something else).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>

namespace flashot::io::h5 {

/// The problem with an HDF5 file whose first bytes are `head` (up to a few KiB) and whose size is `size`, judged
/// from the superblock alone; nullopt when it looks whole. `read(offset, n, out)` fetches other bytes (the
/// superblock may sit at 512, 1024, … after a user block). Answers: "empty, 0 bytes", "truncated: N of M bytes"
/// (M = the superblock's end-of-file address), "not an HDF5 file (<what it looks like>)".
std::optional<std::string> hdf5_file_problem(std::uint64_t size,
                                             const std::function<bool(std::uint64_t, std::size_t, std::byte*)>& read);

/// The same for a file on disk (IoError-worthy problems such as a missing file are left to the caller).
std::optional<std::string> hdf5_file_problem(const std::filesystem::path& path);
/// The same for an image in memory.
std::optional<std::string> hdf5_file_problem(std::span<const std::byte> image);

/// What a folder given as an .h5ad is, when recognisable ("a zarr store"), else "".
std::string describe_folder(const std::filesystem::path& path);

}  // namespace flashot::io::h5
