#pragma once
// Which job this process belongs to, read from what its launcher set (rank,
// size, and the ranks on this machine):
//   mpirun (OpenMPI; also a Kubeflow MPIJob's launcher)  OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_SIZE, _LOCAL_RANK
//   MPICH's and Intel MPI's hydra                        PMI_RANK, PMI_SIZE, MPI_LOCALNRANKS, MPI_LOCALRANKID
//   Slurm's srun                                         SLURM_PROCID, SLURM_STEP_NUM_TASKS,
//                                                        SLURM_STEP_TASKS_PER_NODE ("4(x2)": 4), SLURM_LOCALID
// A process none of them started is a job of one rank. The same ftrun binary
// therefore runs alone, under mpirun, under srun and in an MPIJob.
#include <cstdlib>
#include <string>

namespace ft::comm {

struct JobPlace {
  int rank = 0, size = 1;
  int local_size = 1;  // the job's ranks on this machine (they share its memory); size when not said
  int local_rank = 0;  // this rank's place among them (which GPU it takes); rank when not said
  std::string launcher = "none";
};

inline JobPlace job_place() {
  auto number = [](const char* name) -> int {
    const char* v = std::getenv(name);
    return v && *v ? std::atoi(v) : -1;
  };
  struct Source {
    const char *rank, *size, *local_size, *local_rank, *launcher;
  };
  for (Source s : {Source{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun"},
                   Source{"PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS", "MPI_LOCALRANKID", "hydra"},
                   Source{"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_LOCALID",
                          "srun"}}) {
    const int rank = number(s.rank), size = number(s.size), local = number(s.local_size),
              local_rank = number(s.local_rank);
    if (rank >= 0 && size >= 1)
      return {rank, size, local >= 1 ? local : size, local_rank >= 0 ? local_rank : rank, s.launcher};
  }
  return {};
}

}  // namespace ft::comm
