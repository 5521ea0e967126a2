#pragma once
// The communicator of the job this process belongs to (comm/job.hpp).
#include <memory>

#include "ft/comm/communicator.hpp"
#include "ft/comm/job.hpp"
#include "ft/comm/local.hpp"
#include "ft/comm/mpi.hpp"

namespace ft::comm {

// The communicator of this process's job: Local for one rank, Mpi for
// several, each collective bounded by `timeout_seconds`.
inline std::unique_ptr<Communicator> join_job(double timeout_seconds) {
  if (job_place().size <= 1) return std::make_unique<Local>();
  return std::make_unique<Mpi>(timeout_seconds);
}

}  // namespace ft::comm
