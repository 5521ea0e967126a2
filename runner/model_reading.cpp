#include "model_reading.hpp"

#include <set>

#include <ft/io/hf_config.hpp>
#include <ft/models/read.hpp>
#include <ft/stock.hpp>

namespace ftrun {

ft::models::ModelReading read_model(const std::filesystem::path& dir, PluginSearch& plugins) {
  if (!std::filesystem::is_regular_file(dir / "config.json")) return ft::models::read_model(dir);  // its one-line error
  const std::string architecture = ft::io::hf_architecture(dir);
  if (ft::models::stock_reads(architecture)) return ft::models::read_model(dir);
  do {
    if (const ft::plugin::Family* family = plugins.registry.find_family(architecture)) return family->read(dir);
  } while (plugins.load_deferred());
  std::set<std::string> supported;
  std::apply([&](auto... f) { (supported.insert(decltype(f)::hf_architectures.begin(), decltype(f)::hf_architectures.end()), ...); },
             ft::stock::Families{});
  for (const ft::plugin::Family& f : plugins.registry.families())
    supported.insert(f.hf_architectures.begin(), f.hf_architectures.end());
  std::string list;
  for (const std::string& a : supported) list += (list.empty() ? "" : ", ") + a;
  throw ft::Error((dir / "config.json").string() + ": architecture \"" + architecture +
                  "\" is read by no family of ft's or of the plugins found; supported: " + list);
}

ft::models::ModelReading read_model(const std::filesystem::path& dir, const std::vector<std::string>& plugin_files) {
  if (plugin_files.empty() && std::filesystem::is_regular_file(dir / "config.json") &&
      ft::models::stock_reads(ft::io::hf_architecture(dir)))
    return ft::models::read_model(dir);
  PluginSearch plugins = find_plugins(plugin_files, "cpu");
  return read_model(dir, plugins);
}

ft::estimate::Declarations declarations_of(const ft::plugin::Registry& registry) {
  ft::estimate::Declarations out;
  for (const ft::plugin::OptimizerPolicy& o : registry.optimizers())
    out.optimizers.push_back({o.name, o.state_bytes, o.elementwise_state});
  return out;
}

}  // namespace ftrun
