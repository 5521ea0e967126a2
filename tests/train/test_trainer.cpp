// The Trainer's policy checks, made before anything is allocated.
#include <doctest/doctest.h>

#include <ft/ft.hpp>
#include <ft/recipe/load.hpp>

#include "support/cpu_as_device.hpp"

namespace test_trainer {

using namespace ft;

namespace {
using LlamaLoRA = Trainer<models::Llama, precision::BF16Mixed, parallel::Single, optim::AdamW, adapters::LoRA>;
using NeoxFullZ2 = Trainer<models::GptNeox, precision::FP32, parallel::ZeRO<2>, optim::SGD, adapters::Full>;

recipe::Recipe make(const std::string& extra) {
  std::string fixtures = std::string(FT_SOURCE_DIR) + "/tests/fixtures";
  std::string text = "[model]\npath = '" + fixtures + "/models/tiny-llama'\n[data]\ntrain = '" + fixtures +
                     "/data/tiny.jsonl'\n" + extra;
  return recipe::from_table<recipe::Recipe>(recipe::parse_toml(text, "r.toml"), "r.toml");
}

template <class T>
std::string refusal(const std::string& extra) {
  try {
    T trainer(make(extra));
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}
}  // namespace

namespace {
// An optimizer policy from outside ft that brings its own runtime, a host one.
template <class M>
struct HostSgd final : optim::Runtime<M> {
  index_t n;
  HostSgd(const std::vector<models::ParameterEntry>&, index_t size, const recipe::TrainSection&) : n(size) {}
  void step(M* values, const M* grads, double lr, std::int64_t) override {
    for (index_t i = 0; i < n; ++i) values[i] = M(float(values[i]) - float(lr) * float(grads[i]));
  }
  std::vector<optim::StateArray> state() override { return {}; }
};
struct HostOnlyOptimizer : optim::Policy {
  static constexpr std::string_view name = "host-sgd";
  static constexpr std::string_view type_name = "HostOnlyOptimizer";
  static constexpr double state_bytes = 0;
  template <class M>
  using runtime = HostSgd<M>;
};
}  // namespace

TEST_CASE("an optimizer policy's own host optimizer steps on the CPU and is refused on a device in one line") {
  const recipe::TrainSection train;
  auto on_cpu = train::make_optimizer_runtime<HostOnlyOptimizer, float, device::Cpu>({}, 3, train);
  std::vector<float> p{1, 2, 3}, g{1, 1, 1};
  on_cpu->step(p.data(), g.data(), 0.5, 1);
  CHECK(p == std::vector<float>{0.5f, 1.5f, 2.5f});
  CHECK_THROWS_WITH_AS((train::make_optimizer_runtime<HostOnlyOptimizer, float, testing::CpuAsDevice>({}, 3, train)),
                       "optimizer host-sgd steps on the CPU only: set strategy.optimizer_offload = true to step it "
                       "in host memory",
                       Error);
}

TEST_CASE("the type names the five policies") {
  CHECK(LlamaLoRA::type_name() ==
        "ft::Trainer<ft::models::Llama, ft::precision::BF16Mixed, ft::parallel::Single, ft::optim::AdamW, "
        "ft::adapters::LoRA>");
  static_assert(std::is_same_v<NeoxFullZ2::parallelism_type, parallel::ZeRO<2>>);
}

TEST_CASE("a single-process trainer refuses several ranks") {
  CHECK(refusal<LlamaLoRA>("[launch]\nnproc = 4") ==
        "parallelism single runs one process, but the job has 4 ranks; choose ddp, zero1, zero2 or zero3 for several ranks");
  CHECK(refusal<NeoxFullZ2>("[launch]\nnproc = 4") == "accepted");
}

TEST_CASE("an optimizer fused into backward refuses gradient accumulation and sharded gradients") {
  CHECK(refusal<LlamaLoRA>("[train]\nfuse_optimizer_with_backward = true\ngradient_accumulation_steps = 4") ==
        "train.fuse_optimizer_with_backward steps each block inside backward, so gradients cannot accumulate "
        "over gradient_accumulation_steps = 4; set one of them back");
  CHECK(refusal<NeoxFullZ2>("[train]\nfuse_optimizer_with_backward = true") ==
        "train.fuse_optimizer_with_backward needs whole gradients, but parallelism zero2 shards them; use zero1 or ddp");
  CHECK(refusal<LlamaLoRA>("[train]\nfuse_optimizer_with_backward = true\nmax_grad_norm = 0") == "accepted");
}

TEST_CASE("a LoRA target that matches no module of the family is refused") {
  CHECK(refusal<LlamaLoRA>("[lora]\ntarget_modules = ['q_proj', 'query_key_value']") ==
        "lora.target_modules: \"query_key_value\" matches no module of the llama family; allowed: q_proj, k_proj, "
        "v_proj, o_proj, gate_proj, up_proj, down_proj, shared_expert_gate, input_linear, output_linear, w1, w2, w3, gate, or "
        "\"all-linear\"");
  CHECK(refusal<LlamaLoRA>("[lora]\ntarget_modules = 'all-linear'") == "accepted");
}

TEST_CASE("the plan states dtypes and bytes per parameter as the engine holds them") {
  // What `ftrun estimate` counts for these runs, divided by the trainable parameters.
  std::string plan = LlamaLoRA(make("")).plan();
  CHECK(plan.find("precision    bf16-mixed: weights bf16, matmul inputs bf16 (f32 accumulate), gradients bf16 per "
                  "micro-batch and f32 per step, master f32") != std::string::npos);
  // bf16 weight 2 + bf16 micro-batch gradient 2 + f32 step gradient 4 + f32 master 4 + AdamW's f32 moments 8.
  CHECK(plan.find("per trainable parameter: 20 (weight 2, gradient 2, step gradient 4, master 4, optimizer 8)\n") !=
        std::string::npos);

  // An optimizer fused into backward steps from each micro-batch's gradient: no step gradient.
  plan = LlamaLoRA(make("[train]\nfuse_optimizer_with_backward = true\nmax_grad_norm = 0\n"
                        "gradient_accumulation_steps = 1\n")).plan();
  CHECK(plan.find("per trainable parameter: 16 (weight 2, gradient 2, step gradient 0, master 4, optimizer 8)\n") !=
        std::string::npos);

  // bf16-true: no master copy, AdamW's moments in bf16.
  using LlamaBf16 = Trainer<models::Llama, precision::BF16True, parallel::Single, optim::AdamW, adapters::LoRA>;
  plan = LlamaBf16(make("")).plan();
  CHECK(plan.find("precision    bf16-true: weights bf16, matmul inputs bf16 (f32 accumulate), gradients bf16 per "
                  "micro-batch, no master copy") != std::string::npos);
  CHECK(plan.find("per trainable parameter: 8 (weight 2, gradient 2, step gradient 0, master 0, optimizer 4)\n") !=
        std::string::npos);

  // ZeRO-2 keeps the step's gradient as a shard of its own even without a master copy; SGD one momentum buffer.
  plan = NeoxFullZ2(make("[train]\nmomentum = 0.9\n")).plan();
  CHECK(plan.find("per trainable parameter: 16 (weight 4, gradient 4, step gradient 4, master 0, optimizer 4) "
                  "before sharding\n") != std::string::npos);
  // Without momentum SGD keeps no state (its runtime allocates none).
  plan = NeoxFullZ2(make("[train]\nmomentum = 0\n")).plan();
  CHECK(plan.find("per trainable parameter: 12 (weight 4, gradient 4, step gradient 4, master 0, optimizer 0) "
                  "before sharding\n") != std::string::npos);
}

}  // namespace test_trainer
