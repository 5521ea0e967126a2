#pragma once
// The model in an HF directory as ftrun's own commands read it (init,
// convert, schedule, estimate and the memory check): by one of ft's
// families, or else by a family a plugin brings (plugin/abi.h's
// ft_model_family), so a third party's model is initialised, converted,
// drawn and estimated as ft's own are.
#include <filesystem>
#include <string>
#include <vector>

#include <ft/estimate/declarations.hpp>
#include <ft/models/weight_map.hpp>

#include "plugin_search.hpp"

namespace ftrun {

// Stock families first; the plugins' families (those set aside too) when none reads it.
ft::models::ModelReading read_model(const std::filesystem::path& dir, PluginSearch& plugins);

// The same, loading plugins (--plugin files first) only when no stock family reads the model.
ft::models::ModelReading read_model(const std::filesystem::path& dir, const std::vector<std::string>& plugin_files);

// The loaded plugins' optimizers that ft's own list lacks, as they declare themselves.
ft::estimate::Declarations declarations_of(const ft::plugin::Registry& registry);

}  // namespace ftrun
