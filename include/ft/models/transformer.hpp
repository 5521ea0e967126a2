#pragma once
// A decoder-only transformer as a list of stages: embedding, N blocks, head.
// The stages hold the weights; a micro-batch's activations live in its
// Context (context.hpp). `forward` and `backward` run a contiguous range of
// stages on one context, and a schedule is the order in which they are
// called: `forward_backward` is the sequential one (one micro-batch, every
// stage forward then every stage backward), parallel/pipeline.hpp has others.
//
// Backward adds every parameter's gradient into its stage's buffer, scaled
// by 1 / token_count. The device holds the weights and every context's
// buffers; loading and reading HF tensors copy through the host.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "ft/core/compiled_dtypes.hpp"
#include "ft/comm/communicator.hpp"
#include "ft/io/packed_weights.hpp"
#include "ft/io/model_weights.hpp"
#include "ft/models/block.hpp"
#include "ft/models/gather_windows.hpp"
#include "ft/models/quantized_weights.hpp"
#include "ft/models/stages.hpp"
#include "ft/models/weight_map.hpp"

namespace ft::models {

// Calls around each stage of a forward and backward, by stage index: -1 the
// embedding, 0..L-1 the blocks, L the head. Data parallelism lives here:
// ZeRO-3 gathers a stage's parameters before it runs and frees them after;
// DDP and ZeRO-1/2 reduce a stage's gradient as soon as after_backward says
// it is complete, while earlier stages still run backward. Order:
//   forward   before_forward(s), after_forward(s) for s = -1, 0, ..., L-1;
//             then before_forward(L) (the head's forward also begins its
//             backward, so it has no after_forward when training)
//   backward  after_backward(L); before_backward(l), after_backward(l) for
//             l = L-1 down to 0; before_backward(-1), after_backward(-1)
// With tied embeddings the head reads the embedding table and adds to its
// gradient, so the embedding's gradient is complete only at the very end.
// Evaluation (options.backward false) ends with after_forward(L).
struct StageHooks {
  std::function<void(index_t stage)> before_forward, after_forward, before_backward, after_backward;
};

// Builds a model whose stages allocate nothing yet: a training run's
// parallelism allocates what this rank keeps of each stage before the
// weights load (parallel/runtime.hpp), so no rank holds more than that.
struct Unallocated {};
inline constexpr Unallocated unallocated{};

// How load() treats each stage on this rank: `begin(s)` says whether stage s
// loads here at all (load makes room for its values if it has none, one
// stage at a time); `end(s)` runs once its
// tensors are in (ZeRO-3 keeps this rank's shard and drops the rest). Unset:
// every stage loads into the values it has.
struct StageLoading {
  std::function<bool(index_t stage)> begin;
  std::function<void(index_t stage)> end;
  // A stage whose weights stay packed (a 4-bit base), given each HF
  // tensor's place in the stage's buffer: the range of the buffer this rank
  // keeps (ZeRO-3); the tensors outside it are neither read nor quantized.
  std::function<std::pair<index_t, index_t>(index_t stage, const std::vector<ParameterEntry>& parts)> packed_range = {};
};

template <element T, class Device = device::Cpu>
class Transformer {
public:
  using Memory = typename Device::Memory;
  using Parameters = ParameterBuffer<T, Memory>;
  using Context = models::Context<T, Device>;

  // A frozen model (trainable = false) keeps no parameter gradients: adapters
  // train beside it, and backward only carries gradients through it.
  explicit Transformer(ModelSpec spec, bool trainable = true) : Transformer(std::move(spec), trainable, unallocated) {
    for (index_t s = -1; s <= spec_.config.num_layers; ++s) stage_parameters(s).allocate(trainable);
  }
  Transformer(ModelSpec spec, bool trainable, Unallocated)
      : spec_(std::move(spec)), embedding_(spec_.config, trainable), head_(spec_.config, trainable) {
    blocks_.reserve(std::size_t(spec_.config.num_layers));
    for (index_t i = 0; i < spec_.config.num_layers; ++i) blocks_.emplace_back(spec_.config, i, trainable);
    if (spec_.config.tie_embeddings) head_.tie_to(embedding_);
    if (spec_.config.moe.parallel > 1)
      for (auto& b : blocks_) b.set_expert_exchange(&expert_exchange_);
  }
  Transformer(const Transformer&) = delete;  // stages point into each other
  Transformer& operator=(const Transformer&) = delete;

