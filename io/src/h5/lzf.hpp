#pragma once
// LZF (HDF5 filter 32000) decoding for anndata 0.7 files when the system's LZF plugin is missing or broken.

#include <hdf5.h>

namespace flashot::io::h5 {

/// Registers flashot's LZF decoder with HDF5 unless a working LZF filter is already available. Idempotent.
void register_builtin_lzf();

}  // namespace flashot::io::h5
