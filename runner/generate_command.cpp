// ftrun generate: text from a model with its key/value cache (ft/infer/).
// Prompts come from --prompt (repeatable) or a JSONL file (one {"prompt":
// ...} or {"messages": [...]} per line); by default each goes through the
// model's chat template as a user message (--raw sends the text as it is).
// All prompts run together, as many at a time as --batch allows. Greedy by
// default (--temperature 0), so the same command gives the same text.
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include <ft/data/model_text.hpp>
#include <ft/infer/generate.hpp>
#include <ft/io/hf_config.hpp>
#include <ft/models/load.hpp>

#include "commands.hpp"
#include "exit_code.hpp"

namespace ftrun {
namespace {

using ft::index_t;

// The tokens that end a generation: generation_config.json's eos_token_id
// (a number or a list), else the tokenizer's EOS.
std::vector<std::int32_t> stop_tokens_of(const std::filesystem::path& dir, const ft::data::ModelText& text) {
  std::vector<std::int32_t> ids;
  const auto file = dir / "generation_config.json";
  if (std::filesystem::exists(file)) {
    const nlohmann::json g = ft::io::read_json_file(file);
    if (g.contains("eos_token_id")) {
      const auto& e = g["eos_token_id"];
      if (e.is_number_integer()) ids.push_back(e.get<std::int32_t>());
      else if (e.is_array())
        for (const auto& x : e) ids.push_back(x.get<std::int32_t>());
    }
  }
  if (ids.empty() && text.eos_id >= 0) ids.push_back(text.eos_id);
  return ids;
}

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

template <ft::element T>
int generate(const GenerateOptions& o) {
  const std::filesystem::path dir = o.model;
  auto model = ft::models::load_pretrained<T>(dir);
  const ft::data::ModelText text = ft::data::ModelText::load(dir);
  const auto prompts = read_prompts(o);
  if (!o.raw && !text.chat)
    throw ft::Error(o.model + ": has no chat template; use --raw to send the prompt text as it is");
  std::vector<ft::infer::Request> requests;
  for (const auto& messages : prompts) {
    ft::infer::Request r;
    if (o.raw) {
      std::string joined;
      for (const auto& m : messages) joined += m["content"].get<std::string>();
      r.prompt = text.tokenizer->encode(joined, true);
    } else {
      ft::data::ChatOptions options = text.special;
      options.add_generation_prompt = true;
      r.prompt = text.tokenizer->encode(ft::data::apply_chat_template(*text.chat, messages, options), false);
    }
    r.sampling = {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p, .min_p = o.min_p,
                  .repetition_penalty = o.repetition_penalty, .seed = std::uint64_t(o.seed)};
    r.max_tokens = o.max_tokens;
    r.stop_tokens = stop_tokens_of(dir, text);
    if (!o.stop.empty())
      r.stop = [&text, stops = o.stop](std::span<const std::int32_t> out) {
        const std::string s = text.tokenizer->decode(out, true);
        for (const std::string& stop : stops)
          if (s.find(stop) != std::string::npos) return true;
        return false;
      };
    requests.push_back(std::move(r));
  }
  index_t longest = 0;
  for (const auto& r : requests) longest = std::max(longest, index_t(r.prompt.size()) + r.max_tokens);
  ft::infer::Engine<T> engine(*model);
  ft::infer::KvPool<T> pool(model->config(), longest, std::min<index_t>(o.batch, index_t(requests.size())));
  const auto completions = ft::infer::generate(engine, pool, requests);
  for (std::size_t i = 0; i < completions.size(); ++i) {
    std::string answer = text.tokenizer->decode(completions[i].tokens, true);
    for (const std::string& stop : o.stop)  // the stop string and what follows it are not part of the answer
      if (auto at = answer.find(stop); at != std::string::npos) answer.resize(at);
    if (o.json) {
      nlohmann::ordered_json j;
      j["prompt_tokens"] = requests[i].prompt.size();
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
  try {
    if (options.dtype == "bfloat16") return generate<ft::bf16>(options);
    return generate<float>(options);
  } catch (const ft::Error& e) {
    std::cerr << "ftrun: " << e.what() << "\n";
    return bad_input;
  }
}

}  // namespace ftrun
