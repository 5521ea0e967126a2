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
// A call is read in serve_request.cpp and answered in serve_response.cpp.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include <ft/infer/service.hpp>
#include <ft/infer/text_stream.hpp>

#include "commands.hpp"
#include "control/job_registry.hpp"
#include "exit_code.hpp"
#include "model_session.hpp"
#include "serve_metrics.hpp"
#include "serve_request.hpp"
#include "serve_response.hpp"

// After Eigen (through ft): a system header httplib pulls in defines a macro
// that breaks Eigen's templates.
#include <httplib.h>

namespace ftrun {

struct ServeOptions {
  std::string model;                  // HF model, PEFT adapter or training output_dir
  std::string checkpoint;             // -c: one of an output_dir's checkpoints
  std::vector<std::string> adapters;  // --adapter NAME=DIR
  std::string served_model_name;      // the base model's name in the API; MODEL by default
  std::string host = "127.0.0.1";
  int port = 8000;                    // 0: any free port (printed)
  long max_model_len = 0;             // 0: the model's max_position_embeddings, at most 2048
  long max_num_seqs = 8;              // sequences in the running batch (key/value cache slots)
  long max_queue = 64;                // requests waiting beyond those; more get 429
  long max_tokens = 0;                // the most a request may ask for; 0: up to the context
  long prefill_chunk = 512;           // prompt tokens of one request fed per step; 0: whole prompts
  std::string api_key;
  EngineChoice engine;
  double shutdown_timeout = 30;       // seconds in-flight requests get after SIGTERM
};

namespace {

using ft::index_t;
using namespace serve;

void answer_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.body().dump(), "application/json");
}

// The HTTP side: routes, the API key, draining on shutdown, and each call
// from its request (serve_request.hpp) through the engine's service to its
// answer (serve_response.hpp).
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
    const Call call = read_call(body, chat, {models_, session_, decoder_.vocab_size(), max_model_len_, o_.max_tokens});
    auto exchange = std::make_shared<Exchange>();
    std::vector<ft::infer::Request> requests;
    std::size_t prompt_tokens = 0;
    for (std::size_t p = 0; p < call.prompts.size(); ++p) {
      const std::vector<std::int32_t>& prompt = call.prompts[p];
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
      for (std::size_t j = 0; j < call.n; ++j) {
        requests.push_back(request(call, prompt, max_tokens, j, exchange));
        if (call.echo) exchange->echoes.push_back({call.prompt_texts[p], prompt});
      }
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
    r.prompt_logprobs = call.echo && call.logprobs;
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

  void respond(httplib::Response& res, Exchange& e, const Answer& a) {
    std::unique_lock lock(e.mutex);
    e.changed.wait(lock, [&] { return e.finished == e.done.size(); });
    metrics_.latency.observe(std::chrono::duration<double>(Clock::now() - e.start).count());
    res.set_content(whole_answer(e, a, session_).dump(), "application/json");
  }

  void stream(httplib::Response& res, const std::shared_ptr<Exchange>& exchange, const Answer& a) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, exchange, a](std::size_t, httplib::DataSink& sink) {
          Exchange& e = *exchange;
          auto send = [&](json choices, std::optional<json> usage_value = std::nullopt) {
            const std::string event = chunk_event(a, std::move(choices), usage_value);
            return sink.write(event.data(), event.size());
          };
          bool ok = true;
          if (a.chat)  // the role first, as OpenAI sends it
            for (std::size_t i = 0; i < e.done.size() && ok; ++i) ok = send(json::array({role_choice(i)}));
          // An echoed prompt first, as vLLM sends it (set before the call was queued, so read without the lock).
          for (std::size_t i = 0; i < e.echoes.size() && ok; ++i)
            ok = send(json::array({piece_choice(a, i, e.echoes[i].text, nullptr, nullptr)}));
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
              json logprobs = piece_logprobs(p, a, session_);
              if (p.text.empty() && logprobs.is_null()) continue;
              ok = send(json::array({piece_choice(a, p.choice, p.text, std::move(logprobs), nullptr)}));
            }
            for (std::size_t i : finished_now) {
              if (!ok) break;
              ok = send(json::array({piece_choice(a, i, "", nullptr, finish_reason(*e.done[i]))}));
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

control::JobRecord serving_record(const std::string& model, const std::string& address) {
  control::JobRecord record;
  record.id = control::job_id("serve", ::getpid());
  record.kind = "serve";
  record.pid = ::getpid();
  record.recipe = model;
  record.output_dir = address;
  return record;
}

int serve_until_stopped(const ServeOptions& o) {
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
  std::optional<control::Registration> registration;
  try {
    registration.emplace(serving_record(name, "http://" + o.host + ":" + std::to_string(port)), [&](const std::string& request) {
      if (request == "status")
        return nlohmann::ordered_json{{"ok", true}, {"state", "serving"}, {"running", server.service().running()},
                                      {"waiting", server.service().waiting()}};
      if (request == "stop") {
        ::kill(::getpid(), SIGTERM);  // taken below, as an operator's SIGTERM
        return nlohmann::ordered_json{{"ok", true}, {"says", "finishes the requests in flight and stops"}};
      }
      if (request == "abort") return nlohmann::ordered_json{{"ok", true}, {"says", "ends now"}};
      return nlohmann::ordered_json{{"ok", false}, {"error", "a server answers status, stop and abort; it has nothing to save"}};
    });
  } catch (const std::exception& e) {
    std::cerr << "ftrun serve: ftrun control cannot reach this server: " << e.what() << "\n";
  }

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
  return exit_code_of([&] { return serve_until_stopped(options); });
}

Command add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* command = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  add_model_options(command, o->model, o->checkpoint, o->engine, "Serve")->required();
  command->add_option("--adapter", o->adapters, "NAME=DIR: a PEFT adapter clients pick with \"model\": NAME (repeatable)");
  command->add_option("--served-model-name", o->served_model_name, "The base model's name in the API (default: MODEL as given)");
  command->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  command->add_option("--port", o->port, "Port (0: any free one, printed)")->capture_default_str();
  command->add_option("--max-model-len", o->max_model_len, "Longest prompt plus answer, in tokens (default: the model's, at most 2048)");
  command->add_option("--max-num-seqs", o->max_num_seqs, "Sequences generated at once")->check(CLI::PositiveNumber)->capture_default_str();
  command->add_option("--max-queue", o->max_queue, "Requests that may wait for a slot; more get HTTP 429")->check(CLI::NonNegativeNumber)->capture_default_str();
  command->add_option("--max-tokens", o->max_tokens, "The most tokens a request may ask for (0: up to the context)")->check(CLI::NonNegativeNumber);
  command->add_option("--prefill-chunk", o->prefill_chunk, "Prompt tokens of one request fed per step, so a long prompt does not stall the others (0: whole prompts)")->check(CLI::NonNegativeNumber)->capture_default_str();
  command->add_option("--api-key", o->api_key, "Require \"Authorization: Bearer KEY\" on /v1/");
  command->add_option("--shutdown-timeout", o->shutdown_timeout, "Seconds in-flight requests get to finish after SIGTERM")->check(CLI::NonNegativeNumber)->capture_default_str();
  return {command, [o] { return run_serve(*o); }};
}

}  // namespace ftrun
