#pragma once
// The host side of the plugin boundary: load a shared library, check that it
// speaks our ABI, and keep its trainer factories in a registry keyed by the
// five policy names and the device, and its inference engines keyed by
// model family, element type and device.
//
// A library is never unloaded while anything it made is alive: every factory
// holds a shared_ptr to its Plugin, which owns the library handle. Every
// refusal is one line that names the file and says what is wrong.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <boost/dll/shared_library.hpp>

#include "ft/core/error.hpp"
#include "ft/models/spec_json.hpp"
#include "ft/plugin/abi.h"
#include "ft/plugin/elf_check.hpp"
#include "ft/plugin/toolchain.hpp"

namespace ft::plugin {

struct TrainerKey {
  std::string model, precision, parallelism, optimizer, adapter;
  std::string device = "cpu";  // where the Trainer runs

  auto fields() const { return std::tie(model, precision, parallelism, optimizer, adapter, device); }
  friend bool operator==(const TrainerKey& a, const TrainerKey& b) { return a.fields() == b.fields(); }
  friend bool operator<(const TrainerKey& a, const TrainerKey& b) { return a.fields() < b.fields(); }

  // How many of the five policies and the device differ.
  int distance(const TrainerKey& o) const {
    return (model != o.model) + (precision != o.precision) + (parallelism != o.parallelism) +
           (optimizer != o.optimizer) + (adapter != o.adapter) + (device != o.device);
  }
  // "(llama, bf16-mixed, single, adamw, lora)", with " on cuda" for a device other than the CPU.
  std::string str() const {
    return "(" + model + ", " + precision + ", " + parallelism + ", " + optimizer + ", " + adapter + ")" +
           (device == "cpu" ? "" : " on " + device);
  }
};

class Plugin;

// An inference engine: "(llama, bfloat16) on cuda".
struct EngineKey {
  std::string model, dtype, device;
  auto fields() const { return std::tie(model, dtype, device); }
  friend bool operator==(const EngineKey& a, const EngineKey& b) { return a.fields() == b.fields(); }
  std::string str() const { return "(" + model + ", " + dtype + ") on " + device; }
};

// What a plugin offers under a key: its C entry points, the config.json
// architectures its model reads, and the plugin that keeps them loaded.
template <class Key, class Entry>
struct Offered {
  Key key;
  std::string type_name;
  std::vector<std::string> hf_architectures;
  const Entry* entry = nullptr;
  std::shared_ptr<const Plugin> plugin;  // keeps the library loaded
};
using Factory = Offered<TrainerKey, ft_trainer_factory>;
using EngineFactory = Offered<EngineKey, ft_engine_factory>;

// A model family a plugin brings: what ftrun's own commands read a model of it by.
struct Family {
  std::string name, type_name;
  std::vector<std::string> hf_architectures, linear_modules, default_lora_targets;
  const ft_model_family* entry = nullptr;
  std::shared_ptr<const Plugin> plugin;

  // The family's reading of the model in `dir`; throws ft::Error with the plugin's one line.
  models::ModelReading read(const std::filesystem::path& dir) const;
};

// An optimizer a plugin brings, as it declares itself.
struct OptimizerPolicy {
  std::string name, type_name;
  double state_bytes = 0;
  bool elementwise_state = false;
  std::shared_ptr<const Plugin> plugin;
};

class Plugin {
public:
  // Loads and checks one library. Throws ft::Error with one line on refusal.
  static std::shared_ptr<const Plugin> load(const std::filesystem::path& file) {
    auto plugin = std::shared_ptr<Plugin>(new Plugin());
    plugin->path_ = file;
    std::string where = "plugin " + file.string() + ": ";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) throw Error(where + "no such file");
    if (auto problem = elf_problem(file)) throw Error(where + *problem);
    try {
      plugin->library_.load(file, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
    } catch (const std::exception& e) {
      throw Error(where + "cannot be loaded: " + one_line(e.what()));
    }
    if (!plugin->library_.has(FT_PLUGIN_ENTRY))
      throw Error(where + "not an ft plugin: it exports no " FT_PLUGIN_ENTRY
                          " entry point (define one with FT_PLUGIN)");
    auto entry = plugin->library_.get_alias<const ft_plugin_descriptor*()>(FT_PLUGIN_ENTRY);
    const ft_plugin_descriptor* d = entry();
    if (!d) throw Error(where + "its entry point returned no descriptor");
    if (d->abi_version != FT_PLUGIN_ABI_VERSION)
      throw Error(where + "built for plugin ABI version " + std::to_string(d->abi_version) +
                  ", but this ftrun speaks version " + std::to_string(FT_PLUGIN_ABI_VERSION) +
                  "; rebuild the plugin against this ft");
    std::string toolchain = d->toolchain ? d->toolchain : "";
    if (toolchain != FT_TOOLCHAIN_ID)
      throw Error(where + "built with toolchain " + toolchain + ", but this ftrun was built with " +
                  FT_TOOLCHAIN_ID + "; rebuild the plugin with the same compiler and standard library");
    plugin->descriptor_ = d;
    return plugin;
  }

