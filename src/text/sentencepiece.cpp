// tokenizer.json from SentencePiece's tokenizer.model (ft/text/sentencepiece.hpp),
// compiled once into the ft_text library.
#include "ft/text/sentencepiece.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace ft::text {

namespace {

using nlohmann::json;

// The parts of sentencepiece_model.proto's ModelProto that the pipeline reads.
struct Piece {
  enum Type { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };
  std::string text;
  int type = normal;
};
struct SentencePieceModel {
  std::vector<Piece> pieces;
  int model_type = 1;  // TrainerSpec.model_type: 1 Unigram (the default), 2 BPE, 3 word, 4 char
};

// Protocol buffers' wire format, as far as a ModelProto needs it.
class WireReader {
public:
  WireReader(std::string_view bytes, const std::string& file) : rest_(bytes), file_(file) {}
  bool done() const { return rest_.empty(); }

  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (rest_.empty()) fail("ends inside a number");
      const auto byte = std::uint8_t(rest_.front());
      rest_.remove_prefix(1);
      value |= std::uint64_t(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return value;
    }
    fail("holds a number longer than 64 bits");
  }
  // The next field's number and wire type.
  std::pair<std::uint32_t, int> key() {
    const std::uint64_t k = varint();
    return {std::uint32_t(k >> 3), int(k & 7)};
  }
  std::string_view bytes() {
    const std::uint64_t n = varint();
    if (n > rest_.size()) fail("ends inside a field");
    const std::string_view out = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return out;
  }
  void skip(int wire_type) {
    switch (wire_type) {
      case 0: varint(); return;
      case 1: take(8); return;
      case 2: bytes(); return;
      case 5: take(4); return;
      default: fail("holds a field of unknown wire type " + std::to_string(wire_type));
    }
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(file_ + ": not a SentencePiece model (tokenizer.model): the protobuf " + what);
  }

private:
  void take(std::size_t n) {
    if (n > rest_.size()) fail("ends inside a field");
    rest_.remove_prefix(n);
  }
  std::string_view rest_;
  const std::string& file_;
};

SentencePieceModel read_model(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot be opened");
  const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string file = path.string();
  SentencePieceModel model;
  WireReader top(content, file);
  while (!top.done()) {
    const auto [field, wire] = top.key();
    if (field == 1 && wire == 2) {  // repeated SentencePiece pieces
      WireReader r(top.bytes(), file);
      Piece piece;
      bool named = false;
      while (!r.done()) {
        const auto [f, w] = r.key();
        if (f == 1 && w == 2) {
          piece.text = std::string(r.bytes());
          named = true;
        } else if (f == 3 && w == 0) {
          piece.type = int(r.varint());
        } else {
          r.skip(w);
        }
      }
      if (!named) top.fail("has a piece without its text");
      model.pieces.push_back(std::move(piece));
    } else if (field == 2 && wire == 2) {  // TrainerSpec trainer_spec
      WireReader r(top.bytes(), file);
      while (!r.done()) {
        const auto [f, w] = r.key();
        if (f == 3 && w == 0) model.model_type = int(r.varint());
        else r.skip(w);
      }
    } else {
      top.skip(wire);
    }
  }
  if (model.pieces.empty()) top.fail("holds no pieces");
  return model;
}

// The number of bytes of each code point of valid UTF-8 `s`, in order.
std::vector<std::size_t> code_point_ends(const std::string& s) {
  std::vector<std::size_t> ends;
  for (std::size_t i = 0; i < s.size();) {
    const auto lead = std::uint8_t(s[i]);
    const std::size_t n = lead < 0x80 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
    i = std::min(s.size(), i + n);
    ends.push_back(i);
  }
  return ends;
}

// A special token as tokenizer_config.json writes it: a string or an AddedToken's dictionary.
struct ConfigToken {
  std::string content;
  json flags = json::object();  // lstrip, rstrip, single_word, normalized where the dictionary says
};
std::optional<ConfigToken> config_token(const json& config, const char* key, const char* fallback) {
  if (!config.contains(key)) {
    if (!fallback) return std::nullopt;
    return ConfigToken{fallback};
  }
  const json& v = config[key];
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return ConfigToken{v.get<std::string>()};
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    ConfigToken t{v["content"].get<std::string>()};
    for (const char* flag : {"lstrip", "rstrip", "single_word", "normalized"})
      if (v.contains(flag) && v[flag].is_boolean()) t.flags[flag] = v[flag];
    return t;
  }
  throw Error(std::string("tokenizer_config.json: \"") + key + "\" must be a string or an AddedToken's dictionary");
}

