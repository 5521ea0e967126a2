#pragma once
// Writing a model whose stages are spread over ranks (ZeRO-3 shards, a
// pipeline's chunks) from rank 0, one stage at a time: rank 0 reads the
// model through Transformer::read_hf_rows, which says before each tensor which
// stage it reads; rank 0 broadcasts that stage's index (once per stage, not
// per tensor), every rank then puts the stage together (`gather`, a
// collective) and drops the one before (`release`). The others loop until
// rank 0 says it is done. Call it on every rank of `comm`.
#include <cstdint>
#include <functional>
#include <span>

#include "ft/comm/communicator.hpp"
#include "ft/models/transformer.hpp"

namespace ft::parallel {

template <element T, class Device>
void read_stages_on_rank0(comm::Communicator& comm, models::Transformer<T, Device>& model, const std::function<void()>& use,
                          const std::function<void(index_t)>& gather, const std::function<void(index_t)>& release) {
  constexpr std::int64_t done = -1000;
  std::int64_t held = done;
  auto next = [&](std::int64_t stage) {
    comm.broadcast(std::span<std::int64_t>(&stage, 1), 0, "the stage rank 0 reads next").wait();
    if (stage == held) return stage;
    if (held != done) release(index_t(held));
    if (stage != done) gather(index_t(stage));
    held = stage;
    return stage;
  };
  if (comm.rank() != 0) {
    while (next(done) != done) {
    }
    return;
  }
  model.set_stage_reader([&](index_t stage) {
    if (stage != held) next(stage);
  });
  try {
    use();
  } catch (...) {
    model.set_stage_reader({});
    throw;
  }
  model.set_stage_reader({});
  next(done);
}

}  // namespace ft::parallel