  // With expert parallelism (config().moe.parallel > 1): the ranks that
  // hold the other experts, in the order of their runs. Not owned.
  void set_expert_group(comm::Communicator* group) { expert_exchange_.set_group(group); }

  // Applies to contexts made afterwards.
  void set_memory_options(const MemoryOptions& options) {
    memory_ = options;
    sequential_.reset();
  }
  // A context for one micro-batch in flight at a time; the model must outlive it.
  std::unique_ptr<Context> make_context() { return std::make_unique<Context>(spec_.config, memory_, shared_); }

  const TransformerConfig& config() const { return spec_.config; }
  const ModelSpec& spec() const { return spec_; }
  EmbeddingStage<T, Device>& embedding() { return embedding_; }
  std::vector<Block<T, Device>>& blocks() { return blocks_; }
  HeadStage<T, Device>& head() { return head_; }
  // A stage, by the index StageHooks use.
  Stage<T, Device>& stage(index_t s) {
    if (s < 0) return embedding_;
    if (s >= spec_.config.num_layers) return head_;
    return blocks_[std::size_t(s)];
  }
  Parameters& stage_parameters(index_t s) { return stage(s).parameters(); }

  // The sequential schedule, one micro-batch: the summed loss over the
  // batch's scored targets; logits [N, V] are written when not null.
  double forward_backward(const Batch& batch, const HeadOptions& options, T* logits = nullptr,
                          const StageHooks& hooks = {}) {
    if (!sequential_) sequential_ = make_context();
    Context& context = *sequential_;
    context.begin(batch, options, logits);
    const index_t L = spec_.config.num_layers;
    forward(context, -1, L, hooks);
    if (options.backward) backward(context, -1, L, hooks);
    return context.loss;
  }

  // Stages first..last forward on a context; stage `first` reads
  // context.stream(first) (the embedding: the batch).
  void forward(Context& context, index_t first, index_t last, const StageHooks& hooks = {}) {
    const index_t L = spec_.config.num_layers;
    for (index_t s = first; s <= last; ++s) {
      call(hooks.before_forward, s);
      dequantize_stage(s);
      stage(s).forward(context);
      if (s == L && spec_.config.moe.aux_loss_coef > 0) {
        // The load-balancing loss weighs in the step as much as the batch's share of its scored tokens.
        const double aux = context.router_aux_loss() * double(context.batch().scored_tokens());
        context.loss += spec_.config.moe.aux_loss_coef * aux;
        if (context.options().backward) router_aux_sum_ += aux;
      }
      if (s == L && context.options().backward) continue;  // the head's forward began its backward
      call(hooks.after_forward, s);
      drop_dequantized(s);
      if (s >= 0 && s < L) context.offload_input(s);
    }
  }

  // Stages last..first backward on a context; context.gradient() holds the
  // gradient of stage last's output (none for the head). When the context
  // defers weight gradients, a stage's gradient is complete (after_backward)
  // only once weights() has run.
  void backward(Context& context, index_t first, index_t last, const StageHooks& hooks = {}) {
    const index_t L = spec_.config.num_layers;
    for (index_t s = last; s >= first; --s) {
      if (s < L) call(hooks.before_backward, s);
      if (s >= 0 && s < L) context.restore_input(s);
      dequantize_stage(s);
      stage(s).backward(context);
      if (context.defer_weight_gradients) continue;
      call(hooks.after_backward, s);
      drop_dequantized(s);
    }
  }

