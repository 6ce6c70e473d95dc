// libFuzzer target for the .h5ad reader: an HDF5 file image from memory (HDF5's core driver) goes through the same
// reader code as a file on disk, and every accessor is exercised. Only flashot's own errors may come out; any
// other exception, a crash or a sanitizer report is a finding.

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"
#include "flashot/io/errors.hpp"

namespace {

// Dense reads of sparse matrices allocate rows·cols; a fuzzed shape attribute must not turn into gigabytes.
constexpr std::size_t kMaxDenseElements = std::size_t{1} << 22;

template <typename F>
void guarded(F&& f) {
  try {
    f();
  } catch (const flashot::io::FormatError&) {
  } catch (const flashot::io::IoError&) {
  }
}

bool small(const std::optional<flashot::io::ArrayInfo>& info) {
  return info && info->cols != 0 && info->rows <= kMaxDenseElements / info->cols;
}

}  // namespace

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

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace flashot::io;
  guarded([&] {
    const H5adReader r = H5adReader::from_image(std::as_bytes(std::span(data, size)), "fuzz.h5ad");
    (void)r.writer_generation();
    guarded([&] { (void)r.n_obs(); });
    guarded([&] { (void)r.n_vars(); });
    guarded([&] { (void)r.obs_names(); });
    guarded([&] { (void)r.var_names(); });
    guarded([&] {
      const auto x = r.x_info();
      if (!small(x)) return;
      guarded([&] { (void)r.read_x_dense(); });
      guarded([&] { (void)r.read_x_sparse(); });
      const std::size_t cols[] = {0};
      guarded([&] { (void)r.read_x_columns(cols); });
    });
    guarded([&] {
      for (const auto& key : r.obsm_keys()) {
        guarded([&] {
          const auto info = r.obsm_info(key);
          if (!small(info)) return;
          (void)r.read_obsm(key);
          // The caller-memory read takes another route through HDF5 (one read into `out`): fuzz it too, with the
          // size obsm_info announced (a wrong size must throw before anything is read).
          std::vector<float> out(info->rows * info->cols);
          guarded([&] { r.read_obsm_into(key, out); });
          // std::invalid_argument is its documented answer to a buffer of the wrong size (only there).
          std::vector<float> wrong(out.size() + 1);
          guarded([&] {
            try {
              r.read_obsm_into(key, wrong);
            } catch (const std::invalid_argument&) {
            }
          });
        });
      }
    });
    guarded([&] {
      for (const auto& column : r.obs_columns()) guarded([&] { (void)r.read_obs(column); });
    });
    guarded([&] {
      for (const auto& column : r.var_columns()) guarded([&] { (void)r.read_var(column); });
    });
    guarded([&] {
      for (const auto& key : r.uns_keys()) guarded([&] { (void)r.read_uns(key); });
    });
    guarded([&] {
      for (const auto& key : r.layer_keys()) {
        guarded([&] {
          if (small(r.layer_info(key))) (void)r.read_layer(key);
        });
      }
    });
    guarded([&] {
      if (r.has_raw() && small(r.raw_x_info())) (void)r.read_raw_x_dense();
    });
  });
  return 0;
}