  const std::filesystem::path& path() const { return path_; }
  std::string name() const { return descriptor_->name; }
  std::string version() const { return descriptor_->version; }
  std::string ft_version() const { return descriptor_->ft_version; }

  std::vector<Factory> factories(const std::shared_ptr<const Plugin>& self) const {
    return offered<Factory>(descriptor_->factories, descriptor_->factory_count, self, [](const ft_trainer_factory& f) {
      return TrainerKey{f.model, f.precision, f.parallelism, f.optimizer, f.adapter, f.device};
    });
  }
  std::vector<EngineFactory> engines(const std::shared_ptr<const Plugin>& self) const {
    return offered<EngineFactory>(descriptor_->engines, descriptor_->engine_count, self,
                                  [](const ft_engine_factory& e) { return EngineKey{e.model, e.dtype, e.device}; });
  }

  std::vector<Family> families(const std::shared_ptr<const Plugin>& self) const {
    std::vector<Family> out;
    for (std::size_t i = 0; i < descriptor_->family_count; ++i) {
      const ft_model_family& f = descriptor_->families[i];
      out.push_back({f.name, f.type_name, strings(f.hf_architectures, f.hf_architecture_count),
                     strings(f.linear_modules, f.linear_module_count),
                     strings(f.default_lora_targets, f.default_lora_target_count), &f, self});
    }
    return out;
  }
  std::vector<OptimizerPolicy> optimizers(const std::shared_ptr<const Plugin>& self) const {
    std::vector<OptimizerPolicy> out;
    for (std::size_t i = 0; i < descriptor_->optimizer_count; ++i) {
      const ft_optimizer_policy& o = descriptor_->optimizers[i];
      out.push_back({o.name, o.type_name, o.state_bytes, o.elementwise_state != 0, self});
    }
    return out;
  }

private:
  Plugin() = default;

  static std::vector<std::string> strings(const char* const* list, std::size_t count) {
    return {list, list + count};
  }

  template <class O, class Entry, class KeyOf>
  static std::vector<O> offered(const Entry* entries, std::size_t count, const std::shared_ptr<const Plugin>& self,
                                KeyOf key_of) {
    std::vector<O> out;
    for (std::size_t i = 0; i < count; ++i) {
      const Entry& e = entries[i];
      out.push_back({key_of(e), e.type_name, strings(e.hf_architectures, e.hf_architecture_count), &e, self});
    }
    return out;
  }

  static std::string one_line(std::string s) {
    std::replace(s.begin(), s.end(), '\n', ' ');
    return s;
  }

  std::filesystem::path path_;
  boost::dll::shared_library library_;
  const ft_plugin_descriptor* descriptor_ = nullptr;
};

// The shared libraries (*.so) directly inside a directory, in name order.
inline std::vector<std::filesystem::path> plugin_files_in(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.is_regular_file(ec) && entry.path().extension() == ".so") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Every loaded plugin's factories. The first plugin added that offers a
// combination serves it, so plugins named on the command line come before
// those found on FT_PLUGIN_PATH, which come before the stock ones.
class Registry {
public:
  // Adds a plugin; a file already loaded (by its canonical path) is skipped.
  void add(const std::shared_ptr<const Plugin>& plugin) {
    std::error_code ec;
    auto canonical = std::filesystem::weakly_canonical(plugin->path(), ec);
    if (!loaded_.insert(canonical.string()).second) return;
    plugins_.push_back(plugin);
    for (Factory& f : plugin->factories(plugin)) factories_.push_back(std::move(f));
    for (EngineFactory& e : plugin->engines(plugin)) engines_.push_back(std::move(e));
    for (Family& f : plugin->families(plugin)) families_.push_back(std::move(f));
    for (OptimizerPolicy& o : plugin->optimizers(plugin)) optimizers_.push_back(std::move(o));
  }

