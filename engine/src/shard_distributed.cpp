// Multi-process launches (flashot/distributed.hpp): the process group from the launcher's environment and the
// backend options of one rank. Host-only; the NCCL bootstrap itself is in engine/cuda/nccl_comm.cpp.
#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "flashot/distributed.hpp"

namespace flashot {

namespace {

/// The integer in environment variable `name`, or `fallback` when it is not set.
int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || value < 0 || value > 1 << 24)
    throw std::invalid_argument(std::string(name) + " must be a non-negative integer (got \"" + text + "\")");
  return static_cast<int>(value);
}

void check_group(const ProcessGroup& g, const std::string& where) {
  if (g.ranks < 1) throw std::invalid_argument(where + "ranks must be ≥ 1 (got " + std::to_string(g.ranks) + ")");
  if (g.rank < 0 || g.rank >= g.ranks)
    throw std::invalid_argument(where + "rank must be in [0, " + std::to_string(g.ranks) + ") (got " +
                                std::to_string(g.rank) + ")");
  if (g.local_rank < 0)
    throw std::invalid_argument(where + "local_rank must be ≥ 0 (got " + std::to_string(g.local_rank) + ")");
}

}  // namespace

ProcessGroup process_group_from_environment() {
  struct Launcher {
    const char* rank;
    const char* size;
    const char* local;
  };
  constexpr Launcher kLaunchers[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  for (const Launcher& l : kLaunchers) {
    if (std::getenv(l.rank) == nullptr || std::getenv(l.size) == nullptr) continue;
    ProcessGroup g{env_int(l.rank, 0), env_int(l.size, 1), 0};
    // Without a local rank the launcher put one process on this host, or left the device to the program.
    g.local_rank = env_int(l.local, g.ranks == 1 ? 0 : g.rank);
    check_group(g, std::string(l.rank) + "/" + l.size + ": ");
    return g;
  }
  return {};
}

BackendOptions rank_options(const ProcessGroup& group, std::function<void(void* bytes, std::size_t size)> broadcast,
                            BackendOptions base) {
  check_group(group, "process group: ");
  if (group.ranks > 1 && !broadcast)
    throw std::invalid_argument("a process group of " + std::to_string(group.ranks) +
                                " ranks needs a broadcast (an MPI_Bcast from rank 0) for NCCL's bootstrap id");
  base.backend = BackendKind::kCuda;
  base.rank = group.rank;
  base.ranks = group.ranks;
  base.device = group.local_rank;
  base.devices.clear();
  base.shards = 0;
  base.nccl = true;
  base.broadcast = std::move(broadcast);
  return base;
}

}  // namespace flashot
