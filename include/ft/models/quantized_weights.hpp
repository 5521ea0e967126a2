#pragma once
// A frozen model's layers kept quantized (QLoRA's 4-bit base, or a GPTQ
// model's): each quantized HF tensor of a block stays packed
// (quant/packed_weight.hpp) between uses,
// and the stage's values exist only while the stage runs. Before a stage's
// forward or backward its buffer is made and filled, each quantized tensor
// dequantized into its rows and every other tensor of the stage (norms,
// biases) copied from the rows kept at load; after, the buffer is dropped.
// So the model holds its packed weights, its small tensors whole, and one
// or two layers' values at a time, as PEFT's QLoRA dequantizes a layer's
// weight for each product and drops it. Under ZeRO-3 a rank keeps only the
// tensors of its range of each stage (keep_partial), and the stage's values
// come from a gather in which each rank fills its range (fill_range).
//
// Dequantizing is the format's reference (bitsandbytes': code value times
// absmax in float32, rounded to the weight's dtype; GPTQ's in fp16), then
// converted to the model's element type, as their products cast the weight
// to the input's dtype.
#include <algorithm>
#include <memory>
#include <type_traits>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/device/cpu/launch.hpp"
#include "ft/models/parameters.hpp"
#include "ft/models/weight_map.hpp"
#include "ft/quant/packed_weight.hpp"

namespace ft::models {

template <element T, class Device>
class QuantizedWeights {
  using Memory = typename Device::Memory;

public:
  // One HF tensor of a quantized stage: packed, or its rows kept as loaded.
  struct Part {
    index_t offset = 0;  // of its first row in the stage's buffer
    index_t rows = 0, cols = 1;
    RowOrder order = RowOrder::same;
    index_t heads = 0;  // for order
    std::shared_ptr<const quant::PackedWeight> packed;
    Tensor<T, Memory> kept;
  };

  bool any() const { return !stages_.empty(); }
  // Whether stage s was packed (this rank may keep none of its parts: ZeRO-3).
  bool holds(index_t s) const { return std::size_t(s + 1) < stages_.size() && stages_[std::size_t(s + 1)].packed; }
  void add(index_t s, Part part) {
    StageParts& stage = at(s);
    stage.packed = true;
    stage.parts.push_back(std::move(part));
  }
  const std::vector<Part>& parts(index_t s) const { return stages_[std::size_t(s + 1)].parts; }
  // Stage s is packed, but this rank keeps only the parts in a range of it
  // (ZeRO-3: the others' ranges arrive by a gather, StageShards).
  void keep_partial(index_t s) {
    at(s).packed = true;
    at(s).partial = true;
  }

  // Makes stage s's values from its parts (the buffer must have none).
  void fill(ParameterBuffer<T, Memory>& buffer, index_t s) {
    if (stages_[std::size_t(s + 1)].partial)
      throw Error("internal: a stage this rank keeps a range of is dequantized whole");
    // Zeroed only where some of the buffer is no part's (a weight the files do not hold reads as zero).
    if (covers(s, buffer.size())) buffer.allocate_values();
    else buffer.allocate_zeroed_values();
    fill_range(s, 0, buffer.size(), buffer.values().data());
  }
  // Dequantizes the parts of stage s that lie in [begin, end) of its buffer
  // into `into`, which holds that range (zero where no part is).
  void fill_range(index_t s, index_t begin, index_t end, T* into) {
    for (const Part& p : parts(s)) {
      if (p.offset < begin || p.offset >= end) continue;
      T* at = into + (p.offset - begin);
      const std::size_t count = std::size_t(p.rows * p.cols);
      if (!p.packed) {
        Device::copy(at, p.kept.data(), count * sizeof(T));
        continue;
      }
      fill_part(p, at);
    }
  }

  // What the packed weights and kept rows hold.
  std::size_t bytes() const {
    std::size_t n = 0;
    for (const auto& stage : stages_)
      for (const Part& p : stage.parts) n += p.packed ? p.packed->bytes() : std::size_t(p.kept.numel()) * sizeof(T);
    return n;
  }

private:
  // Whether stage s's parts tile its buffer of `size` values, end to end.
  bool covers(index_t s, index_t size) const {
    std::vector<std::pair<index_t, index_t>> extents;
    for (const Part& p : parts(s)) extents.emplace_back(p.offset, p.offset + p.rows * p.cols);
    std::ranges::sort(extents);
    index_t end = 0;
    for (const auto& [first, last] : extents) {
      if (first != end) return false;
      end = last;
    }
    return end == size;
  }

  // Values dequantized a panel at a time: one stays in the caches between
  // being made and being written out.
  static constexpr index_t panel_values = 16384;

  // Dequantizes a packed part into `at` (its rows in the stage's buffer,
  // in ft's row order), a panel of rows consecutive in HF's order at a
  // time, the panels spread over the host's threads.
  void fill_part(const Part& p, T* at) {
    struct Panel {
      index_t row, rows;  // ft's first row, and how many follow it in HF's order too
    };
    std::vector<Panel> panels;
    const index_t most = std::max<index_t>(1, panel_values / p.cols);
    for (index_t r = 0; r < p.rows;) {
      const index_t h = hf_row(p.order, r, p.rows, p.heads);
      index_t n = 1;
      while (r + n < p.rows && n < most && hf_row(p.order, r + n, p.rows, p.heads) == h + n) ++n;
      panels.push_back({r, n});
      r += n;
    }
    // The device's own memory is written once, from a staged copy on the host.
    constexpr bool host = std::is_same_v<Memory, memory::Host>;
    T* out = at;
    if constexpr (!host) {
      staged_.resize(std::size_t(p.rows * p.cols));
      out = staged_.data();
    }
    cpu::parallel_for(index_t(panels.size()), [&](index_t k) {
      thread_local std::vector<float> values;
      const Panel& panel = panels[std::size_t(k)];
      values.resize(std::size_t(panel.rows * p.cols));
      p.packed->dequantize_rows(hf_row(p.order, panel.row, p.rows, p.heads), values);
      std::transform(values.begin(), values.end(), out + panel.row * p.cols, [](float v) { return T(v); });
    });
    if constexpr (!host) Device::from_host(at, staged_.data(), staged_.size() * sizeof(T));
  }

  struct StageParts {
    bool packed = false, partial = false;
    std::vector<Part> parts;
  };
  StageParts& at(index_t s) {
    if (stages_.size() <= std::size_t(s + 1)) stages_.resize(std::size_t(s + 2));
    return stages_[std::size_t(s + 1)];
  }

  std::vector<StageParts> stages_;  // by stage index + 1
  std::vector<T> staged_;           // a part dequantized on the host, for a device with memory of its own
};

}  // namespace ft::models
