#pragma once
// Where ftrun finds plugins, in order of precedence: files named with
// --plugin, then the directories and files listed in FT_PLUGIN_PATH
// (colon-separated), then the stock plugin directory beside ftrun.
#include <filesystem>
#include <string>
#include <vector>

#include <ft/plugin/loader.hpp>

namespace ftrun {

struct PluginSearch {
  ft::plugin::Registry registry;
  // One line per plugin that was found but refused.
  std::vector<std::string> refusals;
  // Stock plugins found but set aside: for a run on the CPU, those that need
  // CUDA's libraries (mapping them costs a CPU rank about 200 MiB and 90 ms).
  std::vector<std::filesystem::path> deferred;

  // Loads the plugins set aside, in the order found; false when there were none.
  bool load_deferred();
};

// Loads every plugin; for `device` "cpu", the stock plugins that need CUDA's
// libraries are set aside (PluginSearch::deferred) until asked for. A
// refused --plugin file throws ft::Error (the user asked for it by name); a
// refused plugin found by searching is recorded and skipped.
PluginSearch find_plugins(const std::vector<std::string>& explicit_files, const std::string& device = "");

std::filesystem::path stock_plugin_dir();

}  // namespace ftrun
