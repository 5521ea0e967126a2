// KV-cache inference against HF Transformers' greedy generate on the parity
// models (tools/make_generate_fixtures.py): the same tokens, and the logits
// each token was chosen from within 1e-4 of HF's, with the three prompts of
// a case running together in one batch and each alone; with PEFT adapters
// applied per sequence against PEFT's generate
// (tools/make_adapter_generate_fixtures.py). Both on the CPU and on the CPU
// standing in for a device (the engine's device path: everything in the
// device's memory, the cache's row functors).
#include <doctest/doctest.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include <ft/core/random.hpp>
#include <ft/infer/engine_decoder.hpp>
#include <ft/infer/generate.hpp>
#include <ft/infer/service.hpp>
#include <ft/infer/text_stream.hpp>
#include <ft/io/safetensors.hpp>
#include <ft/models/load.hpp>
#include <ft/text/tokenizer.hpp>

#include "support/compare.hpp"
#include "support/cpu_as_device.hpp"
#include "support/generate_fixtures.hpp"

namespace test_generate {

using namespace ft;

namespace {

const std::string parity = std::string(FT_SOURCE_DIR) + "/tests/fixtures/parity/";

using Expected = testing::GenerateCase;

std::vector<Expected> expected(const std::string& dir) { return testing::read_generate_cases(dir); }

// The logits each token was chosen from, against HF's, within 1e-4.
void check_logits(const std::vector<float>& got, const std::vector<float>& hf) {
  REQUIRE(got.size() == hf.size());
  double worst = 0;
  for (std::size_t k = 0; k < got.size(); ++k) worst = std::max(worst, double(std::abs(got[k] - hf[k])));
  CHECK(worst < 1e-4);
}

infer::Request greedy(const std::vector<std::int32_t>& prompt, index_t max_tokens) {
  return testing::greedy_request(prompt, max_tokens);
}

}  // namespace

namespace {

template <class Device>
void check_greedy_against_hf() {
  for (const std::string name : {"llama_gqa", "llama3_rope_scaling", "mistral_sliding", "qwen2_bias", "smollm2_tied",
                                 "neox_parallel", "neox_sequential", "qwen3_qk_norm", "granite_multipliers",
                                 "phi3_fused", "phi3_longrope", "phi3_longrope_long", "gpt_bigcode_mqa", "gpt_bigcode_mha",
                                 "bloom_alibi", "bloom_six_heads", "gemma_geglu", "gemma2_softcap",
                                 "gemma3_local_global", "gemma3_vision_text", "mixtral_top2", "qwen2_moe_shared",
                                 "qwen3_moe_sparse_step", "granite_moe_top2", "granite_moe_shared"}) {
    CAPTURE(name);
    const std::vector<Expected> cases = expected(parity + name);
    REQUIRE(cases.size() == 3);
    auto model = models::load_pretrained<float, Device>(parity + name, /*trainable=*/false);
    for (index_t s = -1; s <= model->config().num_layers; ++s)  // inference keeps no gradient buffers
      CHECK(model->stage_parameters(s).grads().data() == nullptr);
    infer::Engine<float, Device> engine(*model);
    const index_t V = model->config().vocab_size;
    std::vector<infer::Request> requests;
    for (const Expected& e : cases) requests.push_back(greedy(e.prompt, index_t(e.tokens.size())));
    for (const index_t slots : {3, 1}) {  // all three in one batch; one at a time
      CAPTURE(slots);
      infer::EngineDecoder<float, Device> decoder(engine, 64, slots);
      const std::vector<infer::Completion> got = infer::generate(decoder, requests, true);
      for (std::size_t i = 0; i < cases.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].tokens == cases[i].tokens);
        CHECK(got[i].finish_reason == "length");
        check_logits(got[i].step_logits, cases[i].logits);
        CHECK(got[i].step_logits.size() == cases[i].tokens.size() * std::size_t(V));
      }
      CHECK(decoder.free_slots() == slots);
    }
  }
}

}  // namespace

TEST_CASE("greedy generation with a KV cache matches HF generate token for token, batched and alone") {
  check_greedy_against_hf<device::Cpu>();
}

TEST_CASE("on a device, greedy generation matches HF generate token for token, batched and alone") {
  const std::size_t before = testing::CpuAsDeviceMemory::stats().current();
  check_greedy_against_hf<testing::CpuAsDevice>();
  // What the models, engines and caches held was the device's, and is given back.
  CHECK(testing::CpuAsDeviceMemory::stats().current() == before);
}

namespace {

// The lanes of a GPU warp as threads: each runs the row functor for its
// rank, and a team sum meets at a barrier, every lane adding the lanes'
// values in the same order (as the warp's shuffles give every lane one
// result). So a row functor's lane striding and sums run here as on a GPU.
template <int Lanes>
struct ThreadTeam {
  struct Meeting {
    std::barrier<> barrier{Lanes};
    double values[Lanes];
  };
  static constexpr std::int64_t size = Lanes;
  std::int64_t rank;
  Meeting* meeting;

