// ftrun serve: an OpenAI-compatible HTTP server (cpp-httplib) over the
// inference engine.
//
//   POST /v1/chat/completions   messages through the model's chat template
//   POST /v1/completions        plain prompts (a string, a list of strings, or token ids)
//   GET  /v1/models             the base model and every adapter, by the names clients use
//   GET  /health                200 while serving, 503 while shutting down
//   GET  /metrics               Prometheus text: requests, tokens, latency, queue
//
// Requests from all connections join one running batch between decode steps
// (infer/service.hpp); `stream: true` answers with server-sent events as the
// OpenAI API does, ending with "data: [DONE]". The `model` field picks the
// base model or an adapter (--adapter NAME=DIR), as vLLM does. Limits: a
// prompt plus max_tokens beyond --max-model-len or max_tokens beyond
// --max-tokens is a 400, a full queue (--max-queue waiting beyond the
// --max-num-seqs running) a 429. Errors are OpenAI's JSON error object.
// SIGTERM or SIGINT: new requests get 503, those in flight finish within
// --shutdown-timeout seconds and the rest are cancelled. A streaming client
// that goes away is noticed at the next token, and its slot is freed.
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <iomanip>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include <ft/infer/service.hpp>
#include <ft/infer/text_stream.hpp>

#include "commands.hpp"
#include "exit_code.hpp"
#include "model_session.hpp"

// After Eigen (through ft): a system header httplib pulls in defines a macro
// that breaks Eigen's templates.
#include <httplib.h>

namespace ftrun {
namespace {

using ft::index_t;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// An error answered as OpenAI's {"error": {...}} with an HTTP status.
struct ApiError {
  int status;
  std::string message, type = "invalid_request_error", param, code;
};

ApiError invalid(std::string message, std::string param = "", std::string code = "") {
  return {400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

void answer_error(httplib::Response& res, const ApiError& e) {
  json error = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) error["param"] = e.param;
  if (!e.code.empty()) error["code"] = e.code;
  res.status = e.status;
  res.set_content(json{{"error", error}}.dump(), "application/json");
}

// A histogram in Prometheus' form: cumulative buckets, sum and count.
class Histogram {
public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v) {
    const std::lock_guard lock(mutex_);
    ++counts_[std::size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin())];
    sum_ += v;
  }
  void write(std::ostream& out, const std::string& name, const std::string& help) const {
    const std::lock_guard lock(mutex_);
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < bounds_.size(); ++i) {
      cumulative += counts_[i];
      out << name << "_bucket{le=\"" << bounds_[i] << "\"} " << cumulative << "\n";
    }
    cumulative += counts_.back();
    out << name << "_bucket{le=\"+Inf\"} " << cumulative << "\n"
        << name << "_sum " << sum_ << "\n"
        << name << "_count " << cumulative << "\n";
  }

private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  double sum_ = 0;
};

struct Metrics {
  std::mutex mutex;
  std::map<std::pair<std::string, int>, std::uint64_t> requests;  // (endpoint, status) -> count
  std::atomic<std::uint64_t> prompt_tokens{0}, generation_tokens{0};
  Histogram latency{{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}};
  Histogram first_token{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};

  void count(const std::string& endpoint, int status) {
    const std::lock_guard lock(mutex);
    ++requests[{endpoint, status}];
  }
};

// What one API call asked for, checked.
struct Call {
  int adapter = -1;
  std::string model;
  std::vector<std::vector<std::int32_t>> prompts;  // chat: one
  std::optional<index_t> max_tokens;
  ft::infer::SamplingParams sampling;
  bool seeded = false;
  std::size_t n = 1;
  bool stream = false, include_usage = false, logprobs = false;
  int top_logprobs = 0;  // alternatives per token (chat: top_logprobs; completions: logprobs = N)
  std::vector<std::string> stop;
};

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

