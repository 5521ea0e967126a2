// Stock plugin for the Llama family (Llama 2/3, Mistral, Qwen2, TinyLlama, SmolLM2).
#include <ft/models/llama.hpp>
#include <ft/plugin/define.hpp>

#include "stock_policies.hpp"

FT_PLUGIN("ft-llama", FT_VERSION_STRING,
          ft::plugin::product<std::tuple<ft::models::Llama>, ft::stock::Precisions, ft::stock::Parallelisms,
                              ft::stock::Optimizers, ft::stock::Adapters>)
