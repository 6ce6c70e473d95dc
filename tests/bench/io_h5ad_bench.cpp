// Times flashot reading one obsm entry of an .h5ad file (open + read_obsm), as tests/bench/io_h5ad_bench.py runs
// it side by side with h5py and anndata. Prints one JSON object: the seconds of each repeat, the shape, and the
// bytes this process read from files (Linux /proc/self/io rchar), which shows X was never read.
// usage: flashot_h5ad_bench FILE KEY [REPEATS]

#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
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
    std::fprintf(stderr, "usage: %s FILE KEY [REPEATS]\n", argv[0]);
    return 2;
  }
  const std::string file = argv[1], key = argv[2];
  const int repeats = argc > 3 ? std::stoi(argv[3]) : 5;
  try {
    std::vector<double> seconds;
    std::size_t rows = 0, cols = 0;
    double checksum = 0;
    long long first_read_bytes = 0;
    for (int i = 0; i < repeats; ++i) {
      const long long before = bytes_read_so_far();
      const auto start = std::chrono::steady_clock::now();
      const flashot::io::H5adReader reader(file);
      const flashot::io::DenseMatrix m = reader.read_obsm(key);
      const auto stop = std::chrono::steady_clock::now();
      if (i == 0) first_read_bytes = bytes_read_so_far() - before;
      seconds.push_back(std::chrono::duration<double>(stop - start).count());
      rows = m.rows;
      cols = m.cols;
      checksum = m.values.empty() ? 0.0 : static_cast<double>(m.values.front()) + m.values.back();
    }
    std::printf("{\"reader\": \"flashot\", \"rows\": %zu, \"cols\": %zu, \"checksum\": %.9g, \"bytes_read\": %lld, "
                "\"seconds\": [",
                rows, cols, checksum, first_read_bytes);
    for (std::size_t i = 0; i < seconds.size(); ++i) std::printf("%s%.6f", i ? ", " : "", seconds[i]);
    std::printf("]}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashot_h5ad_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
