// A third-party plugin: it brings a policy ft does not have (an optimizer
// named "sgd-nesterov": SGD with Nesterov momentum 0.9 unless the recipe sets
// train.momentum) and offers Trainers built with it. Recipes select it by
// name, `strategy.optimizer = "sgd-nesterov"`, once ftrun loads this library.
#include <ft/models/gpt_neox.hpp>
#include <ft/models/llama.hpp>
#include <ft/optim/runtime.hpp>
#include <ft/plugin/define.hpp>

namespace my {

// The run-time half of the policy: one momentum buffer per flat part of a
// parameter buffer, made from the part's tensors, its size and the recipe's
// [train] section, as every optimizer runtime is.
template <class M>
class NesterovStep final : public ft::optim::Runtime<M> {
public:
  NesterovStep(const std::vector<ft::models::ParameterEntry>&, ft::index_t n, const ft::recipe::TrainSection& t)
      : h_(ft::optim::hyperparameters(t)), momentum_(std::size_t(n), 0.0f) {
    h_.momentum = t.momentum > 0 ? t.momentum : 0.9;
    h_.nesterov = true;
  }
  void step(M* values, const M* grads, double lr, std::int64_t step) override {
    ft::optim::Hyperparameters h = h_;
    h.lr = lr;
    ft::optim::sgd_step(values, grads, momentum_.data(), ft::index_t(momentum_.size()), h, step);
  }
  std::vector<ft::optim::StateArray> state() override {
    return {{"momentum_buffer", "F32", momentum_.data(), momentum_.size() * sizeof(float)}};
  }

private:
  ft::optim::Hyperparameters h_;
  std::vector<float> momentum_;
};

// Its runtime takes no device, so it steps on the CPU (and on a GPU only
// with strategy.optimizer_offload).
struct NesterovSGD : ft::optim::Policy {
  static constexpr std::string_view name = "sgd-nesterov";
  static constexpr std::string_view type_name = "my::NesterovSGD";
  static constexpr double state_bytes = 4;  // one momentum buffer
  template <class M>
  using runtime = NesterovStep<M>;
};
static_assert(ft::optimizer_policy<NesterovSGD>);

}  // namespace my

FT_PLUGIN("my-plugin", "0.3.0",
          ft::plugin::product<std::tuple<ft::models::Llama, ft::models::GptNeox>,
                              std::tuple<ft::precision::FP32, ft::precision::BF16Mixed>,
                              std::tuple<ft::parallel::Single>, std::tuple<my::NesterovSGD>,
                              std::tuple<ft::adapters::Full, ft::adapters::LoRA>>)
