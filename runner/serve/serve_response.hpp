#pragma once
// What ftrun serve answers a completion call with, shaped as the OpenAI API
// shapes it: the whole answer once every choice is done, or server-sent
// chunks as tokens arrive. An Exchange is one call in flight, shared by the
// engine's thread, which adds what it produces, and the connection's, which
// sends it (the engine may finish a choice after the connection is gone).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <ft/infer/generate.hpp>
#include <ft/infer/text_stream.hpp>

#include "model_session.hpp"
#include "serve_request.hpp"

namespace ftrun::serve {

using Clock = std::chrono::steady_clock;

struct Exchange {
  struct Piece {
    std::size_t choice;
    std::string text;
    std::int32_t token;  // -1: text a choice's stream held back until it finished
    float logprob;
    std::vector<ft::infer::TokenLogprob> top_logprobs;
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Piece> pieces;
  std::vector<std::unique_ptr<ft::infer::TextStream>> texts;
  // With echo: each choice's prompt, its text and tokens, which its answer begins with.
  struct Echo {
    std::string text;
    std::vector<std::int32_t> tokens;
  };
  std::vector<Echo> echoes;
  std::vector<std::optional<ft::infer::Completion>> done;
  std::size_t finished = 0;
  std::atomic<bool> cancel{false};
  Clock::time_point start = Clock::now();
  bool first_token_seen = false;
};

// What every answer to one call repeats.
struct Answer {
  std::string id;
  std::int64_t created;
  std::string model;
  bool chat, logprobs, include_usage;
  std::size_t prompt_tokens;
};

// "chatcmpl-" or "cmpl-" and random hex digits; seconds since the epoch.
std::string random_id(const char* prefix);
std::int64_t unix_time();

// The whole answer of an exchange whose choices are all done (its lock held);
// a choice cancelled by a shutdown is a 503.
json whole_answer(const Exchange& e, const Answer& a, const ModelSession& session);

// A streamed chunk carrying `choices` (and the usage, when the call asked for it).
std::string chunk_event(const Answer& a, json choices, const std::optional<json>& usage = std::nullopt);
// The chat's first chunk for a choice: the assistant's role.
json role_choice(std::size_t index);
// A chunk's choice: a piece of text with its log-probabilities, or a choice's end.
json piece_choice(const Answer& a, std::size_t index, const std::string& text, json logprobs, json finish_reason);
// A piece's log-probabilities as the call asked for them (null: none).
json piece_logprobs(const Exchange::Piece& p, const Answer& a, const ModelSession& session);
std::string finish_reason(const ft::infer::Completion& c);
// Prompt, completion and total tokens (the exchange's lock held).
json usage(const Exchange& e, const Answer& a);

}  // namespace ftrun::serve
