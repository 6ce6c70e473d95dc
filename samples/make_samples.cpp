// Writes flashot's sample data, deterministically (fixed seeds; libstdc++'s distributions):
//   cells_batch_a.h5ad, cells_batch_b.h5ad  two synthetic single-cell batches of the same 6 cell types; batch B is
//                                           batch A's biology moved by a known batch shift (uns/batch_shift) with
//                                           other cell-type proportions and a partly different gene panel.
//   shape.ply, shape_scan.ply               an asymmetric 3-D shape, and a noisy partial "scan" of it moved by a
//                                           known rotation and translation (recorded in the scan's comments).
// usage: flashot_make_samples OUTPUT_FOLDER   (see samples/README.md)

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"
#include "flashot/io/ply.hpp"

namespace {

constexpr std::size_t kPcaDims = 30;
constexpr std::size_t kGenes = 150;
constexpr std::size_t kPanelDifference = 10;  // genes batch B measures instead of batch A's last ten
const std::vector<std::string> kCellTypes = {"B cell", "CD4 T", "CD8 T", "NK", "monocyte", "dendritic"};
constexpr std::size_t kCellsA = 2400;
constexpr std::size_t kCellsB = 2000;
const std::vector<double> kProportionsA = {0.22, 0.24, 0.16, 0.12, 0.18, 0.08};
const std::vector<double> kProportionsB = {0.18, 0.26, 0.14, 0.14, 0.20, 0.08};
constexpr double kScanRotationDegrees = 30.0;
const std::array<double, 3> kScanAxis = {1.0, 2.0, 3.0};
const std::array<double, 3> kScanTranslation = {0.3, -0.2, 0.1};
constexpr double kScanNoise = 0.005;
constexpr std::size_t kShapePoints = 3000;

// Per-component scales that fall off like the variance explained by principal components.
double component_scale(std::size_t k, double top, double length) { return top * std::exp(-double(k) / length); }

struct Biology {
  std::vector<std::vector<double>> centres;    // (types × kPcaDims)
  std::vector<std::vector<double>> expression; // (types × kGenes) mean log-expression
};

Biology make_biology(std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0, 1);
  Biology b;
  for (std::size_t t = 0; t < kCellTypes.size(); ++t) {
    std::vector<double> centre(kPcaDims);
    for (std::size_t k = 0; k < kPcaDims; ++k) centre[k] = normal(rng) * component_scale(k, 6.0, 6.0);
    b.centres.push_back(centre);
    std::vector<double> genes(kGenes);
    for (std::size_t g = 0; g < kGenes; ++g) genes[g] = 0.3 + 0.3 * std::abs(normal(rng));
    // Each type has its marker genes, strongly up.
    for (std::size_t g = t * 15; g < t * 15 + 15; ++g) genes[g] += 2.0;
    b.expression.push_back(genes);
  }
  return b;
}

std::vector<std::int32_t> draw_types(std::mt19937_64& rng, std::size_t cells, const std::vector<double>& p) {
  std::discrete_distribution<std::int32_t> pick(p.begin(), p.end());
  std::vector<std::int32_t> types(cells);
  for (auto& t : types) t = pick(rng);
  return types;
}

