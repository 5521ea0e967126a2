#pragma once
// The CPU launcher: runs a functor over an index range on OpenMP threads.
// Row-wise math is written as functors `f(i)` that handle row i alone, so the
// same functor runs here over threads and on a GPU over a grid.
//
// Static scheduling: rows cost the same, and it keeps a row on the same
// thread from one kernel to the next, which is kind to the caches.
#include <cstdint>

#include <omp.h>

#include "ft/core/host_device.hpp"

namespace ft::cpu {

template <class F>
void parallel_for(std::int64_t n, const F& f) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) f(i);
}

// The lanes that share one row's work and reduce it together: a functor
// f(row, team) walks columns team.rank, team.rank + team.size, ... and
// combines its partial results with team.sum / team.max. On the CPU a team
// is one lane, so the walk is the plain loop and the reductions return
// their argument; a GPU's team is a warp or a block (device/cuda/launch.cuh).
struct SoloTeam {
  static constexpr std::int64_t size = 1;
  static constexpr std::int64_t rank = 0;
  template <class A>
  FT_HOST_DEVICE A sum(A x) const {
    return x;
  }
  template <class A>
  FT_HOST_DEVICE A max(A x) const {
    return x;
  }
};

template <class F>
void parallel_rows(std::int64_t n, std::int64_t /*columns*/, const F& f) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) f(i, SoloTeam{});
}

inline int thread_count() { return omp_get_max_threads(); }
inline int thread_index() { return omp_get_thread_num(); }

}  // namespace ft::cpu