bool config_flag(const json& config, const char* key, bool fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_boolean()) throw Error(std::string("tokenizer_config.json: \"") + key + "\" must be true or false");
  return config[key].get<bool>();
}

json added_token(std::int64_t id, const std::string& content, bool special, const json& flags = json::object()) {
  auto flag = [&](const char* name) { return flags.contains(name) ? flags[name].get<bool>() : false; };
  return {{"id", id},           {"content", content},         {"single_word", flag("single_word")},
          {"lstrip", flag("lstrip")}, {"rstrip", flag("rstrip")}, {"normalized", flag("normalized")},
          {"special", special}};
}

json template_processing(const std::vector<std::pair<std::string, std::int64_t>>& bos,
                         const std::vector<std::pair<std::string, std::int64_t>>& eos) {
  auto special = [](const std::string& token, int type_id) {
    return json{{"SpecialToken", {{"id", token}, {"type_id", type_id}}}};
  };
  auto sequence = [](const char* id, int type_id) { return json{{"Sequence", {{"id", id}, {"type_id", type_id}}}}; };
  json single = json::array(), pair = json::array(), tokens = json::object();
  for (const auto& [token, id] : bos) single.push_back(special(token, 0));
  single.push_back(sequence("A", 0));
  for (const auto& [token, id] : eos) single.push_back(special(token, 0));
  pair = single;
  for (const auto& [token, id] : bos) pair.push_back(special(token, 1));
  pair.push_back(sequence("B", 1));
  for (const auto& [token, id] : eos) pair.push_back(special(token, 1));
  for (const auto* list : {&bos, &eos})
    for (const auto& [token, id] : *list) tokens[token] = {{"id", token}, {"ids", {id}}, {"tokens", {token}}};
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", tokens}};
}

}  // namespace

