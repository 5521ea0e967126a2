// HF chat templates (ft/text/chat_template.hpp), compiled once into the ft_text library.
#include "ft/text/chat_template.hpp"

#include <fstream>
#include <iterator>
#include <map>

#include "ft/core/error.hpp"
#include "ft/text/jinja/json.hpp"
#include "ft/text/jinja/parser.hpp"
#include "ft/text/jinja/renderer.hpp"

namespace ft::text {

ChatOptions ChatOptions::from_tokenizer_config(const nlohmann::ordered_json& config) {
  ChatOptions options;
  for (auto it = config.begin(); it != config.end(); ++it) {
    const std::string& key = it.key();
    if (key.size() < 6 || key.compare(key.size() - 6, 6, "_token") != 0) continue;
    std::optional<std::string> token;
    if (it->is_string()) token = it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
      token = (*it)["content"].get<std::string>();
    if (!token) continue;
    if (key == "bos_token") {
      options.bos_token = token;
    } else if (key == "eos_token") {
      options.eos_token = token;
    } else {
      options.variables[key] = *token;
    }
  }
  return options;
}

namespace {

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(file.string() + ": cannot be opened");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

template <class Map>
std::string names(const Map& templates) {
  std::string out;
  for (const auto& [k, v] : templates) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

template <class Map>
std::string choose(const Map& templates, std::string_view name, bool with_tools, const std::string& where) {
  if (!name.empty()) {
    if (!templates.count(std::string(name)))
      throw Error(where + ": has no chat template named '" + std::string(name) + "' (it has " + names(templates) + ")");
    return std::string(name);
  }
  if (templates.size() == 1 && templates.count("default")) return "default";
  if (with_tools && templates.count("tool_use")) return "tool_use";
  if (templates.count("default")) return "default";
  throw Error(where + ": has several chat templates and none named 'default'; pick one of " + names(templates));
}

}  // namespace

ChatTemplate ChatTemplate::parse(std::string source, std::string origin) {
  ChatTemplate t;
  t.template_ = std::make_shared<const jinja::Template>(jinja::parse_template(source, std::move(origin)));
  return t;
}

ChatTemplate ChatTemplate::load(const std::filesystem::path& dir, std::string_view name, bool with_tools) {
  std::vector<std::pair<std::string, std::filesystem::path>> files;
  if (std::filesystem::exists(dir / "chat_template.jinja")) files.emplace_back("default", dir / "chat_template.jinja");
  const auto extra = dir / "additional_chat_templates";
  if (std::filesystem::is_directory(extra)) {
    for (const auto& entry : std::filesystem::directory_iterator(extra))
      if (entry.path().extension() == ".jinja") files.emplace_back(entry.path().stem().string(), entry.path());
  }
  if (files.empty()) return from_tokenizer_config(dir / "tokenizer_config.json", name, with_tools);
  std::map<std::string, std::filesystem::path> by_name(files.begin(), files.end());
  const std::string chosen = choose(by_name, name, with_tools, dir.string());
  const auto& path = by_name.at(chosen);
  return parse(read_text(path), path.string());
}

ChatTemplate ChatTemplate::from_tokenizer_config(const std::filesystem::path& file, std::string_view name,
                                                 bool with_tools) {
  nlohmann::ordered_json config;
  try {
    config = nlohmann::ordered_json::parse(read_text(file));
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(file.string() + ": not valid JSON (byte " + std::to_string(e.byte) + ")");
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double
    throw Error(file.string() + ": not usable JSON (" + e.what() + ")");
  }
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) throw Error(file.string() + ": has no \"chat_template\"");
  if (it->is_string()) {
    if (!name.empty() && name != "default")
      throw Error(file.string() + ": has a single chat template, not one named '" + std::string(name) + "'");
    return parse(it->get<std::string>(), file.string() + "[chat_template]");
  }
  std::map<std::string, std::string> by_name;
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !entry.contains("template") ||
          !entry["template"].is_string())
        throw Error(file.string() + ": \"chat_template\" entries must be {\"name\": string, \"template\": string}");
      by_name[entry["name"].get<std::string>()] = entry["template"].get<std::string>();
    }
  } else {
    throw Error(file.string() + ": \"chat_template\" must be a string or a list of named templates");
  }
  const std::string chosen = choose(by_name, name, with_tools, file.string());
  return parse(by_name.at(chosen), file.string() + "[chat_template " + chosen + "]");
}

