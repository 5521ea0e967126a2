#include <ft/adapters/merged_model.hpp>

#include <algorithm>
#include <memory>
#include <set>
#include <string>

#include <ft/adapters/lora.hpp>
#include <ft/adapters/lora_files.hpp>
#include <ft/io/model_files.hpp>
#include <ft/io/model_weights.hpp>
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
  // What else the files hold (a tensor the family does not read) comes along
  // unchanged, as a merge weight by weight keeps every tensor.
  std::set<std::string> written;
  for (const io::TensorToWrite& t : tensors) written.insert(t.name);
  for (const models::WeightBinding& w : model->spec().weights) written.insert(w.alias);  // read under another name
  auto source = std::make_shared<const io::ModelWeights>(io::ModelWeights::open(model_dir));
  for (const std::string& name : source->names()) {
    if (written.contains(name)) continue;
    std::string dtype = dtype_of(name);
    tensors.push_back({name, dtype, source->at(name).shape, {}, io::whole_bytes([source, name, dtype] {
                         const io::SafetensorsFile& file = source->file_of(name);
                         std::vector<std::byte> bytes = io::convert_tensor(file, source->at(name), dtype);
                         file.release(source->at(name));
                         return bytes;
                       })});
  }
  return {std::move(model), std::move(tensors)};
}

}  // namespace ft::adapters