  template <class A>
  A sum(A x) const {
    meeting->values[rank] = double(x);
    meeting->barrier.arrive_and_wait();
    A total = 0;
    for (int lane = 0; lane < Lanes; ++lane) total += A(meeting->values[lane]);
    meeting->barrier.arrive_and_wait();  // every lane has read before the next sum writes
    return total;
  }
};

// A device whose row functors run as warps of threads (the rest is the CPU's).
struct WarpsOfThreads : device::Cpu {
  template <class F>
  static void parallel_rows(index_t n, index_t, const F& f) {
    constexpr int lanes = 32;
    for (index_t row = 0; row < n; ++row) {
      typename ThreadTeam<lanes>::Meeting meeting;
      std::vector<std::thread> threads;
      for (int rank = 0; rank < lanes; ++rank)
        threads.emplace_back([&, rank] { f(row, ThreadTeam<lanes>{rank, &meeting}); });
      for (std::thread& t : threads) t.join();
    }
  }
};

// The cache's row functors (a device's path) against the CPU's stacked
// products, on random rows: three sequences with different cached lengths
// and numbers of new rows, grouped-query heads, with and without a window.
template <class Device, class T>
void check_cache_rows(index_t D, index_t window, index_t splits, double tolerance) {
  using infer::cache_rows::CacheRow;
  const infer::CachedAttentionShape s{4, 2, D, window};
  const index_t width = s.G * s.D, stride = (s.H + 2 * s.G) * s.D, capacity = 40, layers = 2, layer = 1;
  struct Sequence {
    index_t cached, n;
  };
  const std::vector<Sequence> sequences{{0, 7}, {9, 1}, {30, 3}};
  Rng rng(derive_key(7, std::uint64_t(D * 100 + window)));
  auto random = [&](std::size_t n) {
    std::vector<T> v(n);
    for (T& x : v) x = T(float(rng.normal()));
    return v;
  };
  std::vector<std::vector<T>> keys, values;
  std::vector<std::int32_t> positions;
  std::vector<CacheRow<T>> rows;
  for (const Sequence& q : sequences) {  // earlier positions hold what earlier steps cached
    keys.push_back(random(std::size_t(layers * capacity * width)));
    values.push_back(random(std::size_t(layers * capacity * width)));
    for (index_t i = 0; i < q.n; ++i) {
      positions.push_back(std::int32_t(q.cached + i));
      rows.push_back({keys.back().data(), values.back().data(), capacity * width});
    }
  }
  const index_t N = index_t(positions.size());
  const std::vector<T> qkv = random(std::size_t(N * stride));
  std::vector<std::vector<T>> cpu_keys = keys, cpu_values = values;

  infer::append_to_cache<Device>(qkv.data(), rows.data(), positions.data(), N, layer, s);
  std::vector<T> by_rows(std::size_t(N * s.H * s.D));
  // The keys cut into `splits` chunks (the last ones empty for the shorter rows).
  const index_t longest = infer::longest_keys(positions, s.window);
  const index_t chunk = (longest + splits - 1) / splits;
  const infer::cache_rows::KeySplit split{splits, splits == 1 ? longest : chunk};
  std::vector<acc_t<T>> partials(infer::attention_partials(N, s, split), acc_t<T>(std::nan("")));
  infer::cached_attention_rows<Device>(by_rows.data(), qkv.data(), rows.data(), positions.data(), N, layer, s, split,
                                       partials.data());

  std::vector<infer::CachedSequence<T>> work;
  std::vector<T> by_products(by_rows.size());
  index_t r0 = 0;
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Sequence& q = sequences[i];
    T* k = cpu_keys[i].data() + layer * capacity * width;
    T* v = cpu_values[i].data() + layer * capacity * width;
    for (index_t r = 0; r < q.n; ++r) {
      std::copy_n(qkv.data() + (r0 + r) * stride + s.H * s.D, width, k + (q.cached + r) * width);
      std::copy_n(qkv.data() + (r0 + r) * stride + s.H * s.D + width, width, v + (q.cached + r) * width);
    }
    work.push_back({by_products.data() + r0 * s.H * s.D, qkv.data() + r0 * stride, positions.data() + r0, q.n, k, v});
    r0 += q.n;
  }
  infer::cached_attention<T>(work, s);

  // The append wrote each new key and value where the CPU's copies did, and nothing else.
  CHECK(keys == cpu_keys);
  CHECK(values == cpu_values);
  double worst = 0;
  for (std::size_t i = 0; i < by_rows.size(); ++i)
    worst = std::max(worst, std::abs(double(by_rows[i]) - double(by_products[i])));
  CAPTURE(worst);
  CHECK(worst <= tolerance);
}

}  // namespace

