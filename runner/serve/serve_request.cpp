#include "serve_request.hpp"

#include <algorithm>
#include <limits>
#include <sstream>

namespace ftrun::serve {

json ApiError::body() const {
  json error = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) error["param"] = param;
  if (!code.empty()) error["code"] = code;
  return json{{"error", error}};
}

ApiError invalid(std::string message, std::string param, std::string code) {
  return {400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

namespace {

using ft::index_t;

// Reads optional fields of a request body with OpenAI's types and ranges.
class Fields {
public:
  explicit Fields(const json& body) : body_(body) {}

  const json* find(const char* key) const {
    const auto it = body_.find(key);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<double> number(const char* key, double lo, double hi) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) throw invalid(std::string("'") + key + "' must be a number", key, "invalid_type");
    const double x = v->get<double>();
    if (x < lo || x > hi) throw invalid(std::string("'") + key + "' must be between " + text(lo) + " and " + text(hi) +
                                            ", got " + v->dump(), key, "invalid_value");
    return x;
  }
  std::optional<std::int64_t> integer(const char* key, std::int64_t lo, std::int64_t hi) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) throw invalid(std::string("'") + key + "' must be an integer", key, "invalid_type");
    const std::int64_t x = v->get<std::int64_t>();
    if (x < lo || x > hi) throw invalid(std::string("'") + key + "' must be between " + std::to_string(lo) + " and " +
                                            std::to_string(hi) + ", got " + v->dump(), key, "invalid_value");
    return x;
  }
  std::optional<bool> boolean(const char* key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) throw invalid(std::string("'") + key + "' must be a boolean", key, "invalid_type");
    return v->get<bool>();
  }

private:
  static std::string text(double x) {
    std::ostringstream s;
    s << x;
    return s.str();
  }
  const json& body_;
};

// The text parts of a message's content: a string, or a list of {"type": "text", "text": ...}.
std::string content_text(const json& content, const std::string& where) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {
    std::string text;
    for (const json& part : content) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
        throw invalid(where + ": only text content parts ({\"type\": \"text\", \"text\": ...}) are supported", "messages");
      text += part["text"].get<std::string>();
    }
    return text;
  }
  throw invalid(where + ".content must be a string or a list of text parts", "messages", "invalid_type");
}

}  // namespace