  bool has(const std::filesystem::path& file) const {
    std::error_code ec;
    return loaded_.count(std::filesystem::weakly_canonical(file, ec).string()) > 0;
  }

  const std::vector<std::shared_ptr<const Plugin>>& plugins() const { return plugins_; }
  const std::vector<Factory>& factories() const { return factories_; }
  const std::vector<EngineFactory>& engines() const { return engines_; }
  const std::vector<Family>& families() const { return families_; }
  const std::vector<OptimizerPolicy>& optimizers() const { return optimizers_; }

  // The first family that reads this config.json architecture.
  const Family* find_family(std::string_view architecture) const {
    for (const Family& f : families_)
      if (std::find(f.hf_architectures.begin(), f.hf_architectures.end(), architecture) != f.hf_architectures.end())
        return &f;
    return nullptr;
  }
  // The first optimizer of this name.
  const OptimizerPolicy* find_optimizer(std::string_view name) const {
    for (const OptimizerPolicy& o : optimizers_)
      if (o.name == name) return &o;
    return nullptr;
  }

  // The first engine that reads this config.json architecture in this dtype on this device.
  const EngineFactory* find_engine(std::string_view architecture, std::string_view dtype,
                                   std::string_view device) const {
    for (const EngineFactory& e : engines_)
      if (e.key.dtype == dtype && e.key.device == device &&
          std::find(e.hf_architectures.begin(), e.hf_architectures.end(), architecture) != e.hf_architectures.end())
        return &e;
    return nullptr;
  }

  const Factory* find(const TrainerKey& key) const {
    for (const Factory& f : factories_)
      if (f.key == key) return &f;
    return nullptr;
  }

  // Offered combinations nearest to `key` (fewest policies differing), at most `n`.
  std::vector<const Factory*> closest(const TrainerKey& key, std::size_t n) const {
    std::vector<const Factory*> all;
    for (const Factory& f : factories_) all.push_back(&f);
    std::stable_sort(all.begin(), all.end(), [&](const Factory* a, const Factory* b) {
      return a->key.distance(key) < b->key.distance(key);
    });
    if (all.size() > n) all.resize(n);
    return all;
  }

  // The model family that reads a config.json `architectures` value.
  std::optional<std::string> family_for(std::string_view architecture) const {
    for (const Factory& f : factories_)
      if (std::find(f.hf_architectures.begin(), f.hf_architectures.end(), architecture) !=
          f.hf_architectures.end())
        return f.key.model;
    return std::nullopt;
  }

  // The names offered for one of the five policies, e.g. every optimizer.
  std::set<std::string> names(std::string TrainerKey::*policy) const {
    std::set<std::string> out;
    for (const Factory& f : factories_) out.insert(f.key.*policy);
    return out;
  }

private:
  std::vector<std::shared_ptr<const Plugin>> plugins_;
  std::vector<Factory> factories_;
  std::vector<EngineFactory> engines_;
  std::vector<Family> families_;
  std::vector<OptimizerPolicy> optimizers_;
  std::set<std::string> loaded_;
};

inline models::ModelReading Family::read(const std::filesystem::path& dir) const {
  std::string text;
  auto write = [](void* context, const char* s) { *static_cast<std::string*>(context) += s; };
  if (entry->describe(dir.c_str(), write, &text) != 0) throw Error(text);
  return {models::spec_from_json(text, "plugin " + plugin->name() + "'s family " + name), name, linear_modules,
          default_lora_targets};
}

// Calls a factory's plan entry point; throws ft::Error with the plugin's reason.
inline std::string plan(const Factory& factory, const std::string& recipe_toml) {
  std::string text;
  auto write = [](void* context, const char* s) { *static_cast<std::string*>(context) += s; };
  if (factory.entry->plan(factory.entry, recipe_toml.c_str(), write, &text) != 0) throw Error(text);
  return text;
}

// Calls a factory's train entry point: the exit status (0 done, 1 stopped or
// failed, 2 bad input) and, when not 0, the plugin's one-line reason.
inline std::pair<int, std::string> train(const Factory& factory, const std::string& recipe_toml) {
  std::string text;
  auto write = [](void* context, const char* s) { *static_cast<std::string*>(context) += s; };
  const int status = factory.entry->train(factory.entry, recipe_toml.c_str(), write, &text);
  return {status, text};
}

}  // namespace ft::plugin
