// libFuzzer target for the zarr reader (docs/io-zarr.md): the input is a .zarr.zip archive in memory, so one input
// exercises the zip central-directory reader, the metadata JSON (consolidated or per node, format 2 and 3), the codec
// chains, chunk keys, shard indices and the AnnData decoding, through every accessor. Only flashot's own errors may
// come out; any other exception, a crash, a hang or a sanitizer report is a finding.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "anndata_harness.hpp"
#include "zarr/anndata_zarr.hpp"

extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1:abort_on_error=1"; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  flashot::fuzz::guarded([&] {
    std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
    // Entries' CRC-32 unchecked: a mutated JSON or shard must reach its parser, not fail the zip checksum.
    const auto r = flashot::io::zarr::AnnData::from_zip_image(std::move(bytes), "fuzz.zarr.zip", false);
    flashot::fuzz::exercise(*r);
  });
  return 0;
}
