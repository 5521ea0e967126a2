#pragma once
// Generating text for a set of requests with one Engine: every running
// sequence advances one token per step, all in one batch; a request waiting
// for a cache slot joins the batch as soon as one is free (its prompt is its
// first step's tokens), so the batch stays full while requests remain.
// Each request stops at max_tokens, at one of its stop tokens (not
// included in the output), or when its `stop` callback says so (stop
// strings, which need the tokenizer, are the caller's).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ft/infer/engine.hpp"
#include "ft/infer/sampling.hpp"

namespace ft::infer {

struct Request {
  std::vector<std::int32_t> prompt;
  SamplingParams sampling;
  index_t max_tokens = 16;
  std::vector<std::int32_t> stop_tokens;
  // Called after each new token with the output so far; true ends the request.
  std::function<bool(std::span<const std::int32_t> output)> stop;
  bool logprobs = false;
};

struct Completion {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;       // per token, when asked for
  std::string finish_reason;         // "stop" or "length", as the OpenAI API says
  std::vector<float> step_logits;    // with keep_logits: [steps, V], the logits each token was chosen from
};

template <element T>
std::vector<Completion> generate(Engine<T>& engine, KvPool<T>& pool, const std::vector<Request>& requests,
                                 bool keep_logits = false) {
  const index_t V = engine.model().config().vocab_size;
  struct Running {
    std::size_t request;
    KvCache<T>* cache;
    std::vector<std::int32_t> context;  // prompt, then output
    std::vector<std::int32_t> next;     // tokens of the next step
    Sampler sampler;
  };
  std::vector<Completion> out(requests.size());
  std::vector<Running> running;
  std::size_t waiting = 0;
  for (const Request& r : requests) {
    if (r.prompt.empty()) throw Error("a request needs at least one prompt token");
    if (index_t(r.prompt.size()) + r.max_tokens > pool.max_model_len())
      throw Error("a prompt of " + std::to_string(r.prompt.size()) + " tokens plus max_tokens = " +
                  std::to_string(r.max_tokens) + " exceeds max_model_len = " + std::to_string(pool.max_model_len()));
  }
  std::vector<float> logits;
  std::vector<SequenceStep<T>> steps;
  while (waiting < requests.size() || !running.empty()) {
    while (waiting < requests.size()) {  // admit while slots are free
      KvCache<T>* cache = pool.acquire();
      if (!cache) break;
      const Request& r = requests[waiting];
      running.push_back({waiting, cache, r.prompt, r.prompt, Sampler(r.sampling)});
      ++waiting;
    }
    steps.clear();
    for (Running& s : running) steps.push_back({s.cache, s.next});
    logits.resize(std::size_t(index_t(running.size()) * V));
    engine.step(steps, logits.data());
    std::vector<Running> still;
    for (std::size_t i = 0; i < running.size(); ++i) {
      Running& s = running[i];
      const Request& r = requests[s.request];
      Completion& c = out[s.request];
      std::span<float> row(logits.data() + i * std::size_t(V), std::size_t(V));
      if (keep_logits) c.step_logits.insert(c.step_logits.end(), row.begin(), row.end());
      std::vector<float> raw;
      if (r.logprobs) raw.assign(row.begin(), row.end());
      const std::int32_t token = s.sampler.next(row, s.context, c.tokens.size());
      bool done = false;
      if (std::find(r.stop_tokens.begin(), r.stop_tokens.end(), token) != r.stop_tokens.end()) {
        c.finish_reason = "stop";
        done = true;
      } else {
        c.tokens.push_back(token);
        if (r.logprobs) c.logprobs.push_back(Sampler::log_probability(raw, token));
        s.context.push_back(token);
        s.next.assign(1, token);
        if (r.stop && r.stop(c.tokens)) {
          c.finish_reason = "stop";
          done = true;
        } else if (index_t(c.tokens.size()) >= r.max_tokens) {
          c.finish_reason = "length";
          done = true;
        }
      }
      if (done) pool.release(s.cache);
      else still.push_back(std::move(s));
    }
    running = std::move(still);
  }
  return out;
}

}  // namespace ft::infer