  // The weight gradients backward deferred, stages last..first.
  void weights(Context& context, index_t first, index_t last, const StageHooks& hooks = {}) {
    for (index_t s = last; s >= first; --s) {
      stage(s).weight_gradients(context);
      call(hooks.after_backward, s);
      drop_dequantized(s);
    }
  }

  // Quantizes the blocks' linear weights to 4 bits as they load (QLoRA's
  // base; models/quantized_weights.hpp). Weights the files hold in
  // bitsandbytes' 4-bit layout stay packed whether or not this is set.
  void quantize_on_load(const quant::FourBitOptions& options) { quantize_ = options; }
  bool quantized() const { return quantized_.any(); }
  QuantizedWeights<T, Device>& quantized_weights() { return quantized_; }
  // What the 4-bit weights and the quantized stages' other tensors hold.
  std::size_t quantized_bytes() const { return quantized_.bytes(); }
  // A stage with 4-bit weights has values only between these (no-ops for
  // any other stage): the engines call them around each use of a stage.
  void dequantize_stage(index_t s) {
    if (quantized_.holds(s) && !stage_parameters(s).values().data()) quantized_.fill(stage_parameters(s), s);
  }
  void drop_dequantized(index_t s) {
    if (quantized_.holds(s)) stage_parameters(s).release_values();
  }

  // The load-balancing loss of the micro-batches trained since the last
  // call, each times its scored tokens (a mixture of experts that adds it;
  // 0 otherwise): what a step logs as aux_loss.
  double take_router_aux() { return std::exchange(router_aux_sum_, 0.0); }

  void zero_grads() {
    embedding_.parameters().zero_grads();
    for (auto& b : blocks_) b.parameters().zero_grads();
    head_.parameters().zero_grads();
  }

  index_t parameter_count() const {
    index_t n = embedding_.parameters().size() + head_.parameters().size();
    for (const auto& b : blocks_) n += b.parameters().size();
    return n;
  }

  // The stage buffer that holds an ft parameter name ("layers.3.qkv.weight").
  std::pair<Parameters*, const ParameterEntry*> find_parameter(const std::string& name) {
    auto look = [&](Parameters& buffer, const std::string& prefix) -> std::pair<Parameters*, const ParameterEntry*> {
      if (name.compare(0, prefix.size(), prefix) != 0) return {nullptr, nullptr};
      const auto* entry = buffer.find(std::string_view(name).substr(prefix.size()));
      return {entry ? &buffer : nullptr, entry};
    };
    if (auto r = look(embedding_.parameters(), embedding_.prefix()); r.second) return r;
    for (auto& b : blocks_)
      if (auto r = look(b.parameters(), b.prefix()); r.second) return r;
    if (auto r = look(head_.parameters(), head_.prefix()); r.second) return r;
    throw Error("no parameter named \"" + name + "\" in this model");
  }