TEST_CASE("attention over a key/value cache: the device's row functors agree with the CPU's products") {
  for (const index_t window : {0, 5}) {
    CAPTURE(window);
    for (const index_t D : {16, 40}) {  // a warp's lanes beyond D (16), and lanes that own one more dimension (40)
      CAPTURE(D);
      // One split; three (a chunk of 11 keys, or 2 with the window); eight (5 keys, and empty chunks with the window).
      for (const index_t splits : {1, 3, 8}) {
        CAPTURE(splits);
        // bf16 outputs are rounded from nearly equal sums: at most one unit in the last place of values below 4.
        check_cache_rows<device::Cpu, float>(D, window, splits, 1e-5);
        check_cache_rows<device::Cpu, double>(D, window, splits, 1e-12);
        check_cache_rows<device::Cpu, bf16>(D, window, splits, 1.0 / 32);
        check_cache_rows<WarpsOfThreads, float>(D, window, splits, 1e-5);
        check_cache_rows<WarpsOfThreads, bf16>(D, window, splits, 1.0 / 32);
      }
    }
  }
  std::vector<float> none;
  CHECK_THROWS_WITH_AS(infer::cached_attention_rows<device::Cpu>(none.data(), none.data(),
                                                                 static_cast<const infer::cache_rows::CacheRow<float>*>(nullptr),
                                                                 static_cast<const std::int32_t*>(nullptr), 0, 0,
                                                                 infer::CachedAttentionShape{2, 1, 512, 0},
                                                                 infer::cache_rows::KeySplit{}, nullptr),
                       doctest::Contains("head dimensions up to 256, the model has 512"), Error);
}

TEST_CASE("attention over a key/value cache splits a decode step's keys and leaves a prefill whole") {
  using infer::cache_rows::split_keys;
  // One sequence decoding 130 cached keys over 9 heads: 8 chunks of 17 keys.
  CHECK(split_keys(1, 9, 130).splits == 8);
  CHECK(split_keys(1, 9, 130).chunk == 17);
  // Sixteen sequences over 32 heads already make 512 teams: two splits.
  CHECK(split_keys(16, 32, 2048).splits == 2);
  CHECK(split_keys(16, 32, 2048).chunk == 1024);
  // A 128-token prefill, and a row of fewer than 32 keys: whole.
  CHECK(split_keys(128, 9, 128).splits == 1);
  CHECK(split_keys(128, 9, 128).chunk == 128);
  CHECK(split_keys(1, 32, 31).splits == 1);
  // Every key is in a chunk.
  for (const index_t longest : {1, 16, 17, 100, 4096})
    for (const index_t rows : {1, 2, 40}) {
      const auto split = split_keys(rows, 8, longest);
      CHECK(split.splits * split.chunk >= longest);
      CHECK((split.splits - 1) * split.chunk < longest);
    }
  CHECK(infer::longest_keys(std::vector<std::int32_t>{3, 40, 7}, 0) == 41);
  CHECK(infer::longest_keys(std::vector<std::int32_t>{3, 40, 7}, 5) == 5);
}

TEST_CASE("a sequence's logits are the same bit for bit alone and batched with others") {
  for (const std::string name : {"llama_gqa", "neox_parallel"}) {
    CAPTURE(name);
    const std::vector<Expected> cases = expected(parity + name);
    auto model = models::load_pretrained<float>(parity + name);
    infer::Engine<float> engine(*model);
    std::vector<infer::Request> requests;
    for (const Expected& e : cases) requests.push_back(greedy(e.prompt, index_t(e.tokens.size())));
    infer::EngineDecoder<float> one(engine, 64, 1), three(engine, 64, 3);
    const auto alone = infer::generate(one, requests, true);
    const auto together = infer::generate(three, requests, true);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      CAPTURE(i);
      CHECK(alone[i].step_logits == together[i].step_logits);
    }
  }
  // bf16 weights and activations take their own product code: invariant too.
  const std::vector<Expected> cases = expected(parity + "llama_gqa");
  auto model = models::load_pretrained<bf16>(parity + "llama_gqa");
  infer::Engine<bf16> engine(*model);
  std::vector<infer::Request> requests;
  for (const Expected& e : cases) requests.push_back(greedy(e.prompt, 8));
  infer::EngineDecoder<bf16> one(engine, 64, 1), three(engine, 64, 3);
  const auto alone = infer::generate(one, requests, true);
  const auto together = infer::generate(three, requests, true);
  for (std::size_t i = 0; i < cases.size(); ++i) CHECK(alone[i].step_logits == together[i].step_logits);
}

TEST_CASE("generation stops at a stop token, when on_token says so and at max_tokens, and refuses what does not fit") {
  auto model = models::load_pretrained<float>(parity + "llama_gqa");
  infer::Engine<float> engine(*model);
  const Expected e = expected(parity + "llama_gqa")[1];
  infer::EngineDecoder<float> decoder(engine, 64, 2);
  infer::Request by_token = greedy(e.prompt, 24), by_callback = greedy(e.prompt, 24), short_one = greedy(e.prompt, 3);
  by_token.stop_tokens = {e.tokens[5]};
  int seen = 0;
  by_callback.on_token = [&seen](const infer::Generated&) { return ++seen == 4; };
  const auto got = infer::generate(decoder, {by_token, by_callback, short_one});
  // The first occurrence of the stop token ends the output, without it.
  const auto first = std::find(e.tokens.begin(), e.tokens.end(), e.tokens[5]) - e.tokens.begin();
  CHECK(got[0].tokens == std::vector<std::int32_t>(e.tokens.begin(), e.tokens.begin() + first));
  CHECK(got[0].finish_reason == "stop");
  CHECK(got[1].tokens == std::vector<std::int32_t>(e.tokens.begin(), e.tokens.begin() + 4));
  CHECK(got[1].finish_reason == "stop");
  CHECK(got[2].tokens == std::vector<std::int32_t>(e.tokens.begin(), e.tokens.begin() + 3));
  CHECK(got[2].finish_reason == "length");
  CHECK_THROWS_WITH_AS(infer::generate(decoder, {greedy(e.prompt, 60)}),
                       doctest::Contains("exceeds max_model_len = 64"), Error);
}

