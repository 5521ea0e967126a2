#pragma once
// The host memory Open MPI's non-blocking reductions (libnbc) allocate for
// themselves while they run, outside ft's allocator: the communicator holds
// room for it in ft's cache of pages (comm/mpi.hpp, tensor/memory.hpp), and
// the memory estimate counts it (estimate/memory.hpp), from this one rule.
//
// Measured with a bare MPI program (Open MPI 4.1) on 2, 3, 4 and 8 ranks,
// 8 to 128 MiB of f32, every buffer touched before the call, as ft's are:
// the rank that touches most touches, in copies of what is reduced, 1 for
// an in-place all-reduce, and for a reduce-scatter 1 on 2 ranks and 2
// beyond (it reduces onto one rank, then scatters). The other ranks touch
// one copy or nothing.
#include <cstdint>

namespace ft::comm {

enum class Reduction { all_reduce, reduce_scatter };

inline int mpi_scratch_copies(Reduction reduction, int ranks) {
  if (ranks < 2) return 0;
  if (reduction == Reduction::reduce_scatter) return ranks == 2 ? 1 : 2;
  return 1;
}

inline std::uint64_t mpi_scratch_bytes(Reduction reduction, int ranks, std::uint64_t reduced_bytes) {
  return std::uint64_t(mpi_scratch_copies(reduction, ranks)) * reduced_bytes;
}

}  // namespace ft::comm
