#pragma once
// The second line of defence against hostile files (docs/io-h5ad.md, "Hostile files"): before the reader uses a
// file, a forked child opens it and walks all of its metadata the way the reader will (every object reachable from
// the root, every attribute opened and read, object references followed). HDF5 1.10.8 has faults in code that
// flashot cannot replace (object-header and attribute-message decoding trusts lengths in the file); if one of them
// kills the child, or the child does not finish in time, or it comes near its memory ceiling, the parent never runs
// that code and reports the file as corrupt instead of crashing, hanging or exhausting memory.

#include <chrono>
#include <optional>
#include <string>

namespace flashot::io::h5 {

struct FileRef;

/// nullopt when the walk finished (HDF5 errors included: the reader reports those itself); else the problem
/// ("corrupt file: HDF5 crashed reading its metadata (signal 11, Segmentation fault, …)", "… did not finish …",
/// "… needed more than 256 MB …"). `file` gives the path or the in-memory image; `limit` bounds the child's time.
std::optional<std::string> crash_in_isolated_walk(const FileRef& file, std::chrono::seconds limit);

}  // namespace flashot::io::h5
