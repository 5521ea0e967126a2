#pragma once
// What a call to ftrun serve's completion endpoints asks for, read from its
// JSON body with OpenAI's field names, types and ranges (and vLLM's
// extensions: top_k, min_p, repetition_penalty); anything else is an
// ApiError answered as OpenAI's {"error": {...}} object.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ft/infer/sampling.hpp>

#include "model_session.hpp"

namespace ftrun::serve {

using json = nlohmann::ordered_json;

// An error answered with an HTTP status as OpenAI's {"error": {...}}.
struct ApiError {
  int status;
  std::string message, type = "invalid_request_error", param, code;

  json body() const;
};

// A 400 about the request's fields.
ApiError invalid(std::string message, std::string param = "", std::string code = "");

// What one API call asked for, checked.
struct Call {
  int adapter = -1;
  std::string model;
  std::vector<std::vector<std::int32_t>> prompts;  // chat: one
  std::optional<ft::index_t> max_tokens;
  ft::infer::SamplingParams sampling;
  bool seeded = false;
  std::size_t n = 1;
  bool stream = false, include_usage = false, logprobs = false;
  int top_logprobs = 0;  // alternatives per token (chat: top_logprobs; completions: logprobs = N)
  // Completions' echo: each answer begins with its prompt, as given (a
  // string) or decoded (token ids), and with logprobs, the prompt's.
  bool echo = false;
  std::vector<std::string> prompt_texts;  // with echo, one per prompt
  std::vector<std::string> stop;
};

// What a call is checked against: the names clients use for the base model
// and each adapter, the model's text tools, and the server's limits.
struct CallLimits {
  const std::map<std::string, int>& models;  // name -> adapter index (-1: the base model)
  const ModelSession& session;
  ft::index_t vocab_size;
  ft::index_t max_model_len;
  ft::index_t max_tokens;  // the most a call may ask for; 0: up to the context
};

// A call to /v1/chat/completions (`chat`) or /v1/completions, from its body.
Call read_call(const json& body, bool chat, const CallLimits& limits);

}  // namespace ftrun::serve
