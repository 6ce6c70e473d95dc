#pragma once
// The small argument checks both front ends (apps/, gui/) and the workflow layer use, defined once: each throws
// std::invalid_argument naming what was checked and the value it got. (The engine keeps its own, private one:
// engine/src/validation.hpp.)

#include <filesystem>
#include <string>

#include "flashot/workflow/dataset.hpp"

namespace flashot::workflow {

/// Throws std::invalid_argument("<what> (got <value>)") unless `ok`, e.g.
/// require(steps >= 1, "steps must be ≥ 1", steps).
void require(bool ok, const std::string& what, double value);

/// Throws std::invalid_argument("<what> <path> must be .h5ad|.ply") unless `path` has the extension of `kind`
/// (any case), e.g. require_extension(out, FileKind::kH5ad, "--coupling").
void require_extension(const std::filesystem::path& path, FileKind kind, const std::string& what);

}  // namespace flashot::workflow
