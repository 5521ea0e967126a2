// A third-party plugin: it brings a policy ft does not have (an optimizer
// named "sgd-nesterov") and offers Trainers built with it. Recipes select it
// by name, `strategy.optimizer = "sgd-nesterov"`, once ftrun loads this library.
#include <ft/models/gpt_neox.hpp>
#include <ft/models/llama.hpp>
#include <ft/plugin/define.hpp>

namespace my {

struct NesterovSGD : ft::optim::Policy {
  static constexpr std::string_view name = "sgd-nesterov";
  static constexpr std::string_view type_name = "my::NesterovSGD";
  static constexpr double state_bytes = 4;  // one momentum buffer
};
static_assert(ft::optimizer_policy<NesterovSGD>);

}  // namespace my

FT_PLUGIN("my-plugin", "0.3.0",
          ft::plugin::product<std::tuple<ft::models::Llama, ft::models::GptNeox>,
                              std::tuple<ft::precision::FP32, ft::precision::BF16Mixed>,
                              std::tuple<ft::parallel::Single>, std::tuple<my::NesterovSGD>,
                              std::tuple<ft::adapters::Full, ft::adapters::LoRA>>)
