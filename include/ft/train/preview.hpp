#pragma once
// A prompt answered greedily, before and after training, to see what changed.
// The prompt goes through the model's chat template (or alpaca's layout when
// the model has none), as training rows do.
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/data/example.hpp"
#include "ft/text/chat_template.hpp"
#include "ft/train/generate.hpp"
#include "ft/train/run.hpp"

namespace ft::train {

// "prompt" -> "answer"
template <element T, class M, class D>
std::string preview(Run<T, M, D>& run) {
  run.adapter->set_training(false, 0);
  const recipe::PreviewSection& p = run.recipe.preview;
  std::string prompt = p.prompt;
  if (run.text.chat) {
    text::ChatOptions options = run.text.special;
    options.add_generation_prompt = true;
    prompt = text::apply_chat_template(*run.text.chat,
                                       nlohmann::ordered_json::array({{{"role", "user"}, {"content", prompt}}}), options);
  } else {
    prompt = data::alpaca_prompt(prompt, "");
  }
  // A rendered template already has its special tokens.
  const text::Tokenizer& tokenizer = run.text.need_tokenizer("preview.prompt");
  const std::vector<std::int32_t> tokens = tokenizer.encode(prompt, !run.text.chat);
  auto rank0 = [&comm = *run.comm](std::int32_t token) {
    comm.broadcast(std::span<std::int32_t>(&token, 1), 0, "the preview's next token").wait();
    return token;
  };
  const auto answer = generate_greedy(*run.model, tokens, p.max_new_tokens, run.text.eos_id,
                                      run.adapter->virtual_tokens(), run.parallel->evaluation_hooks(),
                                      run.comm->size() > 1 ? std::function<std::int32_t(std::int32_t)>(rank0)
                                                           : std::function<std::int32_t(std::int32_t)>());
  return "\"" + p.prompt + "\" -> \"" + tokenizer.decode(answer) + "\"";
}

}  // namespace ft::train
