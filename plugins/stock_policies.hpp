#pragma once
// What the stock plugins offer: every family ft ships, crossed with these
// policies, on the plugin's device.
#include <tuple>

#include <ft/adapters/adapter.hpp>
#include <ft/models/gpt_neox.hpp>
#include <ft/models/llama.hpp>
#include <ft/optim/optimizer.hpp>
#include <ft/parallel/parallelism.hpp>
#include <ft/precision/precision.hpp>

namespace ft::stock {
using Families = std::tuple<models::Llama, models::GptNeox>;
using Precisions = std::tuple<precision::FP32, precision::BF16True, precision::BF16Mixed, precision::FP16Mixed>;
using Parallelisms = std::tuple<parallel::Single, parallel::DDP, parallel::ZeRO<1>, parallel::ZeRO<2>, parallel::ZeRO<3>,
                                parallel::Pipeline>;
using Optimizers = std::tuple<optim::SGD, optim::AdamW, optim::Adafactor, optim::AdamW8bit, optim::Lion>;
using Adapters = std::tuple<adapters::Full, adapters::LoRA, adapters::Prompt>;
}  // namespace ft::stock
