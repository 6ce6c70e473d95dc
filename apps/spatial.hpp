#pragma once
// `flashot align --spatial KEY`: fused Gromov–Wasserstein alignment of two tissue slices (apps/spatial.cpp,
// docs/cli.md, docs/gromov-wasserstein.md). align.cpp adds these options and hands over when --spatial is given.

#include "cli.hpp"

namespace flashot::cli {

/// --spatial, --alpha, --model, --max-outer, --outer-tol.
void add_spatial_options(po::options_description& options);
/// Runs the spatial alignment with align's parsed options; returns the exit code or throws like align_main.
int align_spatial_main(const po::variables_map& vm);

}  // namespace flashot::cli
