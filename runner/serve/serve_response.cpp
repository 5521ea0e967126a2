#include "serve_response.hpp"

#include <iomanip>
#include <mutex>
#include <random>
#include <sstream>

namespace ftrun::serve {

std::string random_id(const char* prefix) {
  static std::mutex mutex;
  static std::mt19937_64 rng{std::random_device{}()};
  const std::lock_guard lock(mutex);
  std::ostringstream s;
  s << prefix << std::hex << std::setfill('0') << std::setw(16) << rng() << std::setw(8) << (rng() & 0xffffffffu);
  return s.str();
}

std::int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

// Log-probabilities of some tokens, and of each one's most likely
// alternatives (empty, or one list per token), as the OpenAI API shapes them.
using Alternatives = std::span<const std::vector<ft::infer::TokenLogprob>>;
// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}.
json chat_logprobs(std::span<const std::int32_t> tokens, std::span<const float> logprobs, Alternatives top, const ModelSession& session) {
  auto entry = [&](std::int32_t id, float logprob) {
    const std::int32_t ids[] = {id};
    const std::string token = session.decode(ids);
    json bytes = json::array();
    for (const unsigned char b : token) bytes.push_back(int(b));
    return json{{"token", token}, {"logprob", logprob}, {"bytes", bytes}};
  };
  json content = json::array();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    json item = entry(tokens[i], logprobs[i]);
    item["top_logprobs"] = json::array();
    if (i < top.size())
      for (const auto& t : top[i]) item["top_logprobs"].push_back(entry(t.token, t.logprob));
    content.push_back(std::move(item));
  }
  return {{"content", content}};
}
// Completions: {"tokens", "token_logprobs", "top_logprobs": [{text: logprob}] or null, "text_offset"};
// as vLLM, each token's alternatives include the token itself. With
// `first_unscored` (an echoed prompt's first token, which nothing before it
// predicts) the first token has null for both, and logprobs and top begin
// at the second.
json completion_logprobs(std::span<const std::int32_t> tokens, std::span<const float> logprobs, Alternatives top,
                         const ModelSession& session, bool first_unscored = false) {
  json strings = json::array(), values = json::array(), offsets = json::array(), alternatives = json::array();
  std::size_t offset = 0;
  const std::size_t skip = first_unscored ? 1 : 0;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string token = session.decode(tokens.subspan(i, 1));
    strings.push_back(token);
    offsets.push_back(offset);
    offset += token.size();
    if (i < skip) {
      values.push_back(nullptr);
      if (!top.empty()) alternatives.push_back(nullptr);
      continue;
    }
    const std::size_t k = i - skip;
    values.push_back(logprobs[k]);
    if (k < top.size()) {
      json these = json::object();
      for (const auto& t : top[k]) {
        const std::int32_t ids[] = {t.token};
        these[session.decode(ids)] = t.logprob;
      }
      these[token] = logprobs[k];
      alternatives.push_back(std::move(these));
    }
  }
  return {{"tokens", strings}, {"token_logprobs", values},
          {"top_logprobs", top.empty() ? json() : alternatives}, {"text_offset", offsets}};
}

}  // namespace

std::string finish_reason(const ft::infer::Completion& c) {
  return c.finish_reason == "cancelled" ? "abort" : c.finish_reason;
}

json usage(const Exchange& e, const Answer& a) {
  std::size_t generated = 0;
  for (const auto& c : e.done) generated += c ? c->tokens.size() : 0;
  return {{"prompt_tokens", a.prompt_tokens},
          {"completion_tokens", generated},
          {"total_tokens", a.prompt_tokens + generated}};
}

json whole_answer(const Exchange& e, const Answer& a, const ModelSession& session) {
  json choices = json::array();
  for (std::size_t i = 0; i < e.done.size(); ++i) {
    const ft::infer::Completion& c = *e.done[i];
    if (c.finish_reason == "cancelled") throw ApiError{503, "the server shut down before the answer was finished", "server_error"};
    const std::string text(e.texts[i]->text());
    json choice = {{"index", i}};
    if (a.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
      choice["logprobs"] = a.logprobs ? chat_logprobs(c.tokens, c.logprobs, c.top_logprobs, session) : json();
    } else if (!e.echoes.empty()) {
      // The prompt's tokens, then the answer's: one list of each.
      const Exchange::Echo& echo = e.echoes[i];
      choice["text"] = echo.text + text;
      auto joined = [](auto a, const auto& b) {
        a.insert(a.end(), b.begin(), b.end());
        return a;
      };
      choice["logprobs"] = a.logprobs ? completion_logprobs(joined(echo.tokens, c.tokens),
                                                            joined(c.prompt_logprobs, c.logprobs),
                                                            joined(c.prompt_top_logprobs, c.top_logprobs), session,
                                                            /*first_unscored=*/true)
                                      : json();
    } else {
      choice["text"] = text;
      choice["logprobs"] = a.logprobs ? completion_logprobs(c.tokens, c.logprobs, c.top_logprobs, session) : json();
    }
    choice["finish_reason"] = finish_reason(c);
    choices.push_back(choice);
  }
  return {{"id", a.id}, {"object", a.chat ? "chat.completion" : "text_completion"}, {"created", a.created},
          {"model", a.model}, {"choices", choices}, {"usage", usage(e, a)}};
}

std::string chunk_event(const Answer& a, json choices, const std::optional<json>& usage_value) {
  json chunk = {{"id", a.id}, {"object", a.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", a.created}, {"model", a.model}, {"choices", std::move(choices)}};
  if (a.include_usage) chunk["usage"] = usage_value ? *usage_value : json();
  return "data: " + chunk.dump() + "\n\n";
}

json role_choice(std::size_t index) {
  return {{"index", index}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
          {"finish_reason", nullptr}};
}

json piece_choice(const Answer& a, std::size_t index, const std::string& text, json logprobs, json reason) {
  json c = {{"index", index}};
  if (a.chat) c["delta"] = text.empty() && !reason.is_null() ? json::object() : json{{"content", text}};
  else c["text"] = text;
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = std::move(reason);
  return c;
}

json piece_logprobs(const Exchange::Piece& p, const Answer& a, const ModelSession& session) {
  if (!a.logprobs || p.token < 0) return nullptr;
  const std::int32_t t[] = {p.token};
  const float l[] = {p.logprob};
  const Alternatives top = p.top_logprobs.empty() ? Alternatives() : Alternatives(&p.top_logprobs, 1);
  return a.chat ? chat_logprobs(t, l, top, session) : completion_logprobs(t, l, top, session);
}

}  // namespace ftrun::serve
