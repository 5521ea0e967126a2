// ftrun chat: a conversation in the terminal, the answer streamed as it is
// generated. Either the model is loaded here (MODEL: an HF model, a PEFT
// adapter or a training output_dir, with -c for a checkpoint) or a running
// server answers (--url, any OpenAI-compatible one; --model picks its model,
// else its first). --message asks one question and exits; otherwise lines
// from the terminal are the user's turns, with commands:
//   /system TEXT   set the system message (and start over)
//   /clear         forget the conversation
//   /help          list the commands
//   /quit          leave (so does end of input)
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include <ft/infer/generate.hpp>
#include <ft/infer/text_stream.hpp>

#include "commands.hpp"
#include "exit_code.hpp"
#include "model_session.hpp"

// After Eigen (through ft), as in serve_command.cpp.
#include <httplib.h>

namespace ftrun {

struct ChatOptions {
  std::string model;         // load this model here (HF model, PEFT adapter or training output_dir)
  std::string checkpoint;    // -c: one of an output_dir's checkpoints
  std::string url;           // or talk to this server
  std::string served_model;  // --model: the server's model to use; its first by default
  std::string api_key;
  std::string system;        // the system message
  std::string message;       // one question, then exit
  long max_tokens = 512;
  double temperature = 0, top_p = 1;
  long seed = 0;
  EngineChoice engine;
};

namespace {

using json = nlohmann::ordered_json;
// Answers a conversation, handing each settled piece of text to `print`; returns the whole answer.
using Answerer = std::function<std::string(const json& messages, const std::function<void(const std::string&)>& print)>;

ft::infer::SamplingParams sampling_of(const ChatOptions& o) {
  ft::infer::SamplingParams s;
  s.temperature = o.temperature;
  s.top_p = o.top_p;
  s.seed = std::uint64_t(o.seed);
  s.check();
  return s;
}

// The model loaded in this process: one sequence at a time.
Answerer local_answerer(const ChatOptions& o) {
  auto session = std::make_shared<ModelSession>(resolve_model_source(o.model, o.checkpoint),
                                                std::map<std::string, std::string>{}, o.engine);
  if (!session->has_chat_template()) throw ft::Error(o.model + ": has no chat template to chat with");
  const ft::index_t limit = session->max_position_embeddings() > 0 ? session->max_position_embeddings() : 2048;
  session->decoder().reserve(std::min<ft::index_t>(limit, 4096), 1);
  return [session, o](const json& messages, const std::function<void(const std::string&)>& print) {
    ft::infer::Decoder& decoder = session->decoder();
    ft::infer::Request r;
    r.prompt = session->encode_chat(messages);
    const ft::index_t room = decoder.max_model_len() - decoder.virtual_tokens(session->default_adapter()) -
                             ft::index_t(r.prompt.size());
    if (room < 1) throw ft::Error("the conversation no longer fits the context; /clear to start over");
    r.max_tokens = std::min<ft::index_t>(o.max_tokens, room);
    r.sampling = sampling_of(o);
    r.stop_tokens = session->stop_tokens();
    r.adapter = session->default_adapter();
    ft::infer::TextStream text([&](std::span<const std::int32_t> ids) { return session->decode(ids); }, {});
    r.on_token = [&](const ft::infer::Generated& g) {
      print(text.push(g.token));
      return false;
    };
    ft::infer::Batcher batcher(decoder);
    batcher.add(std::move(r));
    while (!batcher.idle()) batcher.step();
    print(text.finish());
    return std::string(text.text());
  };
}

// A server's /v1/chat/completions, streamed.
Answerer remote_answerer(const ChatOptions& o) {
  std::string base = o.url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  if (base.ends_with("/v1")) base.resize(base.size() - 3);
  auto client = std::make_shared<httplib::Client>(base);
  client->set_read_timeout(600);
  httplib::Headers headers;
  if (!o.api_key.empty()) headers.emplace("Authorization", "Bearer " + o.api_key);
  std::string model = o.served_model;
  if (model.empty()) {  // the server's first model
    const auto res = client->Get("/v1/models", headers);
    if (!res) throw ft::Error(o.url + ": cannot connect (" + httplib::to_string(res.error()) + ")");
    const json list = json::parse(res->body, nullptr, false);
    if (res->status != 200 || list.is_discarded() || !list.contains("data") || list["data"].empty())
      throw ft::Error(o.url + "/v1/models: HTTP " + std::to_string(res->status) + " " + res->body);
    model = list["data"][0]["id"].get<std::string>();
  }
  return [client, headers, model, o](const json& messages, const std::function<void(const std::string&)>& print) {
    json body = {{"model", model}, {"messages", messages}, {"stream", true}, {"max_tokens", o.max_tokens},
                 {"temperature", o.temperature}, {"top_p", o.top_p}, {"seed", o.seed}};
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.headers = headers;
    req.set_header("Content-Type", "application/json");
    req.body = body.dump();
    std::string pending, answer, error_body;
    req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
      pending.append(data, n);
      for (std::size_t end; (end = pending.find("\n\n")) != std::string::npos; pending.erase(0, end + 2)) {
        const std::string event = pending.substr(0, end);
        if (!event.starts_with("data: ")) {
          error_body += event;
          continue;
        }
        const std::string payload = event.substr(6);
        if (payload == "[DONE]") continue;
        const json chunk = json::parse(payload, nullptr, false);
        if (chunk.is_discarded() || !chunk.contains("choices")) continue;
        for (const json& choice : chunk["choices"])
          if (choice.contains("delta") && choice["delta"].contains("content") && choice["delta"]["content"].is_string()) {
            const std::string piece = choice["delta"]["content"].get<std::string>();
            answer += piece;
            print(piece);
          }
      }
      return true;
    };
    const auto res = client->send(req);
    if (!res) throw ft::Error("the server did not answer (" + httplib::to_string(res.error()) + ")");
    if (res->status != 200) {
      const json e = json::parse(error_body + pending, nullptr, false);
      const std::string message = !e.is_discarded() && e.contains("error") ? e["error"].value("message", "")
                                                                           : error_body + pending;
      throw ft::Error("HTTP " + std::to_string(res->status) + ": " + message);
    }
    return answer;
  };
}

void help(std::ostream& out) {
  out << "/system TEXT  set the system message (and start over)\n"
         "/clear        forget the conversation\n"
         "/help         this list\n"
         "/quit         leave (so does Ctrl-D)\n";
}

int chat(const ChatOptions& o, const Answerer& answer) {
  json history = json::array();
  std::string system = o.system;
  auto ask = [&](const std::string& text) {
    json messages = json::array();
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
    for (const auto& m : history) messages.push_back(m);
    messages.push_back({{"role", "user"}, {"content", text}});
    const std::string reply = answer(messages, [](const std::string& piece) { std::cout << piece << std::flush; });
    std::cout << "\n";
    history.push_back({{"role", "user"}, {"content", text}});
    history.push_back({{"role", "assistant"}, {"content", reply}});
  };
  if (!o.message.empty()) {
    ask(o.message);
    return ok;
  }
  std::cerr << "ftrun chat: type a message, /help for commands\n";
  std::string line;
  for (;;) {
    std::cerr << "> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line == "/quit" || line == "/exit") break;
    if (line == "/help") {
      help(std::cerr);
    } else if (line == "/clear") {
      history = json::array();
      std::cerr << "(conversation cleared)\n";
    } else if (line.starts_with("/system")) {
      system = line.size() > 8 ? line.substr(8) : "";
      history = json::array();
      std::cerr << (system.empty() ? "(no system message)" : "(system message set)") << "; conversation cleared\n";
    } else if (line.starts_with("/")) {
      std::cerr << "unknown command " << line << "\n";
      help(std::cerr);
    } else {
      try {
        ask(line);
      } catch (const ft::Error& e) {  // one bad turn does not end the conversation
        std::cerr << "\nftrun: " << e.what() << "\n";
      }
    }
  }
  return ok;
}

}  // namespace

