#pragma once
// One problem as several processes — MPI ranks, one GPU each, on one host or many (docs/multi-gpu.md).
//
// Every rank builds the same flashot::Problem from all of x and y (the host copies are what keep the solve loop,
// the ε schedule and the reports identical on every rank) with BackendOptions from rank_options(). Rank r then
// holds only shard r of x's rows on its GPU; NCCL, bootstrapped through the program's MPI_Bcast, combines the
// shards. Every rank returns the same full results; usually rank 0 writes them.
//
//   MPI_Init(&argc, &argv);
//   const flashot::ProcessGroup group = flashot::process_group_from_environment();
//   const flashot::BackendOptions options = flashot::rank_options(group, [](void* bytes, std::size_t size) {
//     MPI_Bcast(bytes, static_cast<int>(size), MPI_BYTE, 0, MPI_COMM_WORLD);
//   });
//   flashot::Problem problem(x, y, a, b, options);   // on every rank
//   flashot::SolveResult r = problem.solve(solve_options);
//   MPI_Finalize();
//
// Plain C++: no MPI types here; flashot's engine does not link MPI (the program does).

#include <cstddef>
#include <functional>

#include "flashot/flashot.hpp"

namespace flashot {

/// This process's place in a multi-process launch.
struct ProcessGroup {
  int rank = 0;        ///< in [0, ranks)
  int ranks = 1;       ///< processes in the launch
  int local_rank = 0;  ///< among the processes on this host: the CUDA device this rank drives
};

/// Read from the launcher's environment: OpenMPI (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
/// OMPI_COMM_WORLD_LOCAL_RANK), MPICH / Hydra (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID) or Slurm (SLURM_PROCID,
/// SLURM_NTASKS, SLURM_LOCALID), in that order; none of them: a single process {0, 1, 0}. Throws
/// std::invalid_argument naming the variable when a value is not a number or the rank is outside [0, ranks).
ProcessGroup process_group_from_environment();

/// `base` set up for this rank: backend kCuda, rank and ranks from `group`, device = group.local_rank, no devices
/// list or shards, nccl on, and `broadcast` (an MPI_Bcast of the bytes from rank 0 to every rank, see above).
/// Throws std::invalid_argument for a group with ranks < 1 or a rank outside [0, ranks), and for ranks > 1 without
/// a broadcast.
BackendOptions rank_options(const ProcessGroup& group, std::function<void(void* bytes, std::size_t size)> broadcast,
                            BackendOptions base = {});

}  // namespace flashot
