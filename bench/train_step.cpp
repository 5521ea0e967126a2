// End-to-end forward + backward of a 135M-parameter Llama-shaped model
// (SmolLM2-135M's configuration, random weights) on 4 x 512 tokens: step
// time, tokens/s, peak host memory and MFU against this machine's measured
// f32 GEMM peak, printed as a table.
//
//   build/release/bin/bench_train_step [steps=3]
//
// FLOPs per token: 6 * (parameters in matrix products) for the linear
// layers and LM head, plus causal attention (6 * layers * T * C per token:
// QK^T and PV forward, twice that backward, on half the T x T pairs).
#include <chrono>
#include <cstdio>
#include <random>

#include <ft/device/cpu/gemm.hpp>
#include <ft/models/llama.hpp>
#include <ft/models/transformer.hpp>
#include <ft/train/flops.hpp>

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 3;
  const ft::index_t B = 4, T = 512;
  nlohmann::json config = {
      {"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 49152},     {"hidden_size", 576},
      {"intermediate_size", 1536},             {"num_hidden_layers", 30}, {"num_attention_heads", 9},
      {"num_key_value_heads", 3},              {"rms_norm_eps", 1e-5},    {"rope_theta", 100000.0},
      {"tie_word_embeddings", true}};
  ft::models::ConfigReader reader(config, "SmolLM2-135M shape");
  ft::models::Transformer<float> model(ft::models::Llama::describe(reader));
  const auto& c = model.config();

  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  auto fill = [&](ft::models::ParameterBuffer<float>& p) {
    for (ft::index_t i = 0; i < p.size(); ++i) p.values().data()[i] = normal(rng);
    for (const auto& e : p.entries())  // norm weights start at one, as HF initialises them
      if (e.name.find("norm") != std::string::npos) std::fill_n(p.values().data() + e.offset, e.shape.numel(), 1.0f);
  };
  fill(model.embedding().parameters());
  for (auto& b : model.blocks()) fill(b.parameters());
  fill(model.head().parameters());

  std::vector<std::int32_t> ids(std::size_t(B * T));
  for (auto& id : ids) id = std::int32_t(rng() % std::uint32_t(c.vocab_size));
  ft::models::Batch batch = ft::models::causal_lm_batch(B, T, ids);
  const double tokens = double(B * T);

  const double flops_per_token = ft::train::flops_per_token(c, T, true);
  double peak = ft::train::measure_gemm_peak();
  auto& memory = ft::memory::Host::stats();
  std::printf("model: %.1fM parameters, %lld layers, batch %lld x %lld\n", double(model.parameter_count()) / 1e6,
              (long long)c.num_layers, (long long)B, (long long)T);
  std::printf("measured f32 GEMM peak (OpenBLAS, 2048^3): %.1f GFLOP/s on %d threads\n\n", peak / 1e9,
              ft::cpu::thread_count());
  std::printf("| step | seconds | tokens/s | GFLOP/s | MFU | loss | peak host memory |\n");
  std::printf("|------|---------|----------|---------|-----|------|------------------|\n");
  for (int step = 0; step < steps; ++step) {
    memory.reset_peak();
    model.zero_grads();
    auto start = std::chrono::steady_clock::now();
    double loss = model.forward_backward(batch, {.token_count = tokens}) / tokens;
    double s = seconds_since(start);
    double achieved = flops_per_token * tokens / s;
    std::printf("| %d | %.2f | %.1f | %.1f | %.1f%% | %.4f | %.2f GiB |\n", step, s, tokens / s, achieved / 1e9,
                100 * achieved / peak, loss, double(memory.peak()) / (1 << 30));
  }
  return 0;
}
