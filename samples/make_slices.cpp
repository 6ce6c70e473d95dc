// Writes the sample pair of synthetic tissue slices (samples/README.md): slice_a.h5ad (source) and slice_b.h5ad
// (target), cells of five types in curved layers and an off-centre blob, a 10-d embedding (obsm X_pca), spatial
// coordinates in micrometres (obsm spatial), obs cell_type. Slice B is another sample of the same tissue, with
// more cells, deformed by 1% of the width, rotated by 30° and translated by (250, −150) µm. Fixed seed.
// usage: flashot_make_slices OUTDIR
#include <cmath>
#include <filesystem>
#include <iostream>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"

namespace {

constexpr double kWidth = 1000;  // µm
constexpr double kRotationDegrees = 30;
constexpr double kShift[2] = {250, -150};
constexpr double kDeformation = 0.01;
constexpr std::size_t kEmbedding = 10;
const std::vector<std::string> kTypes = {"layer 1", "layer 2", "layer 3", "layer 4", "nodule"};

// The layout of tests/support/slices.cpp (the same tissue the engine tests recover).
int region(double px, double py) {
  if ((px - 0.2) * (px - 0.2) + (py - 0.18) * (py - 0.18) < 0.15 * 0.15) return 4;
  const double s = py + 0.12 * std::sin(std::numbers::pi * (1.3 * px + 0.4)) + 0.25 * px * px;
  const int band = static_cast<int>(std::floor((s + 0.6) / 0.3));
  return band < 0 ? 0 : (band > 3 ? 3 : band);
}

void write_slice(const std::filesystem::path& path, std::mt19937_64& rng, const std::vector<double>& means,
                 std::size_t n, bool moved, const std::string& prefix) {
  std::normal_distribution<double> normal(0, 1);
  std::uniform_real_distribution<double> unit(-0.5, 0.5);
  flashot::io::H5adContent content;
  flashot::io::DenseMatrix spatial{n, 2, std::vector<float>(n * 2)};
  flashot::io::DenseMatrix pca{n, kEmbedding, std::vector<float>(n * kEmbedding)};
  flashot::io::Column type;
  type.kind = flashot::io::Column::Kind::kCategorical;
  type.categories = kTypes;
  const double th = kRotationDegrees * std::numbers::pi / 180, cs = std::cos(th), sn = std::sin(th);
  // Tissue positions, re-centred so that the sample's centroid is the tissue's centre: the known translation is
  // then the true one between the samples too (uncentred, two random samples' centroids differ by ~1% of the width).
  std::vector<double> pos(2 * n);
  double mean[2] = {0, 0};
  for (std::size_t i = 0; i < n; ++i)
    for (int c = 0; c < 2; ++c) mean[c] += (pos[2 * i + c] = unit(rng)) / double(n);
  for (std::size_t i = 0; i < n; ++i) {
    content.obs_names.push_back(prefix + "_cell" + std::to_string(i));
    const double px = pos[2 * i] - mean[0], py = pos[2 * i + 1] - mean[1];
    const int t = region(px, py);
    type.codes.push_back(t);
    for (std::size_t c = 0; c < kEmbedding; ++c)
      pca.values[i * kEmbedding + c] = float(means[t * kEmbedding + c] + 0.3 * normal(rng));
    double qx = px, qy = py;
    if (moved) {
      const double a = kDeformation / (2 * std::numbers::pi);
      qx = px + a * std::sin(2 * std::numbers::pi * px);
      qy = py + a * std::sin(2 * std::numbers::pi * py);
      spatial.values[2 * i] = float(kWidth * (cs * qx - sn * qy) + kShift[0]);
      spatial.values[2 * i + 1] = float(kWidth * (sn * qx + cs * qy) + kShift[1]);
    } else {
      spatial.values[2 * i] = float(kWidth * qx);
      spatial.values[2 * i + 1] = float(kWidth * qy);
    }
  }
  content.var_names = {"g0"};
  content.obsm.emplace("spatial", std::move(spatial));
  content.obsm.emplace("X_pca", std::move(pca));
  content.obs.emplace("cell_type", std::move(type));
  content.uns.emplace("generator", std::string("flashot samples/make_slices.cpp"));
  if (moved) {
    content.uns.emplace("true_rotation_degrees", std::vector<double>{kRotationDegrees});
    content.uns.emplace("true_translation", std::vector<double>{kShift[0], kShift[1]});
  }
  flashot::io::write_h5ad(path, content);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: flashot_make_slices OUTDIR\n";
    return 2;
  }
  try {
    std::mt19937_64 rng(2024);
    std::normal_distribution<double> normal(0, 1);
    std::vector<double> means(kTypes.size() * kEmbedding);
    for (double& v : means) v = 2 * normal(rng);
    write_slice(std::filesystem::path(argv[1]) / "slice_a.h5ad", rng, means, 1200, false, "A");
    write_slice(std::filesystem::path(argv[1]) / "slice_b.h5ad", rng, means, 1500, true, "B");
  } catch (const std::exception& e) {
    std::cerr << "flashot_make_slices: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
