// HF parity on the device: the parity fixtures (tools/make_parity_fixtures.py,
// HF in float64) run through Transformer<T, device::Cuda> (weights, every
// activation and gradient in device memory; cuBLASLt products, the
// tensor-core attention in bf16, the row functors in f32), compared with the
// same tolerances as the CPU's parity test (tests/models/test_parity.cpp):
// loss, logits and every parameter gradient. One line per fixture and type;
// exits 77 (ctest: skipped) where there is no GPU. Then LoRA on the device
// against PEFT (tests/fixtures/train/*_lora, as tests/adapters/test_lora.cpp
// checks the CPU): loss, logits and every lora_A / lora_B gradient in f32.
//
//   cuda_parity [FIXTURES_DIR]   (default: the source tree's tests/fixtures; parity/ and train/ in it)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <ft/adapters/lora.hpp>
#include <ft/adapters/lora_files.hpp>
#include <ft/device/cuda.cuh>
#include <ft/io/hf_config.hpp>
#include <ft/io/safetensors.hpp>
#include <ft/models/load.hpp>
#include <ft/tensor/scratch.hpp>

#include "support/gpu_check.hpp"
#include "support/tensors.hpp"

namespace {

using ft::index_t;
namespace fs = std::filesystem;

const char* const cases[] = {"llama_gqa",       "smollm2_tied",  "llama3_rope_scaling", "qwen2_bias",
                             "mistral_sliding", "neox_parallel", "neox_sequential",     "qwen3_qk_norm",
                             "granite_multipliers", "phi3_fused",          "phi3_longrope",
                             "phi3_longrope_long",
                             "gpt_bigcode_mqa",     "gpt_bigcode_mha",     "bloom_alibi",
                             "bloom_six_heads",     "gemma_geglu",      "gemma2_softcap",
                             "gemma3_local_global", "gemma3_vision_text", "mixtral_top2",
                             "qwen2_moe_shared", "qwen3_moe_sparse_step", "granite_moe_top2", "granite_moe_shared"};

template <class T>
std::vector<T> read(const ft::io::SafetensorsFile& file, const std::string& name) {
  return ft::testing::read_tensor<T>(file, name);
}

// max |got - want| / max |want|, as the CPU's parity test measures.
template <class A>
double relative_error(const std::vector<A>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(double(got[i]) - double(want[i]));
    diff = std::isfinite(d) ? std::max(diff, d) : INFINITY;
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

struct Tolerance {
  double loss, logits, gradient;
};

template <class T>
bool check_case(const fs::path& dir, const char* name, Tolerance tol) {
  auto expected = ft::io::SafetensorsFile::open(dir / name / "expected.safetensors");
  auto model = ft::models::load_pretrained<T, ft::device::Cuda>(dir / name);
  const ft::io::TensorView& ids_view = expected.at("input_ids");
  const index_t B = ids_view.shape[0], T_ = ids_view.shape[1], V = model->config().vocab_size;
  auto ids = read<std::int64_t>(expected, "input_ids");
  auto labels = read<std::int64_t>(expected, "labels");
  ft::models::Batch batch = ft::models::causal_lm_batch(B, T_, std::vector<std::int32_t>(ids.begin(), ids.end()),
                                                        std::vector<std::int32_t>(labels.begin(), labels.end()));
  ft::memory::Scratch<T, ft::memory::CudaDevice> logits(B * T_ * V);
  model->zero_grads();
  const double count = double(batch.scored_tokens());
  const double loss = model->forward_backward(batch, {.token_count = count}, logits.data()) / count;
  std::vector<T> host_logits(std::size_t(B * T_ * V));
  ft::device::Cuda::to_host(host_logits.data(), logits.data(), host_logits.size() * sizeof(T));

  const double want_loss = read<float>(expected, "loss")[0];
  const double loss_error = std::abs(loss - want_loss) / want_loss;
  const double logits_error = relative_error(host_logits, read<float>(expected, "logits"));
  double gradient_error = 0;
  std::string worst;
  std::size_t compared = 0;
  for (const ft::io::TensorView& t : expected.tensors()) {
    if (t.name.rfind("grad.", 0) != 0) continue;
    const double e = relative_error(model->hf_gradient(t.name.substr(5)), read<float>(expected, t.name));
    if (!(e <= gradient_error)) {
      gradient_error = e;
      worst = t.name.substr(5);
    }
    ++compared;
  }
  const bool ok = loss_error <= tol.loss && logits_error <= tol.logits && gradient_error <= tol.gradient &&
                  compared == model->spec().weights.size();
  std::printf("| %-20s | %-4s | %8.1e | %8.1e | %8.1e (%s) | %zu | %s |\n", name, sizeof(T) == 4 ? "f32" : "bf16",
              loss_error, logits_error, gradient_error, worst.c_str(), compared, ok ? "ok" : "FAILED");
  return ok;
}

// LoRA on the device against PEFT: the adapter is read on the host (the
// CPU's loader) and its A and B copied to the device's adapter.
struct LoraCase {
  const char* model;
  std::vector<std::string> targets;
};

bool check_lora(const fs::path& train, const LoraCase& c) {
  using Cuda = ft::device::Cuda;
  const fs::path dir = train / c.model, fixture = train / (std::string(c.model) + "_lora");
  const ft::adapters::LoraOptions options{
      .r = 4, .alpha = 8, .target_modules = c.targets, .target_parameters = {}, .seed = 7};
  ft::models::Transformer<float> host_model(ft::models::read_model_spec(dir), false);
  ft::adapters::LoraModel<float> host_lora(host_model, options);
  ft::adapters::load_peft_adapter(host_lora, host_model.config(), fixture / "adapter");

  ft::models::Transformer<float, Cuda> model(ft::models::read_model_spec(dir), false);
  model.load(ft::io::ModelWeights::open(dir));
  ft::adapters::LoraModel<float, Cuda> lora(model, options);
  for (std::size_t i = 0; i < lora.blocks().size(); ++i) {
    auto& from = host_lora.blocks()[i]->parameters().values();
    Cuda::from_host(lora.blocks()[i]->parameters().values().data(), from.data(), std::size_t(from.numel()) * 4);
  }

  const nlohmann::json j = ft::io::read_json_file(fixture / "batch.json");
  std::vector<std::int32_t> ids, labels;
  for (const auto& row : j["input_ids"])
    for (const auto& v : row) ids.push_back(v.get<std::int32_t>());
  for (const auto& row : j["labels"])
    for (const auto& v : row) labels.push_back(v.get<std::int32_t>());
  const index_t B = index_t(j["input_ids"].size()), V = model.config().vocab_size;
  const ft::models::Batch batch = ft::models::causal_lm_batch(B, index_t(ids.size()) / B, ids, labels);
  ft::memory::Scratch<float, ft::memory::CudaDevice> logits(batch.rows() * V);
  const double count = double(batch.scored_tokens());
  const double loss = model.forward_backward(batch, {.token_count = count}, logits.data()) / count;
  std::vector<float> host_logits(std::size_t(batch.rows() * V));
  Cuda::to_host(host_logits.data(), logits.data(), host_logits.size() * 4);

  auto expected = ft::io::SafetensorsFile::open(fixture / "expected.safetensors");
  const double loss_error = std::abs(loss - read<float>(expected, "loss")[0]) / read<float>(expected, "loss")[0];
  const double logits_error = relative_error(host_logits, read<float>(expected, "logits"));
  double gradient_error = 0;
  std::size_t compared = 0;
  for (auto& block : lora.blocks()) {
    auto& grads = block->parameters().grads();
    std::vector<float> g(std::size_t(grads.numel()));
    Cuda::to_host(g.data(), grads.data(), g.size() * 4);
    for (std::size_t k = 0; k < block->targets().size(); ++k) {
      const ft::adapters::LoraTarget& t = block->targets()[k];
      const std::string prefix = "grad.base_model.model." + t.module;
      const float* da = g.data() + (block->da_of(k) - grads.data());
      const float* db = g.data() + (block->db_of(k) - grads.data());
      const index_t r = options.r;
      std::vector<float> b_hf(std::size_t(t.rows * r));  // B's rows in HF's order
      for (index_t row = 0; row < t.rows; ++row)
        for (index_t c2 = 0; c2 < r; ++c2)
          b_hf[std::size_t(ft::models::hf_row(t.order, row, t.rows, model.config().num_heads) * r + c2)] =
              db[row * r + c2];
      gradient_error = std::max({gradient_error,
                                 relative_error(std::vector<float>(da, da + r * t.in),
                                                read<float>(expected, prefix + ".lora_A.weight")),
                                 relative_error(b_hf, read<float>(expected, prefix + ".lora_B.weight"))});
      compared += 2;
    }
  }
  const bool ok = loss_error <= 1e-5 && logits_error <= 1e-5 && gradient_error <= 1e-4 &&
                  compared == expected.tensors().size() - 2;
  std::printf("| %-20s | f32  | %8.1e | %8.1e | %8.1e (LoRA A, B) | %zu | %s |\n", c.model, loss_error, logits_error,
              gradient_error, compared, ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  ft::testing::skip_without_gpu();
  const fs::path fixtures = ft::testing::fixtures_dir(argc, argv);
  const fs::path dir = fixtures / "parity";
  int failures = 0;
  try {
    std::printf("| fixture | type | loss | logits | worst gradient | tensors | |\n|---|---|---|---|---|---|---|\n");
    // The CPU parity test's tolerances (tests/models/test_parity.cpp).
    for (const char* name : cases) failures += check_case<float>(dir, name, {1e-5, 1e-5, 1e-4}) ? 0 : 1;
    for (const char* name : cases) failures += check_case<ft::bf16>(dir, name, {2e-3, 3e-2, 6e-2}) ? 0 : 1;
    // The CPU LoRA test's cases and tolerances (tests/adapters/test_lora.cpp).
    const LoraCase lora_cases[] = {
        {"tiny_llama", {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}},
        {"tiny_neox", {"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"}}};
    for (const LoraCase& c : lora_cases) failures += check_lora(fixtures / "train", c) ? 0 : 1;
  } catch (const ft::Error& e) {
    std::printf("%s\n", e.what());
    return 1;
  }
  std::printf("%s\n", failures == 0 ? "every fixture matches HF and PEFT on the device" : "some fixtures differ from HF or PEFT");
  return failures == 0 ? 0 : 1;
}
