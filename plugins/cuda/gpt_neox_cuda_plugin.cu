// Stock CUDA plugin for the GPT-NeoX family (Pythia, GPT-NeoX-20B), on
// NVIDIA GPUs (sm_80 and later): the Llama CUDA plugin's combinations.
#include <ft/device/cuda.cuh>
#include <ft/models/gpt_neox.hpp>
#include <ft/plugin/define.hpp>

#include "stock_policies.hpp"

FT_PLUGIN("ft-cuda-gpt-neox", FT_VERSION_STRING,
          ft::plugin::product<std::tuple<ft::models::GptNeox>, ft::stock::Precisions, ft::stock::Parallelisms,
                              ft::stock::Optimizers, ft::stock::Adapters, std::tuple<ft::device::Cuda>>)
