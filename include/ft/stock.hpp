#pragma once
// The policies ft ships, in one list: what the stock plugins offer on every
// device, what ftrun spells in C++ when a combination is missing, what the
// recipe's help names and what ft's engine library compiles once
// (train/compiled.hpp). Each policy's name and C++ type are in its own header;
// everything else reads them from here.
#include <string>
#include <string_view>
#include <tuple>

#include "ft/adapters/adapter.hpp"
#include "ft/models/bloom.hpp"
#include "ft/models/gpt_neox.hpp"
#include "ft/models/llama.hpp"
#include "ft/models/gpt_bigcode.hpp"
#include "ft/models/phi3.hpp"
#include "ft/optim/optimizer.hpp"
#include "ft/parallel/parallelism.hpp"
#include "ft/precision/precision.hpp"

namespace ft::stock {

using Families = std::tuple<models::Llama, models::GptNeox, models::Phi3, models::GptBigCode, models::Bloom>;
using Precisions = std::tuple<precision::FP32, precision::BF16True, precision::BF16Mixed, precision::FP16Mixed>;
using Parallelisms = std::tuple<parallel::Single, parallel::DDP, parallel::ZeRO<1>, parallel::ZeRO<2>, parallel::ZeRO<3>,
                                parallel::Pipeline>;
using Optimizers = std::tuple<optim::SGD, optim::AdamW, optim::Adafactor, optim::AdamW8bit, optim::AdamW4bit, optim::Lion>;
using Adapters = std::tuple<adapters::Full, adapters::LoRA, adapters::Prompt>;

// Every stock policy of every kind.
using All = decltype(std::tuple_cat(Families{}, Precisions{}, Parallelisms{}, Optimizers{}, Adapters{}));

// "fp32 | bf16-true | bf16-mixed | fp16-mixed": the names of a list's policies.
template <class List>
std::string names(std::string_view separator = " | ") {
  std::string out;
  std::apply([&](auto... p) { ((out += (out.empty() ? "" : std::string(separator)) + std::string(decltype(p)::name)), ...); },
             List{});
  return out;
}

}  // namespace ft::stock
