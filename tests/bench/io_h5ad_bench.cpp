// Times flashot reading one obsm entry of an .h5ad file (open + read), as tests/bench/io_h5ad_bench.py runs it side
// by side with h5py and anndata. Prints one JSON object: the seconds of each repeat, the shape, and the bytes this
// process read from files (Linux /proc/self/io rchar), which shows X was never read.
// usage: flashot_h5ad_bench FILE KEY [REPEATS] [vector|into]
//   vector  H5adReader(file).read_obsm(key): a DenseMatrix, whose std::vector<float> is zero-filled before HDF5
//           writes it (the default)
//   into    H5adReader(file).read_obsm_into(key, buffer) with buffer = std::make_unique_for_overwrite<float[]>,
//           sized from obsm_info: memory nobody zero-fills, as numpy's

#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"

namespace {

long long bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  long long value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s FILE KEY [REPEATS] [vector|into]\n", argv[0]);
    return 2;
  }
  const std::string file = argv[1], key = argv[2];
  const int repeats = argc > 3 ? std::stoi(argv[3]) : 5;
  const std::string mode = argc > 4 ? argv[4] : "vector";
  if (mode != "vector" && mode != "into") {
    std::fprintf(stderr, "flashot_h5ad_bench: mode must be vector or into (got %s)\n", mode.c_str());
    return 2;
  }
  try {
    std::vector<double> seconds;
    std::size_t rows = 0, cols = 0;
    double checksum = 0;
    long long first_read_bytes = 0;
    for (int i = 0; i < repeats; ++i) {
      const long long before = bytes_read_so_far();
      const auto start = std::chrono::steady_clock::now();
      const flashot::io::H5adReader reader(file);
      if (mode == "vector") {
        const flashot::io::DenseMatrix m = reader.read_obsm(key);
        const auto stop = std::chrono::steady_clock::now();
        seconds.push_back(std::chrono::duration<double>(stop - start).count());
        rows = m.rows;
        cols = m.cols;
        checksum = m.values.empty() ? 0.0 : static_cast<double>(m.values.front()) + m.values.back();
      } else {
        const auto info = reader.obsm_info(key);
        if (!info) throw std::runtime_error("no obsm entry " + key);
        const std::size_t n = info->rows * info->cols;
        const auto buffer = std::make_unique_for_overwrite<float[]>(n);
        reader.read_obsm_into(key, {buffer.get(), n});
        const auto stop = std::chrono::steady_clock::now();
        seconds.push_back(std::chrono::duration<double>(stop - start).count());
        rows = info->rows;
        cols = info->cols;
        checksum = n == 0 ? 0.0 : static_cast<double>(buffer[0]) + buffer[n - 1];
      }
      if (i == 0) first_read_bytes = bytes_read_so_far() - before;
    }
    std::printf("{\"reader\": \"flashot\", \"mode\": \"%s\", \"rows\": %zu, \"cols\": %zu, \"checksum\": %.9g, "
                "\"bytes_read\": %lld, \"seconds\": [",
                mode.c_str(), rows, cols, checksum, first_read_bytes);
    for (std::size_t i = 0; i < seconds.size(); ++i) std::printf("%s%.6f", i ? ", " : "", seconds[i]);
    std::printf("]}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashot_h5ad_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
