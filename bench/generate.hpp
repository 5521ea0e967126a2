#pragma once
// Inference speed of the KV-cache engine (include/ft/infer/) on a model
// directory: prefill tokens/s (a whole prompt in one step), decode tokens/s
// (one new token per sequence per step) at batch 1 and batch 16, time to the
// first token of one request, and the key/value cache bytes each concurrent
// request holds. HF transformers' figures on the same machine and threads:
// tools/bench_hf_generate.py.
//
// Decode is read against two limits: at small batches a step streams every
// weight from memory once, whatever the batch; at large ones the matrix
// products are bound by arithmetic. "x batch 1" is the speed-up over one
// sequence, "GEMM GFLOP/s" the rate of the weight products alone (2 flops per
// weight per sequence) over the whole step, to hold against
// bench_kernels' peak/openblas_sgemm.
//
// The same figures on any device: bench_generate runs this on the CPU,
// bench_cuda_generate (bench/cuda/generate.cu) on a GPU; a step's time
// includes bringing its logits to the host, where sampling runs.
//
//   build/release/bin/bench_generate MODEL_DIR [--prompt 128] [--decode 64] [--batches 1,16] [--dtype float32|bfloat16]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ft/infer/engine.hpp>
#include <ft/models/load.hpp>

namespace ft::bench {

using ft::index_t;
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Figures {
  double prefill_seconds, decode_seconds;
};

// One prefill of `batch` prompts of `prompt` tokens, then `decode` steps of one token each.
template <ft::element T, class Device>
Figures run(ft::infer::Engine<T, Device>& engine, const ft::models::TransformerConfig& c, index_t batch, index_t prompt,
            index_t decode) {
  ft::infer::KvPool<T, Device> pool(c, prompt + decode, batch);
  std::vector<ft::infer::KvCache<T, Device>*> caches;
  for (index_t b = 0; b < batch; ++b) caches.push_back(&pool.cache(pool.acquire()));
  auto tokens = std::vector<std::vector<std::int32_t>>(std::size_t(batch));
  for (index_t b = 0; b < batch; ++b)
    for (index_t i = 0; i < prompt; ++i) tokens[std::size_t(b)].push_back(std::int32_t((b * 7919 + i * 31) % c.vocab_size));
  std::vector<float> logits(std::size_t(batch * c.vocab_size));
  auto step = [&] {
    std::vector<ft::infer::SequenceStep<T, Device>> steps;
    for (index_t b = 0; b < batch; ++b) steps.push_back({caches[std::size_t(b)], tokens[std::size_t(b)]});
    engine.step(steps, logits.data());
    for (index_t b = 0; b < batch; ++b) {  // greedy: the next token is the argmax
      const float* row = logits.data() + b * c.vocab_size;
      tokens[std::size_t(b)].assign(1, std::int32_t(std::max_element(row, row + c.vocab_size) - row));
    }
  };
  const auto t0 = Clock::now();
  step();
  const double prefill = seconds_since(t0);
  const auto t1 = Clock::now();
  for (index_t i = 0; i < decode; ++i) step();
  return {prefill, seconds_since(t1)};
}

// Flops of the weight products for one token: every linear layer and the LM head.
inline double weight_flops_per_token(const ft::models::TransformerConfig& c) {
  const double C = double(c.hidden_size);
  const double layer = C * double(c.qkv_width()) + double(c.num_heads * c.head_dim) * C +
                       C * double(c.mlp_in_width()) + double(c.intermediate_size) * C;
  return 2.0 * (double(c.num_layers) * layer + C * double(c.vocab_size));
}

template <ft::element T, class Device>
int bench(const std::string& dir, index_t prompt, index_t decode, const std::vector<index_t>& batches) {
  auto model = ft::models::load_pretrained<T, Device>(dir, /*trainable=*/false);
  const auto& c = model->config();
  ft::infer::Engine<T, Device> engine(*model);
  run(engine, c, 1, 8, 2);  // warm-up: threads, first-touch pages
  std::printf("%s: prompt %lld tokens, %lld decode steps\n", dir.c_str(), (long long)prompt, (long long)decode);
  std::printf("| batch | prefill tok/s | first token ms | decode tok/s | decode ms/step | x batch 1 | GEMM GFLOP/s |\n"
              "|---|---|---|---|---|---|---|\n");
  double one_sequence = 0;
  for (const index_t batch : batches) {
    const Figures f = run(engine, c, batch, prompt, decode);
    const double tokens_per_second = double(batch * decode) / f.decode_seconds;
    if (one_sequence == 0) one_sequence = tokens_per_second / double(batch);
    std::printf("| %lld | %.0f | %.1f | %.1f | %.2f | %.2f | %.1f |\n", (long long)batch,
                double(batch * prompt) / f.prefill_seconds, 1e3 * f.prefill_seconds, tokens_per_second,
                1e3 * f.decode_seconds / double(decode), tokens_per_second / one_sequence,
                tokens_per_second * weight_flops_per_token(c) * 1e-9);
  }
  const ft::infer::KvCache<T, Device> one(c, 2048);
  std::printf("key/value cache per request: %.1f MiB at 2048 tokens (%.1f KiB per token)\n",
              double(one.bytes()) / (1 << 20), double(one.bytes()) / 2048 / 1024);
  return 0;
}

// The whole program for one device; `name` is the executable's, for messages.
template <class Device>
int generate_main(const char* name, int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [--prompt N] [--decode N] [--batches 1,16] [--dtype float32|bfloat16]\n",
                 name);
    return 2;
  }
  index_t prompt = 128, decode = 64;
  std::string dtype = "float32";
  std::vector<index_t> batches = {1, 16};
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--prompt")) prompt = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--decode")) decode = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dtype")) dtype = argv[i + 1];
    else if (!std::strcmp(argv[i], "--batches")) {
      batches.clear();
      for (const char* p = argv[i + 1]; *p;) {
        char* end = nullptr;
        batches.push_back(std::strtoll(p, &end, 10));
        if (end == p || batches.back() < 1) {
          std::fprintf(stderr, "%s: --batches takes positive integers separated by commas\n", name);
          return 2;
        }
        p = *end == ',' ? end + 1 : end;
      }
    }
  }
  try {
    return dtype == "bfloat16" ? bench<ft::bf16, Device>(argv[1], prompt, decode, batches)
                               : bench<float, Device>(argv[1], prompt, decode, batches);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace ft::bench