int run_chat(const ChatOptions& options) {
  return exit_code_of([&] {
    if (options.url.empty() == options.model.empty())
      throw ft::Error("give a MODEL to load, or --url of a running server (not both)");
    sampling_of(options);
    Answerer answerer;
    if (!options.url.empty()) answerer = remote_answerer(options);
    else answerer = local_answerer(options);
    return chat(options, answerer);
  });
}

Command add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* command = app.add_subcommand("chat", "Chat in the terminal with a model, loaded here or served (--url)");
  add_model_options(command, o->model, o->checkpoint, o->engine, "Use",
                    " (a model loaded here)");
  command->add_option("--url", o->url, "A running OpenAI-compatible server, e.g. http://127.0.0.1:8000");
  command->add_option("--model", o->served_model, "With --url: the server's model (default: its first)");
  command->add_option("--api-key", o->api_key, "With --url: the server's API key")->envname("OPENAI_API_KEY");
  command->add_option("--system", o->system, "The system message");
  command->add_option("-m,--message", o->message, "Ask this one question, print the answer and exit");
  command->add_option("--max-tokens", o->max_tokens, "Longest answer, in tokens")->check(CLI::PositiveNumber)->capture_default_str();
  command->add_option("--temperature", o->temperature, "0: greedy")->check(CLI::NonNegativeNumber)->capture_default_str();
  command->add_option("--top-p", o->top_p, "Keep the most likely tokens whose probabilities sum to p");
  command->add_option("--seed", o->seed, "Seed of the sampling")->capture_default_str();
  return {command, [o] { return run_chat(*o); }};
}

}  // namespace ftrun
