#include "ado_entities.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include <ft/core/error.hpp>

#include "gpu_monitor.hpp"
#include "hostfile.hpp"

namespace ftrun {
namespace {

namespace fs = std::filesystem;
using ft::Error;

// Names that are one recipe key under another name.
const std::map<std::string, std::string, std::less<>> renamed = {
    {"model_max_length", "data.max_seq_length"},
    {"gradient_accumulation_steps", "train.gradient_accumulation_steps"},
    {"max_steps", "train.max_steps"},
    {"num_train_epochs", "train.num_train_epochs"},
    {"stop_after_seconds", "train.stop_after_seconds"},
    {"auto_stop_method", "train.auto_stop_method"},
    {"r", "lora.r"},
    {"lora_alpha", "lora.alpha"},
    {"dataset_text_field", "data.text_field"},
};

// Names whose value is translated on its own.
const std::set<std::string, std::less<>> single = {"model_name", "gradient_checkpointing", "dataset_id",
                                                   "fast_kernels"};

// Names that depend on each other, on the recipe or on the model: read
// together per point (Reading), translated by translate_entity.
const std::set<std::string, std::less<>> joint = {
    "number_gpus", "number_nodes", "batch_size",  "gpu_model",          "torch_dtype",
    "bf16",        "optim",        "peft_method", "distributed_backend", "fsdp_sharding_strategy",
    "fast_moe"};

// The optimizers ado's SFTTrainer actuator offers (HF TrainingArguments' optim), and ft's policy for those ft has.
const std::vector<std::string> ado_optimizers = {
    "adamw_hf", "adamw_torch", "adamw_torch_fused", "adamw_torch_xla", "adamw_torch_npu_fused", "adamw_apex_fused",
    "adafactor", "adamw_anyprecision", "adamw_torch_4bit", "ademamix", "sgd", "adagrad", "adamw_bnb_8bit",
    "adamw_8bit", "ademamix_8bit", "lion_8bit", "lion_32bit", "paged_adamw_32bit", "paged_adamw_8bit",
    "paged_ademamix_32bit", "paged_ademamix_8bit", "paged_lion_32bit", "paged_lion_8bit", "rmsprop", "rmsprop_bnb",
    "rmsprop_bnb_8bit", "rmsprop_bnb_32bit", "galore_adamw", "galore_adamw_8bit", "galore_adafactor",
    "galore_adamw_layerwise", "galore_adamw_8bit_layerwise", "galore_adafactor_layerwise", "lomo", "adalomo",
    "grokadamw", "schedule_free_adamw", "schedule_free_sgd"};
// The paged ones page their state between host and GPU under memory
// pressure; the arithmetic is the unpaged one's, and ft plans memory instead.
const std::map<std::string, std::string, std::less<>> ft_optimizer_of = {
    {"adamw_hf", "adamw"},           {"adamw_torch", "adamw"},        {"adamw_torch_fused", "adamw"},
    {"adamw_apex_fused", "adamw"},   {"paged_adamw_32bit", "adamw"},  {"adamw_bnb_8bit", "adamw8bit"},
    {"adamw_8bit", "adamw8bit"},     {"paged_adamw_8bit", "adamw8bit"}, {"adamw_torch_4bit", "adamw4bit"},
    {"adafactor", "adafactor"},      {"sgd", "sgd"},                  {"lion_32bit", "lion"},
    {"paged_lion_32bit", "lion"}};

// fms-hf-tuning's peft_method values; gptq-lora is ado's LoRA over a GPTQ model.
const std::map<std::string, std::string, std::less<>> adapter_of = {
    {"none", "full"}, {"lora", "lora"}, {"pt", "prompt"}, {"gptq-lora", "lora"}};

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Whether `name` is one of ft's stock policies of this kind.
bool is_stock(ft::recipe::PolicyKind kind, const std::string& name) {
  std::istringstream names(ft::recipe::stock_names(kind));
  for (std::string word; names >> word;)
    if (word == name) return true;
  return false;
}

std::int64_t integer(const std::string& value) {
  std::size_t used = 0;
  try {
    const long long v = std::stoll(value, &used);
    if (used == value.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error("expected an integer, got " + value);
}

bool boolean(const std::string& value) {
  const std::string v = lower(value);
  if (v == "true") return true;
  if (v == "false") return false;
  throw Error("expected True or False, got " + value);
}

// fsdp_sharding_strategy as the parallelism it names, and whether it shards within a node only.
struct Sharding {
  std::string parallelism;
  bool hybrid = false;
};

std::optional<Sharding> ado_sharding(const std::string& value) {
  const std::string v = lower(value);
  if (v == "full_shard" || v == "1") return Sharding{"zero3"};
  if (v == "shard_grad_op" || v == "2") return Sharding{"zero2"};
  if (v == "no_shard" || v == "3") return Sharding{"ddp"};
  if (v == "hybrid_shard" || v == "4") return Sharding{"zero3", true};
  if (v == "hybrid_shard_zero2" || v == "5") return Sharding{"zero2", true};
  return std::nullopt;
}

// The joint names of one point, each checked against ado's vocabulary.
struct Reading {
  std::optional<std::int64_t> gpus, nodes, batch, fast_moe;
  std::optional<std::string> gpu_model, torch_dtype, optimizer, ado_optimizer, peft_method, backend;
  std::optional<Sharding> sharding;
  std::string parallelism;  // fsdp_sharding_strategy given as ft's parallelism name
  std::optional<bool> bf16;

  void read(const std::string& key, const std::string& value) {
    if (key == "number_gpus") gpus = integer(value);
    else if (key == "number_nodes") nodes = integer(value);
    else if (key == "batch_size") batch = integer(value);
    else if (key == "gpu_model") gpu_model = value;
    else if (key == "bf16") bf16 = boolean(value);
    else if (key == "fast_moe") {
      fast_moe = integer(value);
      if (*fast_moe < 0) throw Error("expected 0 (no expert parallelism) or a positive degree, got " + value);
    } else if (key == "torch_dtype") {
      const std::string v = lower(value);
      if (v != "float32" && v != "bfloat16" && v != "float16")
        throw Error("\"" + value + "\" is not a choice (one of bfloat16, float32, float16)");
      torch_dtype = v;
    } else if (key == "optim") {
      const std::string v = lower(value);
      if (auto it = ft_optimizer_of.find(v); it != ft_optimizer_of.end()) optimizer = it->second;
      else if (std::find(ado_optimizers.begin(), ado_optimizers.end(), v) != ado_optimizers.end()) ado_optimizer = v;
      else if (is_stock(ft::recipe::PolicyKind::optimizer, v)) optimizer = v;
      else
        throw Error("\"" + value + "\" is neither one of the optim values of ado's SFTTrainer actuator (adamw_torch, adamw_bnb_8bit, "
                    "adafactor, ...) nor one of ft's optimizers (" +
                    ft::recipe::stock_names(ft::recipe::PolicyKind::optimizer) + ")");
    } else if (key == "peft_method") {
      const std::string v = lower(value);
      if (!adapter_of.contains(v)) throw Error("\"" + value + "\" is not a choice (one of none, lora, pt, gptq-lora)");
      peft_method = v;
    } else if (key == "distributed_backend") {
      const std::string v = lower(value);
      if (v != "fsdp" && v != "ddp" && v != "none" && !v.empty())
        throw Error("\"" + value + "\" is not a choice (one of FSDP, DDP, None)");
      backend = v.empty() ? "none" : v;
    } else if (key == "fsdp_sharding_strategy") {
      sharding = ado_sharding(value);
      if (!sharding) {
        parallelism = lower(value);
        if (!is_stock(ft::recipe::PolicyKind::parallelism, parallelism))
          throw Error("\"" + value + "\" is not a choice (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, "
                      "HYBRID_SHARD_ZERO2, 1-5, or one of ft's parallelisms: " +
                      ft::recipe::stock_names(ft::recipe::PolicyKind::parallelism) + ")");
      }
    }
  }
};

// The number of machines an MPI hostfile names.
std::size_t hosts_in(const std::string& hostfile) {
  std::set<std::string> hosts;
  for (const HostfileEntry& entry : hostfile_hosts(hostfile)) hosts.insert(entry.host);
  return hosts.size();
}

// Kubernetes' GPU label (nvidia.com/gpu.product) writes NVML's name with dashes for spaces.
std::string label_of(std::string name) {
  std::replace(name.begin(), name.end(), ' ', '-');
  return lower(name);
}

// "" when the machine has a GPU gpu_model names, else why the point cannot run here.
std::string gpu_mismatch(const std::string& gpu_model) {
  std::vector<std::string> names;
  try {
    names = gpu_names();
  } catch (const Error& e) {
    return "gpu_model " + gpu_model + " is not on this machine (" + e.what() + ")";
  }
  for (const std::string& n : names)
    if (label_of(n) == label_of(gpu_model)) return "";
  return "gpu_model " + gpu_model + " is not on this machine (its GPUs: " + joined(names) + ")";
}

// The model's config.json, or null when the model is not a directory with one.
nlohmann::json model_config(const std::string& path) {
  std::ifstream in(fs::path(path) / "config.json");
  if (!in) return nullptr;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    return nullptr;
  }
}

std::string not_divisible(std::int64_t a, std::int64_t b) {
  return " (" + std::to_string(a) + " % " + std::to_string(b) + " != 0)";
}

// ado's validity rules that need only the point's values; "" when they hold.
std::string broken_rule(const Reading& p, std::int64_t gpus, std::int64_t ranks) {
  if (p.batch && *p.batch < 1) return "batch_size must be greater than 0";
  if (p.nodes && *p.nodes < 1) return "number_nodes must be greater than 0";
  if (gpus < 0) return "number_gpus must not be negative";
  if (p.batch && *p.batch % ranks != 0)
    return "batch_size cannot be evenly divided by number_gpus" + not_divisible(*p.batch, ranks);
  if (p.nodes && gpus % *p.nodes != 0)
    return "number_gpus cannot be evenly divided by number_nodes" + not_divisible(gpus, *p.nodes);
  if (p.nodes > 1 && gpus == 0) return "number_gpus = 0 is one process on one machine, so number_nodes must be 1";
  if (p.gpu_model && gpus > 0 && p.gpu_model->empty())
    return "if number_gpus is greater than 0 then gpu_model must be a non-empty string";
  if (p.fast_moe > 0 && gpus % *p.fast_moe != 0)
    return "fast_moe is set and number_gpus is not divisible by it" + not_divisible(gpus, *p.fast_moe);
  if (p.ado_optimizer)
    return "optim " + *p.ado_optimizer + " is not one ft has (ft's: " +
           ft::recipe::stock_names(ft::recipe::PolicyKind::optimizer) +
           "; adamw_torch, adamw_bnb_8bit, adamw_torch_4bit, adafactor, sgd and lion_32bit name them)";
  if (p.torch_dtype == "float16" && p.bf16 == true)
    return "bf16 = True with torch_dtype float16: ft trains float16 models in fp16-mixed only";
  return "";
}

// The rules that need the recipe the point makes and its model.
std::string broken_by_recipe(const Reading& p, const ft::recipe::Recipe& recipe) {
  if (p.nodes > 1) {
    if (recipe.launch.hostfile.empty())
      return "number_nodes = " + std::to_string(*p.nodes) +
             " needs launch.hostfile naming the machines; this recipe runs on this machine only";
    if (const std::size_t hosts = hosts_in(recipe.launch.hostfile); std::int64_t(hosts) < *p.nodes)
      return "number_nodes = " + std::to_string(*p.nodes) + " but launch.hostfile names " + std::to_string(hosts) +
             " machine(s)";
  }
  if (p.gpu_model && !p.gpu_model->empty() && recipe.strategy.device == "cuda")
    if (std::string why = gpu_mismatch(*p.gpu_model); !why.empty()) return why;
  if (p.fast_moe > 0 || p.peft_method == "gptq-lora") {
    const nlohmann::json config = model_config(recipe.model.path);
    if (config.is_null()) return recipe.model.path + " has no readable config.json to check fast_moe or gptq-lora against";
    if (p.fast_moe > 0) {
      const nlohmann::json experts = config.contains("num_local_experts") ? config["num_local_experts"]
                                                                          : config.value("num_experts", nlohmann::json());
      if (!experts.is_number_integer())
        return "fast_moe is set but " + recipe.model.path + " is not a Mixture of Experts model (no num_local_experts)";
      if (experts.get<std::int64_t>() % *p.fast_moe != 0)
        return "fast_moe is set and the num_local_experts of the Mixture of Experts (MoE) model is not divisible by "
               "fast_moe" + not_divisible(experts.get<std::int64_t>(), *p.fast_moe);
    }
    if (p.peft_method == "gptq-lora") {
      const nlohmann::json& q = config.contains("quantization_config") ? config["quantization_config"] : nlohmann::json();
      if (!q.is_object() || q.value("quant_method", "") != "gptq")
        return "peft_method gptq-lora needs a GPTQ model; " + recipe.model.path +
               "'s config.json has no quantization_config with quant_method \"gptq\"";
    }
  }
  return "";
}

}  // namespace

bool is_ado_entity(const std::string& key) {
  return renamed.contains(key) || single.contains(key) || joint.contains(key);
}

std::vector<std::string> entity_assignments(const std::string& key, const std::string& value,
                                            const EntityContext& context) {
  if (auto it = renamed.find(key); it != renamed.end()) return {it->second + "=" + value};
  if (key == "model_name") {
    const auto it = context.models.find(value);
    return {"model.path=" + (it == context.models.end() ? value : it->second)};
  }
  if (key == "gradient_checkpointing") {
    const std::string v = lower(value);
    return {"train.gradient_checkpointing=" + (v == "true" ? "every_block" : v == "false" ? "none" : value)};
  }
  if (key == "dataset_id") return {"data.train=artificial:" + value};
  if (key == "fast_kernels") {
    // A list of 3 booleans ([fast_loss, fast_rms_layernorm, fast_rope_embeddings]) or None.
    std::string v = value;
    std::replace_if(v.begin(), v.end(), [](char c) { return c == ',' || c == '[' || c == ']' || c == '"'; }, ' ');
    std::istringstream words(v);
    std::vector<std::string> flags;
    for (std::string w; words >> w;) flags.push_back(w);
    if (flags.size() == 1 && lower(flags[0]) == "none") return {};
    if (flags.size() != 3) throw Error("expected None or 3 booleans (fast_loss fast_rms_layernorm fast_rope_embeddings), got " + value);
    for (const std::string& f : flags) (void)boolean(f);
    return {};
  }
  Reading reading;
  reading.read(key, value);
  if (key == "optim" && reading.optimizer) return {"strategy.optimizer=" + *reading.optimizer};
  if (key == "fsdp_sharding_strategy" && !reading.parallelism.empty())
    return {"strategy.parallelism=" + reading.parallelism};
  return {};
}

Translation translate_entity(const Entity& entity, const EntityContext& context) {
  const ft::recipe::Recipe& base = *context.base;
  Translation t;
  Reading p;
  std::set<std::string, std::less<>> recipe_keys;  // recipe keys the point sets itself, which no ado name overrides
  for (const auto& [key, value] : entity) {
    if (joint.contains(key)) {
      p.read(key, value);
    } else if (is_ado_entity(key)) {
      for (std::string& s : entity_assignments(key, value, context)) t.sets.push_back(std::move(s));
    } else {
      t.sets.push_back(key + "=" + value);
      recipe_keys.insert(key);
    }
  }

  // Without number_gpus, the ranks are the point's launch.nproc, else the recipe's.
  std::int64_t nproc = base.launch.nproc;
  for (const auto& [key, value] : entity)
    if (key == "launch.nproc") nproc = integer(value);
  const std::int64_t gpus = p.gpus.value_or(std::max<std::int64_t>(1, nproc));
  const std::int64_t ranks = std::max<std::int64_t>(1, gpus);
  if (t.invalid = broken_rule(p, gpus, ranks); !t.invalid.empty()) return t;

  auto set = [&](const std::string& key, const std::string& value) {
    if (!recipe_keys.contains(key)) t.sets.push_back(key + "=" + value);
  };
  if (p.gpus) {
    set("launch.nproc", std::to_string(ranks));
    if (*p.gpus == 0) set("strategy.device", "cpu");  // ado's runs without a GPU
  }
  if (p.batch) set("train.per_device_train_batch_size", std::to_string(*p.batch / ranks));
  // As ado's actuator places them: number_gpus / number_nodes ranks on each machine.
  if (p.nodes > 1)
    set("launch.mpirun_args", "[\"--map-by\", \"ppr:" + std::to_string(ranks / *p.nodes) + ":node\"]");

  // The parallelism: FSDP's sharding, DDP, or one process's.
  if (p.backend || p.sharding || !p.parallelism.empty()) {
    if (ranks == 1) {
      set("strategy.parallelism", "single");
    } else if (p.backend && *p.backend != "fsdp") {
      set("strategy.parallelism", "ddp");
    } else if (!p.parallelism.empty()) {
      set("strategy.parallelism", p.parallelism);
    } else {
      const Sharding s = p.sharding.value_or(Sharding{"zero3"});
      set("strategy.parallelism", s.parallelism);
      if (s.hybrid && p.nodes > 1) set("launch.shard_group_size", std::to_string(ranks / *p.nodes));
    }
  } else if (p.gpus && ranks > 1 && base.strategy.parallelism == "single") {
    set("strategy.parallelism", "zero3");  // ado's default for several GPUs: FSDP's FULL_SHARD
  }

  if (p.torch_dtype || p.bf16) {  // ado's defaults for the other: bfloat16, and bf16 = False
    const std::string dtype = p.torch_dtype.value_or("bfloat16");
    const bool bf16 = p.bf16.value_or(false);
    set("strategy.precision", dtype == "float32" ? (bf16 ? "bf16-mixed" : "fp32")
                              : dtype == "bfloat16" ? "bf16-true"
                                                    : "fp16-mixed");
  }
  if (p.optimizer) set("strategy.optimizer", *p.optimizer);
  if (p.peft_method) set("strategy.adapter", adapter_of.at(*p.peft_method));
  if (p.fast_moe > 0) set("strategy.expert_parallel", std::to_string(*p.fast_moe));

  ft::recipe::Recipe recipe;
  try {
    recipe = context.load(t.sets);  // the keys together: a recipe that refuses the combination
  } catch (const Error& e) {
    t.invalid = e.what();
    return t;
  }
  t.invalid = broken_by_recipe(p, recipe);
  return t;
}

}  // namespace ftrun
