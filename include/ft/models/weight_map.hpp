#pragma once
// How a family's HF tensors land in ft's parameters. ft fuses what one GEMM
// can do at once: q, k and v projections are rows of one `qkv` weight; gate
// and up projections are rows of one `mlp_in` weight. A binding says which
// rows of which ft parameter an HF tensor fills, and in what row order.
#include <algorithm>
#include <string>
#include <vector>

#include "ft/models/transformer_config.hpp"

namespace ft::models {

enum class RowOrder {
  same,
  // GPT-NeoX's query_key_value interleaves per head: rows (head, {q,k,v}, d).
  // ft keeps all queries, then all keys, then all values: ({q,k,v}, head, d).
  neox_qkv,
};

struct WeightBinding {
  std::string hf_name;
  std::string param;        // ft's name, e.g. "layers.0.qkv.weight"
  index_t row_offset = 0;   // first row of `param` this tensor fills
  RowOrder order = RowOrder::same;
  std::string alias = {};   // another name the same tensor goes by (empty: none)
  // The file's tensor stacks this many equal blocks of the rows as its
  // first dimension, [stacked, rows / stacked, cols] (GraniteMoE's
  // experts); 0: it is [rows, cols] (or [rows]).
  index_t stacked = 0;
  bool operator==(const WeightBinding&) const = default;
};

// Whether a 4-bit base keeps this tensor in 4 bits (`hf_rank`: its number of
// dimensions in the file): a layer's linear weight, as transformers
// quantizes every nn.Linear but the head; not norms, biases, embeddings or
// stacked experts' tensors.
inline bool quantized_in_4bit_base(const WeightBinding& w, std::size_t hf_rank) {
  return w.param.starts_with("layers.") && w.stacked == 0 && hf_rank == 2 && w.hf_name.ends_with(".weight");
}

// The shape of a binding's tensor in the file, for `rows` rows of `cols`
// columns (cols 0: a vector).
inline std::vector<std::int64_t> file_shape(const WeightBinding& w, index_t rows, index_t cols) {
  if (w.stacked > 0) return {w.stacked, rows / w.stacked, cols};
  if (cols == 0) return {rows};
  return {rows, cols};
}

// A family's reading of one config.json: the shape and the weight map.
struct ModelSpec {
  TransformerConfig config;
  std::vector<WeightBinding> weights;
  // Name prefixes of tensors that belong to the checkpoint but not to the
  // model (a multimodal model's vision tower beside the text model it
  // trains): a saved model carries them over unchanged.
  std::vector<std::string> carried = {};
  bool operator==(const ModelSpec&) const = default;
};

// A config.json as a family reads it: the model's description, and the
// family's name and linear projections (what LoRA may target in it).
struct ModelReading {
  ModelSpec spec;
  std::string family;
  std::vector<std::string> linear_modules, default_lora_targets;
};

// Rows of an ft parameter (of param_rows rows in all) that binding w fills:
// from its row_offset up to the next binding into the same parameter.
inline index_t binding_rows(const ModelSpec& spec, const WeightBinding& w, index_t param_rows) {
  index_t end = param_rows;
  for (const WeightBinding& other : spec.weights)
    if (other.param == w.param && other.row_offset > w.row_offset) end = std::min(end, other.row_offset);
  return end - w.row_offset;
}

// Row r of ft's layout -> row of the HF tensor, for a tensor of `rows` rows.
inline index_t hf_row(RowOrder order, index_t r, index_t rows, index_t heads) {
  if (order == RowOrder::same) return r;
  index_t D = rows / (3 * heads);
  index_t part = r / (heads * D), head = r / D % heads, d = r % D;
  return (head * 3 + part) * D + d;
}

// Row h of the HF tensor -> row of ft's layout (hf_row undone).
inline index_t ft_row(RowOrder order, index_t h, index_t rows, index_t heads) {
  if (order == RowOrder::same) return h;
  index_t D = rows / (3 * heads);
  index_t head = h / (3 * D), part = h / D % 3, d = h % D;
  return (part * heads + head) * D + d;
}

// How many rows, from any multiple of this count, follow one another in
// both layouts: all of them, or one head's part of q, k or v.
inline index_t contiguous_rows(RowOrder order, index_t rows, index_t heads) {
  return order == RowOrder::same ? rows : rows / (3 * heads);
}

}  // namespace ft::models