  // Loads every tensor of the weight map, converting to T, one stage after
  // another (see StageLoading). Tensors the map does not name are ignored
  // (HF files may carry buffers such as rotary inv_freq); a tensor the map
  // needs and the files lack, or of another shape, is an error found before
  // anything loads, on every rank whichever stages it keeps.
  void load(const io::ModelWeights& weights) {
    const index_t L = spec_.config.num_layers;
    std::vector<std::vector<const WeightBinding*>> by_stage(std::size_t(L + 2));
    for (const WeightBinding& w : spec_.weights) {
      if (!io::stored_packed(weights, w.hf_name)) (void)tensor_of(weights, w);
      by_stage[std::size_t(stage_holding(*find_parameter(w.param).first) + 1)].push_back(&w);
    }
    for (index_t s = -1; s <= L; ++s) {
      if (loading_.begin && !loading_.begin(s)) continue;
      Parameters& p = stage_parameters(s);
      if (p.size() > 0 && !p.values().data()) p.allocate_zeroed_values();
      for (const WeightBinding* w : by_stage[std::size_t(s + 1)]) {
        if (io::stored_packed(weights, w->hf_name)) continue;  // pack_stage reads it
        auto [buffer, entry] = find_parameter(w->param);
        const index_t cols = entry->shape.rank == 2 ? entry->shape[1] : 1;
        // Of a windowed parameter, only the binding's rows inside the window load.
        const index_t rows = binding_rows(spec_, *w, entry->rows());
        const index_t begin = std::max(w->row_offset, entry->first_row),
                      end = entry->windowed() ? std::min(w->row_offset + rows, entry->first_row + entry->shape[0])
                                              : w->row_offset + rows;
        if (begin >= end) continue;
        T* into = buffer->values().data() + entry->offset + (begin - entry->first_row) * cols;
        const bool part = end - begin < rows;
        // The CPU's buffers are host memory: the rows go straight there.
        if constexpr (std::is_same_v<Device, device::Cpu>) {
          if (part) read_binding_rows(weights, *w, begin - w->row_offset, end - begin, cols, into);
          else read_binding_into(weights, *w, into);
        } else {
          std::vector<T> host(std::size_t((end - begin) * cols));
          if (part) read_binding_rows(weights, *w, begin - w->row_offset, end - begin, cols, host.data());
          else read_binding_into(weights, *w, host.data());
          Device::from_host(into, host.data(), host.size() * sizeof(T));
        }
      }
      pack_stage(weights, s, by_stage[std::size_t(s + 1)]);
      if (loading_.end) loading_.end(s);
    }
  }

  // Expert parallelism: puts together the whole rows of stage s's windowed
  // parameters from the windows of `group`'s ranks, for read_hf_rows to
  // read until drop_gathered_rows(). Every rank of the group calls it.
  void gather_rows(index_t s, comm::Communicator& group) {
    gather_windows(stage_parameters(s), group, stage(s).prefix());
  }
  void drop_gathered_rows() {
    for (index_t s = -1; s <= spec_.config.num_layers; ++s) stage_parameters(s).drop_wholes();
  }
  void set_stage_loading(StageLoading loading) { loading_ = std::move(loading); }

  // One ft parameter as the HF files hold it, in ft's layout, on the host:
  // e.g. the embedding rows a prompt starts from, read on a rank that keeps
  // no whole table.
  std::vector<T> read_parameter(const io::ModelWeights& weights, const std::string& param) {
    const ParameterEntry* entry = find_parameter(param).second;
    const index_t cols = entry->shape.rank == 2 ? entry->shape[1] : 1;
    std::vector<T> out(std::size_t(entry->shape.numel()));
    for (const WeightBinding& w : spec_.weights) {
      if (w.param != param) continue;
      const std::vector<T> rows = read_binding(weights, w);
      std::copy(rows.begin(), rows.end(), out.begin() + w.row_offset * cols);
    }
    return out;
  }

  // An HF tensor of the model (its values, or its gradient) in HF's row
  // order, given to `put` as spans of T in host memory, a run of rows at a
  // time (about 1 MiB, or one row when a row is larger): writing a model
  // holds one run beside the weights, not a copy of a tensor. The CPU's
  // spans are the weights themselves; a device's are staged on the host.
  template <class Put>
  void read_hf_rows(const WeightBinding& w, bool gradient, Put&& put) {
    auto [buffer, entry] = find_parameter(w.param);
    if (stage_reader_ && !gradient)
      for (index_t s = -1; s <= spec_.config.num_layers; ++s)
        if (&stage_parameters(s) == buffer) stage_reader_(s);
    // A 4-bit stage's values, for this read only.
    const index_t held = stage_holding(*buffer);
    const bool unpacked = !gradient && quantized_.holds(held) && !buffer->values().data();
    if (unpacked) dequantize_stage(held);
    const index_t cols = entry->shape.rank == 2 ? entry->shape[1] : 1;
    const index_t rows = binding_rows(spec_, w, entry->rows()), heads = spec_.config.num_heads;
    const index_t run = contiguous_rows(w.order, rows, heads);
    const index_t per_piece = std::max<index_t>(1, index_t(1 << 20) / index_t(sizeof(T) * std::size_t(cols)));
    const T* base = rows_of(*buffer, *entry, w, rows, gradient);
    std::vector<T> staged;
    for (index_t h = 0; h < rows;) {
      const index_t n = std::min({per_piece, run - h % run, rows - h});
      const T* from = base + ft_row(w.order, h, rows, heads) * cols;
      if constexpr (std::is_same_v<Device, device::Cpu>) {
        put(std::span<const T>(from, std::size_t(n * cols)));
      } else {
        staged.resize(std::size_t(n * cols));
        Device::to_host(staged.data(), from, staged.size() * sizeof(T));
        put(std::span<const T>(staged));
      }
      h += n;
    }
    if (unpacked) drop_dequantized(held);
  }

