// `flashot align` and `info` on AnnData zarr stores (docs/io-zarr.md): the committed batches converted to a folder
// store and a .zarr.zip, aligned into a .zarr output, must give what the .h5ad run gives; outputs that would write
// into (or replace) an input store are refused before any work.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"
#include "run_command.hpp"

namespace flashot::test {
namespace {

namespace fs = std::filesystem;
const fs::path kSamples = FLASHOT_SAMPLES;

TEST(AlignZarr, ZarrInputsAndOutputsMatchTheH5adRun) {
  const fs::path dir = fresh_folder();
  const fs::path b = dir / "b.zarr", a = dir / "a.zarr.zip";
  io::write_h5ad_copy(kSamples / "cells_batch_b.h5ad", b, {});  // .h5ad → zarr (format 3)
  io::H5adContent v2;
  v2.zarr_format = 2;
  io::write_h5ad_copy(kSamples / "cells_batch_a.h5ad", a, v2);
  const CommandResult info = run_flashot({"info", b.string()});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("zarr format 3"), std::string::npos) << info.out;

  const std::vector<std::string> common = {"--transfer-labels", "cell_type", "--backend", "cpu"};
  auto args = [&](const fs::path& src, const fs::path& tgt, const fs::path& out, const fs::path& coupling) {
    std::vector<std::string> v = {"align", src.string(), tgt.string(), "-o", out.string(), "--coupling", coupling.string()};
    v.insert(v.end(), common.begin(), common.end());
    return v;
  };
  const CommandResult z = run_flashot(args(b, a, dir / "b_aligned.zarr", dir / "coupling.zarr.zip"));
  ASSERT_EQ(z.exit_code, 0) << z.err;
  const CommandResult h = run_flashot(args(kSamples / "cells_batch_b.h5ad", kSamples / "cells_batch_a.h5ad",
                                           dir / "b_aligned.h5ad", dir / "coupling.h5ad"));
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_TRUE(fs::is_directory(dir / "b_aligned.zarr"));
  EXPECT_TRUE(fs::is_regular_file(dir / "coupling.zarr.zip"));
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name[0] != '.') << "left behind: " << name;
  }
  const io::H5adReader zr(dir / "b_aligned.zarr"), hr(dir / "b_aligned.h5ad");
  EXPECT_EQ(zr.obs_names(), hr.obs_names());
  EXPECT_EQ(zr.read_obsm("X_pca_flashot").values, hr.read_obsm("X_pca_flashot").values);
  EXPECT_EQ(zr.read_obs("cell_type_flashot").codes, hr.read_obs("cell_type_flashot").codes);
  EXPECT_EQ(zr.read_obsm("X_pca").values, hr.read_obsm("X_pca").values);
  const io::H5adReader zc(dir / "coupling.zarr.zip"), hc(dir / "coupling.h5ad");
  const io::SparseMatrix cz = zc.read_x_sparse(), ch = hc.read_x_sparse();
  EXPECT_EQ(cz.indptr, ch.indptr);
  EXPECT_EQ(cz.indices, ch.indices);
  EXPECT_EQ(cz.data, ch.data);

  // run again over the existing store: replaced whole
  const CommandResult again = run_flashot(args(b, a, dir / "b_aligned.zarr", dir / "coupling.zarr.zip"));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(io::H5adReader(dir / "b_aligned.zarr").read_obsm("X_pca_flashot").values, hr.read_obsm("X_pca_flashot").values);

  // outputs that are, or lie inside, an input store; a folder that is no store
  const CommandResult same = run_flashot(args(b, a, b.string() + "/", dir / "c1.zarr.zip"));
  EXPECT_NE(same.exit_code, 0);
  EXPECT_NE(same.err.find("is the input SOURCE"), std::string::npos) << same.err;
  const CommandResult inner = run_flashot(args(b, a, b / "obsm" / "x.zarr", dir / "c2.zarr.zip"));
  EXPECT_NE(inner.exit_code, 0);
  EXPECT_NE(inner.err.find("lies inside the input SOURCE"), std::string::npos) << inner.err;
  fs::create_directories(dir / "photos.zarr");
  std::ofstream(dir / "photos.zarr" / "holiday.jpg") << "x";
  const CommandResult folder = run_flashot(args(b, a, dir / "photos.zarr", dir / "c3.zarr.zip"));
  EXPECT_NE(folder.exit_code, 0);
  EXPECT_NE(folder.err.find("is a folder that is not a zarr store"), std::string::npos) << folder.err;
  EXPECT_TRUE(fs::exists(dir / "photos.zarr" / "holiday.jpg"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace flashot::test
