// ftrun generate: text from a model with its key/value cache (ft/infer/).
// Prompts come from --prompt (repeatable) or a JSONL file (one {"prompt":
// ...} or {"messages": [...]} per line); by default each goes through the
// model's chat template as a user message (--raw sends the text as it is).
// MODEL may also be an adapter or a training run (model_session.hpp).
// All prompts run together, as many at a time as --batch allows. Greedy by
// default (--temperature 0), so the same command gives the same text.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include <ft/infer/generate.hpp>
#include <ft/infer/text_stream.hpp>

#include "commands.hpp"
#include "exit_code.hpp"
#include "model_session.hpp"

namespace ftrun {

struct GenerateOptions {
  std::string model;                        // HF model, PEFT adapter or training output_dir
  std::string checkpoint;                   // -c: one of an output_dir's checkpoints ("latest", a step)
  std::vector<std::string> prompts;         // --prompt TEXT
  std::string prompts_file;                 // --prompts FILE.jsonl
  std::string system;                       // a system message before each prompt
  bool raw = false;                         // no chat template
  std::vector<std::string> stop;            // stop strings
  long max_tokens = 128;
  double temperature = 0, top_p = 1, min_p = 0, repetition_penalty = 1;
  long top_k = 0, seed = 0, batch = 16;
  EngineChoice engine;
  bool json = false;
};

namespace {

using ft::index_t;

// Each prompt's messages, from --prompt or the JSONL file.
std::vector<nlohmann::ordered_json> read_prompts(const GenerateOptions& o) {
  std::vector<nlohmann::ordered_json> out;
  auto user = [&](const std::string& text) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
    messages.push_back({{"role", "user"}, {"content", text}});
    return messages;
  };
  for (const std::string& p : o.prompts) out.push_back(user(p));
  if (!o.prompts_file.empty()) {
    std::ifstream in(o.prompts_file);
    if (!in) throw ft::Error(o.prompts_file + ": cannot be opened");
    std::string line;
    for (long number = 1; std::getline(in, line); ++number) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = o.prompts_file + ":" + std::to_string(number);
      nlohmann::ordered_json row;
      try {
        row = nlohmann::ordered_json::parse(line);
      } catch (const nlohmann::json::exception&) {
        throw ft::Error(where + ": not valid JSON");
      }
      if (row.contains("prompt") && row["prompt"].is_string()) out.push_back(user(row["prompt"].get<std::string>()));
      else if (row.contains("messages") && row["messages"].is_array()) out.push_back(row["messages"]);
      else throw ft::Error(where + ": needs \"prompt\" (a string) or \"messages\" (a list)");
    }
  }
  if (out.empty()) throw ft::Error("no prompt: give --prompt TEXT or --prompts FILE.jsonl");
  return out;
}

int generate(const GenerateOptions& o) {
  ModelSession session(resolve_model_source(o.model, o.checkpoint), {}, o.engine);
  const auto prompts = read_prompts(o);
  if (!o.raw && !session.has_chat_template())
    throw ft::Error(o.model + ": has no chat template; use --raw to send the prompt text as it is");
  std::vector<ft::infer::Request> requests;
  std::vector<std::unique_ptr<ft::infer::TextStream>> answers;
  for (const auto& messages : prompts) {
    ft::infer::Request r;
    if (o.raw) {
      std::string joined;
      for (const auto& m : messages) joined += m["content"].get<std::string>();
      r.prompt = session.encode_text(joined);
    } else {
      r.prompt = session.encode_chat(messages);
    }
    r.sampling = {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p, .min_p = o.min_p,
                  .repetition_penalty = o.repetition_penalty, .seed = std::uint64_t(o.seed)};
    r.max_tokens = o.max_tokens;
    r.stop_tokens = session.stop_tokens();
    r.adapter = session.default_adapter();
    answers.push_back(std::make_unique<ft::infer::TextStream>(
        [&session](std::span<const std::int32_t> ids) { return session.decode(ids); }, o.stop));
    r.on_token = [answer = answers.back().get()](const ft::infer::Generated& g) {
      answer->push(g.token);
      return answer->stopped();
    };
    requests.push_back(std::move(r));
  }
  ft::infer::Decoder& decoder = session.decoder();
  index_t longest = 0;
  for (const auto& r : requests)
    longest = std::max(longest, decoder.virtual_tokens(r.adapter) + index_t(r.prompt.size()) + r.max_tokens);
  decoder.reserve(longest, std::min<index_t>(o.batch, index_t(requests.size())));
  std::vector<std::size_t> prompt_tokens;
  for (const auto& r : requests) prompt_tokens.push_back(r.prompt.size());
  const auto completions = ft::infer::generate(decoder, std::move(requests));
  for (std::size_t i = 0; i < completions.size(); ++i) {
    answers[i]->finish();
    const std::string answer(answers[i]->text());
    if (o.json) {
      nlohmann::ordered_json j;
      j["prompt_tokens"] = prompt_tokens[i];
      j["text"] = answer;
      j["token_ids"] = completions[i].tokens;
      j["finish_reason"] = completions[i].finish_reason;
      std::cout << j.dump() << "\n";
    } else {
      std::cout << answer << "\n";
    }
  }
  return ok;
}

}  // namespace

int run_generate(const GenerateOptions& options) {
  return exit_code_of([&] { return generate(options); });
}

Command add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* command = app.add_subcommand("generate", "Generate text from a model with a key/value cache");
  add_model_options(command, o->model, o->checkpoint, o->engine, "Use")->required();
  command->add_option("-p,--prompt", o->prompts, "A prompt (repeatable)");
  command->add_option("--prompts", o->prompts_file, "JSONL file: {\"prompt\": ...} or {\"messages\": [...]} per line");
  command->add_option("--system", o->system, "A system message before each prompt");
  command->add_flag("--raw", o->raw, "Send the prompt text as it is, without the chat template");
  command->add_option("--max-tokens", o->max_tokens, "Longest answer, in tokens")->check(CLI::PositiveNumber)->capture_default_str();
  command->add_option("--temperature", o->temperature, "0: greedy")->check(CLI::NonNegativeNumber)->capture_default_str();
  command->add_option("--top-k", o->top_k, "Keep the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber);
  command->add_option("--top-p", o->top_p, "Keep the most likely tokens whose probabilities sum to p");
  command->add_option("--min-p", o->min_p, "Keep tokens at least min-p x the most likely's probability");
  command->add_option("--repetition-penalty", o->repetition_penalty, "HF's repetition penalty (1: off)");
  command->add_option("--seed", o->seed, "Seed of the sampling")->capture_default_str();
  command->add_option("--stop", o->stop, "Stop when the answer contains this text (repeatable)");
  command->add_option("--batch", o->batch, "Prompts generated at once")->check(CLI::PositiveNumber)->capture_default_str();
  command->add_flag("--json", o->json, "One JSON object per prompt: prompt_tokens, text, token_ids, finish_reason");
  return {command, [o] { return run_generate(*o); }};
}

}  // namespace ftrun
