#pragma once
// ZeRO-3's parameter shards (FSDP's FULL_SHARD): every stage of the model,
// frozen ones too, keeps only this rank's range of its values between uses.
// The whole values are gathered from every rank just before the stage runs,
// forward or backward, and dropped right after; the next stage's gather is
// started early (prefetch), so it moves while this stage computes. Shards
// live in the device's memory, as the whole values do.
#include <string>
#include <vector>

#include "ft/comm/communicator.hpp"
#include "ft/models/transformer.hpp"
#include "ft/parallel/shard_layout.hpp"
#include "ft/tensor/tensor.hpp"

namespace ft::parallel {

template <element T, class Device = device::Cpu>
class StageShards {
  using Memory = typename Device::Memory;

public:
  // `layouts[s + 1]` cuts stage s (-1 the embedding, L the head). The shards
  // start zero; keep_from_whole fills one from loaded whole values.
  StageShards(comm::Communicator& comm, models::Transformer<T, Device>& model, std::vector<ShardLayout> layouts)
      : comm_(comm), last_(model.config().num_layers) {
    for (index_t s = -1; s <= last_; ++s) {
      Stage stage{&model.stage_parameters(s), layouts[std::size_t(s + 1)], {}, 0, {}, false, {}};
      stage.count = stage.layout.size(comm_.rank());
      if (stage.count > 0) stage.shard = Tensor<T, Memory>(Shape{stage.count});
      stage.name = s < 0 ? "the embedding" : s == last_ ? "the head" : "layers." + std::to_string(s);
      stages_.push_back(std::move(stage));
    }
  }

  // This rank's values of stage s, [layout.begin(rank), layout.end(rank)).
  T* shard(index_t s) { return at(s).shard.data(); }
  std::size_t shard_bytes() const {
    std::size_t n = 0;
    for (const Stage& s : stages_) n += std::size_t(s.count) * sizeof(T);
    return n;
  }

  // Starts gathering stage s's whole values, unless they are there or on their way.
  void prefetch(index_t s) {
    if (s < -1 || s > last_) return;
    Stage& stage = at(s);
    if (stage.whole) return;
    stage.params->allocate_values();
    stage.gathering = comm_.all_gather(std::span<const T>(stage.shard.data(), std::size_t(stage.count)),
                                       std::span<T>(stage.params->values().data(), std::size_t(stage.params->size())),
                                       stage.layout.counts(), "parameters of " + stage.name);
    stage.whole = true;
  }
  // Stage s's whole values, once gathered.
  void gather(index_t s) {
    prefetch(s);
    at(s).gathering.wait();
  }
  // Drops stage s's whole values and gradients.
  void release(index_t s) {
    Stage& stage = at(s);
    stage.gathering.wait();
    stage.params->release_values();
    stage.whole = false;
  }
  // After whole values were loaded: keep this rank's range of them.
  void keep_from_whole(index_t s) {
    Stage& stage = at(s);
    const T* v = stage.params->values().data() + stage.layout.begin(comm_.rank());
    Device::copy(stage.shard.data(), v, std::size_t(stage.count) * sizeof(T));
  }
  index_t last() const { return last_; }

private:
  struct Stage {
    models::ParameterBuffer<T, Memory>* params;
    ShardLayout layout;
    Tensor<T, Memory> shard;  // none when this rank's range is empty
    index_t count;
    comm::Work gathering;
    bool whole = false;
    std::string name;
  };
  Stage& at(index_t s) { return stages_[std::size_t(s + 1)]; }

  comm::Communicator& comm_;
  index_t last_;
  std::vector<Stage> stages_;
};

}  // namespace ft::parallel
