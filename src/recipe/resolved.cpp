// The resolved recipe read back from TOML text (ft/recipe/resolved.hpp).
#include "ft/recipe/resolved.hpp"

#include "ft/recipe/load.hpp"

namespace ft::recipe {

Recipe read_resolved(std::string_view toml) {
  const std::string name = "<resolved recipe>";
  return from_table<Recipe>(parse_toml(toml, name), name);
}

}  // namespace ft::recipe
