#pragma once
// A family's reading of a config.json given as text: what the configuration
// tests check against transformers' own counts and defaults.
#include <fstream>
#include <string>

#include <ft/models/read.hpp>

#include "support/files.hpp"

namespace ft::testing {

inline models::ModelSpec spec_of(const std::string& config_json) {
  const TempDir dir("ft_config");
  std::ofstream(dir / "config.json") << config_json;
  return models::read_model_spec(dir.path);
}

}  // namespace ft::testing
