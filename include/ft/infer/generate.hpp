#pragma once
// Generating text for requests with one Decoder: continuous batching. Every
// running sequence advances one token per step, all in one batch; a waiting
// request joins the batch as soon as a cache slot is free (its prompt is its
// first step's tokens), and a finished one leaves it, so the batch stays
// full while requests remain and a new request never waits for a whole
// batch to end. A Batcher does this one step at a time (a server calls it
// in a loop and adds requests between steps); generate() runs a fixed set
// of requests to the end.
//
// A request may also ask for its prompt's log-probabilities (an OpenAI
// completion's `echo` with `logprobs`, what lm-evaluation-harness scores
// choices with): its prompt steps then return the logits after every
// prompt token, and max_tokens may be 0, the prompt alone.
//
// Each request stops at max_tokens, at one of its stop tokens (not
// included in the output), when its on_token callback says so (stop
// strings, which need the tokenizer, are the caller's), or when it is
// cancelled (a client that went away); its slot is free for the next step.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/infer/decoder.hpp"
#include "ft/infer/sampling.hpp"

namespace ft::infer {

// A token and its log-probability under the model's distribution.
struct TokenLogprob {
  std::int32_t token;
  float logprob;
};

// What on_token hears about each new token.
struct Generated {
  std::int32_t token;
  float logprob;                                // 0 unless the request asked for logprobs
  std::span<const TokenLogprob> top_logprobs;  // the request's top_logprobs most likely, most likely first
};

struct Completion {
  // With prompt_logprobs: of each prompt token after the first, under the
  // model given the tokens before it (and its top_logprobs alternatives).
  std::vector<float> prompt_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;                         // per token, when asked for
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per token, with top_logprobs > 0
  std::string finish_reason;       // "stop" or "length" as the OpenAI API says, or "cancelled"
  std::vector<float> step_logits;  // with keep_logits: [steps, V], the logits each token was chosen from
};

struct Request {
  std::vector<std::int32_t> prompt;
  SamplingParams sampling;
  index_t max_tokens = 16;  // 0: the prompt alone (with prompt_logprobs)
  std::vector<std::int32_t> stop_tokens;
  int adapter = -1;  // one of the engine's adapters, -1 for the base model
  bool logprobs = false;
  int top_logprobs = 0;  // with logprobs: the most likely tokens at each step, this many
  bool prompt_logprobs = false;  // the prompt's log-probabilities too (Completion::prompt_logprobs)
  bool keep_logits = false;
  // Called after each new token; true ends the request.
  std::function<bool(const Generated&)> on_token;
  // Asked before every step; true drops the request and frees its slot.
  std::function<bool()> cancelled;
  // Receives the completion when the request ends, however it ends.
  std::function<void(Completion&&)> on_done;
};

class Batcher {
public:
  // prefill_chunk > 0 feeds a prompt at most that many tokens per step, so a
  // long prompt joining the batch delays the running sequences' next tokens
  // by one chunk's work rather than by the whole prompt's. The chunks depend
  // on the request alone, so a sequence is computed the same way whatever
  // else is in the batch. 0 feeds a whole prompt in one step.
  explicit Batcher(Decoder& decoder, index_t prefill_chunk = 0) : decoder_(decoder), prefill_chunk_(prefill_chunk) {
    if (prefill_chunk < 0) throw Error("prefill_chunk must be 0 (whole prompts) or positive");
  }
  // The slots of requests still running go back to the decoder (their
  // callbacks are not called: what they would reach may be gone).
  ~Batcher() {
    for (Running& s : running_)
      if (s.slot >= 0) decoder_.release(s.slot);
  }
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Throws Error for a request that cannot run: no prompt, or longer than max_model_len.
  // Reads only what does not change while serving, so any thread may ask.
  void check(const Request& r) const {
    if (r.prompt.empty()) throw Error("a request needs at least one prompt token");
    if (r.top_logprobs < 0 || (r.top_logprobs > 0 && !r.logprobs)) throw Error("top_logprobs needs logprobs and must be >= 0");
    if (r.max_tokens < (r.prompt_logprobs ? 0 : 1))
      throw Error(r.prompt_logprobs ? "max_tokens must be at least 0" : "max_tokens must be at least 1");
    if (r.adapter < -1 || r.adapter >= decoder_.adapters()) throw Error("internal: no adapter " + std::to_string(r.adapter));
    const index_t length = decoder_.virtual_tokens(r.adapter) + index_t(r.prompt.size()) + r.max_tokens;
    if (length > decoder_.max_model_len())
      throw Error("a prompt of " + std::to_string(r.prompt.size()) + " tokens plus max_tokens = " +
                  std::to_string(r.max_tokens) + " exceeds max_model_len = " + std::to_string(decoder_.max_model_len()));
  }

