#include "plugin_search.hpp"

#include <cstdlib>
#include <utility>
#include <sstream>

#include <boost/dll/runtime_symbol_info.hpp>

namespace ftrun {

std::filesystem::path stock_plugin_dir() {
  return (boost::dll::program_location().parent_path() / FT_STOCK_PLUGIN_RELDIR).lexically_normal();
}

namespace {

void try_load(PluginSearch& search, const std::filesystem::path& file) {
  if (search.registry.has(file)) return;
  try {
    search.registry.add(ft::plugin::Plugin::load(file));
  } catch (const ft::Error& e) {
    search.refusals.emplace_back(e.what());
  }
}

}  // namespace

bool PluginSearch::load_deferred() {
  if (deferred.empty()) return false;
  for (const auto& file : std::exchange(deferred, {})) try_load(*this, file);
  return true;
}

PluginSearch find_plugins(const std::vector<std::string>& explicit_files, const std::string& device) {
  PluginSearch search;
  for (const std::string& file : explicit_files) search.registry.add(ft::plugin::Plugin::load(file));

  auto try_entry = [&](const std::filesystem::path& entry) {
    std::error_code ec;
    if (std::filesystem::is_directory(entry, ec)) {
      for (const auto& file : ft::plugin::plugin_files_in(entry)) try_load(search, file);
    } else if (std::filesystem::exists(entry, ec)) {
      try_load(search, entry);
    } else {
      search.refusals.push_back("FT_PLUGIN_PATH entry " + entry.string() + ": no such file or directory");
    }
  };

  if (const char* env = std::getenv("FT_PLUGIN_PATH")) {
    std::stringstream list(env);
    for (std::string entry; std::getline(list, entry, ':');)
      if (!entry.empty()) try_entry(entry);
  }
  // Only stock plugins wait: one found earlier must keep its precedence over them.
  for (const auto& file : ft::plugin::plugin_files_in(stock_plugin_dir())) {
    if (device == "cpu" && ft::plugin::needs_cuda(file)) search.deferred.push_back(file);
    else try_load(search, file);
  }
  return search;
}

}  // namespace ftrun
