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
};

// Loads every plugin. A refused --plugin file throws ft::Error (the user asked
// for it by name); a refused plugin found by searching is recorded and skipped.
PluginSearch find_plugins(const std::vector<std::string>& explicit_files);

std::filesystem::path stock_plugin_dir();

}  // namespace ftrun