// One API call in flight: its choices' text streams, and what the engine's
// thread has produced for them that the connection's thread has not sent.
// Shared by both threads (the engine may finish a choice after the
// connection is gone).
struct Exchange {
  struct Piece {
    std::size_t choice;
    std::string text;
    std::int32_t token;
    float logprob;
    std::vector<ft::infer::TokenLogprob> top_logprobs;
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Piece> pieces;
  std::vector<std::unique_ptr<ft::infer::TextStream>> texts;
  std::vector<std::optional<ft::infer::Completion>> done;
  std::size_t finished = 0;
  std::atomic<bool> cancel{false};
  Clock::time_point start = Clock::now();
  bool first_token_seen = false;
};

class Server {
public:
  Server(const ServeOptions& o, ModelSession& session, std::string base_name)
      : o_(o), session_(session), base_name_(std::move(base_name)),
        max_model_len_(o.max_model_len > 0 ? o.max_model_len
                                           : std::min<index_t>(session.max_position_embeddings() > 0
                                                                   ? session.max_position_embeddings()
                                                                   : 2048,
                                                               2048)),
        decoder_(reserved(session.decoder(), max_model_len_, o.max_num_seqs)),
        service_(decoder_, std::size_t(o.max_queue), o.prefill_chunk) {
    models_[base_name_] = session.default_adapter();
    for (const auto& [name, index] : session.adapters()) {
      if (models_.contains(name)) throw ft::Error("--adapter " + name + ": the name is already the base model's");
      models_[name] = index;
    }
    routes();
  }

  httplib::Server& http() { return http_; }
  ft::infer::Service& service() { return service_; }
  const ft::infer::Decoder& decoder() const { return decoder_; }
  index_t max_model_len() const { return max_model_len_; }
  void start_draining() { draining_ = true; }

private:
  // The decoder with its caches made: slots sequences of max_model_len positions.
  static ft::infer::Decoder& reserved(ft::infer::Decoder& decoder, index_t max_model_len, index_t slots) {
    decoder.reserve(max_model_len, slots);
    return decoder;
  }

