#pragma once
// The CPU launcher: runs a functor over an index range on OpenMP threads.
// Row-wise math is written as functors `f(i)` that handle row i alone, so the
// same functor runs here over threads and on a GPU over a grid.
//
// Static scheduling: rows cost the same, and it keeps a row on the same
// thread from one kernel to the next, which is kind to the caches.
#include <cstdint>

#include <omp.h>

namespace ft::cpu {

template <class F>
void parallel_for(std::int64_t n, const F& f) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) f(i);
}

inline int thread_count() { return omp_get_max_threads(); }
inline int thread_index() { return omp_get_thread_num(); }

}  // namespace ft::cpu
