#pragma once
// A model of a given shape with freshly drawn weights, written as an HF
// directory: what `ftrun init` makes for pre-training from scratch and for
// ft's tiny models. Compiled once, into ft's library
// (src/models/initialise.cpp), so that its callers do not compile the layers.
//
// As HF Transformers initialises Llama and GPT-NeoX: every matrix and the
// embedding from N(0, std), the padding token's row 0, norm weights 1
// (0 where the norm scales by 1 + w), biases 0. Each tensor draws
// from a stream keyed by the seed, its stage and its name, so a tensor's
// values do not depend on the others.
#include <cstdint>
#include <filesystem>

#include "ft/models/weight_map.hpp"

namespace ft::models {

// Writes the weights (float32) into `dir`, which must exist, with the other
// files of `source` (config.json, tokenizer, chat template) beside them.
// Returns the number of parameters.
index_t save_initialised(const ModelSpec& spec, const std::filesystem::path& source, const std::filesystem::path& dir,
                         std::uint64_t seed, double std);

}  // namespace ft::models
