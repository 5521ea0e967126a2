#pragma once
// Which job this process belongs to, read from what its launcher set:
//   mpirun (OpenMPI; also a Kubeflow MPIJob's launcher)  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
//   MPICH's and Intel MPI's hydra                        PMI_RANK, PMI_SIZE
//   Slurm's srun                                         SLURM_PROCID, SLURM_STEP_NUM_TASKS
// A process none of them started is a job of one rank. The same ftrun binary
// therefore runs alone, under mpirun, under srun and in an MPIJob.
#include <cstdlib>
#include <string>

namespace ft::comm {

struct JobPlace {
  int rank = 0, size = 1;
  std::string launcher = "none";
};

inline JobPlace job_place() {
  auto number = [](const char* name) -> int {
    const char* v = std::getenv(name);
    return v && *v ? std::atoi(v) : -1;
  };
  struct Source {
    const char *rank, *size, *launcher;
  };
  for (Source s : {Source{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun"},
                   Source{"PMI_RANK", "PMI_SIZE", "hydra"},
                   Source{"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "srun"}}) {
    const int rank = number(s.rank), size = number(s.size);
    if (rank >= 0 && size >= 1) return {rank, size, s.launcher};
  }
  return {};
}

}  // namespace ft::comm