jinja::Rendered ChatTemplate::render_tracked(const nlohmann::ordered_json& context, const jinja::Limits& limits) const {
  return render_json(context, limits);
}
std::string ChatTemplate::render(const nlohmann::ordered_json& context, const jinja::Limits& limits) const {
  return render_json(context, limits).text;
}
std::string ChatTemplate::render(const nlohmann::json& context, const jinja::Limits& limits) const {
  return render_json(context, limits).text;
}

const std::string& ChatTemplate::origin() const { return template_->origin; }

template <class Json>
jinja::Rendered ChatTemplate::render_json(const Json& context, const jinja::Limits& limits) const {
  if (!context.is_object()) throw Error(origin() + ": the template context must be a JSON object");
  jinja::Value variables;
  try {
    variables = jinja::from_json(context);
  } catch (const jinja::Failure& f) {
    throw Error(origin() + ": template context: " + f.message);
  }
  return jinja::Renderer(*template_, limits).render(variables);
}

jinja::Rendered render_chat(const ChatTemplate& chat_template, const nlohmann::ordered_json& messages,
                            const ChatOptions& options) {
  const std::string& origin = chat_template.origin();
  if (!messages.is_array()) throw Error(origin + ": messages must be a JSON list of message objects");
  if (messages.empty())
    throw Error(origin + ": Cannot apply chat template to an empty conversation. Provide at least one message.");
  nlohmann::ordered_json chat = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& message = messages[i];
    if (!message.is_object()) throw Error(origin + ": message " + std::to_string(i) + " must be a JSON object");
    nlohmann::ordered_json kept = nlohmann::ordered_json::object();
    for (auto it = message.begin(); it != message.end(); ++it)
      if (!it->is_null()) kept[it.key()] = *it;
    // transformers' _alias_reasoning_fields: `thinking` goes first, and
    // `reasoning_content` is set, to the first reasoning field present.
    const nlohmann::ordered_json* reasoning = nullptr;
    for (const char* field : {"reasoning_content", "thinking", "reasoning"})
      if (!reasoning && kept.contains(field)) reasoning = &kept[field];
    if (reasoning) {
      nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
      const nlohmann::ordered_json value = *reasoning;
      aliased["thinking"] = kept.contains("thinking") ? kept["thinking"] : value;
      for (auto it = kept.begin(); it != kept.end(); ++it)
        if (it.key() != "thinking") aliased[it.key()] = *it;
      aliased["reasoning_content"] = value;
      kept = std::move(aliased);
    }
    chat.push_back(std::move(kept));
  }
  if (!options.documents.is_null()) {
    if (!options.documents.is_array()) throw Error(origin + ": documents must be a list of objects");
    for (const auto& d : options.documents)
      if (!d.is_object()) throw Error(origin + ": Documents should be a list of dicts with 'title' and 'text' keys!");
  }
  if (!options.tools.is_null() && !options.tools.is_array()) throw Error(origin + ": tools must be a list of JSON schemas");
  if (!options.variables.is_object()) throw Error(origin + ": ChatOptions::variables must be a JSON object");

  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  if (options.bos_token) context["bos_token"] = *options.bos_token;
  if (options.eos_token) context["eos_token"] = *options.eos_token;
  for (auto it = options.variables.begin(); it != options.variables.end(); ++it) {
    const std::string& key = it.key();
    if (key == "messages" || key == "tools" || key == "documents" || key == "add_generation_prompt")
      throw Error(origin + ": '" + key + "' is set by apply_chat_template itself and cannot be a ChatOptions variable");
    context[key] = *it;
  }
  context["messages"] = std::move(chat);
  context["tools"] = options.tools;
  context["documents"] = options.documents;
  context["add_generation_prompt"] = options.add_generation_prompt;
  return chat_template.render_tracked(context, options.limits);
}

std::string apply_chat_template(const ChatTemplate& chat_template, const nlohmann::ordered_json& messages,
                                const ChatOptions& options) {
  return render_chat(chat_template, messages, options).text;
}

}  // namespace ft::text
