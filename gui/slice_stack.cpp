#include "slice_stack.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "alignment.hpp"
#include "flashot/io/anndata.hpp"
#include "flashot/workflow/checks.hpp"
#include "flashot/workflow/spatial.hpp"
#include "parameters.hpp"

namespace flashot::gui {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

PointsView view(const Matrix& m) { return {std::span<const float>(m.values.data(), m.values.size()), m.rows, m.cols}; }

}  // namespace

std::vector<std::string> common_spatial_keys(const Dataset& source, const Dataset& target) {
  std::vector<std::string> keys;
  if (source.kind() != workflow::FileKind::kH5ad || target.kind() != workflow::FileKind::kH5ad) return keys;
  for (const std::string& key : source.display_spaces()) {
    if (key == kSpaceFirstThree || ends_with(key, "_flashot")) continue;
    const std::size_t w = source.space_width(key);
    if (w < 2 || w > 3 || target.space_width(key) != w) continue;
    keys.push_back(key);
  }
  std::stable_partition(keys.begin(), keys.end(), [](const std::string& k) { return k == "spatial"; });
  return keys;
}

TopKCoupling read_coupling(const std::filesystem::path& path, std::size_t n, std::size_t m) {
  const io::H5adReader reader(path);
  const io::SparseMatrix x = reader.read_x_sparse();
  if (x.csc) throw std::invalid_argument(path.string() + ": the coupling's X is CSC; expected the CSR flashot writes");
  if (x.rows != n || x.cols != m) {
    throw std::invalid_argument(path.string() + ": the coupling is " + std::to_string(x.rows) + " × " +
                                std::to_string(x.cols) + " but the slices have " + std::to_string(n) + " and " +
                                std::to_string(m) + " cells");
  }
  if (x.indptr.size() != n + 1) {
    throw std::invalid_argument(path.string() + ": the coupling's indptr has " + std::to_string(x.indptr.size()) +
                                " entries (expected " + std::to_string(n + 1) + ")");
  }
  std::size_t k = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t a = x.indptr[i], b = x.indptr[i + 1];
    if (a < 0 || b < a || static_cast<std::size_t>(b) > x.data.size() || x.indices.size() != x.data.size()) {
      throw std::invalid_argument(path.string() + ": the coupling's indptr is not monotone at row " + std::to_string(i));
    }
    k = std::max(k, static_cast<std::size_t>(b - a));
  }
  TopKCoupling out;
  out.rows = n;
  out.k = k;
  out.columns.assign(n * k, 0);
  out.values.assign(n * k, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t slot = 0;
    for (std::int64_t e = x.indptr[i]; e < x.indptr[i + 1]; ++e, ++slot) {
      const std::int64_t j = x.indices[static_cast<std::size_t>(e)];
      if (j < 0 || static_cast<std::size_t>(j) >= m) {
        throw std::invalid_argument(path.string() + ": the coupling names target cell " + std::to_string(j) +
                                    " of " + std::to_string(m));
      }
      out.columns[i * k + slot] = static_cast<std::int32_t>(j);
      out.values[i * k + slot] = x.data[static_cast<std::size_t>(e)];
    }
  }
  return out;
}

SliceStack build_slice_stack(const SliceStackInput& in) {
  if (in.dims != 2 && in.dims != 3) {
    throw std::invalid_argument("slices need 2-D or 3-D coordinates (got " + std::to_string(in.dims) + " columns)");
  }
  if (!(in.spacing >= 0) || !std::isfinite(in.spacing)) {
    throw std::invalid_argument("spacing must be ≥ 0 (got " + workflow::value_text(in.spacing) + ")");
  }
  const std::size_t d = in.dims;
  const std::size_t n = in.source.size() / d, m = in.target.size() / d;
  if (in.source.size() != n * d || in.target.size() != m * d || n == 0 || m == 0) {
    throw std::invalid_argument("slices: " + std::to_string(in.source.size()) + " and " +
                                std::to_string(in.target.size()) + " coordinates are not whole rows of " +
                                std::to_string(d));
  }
  if (!in.source_aligned.empty() && in.source_aligned.size() != in.source.size()) {
    throw std::invalid_argument("slices: " + std::to_string(in.source_aligned.size() / d) +
                                " aligned source cells for " + std::to_string(n));
  }
  SliceStack out;
  out.aligned = in.use_aligned && !in.source_aligned.empty();
  const std::vector<float>& source = out.aligned ? in.source_aligned : in.source;

  double low[3] = {0, 0, 0}, high[3] = {0, 0, 0}, target_mean[3] = {0, 0, 0}, source_mean[3] = {0, 0, 0};
  for (std::size_t c = 0; c < d; ++c) {
    low[c] = std::numeric_limits<double>::infinity();
    high[c] = -low[c];
  }
  for (std::size_t j = 0; j < m; ++j) {
    for (std::size_t c = 0; c < d; ++c) {
      const double v = in.target[j * d + c];
      low[c] = std::min(low[c], v);
      high[c] = std::max(high[c], v);
      target_mean[c] += v / static_cast<double>(m);
    }
  }
  // NaN rows (cells without mass in an aligned copy) are left out of the mean and drawn where their raw ones are.
  std::size_t counted = 0;
  for (std::size_t i = 0; i < n; ++i) {
    bool finite = true;
    for (std::size_t c = 0; c < d; ++c) finite = finite && std::isfinite(source[i * d + c]);
    if (!finite) continue;
    ++counted;
    for (std::size_t c = 0; c < d; ++c) source_mean[c] += source[i * d + c];
  }
  for (std::size_t c = 0; c < d; ++c) source_mean[c] = counted ? source_mean[c] / static_cast<double>(counted) : 0;
  for (std::size_t c = 0; c < d; ++c) out.extent = std::max(out.extent, high[c] - low[c]);
  if (!(out.extent > 0) || !std::isfinite(out.extent)) out.extent = 1;
  out.gap = in.spacing * out.extent;

  out.target_xyz.assign(m * 3, 0.0f);
  for (std::size_t j = 0; j < m; ++j)
    for (std::size_t c = 0; c < d; ++c) out.target_xyz[j * 3 + c] = in.target[j * d + c];
  out.source_xyz.assign(n * 3, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    bool finite = true;
    for (std::size_t c = 0; c < d; ++c) finite = finite && std::isfinite(source[i * d + c]);
    for (std::size_t c = 0; c < d; ++c) {
      double v = finite ? source[i * d + c] : in.source[i * d + c];
      // Raw coordinates live in the source's own frame: centre them over the target so the planes overlap. The
      // stacking axis (z) of 3-D slices is not shifted; the gap is added below.
      if (!out.aligned && c < 2) v += target_mean[c] - source_mean[c];
      out.source_xyz[i * 3 + c] = static_cast<float>(v);
    }
    out.source_xyz[i * 3 + 2] += static_cast<float>(out.gap);
  }
  if (in.coupling != nullptr && in.coupling->rows * in.coupling->k > 0) {
    if (in.coupling->rows != n) {
      throw std::invalid_argument("slices: the coupling has " + std::to_string(in.coupling->rows) + " rows for " +
                                  std::to_string(n) + " source cells");
    }
    CouplingLines lines = coupling_lines(*in.coupling, out.source_xyz, out.target_xyz, in.max_lines);
    out.line_endpoints = std::move(lines.endpoints);
    out.line_rgba = std::move(lines.rgba);
  }
  return out;
}

