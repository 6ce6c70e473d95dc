#pragma once
// The second line of defence against hostile files (docs/io-h5ad.md, "Hostile files"): before the reader uses a
// file, a forked child opens it and walks all of its metadata the way the reader will (every object reachable from
// the root, every attribute opened and read, object references followed). HDF5 1.10.8 has faults in code that
// flashot cannot replace (object-header and attribute-message decoding trusts lengths in the file); if one of them
// kills the child, or the child does not finish in time, or it comes near its memory ceiling, the parent never runs
// that code and reports the file as corrupt instead of crashing, hanging or exhausting memory. The child also
// hands the parent every attribute it decoded (a table), so the reader's process never decodes an attribute
// message of a file it reads: those decoders fault on damaged headers in ways a walk that survived does not rule
// out (the order of calls matters to them).

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "h5/h5.hpp"

namespace flashot::io::h5 {

struct WalkResult {
  /// nullopt when the walk finished (HDF5 errors included: the reader reports those itself); else the problem
  /// ("corrupt file: HDF5 crashed reading its metadata (signal 11, Segmentation fault, …)", "… did not finish …",
  /// "… needed more than 256 MB …").
  std::optional<std::string> problem;
  /// Every attribute of every object the walk reached, decoded in the child (FileRef::attributes); empty when HDF5
  /// could not open the file there; nullptr when there is a problem or the process could not fork.
  std::shared_ptr<const AttributeTable> attributes;
};

/// Walks `file` (its path or in-memory image) in a forked child that `limit` bounds.
WalkResult isolated_walk(const FileRef& file, std::chrono::seconds limit);

}  // namespace flashot::io::h5
