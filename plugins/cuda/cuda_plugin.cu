// Stock CUDA plugin: the Llama and GPT-NeoX families trained on NVIDIA GPUs
// (sm_80 and later), full fine-tuning, LoRA and prompt tuning, one process
// or several (one GPU each) with DDP or ZeRO-1, 2 or 3 over NCCL, or a
// pipeline. The same engine
// as the CPU plugins, on device::Cuda: weights, activations, gradients and
// optimizer state in the GPU's memory, flash attention on tensor cores,
// matrix products through cuBLASLt.
#include <ft/device/cuda.cuh>
#include <ft/models/gpt_neox.hpp>
#include <ft/models/llama.hpp>
#include <ft/plugin/define.hpp>

FT_PLUGIN("ft-cuda", FT_VERSION_STRING,
          ft::plugin::product<std::tuple<ft::models::Llama, ft::models::GptNeox>,
                              std::tuple<ft::precision::FP32, ft::precision::BF16True, ft::precision::BF16Mixed>,
                              std::tuple<ft::parallel::Single, ft::parallel::DDP, ft::parallel::ZeRO<1>,
                                         ft::parallel::ZeRO<2>, ft::parallel::ZeRO<3>, ft::parallel::Pipeline>,
                              std::tuple<ft::optim::SGD, ft::optim::AdamW, ft::optim::Lion, ft::optim::Adafactor,
                                         ft::optim::AdamW8bit>,
                              std::tuple<ft::adapters::Full, ft::adapters::LoRA, ft::adapters::Prompt>,
                              std::tuple<ft::device::Cuda>>)