  // Queues a request (check() first).
  void add(Request r) {
    check(r);
    waiting_.push_back(std::move(r));
  }

  bool idle() const { return waiting_.empty() && running_.empty(); }
  std::size_t waiting() const { return waiting_.size(); }
  std::size_t running() const { return running_.size(); }

  // Drops cancelled requests, admits waiting ones while slots are free, runs
  // one engine step for every running sequence and gives each its token.
  void step() {
    std::erase_if(waiting_, [&](Request& r) { return cancelled(r) && finish(r, {}, "cancelled"); });
    std::erase_if(running_, [&](Running& s) { return cancelled(s.request) && end(s, "cancelled"); });
    while (!waiting_.empty()) {
      Sampler sampler(waiting_.front().sampling);  // before the slot: a slot is never held by nothing
      const index_t slot = decoder_.acquire();
      if (slot < 0) break;
      Request r = std::move(waiting_.front());
      waiting_.pop_front();
      std::vector<std::int32_t> prompt = r.prompt;
      running_.push_back({std::move(r), slot, prompt, prompt, std::move(sampler), {}, 0});
    }
    if (running_.empty()) return;

    const index_t V = decoder_.vocab_size();
    steps_.clear();
    std::size_t rows = 0;
    for (Running& s : running_) {
      const std::span<const std::int32_t> next(s.next);
      const std::size_t fed = prefill_chunk_ > 0 ? std::min(next.size(), std::size_t(prefill_chunk_)) : next.size();
      const bool prompt = s.prompt_fed < s.request.prompt.size();
      steps_.push_back({s.slot, next.first(fed), s.request.adapter, prompt && s.request.prompt_logprobs});
      rows += std::size_t(steps_.back().logit_rows());
    }
    logits_.resize(rows * std::size_t(V));
    decoder_.step(steps_, logits_.data());
    // A request that ends gives its slot back at once and is marked (slot -1);
    // the marked leave the running set after the loop, so a callback that
    // throws midway leaves every request either running or ended once.
    std::size_t at = 0;  // the sequence's first row of logits
    for (std::size_t i = 0; i < running_.size(); ++i) {
      Running& s = running_[i];
      const std::size_t fed = steps_[i].tokens.size(), first_row = at;
      at += std::size_t(steps_[i].logit_rows());
      if (steps_[i].every_position) score_prompt(s, first_row, fed);
      if (s.prompt_fed < s.request.prompt.size()) s.prompt_fed += fed;
      if (fed < s.next.size()) {  // more of the prompt to come
        s.next.erase(s.next.begin(), s.next.begin() + std::ptrdiff_t(fed));
        continue;
      }
      const Request& r = s.request;
      Completion& c = s.completion;
      if (r.max_tokens == 0) {
        end(s, "length");
        continue;
      }
      std::span<float> row(logits_.data() + (at - 1) * std::size_t(V), std::size_t(V));
      if (r.keep_logits) c.step_logits.insert(c.step_logits.end(), row.begin(), row.end());
      if (r.logprobs) raw_.assign(row.begin(), row.end());
      const std::int32_t token = s.sampler.next(row, s.context, c.tokens.size());
      if (std::ranges::find(r.stop_tokens, token) != r.stop_tokens.end()) {
        end(s, "stop");
        continue;
      }
      const float logprob = r.logprobs ? Sampler::log_probability(raw_, token) : 0.0f;
      c.tokens.push_back(token);
      if (r.logprobs) c.logprobs.push_back(logprob);
      std::span<const TokenLogprob> top;
      if (r.logprobs && r.top_logprobs > 0) top = c.top_logprobs.emplace_back(most_likely(raw_, r.top_logprobs));
      s.context.push_back(token);
      s.next.assign(1, token);
      if (r.on_token && r.on_token({token, logprob, top})) end(s, "stop");
      else if (index_t(c.tokens.size()) >= r.max_tokens) end(s, "length");
    }
    std::erase_if(running_, [](const Running& s) { return s.slot < 0; });
  }