  // The same as float in one vector; `shape` receives its HF shape. The
  // parity tests and tools read through this.
  std::vector<float> hf_tensor(const WeightBinding& w, std::vector<std::int64_t>& shape, bool gradient = false) {
    shape = hf_shape(w);
    std::vector<float> out;
    out.reserve(std::size_t(shape[0] * (shape.size() == 2 ? shape[1] : 1)));
    read_hf_rows(w, gradient, [&out](std::span<const T> rows) {
      for (const T& x : rows) out.push_back(float(x));
    });
    return out;
  }

  // Called with a stage's index before read_hf_rows reads that stage's values:
  // ZeRO-3 gathers the stage there, so a model is written one stage at a time.
  void set_stage_reader(std::function<void(index_t stage)> reader) { stage_reader_ = std::move(reader); }

  // The HF shape of a weight.
  std::vector<std::int64_t> hf_shape(const WeightBinding& w) {
    auto [buffer, entry] = find_parameter(w.param);
    return file_shape(w, binding_rows(spec_, w, entry->rows()), entry->shape.rank == 2 ? entry->shape[1] : 0);
  }

  // A parameter's gradient in HF's layout, as float (tests and tools).
  std::vector<float> hf_gradient(const std::string& hf_name) {
    for (const WeightBinding& w : spec_.weights) {
      if (w.hf_name != hf_name && w.alias != hf_name) continue;
      std::vector<std::int64_t> shape;
      return hf_tensor(w, shape, true);
    }
    throw Error("no HF tensor named \"" + hf_name + "\" in this model's weight map");
  }

private:
  static void call(const std::function<void(index_t)>& hook, index_t stage) {
    if (hook) hook(stage);
  }

  // Where the `rows` rows binding w reads begin, in values or gradients: a
  // windowed parameter's rows are in its window or, put together for
  // writing, in the buffer's whole copy (gather_rows).
  const T* rows_of(Parameters& buffer, const ParameterEntry& entry, const WeightBinding& w, index_t rows,
                   bool gradient) {
    const index_t cols = entry.shape.rank == 2 ? entry.shape[1] : 1;
    if (const auto* whole = buffer.whole(entry.name); whole && !gradient) return whole->data() + w.row_offset * cols;
    if (w.row_offset < entry.first_row || w.row_offset + rows > entry.first_row + entry.shape[0])
      throw Error("internal: " + w.hf_name + " is held by another rank of the expert-parallel group");
    return (gradient ? buffer.grads() : buffer.values()).data() + entry.offset + (w.row_offset - entry.first_row) * cols;
  }

  index_t stage_holding(const Parameters& buffer) {
    for (index_t s = -1; s <= spec_.config.num_layers; ++s)
      if (&stage_parameters(s) == &buffer) return s;
    throw Error("internal: a parameter buffer of no stage");
  }

  // The file tensor a binding reads, checked against the shape the
  // configuration implies.
  const io::TensorView& tensor_of(const io::ModelWeights& weights, const WeightBinding& w) {
    const io::TensorView* t = weights.find(w.hf_name);
    if (!t && !w.alias.empty()) t = weights.find(w.alias);
    if (!t) throw Error(weights.source().string() + ": missing tensor \"" + w.hf_name + "\"");
    const std::vector<std::int64_t> expected = hf_shape(w);
    if (t->shape != expected)
      throw Error(weights.source().string() + ": tensor \"" + t->name + "\" has shape " + shape_string(t->shape) +
                  ", the configuration implies " + shape_string(expected));
    return *t;
  }

