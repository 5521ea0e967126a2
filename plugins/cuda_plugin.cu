// The stock plugin for NVIDIA GPUs (sm_80 and later): the CPU plugin's
// families and combinations on device::Cuda. Weights, activations,
// gradients and optimizer state live in the GPU's memory; attention is
// flash-style on tensor cores, matrix products go through cuBLASLt; one
// process or several (one GPU each) with DDP or ZeRO-1, 2 or 3 over NCCL,
// or a pipeline.
#include <ft/device/cuda.cuh>
#include <ft/plugin/define.hpp>
#include <ft/stock.hpp>

FT_PLUGIN("ft-cuda", FT_VERSION_STRING,
          ft::plugin::product<ft::stock::Families, ft::stock::Precisions, ft::stock::Parallelisms,
                              ft::stock::Optimizers, ft::stock::Adapters, std::tuple<ft::device::Cuda>>)
