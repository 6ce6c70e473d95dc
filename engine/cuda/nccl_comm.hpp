#pragma once
// NCCL communicators for sharded problems (docs/design.md §5, docs/multi-gpu.md): RAII ownership, the one NCCL error
// check, and the bootstrap of a multi-process communicator. No home-made transport: every byte between devices
// moves through NCCL collectives; the program's MPI_Bcast only carries the ncclUniqueId from rank 0 to the others.

#include <cstddef>
#include <functional>
#include <vector>

#include <nccl.h>

namespace flashot::detail::nccl {

[[noreturn]] void throw_nccl_error(ncclResult_t status, const char* expression, const char* file, int line);

inline void check(ncclResult_t status, const char* expression, const char* file, int line) {
  if (status != ncclSuccess) throw_nccl_error(status, expression, file, line);
}

/// NVLink multicast (NVLS) stays off on shared multi-GPU hosts: sets NCCL_NVLS_ENABLE=0 unless the environment
/// already says otherwise. Called before every communicator is made.
void keep_nvls_off_unless_set();

/// The communicators this process drives, one per local device, owned (destroyed with the object). Move-only.
class Communicators {
 public:
  /// One process driving every device in `devices` (distinct ordinals): ncclCommInitAll, rank s on devices[s].
  /// Throws std::invalid_argument for a repeated device and std::runtime_error when NCCL fails.
  static Communicators single_process(const std::vector<int>& devices);
  /// One of `ranks` processes (this one is `rank`, driving `device`), all bootstrapped from the same id:
  /// ncclCommInitRank. Collective: every rank must call it.
  static Communicators one_rank(const ncclUniqueId& id, int rank, int ranks, int device);

  Communicators() = default;
  ~Communicators();
  Communicators(Communicators&& other) noexcept;
  Communicators& operator=(Communicators&& other) noexcept;
  Communicators(const Communicators&) = delete;
  Communicators& operator=(const Communicators&) = delete;

  /// Communicator of local device `local` (in the order given).
  ncclComm_t operator[](std::size_t local) const { return comms_[local]; }
  std::size_t local_count() const { return comms_.size(); }
  /// Ranks in the communicator, all processes together.
  int ranks() const { return ranks_; }
  /// ncclCommAbort on every communicator (collectives waiting in them return), after which none is usable.
  void abort() noexcept;

 private:
  void destroy() noexcept;

  std::vector<ncclComm_t> comms_;
  int ranks_ = 0;
};

/// The id of a new multi-process communicator: made by rank 0 (ncclGetUniqueId) and handed to every rank by
/// `broadcast` (the program's MPI_Bcast from rank 0). Collective. Throws std::invalid_argument when no broadcast
/// was given.
ncclUniqueId unique_id_from_rank0(int rank, const std::function<void(void*, std::size_t)>& broadcast);

}  // namespace flashot::detail::nccl

#define FLASHOT_NCCL_CHECK(expression) \
  ::flashot::detail::nccl::check((expression), #expression, __FILE__, __LINE__)
