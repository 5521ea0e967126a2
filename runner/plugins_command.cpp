// ftrun plugins: every plugin found, each Trainer combination it offers and
// its inference engines.
#include <iostream>
#include <memory>
#include <set>
#include <string>

#include "commands.hpp"
#include "exit_code.hpp"
#include "plugin_search.hpp"

namespace ftrun {

struct PluginsOptions {
  std::vector<std::string> plugins;  // --plugin FILE
};

int run_plugins(const PluginsOptions& options) {
  PluginSearch search;
  try {
    search = find_plugins(options.plugins);
  } catch (const ft::Error& e) {
    std::cerr << "ftrun: " << e.what() << "\n";
    return plugin_refused;
  }
  std::cout << "stock plugin directory: " << stock_plugin_dir().string() << "\n";
  for (const auto& plugin : search.registry.plugins()) {
    std::cout << "\n" << plugin->name() << " " << plugin->version() << "  (" << plugin->path().string()
              << ", ft " << plugin->ft_version() << ")\n";
    // One list per device the plugin runs on.
    std::set<std::string> devices;
    for (const auto& f : search.registry.factories())
      if (f.plugin == plugin) devices.insert(f.key.device);
    for (const std::string& device : devices) {
      std::cout << "  model, precision, parallelism, optimizer, adapter (on " << device << ")\n";
      for (const auto& f : search.registry.factories())
        if (f.plugin == plugin && f.key.device == device)
          std::cout << "  " << f.key.model << ", " << f.key.precision << ", " << f.key.parallelism << ", "
                    << f.key.optimizer << ", " << f.key.adapter << "\n";
    }
    // What generate, chat and serve run.
    std::string engines;
    for (const auto& e : search.registry.engines())
      if (e.plugin == plugin) engines += (engines.empty() ? "" : ", ") + e.key.str();
    if (!engines.empty()) std::cout << "  inference engines: " << engines << "\n";
  }
  if (search.registry.plugins().empty()) std::cout << "\nno plugins found\n";
#ifndef FT_WITH_CUDA
  std::cout << "\ncuda: not built (no nvcc was found when ft was configured), so no stock plugin runs on a GPU\n";
#endif
  for (const std::string& refusal : search.refusals) std::cerr << "ftrun: " << refusal << "\n";
  return search.refusals.empty() ? ok : plugin_refused;
}

Command add_plugins_command(CLI::App& app) {
  auto o = std::make_shared<PluginsOptions>();
  CLI::App* command = app.add_subcommand("plugins", "List plugins and the Trainer combinations each offers");
  command->add_option("--plugin", o->plugins, "Also load this plugin file (repeatable)");
  return {command, [o] { return run_plugins(*o); }};
}

}  // namespace ftrun