namespace {

// Checks completions against a fixture's tokens and logits (1e-4).
void check_completions(const std::vector<infer::Completion>& got, const std::vector<Expected>& cases) {
  REQUIRE(got.size() == cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].tokens == cases[i].tokens);
    check_logits(got[i].step_logits, cases[i].logits);
  }
}

template <class Device>
void check_adapters_against_peft() {
  const std::string peft = std::string(FT_SOURCE_DIR) + "/tests/fixtures/peft/generate/";
  struct Case {
    const char* adapter;
    const char* base;
  };
  for (const Case c : {Case{"llama_gqa_lora", "llama_gqa"}, Case{"neox_parallel_lora", "neox_parallel"},
                       Case{"llama_gqa_prompt", "llama_gqa"}, Case{"qwen3_qk_norm_lora", "qwen3_qk_norm"},
                       Case{"granite_multipliers_prompt", "granite_multipliers"},
                       Case{"phi3_fused_lora", "phi3_fused"}, Case{"gpt_bigcode_mha_lora", "gpt_bigcode_mha"},
                       Case{"bloom_alibi_prompt", "bloom_alibi"}, Case{"bloom_six_heads_lora", "bloom_six_heads"},
                       Case{"gemma_geglu_lora", "gemma_geglu"}, Case{"gemma_geglu_prompt", "gemma_geglu"}, Case{"gpt_bigcode_mqa_prompt", "gpt_bigcode_mqa"},
                       Case{"gemma2_softcap_lora", "gemma2_softcap"},
                       Case{"gemma3_local_global_lora", "gemma3_local_global"}}) {
    CAPTURE(c.adapter);
    const std::vector<Expected> adapted = expected(peft + c.adapter), base = expected(parity + c.base);
    auto model = models::load_pretrained<float, Device>(parity + c.base);
    infer::Engine<float, Device> engine(*model);
    const int adapter = engine.load_adapter(peft + c.adapter);
    // The adapter's prompts and the base model's prompts interleaved in one batch.
    std::vector<infer::Request> requests;
    for (std::size_t i = 0; i < adapted.size(); ++i) {
      requests.push_back(greedy(adapted[i].prompt, index_t(adapted[i].tokens.size())));
      requests.back().adapter = adapter;
      requests.push_back(greedy(base[i].prompt, index_t(base[i].tokens.size())));
    }
    infer::EngineDecoder<float, Device> decoder(engine, 64, 6);
    const auto got = infer::generate(decoder, requests, true);
    std::vector<infer::Completion> with, without;
    for (std::size_t i = 0; i < got.size(); ++i) (i % 2 == 0 ? with : without).push_back(got[i]);
    check_completions(with, adapted);
    check_completions(without, base);
  }
}

}  // namespace

TEST_CASE("adapters apply per sequence without merging: LoRA and prompt tuning match PEFT's generate, mixed in one batch") {
  check_adapters_against_peft<device::Cpu>();
}

TEST_CASE("on a device, adapters apply per sequence: LoRA and prompt tuning match PEFT's generate, mixed in one batch") {
  check_adapters_against_peft<testing::CpuAsDevice>();
}

TEST_CASE("an adapter that cannot be applied per request is refused in one line") {
  auto model = models::load_pretrained<float>(parity + "llama_gqa");
  infer::Engine<float> engine(*model);
  // This PEFT fixture adapts embed_tokens too: a change every request would share.
  CHECK_THROWS_WITH_AS(engine.load_adapter(std::string(FT_SOURCE_DIR) + "/tests/fixtures/peft/llama_gqa_rslora"),
                       doctest::Contains("merge it into the model"), Error);
  CHECK_THROWS_WITH_AS(engine.load_adapter(parity + "llama_gqa"), doctest::Contains("not a PEFT adapter directory"),
                       Error);
}

TEST_CASE("a cancelled request leaves the batch and frees its slot; the others go on unchanged") {
  auto model = models::load_pretrained<float>(parity + "llama_gqa");
  infer::Engine<float> engine(*model);
  const std::vector<Expected> cases = expected(parity + "llama_gqa");
  infer::EngineDecoder<float> decoder(engine, 64, 2);
  infer::Batcher batcher(decoder);
  std::vector<infer::Completion> done(3);
  bool cancel = false;
  for (std::size_t i = 0; i < 3; ++i) {
    infer::Request r = greedy(cases[i].prompt, index_t(cases[i].tokens.size()));
    if (i == 0) r.cancelled = [&cancel] { return cancel; };
    r.on_done = [&done, i](infer::Completion&& c) { done[i] = std::move(c); };
    batcher.add(std::move(r));
  }
  batcher.step();
  CHECK(batcher.running() == 2);
  CHECK(batcher.waiting() == 1);
  cancel = true;  // the third request takes the first one's slot at the next step
  batcher.step();
  CHECK(batcher.running() == 2);
  CHECK(batcher.waiting() == 0);
  while (!batcher.idle()) batcher.step();
  CHECK(done[0].finish_reason == "cancelled");
  CHECK(done[0].tokens.size() == 1);
  CHECK(done[1].tokens == cases[1].tokens);
  CHECK(done[2].tokens == cases[2].tokens);
  CHECK(decoder.free_slots() == 2);
}

