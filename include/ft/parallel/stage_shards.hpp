#pragma once
// ZeRO-3's parameter shards (FSDP's FULL_SHARD): every stage of the model,
// frozen ones too, keeps only this rank's range of its values between uses.
// The whole values are gathered from every rank just before the stage runs,
// forward or backward, and dropped right after; the next stage's gather is
// started early (prefetch), so it moves while this stage computes. Shards
// live in the device's memory, as the whole values do.
//
// A stage is cut in parts, each over its own ranks: with expert parallelism
// a sparse block's run of routed experts (its windows, declared last) is cut
// over the ranks that hold the same run, the rest of the block over the
// whole job. A rank's shard of a stage is its range of each part, in order.
//
// A packed stage (a 4-bit or GPTQ base, models/quantized_weights.hpp) is cut
// at its HF tensors' boundaries instead, and each rank keeps its range
// packed: gathering it, each rank dequantizes its own tensors into its
// range and the ranges are gathered as whole values. The traffic is that of
// ZeRO-3 over a whole base, while each rank holds 1/world of the packed
// weights and dequantizes 1/world of each stage (docs/design.md).
#include <string>
#include <vector>

#include "ft/comm/communicator.hpp"
#include "ft/models/transformer.hpp"
#include "ft/parallel/shard_layout.hpp"
#include "ft/tensor/tensor.hpp"

namespace ft::parallel {

// A range of a stage's buffer, [offset, offset + layout's size), cut over the ranks of `group`.
struct ShardedPart {
  index_t offset = 0;
  ShardLayout layout;
  comm::Communicator* group = nullptr;

  index_t length() const { return layout.end(group->size() - 1); }
  index_t owned() const { return layout.size(group->rank()); }
};

template <element T, class Device = device::Cpu>
class StageShards {
  using Memory = typename Device::Memory;

public:
  // `parts[s + 1]` cuts stage s (-1 the embedding, L the head), except a
  // packed stage, which cut_packed cuts as it loads. A stage's shard is made
  // when it loads (keep_from_whole).
  StageShards(comm::Communicator& comm, models::Transformer<T, Device>& model, std::vector<std::vector<ShardedPart>> parts)
      : comm_(comm), model_(model), last_(model.config().num_layers) {
    for (index_t s = -1; s <= last_; ++s) {
      Stage stage;
      stage.params = &model.stage_parameters(s);
      stage.parts = std::move(parts[std::size_t(s + 1)]);
      stage.name = s < 0 ? "the embedding" : s == last_ ? "the head" : "layers." + std::to_string(s);
      stages_.push_back(std::move(stage));
    }
  }

  // This rank's values of part k of stage s: its range of that part.
  T* shard(index_t s, std::size_t k = 0) {
    Stage& stage = at(s);
    index_t before = 0;
    for (std::size_t j = 0; j < k; ++j) before += stage.parts[j].owned();
    return stage.shard.data() ? stage.shard.data() + before : nullptr;
  }
  std::size_t shard_bytes() const {
    std::size_t n = 0;
    for (const Stage& s : stages_) n += std::size_t(s.shard.numel()) * sizeof(T);
    return n;
  }

  // Starts gathering stage s's whole values, unless they are there or on their way.
  void prefetch(index_t s) {
    if (s < -1 || s > last_) return;
    Stage& stage = at(s);
    if (stage.whole) return;
    stage.params->allocate_values();
    const T* mine = stage.shard.data();
    if (stage.packed) {
      const ShardedPart& p = stage.parts.front();
      const int r = p.group->rank();
      stage.dequantized = Tensor<T, Memory>(Shape{p.owned()});
      model_.quantized_weights().fill_range(s, p.layout.begin(r), p.layout.end(r), stage.dequantized.data());
      mine = stage.dequantized.data();
    }
    for (const ShardedPart& p : stage.parts) {
      stage.gathering.push_back(p.group->all_gather(
          std::span<const T>(mine, std::size_t(p.owned())),
          std::span<T>(stage.params->values().data() + p.offset, std::size_t(p.length())), p.layout.counts(),
          "parameters of " + stage.name));
      mine += p.owned();
    }
    stage.whole = true;
  }
  // Stage s's whole values, once gathered.
  void gather(index_t s) {
    prefetch(s);
    wait(at(s));
  }
  // Drops stage s's whole values and gradients.
  void release(index_t s) {
    Stage& stage = at(s);
    wait(stage);
    stage.params->release_values();
    stage.whole = false;
  }
  // After whole values were loaded: keep this rank's range of each part (a
  // packed stage kept its range packed as it loaded).
  void keep_from_whole(index_t s) {
    Stage& stage = at(s);
    if (stage.packed) return;
    index_t count = 0;
    for (const ShardedPart& p : stage.parts) count += p.owned();
    if (count == 0) return;
    // Made once: the optimizer steps these values in place (a later load, a resume's, refills them).
    if (stage.shard.numel() != count)
      stage.shard = Tensor<T, Memory>(Shape{count}, typename Tensor<T, Memory>::Uninitialized{});
    T* mine = stage.shard.data();
    for (const ShardedPart& p : stage.parts) {
      const T* v = stage.params->values().data() + p.offset + p.layout.begin(p.group->rank());
      Device::copy(mine, v, std::size_t(p.owned()) * sizeof(T));
      mine += p.owned();
    }
  }
  // A packed stage as it loads: cut at its HF tensors' boundaries (`parts`),
  // and the range of its buffer this rank keeps.
  std::pair<index_t, index_t> cut_packed(index_t s, const std::vector<models::ParameterEntry>& parts) {
    Stage& stage = at(s);
    stage.parts = {{0, ShardLayout(parts, stage.params->size(), comm_.size(), false), &comm_}};
    stage.packed = true;
    return {stage.parts.front().layout.begin(comm_.rank()), stage.parts.front().layout.end(comm_.rank())};
  }
  index_t last() const { return last_; }

private:
  struct Stage {
    models::ParameterBuffer<T, Memory>* params = nullptr;
    std::vector<ShardedPart> parts;
    Tensor<T, Memory> shard;        // this rank's values; none when its ranges are empty, or the stage is packed
    Tensor<T, Memory> dequantized;  // a packed stage's range, while it is gathered
    std::vector<comm::Work> gathering;
    bool whole = false, packed = false;
    std::string name;
  };
  Stage& at(index_t s) { return stages_[std::size_t(s + 1)]; }
  static void wait(Stage& stage) {
    for (const comm::Work& w : stage.gathering) w.wait();
    stage.gathering.clear();
    stage.dequantized = {};
  }

  comm::Communicator& comm_;
  models::Transformer<T, Device>& model_;
  index_t last_;
  std::vector<Stage> stages_;
};

}  // namespace ft::parallel
