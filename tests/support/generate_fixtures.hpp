#pragma once
// The greedy-generation fixtures (tools/make_generate_fixtures.py for HF's
// generate, tools/make_adapter_generate_fixtures.py for PEFT's): for each
// prompt i of a directory's generate_expected.safetensors, the prompt's ids,
// the tokens HF chose and the logits [tokens, V] each was chosen from. For
// tests with or without doctest (the GPU tests print tables instead).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <ft/core/error.hpp>
#include <ft/infer/generate.hpp>
#include <ft/io/safetensors.hpp>

#include "support/tensors.hpp"

namespace ft::testing {

struct GenerateCase {
  std::vector<std::int32_t> prompt, tokens;
  std::vector<float> logits;
};

inline std::vector<GenerateCase> read_generate_cases(const std::string& dir) {
  const auto file = io::SafetensorsFile::open(dir + "/generate_expected.safetensors");
  std::vector<GenerateCase> out;
  for (int i = 0; file.find("prompt_" + std::to_string(i)); ++i) {
    auto ids = [&](const std::string& key) {  // int32 as stored
      const io::TensorView& t = file.at(key + "_" + std::to_string(i));
      std::vector<std::int32_t> v(std::size_t(t.numel()));
      if (t.bytes.size() != v.size() * sizeof(std::int32_t))
        throw Error(dir + ": " + key + "_" + std::to_string(i) + " is not int32");
      std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
      return v;
    };
    out.push_back({ids("prompt"), ids("tokens"), read_tensor<float>(file, "logits_" + std::to_string(i))});
  }
  return out;
}

// A request for greedy decoding of max_tokens tokens.
inline infer::Request greedy_request(const std::vector<std::int32_t>& prompt, index_t max_tokens) {
  infer::Request r;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  return r;
}

}  // namespace ft::testing
