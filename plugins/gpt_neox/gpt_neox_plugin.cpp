// Stock plugin for GPT-NeoX (Pythia, GPT-NeoX-20B).
#include <ft/models/gpt_neox.hpp>
#include <ft/plugin/define.hpp>

#include "stock_policies.hpp"

FT_PLUGIN("ft-gpt-neox", FT_VERSION_STRING,
          ft::plugin::product<std::tuple<ft::models::GptNeox>, ft::stock::Precisions, ft::stock::Parallelisms,
                              ft::stock::Optimizers, ft::stock::Adapters>)
