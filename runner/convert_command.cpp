// ftrun convert SRC DST: HF model directories and PEFT adapters in, HF
// directories out.
//
//   HF -> HF       change dtype (--dtype), re-shard (--max-shard-size),
//                  merge a LoRA adapter into the weights (--merge-lora DIR)
//   PEFT -> PEFT   change an adapter's dtype
//
// Tensors keep their bytes unless a dtype change asks otherwise, so a round
// trip through a dtype that holds every value is bit-exact. DST is written
// as a temporary directory beside it and renamed into place at the end: a
// failed or killed conversion leaves no half-written DST.
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <iostream>
#include <map>

#include <ft/io/hf_config.hpp>
#include <ft/io/model_files.hpp>
#include <ft/io/model_weights.hpp>
#include <ft/io/peft.hpp>

#include "commands.hpp"
#include "exit_code.hpp"
#include "progress.hpp"

namespace ftrun {
namespace {

namespace fs = std::filesystem;

// "5GB" (10^9), "500MB", "2GiB" (2^30), or plain bytes, as HF's max_shard_size.
std::uint64_t parse_size(const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) ++digits;
  const std::string unit = text.substr(digits);
  static const std::map<std::string, double> units{{"", 1},        {"B", 1},         {"KB", 1e3},
                                                   {"MB", 1e6},    {"GB", 1e9},      {"TB", 1e12},
                                                   {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  auto it = units.find(unit);
  if (digits == 0 || it == units.end())
    throw ft::Error("--max-shard-size \"" + text + "\" is not a size; write e.g. 5GB, 500MB, 2GiB or a byte count");
  double value = std::stod(text.substr(0, digits)) * it->second;
  if (value < 1) throw ft::Error("--max-shard-size must be at least one byte");
  return std::uint64_t(value);
}

bool is_weight_file(const fs::path& p) {
  const std::string name = p.filename().string();
  return p.extension() == ".safetensors" || name == "model.safetensors.index.json" ||
         name.rfind("pytorch_model", 0) == 0;
}

// Float values stored as a safetensors dtype (F32, BF16 or F16).
std::vector<std::byte> encode(const std::vector<float>& values, const std::string& dtype) {
  auto as_bytes = [](const auto& v) {
    auto span = std::as_bytes(std::span(v));
    return std::vector<std::byte>(span.begin(), span.end());
  };
  if (dtype == "F32") return as_bytes(values);
  if (dtype == "BF16") return as_bytes(std::vector<ft::bf16>(values.begin(), values.end()));
  return as_bytes(std::vector<ft::f16>(values.begin(), values.end()));
}

// The HF model: every weight, possibly merged with an adapter and converted.
struct Staged {
  std::vector<std::string> names, dtypes;
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::vector<std::byte>> bytes;

  std::vector<ft::io::TensorToWrite> to_write() const {
    std::vector<ft::io::TensorToWrite> out;
    for (std::size_t i = 0; i < names.size(); ++i) out.push_back({names[i], dtypes[i], shapes[i], bytes[i]});
    return out;
  }
};

Staged stage_model(const fs::path& src, const ConvertOptions& options) {
  ft::io::ModelWeights weights = ft::io::ModelWeights::open(src);
  std::optional<ft::io::PeftAdapter> adapter;
  if (!options.merge_lora.empty()) adapter = ft::io::PeftAdapter::open(options.merge_lora);

  std::map<std::string, const ft::io::LoraModule*> lora;
  std::map<std::string, const ft::io::TensorView*> replaced;
  if (adapter) {
    for (const auto& m : adapter->modules()) {
      if (!weights.find(m.weight))
        throw ft::Error(options.merge_lora + ": adapts \"" + m.weight + "\", which " + src.string() + " does not have");
      lora[m.weight] = &m;
    }
    for (const auto& [name, view] : adapter->whole_weights()) {
      if (!weights.find(name))
        throw ft::Error(options.merge_lora + ": carries \"" + name + "\", which " + src.string() + " does not have");
      replaced[name] = view;
    }
  }

  Staged staged;
  for (const std::string& name : weights.names()) {
    const ft::io::TensorView& t = weights.at(name);
    std::string dtype = options.dtype.empty() ? t.dtype : ft::io::safetensors_dtype(options.dtype, "--dtype");
    // A weight the adapter saves whole (modules_to_save, a resized embedding)
    // replaces the base's; LoRA then adds to whichever weight is there.
    const ft::io::SafetensorsFile* file = &weights.file_of(name);
    const ft::io::TensorView* source = &t;
    if (auto it = replaced.find(name); it != replaced.end()) {
      if (it->second->shape != t.shape)
        throw ft::Error(options.merge_lora + ": \"" + name + "\" has another shape than the base model's");
      file = &adapter->file();
      source = it->second;
    }
    std::vector<std::byte> bytes;
    if (auto m = lora.find(name); m != lora.end()) {
      if (t.shape.size() != 2) throw ft::Error(src.string() + ": \"" + name + "\" is not a matrix and cannot take LoRA");
      if (source->dtype != "F32" && source->dtype != "BF16" && source->dtype != "F16")
        throw ft::Error(src.string() + ": \"" + name + "\" has dtype " + source->dtype + ", LoRA merges need a float weight");
      std::vector<float> merged(std::size_t(t.numel()));
      ft::io::copy_elements(*file, *source, merged.data(), t.numel());
      ft::io::merge_lora_module(*adapter, *m->second, merged.data(), t.shape[0], t.shape[1]);
      bytes = encode(merged, dtype);
    } else {
      bytes = ft::io::convert_tensor(*file, *source, dtype);
    }
    staged.names.push_back(name);
    staged.dtypes.push_back(dtype);
    staged.shapes.push_back(t.shape);
    staged.bytes.push_back(std::move(bytes));
  }
  return staged;
}

void convert_model(const fs::path& src, const fs::path& out, const ConvertOptions& options) {
  Staged staged = stage_model(src, options);
  // Everything that is not weights comes along (tokenizer, chat template, generation config).
  for (const auto& entry : fs::directory_iterator(src))
    if (entry.is_regular_file() && !is_weight_file(entry.path()))
      fs::copy_file(entry.path(), out / entry.path().filename());
  if (!options.dtype.empty()) {  // config.json records the dtype the weights are stored in
    nlohmann::json config = ft::io::read_json_file(out / "config.json");
    const std::string name = ft::io::safetensors_dtype(options.dtype, "--dtype") == "F32" ? "float32"
                             : ft::io::safetensors_dtype(options.dtype, "--dtype") == "BF16" ? "bfloat16"
                                                                                             : "float16";
    config[config.contains("torch_dtype") ? "torch_dtype" : "dtype"] = name;
    std::ofstream(out / "config.json") << config.dump(2) << "\n";
  }
  Progress progress("convert", 100);
  ft::io::write_model_safetensors(out, staged.to_write(), parse_size(options.max_shard_size), {{"format", "pt"}},
                                  [&](std::uint64_t done, std::uint64_t total) {
                                    progress.update(long(100 * done / std::max<std::uint64_t>(total, 1)));
                                  });
}

void convert_adapter(const fs::path& src, const fs::path& out, const ConvertOptions& options) {
  if (!options.merge_lora.empty()) throw ft::Error("--merge-lora merges into a model directory, and " + src.string() + " is an adapter");
  ft::io::PeftAdapter adapter = ft::io::PeftAdapter::open(src);
  std::vector<std::vector<std::byte>> bytes;
  std::vector<ft::io::TensorToWrite> tensors;
  std::vector<std::string> dtypes;
  for (const auto& t : adapter.file().tensors())
    dtypes.push_back(options.dtype.empty() ? t.dtype : ft::io::safetensors_dtype(options.dtype, "--dtype"));
  std::size_t i = 0;
  for (const auto& t : adapter.file().tensors()) bytes.push_back(ft::io::convert_tensor(adapter.file(), t, dtypes[i++]));
  i = 0;
  for (const auto& t : adapter.file().tensors()) {
    tensors.push_back({t.name, dtypes[i], t.shape, bytes[i]});
    ++i;
  }
  for (const auto& entry : fs::directory_iterator(src))
    if (entry.is_regular_file() && entry.path().extension() != ".safetensors")
      fs::copy_file(entry.path(), out / entry.path().filename());
  ft::io::write_safetensors(out / "adapter_model.safetensors", tensors, adapter.file().metadata());
}

}  // namespace

int run_convert(const ConvertOptions& options) {
  const fs::path src = options.source, dst = options.destination;
  const fs::path staging = dst.string() + ".tmp-" + std::to_string(::getpid());
  try {
    if (!fs::exists(src)) throw ft::Error(src.string() + ": does not exist");
    if (fs::exists(dst) && !options.force)
      throw ft::Error(dst.string() + ": already exists (choose another destination or pass --force to replace it)");
    fs::remove_all(staging);
    fs::create_directories(staging);
    if (fs::is_directory(src) && fs::exists(src / "adapter_config.json")) convert_adapter(src, staging, options);
    else if (fs::is_directory(src) && fs::exists(src / "config.json")) convert_model(src, staging, options);
    else
      throw ft::Error(src.string() + ": not an HF model directory (config.json) or a PEFT adapter (adapter_config.json)");
    if (fs::exists(dst)) {  // --force: the old one goes only once the new one is complete
      const fs::path old = dst.string() + ".old-" + std::to_string(::getpid());
      fs::rename(dst, old);
      fs::rename(staging, dst);
      fs::remove_all(old);
    } else {
      fs::rename(staging, dst);
    }
    std::cout << "wrote " << dst.string() << "\n";
    return ok;
  } catch (const ft::Error& e) {
    fs::remove_all(staging);
    std::cerr << "ftrun convert: " << e.what() << "\n";
    return bad_input;
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(staging);
    std::cerr << "ftrun convert: " << e.what() << "\n";
    return failed;
  }
}

}  // namespace ftrun
