#pragma once
// Expert parallelism in a sparse block (strategy.expert_parallel = P, as
// DeepSpeed-MoE and Megatron mean it): the P ranks of a group each hold
// E / P of every sparse layer's experts (MoeConfig::parallel and rank).
// After its routing, a rank sends each of its sorted rows to the rank that
// holds the row's expert and receives the rows every rank sends its own
// experts (an all-to-all, each expert's row count first); its experts
// multiply those, and the outputs go back the same way, to the rows they
// came from. Backward moves the rows' gradients along the same routes
// (nn::ExpertRoute, kept in the block's activations).
#include <span>
#include <string>
#include <vector>

#include "ft/comm/communicator.hpp"
#include "ft/models/transformer_config.hpp"
#include "ft/nn/moe.hpp"
#include "ft/tensor/tensor.hpp"

namespace ft::models {

template <element T, class Device>
class ExpertExchange {
public:
  using Memory = typename Device::Memory;

  // The rows in transit, which every sparse block shares (one forward or
  // backward runs at a time): as received from (or sent back to) the
  // group, and in the local experts' order. Made at their largest size on
  // first use, grown if a step needs more.
  Tensor<T, Memory> exchanged, local_rows;

  // Their shapes for micro-batches of N tokens on every rank of the group,
  // for the memory estimate (estimate/memory.hpp).
  template <class Visit>
  static void layout(const TransformerConfig& c, index_t N, Visit&& visit) {
    if (c.moe.parallel == 1 || c.moe.sparse_layers() == 0) return;
    visit(&ExpertExchange::exchanged, Shape{c.moe.local_rows(N), c.hidden_size});
    visit(&ExpertExchange::local_rows, Shape{c.moe.local_rows(N), c.hidden_size});
  }

  void set_group(comm::Communicator* group) { group_ = group; }

  // The route of this rank's sorted rows (sorted_first: its Routing's
  // first): every rank tells every other how many rows it sends each of
  // that rank's experts.
  nn::ExpertRoute route(const std::vector<index_t>& sorted_first, const MoeConfig& m, const std::string& what) {
    comm::Communicator& g = group();
    const index_t P = m.parallel, El = m.local_experts();
    std::vector<double> mine(std::size_t(m.experts)), theirs(std::size_t(P * El));
    for (index_t e = 0; e < m.experts; ++e)
      mine[std::size_t(e)] = double(sorted_first[std::size_t(e + 1)] - sorted_first[std::size_t(e)]);
    const auto each = std::vector<std::size_t>(std::size_t(P), std::size_t(El));
    g.all_to_all(std::span<const double>(mine), each, std::span<double>(theirs), each, "the row counts of " + what)
        .wait();
    return nn::route_to_ranks(sorted_first, P, El, theirs);
  }

  // Sends the sorted rows [R, C] along the route; the rows this rank's
  // experts take arrive in `local` [route.rows(), C], expert after expert.
  void send(const T* sorted, T* local, const nn::ExpertRoute& route, const std::int32_t* received_at, index_t C,
            const std::string& what) {
    fit(exchanged, route.rows(), C);
    move(sorted, route.send, exchanged.data(), route.recv, C, "the rows of " + what);
    Device::parallel_rows(route.rows(), C, nn::GatherRows<T>{local, exchanged.data(), received_at, C});
  }

  // The local rows' results [route.rows(), C] back to the ranks they came
  // from, into `sorted` [R, C] in this rank's sorted order.
  void bring_back(const T* local, T* sorted, const nn::ExpertRoute& route, const std::int32_t* local_at, index_t C,
                  const std::string& what) {
    fit(exchanged, route.rows(), C);
    Device::parallel_rows(route.rows(), C, nn::GatherRows<T>{exchanged.data(), local, local_at, C});
    move(exchanged.data(), route.recv, sorted, route.send, C, "the results of " + what);
  }

  // Makes t hold at least rows x C values.
  static void fit(Tensor<T, Memory>& t, index_t rows, index_t C) {
    if (!t.data() || t.numel() < rows * C) t = Tensor<T, Memory>(Shape{std::max<index_t>(rows, 1), C});
  }

private:
  comm::Communicator& group() {
    if (!group_) throw Error("internal: a model whose experts are split over ranks has no expert-parallel group");
    return *group_;
  }
  void move(const T* in, const std::vector<std::size_t>& send, T* out, const std::vector<std::size_t>& recv, index_t C,
            const std::string& what) {
    std::vector<std::size_t> s, r;
    std::size_t in_rows = 0, out_rows = 0;
    for (std::size_t n : send) {
      s.push_back(n * std::size_t(C));
      in_rows += n;
    }
    for (std::size_t n : recv) {
      r.push_back(n * std::size_t(C));
      out_rows += n;
    }
    group()
        .all_to_all(std::span<const T>(in, in_rows * std::size_t(C)), s, std::span<T>(out, out_rows * std::size_t(C)),
                    r, what)
        .wait();
  }

  comm::Communicator* group_ = nullptr;
};

}  // namespace ft::models
