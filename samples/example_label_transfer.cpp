// Example: transfer cell-type labels from a reference batch to a query batch through entropic OT, with the
// public headers only (flashot/flashot.hpp, flashot/io/anndata.hpp). The samples' query batch carries its true
// cell types, so the accuracy is printed; exit 0 when it is at least kMinimumAccuracy (ctest runs this).
// usage: example_label_transfer QUERY.h5ad REFERENCE.h5ad

#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include "flashot/flashot.hpp"
#include "flashot/io/anndata.hpp"

int main(int argc, char** argv) {
  constexpr double kMinimumAccuracy = 0.85;
  if (argc != 3) {
    std::fprintf(stderr, "usage: example_label_transfer QUERY.h5ad REFERENCE.h5ad\n");
    return 2;
  }
  try {
    const flashot::io::H5adReader query(argv[1]), reference(argv[2]);
    const flashot::io::DenseMatrix x = query.read_obsm("X_pca"), y = reference.read_obsm("X_pca");
    const flashot::io::Column truth = query.read_obs("cell_type"), labels = reference.read_obs("cell_type");
    flashot::Problem problem({x.values, x.rows, x.cols}, {y.values, y.rows, y.cols});
    flashot::SolveOptions options;
    options.blur = 2.0;  // in X_pca units; `flashot align` picks 0.05 x the data's diameter by default
    options.scheme = flashot::Scheme::kAlternating;  // fewer iterations than the averaged scheme at small blur
    const flashot::SolveResult result = problem.solve(options);
    const flashot::LabelTransfer transfer =
        problem.transfer_labels(result, flashot::Side::kTarget, labels.codes, labels.categories.size());
    std::size_t correct = 0;
    for (std::size_t i = 0; i < transfer.points; ++i) {
      const auto label = transfer.label[i];
      correct += label >= 0 && labels.categories[std::size_t(label)] == truth.categories[std::size_t(truth.codes[i])];
    }
    const double accuracy = double(correct) / double(transfer.points);
    std::printf("%zu query cells, %zu reference cells, %zu-d: %s after %d iterations, accuracy %.3f\n", x.rows,
                y.rows, x.cols, result.converged ? "converged" : "not converged", result.iterations, accuracy);
    return accuracy >= kMinimumAccuracy ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "example_label_transfer: error: %s\n", e.what());
    return 1;
  }
}