json tokenizer_json_from_sentencepiece(const std::filesystem::path& model_file, const json& tokenizer_config) {
  const json& config = tokenizer_config.is_object() ? tokenizer_config : json::object();
  // transformers' GemmaTokenizer: spaces become ▁ before BPE, never a prefix;
  // LlamaTokenizer (the default) prepends one through its Metaspace.
  bool gemma = false;
  if (config.contains("tokenizer_class") && config["tokenizer_class"].is_string()) {
    const std::string c = config["tokenizer_class"];
    gemma = c == "GemmaTokenizer" || c == "GemmaTokenizerFast";
    if (c != "LlamaTokenizer" && c != "LlamaTokenizerFast" && !gemma)
      throw Error(model_file.string() + ": tokenizer_config.json names tokenizer_class \"" + c +
                  "\", and ft builds a pipeline from tokenizer.model only as transformers' LlamaTokenizer and "
                  "GemmaTokenizer do; save the tokenizer with transformers to get a tokenizer.json");
  }
  const SentencePieceModel model = read_model(model_file);
  if (model.model_type != 2)
    throw Error(model_file.string() + ": a SentencePiece " +
                (model.model_type == 1 ? std::string("Unigram") : "word or character") +
                " model, and ft reads BPE ones (Llama, Mistral, OpenLLaMA); save the tokenizer with transformers "
                "to get a tokenizer.json");

  // The vocabulary: each piece at its index. transformers' dict keeps the
  // last index of a piece that repeats, and so does this.
  json vocab = json::object();
  std::unordered_map<std::string, std::int64_t> id_of;
  for (std::size_t i = 0; i < model.pieces.size(); ++i) {
    vocab[model.pieces[i].text] = std::int64_t(i);
    id_of[model.pieces[i].text] = std::int64_t(i);
  }
  // Every split of a piece into two pieces, by the piece's id, then by the split.
  json merges = json::array();
  for (std::size_t i = 0; i < model.pieces.size(); ++i) {
    const std::string& piece = model.pieces[i].text;
    if (id_of[piece] != std::int64_t(i)) continue;  // a repeated piece is merged once, at its last index
    const std::vector<std::size_t> ends = code_point_ends(piece);
    for (std::size_t k = 0; k + 1 < ends.size(); ++k) {
      const std::string left = piece.substr(0, ends[k]), right = piece.substr(ends[k]);
      if (id_of.contains(left) && id_of.contains(right)) merges.push_back({left, right});
    }
  }

  const bool legacy = config_flag(config, "legacy", false);
  const bool add_prefix_space = config_flag(config, "add_prefix_space", true);
  const bool add_bos = config_flag(config, "add_bos_token", true);
  const bool add_eos = config_flag(config, "add_eos_token", false);

  // Added tokens: tokenizer_config.json's, then the special tokens it names,
  // then SentencePiece's control and user-defined pieces; a token already
  // added keeps its first entry, and one the vocabulary lacks gets the next id.
  std::vector<json> added;
  std::int64_t next_id = std::int64_t(model.pieces.size());
  auto add = [&](const std::string& content, bool special, const json& flags, std::optional<std::int64_t> id) {
    for (const json& a : added)
      if (a["content"] == content) return;
    std::int64_t at;
    if (id) at = *id;
    else if (id_of.contains(content)) at = id_of[content];
    else at = next_id++;
    next_id = std::max(next_id, at + 1);
    added.push_back(added_token(at, content, special, flags));
  };
  if (config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object()) {
    for (const auto& [key, value] : config["added_tokens_decoder"].items()) {
      if (!value.is_object() || !value.contains("content") || !value["content"].is_string())
        throw Error("tokenizer_config.json: added_tokens_decoder[\"" + key + "\"] must hold an AddedToken's content");
      json flags = json::object();
      for (const char* flag : {"lstrip", "rstrip", "single_word", "normalized"})
        if (value.contains(flag) && value[flag].is_boolean()) flags[flag] = value[flag];
      std::int64_t id = -1;
      const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (error != std::errc() || end != key.data() + key.size() || id < 0)
        throw Error("tokenizer_config.json: added_tokens_decoder's key \"" + key +
                    "\" is not a token id (a non-negative integer)");
      add(value["content"].get<std::string>(), value.value("special", false), flags, id);
    }
  }
  std::optional<ConfigToken> bos, eos, unk;
  using Default = std::pair<const char*, const char*>;
  const std::vector<Default> llama_defaults{{"unk_token", "<unk>"}, {"bos_token", "<s>"}, {"eos_token", "</s>"},
                                            {"pad_token", nullptr}};
  const std::vector<Default> gemma_defaults{{"unk_token", "<unk>"}, {"bos_token", "<bos>"}, {"eos_token", "<eos>"},
                                            {"pad_token", "<pad>"}, {"mask_token", "<mask>"}};
  for (const auto& [key, fallback] : gemma ? gemma_defaults : llama_defaults) {
    std::optional<ConfigToken> t = config_token(config, key, fallback);
    if (!t) continue;
    json flags = t->flags;
    if (!flags.contains("normalized")) flags["normalized"] = false;
    add(t->content, true, flags, std::nullopt);
    if (std::string_view(key) == "bos_token") bos = t;
    if (std::string_view(key) == "eos_token") eos = t;
    if (std::string_view(key) == "unk_token") unk = t;
  }
  for (const Piece& p : model.pieces)
    if (p.type == Piece::control || p.type == Piece::user_defined)
      add(p.text, p.type == Piece::control, json{{"normalized", false}}, std::nullopt);
  std::sort(added.begin(), added.end(), [](const json& a, const json& b) { return a["id"] < b["id"]; });

  auto id_in = [&](const ConfigToken& t) {
    for (const json& a : added)
      if (a["content"] == t.content) return a["id"].get<std::int64_t>();
    return std::int64_t(-1);
  };
  std::vector<std::pair<std::string, std::int64_t>> bos_tokens, eos_tokens;
  if (add_bos && bos) bos_tokens.push_back({bos->content, id_in(*bos)});
  if (add_eos && eos) eos_tokens.push_back({eos->content, id_in(*eos)});

  json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                               {{"type", "ByteFallback"}},
                               {{"type", "Fuse"}}});
  if (add_prefix_space && !gemma) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  const json normalizer =
      gemma ? json{{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}} : json(nullptr);
  const json pre_tokenizer =
      gemma ? json{{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}}
            : json{{"type", "Metaspace"},
                   {"replacement", "\u2581"},
                   {"prepend_scheme", add_prefix_space ? (legacy ? "always" : "first") : "never"},
                   {"split", false}};

  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", normalizer},
          {"pre_tokenizer", pre_tokenizer},
          {"post_processor", template_processing(bos_tokens, eos_tokens)},
          {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", gemma && unk ? json(unk->content) : json(nullptr)},  // Llama's BPE has none
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

}  // namespace ft::text