  // A binding's rows converted from the file into host memory at `out`, in
  // ft's row order: straight into place when the order is HF's, else through
  // one staged copy. The file's pages of the tensor are dropped once read,
  // so loading holds one tensor of the file at a time, not all of it.
  void read_binding_into(const io::ModelWeights& weights, const WeightBinding& w, T* out) {
    const io::TensorView& t = tensor_of(weights, w);
    const io::SafetensorsFile& file = weights.file_of(t.name);
    if (w.order == RowOrder::same) {
      io::copy_elements(file, t, out, t.numel());
    } else {
      const ParameterEntry* entry = find_parameter(w.param).second;
      const index_t cols = entry->shape.rank == 2 ? entry->shape[1] : 1;
      const index_t rows = binding_rows(spec_, w, entry->shape[0]);
      std::vector<T> staged(std::size_t(t.numel()));
      io::copy_elements(file, t, staged.data(), t.numel());
      for (index_t r = 0; r < rows; ++r)
        std::copy_n(staged.data() + hf_row(w.order, r, rows, spec_.config.num_heads) * cols, cols, out + r * cols);
    }
    file.release(t);
  }
  // Rows [first, first + count) of a binding's rows (of `cols` columns, in
  // the files' order) into host memory at `out`: a windowed parameter's part.
  void read_binding_rows(const io::ModelWeights& weights, const WeightBinding& w, index_t first, index_t count,
                         index_t cols, T* out) {
    if (w.order != RowOrder::same) throw Error("internal: a windowed parameter's rows are in HF's order");
    const io::TensorView& t = tensor_of(weights, w);
    io::TensorView rows = t;
    const std::size_t width = t.bytes.size() / std::size_t(t.numel());
    rows.bytes = t.bytes.subspan(std::size_t(first * cols) * width, std::size_t(count * cols) * width);
    rows.shape = {count * cols};
    io::copy_elements(weights.file_of(t.name), rows, out, count * cols);
    weights.file_of(t.name).release(t);
  }

  // The same rows in a host vector of their own.
  std::vector<T> read_binding(const io::ModelWeights& weights, const WeightBinding& w) {
    std::vector<T> rows(std::size_t(tensor_of(weights, w).numel()));
    read_binding_into(weights, w, rows.data());
    return rows;
  }