  void routes() {
    http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      res.status = draining_ ? 503 : 200;
      res.set_content(json{{"status", draining_ ? "shutting down" : "ok"}}.dump(), "application/json");
    });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { metrics(res); });
    http_.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/v1/models", req, res, [&] { list_models(res); });
    });
    http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/v1/chat/completions", req, res, [&] { complete(req, res, true); });
    });
    http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      guarded("/v1/completions", req, res, [&] { complete(req, res, false); });
    });
    http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      answer_error(res, {res.status, res.status == 404 ? "no route " + req.method + " " + req.path
                                                       : "request failed with HTTP " + std::to_string(res.status),
                         res.status == 404 ? "not_found_error" : "invalid_request_error"});
    });
    http_.set_payload_max_length(std::size_t(16) << 20);
    const std::size_t threads = std::size_t(o_.max_num_seqs + o_.max_queue) + 8;
    http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  }

  // Checks the API key, runs the handler, turns errors into OpenAI's JSON, counts the answer.
  template <class Handler>
  void guarded(const std::string& endpoint, const httplib::Request& req, httplib::Response& res, Handler handler) {
    try {
      if (!o_.api_key.empty() && req.get_header_value("Authorization") != "Bearer " + o_.api_key)
        throw ApiError{401, "Incorrect API key provided", "invalid_request_error", "", "invalid_api_key"};
      if (draining_) throw ApiError{503, "the server is shutting down", "server_error"};
      handler();
    } catch (const ApiError& e) {
      answer_error(res, e);
    } catch (const ft::Error& e) {
      answer_error(res, invalid(e.what()));
    } catch (const std::exception& e) {
      answer_error(res, {500, e.what(), "server_error"});
    }
    metrics_.count(endpoint, res.status == -1 ? 200 : res.status);  // httplib sets 200 after the handler
  }

  void list_models(httplib::Response& res) {
    json data = json::array();
    for (const auto& [name, adapter] : models_) {
      json m = {{"id", name}, {"object", "model"}, {"created", created_}, {"owned_by", "ft"}};
      m["root"] = name;
      m["parent"] = name == base_name_ ? json() : json(base_name_);
      m["max_model_len"] = max_model_len_;
      data.push_back(m);
    }
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  }

  void metrics(httplib::Response& res) {
    std::ostringstream out;
    out << "# HELP ft_requests_total Requests answered, by endpoint and HTTP status.\n"
        << "# TYPE ft_requests_total counter\n";
    {
      const std::lock_guard lock(metrics_.mutex);
      for (const auto& [key, n] : metrics_.requests)
        out << "ft_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} " << n << "\n";
    }
    out << "# HELP ft_prompt_tokens_total Prompt tokens of requests served.\n# TYPE ft_prompt_tokens_total counter\n"
        << "ft_prompt_tokens_total " << metrics_.prompt_tokens << "\n"
        << "# HELP ft_generation_tokens_total Tokens generated.\n# TYPE ft_generation_tokens_total counter\n"
        << "ft_generation_tokens_total " << metrics_.generation_tokens << "\n"
        << "# HELP ft_requests_running Sequences in the running batch.\n# TYPE ft_requests_running gauge\n"
        << "ft_requests_running " << service_.running() << "\n"
        << "# HELP ft_requests_waiting Sequences waiting for a slot.\n# TYPE ft_requests_waiting gauge\n"
        << "ft_requests_waiting " << service_.waiting() << "\n"
        << "# HELP ft_kv_cache_slots Sequences the key/value cache holds at once.\n# TYPE ft_kv_cache_slots gauge\n"
        << "ft_kv_cache_slots " << decoder_.slots() << "\n"
        << "# HELP ft_kv_cache_bytes Bytes of the key/value cache.\n# TYPE ft_kv_cache_bytes gauge\n"
        << "ft_kv_cache_bytes " << decoder_.bytes_per_sequence() * std::size_t(decoder_.slots()) << "\n";
    metrics_.latency.write(out, "ft_request_duration_seconds", "Time from request to its last token.");
    metrics_.first_token.write(out, "ft_time_to_first_token_seconds", "Time from request to its first token.");
    res.set_content(out.str(), "text/plain; version=0.0.4");
  }

  // Both completion endpoints: read the call, queue its choices, answer at once or as a stream.
  void complete(const httplib::Request& req, httplib::Response& res, bool chat) {
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::exception&) {
      throw invalid("the request body is not valid JSON", "", "invalid_json");
    }
    if (!body.is_object()) throw invalid("the request body must be a JSON object", "", "invalid_json");
    Call call = read_call(body, chat);
    auto exchange = std::make_shared<Exchange>();
    std::vector<ft::infer::Request> requests;
    std::size_t prompt_tokens = 0;
    for (const auto& prompt : call.prompts) {
      prompt_tokens += prompt.size();
      const index_t room = max_model_len_ - decoder_.virtual_tokens(call.adapter) - index_t(prompt.size());
      // Without max_tokens: completions' default 16, chat's whatever room is left (at least one token).
      const index_t asked = call.max_tokens.value_or(chat ? std::max<index_t>(room, 1) : 16);
      const index_t max_tokens = call.max_tokens ? asked : std::min(asked, std::max<index_t>(room, 1));
      if (max_tokens > room)
        throw invalid("This model's maximum context length is " + std::to_string(max_model_len_) +
                          " tokens. However, you requested " + std::to_string(index_t(prompt.size()) + max_tokens) +
                          " tokens (" + std::to_string(prompt.size()) + " in the prompt, " +
                          std::to_string(max_tokens) + " in the completion). Please reduce the prompt or max_tokens.",
                      chat ? "messages" : "prompt", "context_length_exceeded");
      for (std::size_t j = 0; j < call.n; ++j) requests.push_back(request(call, prompt, max_tokens, j, exchange));
    }
    exchange->done.resize(requests.size());
    switch (service_.submit(std::move(requests))) {
      case ft::infer::Service::Admission::full:
        throw ApiError{429, "the server is busy (" + std::to_string(o_.max_queue) +
                                " requests already wait); retry later",
                       "rate_limit_error", "", "rate_limit_exceeded"};
      case ft::infer::Service::Admission::closed: throw ApiError{503, "the server is shutting down", "server_error"};
      case ft::infer::Service::Admission::queued: break;
    }
    metrics_.prompt_tokens += prompt_tokens;
    const Answer answer{chat ? random_id("chatcmpl-") : random_id("cmpl-"), unix_time(), call.model, chat,
                        call.logprobs, call.include_usage, prompt_tokens};
    if (call.stream) stream(res, exchange, answer);
    else respond(res, *exchange, answer);
  }

  Call read_call(const json& body, bool chat) {
    const Fields f(body);
    Call c;
    const json* model = f.find("model");
    if (!model || !model->is_string()) throw invalid("'model' must be given, as a string", "model");
    c.model = model->get<std::string>();
    const auto known = models_.find(c.model);
    if (known == models_.end()) {
      std::string names;
      for (const auto& [name, _] : models_) names += (names.empty() ? "" : ", ") + name;
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
      if (!session_.has_chat_template())
        throw invalid("the model has no chat template; use /v1/completions", "messages");
      c.prompts.push_back(session_.encode_chat(conversation));
    } else {
      const json* prompt = f.find("prompt");
      if (!prompt) throw invalid("'prompt' must be given", "prompt");
      const index_t V = decoder_.vocab_size();
      auto ids = [&](const json& list) {
        std::vector<std::int32_t> out;
        for (const json& id : list) {
          if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= V)
            throw invalid("token ids in 'prompt' must be integers in [0, " + std::to_string(V) + ")", "prompt");
          out.push_back(id.get<std::int32_t>());
        }
        return out;
      };
      if (prompt->is_string()) c.prompts.push_back(session_.encode_text(prompt->get<std::string>()));
      else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer()) c.prompts.push_back(ids(*prompt));
      else if (prompt->is_array() && !prompt->empty()) {
        for (const json& p : *prompt) {
          if (p.is_string()) c.prompts.push_back(session_.encode_text(p.get<std::string>()));
          else if (p.is_array()) c.prompts.push_back(ids(p));
          else throw invalid("'prompt' must be a string, a list of strings, or token ids", "prompt", "invalid_type");
        }
      } else {
        throw invalid("'prompt' must be a string, a list of strings, or token ids", "prompt", "invalid_type");
      }
      if (f.boolean("echo").value_or(false)) throw invalid("'echo' is not supported", "echo");
    }
    for (const auto& p : c.prompts)
      if (p.empty()) throw invalid("the prompt has no tokens", chat ? "messages" : "prompt");
    const char* max_key = chat && f.find("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (const json* m = f.find(max_key); m && m->is_number_integer() && m->get<std::int64_t>() < 1)
      throw invalid(std::string("'") + max_key + "' must be at least 1, got " + m->dump(), max_key, "invalid_value");
    const std::int64_t cap = o_.max_tokens > 0 ? o_.max_tokens : max_model_len_;
    if (auto m = f.integer(max_key, 1, std::numeric_limits<std::int64_t>::max())) {
      if (*m > cap)
        throw invalid(std::string("'") + max_key + "' is " + std::to_string(*m) + "; this server allows at most " +
                          std::to_string(cap), max_key, "invalid_value");
      c.max_tokens = *m;
    } else if (o_.max_tokens > 0) {
      c.max_tokens = o_.max_tokens;
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
    try {
      s.check();
    } catch (const ft::Error& e) {
      throw invalid(e.what());
    }
    return c;
  }

  ft::infer::Request request(const Call& call, const std::vector<std::int32_t>& prompt, index_t max_tokens,
                             std::size_t j, const std::shared_ptr<Exchange>& exchange) {
    ft::infer::Request r;
    r.prompt = prompt;
    r.sampling = call.sampling;
    // Choices of one call draw differently; without a seed every call does.
    r.sampling.seed = call.seeded ? call.sampling.seed + j : std::random_device{}() ^ (std::uint64_t(std::random_device{}()) << 32);
    r.max_tokens = max_tokens;
    r.stop_tokens = session_.stop_tokens();
    r.adapter = call.adapter;
    r.logprobs = call.logprobs;
    r.top_logprobs = call.top_logprobs;
    const std::size_t choice = exchange->texts.size();
    exchange->texts.push_back(std::make_unique<ft::infer::TextStream>(
        [this](std::span<const std::int32_t> ids) { return session_.decode(ids); }, call.stop));
    r.on_token = [this, e = exchange, choice](const ft::infer::Generated& g) {
      ft::infer::TextStream& text = *e->texts[choice];
      std::string piece = text.push(g.token);
      ++metrics_.generation_tokens;
      const std::lock_guard lock(e->mutex);
      if (!e->first_token_seen) {
        e->first_token_seen = true;
        metrics_.first_token.observe(std::chrono::duration<double>(Clock::now() - e->start).count());
      }
      e->pieces.push_back({choice, std::move(piece), g.token, g.logprob, {g.top_logprobs.begin(), g.top_logprobs.end()}});
      e->changed.notify_all();
      return text.stopped();
    };
    r.cancelled = [exchange] { return exchange->cancel.load(); };
    r.on_done = [e = exchange, choice](ft::infer::Completion&& c) {
      std::string rest = e->texts[choice]->finish();
      const std::lock_guard lock(e->mutex);
      if (!rest.empty()) e->pieces.push_back({choice, std::move(rest), -1, 0, {}});
      e->done[choice] = std::move(c);
      ++e->finished;
      e->changed.notify_all();
    };
    return r;
  }

  struct Answer {
    std::string id;
    std::int64_t created;
    std::string model;
    bool chat, logprobs, include_usage;
    std::size_t prompt_tokens;
  };

  // Log-probabilities of some tokens, and of each one's most likely
  // alternatives (empty, or one list per token), as the OpenAI API shapes them.
  using Alternatives = std::span<const std::vector<ft::infer::TokenLogprob>>;
  // Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}.
  json chat_logprobs(std::span<const std::int32_t> tokens, std::span<const float> logprobs, Alternatives top) const {
    auto entry = [&](std::int32_t id, float logprob) {
      const std::int32_t ids[] = {id};
      const std::string token = session_.decode(ids);
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
  // as vLLM, each token's alternatives include the token itself.
  json completion_logprobs(std::span<const std::int32_t> tokens, std::span<const float> logprobs, Alternatives top) const {
    json strings = json::array(), values = json::array(), offsets = json::array(), alternatives = json::array();
    std::size_t offset = 0;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::string token = session_.decode(tokens.subspan(i, 1));
      strings.push_back(token);
      values.push_back(logprobs[i]);
      offsets.push_back(offset);
      offset += token.size();
      if (i < top.size()) {
        json these = json::object();
        for (const auto& t : top[i]) {
          const std::int32_t ids[] = {t.token};
          these[session_.decode(ids)] = t.logprob;
        }
        these[token] = logprobs[i];
        alternatives.push_back(std::move(these));
      }
    }
    return {{"tokens", strings}, {"token_logprobs", values},
            {"top_logprobs", top.empty() ? json() : alternatives}, {"text_offset", offsets}};
  }

  static std::string finish_reason(const ft::infer::Completion& c) {
    return c.finish_reason == "cancelled" ? "abort" : c.finish_reason;
  }

  json usage(const Exchange& e, const Answer& a) const {
    std::size_t generated = 0;
    for (const auto& c : e.done) generated += c ? c->tokens.size() : 0;
    return {{"prompt_tokens", a.prompt_tokens},
            {"completion_tokens", generated},
            {"total_tokens", a.prompt_tokens + generated}};
  }

  void respond(httplib::Response& res, Exchange& e, const Answer& a) {
    std::unique_lock lock(e.mutex);
    e.changed.wait(lock, [&] { return e.finished == e.done.size(); });
    metrics_.latency.observe(std::chrono::duration<double>(Clock::now() - e.start).count());
    json choices = json::array();
    for (std::size_t i = 0; i < e.done.size(); ++i) {
      const ft::infer::Completion& c = *e.done[i];
      if (c.finish_reason == "cancelled") throw ApiError{503, "the server shut down before the answer was finished", "server_error"};
      const std::string text(e.texts[i]->text());
      json choice = {{"index", i}};
      if (a.chat) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
        choice["logprobs"] = a.logprobs ? chat_logprobs(c.tokens, c.logprobs, c.top_logprobs) : json();
      } else {
        choice["text"] = text;
        choice["logprobs"] = a.logprobs ? completion_logprobs(c.tokens, c.logprobs, c.top_logprobs) : json();
      }
      choice["finish_reason"] = finish_reason(c);
      choices.push_back(choice);
    }
    json out = {{"id", a.id}, {"object", a.chat ? "chat.completion" : "text_completion"}, {"created", a.created},
                {"model", a.model}, {"choices", choices}, {"usage", usage(e, a)}};
    res.set_content(out.dump(), "application/json");
  }

  void stream(httplib::Response& res, const std::shared_ptr<Exchange>& exchange, const Answer& a) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, exchange, a](std::size_t, httplib::DataSink& sink) {
          Exchange& e = *exchange;
          auto send = [&](json choices, std::optional<json> usage_value = std::nullopt) {
            json chunk = {{"id", a.id}, {"object", a.chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", a.created}, {"model", a.model}, {"choices", std::move(choices)}};
            if (a.include_usage) chunk["usage"] = usage_value ? *usage_value : json();
            const std::string event = "data: " + chunk.dump() + "\n\n";
            return sink.write(event.data(), event.size());
          };
          auto piece_choice = [&](std::size_t index, const std::string& text, json logprobs, json reason) {
            json c = {{"index", index}};
            if (a.chat) c["delta"] = text.empty() && !reason.is_null() ? json::object() : json{{"content", text}};
            else c["text"] = text;
            c["logprobs"] = std::move(logprobs);
            c["finish_reason"] = std::move(reason);
            return c;
          };
          bool ok = true;
          if (a.chat)  // the role first, as OpenAI sends it
            for (std::size_t i = 0; i < e.done.size() && ok; ++i)
              ok = send(json::array({{{"index", i},
                                      {"delta", {{"role", "assistant"}, {"content", ""}}},
                                      {"logprobs", nullptr},
                                      {"finish_reason", nullptr}}}));
          std::vector<bool> reported(e.done.size(), false);
          std::size_t reported_count = 0;
          while (ok && reported_count < e.done.size()) {
            std::deque<Exchange::Piece> pieces;
            std::vector<std::size_t> finished_now;
            {
              std::unique_lock lock(e.mutex);
              e.changed.wait(lock, [&] { return !e.pieces.empty() || e.finished > reported_count; });
              pieces.swap(e.pieces);
              for (std::size_t i = 0; i < e.done.size(); ++i)
                if (e.done[i] && !reported[i]) finished_now.push_back(i);
            }
            for (const auto& p : pieces) {
              if (!ok) break;
              const bool has_logprob = a.logprobs && p.token >= 0;
              if (p.text.empty() && !has_logprob) continue;
              json logprobs;
              if (has_logprob) {
                const std::int32_t t[] = {p.token};
                const float l[] = {p.logprob};
                const Alternatives top = p.top_logprobs.empty() ? Alternatives() : Alternatives(&p.top_logprobs, 1);
                logprobs = a.chat ? chat_logprobs(t, l, top) : completion_logprobs(t, l, top);
              }
              ok = send(json::array({piece_choice(p.choice, p.text, logprobs, nullptr)}));
            }
            for (std::size_t i : finished_now) {
              if (!ok) break;
              ok = send(json::array({piece_choice(i, "", nullptr, finish_reason(*e.done[i]))}));
              reported[i] = true;
              ++reported_count;
            }
          }
          if (ok) {
            metrics_.latency.observe(std::chrono::duration<double>(Clock::now() - e.start).count());
            if (a.include_usage) {
              std::unique_lock lock(e.mutex);
              const json u = usage(e, a);
              lock.unlock();
              ok = send(json::array(), u);
            }
            const std::string done = "data: [DONE]\n\n";
            ok = ok && sink.write(done.data(), done.size());
          }
          if (!ok) {  // the client went away: free its slots
            e.cancel = true;
            return false;
          }
          sink.done();
          return true;
        },
        [exchange](bool success) {
          if (!success) exchange->cancel = true;
        });
  }

  const ServeOptions& o_;
  ModelSession& session_;
  std::string base_name_;
  index_t max_model_len_;
  ft::infer::Decoder& decoder_;
  ft::infer::Service service_;
  std::map<std::string, int> models_;  // name clients use -> adapter index (-1: the base model)
  std::int64_t created_ = unix_time();
  std::atomic<bool> draining_{false};
  Metrics metrics_;
  httplib::Server http_;
};

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024 && u < 3) bytes /= 1024, ++u;
  std::ostringstream s;
  s << std::fixed << std::setprecision(u == 0 ? 0 : 1) << bytes << " " << units[u];
  return s.str();
}

