// libFuzzer target for the .h5ad reader: an HDF5 file image from memory (HDF5's core driver) goes through the same
// reader code as a file on disk, and every accessor is exercised. Only flashot's own errors may come out; any
// other exception, a crash or a sanitizer report is a finding.

#include <cstddef>
#include <cstdint>
#include <span>

#include <hdf5.h>

#include "anndata_harness.hpp"

// HDF5 1.10.8 itself leaks on some corrupt inputs: when loading a damaged object header into its metadata cache
// fails half-way, the entry allocated under H5C_protect is dropped (seen with a plain H5Oopen on such an input).
// libhdf5 has no frame pointers, so a leak's fast-unwound stack ends at its first libhdf5 frame and cannot be told
// apart by function: the suppression names the library. flashot owns no raw allocations (RAII throughout), so
// leaks of its own still show as stacks through flashot's code into libc++/libstdc++.
extern "C" const char* __lsan_default_suppressions() { return "leak:libhdf5_serial.so\n"; }

// HDF5 sizes some metadata-cache buffers from lengths in the file before it checks them against the file's end
// (H5C_load_entry mallocs, then its read fails past the end-of-file address, which flashot has checked against the
// file's real size before opening). In a release build such a malloc of petabytes returns NULL and HDF5 reports
// "memory allocation failed" (tests/io/data/hostile/fuzz_huge_cache_entry.h5ad); under ASan it would abort
// instead, so the fuzz target gets the release behaviour. libFuzzer's own malloc limit is raised for the same
// reason (run_fuzz.cmake); the RSS limit still catches memory that is really used.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1:abort_on_error=1"; }

// HDF5 keeps freed blocks on free lists of its own and hands them out again: a use-after-free inside HDF5 then reads
// a live block, and whether it ever reaches freed memory that ASan sees depends on what earlier inputs left on those
// lists. Without the free lists every such read is seen at once, by the isolated walk's child first, and an input
// behaves the same whatever ran before it (a CI run found a use-after-free under H5Aexists that no single input
// reproduced).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5set_free_list_limits(0, 0, 0, 0, 0, 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  flashot::fuzz::guarded([&] {
    const auto r = flashot::io::H5adReader::from_image(std::as_bytes(std::span(data, size)), "fuzz.h5ad");
    flashot::fuzz::exercise(r);
  });
  return 0;
}
