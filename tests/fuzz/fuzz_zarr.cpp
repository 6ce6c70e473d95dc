// libFuzzer target for the zarr reader (docs/io-zarr.md): the input is a .zarr.zip archive in memory, so one input
// exercises the zip central-directory reader, the metadata JSON (consolidated or per node, format 2 and 3), the codec
// chains, chunk keys, shard indices and the AnnData decoding, through every accessor. Only flashot's own errors may
// come out; any other exception, a crash, a hang or a sanitizer report is a finding.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"
#include "flashot/io/errors.hpp"
#include "zarr/anndata_zarr.hpp"

namespace {

// Metadata may claim any shape (chunks that are absent read as the fill value, so a claim costs nothing on disk): a
// fuzzed shape must not turn into gigabytes of fill, so reads are only asked of small elements.
constexpr std::size_t kMaxElements = std::size_t{1} << 22;

template <typename F>
void guarded(F&& f) {
  try {
    f();
  } catch (const flashot::io::FormatError&) {
  } catch (const flashot::io::IoError&) {
  }
}

bool small(const std::optional<flashot::io::ArrayInfo>& info) {
  return info && info->rows <= kMaxElements && (info->cols == 0 || info->rows <= kMaxElements / info->cols);
}

}  // namespace

extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1:abort_on_error=1"; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace flashot::io;
  guarded([&] {
    std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
    // Entries' CRC-32 unchecked: a mutated JSON or shard must reach its parser, not fail the zip checksum.
    const auto r = zarr::AnnData::from_zip_image(std::move(bytes), "fuzz.zarr.zip", false);
    (void)r->writer_generation();
    std::size_t obs = kMaxElements + 1, vars = kMaxElements + 1;
    guarded([&] { obs = r->n_obs(); });
    guarded([&] { vars = r->n_vars(); });
    if (obs <= kMaxElements) guarded([&] { (void)r->obs_names(); });
    if (vars <= kMaxElements) guarded([&] { (void)r->var_names(); });
    guarded([&] {
      const auto x = r->x_info();
      if (!small(x)) return;
      guarded([&] { (void)r->read_x_dense(); });
      guarded([&] { (void)r->read_x_sparse(); });
      const std::size_t cols[] = {0};
      guarded([&] {
        try {
          (void)r->read_x_columns(cols);
        } catch (const std::invalid_argument&) {  // its documented answer to a column outside X
        }
      });
    });
    guarded([&] {
      for (const auto& key : r->obsm_keys()) {
        guarded([&] {
          const auto info = r->obsm_info(key);
          if (!small(info)) return;
          (void)r->read_obsm(key);
          std::vector<float> out(info->rows * info->cols);
          guarded([&] {
            try {
              r->read_obsm_into(key, out);
            } catch (const std::invalid_argument&) {
            }
          });
        });
      }
    });
    if (obs <= kMaxElements) {
      guarded([&] {
        for (const auto& column : r->obs_columns()) guarded([&] { (void)r->read_obs(column); });
      });
    }
    if (vars <= kMaxElements) {
      guarded([&] {
        for (const auto& column : r->var_columns()) guarded([&] { (void)r->read_var(column); });
      });
    }
    guarded([&] {
      for (const auto& key : r->uns_keys()) guarded([&] { (void)r->read_uns(key); });
    });
    guarded([&] {
      for (const auto& key : r->layer_keys()) {
        guarded([&] {
          if (small(r->layer_info(key))) (void)r->read_layer(key);
        });
      }
    });
    guarded([&] {
      if (r->has_raw() && small(r->raw_x_info())) (void)r->read_raw_x_dense();
    });
  });
  return 0;
}