  // After stage s loaded: keeps its 4-bit weights packed (read from the
  // files, or quantized now when quantize_on_load asked) and its other
  // tensors' rows, and drops its values.
  void pack_stage(const io::ModelWeights& weights, index_t s, const std::vector<const WeightBinding*>& bindings) {
    const bool quantizes = quantize_ && s >= 0 && s < spec_.config.num_layers;
    auto eligible = [&](const WeightBinding& w) { return quantizes && quantized_in_4bit_base(w, hf_shape(w).size()); };
    const bool any = std::ranges::any_of(bindings, [&](const WeightBinding* w) {
      return eligible(*w) || io::stored_packed(weights, w->hf_name);
    });
    if (!any) return;
    Parameters& p = stage_parameters(s);
    if (p.trainable())
      throw Error("a 4-bit base cannot be fine-tuned in full: it trains under an adapter (LoRA, prompt tuning)");
    std::vector<typename QuantizedWeights<T, Device>::Part> parts;
    std::vector<ParameterEntry> extents;  // each part's place in the stage's buffer
    for (const WeightBinding* w : bindings) {
      auto [buffer, entry] = find_parameter(w->param);
      if (entry->windowed()) throw Error("a 4-bit base with expert parallelism is not supported");
      typename QuantizedWeights<T, Device>::Part& part = parts.emplace_back();
      part.cols = entry->shape.rank == 2 ? entry->shape[1] : 1;
      part.rows = binding_rows(spec_, *w, entry->rows());
      part.offset = entry->offset + w->row_offset * part.cols;
      part.order = w->order;
      part.heads = spec_.config.num_heads;
      extents.push_back({w->hf_name, Shape{part.rows * part.cols}, part.offset});
    }
    index_t begin = 0, end = p.size();
    if (loading_.packed_range) {
      std::tie(begin, end) = loading_.packed_range(s, extents);
      quantized_.keep_partial(s);
    }
    for (std::size_t i = 0; i < bindings.size(); ++i) {
      const WeightBinding* w = bindings[i];
      typename QuantizedWeights<T, Device>::Part& part = parts[i];
      if (part.offset < begin || part.offset >= end) continue;
      const std::size_t count = std::size_t(part.rows * part.cols);
      if (io::stored_packed(weights, w->hf_name)) {
        std::shared_ptr<const quant::PackedWeight> packed = io::read_packed(weights, w->hf_name);
        if (packed->hf_shape() != hf_shape(*w))
          throw Error(weights.source().string() + ": quantized weight \"" + w->hf_name + "\" has shape " +
                      shape_string(packed->hf_shape()) + ", the configuration implies " + shape_string(hf_shape(*w)));
        part.packed = std::move(packed);
      } else if (eligible(*w)) {
        std::vector<T> ft_rows(count);
        Device::to_host(ft_rows.data(), p.values().data() + part.offset, count * sizeof(T));
        std::vector<float> hf_rows(count);
        for (index_t h = 0; h < part.rows; ++h)
          std::transform(ft_rows.begin() + ft_row(part.order, h, part.rows, part.heads) * part.cols,
                         ft_rows.begin() + (ft_row(part.order, h, part.rows, part.heads) + 1) * part.cols,
                         hf_rows.begin() + h * part.cols, [](T v) { return float(v); });
        part.packed = std::make_shared<quant::FourBitWeight>(
            quant::quantize_weight(hf_rows, hf_shape(*w), std::string(torch_dtype_name<T>()), *quantize_));
      } else {
        part.kept = Tensor<T, Memory>(Shape{index_t(count)}, typename Tensor<T, Memory>::Uninitialized{});
        Device::copy(part.kept.data(), p.values().data() + part.offset, count * sizeof(T));
      }
      quantized_.add(s, std::move(part));
    }
    p.release_values();
  }

  template <class E>
  static constexpr std::string_view torch_dtype_name() {
    if constexpr (std::is_same_v<E, bf16>) return "bfloat16";
    else if constexpr (std::is_same_v<E, f16>) return "float16";
    else if constexpr (std::is_same_v<E, double>) return "float64";
    else return "float32";
  }

  static std::string shape_string(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }

  ModelSpec spec_;
  std::function<void(index_t)> stage_reader_;
  StageLoading loading_;
  EmbeddingStage<T, Device> embedding_;
  std::vector<Block<T, Device>> blocks_;
  HeadStage<T, Device> head_;
  MemoryOptions memory_;
  ExpertExchange<T, Device> expert_exchange_;
  std::optional<quant::FourBitOptions> quantize_;
  QuantizedWeights<T, Device> quantized_;
  SharedActivations<T, Memory> shared_;
  std::unique_ptr<Context> sequential_;
  double router_aux_sum_ = 0;
};

}  // namespace ft::models

// Every member of the CPU's model over storage T, compiled once
// (core/compiled_dtypes.hpp).
#define FT_COMPILED_CPU_MODEL(EXTERN, T)                        \
  EXTERN template class models::Context<T, device::Cpu>;        \
  EXTERN template class models::Block<T, device::Cpu>;          \
  EXTERN template class models::EmbeddingStage<T, device::Cpu>; \
  EXTERN template class models::HeadStage<T, device::Cpu>;      \
  EXTERN template class models::Transformer<T, device::Cpu>;

FT_EXTERN_COMPILED_CPU(FT_COMPILED_CPU_MODEL)
