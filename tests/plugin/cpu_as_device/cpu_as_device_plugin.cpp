// A test plugin: the Llama family on the CPU standing in for a device
// (support/cpu_as_device.hpp), with the combinations the CUDA plugin offers
// and the pipeline,
// so the engine's device paths are checked against the CPU on every run of
// the suite, GPU or not. Loaded through FT_PLUGIN_PATH by the tests only.
#include <ft/models/llama.hpp>
#include <ft/plugin/define.hpp>

#include "support/cpu_as_device.hpp"

FT_PLUGIN("ft-cpu-as-device", FT_VERSION_STRING,
          ft::plugin::product<std::tuple<ft::models::Llama>,
                              std::tuple<ft::precision::FP32, ft::precision::BF16Mixed, ft::precision::FP16Mixed>,
                              std::tuple<ft::parallel::Single, ft::parallel::DDP, ft::parallel::ZeRO<1>,
                                         ft::parallel::ZeRO<2>, ft::parallel::ZeRO<3>, ft::parallel::Pipeline>,
                              std::tuple<ft::optim::AdamW, ft::optim::Adafactor, ft::optim::AdamW8bit>,
                              std::tuple<ft::adapters::Full, ft::adapters::LoRA, ft::adapters::Prompt>,
                              std::tuple<ft::testing::CpuAsDevice>>)
