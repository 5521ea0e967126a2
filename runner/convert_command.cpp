// ftrun convert SRC DST: HF model directories and PEFT adapters in, HF
// directories out.
//
//   HF -> HF       change dtype (--dtype), re-shard (--max-shard-size),
//                  merge a LoRA adapter into the weights (--merge-lora DIR),
//                  quantize the layers' linear weights to bitsandbytes' 4 bits
//                  (--quantize nf4|fp4, --double-quant, --quant-block-size),
//                  or a 4-bit or GPTQ model back to whole weights (--dequantize; a
//                  merge into one dequantizes it first)
//                  add tokens (--add-tokens FILE, see data/token_additions.hpp),
//                  set the chat template (--chat-template FILE)
//   GGUF -> HF     llama.cpp files of the architectures io/gguf_to_hf.hpp lists
//   PEFT -> PEFT   change an adapter's dtype
//
// Tensors keep their bytes unless a dtype change asks otherwise, so a round
// trip through a dtype that holds every value is bit-exact. DST is written
// as a temporary directory beside it and renamed into place at the end: a
// failed or killed conversion leaves no half-written DST.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <memory>

#include <ft/adapters/merged_model.hpp>
#include <ft/core/bytes.hpp>
#include <ft/text/chat_template.hpp>
#include <ft/text/sentencepiece.hpp>
#include <ft/data/token_additions.hpp>
#include <ft/io/bnb_4bit.hpp>
#include <ft/io/gptq.hpp>
#include <ft/io/packed_weights.hpp>
#include <ft/io/gguf_to_hf.hpp>
#include <ft/io/hf_config.hpp>
#include <ft/io/model_files.hpp>
#include <ft/io/model_weights.hpp>
#include <ft/io/peft.hpp>
#include <ft/models/read.hpp>

#include "commands.hpp"
#include "exit_code.hpp"
#include "model_reading.hpp"
#include <ft/core/progress.hpp>
#include <ft/io/staged_directory.hpp>

