// Stock CUDA plugin for the Llama family, on NVIDIA GPUs (sm_80 and later).
// The same engine and combinations as the CPU plugins, on device::Cuda: weights, activations,
// gradients and optimizer state in the GPU's memory, flash attention on
// tensor cores, matrix products through cuBLASLt; one process or several
// (one GPU each) with DDP or ZeRO-1, 2 or 3 over NCCL, or a pipeline.
#include <ft/device/cuda.cuh>
#include <ft/models/llama.hpp>
#include <ft/plugin/define.hpp>

#include "stock_policies.hpp"

FT_PLUGIN("ft-cuda-llama", FT_VERSION_STRING,
          ft::plugin::product<std::tuple<ft::models::Llama>, ft::stock::Precisions, ft::stock::Parallelisms,
                              ft::stock::Optimizers, ft::stock::Adapters, std::tuple<ft::device::Cuda>>)