int serve(const ServeOptions& o) {
  // Signals are taken by sigwait below, on this thread; every thread started from here inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  const ModelSource source = resolve_model_source(o.model, o.checkpoint);
  ModelSession session(source, parse_adapter_options(o.adapters), o.engine);
  const std::string name = o.served_model_name.empty() ? o.model : o.served_model_name;
  Server server(o, session, name);
  const int port = o.port == 0 ? server.http().bind_to_any_port(o.host)
                               : (server.http().bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0) throw ft::Error("cannot listen on " + o.host + ":" + std::to_string(o.port));
  std::cerr << "ftrun serve: " << name << " (" << session.adapters().size() << " adapters), max_model_len "
            << server.max_model_len() << ", " << server.decoder().slots() << " sequences at once, key/value cache "
            << human_bytes(double(server.decoder().bytes_per_sequence()) * double(server.decoder().slots())) << "; "
            << session.engine_description() << "\n";
  std::cout << "ftrun serve: listening on http://" << o.host << ":" << port << std::endl;

  std::atomic<bool> listening{true};
  std::thread http([&] {
    server.http().listen_after_bind();
    listening = false;
  });
  int signal = 0;
  const timespec tick{0, 200'000'000};
  while (listening) {
    signal = sigtimedwait(&signals, nullptr, &tick);
    if (signal > 0) break;
  }
  if (signal > 0) {
    std::cerr << "ftrun serve: " << (signal == SIGTERM ? "SIGTERM" : "SIGINT") << ": finishing "
              << server.service().running() + server.service().waiting() << " requests (at most "
              << o.shutdown_timeout << " s), taking no new ones\n";
    server.start_draining();
  }
  server.service().shutdown(std::chrono::milliseconds(std::int64_t(o.shutdown_timeout * 1000)));
  server.http().stop();
  http.join();
  std::cerr << "ftrun serve: stopped\n";
  return signal > 0 ? ok : failed;
}

}  // namespace

int run_serve(const ServeOptions& options) {
  return exit_code_of([&] { return serve(options); });
}

}  // namespace ftrun