namespace ftrun {

struct ConvertOptions {
  std::string source, destination;
  std::string dtype;                    // empty: keep each tensor's dtype
  std::string max_shard_size = "5GB";
  std::string merge_lora;               // PEFT adapter directory to merge into the weights
  std::string add_tokens;               // TOML file of tokens to add (data/token_additions.hpp)
  std::string chat_template;            // Jinja file replacing the model's chat template
  std::string quantize;                 // nf4 or fp4: the layers' linear weights in 4 bits
  bool double_quant = false;            // bitsandbytes' double quantization of the absmax
  std::int64_t quant_block_size = 64;   // weights sharing one absmax
  bool dequantize = false;              // a 4-bit or GPTQ model's weights back to whole precision
  bool force = false;                   // replace an existing destination
  std::vector<std::string> plugins;     // --plugin FILE: for a model a plugin's family reads
};

namespace {

namespace fs = std::filesystem;

std::uint64_t parse_size(const std::string& text) {
  if (const auto bytes = ft::parse_bytes(text)) return *bytes;
  throw ft::Error("--max-shard-size \"" + text + "\" is not a size; write e.g. 5GB, 500MB, 2GiB or a byte count (at least 1)");
}

// The HF model: every weight, possibly merged with an adapter and converted,
// each made when the writer reaches it, so that converting holds one tensor
// beyond the mapped input rather than a copy of the model. The producers read
// the mapped files, which the shared pointers keep open.
struct Staged {
  std::shared_ptr<const ft::io::ModelWeights> weights;
  std::shared_ptr<const ft::io::PeftAdapter> adapter;
  std::shared_ptr<const void> merged_model;  // a merge through ft's model: what its tensors read
  std::vector<ft::io::TensorToWrite> tensors;
  std::optional<ft::quant::FourBitOptions> four_bit;  // --quantize: what config.json records
  bool dequantized = false;                          // a quantized model's weights written whole
};

Staged stage_model(const fs::path& src, const ConvertOptions& options) {
  Staged staged;
  staged.weights = std::make_shared<const ft::io::ModelWeights>(ft::io::ModelWeights::open(src));
  const ft::io::ModelWeights& weights = *staged.weights;
  if (!options.merge_lora.empty())
    staged.adapter = std::make_shared<const ft::io::PeftAdapter>(ft::io::PeftAdapter::open(options.merge_lora));
  const ft::io::PeftAdapter* adapter = staged.adapter.get();

  // Routers and stacked experts (PEFT's target_parameters) are named as
  // transformers 5 fuses them, not as the files hold them: merged through
  // the family's model of the files.
  // A quantized model (bitsandbytes' 4 bits, GPTQ) is rewritten whole or not at all: ft writes no GPTQ codes.
  const nlohmann::json source_config = ft::io::read_json_file(src / "config.json");
  const bool gptq = ft::io::gptq_config(source_config, (src / "config.json").string()).has_value();
  const bool four_bit = ft::io::bnb_4bit_config(source_config, (src / "config.json").string()).has_value();
  const std::string quantized = gptq ? "GPTQ" : "4-bit";
  if ((four_bit || gptq) && !options.quantize.empty())
    throw ft::Error(src.string() + ": is " + quantized +
                    " already; --quantize takes a whole-precision model (--dequantize first)");
  if (!four_bit && !gptq && options.dequantize)
    throw ft::Error(src.string() + ": is not a quantized model (4-bit or GPTQ); --dequantize has nothing to do");
  const bool dequantize = (four_bit || gptq) && (options.dequantize || adapter);
  if (gptq && !dequantize)
    throw ft::Error(src.string() + ": is a GPTQ model, which ftrun train, generate, serve and eval read as it is; "
                                   "ftrun convert writes it whole (--dequantize) or with an adapter merged "
                                   "(--merge-lora), not as GPTQ codes again");
  if (adapter && std::ranges::any_of(adapter->modules(), &ft::io::LoraModule::wraps_parameter)) {
    if (four_bit || gptq || !options.quantize.empty())
      throw ft::Error(options.merge_lora + ": merges into experts' parameters through the model, which takes "
                                           "whole-precision weights in and out; drop --quantize, or --dequantize first");
    auto dtype_of = [&weights, &options](const std::string& name) {
      if (!options.dtype.empty()) return ft::io::safetensors_dtype(options.dtype, "--dtype");
      const ft::io::TensorView* t = weights.find(name);
      return t && (t->dtype == "BF16" || t->dtype == "F16") ? t->dtype : std::string("F32");
    };
    ft::adapters::MergedModel merged = ft::adapters::merge_lora_into_model(
        read_model(src, options.plugins).spec, src, options.merge_lora, dtype_of);
    staged.merged_model = std::move(merged.model);
    staged.tensors = std::move(merged.tensors);
    return staged;
  }

  std::map<std::string, const ft::io::LoraModule*> lora;
  std::map<std::string, const ft::io::TensorView*> replaced;
  if (adapter) {
    for (const auto& m : adapter->modules()) {
      if (!weights.find(m.weight) && !ft::io::stored_packed(weights, m.weight))
        throw ft::Error(options.merge_lora + ": adapts \"" + m.weight + "\", which " + src.string() + " does not have");
      lora[m.weight] = &m;
    }
    for (const auto& [name, view] : adapter->whole_weights()) {
      if (!weights.find(name))
        throw ft::Error(options.merge_lora + ": carries \"" + name + "\", which " + src.string() + " does not have");
      replaced[name] = view;
    }
  }

  if (dequantize && adapter)
    std::cout << "dequantizing the " << quantized << " weights of " << src.string() << " to merge "
              << options.merge_lora << " into them (the output is whole-precision)\n";
  // The linear weights --quantize keeps in 4 bits, by the family's weight map.
  std::set<std::string> to_quantize;
  const ft::quant::FourBitOptions four_bit_options{options.quantize == "fp4" ? ft::quant::FourBit::fp4 : ft::quant::FourBit::nf4,
                                                   options.quant_block_size, options.double_quant};
  if (!options.quantize.empty()) {
    if (!ft::quant::valid_4bit_blocksize(options.quant_block_size))
      throw ft::Error("--quant-block-size " + std::to_string(options.quant_block_size) +
                      " is not one bitsandbytes allows (32, 64, 128, 256, 512, 1024, 2048, 4096)");
    for (const ft::models::WeightBinding& w : read_model(src, options.plugins).spec.weights)
      for (const std::string& n : {w.hf_name, w.alias})
        if (const ft::io::TensorView* t = n.empty() ? nullptr : weights.find(n);
            t && ft::models::quantized_in_4bit_base(w, t->shape.size()))
          to_quantize.insert(n);
  }

  for (const std::string& name : weights.names()) {
    const ft::io::TensorView& t = weights.at(name);
    // A 4-bit weight's state travels with it, or folds into it when dequantized.
    if (four_bit && ft::io::is_bnb_4bit_state(weights, name)) {
      if (!dequantize) staged.tensors.push_back({name, t.dtype, t.shape, t.bytes, {}});
      continue;
    }
    if (four_bit && ft::io::bnb_4bit_type(weights, name) && !dequantize) {
      staged.tensors.push_back({name, t.dtype, t.shape, t.bytes, {}});
      continue;
    }
    // A GPTQ module's codes, zero points, scales and group indices fold into its weight, made at its qweight.
    const std::optional<std::string> gptq_weight =
        gptq && name.ends_with(".qweight") ? std::optional(name.substr(0, name.size() - 8) + ".weight") : std::nullopt;
    if (gptq && !gptq_weight && (name.ends_with(".qzeros") || name.ends_with(".scales") || name.ends_with(".g_idx")) &&
        ft::io::gptq_module(weights, name.substr(0, name.rfind('.')) + ".weight"))
      continue;
    if ((four_bit && ft::io::bnb_4bit_type(weights, name)) || gptq_weight) {
      const std::string weight = gptq_weight.value_or(name);
      const std::shared_ptr<const ft::quant::PackedWeight> w = ft::io::read_packed(weights, weight);
      // Its own dtype: what bitsandbytes' state records, fp16 for GPTQ (its scales' and its reference's).
      const auto* bnb = dynamic_cast<const ft::quant::FourBitWeight*>(w.get());
      const std::string own = !bnb ? "F16" : bnb->dtype == "bfloat16" ? "BF16" : bnb->dtype == "float16" ? "F16" : "F32";
      const std::string dtype = !options.dtype.empty() ? ft::io::safetensors_dtype(options.dtype, "--dtype") : own;
      const auto m = lora.find(weight);
      const ft::io::LoraModule* module = m == lora.end() ? nullptr : m->second;
      const std::vector<std::int64_t> shape = w->hf_shape();
      staged.tensors.push_back({weight, dtype, shape, {}, ft::io::whole_bytes([w, adapter, module, dtype, shape] {
                                  std::vector<float> values(std::size_t(shape[0] * w->columns()));
                                  w->dequantize(values);
                                  if (module) ft::io::merge_lora_module(*adapter, *module, values.data(), shape[0], shape[1]);
                                  return ft::io::encode_floats(values, dtype);
                                })});
      continue;
    }
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
    std::function<void(const ft::io::ByteSink&)> produce;
    if (auto m = lora.find(name); m != lora.end()) {
      if (t.shape.size() != 2) throw ft::Error(src.string() + ": \"" + name + "\" is not a matrix and cannot take LoRA");
      if (source->dtype != "F32" && source->dtype != "BF16" && source->dtype != "F16")
        throw ft::Error(src.string() + ": \"" + name + "\" has dtype " + source->dtype + ", LoRA merges need a float weight");
      produce = ft::io::whole_bytes([file, source, adapter, module = m->second, dtype] {
        std::vector<float> merged(std::size_t(source->numel()));
        ft::io::copy_elements(*file, *source, merged.data(), source->numel());
        file->release(*source);
        ft::io::merge_lora_module(*adapter, *module, merged.data(), source->shape[0], source->shape[1]);
        return ft::io::encode_floats(merged, dtype);
      });
    } else {
      produce = ft::io::whole_bytes([file, source, dtype] {
        std::vector<std::byte> bytes = ft::io::convert_tensor(*file, *source, dtype);
        file->release(*source);
        return bytes;
      });
    }
    if (to_quantize.contains(name)) {
      // Quantized now: the quant state's JSON, written in the file's header,
      // holds the double quantization's offset, known only once the weight is.
      const std::vector<float> values = ft::io::decode_floats(ft::io::collect_bytes(produce), dtype);
      const std::string torch_dtype = dtype == "BF16" ? "bfloat16" : dtype == "F16" ? "float16" : "float32";
      auto w = std::make_shared<const ft::quant::FourBitWeight>(
          ft::quant::quantize_weight(values, t.shape, torch_dtype, four_bit_options));
      for (ft::io::TensorToWrite& part : ft::io::bnb_4bit_tensors(name, w)) staged.tensors.push_back(std::move(part));
      continue;
    }
    staged.tensors.push_back({name, dtype, t.shape, {}, std::move(produce)});
  }
  if (!options.quantize.empty()) staged.four_bit = four_bit_options;
  staged.dequantized = dequantize;
  return staged;
}

nlohmann::json read_or_empty(const fs::path& file) {
  return fs::exists(file) ? ft::io::read_json_file(file) : nlohmann::json::object();
}
void write_json(const fs::path& file, const nlohmann::json& j) { std::ofstream(file) << j.dump(2) << "\n"; }

// --add-tokens: new tokens in the tokenizer files, roles in the configs, and
// embedding rows (the mean of the existing rows) for every new id.
void add_tokens(const fs::path& src, const fs::path& out, Staged& staged, const ConvertOptions& options) {
  const ft::data::TokenAdditions additions = ft::data::read_token_additions(options.add_tokens);
  const fs::path tokenizer_file = out / "tokenizer.json";
  if (!fs::exists(tokenizer_file)) {
    if (!fs::exists(out / "tokenizer.model"))
      throw ft::Error(src.string() + ": has no tokenizer.json or tokenizer.model to add tokens to");
    // As transformers saves such a tokenizer: the pipeline read from tokenizer.model, as tokenizer.json.
    write_json(tokenizer_file, ft::text::tokenizer_json_from_sentencepiece(
                                   out / "tokenizer.model", read_or_empty(out / "tokenizer_config.json")));
  }
  nlohmann::json tokenizer = ft::io::read_json_file(tokenizer_file);
  const std::int64_t size = ft::data::add_tokens(tokenizer, additions, tokenizer_file.string());
  write_json(tokenizer_file, tokenizer);
  const ft::text::Tokenizer updated = ft::text::Tokenizer::from_json(tokenizer, tokenizer_file.string());

  nlohmann::json config = ft::io::read_json_file(out / "config.json");
  const ft::models::ModelSpec spec = read_model(src, options.plugins).spec;
  if (size > spec.config.vocab_size) {
    for (const auto& w : spec.weights) {
      if (w.param != "embed.weight" && w.param != "lm_head.weight") continue;
      auto named = [&](const std::string& n) { return [&n](const ft::io::TensorToWrite& t) { return t.name == n; }; };
      auto it = std::find_if(staged.tensors.begin(), staged.tensors.end(), named(w.hf_name));
      if (it == staged.tensors.end() && !w.alias.empty())
        it = std::find_if(staged.tensors.begin(), staged.tensors.end(), named(w.alias));
      if (it == staged.tensors.end()) continue;
      const std::int64_t old_rows = it->shape[0], width = it->shape[1];
      it->produce = ft::io::whole_bytes([base = std::move(it->produce), dtype = it->dtype, old_rows, width, size] {
        std::vector<float> rows = ft::io::decode_floats(ft::io::collect_bytes(base), dtype);
        std::vector<double> mean(std::size_t(width), 0.0);
        for (std::int64_t r = 0; r < old_rows; ++r)
          for (std::int64_t c = 0; c < width; ++c) mean[std::size_t(c)] += rows[std::size_t(r * width + c)];
        for (std::int64_t r = old_rows; r < size; ++r)
          for (std::int64_t c = 0; c < width; ++c) rows.push_back(float(mean[std::size_t(c)] / double(old_rows)));
        return ft::io::encode_floats(rows, dtype);
      });
      it->shape[0] = size;
    }
    ft::io::text_model_config(config)["vocab_size"] = size;
  }
  nlohmann::json tokenizer_config = read_or_empty(out / "tokenizer_config.json");
  for (const auto& [role, token] : additions.roles) {
    tokenizer_config[role] = token;
    config[role.substr(0, role.size() - 6) + "_token_id"] = *updated.token_to_id(token);  // "eos_token" -> "eos_token_id"
  }
  for (const auto& [id, token] : updated.added_tokens())
    tokenizer_config["added_tokens_decoder"][std::to_string(id)] = {
        {"content", token.content}, {"lstrip", token.lstrip},         {"normalized", token.normalized},
        {"rstrip", token.rstrip},   {"single_word", token.single_word}, {"special", token.special}};
  write_json(out / "tokenizer_config.json", tokenizer_config);
  write_json(out / "config.json", config);
}

// --chat-template: the template must parse; it replaces the model's own.
void set_chat_template(const fs::path& out, const std::string& file) {
  std::ifstream in(file);
  if (!in) throw ft::Error(file + ": cannot be opened");
  std::string text{std::istreambuf_iterator<char>(in), {}};
  ft::text::ChatTemplate::parse(text, file);
  nlohmann::json tokenizer_config = read_or_empty(out / "tokenizer_config.json");
  tokenizer_config["chat_template"] = text;
  write_json(out / "tokenizer_config.json", tokenizer_config);
  if (fs::exists(out / "chat_template.jinja")) std::ofstream(out / "chat_template.jinja") << text;  // preferred by transformers
}

void convert_model(const fs::path& src, const fs::path& out, const ConvertOptions& options) {
  Staged staged = stage_model(src, options);
  // Everything that is not weights comes along (tokenizer, chat template, generation config).
  for (const auto& entry : fs::directory_iterator(src))
    if (entry.is_regular_file() && !ft::io::is_weight_file(entry.path()) &&
        !(staged.dequantized && entry.path().filename() == "quantize_config.json"))  // GPTQ's own record of its codes
      fs::copy_file(entry.path(), out / entry.path().filename());
  if (!options.dtype.empty()) {  // config.json records the dtype the weights are stored in
    nlohmann::json config = ft::io::read_json_file(out / "config.json");
    const std::string stored = ft::io::safetensors_dtype(options.dtype, "--dtype");
    const std::string name = stored == "F32" ? "float32" : stored == "BF16" ? "bfloat16" : "float16";
    config[config.contains("torch_dtype") ? "torch_dtype" : "dtype"] = name;
    std::ofstream(out / "config.json") << config.dump(2) << "\n";
  }
  if (staged.four_bit || staged.dequantized) {  // transformers reads the weights by what config.json says of them
    nlohmann::json config = ft::io::read_json_file(out / "config.json");
    if (staged.four_bit) {
      const std::string compute = config.value("torch_dtype", config.value("dtype", std::string("float32")));
      config["quantization_config"] = ft::io::bnb_quantization_config(*staged.four_bit, compute);
    } else {
      config.erase("quantization_config");
    }
    std::ofstream(out / "config.json") << config.dump(2) << "\n";
  }
  if (!options.add_tokens.empty()) add_tokens(src, out, staged, options);
  if (!options.chat_template.empty()) set_chat_template(out, options.chat_template);
  ft::Progress progress("convert", 100);
  ft::io::write_model_safetensors(out, staged.tensors, parse_size(options.max_shard_size), {{"format", "pt"}},
                                  [&](std::uint64_t done, std::uint64_t total) {
                                    progress.update(long(100 * done / std::max<std::uint64_t>(total, 1)));
                                  });
}

void convert_adapter(const fs::path& src, const fs::path& out, const ConvertOptions& options) {
  if (!options.merge_lora.empty() || !options.add_tokens.empty() || !options.chat_template.empty())
    throw ft::Error(src.string() + ": is a PEFT adapter; --merge-lora, --add-tokens and --chat-template apply to models");
  ft::io::PeftAdapter adapter = ft::io::PeftAdapter::open(src);
  // Moving a byte vector keeps its buffer, so the spans below stay valid as `bytes` grows.
  std::vector<std::vector<std::byte>> bytes;
  std::vector<ft::io::TensorToWrite> tensors;
  for (const auto& t : adapter.file().tensors()) {
    const std::string dtype = options.dtype.empty() ? t.dtype : ft::io::safetensors_dtype(options.dtype, "--dtype");
    bytes.push_back(ft::io::convert_tensor(adapter.file(), t, dtype));
    tensors.push_back({t.name, dtype, t.shape, bytes.back()});
  }
  for (const auto& entry : fs::directory_iterator(src))
    if (entry.is_regular_file() && entry.path().extension() != ".safetensors")
      fs::copy_file(entry.path(), out / entry.path().filename());
  ft::io::write_safetensors(out / "adapter_model.safetensors", tensors, adapter.file().metadata());
}

void convert_gguf(const fs::path& src, const fs::path& out, const ConvertOptions& options) {
  if (!options.merge_lora.empty() || !options.add_tokens.empty())
    throw ft::Error(src.string() + ": --merge-lora and --add-tokens apply to HF model directories; convert the GGUF first");
  ft::Progress progress("convert", 100);
  ft::io::GgufToHfOptions gguf_options;
  if (!options.dtype.empty()) gguf_options.dtype = options.dtype;
  gguf_options.max_shard_bytes = parse_size(options.max_shard_size);
  gguf_options.progress = [&](std::uint64_t done, std::uint64_t total) {
    progress.update(long(100 * done / std::max<std::uint64_t>(total, 1)));
  };
  ft::io::convert_gguf_to_hf(src, out, gguf_options);
  progress.finish();
  if (!options.chat_template.empty()) set_chat_template(out, options.chat_template);
}

}  // namespace

int run_convert(const ConvertOptions& options) {
  const fs::path src = options.source, dst = options.destination;
  try {
    if (!fs::exists(src)) throw ft::Error(src.string() + ": does not exist");
    if (fs::exists(dst) && !options.force)
      throw ft::Error(dst.string() + ": already exists (choose another destination or pass --force to replace it)");
    // --force: the old destination goes only once the new one is complete.
    ft::io::write_directory_atomically(
        dst,
        [&](const fs::path& staging) {
          if (fs::is_regular_file(src) && src.extension() == ".gguf") convert_gguf(src, staging, options);
          else if (fs::is_directory(src) && fs::exists(src / "adapter_config.json")) convert_adapter(src, staging, options);
          else if (fs::is_directory(src) && fs::exists(src / "config.json")) convert_model(src, staging, options);
          else
            throw ft::Error(src.string() +
                            ": not an HF model directory (config.json), a PEFT adapter (adapter_config.json) or a .gguf file");
        },
        options.force);
    std::cout << "wrote " << dst.string() << "\n";
    return ok;
  } catch (const ft::Error& e) {
    std::cerr << "ftrun convert: " << e.what() << "\n";
    return bad_input;
  } catch (const fs::filesystem_error& e) {
    std::cerr << "ftrun convert: " << e.what() << "\n";
    return failed;
  }
}

Command add_convert_command(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* command = app.add_subcommand("convert", "Convert HF model directories, GGUF files and PEFT adapters (dtype, shards, LoRA merge, tokens)");
  command->add_option("source", o->source, "HF model directory, .gguf file or PEFT adapter directory")->required();
  command->add_option("destination", o->destination, "Directory to write (must not exist unless --force)")
      ->required();
  command->add_option("--dtype", o->dtype, "Store floating-point weights as float32, bfloat16 or float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  command->add_option("--max-shard-size", o->max_shard_size, "Largest weight file, e.g. 5GB, 500MB, 2GiB")
      ->capture_default_str();
  command->add_option("--merge-lora", o->merge_lora, "Merge this PEFT LoRA adapter into the weights");
  command->add_option("--add-tokens", o->add_tokens,
                      "TOML file of tokens to add: special = [...], regular = [...], eos_token = ..., pad_token = ...");
  command->add_option("-t,--chat-template", o->chat_template, "Jinja file to use as the chat template");
  command->add_option("--quantize", o->quantize,
                      "Store the layers' linear weights in 4 bits as bitsandbytes does (load_in_4bit): nf4 or fp4")
      ->check(CLI::IsMember({"nf4", "fp4"}));
  command->add_flag("--double-quant", o->double_quant, "With --quantize: quantize the absmax too (bnb_4bit_use_double_quant)");
  command->add_option("--quant-block-size", o->quant_block_size, "With --quantize: weights sharing one absmax")
      ->capture_default_str();
  command->add_flag("--dequantize", o->dequantize, "Write a 4-bit or GPTQ model's weights whole again (their own dtype, or --dtype)");
  command->add_flag("--force", o->force, "Replace the destination if it exists");
  add_family_plugins(command, o->plugins);
  return {command, [o] { return run_convert(*o); }};
}

}  // namespace ftrun
