// A fine-tuning step on the GPU (forward, backward, AdamW) of
// Transformer<bf16, device::Cuda> with random weights, full and LoRA, at the
// shapes tools/bench_torch_cuda.py gives PyTorch: SmolLM2-135M (8 x 2048
// tokens) and a 1B Llama (Llama-3.2-1B's shape, 4 x 2048). bf16 weights,
// gradients and activations, f32 optimizer state; tokens/s and MFU against
// the measured bf16 GEMM peak (cuBLASLt, 8192^3), peak device memory from
// ft's allocator.
//
//   bench_cuda_train_step [steps=10]
//
// FLOPs per token as the CPU's benchmark counts them (train/flops.hpp).
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <ft/adapters/lora.hpp>
#include <ft/device/cuda.cuh>
#include <ft/models/llama.hpp>
#include <ft/models/transformer.hpp>
#include <ft/optim/update.hpp>
#include <ft/train/flops.hpp>
#include <ft/tensor/scratch.hpp>

#include "timing.cuh"

namespace {

using ft::bf16;
using ft::index_t;
using Cuda = ft::device::Cuda;

double gemm_peak() {
  const index_t n = 8192;
  const std::size_t bytes = std::size_t(n * n) * sizeof(bf16);
  std::vector<bf16> host(std::size_t(n * n));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (bf16& x : host) x = bf16(normal(rng));
  auto* a = static_cast<bf16*>(ft::memory::CudaDevice::allocate(bytes));
  auto* b = static_cast<bf16*>(ft::memory::CudaDevice::allocate(bytes));
  auto* c = static_cast<bf16*>(ft::memory::CudaDevice::allocate(bytes));
  Cuda::from_host(a, host.data(), bytes);
  Cuda::from_host(b, host.data(), bytes);
  const double s = ft::bench::median_seconds(
      [&] { Cuda::gemm<bf16>(ft::Op::none, ft::Op::none, n, n, n, 1, a, n, b, n, 0, c, n); });
  for (void* p : {(void*)a, (void*)b, (void*)c}) ft::memory::CudaDevice::deallocate(p, bytes);
  return 2.0 * double(n) * double(n) * double(n) / s;
}

struct Shape {
  const char* name;
  nlohmann::json config;
  index_t B, T;
};

// One stage's optimizer state on the device.
struct AdamState {
  ft::memory::Scratch<float, ft::memory::CudaDevice> m, v;
  explicit AdamState(index_t n) : m(n), v(n) {
    ft::memory::CudaDevice::zero(m.data(), std::size_t(n) * sizeof(float));
    ft::memory::CudaDevice::zero(v.data(), std::size_t(n) * sizeof(float));
  }
};

// One configuration: full fine-tuning, or LoRA (r 16, alpha 32, every
// linear layer, the model frozen) as tools/bench_torch_cuda.py runs PEFT.
void run(const Shape& shape, bool lora, int steps, double peak) {
  ft::models::ConfigReader reader(shape.config, shape.name);
  ft::models::Transformer<bf16, Cuda> model(ft::models::Llama::describe(reader), !lora);
  const auto& c = model.config();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<ft::models::ParameterBuffer<bf16, ft::memory::CudaDevice>*> weights{&model.embedding().parameters()};
  for (auto& b : model.blocks()) weights.push_back(&b.parameters());
  weights.push_back(&model.head().parameters());
  for (auto* p : weights) {
    std::vector<bf16> host(std::size_t(p->size()));
    for (bf16& x : host) x = bf16(normal(rng));
    for (const auto& e : p->entries())  // norm weights start at one, as HF initialises them
      if (e.name.find("norm") != std::string::npos) std::fill_n(host.data() + e.offset, e.shape.numel(), bf16(1.0f));
    Cuda::from_host(p->values().data(), host.data(), host.size() * sizeof(bf16));
  }
  std::unique_ptr<ft::adapters::LoraModel<bf16, Cuda>> adapters;
  auto trained = weights;
  double lora_parameters = 0;
  if (lora) {
    adapters = std::make_unique<ft::adapters::LoraModel<bf16, Cuda>>(
        model, ft::adapters::LoraOptions{.r = 16, .alpha = 32, .target_modules = {"all-linear"}});
    trained.clear();
    for (auto& b : adapters->blocks()) {
      trained.push_back(&b->parameters());
      lora_parameters += double(b->parameters().size());
    }
  }
  std::vector<std::unique_ptr<AdamState>> state;
  for (auto* p : trained) state.push_back(std::make_unique<AdamState>(p->size()));

  std::vector<std::int32_t> ids(std::size_t(shape.B * shape.T));
  for (auto& id : ids) id = std::int32_t(rng() % std::uint32_t(c.vocab_size));
  const ft::models::Batch batch = ft::models::causal_lm_batch(shape.B, shape.T, ids);
  const double tokens = double(shape.B * shape.T);
  ft::optim::Hyperparameters h;
  h.lr = 1e-5;
  std::int64_t step = 0;
  double loss = 0;
  auto train_step = [&] {
    for (auto* p : trained) p->zero_grads();
    loss = model.forward_backward(batch, {.token_count = tokens, .chunk_rows = 4096}) / tokens;
    ++step;
    for (std::size_t i = 0; i < trained.size(); ++i)
      ft::optim::adamw_step<Cuda>(trained[i]->values().data(), trained[i]->grads().data(), state[i]->m.data(),
                                  state[i]->v.data(), trained[i]->size(), h, step);
  };
  ft::memory::CudaDevice::stats().reset_peak();
  const double s = ft::bench::median_seconds(train_step, 3, steps);
  const double achieved = ft::train::flops_per_token(c, shape.T, !lora, lora_parameters) * tokens / s;
  std::printf("| %s | %s | %lld x %lld | %.1f | %.0f | %.0f | %.1f%% | %.1f | %.3f |\n", shape.name,
              lora ? "lora" : "full", (long long)shape.B, (long long)shape.T, s * 1e3, tokens / s, achieved / 1e12,
              100 * achieved / peak, double(ft::memory::CudaDevice::stats().peak()) / double(1 << 30), loss);
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 10;
  cudaDeviceProp prop{};
  FT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double peak = gemm_peak();
  std::printf("%s: measured bf16 GEMM peak (cuBLASLt, 8192^3) %.0f TFLOP/s\n\n", prop.name, peak / 1e12);
  std::printf("| model | adapter | B x T | step ms | tokens/s | TFLOP/s | MFU | peak GiB | loss |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  const Shape shapes[] = {
      {"smollm2-135m",
       {{"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 49152}, {"hidden_size", 576},
        {"intermediate_size", 1536}, {"num_hidden_layers", 30}, {"num_attention_heads", 9},
        {"num_key_value_heads", 3}, {"rms_norm_eps", 1e-5}, {"rope_theta", 100000.0}, {"tie_word_embeddings", true}},
       8, 2048},
      {"llama-1b",
       {{"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 128256}, {"hidden_size", 2048},
        {"intermediate_size", 8192}, {"num_hidden_layers", 16}, {"num_attention_heads", 32},
        {"num_key_value_heads", 8}, {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0}, {"tie_word_embeddings", true}},
       4, 2048},
  };
  try {
    for (const Shape& s : shapes)
      for (const bool lora : {false, true}) run(s, lora, steps, peak);
  } catch (const ft::Error& e) {
    std::printf("%s\n", e.what());
    return 1;
  }
  return 0;
}
