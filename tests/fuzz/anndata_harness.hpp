#pragma once
// The body shared by the AnnData fuzz targets (fuzz_h5ad.cpp, fuzz_zarr.cpp): every accessor of a reader that has
// opened a fuzzed input, each in its own guard so one refusal does not hide the others. Only flashot's own errors
// may come out (and std::invalid_argument where an accessor documents it); anything else is a finding.

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <vector>

#include "flashot/io/anndata.hpp"
#include "flashot/io/errors.hpp"

namespace flashot::fuzz {

// Metadata may claim any shape (a sparse X's shape attribute, zarr chunks that are absent and read as the fill
// value): a fuzzed claim must not turn into gigabytes, so reads are only asked of small elements.
constexpr std::size_t kMaxElements = std::size_t{1} << 22;

template <typename F>
void guarded(F&& f) {
  try {
    f();
  } catch (const flashot::io::FormatError&) {
  } catch (const flashot::io::IoError&) {
  }
}

// std::invalid_argument is the documented answer of read_x_columns (a column outside X) and read_obsm_into (a
// buffer of the wrong size), and only of those.
template <typename F>
void guarded_argument(F&& f) {
  guarded([&] {
    try {
      f();
    } catch (const std::invalid_argument&) {
    }
  });
}

inline bool small(const std::optional<flashot::io::ArrayInfo>& info) {
  return info && info->rows <= kMaxElements && (info->cols == 0 || info->rows <= kMaxElements / info->cols);
}

// Every accessor of `r` (an io::H5adReader or a zarr::AnnData), on whatever it opened.
template <typename Reader>
void exercise(const Reader& r) {
  (void)r.writer_generation();
  std::size_t obs = kMaxElements + 1, vars = kMaxElements + 1;
  guarded([&] { obs = r.n_obs(); });
  guarded([&] { vars = r.n_vars(); });
  if (obs <= kMaxElements) guarded([&] { (void)r.obs_names(); });
  if (vars <= kMaxElements) guarded([&] { (void)r.var_names(); });
  guarded([&] {
    const auto x = r.x_info();
    if (!small(x)) return;
    guarded([&] { (void)r.read_x_dense(); });
    guarded([&] { (void)r.read_x_sparse(); });
    const std::size_t cols[] = {0};
    guarded_argument([&] { (void)r.read_x_columns(cols); });
  });
  guarded([&] {
    for (const auto& key : r.obsm_keys()) {
      guarded([&] {
        const auto info = r.obsm_info(key);
        if (!small(info)) return;
        (void)r.read_obsm(key);
        // The caller-memory read takes another route (one read into `out`): fuzz it too, with the size obsm_info
        // announced, then a wrong size (which must throw before anything is read).
        std::vector<float> out(info->rows * info->cols);
        guarded_argument([&] { r.read_obsm_into(key, out); });
        std::vector<float> wrong(out.size() + 1);
        guarded_argument([&] { r.read_obsm_into(key, wrong); });
      });
    }
  });
  if (obs <= kMaxElements) {
    guarded([&] {
      for (const auto& column : r.obs_columns()) guarded([&] { (void)r.read_obs(column); });
    });
  }
  if (vars <= kMaxElements) {
    guarded([&] {
      for (const auto& column : r.var_columns()) guarded([&] { (void)r.read_var(column); });
    });
  }
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
}

}  // namespace flashot::fuzz
