// [lora] init_from and [prompt_tuning] init_from, as a recipe is loaded
// (recipe/load.hpp): the path becomes the adapter's directory, keys the
// recipe leaves unset take the adapter's values, and a key the recipe sets
// must agree with the adapter, or the recipe is refused at that key. The
// run itself then loads the weights (adapters/runtime.hpp,
// initial_weights), whose shapes load_peft_adapter and load_peft_prompt
// check against the model.
#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ft/adapters/adapter.hpp>
#include <ft/io/adapter_directory.hpp>
#include <ft/io/hf_config.hpp>
#include <ft/recipe/load.hpp>
#include <ft/recipe/recipe.hpp>

namespace ft::recipe {
namespace {

// One adapter a recipe starts from, with what the errors need to say where.
struct Start {
  Loaded<Recipe>& loaded;
  std::string section;  // "lora" or "prompt_tuning"
  std::filesystem::path dir;
  nlohmann::json config;

  std::string key(const std::string& name) const { return section + "." + name; }
  bool set(const std::string& name) const { return loaded.table.at_path(key(name)).node() != nullptr; }
  std::string where() const { return (dir / "adapter_config.json").string(); }
  Error error(const std::string& name, const std::string& what) const { return loaded.error(key(name), what); }

  // An adapter_config.json value, or a refusal that says it is missing or of the wrong kind.
  template <class V>
  V value(const char* name, const char* kind) const {
    const auto it = config.find(name);
    if (it == config.end() || it->is_null()) throw error("init_from", where() + " has no \"" + std::string(name) + "\"");
    try {
      return it->get<V>();
    } catch (const nlohmann::json::exception&) {
      throw error("init_from", where() + ": \"" + std::string(name) + "\" is " + it->dump() + ", expected " + kind);
    }
  }
  bool flag(const char* name) const {
    const auto it = config.find(name);
    return it != config.end() && it->is_boolean() && it->get<bool>();
  }