TEST_CASE("a callback that throws mid-step leaves every request running or ended once, and no slot held twice") {
  auto model = models::load_pretrained<float>(parity + "llama_gqa");
  infer::Engine<float> engine(*model);
  const std::vector<Expected> cases = expected(parity + "llama_gqa");
  infer::EngineDecoder<float> decoder(engine, 64, 3);
  std::vector<int> done(3, 0);
  {
    infer::Batcher batcher(decoder);
    for (std::size_t i = 0; i < 3; ++i) {
      infer::Request r = greedy(cases[i].prompt, i == 0 ? 1 : 8);  // the first ends at the step that throws
      if (i == 1) r.on_token = [](const infer::Generated&) -> bool { throw std::runtime_error("client gone"); };
      r.on_done = [&done, i](infer::Completion&&) { ++done[i]; };
      batcher.add(std::move(r));
    }
    CHECK_THROWS_WITH_AS(batcher.step(), "client gone", std::runtime_error);
    CHECK(done == std::vector<int>{1, 0, 0});
    CHECK(decoder.free_slots() == 1);
    batcher.cancel_all();  // what a server does when a step fails
    CHECK(done == std::vector<int>{1, 1, 1});
    CHECK(decoder.free_slots() == 3);
    // A batcher dropped with requests running gives their slots back.
    batcher.add(greedy(cases[0].prompt, 8));
    batcher.step();
    CHECK(decoder.free_slots() == 2);
  }
  CHECK(decoder.free_slots() == 3);
  CHECK_THROWS_WITH_AS(decoder.release(0), doctest::Contains("released but not held"), Error);
}

TEST_CASE("a prompt fed in chunks gives HF's tokens, while the running sequences get a token every step") {
  auto model = models::load_pretrained<float>(parity + "llama_gqa");
  infer::Engine<float> engine(*model);
  const std::vector<Expected> cases = expected(parity + "llama_gqa");
  constexpr index_t chunk = 3;
  const auto steps_to_first_token = [&](std::size_t i) { return (index_t(cases[i].prompt.size()) + chunk - 1) / chunk; };
  REQUIRE(steps_to_first_token(1) > 1);
  infer::EngineDecoder<float> decoder(engine, 64, 2);
  infer::Batcher batcher(decoder, chunk);
  std::vector<infer::Completion> done(2);
  std::vector<index_t> received(2, 0);
  auto add = [&](std::size_t i) {
    infer::Request r = greedy(cases[i].prompt, index_t(cases[i].tokens.size()));
    r.keep_logits = true;
    r.on_token = [&received, i](const infer::Generated&) { return ++received[i], false; };
    r.on_done = [&done, i](infer::Completion&& c) { done[i] = std::move(c); };
    batcher.add(std::move(r));
  };
  add(0);
  for (index_t s = 0; s < steps_to_first_token(0); ++s) batcher.step();
  CHECK(received[0] == 1);
  add(1);
  for (index_t s = 1; s <= steps_to_first_token(1) && !batcher.idle(); ++s) {
    const index_t before = received[0];
    batcher.step();
    if (before < index_t(cases[0].tokens.size())) CHECK(received[0] == before + 1);
    CHECK(received[1] == (s == steps_to_first_token(1) ? 1 : 0));
  }
  while (!batcher.idle()) batcher.step();
  for (std::size_t i = 0; i < 2; ++i) {
    CAPTURE(i);
    CHECK(done[i].tokens == cases[i].tokens);
    check_logits(done[i].step_logits, cases[i].logits);
  }
  CHECK_THROWS_WITH_AS(infer::Batcher(decoder, -1), doctest::Contains("prefill_chunk"), Error);
}