void write_batch(const std::filesystem::path& path, std::mt19937_64& rng, const Biology& biology,
                 const std::vector<std::int32_t>& types, const std::vector<double>& shift, const std::string& batch,
                 const std::vector<std::string>& genes, std::size_t gene_offset_b) {
  std::normal_distribution<double> normal(0, 1);
  const std::size_t n = types.size();
  flashot::io::H5adContent content;
  for (std::size_t i = 0; i < n; ++i) content.obs_names.push_back(batch + "_cell" + std::to_string(i));
  content.var_names = genes;

  flashot::io::DenseMatrix pca{n, kPcaDims, std::vector<float>(n * kPcaDims)};
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < kPcaDims; ++k) {
      const double noise = normal(rng) * (0.25 + component_scale(k, 0.9, 12.0));
      pca.values[i * kPcaDims + k] = float(biology.centres[std::size_t(types[i])][k] + shift[k] + noise);
    }
  }
  // A UMAP-like picture: the first two components, squeezed so that clusters look like islands.
  flashot::io::DenseMatrix umap{n, 2, std::vector<float>(n * 2)};
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < 2; ++k) {
      const double v = pca.values[i * kPcaDims + k];
      umap.values[i * 2 + k] = float(std::copysign(std::pow(std::abs(v), 0.8), v));
    }
  }
  content.obsm.emplace("X_pca", std::move(pca));
  content.obsm.emplace("X_umap", std::move(umap));

  // X: sparse log1p counts. Genes from `gene_offset_b` on are batch-specific (not shared).
  flashot::io::SparseMatrix x;
  x.rows = n;
  x.cols = genes.size();
  x.indptr.push_back(0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t g = 0; g < genes.size(); ++g) {
      const double mean = g < gene_offset_b ? biology.expression[std::size_t(types[i])][g] : 0.5;
      std::poisson_distribution<int> counts(std::expm1(mean) * 0.6);
      const int c = counts(rng);
      if (c == 0) continue;
      x.indices.push_back(std::int64_t(g));
      x.data.push_back(float(std::log1p(double(c))));
    }
    x.indptr.push_back(std::int64_t(x.data.size()));
  }
  content.x_sparse = std::move(x);

  flashot::io::Column cell_type;
  cell_type.kind = flashot::io::Column::Kind::kCategorical;
  cell_type.categories = kCellTypes;
  cell_type.codes = types;
  content.obs.emplace("cell_type", std::move(cell_type));
  flashot::io::Column batch_column;
  batch_column.kind = flashot::io::Column::Kind::kCategorical;
  batch_column.categories = {batch};
  batch_column.codes.assign(n, 0);
  content.obs.emplace("batch", std::move(batch_column));
  content.uns.emplace("batch_shift", shift);
  content.uns.emplace("generator", std::string("flashot samples/make_samples.cpp"));
  flashot::io::write_h5ad(path, content);
}

struct Vec3 {
  double x, y, z;
};

// An asymmetric shape with no rotational symmetry: an ellipsoid body, a spherical head off one end, a
// curved tail and a fin. Points on the surfaces, area-proportional enough for registration.
std::vector<Vec3> make_shape(std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0, 1);
  std::uniform_real_distribution<double> uniform(0, 1);
  const auto on_sphere = [&] {
    Vec3 v{normal(rng), normal(rng), normal(rng)};
    const double r = std::sqrt(v.x * v.x + v.y * v.y + v.z * v.z);
    return Vec3{v.x / r, v.y / r, v.z / r};
  };
  std::vector<Vec3> points;
  for (std::size_t i = 0; i < kShapePoints; ++i) {
    const double part = uniform(rng);
    if (part < 0.55) {  // body
      const Vec3 s = on_sphere();
      points.push_back({0.6 * s.x, 0.35 * s.y, 0.25 * s.z});
    } else if (part < 0.75) {  // head
      const Vec3 s = on_sphere();
      points.push_back({0.7 + 0.2 * s.x, 0.15 + 0.2 * s.y, 0.1 + 0.2 * s.z});
    } else if (part < 0.9) {  // tail: a bent tube
      const double t = uniform(rng), angle = 2 * M_PI * uniform(rng);
      const double cx = -0.55 - 0.4 * t, cy = -0.3 * t * t, cz = 0.25 * t;
      points.push_back({cx, cy + 0.05 * std::cos(angle), cz + 0.05 * std::sin(angle)});
    } else {  // fin: a thin triangle on top
      double u = uniform(rng), v = uniform(rng);
      if (u + v > 1) u = 1 - u, v = 1 - v;
      points.push_back({-0.1 + 0.4 * u - 0.2 * v, 0.02 * normal(rng), 0.22 + 0.35 * v});
    }
  }
  return points;
}

void write_cloud(const std::filesystem::path& path, const std::vector<Vec3>& points, std::vector<std::string> comments,
                 const std::vector<double>& part) {
  std::vector<float> xyz;
  for (const Vec3& p : points) xyz.insert(xyz.end(), {float(p.x), float(p.y), float(p.z)});
  flashot::io::PlyFile ply = flashot::io::make_point_cloud(xyz, points.size());
  ply.format = flashot::io::PlyFormat::kBinaryLittleEndian;
  ply.comments = std::move(comments);
  flashot::io::PlyElement& vertex = *ply.find("vertex");
  vertex.properties.push_back({"part", flashot::io::PlyType::kUint8, false, flashot::io::PlyType::kUint8, part, {}});
  flashot::io::write_ply(path, ply);
}

