#pragma once
// Expert parallelism spreads a mixture's experts over the ranks of an
// expert group: each holds its run of them, a window of each stacked
// parameter's rows (ParameterBuffer::declare_rows). What reads a parameter
// whole (saving the model or an adapter, merging one into the other) puts
// the windows together first.
#include <span>
#include <string>
#include <vector>

#include "ft/comm/communicator.hpp"
#include "ft/models/parameters.hpp"

namespace ft::models {

// Every windowed parameter of `params` whole, kept in the buffer
// (ParameterBuffer::whole) until drop_wholes(). Every rank of `group` calls
// it; rank r of the group holds the r-th window. `what` names the buffer in
// a collective's error ("layers.3.").
template <element T, class Space>
void gather_windows(ParameterBuffer<T, Space>& params, comm::Communicator& group, const std::string& what) {
  for (const ParameterEntry& e : params.entries()) {
    if (!e.windowed()) continue;
    const index_t cols = e.shape.rank == 2 ? e.shape[1] : 1, part = e.shape.numel();
    Tensor<T, Space> whole(Shape{e.all_rows * cols}, typename Tensor<T, Space>::Uninitialized{});
    const auto counts = std::vector<std::size_t>(std::size_t(group.size()), std::size_t(part));
    group.all_gather(std::span<const T>(params.values().data() + e.offset, std::size_t(part)),
                     std::span<T>(whole.data(), std::size_t(whole.numel())), counts, "the experts of " + what + e.name)
        .wait();
    params.keep_whole(e.name, std::move(whole));
  }
}

}  // namespace ft::models
