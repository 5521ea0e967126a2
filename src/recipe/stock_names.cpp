// The stock policies' names for the recipe's help (ft/recipe/recipe.hpp).
#include <string>

#include "ft/recipe/recipe.hpp"
#include "ft/stock.hpp"

namespace ft::recipe {

const std::string& stock_names(PolicyKind kind) {
  static const std::string family = stock::names<stock::Families>(), precision = stock::names<stock::Precisions>(),
                           parallelism = stock::names<stock::Parallelisms>(),
                           optimizer = stock::names<stock::Optimizers>(), adapter = stock::names<stock::Adapters>();
  switch (kind) {
    case PolicyKind::family: return family;
    case PolicyKind::precision: return precision;
    case PolicyKind::parallelism: return parallelism;
    case PolicyKind::optimizer: return optimizer;
    case PolicyKind::adapter: return adapter;
  }
  return family;
}

}  // namespace ft::recipe
