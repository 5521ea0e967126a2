#pragma once
// A PEFT LoRA adapter merged into an HF model through ft's model of it, for
// adapters whose modules are not weights of the model's files one for one:
// routers and stacked experts adapted as PEFT's target_parameters name them
// (transformers 5's fused experts.gate_up_proj), which the files hold per
// expert (Mixtral's w1/w3/w2, Qwen-MoE's gate/up/down_proj) or fused
// another way (GraniteMoE's input_linear). The family's weight map knows
// both sides; the merge is LoraModel::merge_into_model, as lora.save_merged
// merges at the end of a run. The model is held in float32 while its
// tensors are written.
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ft/io/model_files.hpp"
#include "ft/models/weight_map.hpp"

namespace ft::adapters {

struct MergedModel {
  std::shared_ptr<const void> model;     // what the tensors read; keep it until they are written
  std::vector<io::TensorToWrite> tensors;  // HF's names, each in dtype_of(its name)
};

// The model in `model_dir` (read as `spec`) with the adapter in `adapter_dir` merged in.
MergedModel merge_lora_into_model(const models::ModelSpec& spec, const std::filesystem::path& model_dir,
                                  const std::filesystem::path& adapter_dir,
                                  const std::function<std::string(const std::string&)>& dtype_of);

}  // namespace ft::adapters
