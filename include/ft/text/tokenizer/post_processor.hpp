#pragma once
// The post-processor adds special tokens around an encoded text when encode()
// is asked to (Llama's <s>, Llama 3's <|begin_of_text|>). ft encodes single
// texts only, so every supported processor reduces to ids before and ids after
// the text; a Sequence composes them.
//
// tokenizer.json, "post_processor": null or one of
//   {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
//        {"Sequence": {"id": "A", "type_id": 0}}], "pair": [...],
//    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
//   {"type": "ByteLevel", ...}                          (only moves offsets: no ids)
//   {"type": "RobertaProcessing"|"BertProcessing", "cls": ["<s>", 0], "sep": ["</s>", 2], ...}
//   {"type": "Sequence", "processors": [...]}
// The "pair" template is for pairs of texts, which ft does not encode.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ft/text/tokenizer/json_node.hpp"

namespace ft::text::tokenization {

class PostProcessor {
public:
  PostProcessor() = default;
  // `node` is the "post_processor" member; null means none.
  static PostProcessor from_json(const JsonNode& node) {
    PostProcessor p;
    if (!node.is_null()) p.add(node);
    return p;
  }

  void apply(std::vector<std::int32_t>& ids) const {
    ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  }
  const std::vector<std::int32_t>& prefix() const { return prefix_; }
  const std::vector<std::int32_t>& suffix() const { return suffix_; }

private:
  static std::int32_t id_of(const JsonNode& node) {
    return std::int32_t(node.integer(0, std::numeric_limits<std::int32_t>::max() - 1));
  }

  // A later processor wraps what the earlier ones produced.
  void wrap(const std::vector<std::int32_t>& before, const std::vector<std::int32_t>& after) {
    prefix_.insert(prefix_.begin(), before.begin(), before.end());
    suffix_.insert(suffix_.end(), after.begin(), after.end());
  }

  void add(const JsonNode& node) {
    const std::string type = node.type();
    if (type == "Sequence") {
      const JsonNode list = node.at("processors");
      for (std::size_t i = 0, n = list.array_size(); i < n; ++i) add(list[i]);
    } else if (type == "ByteLevel") {
    } else if (type == "TemplateProcessing") {
      add_template(node);
    } else if (type == "RobertaProcessing" || type == "BertProcessing") {
      auto pair_id = [](const JsonNode& p) {
        if (p.array_size() != 2) p.fail("expected [\"token\", id]");
        p[0].string();
        return id_of(p[1]);
      };
      wrap({pair_id(node.at("cls"))}, {pair_id(node.at("sep"))});
    } else {
      node.unsupported("post_processor type " + quote(type));
    }
  }

  void add_template(const JsonNode& node) {
    const JsonNode single = node.at("single");
    const JsonNode specials = node.at("special_tokens");
    specials.expect_object();
    std::vector<std::int32_t> before, after;
    bool seen_sequence = false;
    for (std::size_t i = 0, n = single.array_size(); i < n; ++i) {
      const JsonNode piece = single[i];
      piece.expect_object();
      if (auto seq = piece.find("Sequence")) {
        const std::string id = seq->at("id").string();
        if (id != "A") seq->fail("the single template can only hold sequence A, got " + quote(id));
        if (seen_sequence) seq->fail("sequence A appears twice in the single template");
        seen_sequence = true;
      } else if (auto special = piece.find("SpecialToken")) {
        const std::string name = special->at("id").string();
        auto entry = specials.find(name);
        if (!entry) special->fail("special token " + quote(name) + " is not in special_tokens");
        const JsonNode ids = entry->at("ids");
        for (std::size_t k = 0, m = ids.array_size(); k < m; ++k)
          (seen_sequence ? after : before).push_back(id_of(ids[k]));
      } else {
        piece.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, got " + dump(piece.value()));
      }
    }
    if (!seen_sequence) single.fail("the single template has no sequence A");
    wrap(before, after);
  }

  std::vector<std::int32_t> prefix_, suffix_;
};

}  // namespace ft::text::tokenization
