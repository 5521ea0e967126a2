#pragma once
// Sums of squares in fixed chunks, the first half of every ordered sum the
// optimizers take (a gradient's global norm, Adafactor's RMS of a parameter
// or of its update): one partial per chunk, added afterwards in chunk order,
// so the result has the same bits for any thread count or schedule.
#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::optim {

// Element i of a buffer, as a number.
template <class G>
struct Elements {
  const G* x;
  FT_HOST_DEVICE G operator()(index_t i) const { return x[i]; }
};

// The sum of squares of value(i) over one chunk of [0, n), by the team that
// owns it: each lane walks its stride of the chunk in order, the team adds
// the lanes' sums. On the CPU the team is one lane, so a chunk is summed in
// index order.
template <class Value>
struct ChunkSquares {
  Value value;
  index_t n, chunk;
  double* partial;  // one per chunk

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t c, const Team& team) const {
    double s = 0;
    const index_t end = c * chunk + chunk < n ? c * chunk + chunk : n;
    for (index_t i = c * chunk + team.rank; i < end; i += team.size) {
      const double x = double(value(i));
      s += x * x;
    }
    s = team.sum(s);
    if (team.rank == 0) partial[c] = s;
  }
};

}  // namespace ft::optim