  // A key the recipe leaves unset takes the adapter's value; one it sets must be the adapter's.
  template <class V>
  void agree(const std::string& name, V& recipe_value, const V& adapter_value, const char* adapter_key,
             const std::string& shown_recipe, const std::string& shown_adapter) const {
    if (!set(name)) {
      recipe_value = adapter_value;
      return;
    }
    if (recipe_value == adapter_value) return;
    throw error(name, "is " + shown_recipe + ", and the adapter it starts from (" + where() + ") has " + adapter_key +
                          " = " + shown_adapter + "; remove " + key(name) + " to take the adapter's, or start from "
                          "another adapter");
  }
};

std::string shown(const std::vector<std::string>& list) { return nlohmann::json(list).dump(); }
std::string shown(double v) { return nlohmann::json(v).dump(); }
std::string shown(bool v) { return v ? "true" : "false"; }

Start open(Loaded<Recipe>& loaded, const std::string& section, std::string& init_from, std::string_view adapter,
           const char* peft_type) {
  Start s{loaded, section, {}, {}};
  if (loaded.recipe.strategy.adapter != adapter)
    throw s.error("init_from", "starts a " + std::string(peft_type) + " adapter, and strategy.adapter is \"" +
                                   loaded.recipe.strategy.adapter + "\"; set strategy.adapter = \"" + std::string(adapter) +
                                   "\" or remove " + s.key("init_from"));
  try {
    s.dir = io::adapter_directory(init_from);
    s.config = io::read_json_file(s.dir / "adapter_config.json");
  } catch (const Error& e) {
    throw s.error("init_from", e.what());
  }
  const std::string type = s.config.value("peft_type", std::string());
  if (type != peft_type)
    throw s.error("init_from", s.where() + " is a " + (type.empty() ? "PEFT adapter without a peft_type" : type + " adapter") +
                                   "; " + s.key("init_from") + " starts from a " + peft_type + " one");
  init_from = s.dir.string();
  return s;
}

template <class V>
void take_patterns(const Start& s, const char* name, NamedValues<V>& recipe) {
  NamedValues<V> adapter;
  if (s.config.contains(name) && s.config[name].is_object())
    for (const auto& [pattern, value] : s.config[name].items())  // in key order, as the recipe's table
      if (std::is_integral_v<V> ? value.is_number_integer() : value.is_number())
        adapter.emplace_back(pattern, value.template get<V>());
  // A recipe's own patterns stay: the adapter then loads only if every module's rank and scale agree.
  if (!s.set(name)) recipe = adapter;
}

void start_lora(Loaded<Recipe>& loaded) {
  LoraSection& lora = loaded.recipe.lora;
  const Start s = open(loaded, "lora", lora.init_from, adapters::LoRA::name, "LORA");
  // What ft's LoRA cannot continue: another computation, not other numbers.
  if (s.flag("use_dora")) throw s.error("init_from", s.where() + " is a DoRA adapter (use_dora); ft trains LoRA only");
  if (s.flag("fan_in_fan_out"))
    throw s.error("init_from", s.where() + " adapts fan_in_fan_out layers (GPT-2's Conv1D), which no family of ft has");
  // Modules with their own rank or alpha: the adapter's patterns, unless the recipe sets its own.
  take_patterns(s, "rank_pattern", lora.rank_pattern);
  take_patterns(s, "alpha_pattern", lora.alpha_pattern);

  const Int r = s.value<Int>("r", "a positive integer");
  s.agree("r", lora.r, r, "r", std::to_string(lora.r), std::to_string(r));
  const double alpha = s.value<double>("lora_alpha", "a number");
  s.agree("alpha", lora.alpha, alpha, "lora_alpha", shown(lora.alpha), shown(alpha));
  const bool rslora = s.flag("use_rslora");
  s.agree("use_rslora", lora.use_rslora, rslora, "use_rslora", shown(lora.use_rslora), shown(rslora));
  // Dropout is how the run trains, not what the adapter computes: the recipe's wins where it sets one.
  if (!s.set("dropout") && s.config.contains("lora_dropout") && s.config["lora_dropout"].is_number())
    lora.dropout = s.config["lora_dropout"].get<double>();

  // PEFT writes target_modules as a list of leaf names, or "all-linear";
  // another string is a regular expression, which ft does not match.
  const nlohmann::json& targets = s.config.contains("target_modules") ? s.config["target_modules"] : nlohmann::json();
  std::vector<std::string> adapter_targets;
  if (targets.is_string() && targets.get<std::string>() == "all-linear") adapter_targets = {"all-linear"};
  else if (targets.is_array() && std::ranges::all_of(targets, [](const auto& t) { return t.is_string(); }))
    adapter_targets = targets.get<std::vector<std::string>>();
  else
    throw s.error("init_from", s.where() + ": target_modules " + targets.dump() +
                                   " is not a list of module names; ft matches modules by name");
  std::ranges::sort(adapter_targets);
  // [] asks for the family's default: with an adapter, the adapter's modules are that default.
  std::vector<std::string> recipe_targets = lora.target_modules;
  std::ranges::sort(recipe_targets);
  const bool all_linear = recipe_targets == std::vector<std::string>{"all-linear"};
  const nlohmann::json& parameters =
      s.config.contains("target_parameters") ? s.config["target_parameters"] : nlohmann::json();
  if (parameters.is_array() && std::ranges::all_of(parameters, [](const auto& t) { return t.is_string(); }) &&
      !all_linear) {
    auto adapter_parameters = parameters.get<std::vector<std::string>>();
    std::ranges::sort(adapter_parameters);
    std::vector<std::string> recipe_parameters = lora.target_parameters;
    std::ranges::sort(recipe_parameters);
    if (!s.set("target_parameters")) lora.target_parameters = adapter_parameters;
    else if (recipe_parameters != adapter_parameters)
      throw s.error("target_parameters", "is " + shown(recipe_parameters) + ", and the adapter it starts from (" +
                                             s.where() + ") adapts " + shown(adapter_parameters) +
                                             "; remove lora.target_parameters to take the adapter's");
  }
  if (lora.target_modules.empty() || !s.set("target_modules")) lora.target_modules = adapter_targets;
  else if (!all_linear && recipe_targets != adapter_targets)  // all-linear: the module count is checked as it loads
    throw s.error("target_modules", "is " + shown(recipe_targets) + ", and the adapter it starts from (" + s.where() +
                                        ") adapts " + shown(adapter_targets) + "; remove lora.target_modules to take "
                                        "the adapter's, or start from another adapter");
}

void start_prompt(Loaded<Recipe>& loaded) {
  PromptTuningSection& prompt = loaded.recipe.prompt_tuning;
  const Start s = open(loaded, "prompt_tuning", prompt.init_from, adapters::Prompt::name, "PROMPT_TUNING");
  if (!prompt.init_text.empty())
    throw s.error("init_text", "and prompt_tuning.init_from both say where the virtual tokens start; set one of them");
  const Int tokens = s.value<Int>("num_virtual_tokens", "a positive integer");
  s.agree("num_virtual_tokens", prompt.num_virtual_tokens, tokens, "num_virtual_tokens",
          std::to_string(prompt.num_virtual_tokens), std::to_string(tokens));
}

}  // namespace

void take_adapter_start(Loaded<Recipe>& loaded) {
  if (!loaded.recipe.lora.init_from.empty()) start_lora(loaded);
  if (!loaded.recipe.prompt_tuning.init_from.empty()) start_prompt(loaded);
}

}  // namespace ft::recipe
