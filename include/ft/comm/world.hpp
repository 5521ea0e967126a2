#pragma once
// The communicator of the job this process belongs to (comm/job.hpp).
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <memory>

#include "ft/comm/communicator.hpp"
#include "ft/comm/job.hpp"
#include "ft/comm/local.hpp"
#include "ft/comm/mpi.hpp"

namespace ft::comm {

// The communicator of this process's job: Local for one rank, Mpi for
// several, each collective bounded by `timeout_seconds`. A rank dies with
// the process that launched it (mpirun, srun's step daemon, an MPIJob's
// orted): without its launcher the job cannot finish, and a rank left
// running would hold memory and cores until its collectives time out.
inline std::unique_ptr<Communicator> join_job(double timeout_seconds) {
  if (job_place().size <= 1) return std::make_unique<Local>();
  const pid_t launcher = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::raise(SIGKILL);  // it died before the line above
  return std::make_unique<Mpi>(timeout_seconds);
}

}  // namespace ft::comm
