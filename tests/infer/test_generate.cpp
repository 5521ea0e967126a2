// KV-cache inference against HF Transformers' greedy generate on the parity
// models (tools/make_generate_fixtures.py): the same tokens, and the logits
// each token was chosen from within 1e-4 of HF's, with the three prompts of
// a case running together in one batch and each alone.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <ft/infer/generate.hpp>
#include <ft/io/safetensors.hpp>
#include <ft/models/load.hpp>

#include "support/compare.hpp"

using namespace ft;

namespace {

const std::string parity = std::string(FT_SOURCE_DIR) + "/tests/fixtures/parity/";

struct Expected {
  std::vector<std::int32_t> prompt, tokens;
  std::vector<float> logits;
};

std::vector<Expected> expected(const std::string& name) {
  const auto file = io::SafetensorsFile::open(parity + name + "/generate_expected.safetensors");
  std::vector<Expected> out;
  for (int i = 0; file.find("prompt_" + std::to_string(i)); ++i) {
    auto ids = [&](const std::string& key) {  // int32 as stored
      const io::TensorView& t = file.at(key + "_" + std::to_string(i));
      std::vector<std::int32_t> v(std::size_t(t.numel()));
      REQUIRE(t.bytes.size() == v.size() * sizeof(std::int32_t));
      std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
      return v;
    };
    out.push_back({ids("prompt"), ids("tokens"), testing::read_tensor<float>(file, "logits_" + std::to_string(i))});
  }
  return out;
}

infer::Request greedy(const std::vector<std::int32_t>& prompt, index_t max_tokens) {
  infer::Request r;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  return r;
}

}  // namespace

TEST_CASE("greedy generation with a KV cache matches HF generate token for token, batched and alone") {
  for (const std::string name : {"llama_gqa", "llama3_rope_scaling", "mistral_sliding", "qwen2_bias", "smollm2_tied",
                                 "neox_parallel", "neox_sequential"}) {
    CAPTURE(name);
    const std::vector<Expected> cases = expected(name);
    REQUIRE(cases.size() == 3);
    auto model = models::load_pretrained<float>(parity + name);
    infer::Engine<float> engine(*model);
    const index_t V = model->config().vocab_size;
    std::vector<infer::Request> requests;
    for (const Expected& e : cases) requests.push_back(greedy(e.prompt, index_t(e.tokens.size())));
    for (const index_t slots : {3, 1}) {  // all three in one batch; one at a time
      CAPTURE(slots);
      infer::KvPool<float> pool(model->config(), 64, slots);
      const std::vector<infer::Completion> got = infer::generate(engine, pool, requests, true);
      for (std::size_t i = 0; i < cases.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].tokens == cases[i].tokens);
        CHECK(got[i].finish_reason == "length");
        REQUIRE(got[i].step_logits.size() == cases[i].logits.size());
        double worst = 0;
        for (std::size_t k = 0; k < got[i].step_logits.size(); ++k)
          worst = std::max(worst, double(std::abs(got[i].step_logits[k] - cases[i].logits[k])));
        CHECK(worst < 1e-4);
        CHECK(got[i].step_logits.size() == cases[i].tokens.size() * std::size_t(V));
      }
      CHECK(pool.free_slots() == slots);
    }
  }
}

TEST_CASE("generation stops at a stop token, at a stop callback and at max_tokens, and refuses what does not fit") {
  auto model = models::load_pretrained<float>(parity + "llama_gqa");
  infer::Engine<float> engine(*model);
  const Expected e = expected("llama_gqa")[1];
  infer::KvPool<float> pool(model->config(), 64, 2);
  infer::Request by_token = greedy(e.prompt, 24), by_callback = greedy(e.prompt, 24), short_one = greedy(e.prompt, 3);
  by_token.stop_tokens = {e.tokens[5]};
  by_callback.stop = [](std::span<const std::int32_t> out) { return out.size() == 4; };
  const auto got = infer::generate(engine, pool, {by_token, by_callback, short_one});
  // The first occurrence of the stop token ends the output, without it.
  const auto first = std::find(e.tokens.begin(), e.tokens.end(), e.tokens[5]) - e.tokens.begin();
  CHECK(got[0].tokens == std::vector<std::int32_t>(e.tokens.begin(), e.tokens.begin() + first));
  CHECK(got[0].finish_reason == "stop");
  CHECK(got[1].tokens == std::vector<std::int32_t>(e.tokens.begin(), e.tokens.begin() + 4));
  CHECK(got[1].finish_reason == "stop");
  CHECK(got[2].tokens == std::vector<std::int32_t>(e.tokens.begin(), e.tokens.begin() + 3));
  CHECK(got[2].finish_reason == "length");
  CHECK_THROWS_WITH_AS(infer::generate(engine, pool, {greedy(e.prompt, 60)}),
                       doctest::Contains("exceeds max_model_len = 64"), Error);
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
  infer::SamplingParams bad;
  bad.top_p = 0;
  CHECK_THROWS_WITH_AS(infer::Sampler{bad}, "top_p must be in (0, 1]", Error);
  CHECK(infer::Sampler::log_probability(logits, 1) ==
        doctest::Approx(3.0 - std::log(std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(-1.0))));
}