  // Ends every request now (a server shutting down).
  void cancel_all() {
    for (Request& r : waiting_) finish(r, {}, "cancelled");
    for (Running& s : running_)
      if (s.slot >= 0) end(s, "cancelled");
    waiting_.clear();
    running_.clear();
  }

private:
  struct Running {
    Request request;
    index_t slot;  // -1 once the request has ended
    std::vector<std::int32_t> context;  // prompt, then output
    std::vector<std::int32_t> next;     // tokens of the next step
    Sampler sampler;
    Completion completion;
    std::size_t prompt_fed;  // how many prompt tokens the steps so far fed
  };

  // The log-probabilities of the prompt tokens after the `fed` just fed,
  // from their rows of logits from `first_row` on: row j, after prompt
  // token prompt_fed + j, scores the token after it.
  void score_prompt(Running& s, std::size_t first_row, std::size_t fed) {
    const Request& r = s.request;
    const std::size_t V = std::size_t(decoder_.vocab_size());
    for (std::size_t j = 0; j < fed && s.prompt_fed + j + 1 < r.prompt.size(); ++j) {
      const std::span<const float> row(logits_.data() + (first_row + j) * V, V);
      s.completion.prompt_logprobs.push_back(Sampler::log_probability(row, r.prompt[s.prompt_fed + j + 1]));
      if (r.top_logprobs > 0) s.completion.prompt_top_logprobs.push_back(most_likely(row, r.top_logprobs));
    }
  }

  static bool cancelled(const Request& r) { return r.cancelled && r.cancelled(); }
  // The n most likely tokens of raw logits (ties: the lower id first) and their log-probabilities.
  static std::vector<TokenLogprob> most_likely(std::span<const float> logits, int n) {
    std::vector<std::int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    const auto count = std::ptrdiff_t(std::min(ids.size(), std::size_t(n)));
    std::partial_sort(ids.begin(), ids.begin() + count, ids.end(), [&](std::int32_t a, std::int32_t b) {
      return logits[std::size_t(a)] > logits[std::size_t(b)] || (logits[std::size_t(a)] == logits[std::size_t(b)] && a < b);
    });
    const float normaliser = Sampler::log_probability(logits, ids[0]) - logits[std::size_t(ids[0])];
    std::vector<TokenLogprob> top;
    for (std::ptrdiff_t i = 0; i < count; ++i) top.push_back({ids[std::size_t(i)], logits[std::size_t(ids[std::size_t(i)])] + normaliser});
    return top;
  }
  static bool finish(Request& r, Completion&& c, const char* reason) {
    c.finish_reason = reason;
    if (r.on_done) r.on_done(std::move(c));
    return true;
  }
  bool end(Running& s, const char* reason) {
    decoder_.release(std::exchange(s.slot, -1));
    return finish(s.request, std::move(s.completion), reason);
  }

  Decoder& decoder_;
  index_t prefill_chunk_;
  std::deque<Request> waiting_;
  std::vector<Running> running_;
  std::vector<SlotStep> steps_;
  std::vector<float> logits_, raw_;
};

// Runs every request to its end, as many at a time as the decoder has
// slots; completions in the order of the requests.
inline std::vector<Completion> generate(Decoder& decoder, std::vector<Request> requests, bool keep_logits = false) {
  std::vector<Completion> out(requests.size());
  Batcher batcher(decoder);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    requests[i].keep_logits = requests[i].keep_logits || keep_logits;
    requests[i].on_done = [&out, i](Completion&& c) { out[i] = std::move(c); };
    batcher.add(std::move(requests[i]));
  }
  while (!batcher.idle()) batcher.step();
  return out;
}

}  // namespace ft::infer
