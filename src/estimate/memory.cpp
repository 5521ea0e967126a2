// ft's memory estimate, compiled once (estimate/memory_estimate.hpp): it
// counts the buffers the model's stages declare, so its source includes the
// layers, and whatever only asks for an estimate need not.
#include <ft/estimate/memory.hpp>

namespace ft::estimate {

std::vector<MemoryEstimate> estimate_memory_by_rank(recipe::Recipe recipe, const models::ModelReading& model,
                                                    const Declarations& declared) {
  detail::check_estimable(recipe, declared);
  if (recipe.strategy.adapter == adapters::LoRA::name) {
    const std::vector<std::string_view> linear(model.linear_modules.begin(), model.linear_modules.end()),
        targets(model.default_lora_targets.begin(), model.default_lora_targets.end());
    adapters::LoRA::resolve(recipe, {model.family, linear, targets});
  }
  std::vector<MemoryEstimate> ranks{estimate_memory_of_rank(recipe, model.spec, 0, declared)};
  for (int rank = 1; rank < ranks.front().ranks; ++rank)
    ranks.push_back(estimate_memory_of_rank(recipe, model.spec, rank, declared));
  for (MemoryEstimate& e : ranks) e.file_tensor_bytes = detail::largest_file_tensor(recipe.model.path, model.spec);
  return ranks;
}

std::vector<MemoryEstimate> estimate_memory_by_rank(const recipe::Recipe& recipe) {
  return estimate_memory_by_rank(recipe, models::read_model(recipe.model.path));
}

}  // namespace ft::estimate
