#pragma once
// HF chat templates: turning a conversation into the text a model was trained
// on, exactly as transformers' `tokenizer.apply_chat_template(..., tokenize=
// False)` does (checked byte for byte against transformers 5.23 on the
// templates in tests/fixtures/chat_templates). The template is Jinja source
// that ships with the tokenizer; ft renders it with its own engine
// (ft/text/jinja/), which implements the part of Jinja chat templates use with
// jinja2's semantics and transformers' environment (trim_blocks,
// lstrip_blocks, the loopcontrols extension, {% generation %}, tojson as
// json.dumps, raise_exception, strftime_now, its namespace()).
//
// Where the template lives, in the order transformers looks (load()):
//   <model>/chat_template.jinja                 the default template
//   <model>/additional_chat_templates/<n>.jinja named templates
//   <model>/tokenizer_config.json "chat_template": a string, or a list of
//       {"name": ..., "template": ...} objects (from_tokenizer_config()).
// With several templates, one is chosen by name, else "tool_use" when tools
// are given, else "default".
//
// What the template sees (apply_chat_template() builds it as transformers
// does): `messages` (keys whose value is null dropped; a message with
// reasoning_content, thinking or reasoning gets both `thinking` and
// `reasoning_content`), `tools` and `documents` (None unless given),
// `add_generation_prompt`, the tokenizer's special tokens (bos_token,
// eos_token, ... and any other "*_token" of tokenizer_config.json), and any
// extra variables, which override the special tokens.
//
// Not supported: continue_final_message, and everything listed as such in
// the headers of ft/text/jinja/.
//
// The template engine is compiled once, into the ft_text library; this
// header is all that users of chat templates include.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"  // what every function here throws
#include "ft/text/jinja/rendered.hpp"

namespace ft::text {

namespace jinja {
struct Template;
}

struct ChatOptions {
  bool add_generation_prompt = false;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  nlohmann::ordered_json tools;      // null: the template sees None; else a list of JSON schemas
  nlohmann::ordered_json documents;  // null: None; else a list of objects
  // More template variables: other special tokens, date_string,
  // enable_thinking, ... They override bos_token and eos_token.
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  jinja::Limits limits;

  // The special tokens of a tokenizer_config.json (as strings or as
  // {"content": ...} AddedToken objects): bos_token and eos_token, and every
  // other "*_token" into `variables`.
  static ChatOptions from_tokenizer_config(const nlohmann::ordered_json& config);
};

class ChatTemplate {
public:
  // `origin` names the source in error messages ("<origin>:<line>:<col>: ...").
  static ChatTemplate parse(std::string source, std::string origin);
  // The chat template of an HF model or tokenizer directory (see the top of
  // this file). `name` picks one of several; `with_tools` prefers "tool_use".
  static ChatTemplate load(const std::filesystem::path& dir, std::string_view name = {}, bool with_tools = false);
  static ChatTemplate from_tokenizer_config(const std::filesystem::path& file, std::string_view name = {},
                                            bool with_tools = false);

  // Renders with `context` (an object) as the template's variables.
  // nlohmann::json keeps object keys sorted, so a template that prints or
  // iterates a dict sees them sorted; ordered_json keeps the written order,
  // as Python's dicts do.
  jinja::Rendered render_tracked(const nlohmann::ordered_json& context, const jinja::Limits& limits = {}) const;
  std::string render(const nlohmann::ordered_json& context, const jinja::Limits& limits = {}) const;
  std::string render(const nlohmann::json& context, const jinja::Limits& limits = {}) const;

  const std::string& origin() const;

private:
  ChatTemplate() = default;
  template <class Json>
  jinja::Rendered render_json(const Json& context, const jinja::Limits& limits) const;

  std::shared_ptr<const jinja::Template> template_;
};

// Renders `messages` (a list of message objects) with the template, building
// the template's variables as transformers' apply_chat_template does; the
// result's generation_spans locate the text of {% generation %} blocks (the
// assistant text, for templates that mark it).
jinja::Rendered render_chat(const ChatTemplate& chat_template, const nlohmann::ordered_json& messages,
                            const ChatOptions& options = {});

// The text of render_chat: transformers' apply_chat_template(..., tokenize=False).
std::string apply_chat_template(const ChatTemplate& chat_template, const nlohmann::ordered_json& messages,
                                const ChatOptions& options = {});

}  // namespace ft::text