Call read_call(const json& body, bool chat, const CallLimits& limits) {
  const Fields f(body);
  Call c;
  const json* model = f.find("model");
  if (!model || !model->is_string()) throw invalid("'model' must be given, as a string", "model");
  c.model = model->get<std::string>();
  const auto known = limits.models.find(c.model);
  if (known == limits.models.end()) {
    std::string names;
    for (const auto& [name, _] : limits.models) names += (names.empty() ? "" : ", ") + name;
    throw ApiError{404, "The model '" + c.model + "' does not exist; served: " + names, "invalid_request_error",
                   "model", "model_not_found"};
  }
  c.adapter = known->second;
  if (chat) {
    const json* messages = f.find("messages");
    if (!messages || !messages->is_array() || messages->empty())
      throw invalid("'messages' must be a non-empty list", "messages");
    json conversation = json::array();
    for (std::size_t i = 0; i < messages->size(); ++i) {
      const json& m = (*messages)[i];
      const std::string where = "messages[" + std::to_string(i) + "]";
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        throw invalid(where + " must be an object with a 'role' string", "messages");
      conversation.push_back({{"role", m["role"]}, {"content", content_text(m.value("content", json()), where)}});
    }
    if (!limits.session.has_chat_template())
      throw invalid("the model has no chat template; use /v1/completions", "messages");
    c.prompts.push_back(limits.session.encode_chat(conversation));
  } else {
    const json* prompt = f.find("prompt");
    if (!prompt) throw invalid("'prompt' must be given", "prompt");
    const index_t V = limits.vocab_size;
    auto ids = [&](const json& list) {
      std::vector<std::int32_t> out;
      for (const json& id : list) {
        if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= V)
          throw invalid("token ids in 'prompt' must be integers in [0, " + std::to_string(V) + ")", "prompt");
        out.push_back(id.get<std::int32_t>());
      }
      return out;
    };
    c.echo = f.boolean("echo").value_or(false);
    // One prompt: a string, or token ids; echo repeats the string as given.
    auto add = [&](const json& p) {
      if (p.is_string()) c.prompts.push_back(limits.session.encode_text(p.get<std::string>()));
      else c.prompts.push_back(ids(p));
      if (c.echo) c.prompt_texts.push_back(p.is_string() ? p.get<std::string>() : limits.session.decode(c.prompts.back()));
    };
    if (prompt->is_string() || (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer())) add(*prompt);
    else if (prompt->is_array() && !prompt->empty()) {
      for (const json& p : *prompt) {
        if (!p.is_string() && !p.is_array())
          throw invalid("'prompt' must be a string, a list of strings, or token ids", "prompt", "invalid_type");
        add(p);
      }
    } else {
      throw invalid("'prompt' must be a string, a list of strings, or token ids", "prompt", "invalid_type");
    }
  }
  for (const auto& p : c.prompts)
    if (p.empty()) throw invalid("the prompt has no tokens", chat ? "messages" : "prompt");
  const char* max_key = chat && f.find("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  // With echo, 0 asks for the prompt alone (its log-probabilities), as vLLM allows.
  const std::int64_t least = c.echo ? 0 : 1;
  if (const json* m = f.find(max_key); m && m->is_number_integer() && m->get<std::int64_t>() < least)
    throw invalid(std::string("'") + max_key + "' must be at least " + std::to_string(least) + ", got " + m->dump() +
                      (c.echo ? "" : " (0 only with 'echo')"), max_key, "invalid_value");
  const std::int64_t cap = limits.max_tokens > 0 ? limits.max_tokens : limits.max_model_len;
  if (auto m = f.integer(max_key, least, std::numeric_limits<std::int64_t>::max())) {
    if (*m > cap)
      throw invalid(std::string("'") + max_key + "' is " + std::to_string(*m) + "; this server allows at most " +
                        std::to_string(cap), max_key, "invalid_value");
    c.max_tokens = *m;
  } else if (limits.max_tokens > 0) {
    c.max_tokens = limits.max_tokens;
  }
  c.n = std::size_t(f.integer("n", 1, 16).value_or(1));
  c.stream = f.boolean("stream").value_or(false);
  if (const json* so = f.find("stream_options")) {
    if (!so->is_object()) throw invalid("'stream_options' must be an object", "stream_options", "invalid_type");
    c.include_usage = Fields(*so).boolean("include_usage").value_or(false);
  }
  auto& s = c.sampling;
  s.temperature = f.number("temperature", 0, 2).value_or(1.0);
  s.top_p = f.number("top_p", 0, 1).value_or(1.0);
  if (s.top_p <= 0) throw invalid("'top_p' must be greater than 0", "top_p", "invalid_value");
  s.top_k = f.integer("top_k", -1, std::numeric_limits<std::int32_t>::max()).value_or(0);
  if (s.top_k < 0) s.top_k = 0;  // vLLM's -1: no limit
  s.min_p = f.number("min_p", 0, 1).value_or(0.0);
  s.repetition_penalty = f.number("repetition_penalty", 1e-6, 100).value_or(1.0);
  s.presence_penalty = f.number("presence_penalty", -2, 2).value_or(0.0);
  s.frequency_penalty = f.number("frequency_penalty", -2, 2).value_or(0.0);
  if (auto seed = f.integer("seed", std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max())) {
    s.seed = std::uint64_t(*seed);
    c.seeded = true;
  }
  if (const json* stop = f.find("stop")) {
    if (stop->is_string()) c.stop.push_back(stop->get<std::string>());
    else if (stop->is_array() && stop->size() <= 4 &&
             std::ranges::all_of(*stop, [](const json& x) { return x.is_string(); }))
      for (const json& x : *stop) c.stop.push_back(x.get<std::string>());
    else throw invalid("'stop' must be a string or a list of at most 4 strings", "stop", "invalid_type");
  }
  if (chat) {
    c.logprobs = f.boolean("logprobs").value_or(false);
    c.top_logprobs = int(f.integer("top_logprobs", 0, 20).value_or(0));
    if (c.top_logprobs > 0 && !c.logprobs) throw invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  } else if (auto k = f.integer("logprobs", 0, 5)) {
    c.logprobs = true;
    c.top_logprobs = int(*k);
  }
  if (c.echo && c.logprobs && c.stream)
    throw invalid("'echo' with 'logprobs' is answered whole, not streamed; set 'stream' to false", "stream");
  try {
    s.check();
  } catch (const ft::Error& e) {
    throw invalid(e.what());
  }
  return c;
}

}  // namespace ftrun::serve