double part_of(const Vec3& p) {
  if (p.x > 0.55 && p.y > -0.1) return 1;  // head (and the body's nose, near it)
  if (p.x < -0.55) return 2;               // tail
  if (p.z > 0.22) return 3;                // fin
  return 0;                                // body
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: flashot_make_samples OUTPUT_FOLDER\n");
    return 2;
  }
  try {
    const std::filesystem::path out = argv[1];
    std::mt19937_64 rng(20260401);
    const Biology biology = make_biology(rng);
    std::vector<std::string> genes_a, genes_b;
    for (std::size_t g = 0; g < kGenes; ++g) {
      char name[16];
      std::snprintf(name, sizeof name, "G%03zu", g);
      genes_a.push_back(name);
      genes_b.push_back(g < kGenes - kPanelDifference ? std::string(name) : "B" + std::string(name + 1));
    }
    std::normal_distribution<double> normal(0, 1);
    std::vector<double> shift(kPcaDims);
    for (std::size_t k = 0; k < kPcaDims; ++k) shift[k] = normal(rng) * component_scale(k, 2.0, 6.0);
    const std::vector<double> no_shift(kPcaDims, 0.0);
    write_batch(out / "cells_batch_a.h5ad", rng, biology, draw_types(rng, kCellsA, kProportionsA), no_shift, "A",
                genes_a, kGenes);
    write_batch(out / "cells_batch_b.h5ad", rng, biology, draw_types(rng, kCellsB, kProportionsB), shift, "B",
                genes_b, kGenes - kPanelDifference);

    const std::vector<Vec3> shape = make_shape(rng);
    std::vector<double> parts;
    for (const Vec3& p : shape) parts.push_back(part_of(p));
    write_cloud(out / "shape.ply", shape, {"flashot sample shape (samples/make_samples.cpp)"}, parts);
    // The scan: the points with x < 0.45 (the head is cut off), noise, then y = R x + t.
    const double norm = std::sqrt(kScanAxis[0] * kScanAxis[0] + kScanAxis[1] * kScanAxis[1] + kScanAxis[2] * kScanAxis[2]);
    const double ux = kScanAxis[0] / norm, uy = kScanAxis[1] / norm, uz = kScanAxis[2] / norm;
    const double angle = kScanRotationDegrees * M_PI / 180, c = std::cos(angle), s = std::sin(angle);
    const double r[3][3] = {{c + ux * ux * (1 - c), ux * uy * (1 - c) - uz * s, ux * uz * (1 - c) + uy * s},
                            {uy * ux * (1 - c) + uz * s, c + uy * uy * (1 - c), uy * uz * (1 - c) - ux * s},
                            {uz * ux * (1 - c) - uy * s, uz * uy * (1 - c) + ux * s, c + uz * uz * (1 - c)}};
    std::vector<Vec3> scan;
    std::vector<double> scan_parts;
    for (const Vec3& p : shape) {
      if (p.x >= 0.45) continue;
      const Vec3 q{p.x + kScanNoise * normal(rng), p.y + kScanNoise * normal(rng), p.z + kScanNoise * normal(rng)};
      scan.push_back({r[0][0] * q.x + r[0][1] * q.y + r[0][2] * q.z + kScanTranslation[0],
                      r[1][0] * q.x + r[1][1] * q.y + r[1][2] * q.z + kScanTranslation[1],
                      r[2][0] * q.x + r[2][1] * q.y + r[2][2] * q.z + kScanTranslation[2]});
      scan_parts.push_back(part_of(p));
    }
    char rotation[160], translation[120], noise[80];
    std::snprintf(rotation, sizeof rotation, "scan = R * shape + t, R: %.1f degrees about axis (%g, %g, %g)",
                  kScanRotationDegrees, kScanAxis[0], kScanAxis[1], kScanAxis[2]);
    std::snprintf(translation, sizeof translation, "t = (%g, %g, %g); points with x >= 0.45 removed",
                  kScanTranslation[0], kScanTranslation[1], kScanTranslation[2]);
    std::snprintf(noise, sizeof noise, "gaussian noise sigma %g before the motion", kScanNoise);
    write_cloud(out / "shape_scan.ply", scan,
                {"flashot sample scan (samples/make_samples.cpp)", rotation, translation, noise}, scan_parts);
    std::printf("wrote %s/{cells_batch_a.h5ad, cells_batch_b.h5ad, shape.ply, shape_scan.ply}: %zu shape points, "
                "%zu scan points\n", out.string().c_str(), shape.size(), scan.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashot_make_samples: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
