// A third-party plugin: it brings two policies ft does not have, a model
// family ("my-lm": config.json architectures ["MyLMForCausalLM"], with its
// own config keys and weight names) and an optimizer ("sgd-nesterov": SGD
// with Nesterov momentum 0.9 unless the recipe sets train.momentum), and
// offers Trainers built with them. Once ftrun loads this library, recipes
// select them by name (`strategy.optimizer = "sgd-nesterov"`; a model of the
// family is found by its architecture), and ftrun's own commands read a
// my-lm model through the plugin: `ftrun init`, `eval`, `generate`,
// `serve`, `estimate` and `convert` work on it as on ft's own families.
#include <array>
#include <string>
#include <string_view>

#include <ft/models/family.hpp>
#include <ft/models/gpt_neox.hpp>
#include <ft/models/llama.hpp>
#include <ft/optim/runtime.hpp>
#include <ft/plugin/define.hpp>

namespace my {

// A decoder-only model laid out as this plugin's authors saved it: ft's
// block (RMSNorm, rotary attention, SwiGLU) under other names. A family
// maps a config.json to ft's TransformerConfig and each of its tensors to
// rows of ft's fused parameters.
// [family]
struct MyLM : ft::models::Policy {
  static constexpr std::string_view name = "my-lm";
  static constexpr std::string_view type_name = "my::MyLM";
  static constexpr std::array<std::string_view, 1> hf_architectures{"MyLMForCausalLM"};
  static constexpr std::array<std::string_view, 7> linear_modules{"wq", "wk", "wv", "wo", "gate", "up", "down"};
  static constexpr std::array<std::string_view, 2> default_lora_targets{"wq", "wv"};

  static ft::models::ModelSpec describe(const ft::models::ConfigReader& json) {
    ft::models::TransformerConfig c;
    c.architecture = json.architecture();
    c.vocab_size = json.required_int("vocab_size");
    c.hidden_size = json.required_int("d_model");
    c.num_layers = json.required_int("n_layers");
    c.num_heads = c.num_kv_heads = json.required_int("n_heads");
    c.intermediate_size = json.required_int("d_ff");
    if (c.hidden_size % c.num_heads != 0) json.fail("d_model must be a multiple of n_heads");
    c.head_dim = c.hidden_size / c.num_heads;
    c.norm = ft::nn::NormKind::rms;
    c.norm_eps = json.number("norm_eps", 1e-5);
    c.activation = ft::nn::Activation::silu;
    c.gated_mlp = true;
    c.tie_embeddings = json.flag("tie_embeddings", true);
    c.rope.theta = json.number("rope_theta", 10000.0);
    c.rope.rotary_dim = c.head_dim;
    c.sliding_window.assign(std::size_t(c.num_layers), 0);
    c.max_position_embeddings = json.optional_int("max_seq_len", 0);

    ft::models::ModelSpec spec{c, {}};
    auto bind = [&](std::string theirs, std::string ours, ft::index_t row = 0) {
      spec.weights.push_back({std::move(theirs), std::move(ours), row});
    };
    const ft::index_t C = c.hidden_size;
    bind("tok.weight", "embed.weight");
    for (ft::index_t i = 0; i < c.num_layers; ++i) {
      const std::string mine = "blocks." + std::to_string(i) + ".", ft = "layers." + std::to_string(i) + ".";
      bind(mine + "norm1.weight", ft + "attn_norm.weight");
      bind(mine + "wq.weight", ft + "qkv.weight", 0);
      bind(mine + "wk.weight", ft + "qkv.weight", C);
      bind(mine + "wv.weight", ft + "qkv.weight", 2 * C);
      bind(mine + "wo.weight", ft + "o.weight");
      bind(mine + "norm2.weight", ft + "mlp_norm.weight");
      bind(mine + "gate.weight", ft + "mlp_in.weight", 0);
      bind(mine + "up.weight", ft + "mlp_in.weight", c.intermediate_size);
      bind(mine + "down.weight", ft + "mlp_out.weight");
    }
    bind("norm.weight", "final_norm.weight");
    if (!c.tie_embeddings) bind("head.weight", "lm_head.weight");
    return spec;
  }
};
static_assert(ft::model_family<MyLM>);
// [family]

// The run-time half of the policy: one momentum buffer per flat part of a
// parameter buffer, made from the part's tensors, its size and the recipe's
// [train] section, as every optimizer runtime is.
// [optimizer]
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
// [optimizer]

}  // namespace my

FT_PLUGIN("my-plugin", "0.4.0",
          ft::plugin::product<std::tuple<my::MyLM, ft::models::Llama, ft::models::GptNeox>,
                              std::tuple<ft::precision::FP32, ft::precision::BF16Mixed>,
                              std::tuple<ft::parallel::Single>, std::tuple<my::NesterovSGD>,
                              std::tuple<ft::adapters::Full, ft::adapters::LoRA>>)
