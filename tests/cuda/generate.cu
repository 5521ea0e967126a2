// KV-cache generation on the device against HF's and PEFT's greedy generate
// (the fixtures tests/infer/test_generate.cpp holds the CPU to):
// Engine<T, device::Cuda> with its caches, activations and adapters in
// device memory, the cache's row functors for attention, cuBLASLt products.
//   f32   every parity family: HF's tokens, and the logits each was chosen
//         from within 1e-4, three prompts in one batch and each alone
//   bf16  every parity family, each prompt alone: the first token's logits
//         within the bf16 parity tolerance of HF's (3e-2 of the largest);
//         how many tokens follow HF's before the first difference is shown,
//         not judged (a near tie may round either way in bf16)
//   LoRA and prompt tuning (f32): PEFT's tokens and logits, the adapted
//         prompts interleaved with the base model's in one batch
// One line per case; exits 77 (ctest: skipped) where there is no GPU.
//
//   cuda_generate [FIXTURES_DIR]   (default: the source tree's tests/fixtures)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <ft/device/cuda.cuh>
#include <ft/infer/engine_decoder.hpp>
#include <ft/infer/generate.hpp>
#include <ft/models/load.hpp>

#include "support/gpu_check.hpp"
#include "support/generate_fixtures.hpp"

namespace {

using ft::index_t;
using Cuda = ft::device::Cuda;
namespace fs = std::filesystem;
using ft::testing::GenerateCase;

const char* const families[] = {"llama_gqa",    "llama3_rope_scaling", "mistral_sliding", "qwen2_bias",
                                "smollm2_tied", "neox_parallel",       "neox_sequential", "qwen3_qk_norm",
                                "granite_multipliers", "phi3_fused",      "phi3_longrope",
                                "phi3_longrope_long",
                                "gpt_bigcode_mqa",     "gpt_bigcode_mha",     "bloom_alibi",
                                "bloom_six_heads",     "gemma_geglu",      "gemma2_softcap",
                             "gemma3_local_global", "gemma3_vision_text", "mixtral_top2",
                             "qwen2_moe_shared", "qwen3_moe_sparse_step", "granite_moe_top2", "granite_moe_shared"};

double worst_difference(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
  return worst;
}

// Greedy requests for the cases' prompts, each as long as HF's answer; keep_logits on.
std::vector<ft::infer::Request> requests_for(const std::vector<GenerateCase>& cases) {
  std::vector<ft::infer::Request> out;
  for (const GenerateCase& c : cases) {
    out.push_back(ft::testing::greedy_request(c.prompt, index_t(c.tokens.size())));
    out.back().keep_logits = true;
  }
  return out;
}

// Tokens equal and logits within 1e-4 for every completion; the worst difference into `worst`.
bool matches(const std::vector<ft::infer::Completion>& got, const std::vector<GenerateCase>& want, double& worst) {
  bool ok = got.size() == want.size();
  for (std::size_t i = 0; ok && i < want.size(); ++i) {
    worst = std::max(worst, worst_difference(got[i].step_logits, want[i].logits));
    ok = got[i].tokens == want[i].tokens;
  }
  return ok && worst <= 1e-4;
}

bool check_f32(const fs::path& parity, const char* name) {
  const std::vector<GenerateCase> cases = ft::testing::read_generate_cases((parity / name).string());
  auto model = ft::models::load_pretrained<float, Cuda>(parity / name);
  ft::infer::Engine<float, Cuda> engine(*model);
  double worst = 0;
  bool ok = true;
  for (const index_t slots : {index_t(3), index_t(1)}) {
    ft::infer::EngineDecoder<float, Cuda> decoder(engine, 64, slots);
    ok = matches(ft::infer::generate(decoder, requests_for(cases)), cases, worst) && ok;
  }
  std::printf("| %-20s | f32  | HF's tokens, batched and alone | logits within %.1e | %s |\n", name, worst,
              ok ? "ok" : "FAILED");
  return ok;
}

bool check_bf16(const fs::path& parity, const char* name) {
  const std::vector<GenerateCase> cases = ft::testing::read_generate_cases((parity / name).string());
  auto model = ft::models::load_pretrained<ft::bf16, Cuda>(parity / name);
  ft::infer::Engine<ft::bf16, Cuda> engine(*model);
  ft::infer::EngineDecoder<ft::bf16, Cuda> decoder(engine, 64, 1);
  const auto got = ft::infer::generate(decoder, requests_for(cases));
  const auto V = std::size_t(model->config().vocab_size);
  double relative = 0;
  std::size_t followed = 0, total = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (got[i].step_logits.size() < V || cases[i].logits.size() < V) {
      std::printf("| %-20s | bf16 | no logits for prompt %zu | | FAILED |\n", name, i);
      return false;
    }
    const std::vector<float> first(got[i].step_logits.begin(), got[i].step_logits.begin() + std::ptrdiff_t(V));
    const std::vector<float> hf(cases[i].logits.begin(), cases[i].logits.begin() + std::ptrdiff_t(V));
    double scale = 0;
    for (const float x : hf) scale = std::max(scale, double(std::abs(x)));
    relative = std::max(relative, worst_difference(first, hf) / scale);
    const auto& a = got[i].tokens;
    const auto& b = cases[i].tokens;
    followed += std::size_t(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
    total += b.size();
  }
  const bool ok = relative <= 3e-2;
  std::printf("| %-20s | bf16 | %zu of %zu tokens as HF's | first logits within %.1e of the largest | %s |\n", name,
              followed, total, relative, ok ? "ok" : "FAILED");
  return ok;
}

bool check_adapter(const fs::path& fixtures, const char* adapter, const char* base) {
  const fs::path peft = fixtures / "peft/generate", parity = fixtures / "parity";
  const std::vector<GenerateCase> adapted = ft::testing::read_generate_cases((peft / adapter).string()),
                                  plain = ft::testing::read_generate_cases((parity / base).string());
  auto model = ft::models::load_pretrained<float, Cuda>(parity / base);
  ft::infer::Engine<float, Cuda> engine(*model);
  const int index = engine.load_adapter(peft / adapter);
  std::vector<ft::infer::Request> requests;
  const auto with = requests_for(adapted), without = requests_for(plain);
  for (std::size_t i = 0; i < with.size(); ++i) {
    requests.push_back(with[i]);
    requests.back().adapter = index;
    requests.push_back(without[i]);
  }
  ft::infer::EngineDecoder<float, Cuda> decoder(engine, 64, index_t(requests.size()));
  const auto got = ft::infer::generate(decoder, std::move(requests));
  std::vector<ft::infer::Completion> got_with, got_without;
  for (std::size_t i = 0; i < got.size(); ++i) (i % 2 == 0 ? got_with : got_without).push_back(got[i]);
  double worst = 0;
  const bool ok = matches(got_with, adapted, worst) && matches(got_without, plain, worst);
  std::printf("| %-20s | f32  | PEFT's tokens, mixed with the base model's | logits within %.1e | %s |\n", adapter,
              worst, ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  ft::testing::skip_without_gpu();
  const fs::path fixtures = ft::testing::fixtures_dir(argc, argv);
  int failures = 0;
  try {
    std::printf("| case | type | tokens | logits | |\n|---|---|---|---|---|\n");
    for (const char* name : families) failures += check_f32(fixtures / "parity", name) ? 0 : 1;
    for (const char* name : families) failures += check_bf16(fixtures / "parity", name) ? 0 : 1;
    failures += check_adapter(fixtures, "llama_gqa_lora", "llama_gqa") ? 0 : 1;
    failures += check_adapter(fixtures, "neox_parallel_lora", "neox_parallel") ? 0 : 1;
    failures += check_adapter(fixtures, "llama_gqa_prompt", "llama_gqa") ? 0 : 1;
  } catch (const ft::Error& e) {
    std::printf("%s\n", e.what());
    return 1;
  }
  std::printf("%s\n", failures == 0 ? "generation on the device matches HF and PEFT"
                                    : "some generations on the device differ from HF or PEFT");
  return failures == 0 ? 0 : 1;
}
