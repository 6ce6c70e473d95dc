// NCCL communicator ownership and the NCCL error check.
#include "nccl_comm.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include "error.hpp"

namespace flashot::detail::nccl {

void throw_nccl_error(ncclResult_t status, const char* expression, const char* file, int line) {
  throw std::runtime_error(std::string("NCCL error '") + ncclGetErrorString(status) + "' (" +
                           std::to_string(static_cast<int>(status)) + ") in " + expression + " at " + file + ":" +
                           std::to_string(line));
}

void keep_nvls_off_unless_set() {
  // setenv with overwrite = 0 leaves a value the user chose; NCCL reads it when the communicator is made.
  setenv("NCCL_NVLS_ENABLE", "0", 0);
}

Communicators Communicators::single_process(const std::vector<int>& devices) {
  for (std::size_t i = 0; i < devices.size(); ++i)
    if (std::count(devices.begin(), devices.end(), devices[i]) > 1)
      throw std::invalid_argument("devices must be distinct for NCCL (device " + std::to_string(devices[i]) +
                                  " is listed twice); use nccl = false to put several shards on one device");
  keep_nvls_off_unless_set();
  Communicators c;
  c.comms_.assign(devices.size(), nullptr);
  c.ranks_ = static_cast<int>(devices.size());
  FLASHOT_NCCL_CHECK(ncclCommInitAll(c.comms_.data(), static_cast<int>(devices.size()), devices.data()));
  return c;
}

Communicators Communicators::one_rank(const ncclUniqueId& id, int rank, int ranks, int device) {
  keep_nvls_off_unless_set();
  FLASHOT_CUDA_CHECK(cudaSetDevice(device));
  Communicators c;
  c.comms_.assign(1, nullptr);
  c.ranks_ = ranks;
  FLASHOT_NCCL_CHECK(ncclCommInitRank(&c.comms_[0], ranks, id, rank));
  return c;
}

ncclUniqueId unique_id_from_rank0(int rank, const std::function<void(void*, std::size_t)>& broadcast) {
  if (!broadcast)
    throw std::invalid_argument("a multi-process run needs BackendOptions::broadcast (an MPI_Bcast from rank 0) to "
                                "share NCCL's bootstrap id (see flashot/distributed.hpp)");
  ncclUniqueId id{};
  if (rank == 0) FLASHOT_NCCL_CHECK(ncclGetUniqueId(&id));
  broadcast(&id, sizeof(id));
  return id;
}

Communicators::~Communicators() { destroy(); }

Communicators::Communicators(Communicators&& other) noexcept
    : comms_(std::exchange(other.comms_, {})), ranks_(std::exchange(other.ranks_, 0)) {}

Communicators& Communicators::operator=(Communicators&& other) noexcept {
  if (this != &other) {
    destroy();
    comms_ = std::exchange(other.comms_, {});
    ranks_ = std::exchange(other.ranks_, 0);
  }
  return *this;
}

void Communicators::abort() noexcept {
  for (ncclComm_t& comm : comms_)
    if (comm != nullptr) ncclCommAbort(comm), comm = nullptr;
}

void Communicators::destroy() noexcept {
  // Destruction must not throw: a failed ncclCommDestroy leaves nothing further to release.
  for (ncclComm_t comm : comms_)
    if (comm != nullptr) ncclCommDestroy(comm);
  comms_.clear();
}

}  // namespace flashot::detail::nccl