SliceAlignmentOutcome run_slice_alignment(const Matrix& x, const Matrix& y, const Matrix* u, const Matrix* v,
                                          const SliceAlignParameters& p, const SliceProgress& progress) {
  if (x.cols != y.cols || x.cols < 2 || x.cols > 3) {
    throw std::invalid_argument("slices need 2-D or 3-D coordinates of one width (got " + std::to_string(x.cols) +
                                " and " + std::to_string(y.cols) + " columns)");
  }
  if (!(p.alpha >= 0 && p.alpha <= 1)) {
    throw std::invalid_argument("alpha must be in [0, 1] (got " + workflow::value_text(p.alpha) + ")");
  }
  if ((u == nullptr) != (v == nullptr)) throw std::invalid_argument("slices: an embedding for one side only");
  if (u == nullptr && p.alpha < 1) {
    throw std::invalid_argument("alpha " + workflow::value_text(p.alpha) + " weighs an embedding term: choose one");
  }
  if (!(p.blur > 0) || !std::isfinite(p.blur)) {
    throw std::invalid_argument("blur must be > 0 (got " + workflow::value_text(p.blur) + ")");
  }
  if (!(p.reach >= 0) || !std::isfinite(p.reach)) {
    throw std::invalid_argument("reach must be ≥ 0 (got " + workflow::value_text(p.reach) + ")");
  }
  if (p.top_k < 1 || p.top_k > kMaxTopK) {
    throw std::invalid_argument("top-k must be in [1, " + std::to_string(kMaxTopK) + "] (got " +
                                std::to_string(p.top_k) + ")");
  }
  if (p.max_outer < 1) throw std::invalid_argument("max outer must be ≥ 1 (got " + std::to_string(p.max_outer) + ")");
  workflow::SpatialOptions so;
  so.max_outer = p.max_outer;
  so.alpha = u ? p.alpha : 1.0;
  so.blur = p.blur;
  so.reach = p.reach;
  so.model = workflow::parse_spatial_model(p.model);
  AlignParameters backend_only;
  backend_only.backend = p.backend;
  const std::vector<std::string> problems = validate(backend_only);
  if (!problems.empty()) throw std::invalid_argument(problems.front());
  so.backend = backend_options(backend_only);
  so.progress = [&](const GromovProgress& g) { return !progress || progress(g.outer, g.max_outer, g.objective); };
  workflow::SpatialAlignment a =
      workflow::align_slices(view(x), view(y), u ? view(*u) : PointsView{}, v ? view(*v) : PointsView{}, so);
  SliceAlignmentOutcome out;
  if (a.result.reason == StopReason::kCancelled) return out;
  if (a.result.reason == StopReason::kNonFinite) {
    throw std::runtime_error("the solve produced non-finite values (" + a.result.message + "); try a larger blur");
  }
  out.aligned = std::move(a.aligned);
  out.coupling = a.problem->problem().top_k(a.result.plan, p.top_k);
  out.model = p.model;
  out.rotation_degrees = a.rotation_degrees;
  out.rms = a.rms;
  out.objective = a.result.objective;
  out.converged = a.result.converged;
  out.outer_iterations = a.result.outer_iterations;
  out.message = a.result.message;
  return out;
}

}  // namespace flashot::gui