namespace {

// A prompt's log-probabilities (an OpenAI completion's echo with logprobs)
// against HF: each parity case's prompt followed by HF's 24 greedy tokens
// is the prompt, and the log-probability of each of those tokens is HF's
// log-softmax of the logits it was chosen from. Fed whole and in chunks of
// 5, with max_tokens = 0 (the prompt alone) and 1.
template <class Device>
void check_prompt_logprobs_against_hf() {
  for (const std::string name : {"llama_gqa", "gemma2_softcap", "mixtral_top2", "qwen2_bias"}) {
    CAPTURE(name);
    const std::vector<Expected> cases = expected(parity + name);
    auto model = models::load_pretrained<float, Device>(parity + name, /*trainable=*/false);
    infer::Engine<float, Device> engine(*model);
    const std::size_t V = std::size_t(model->config().vocab_size);
    for (const index_t chunk : {0, 5}) {
      CAPTURE(chunk);
      infer::EngineDecoder<float, Device> decoder(engine, 64, 2);
      infer::Batcher batcher(decoder, chunk);
      std::vector<infer::Completion> done(cases.size());
      for (std::size_t i = 1; i < cases.size(); ++i) {
        std::vector<std::int32_t> prompt = cases[i].prompt;
        prompt.insert(prompt.end(), cases[i].tokens.begin(), cases[i].tokens.end());
        if (i == 2) prompt.pop_back();  // its last token is then generated
        infer::Request r = greedy(prompt, i == 1 ? 0 : 1);
        r.logprobs = r.prompt_logprobs = true;
        r.top_logprobs = 2;
        r.on_done = [&done, i](infer::Completion&& c) { done[i] = std::move(c); };
        batcher.add(std::move(r));
      }
      while (!batcher.idle()) batcher.step();
      for (std::size_t i = 1; i < cases.size(); ++i) {
        CAPTURE(i);
        const Expected& e = cases[i];
        const infer::Completion& c = done[i];
        const std::size_t length = e.prompt.size() + e.tokens.size() - (i == 2 ? 1 : 0);
        REQUIRE(c.prompt_logprobs.size() == length - 1);
        REQUIRE(c.prompt_top_logprobs.size() == length - 1);
        CHECK(c.finish_reason == "length");
        double worst = 0;
        for (std::size_t k = 0; k < e.tokens.size(); ++k) {
          const std::span<const float> hf(e.logits.data() + k * V, V);
          const float want = infer::Sampler::log_probability(hf, e.tokens[k]);
          // Token k follows prompt position prompt.size() - 1 + k; the last of case 2 is generated.
          const std::size_t at = e.prompt.size() - 1 + k;
          if (at < c.prompt_logprobs.size()) {
            worst = std::max(worst, double(std::abs(c.prompt_logprobs[at] - want)));
            CHECK(c.prompt_top_logprobs[at][0].token == e.tokens[k]);  // HF chose it greedily
          } else {
            REQUIRE(c.tokens.size() == 1);
            CHECK(c.tokens[0] == e.tokens[k]);
            worst = std::max(worst, double(std::abs(c.logprobs[0] - want)));
          }
        }
        CHECK(worst < 1e-4);
        if (i == 1) CHECK(c.tokens.empty());
      }
      CHECK(decoder.free_slots() == 2);
    }
  }
}

}  // namespace

TEST_CASE("a prompt's log-probabilities are HF's at every position, fed whole or in chunks, with max_tokens 0 or 1") {
  check_prompt_logprobs_against_hf<device::Cpu>();
}

TEST_CASE("on a device, a prompt's log-probabilities are HF's at every position") {
  check_prompt_logprobs_against_hf<testing::CpuAsDevice>();
}

TEST_CASE("top_logprobs gives each step's most likely tokens and their log-probabilities, most likely first") {
  auto model = models::load_pretrained<float>(parity + "llama_gqa");
  infer::Engine<float> engine(*model);
  const std::vector<Expected> cases = expected(parity + "llama_gqa");
  const index_t V = model->config().vocab_size;
  infer::Request r = greedy(cases[0].prompt, 4);
  r.logprobs = true;
  r.top_logprobs = 5;
  r.keep_logits = true;
  std::vector<std::vector<infer::TokenLogprob>> heard;
  r.on_token = [&heard](const infer::Generated& g) {
    heard.emplace_back(g.top_logprobs.begin(), g.top_logprobs.end());
    return false;
  };
  infer::EngineDecoder<float> decoder(engine, 64, 1);
  const infer::Completion c = infer::generate(decoder, {r}, true)[0];
  REQUIRE(c.top_logprobs.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    const std::span<const float> logits(c.step_logits.data() + i * std::size_t(V), std::size_t(V));
    auto order = std::vector<std::int32_t>(std::size_t(V));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return logits[std::size_t(a)] > logits[std::size_t(b)]; });
    const std::vector<infer::TokenLogprob>& top = c.top_logprobs[i];
    REQUIRE(top.size() == 5);
    CHECK(top[0].token == c.tokens[i]);
    CHECK(top[0].logprob == doctest::Approx(c.logprobs[i]).epsilon(1e-6));
    for (std::size_t k = 0; k < 5; ++k) {
      CHECK(top[k].token == order[k]);
      CHECK(top[k].logprob == doctest::Approx(infer::Sampler::log_probability(logits, order[k])).epsilon(1e-6));
    }
    CHECK(heard[i].size() == 5);
    CHECK(heard[i][4].token == top[4].token);
  }
  r.logprobs = false;
  infer::Batcher batcher(decoder);
  CHECK_THROWS_WITH_AS(batcher.check(r), doctest::Contains("top_logprobs needs logprobs"), Error);
  r.top_logprobs = 0;
  r.max_tokens = 0;
  CHECK_THROWS_WITH_AS(batcher.check(r), doctest::Contains("max_tokens must be at least 1"), Error);
  r.prompt_logprobs = true;
  CHECK_NOTHROW(batcher.check(r));
}

