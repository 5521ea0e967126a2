// A model directory's text tools (ft/text/model_text.hpp), compiled once into the ft_text library.
#include "ft/text/model_text.hpp"

#include "ft/io/hf_config.hpp"
#include "ft/text/sentencepiece.hpp"

namespace ft::text {

std::filesystem::path ModelText::tokenizer_file(const std::filesystem::path& dir) {
  for (const char* name : {"tokenizer.json", "tokenizer.model"})
    if (std::filesystem::exists(dir / name)) return dir / name;
  return {};
}

ModelText ModelText::load(const std::filesystem::path& dir) {
  ModelText t;
  t.dir = dir;
  if (std::filesystem::exists(dir / "config.json")) {
    const auto config = io::read_json_file<nlohmann::json>(dir / "config.json");
    const nlohmann::json& text = io::text_model_config(config);
    if (text.contains("vocab_size") && text["vocab_size"].is_number_integer())
      t.embedding_rows = text["vocab_size"].get<std::int64_t>();
  }
  const auto config_file = dir / "tokenizer_config.json";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (std::filesystem::exists(config_file)) config = io::read_json_file<nlohmann::ordered_json>(config_file);
  const std::filesystem::path file = tokenizer_file(dir);
  if (file.filename() == "tokenizer.json") {
    t.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_file(file));
  } else if (!file.empty()) {
    t.tokenizer = std::make_unique<Tokenizer>(
        Tokenizer::from_json(tokenizer_json_from_sentencepiece(file, nlohmann::json(config)), file.string()));
  }
  t.special = ChatOptions::from_tokenizer_config(config);
  const bool has_template = std::filesystem::exists(dir / "chat_template.jinja") ||
                            (config.contains("chat_template") && !config["chat_template"].is_null());
  if (has_template) t.chat = std::make_unique<ChatTemplate>(ChatTemplate::load(dir));
  if (t.special.eos_token && t.tokenizer)
    if (auto id = t.tokenizer->token_to_id(*t.special.eos_token)) t.eos_id = std::int32_t(*id);
  t.pad_id = t.eos_id >= 0 ? t.eos_id : 0;
  if (config.contains("pad_token") && config["pad_token"].is_string() && t.tokenizer)
    if (auto id = t.tokenizer->token_to_id(config["pad_token"].get<std::string>())) t.pad_id = std::int32_t(*id);
  return t;
}

const Tokenizer& ModelText::need_tokenizer(const std::string& what) const {
  if (!tokenizer)
    throw Error(dir.string() + ": has no tokenizer.json or tokenizer.model, and " + what +
                " reads text through the model's HF tokenizer (rows of token ids, data.format = \"tokens\", need none)");
  return *tokenizer;
}

std::int64_t ModelText::token_id_limit() const {
  if (embedding_rows > 0) return embedding_rows;
  return tokenizer ? tokenizer->vocab_size() : 0;
}
}  // namespace ft::text
