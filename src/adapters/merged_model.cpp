#include <ft/adapters/merged_model.hpp>

#include <algorithm>

#include <ft/adapters/lora.hpp>
#include <ft/adapters/lora_files.hpp>
#include <ft/io/peft.hpp>
#include <ft/models/save.hpp>
#include <ft/models/transformer.hpp>

namespace ft::adapters {

MergedModel merge_lora_into_model(const models::ModelSpec& spec, const std::filesystem::path& model_dir,
                                  const std::filesystem::path& adapter_dir,
                                  const std::function<std::string(const std::string&)>& dtype_of) {
  const io::PeftAdapter peft = io::PeftAdapter::open(adapter_dir);
  const std::string where = adapter_dir.string() + ": ";
  if (!peft.whole_weights().empty())
    throw Error(where + "carries whole weights (\"" + peft.whole_weights().front().first +
                "\") beside LoRA on routers or experts, which ft does not merge together");
  if (std::ranges::any_of(peft.modules(), &io::LoraModule::embedding))
    throw Error(where + "adapts the embedding beside routers or experts, which ft does not merge together");
  auto model = std::make_shared<models::Transformer<float>>(spec, /*trainable=*/false);
  model->load(io::ModelWeights::open(model_dir));
  LoraModel<float> lora(*model, lora_options_of(peft));
  load_peft_adapter(lora, model->config(), adapter_dir);
  lora.merge_into_model();
  std::vector<io::TensorToWrite> tensors = models::hf_tensors(*model, model_dir, dtype_of);
  return {std::move(model), std::move(tensors)};
}

}  // namespace ft::adapters