TEST_CASE("a text stream holds back unfinished characters and possible stop strings, and cuts at a stop string") {
  // Each "token" is a byte of this text; decode joins them and marks an unfinished UTF-8 tail as U+FFFD.
  const std::string text = "caf\xC3\xA9 ok###done";
  auto decode = [&](std::span<const std::int32_t> ids) {
    std::string s;
    for (std::int32_t id : ids) s += text[std::size_t(id)];
    if (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xE0) == 0xC0) s.replace(s.size() - 1, 1, "\xEF\xBF\xBD");
    return s;
  };
  infer::TextStream stream(decode, {"###"});
  std::vector<std::string> pieces;
  for (std::int32_t i = 0; i < std::int32_t(text.size()) && !stream.stopped(); ++i) pieces.push_back(stream.push(i));
  pieces.push_back(stream.finish());
  CHECK(pieces[3].empty());           // the first byte of é waits for the second
  CHECK(pieces[4] == "\xC3\xA9");    // ... which completes it
  CHECK(pieces[8].empty());           // "#" might start "###"
  CHECK(stream.stopped());
  std::string joined;
  for (const auto& p : pieces) joined += p;
  CHECK(joined == "caf\xC3\xA9 ok");
  CHECK(stream.text() == joined);

  infer::TextStream plain(decode, {"#x"});  // "#" followed by something else is released
  std::string all;
  for (std::int32_t i = 0; i < std::int32_t(text.size()); ++i) all += plain.push(i);
  all += plain.finish();
  CHECK(all == text);
  CHECK_FALSE(plain.stopped());
}

TEST_CASE("a text stream over real tokenizers releases exactly the whole decode, however long the answer") {
  std::string text;
  for (int i = 0; i < 12; ++i)
    text += "Line " + std::to_string(i) + ":  caf\xC3\xA9, na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x98\x80 "
            "don't stop...\n\t  x = f(y) + 3.14;\n";
  for (const std::string name : {"smollm2", "llama2", "llama3", "sp_metaspace", "mistral", "gpt_neox", "qwen2"}) {
    CAPTURE(name);
    const auto tokenizer =
        text::Tokenizer::from_file(std::string(FT_SOURCE_DIR) + "/tests/fixtures/tokenizers/" + name + "/tokenizer.json");
    const std::vector<std::int32_t> ids = tokenizer.encode(text, false);
    REQUIRE(ids.size() > 100);
    infer::TextStream stream([&](std::span<const std::int32_t> t) { return tokenizer.decode(t, true); }, {});
    std::string joined;
    for (std::int32_t id : ids) joined += stream.push(id);
    joined += stream.finish();
    CHECK(joined == tokenizer.decode(ids, true));
  }
}

TEST_CASE("sampling: the same seed gives the same tokens; top_k = 1 is greedy; penalties and filters act as defined") {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, -1.0f};
  const std::vector<std::int32_t> context = {1, 3};  // the prompt {1}, then output {3}
  {
    infer::SamplingParams p;
    p.repetition_penalty = 2;
    p.temperature = 0;
    auto l = logits;
    // 3 / 2 = 1.5 and -1 x 2 = -2: token 2 (2.0) is now the largest.
    CHECK(infer::Sampler(p).next(l, context, 1) == 2);
    CHECK(l[1] == doctest::Approx(1.5));
    CHECK(l[3] == doctest::Approx(-2.0));
  }
  {
    infer::SamplingParams p;
    p.presence_penalty = 0.5;
    p.frequency_penalty = 1;
    p.temperature = 0;
    auto l = logits;
    infer::Sampler(p).next(l, context, 1);  // only the output (token 3) is penalised
    CHECK(l[1] == doctest::Approx(3.0));
    CHECK(l[3] == doctest::Approx(-2.5));
  }
  {
    infer::SamplingParams p;
    p.top_k = 1;
    p.seed = 7;
    for (int i = 0; i < 20; ++i) {
      auto l = logits;
      CHECK(infer::Sampler(p).next(l, context, 1) == 1);
    }
  }
  {
    // Probabilities 0.09, 0.66, 0.24, 0.01: top_p = 0.5 keeps token 1 alone; min_p = 0.3 keeps 1 and 2
    // (0.24 >= 0.3 x 0.66), and 2 is drawn 0.24 / 0.90 of the time.
    infer::SamplingParams p;
    p.top_p = 0.5;
    p.seed = 3;
    infer::Sampler s(p);
    for (int i = 0; i < 50; ++i) {
      auto l = logits;
      CHECK(s.next(l, context, 0) == 1);
    }
    infer::SamplingParams m;
    m.min_p = 0.3;
    m.seed = 3;
    infer::Sampler t(m);
    std::vector<int> counts(4, 0);
    for (int i = 0; i < 2000; ++i) {
      auto l = logits;
      ++counts[std::size_t(t.next(l, context, 0))];
    }
    CHECK(counts[0] == 0);
    CHECK(counts[3] == 0);
    CHECK(counts[1] > counts[2]);
    CHECK(counts[2] > 400);  // about 540 of 2000
  }
  {
    infer::SamplingParams p;
    p.seed = 11;
    p.temperature = 0.8;
    infer::Sampler a(p), b(p);
    for (int i = 0; i < 100; ++i) {
      auto x = logits, y = logits;
      CHECK(a.next(x, context, 0) == b.next(y, context, 0));
    }
  }
  {
    // A vocabulary of 5000: each cut keeps exactly the tokens a full sort
    // keeps, and draws follow the kept probabilities.
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> wide(5000);
    for (float& x : wide) x = normal(rng);
    std::vector<double> q(wide.size());
    const float top = *std::max_element(wide.begin(), wide.end());
    double sum = 0;
    for (std::size_t i = 0; i < q.size(); ++i) sum += q[i] = std::exp(double(wide[i]) - top);
    for (double& x : q) x /= sum;
    std::vector<std::int32_t> order(q.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return q[std::size_t(a)] > q[std::size_t(b)]; });
    struct Cut {
      std::int64_t top_k;
      double top_p, min_p;
    };
    for (const Cut cut : {Cut{0, 0.9, 0}, Cut{300, 1, 0}, Cut{0, 1, 0.01}, Cut{0, 1, 0}}) {
      CAPTURE(cut.top_k);
      CAPTURE(cut.top_p);
      CAPTURE(cut.min_p);
      std::size_t keep = cut.top_k > 0 ? std::size_t(cut.top_k) : q.size();
      double cumulative = 0;
      for (std::size_t i = 0; i < keep; ++i) {
        if (cut.min_p > 0 && q[std::size_t(order[i])] < cut.min_p * q[std::size_t(order[0])]) keep = i;
        else if ((cumulative += q[std::size_t(order[i])]) >= cut.top_p && cut.top_p < 1) keep = i + 1;
      }
      REQUIRE(keep > 64);  // more than the first partial sort holds
      std::vector<bool> kept(q.size(), false);
      double kept_mass = 0;
      for (std::size_t i = 0; i < keep; ++i) kept[std::size_t(order[i])] = true, kept_mass += q[std::size_t(order[i])];
      infer::SamplingParams p;
      p.top_k = cut.top_k;
      p.top_p = cut.top_p;
      p.min_p = cut.min_p;
      p.seed = 9;
      infer::Sampler sampler(p);
      constexpr int draws = 4000;
      int outside = 0, most_likely = 0;
      for (int i = 0; i < draws; ++i) {
        auto l = wide;
        const std::int32_t t = sampler.next(l, context, 0);
        outside += kept[std::size_t(t)] ? 0 : 1;
        most_likely += t == order[0] ? 1 : 0;
      }
      CHECK(outside == 0);
      const double expect = q[std::size_t(order[0])] / kept_mass;
      CHECK(std::abs(double(most_likely) / draws - expect) < 5 * std::sqrt(expect * (1 - expect) / draws));
    }
  }
  infer::SamplingParams bad;
  bad.top_p = 0;
  CHECK_THROWS_WITH_AS(infer::Sampler{bad}, "top_p must be in (0, 1]", Error);
  CHECK(infer::Sampler::log_probability(logits, 1) ==
        doctest::Approx(3.0 - std::log(std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(-1.0))));
}

TEST_CASE("a service batches requests from many threads, bounds its queue, and cancels what is left at shutdown") {
  auto model = models::load_pretrained<float>(parity + "llama_gqa");
  infer::Engine<float> engine(*model);
  const std::vector<Expected> cases = expected(parity + "llama_gqa");
  {
    infer::EngineDecoder<float> decoder(engine, 64, 4);
    infer::Service service(decoder, 64);
    // 6 threads x 3 requests, each a fixture prompt: every answer is HF's.
    std::mutex mutex;
    std::vector<std::pair<std::size_t, infer::Completion>> done;
    std::vector<std::thread> clients;
    for (int t = 0; t < 6; ++t)
      clients.emplace_back([&, t] {
        std::vector<infer::Request> requests;
        for (std::size_t i = 0; i < 3; ++i) {
          const std::size_t which = (std::size_t(t) + i) % cases.size();
          infer::Request r = greedy(cases[which].prompt, index_t(cases[which].tokens.size()));
          r.on_done = [&, which](infer::Completion&& c) {
            const std::lock_guard lock(mutex);
            done.emplace_back(which, std::move(c));
          };
          requests.push_back(std::move(r));
        }
        CHECK(service.submit(std::move(requests)) == infer::Service::Admission::queued);
      });
    for (auto& c : clients) c.join();
    service.shutdown(std::chrono::seconds(60));  // finishes everything in flight
    REQUIRE(done.size() == 18);
    for (const auto& [which, c] : done) {
      CHECK(c.tokens == cases[which].tokens);
      CHECK(c.finish_reason == "length");
    }
    CHECK(service.submit({greedy(cases[0].prompt, 2)}) == infer::Service::Admission::closed);
  }
  {
    // One slot and one waiting place: a third request is turned away until one is done.
    infer::EngineDecoder<float> decoder(engine, 64, 1);
    infer::Service service(decoder, 1);
    std::atomic<int> cancelled = 0, finished = 0;
    auto long_request = [&] {
      infer::Request r = greedy(cases[0].prompt, 60);
      r.on_token = [](const infer::Generated&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // slow enough to stay in flight
        return false;
      };
      r.on_done = [&](infer::Completion&& c) { ++(c.finish_reason == "cancelled" ? cancelled : finished); };
      return r;
    };
    CHECK(service.submit({long_request()}) == infer::Service::Admission::queued);
    CHECK(service.submit({long_request()}) == infer::Service::Admission::queued);
    CHECK(service.submit({long_request()}) == infer::Service::Admission::full);
    CHECK_THROWS_WITH_AS(service.submit({greedy(cases[0].prompt, 100)}), doctest::Contains("exceeds max_model_len"),
                         Error);
    service.shutdown(std::chrono::milliseconds(0));  // no grace: both are cancelled
    CHECK(cancelled == 2);
    CHECK(finished == 0);
    CHECK(decoder.free_slots() == 1);
  }
}

}  // namespace test_generate
