#pragma once
// Artificial datasets, for benchmarks that need data of a known shape and no
// files, after the ones ado's SFTTrainer actuator measures with (fms-hf-tuning's
// "news-chars-512-entries-4096" and "news-tokens-16384plus-entries-4096").
// A recipe names one instead of a file: data.train = "artificial:<name>".
//
//   [<word>-]chars-<N>-entries-<M>       M rows of N characters, a 127-character
//                                        prompt that ends in "\n### Response:",
//                                        and N characters more (ado's
//                                        layout). Formats: text (one string in
//                                        the text field; with response_template
//                                        "\n### Response:" only the second part
//                                        is scored, as ado trains) and
//                                        alpaca (input, instruction, output).
//   [<word>-]tokens-<N>[plus]-entries-<M> M rows of N token ids drawn uniformly
//                                        from the vocabulary, all scored. Format:
//                                        tokens.
// N and M may end in k (x 1024) or m (x 1024^2): tokens-128kplus-entries-320.
//
// The text is words from a fixed list drawn by ft::Rng from (seed, row), so a
// name and a seed give the same rows on every machine; it goes through the
// same ExampleBuilder as rows read from a file.
#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/core/random.hpp"
#include "ft/data/artificial_name.hpp"
#include "ft/data/examples.hpp"

namespace ft::data {

namespace detail {

// Exactly n characters of words drawn from (seed, row, part).
inline std::string artificial_text(std::int64_t n, std::uint64_t key) {
  static constexpr std::string_view words[] = {
      "the",    "market", "city",    "council", "report",  "said",    "on",     "tuesday", "new",   "plan",
      "would",  "bring",  "more",    "trains",  "and",     "buses",   "to",     "the",     "north", "while",
      "rates",  "rose",   "as",      "traders", "watched", "energy",  "prices", "fall",    "after", "a",
      "storm",  "closed", "ports",   "in",      "several", "regions", "early",  "week",    "local", "schools",
      "opened", "late",   "because", "of",      "snow",    "but",     "most",   "shops",   "were",  "busy"};
  Rng rng(key);
  std::string text;
  text.reserve(std::size_t(n) + 16);
  while (std::int64_t(text.size()) < n) {
    if (!text.empty()) text += rng.below(12) == 0 ? ". " : " ";
    text += words[rng.below(std::size(words))];
  }
  text.resize(std::size_t(n));
  return text;
}

// The 127-character prompt ado's datasets put between the two parts.
inline std::string artificial_prompt() {
  std::string p = "\n\n### Instruction:\nContinue the news report above in the same style, keeping every name, "
                  "place and number consistent";
  const std::string tail = "\n### Response:";
  p.resize(127 - tail.size(), '.');
  return p + tail;
}

}  // namespace detail

// The examples of an artificial dataset (`name` without the prefix), built by `builder`.
inline Examples artificial_examples(std::string_view name, const ExampleBuilder& builder, std::int64_t vocab_size,
                                    std::uint64_t seed) {
  const auto spec = parse_artificial(name);
  if (!spec)
    throw Error("\"" + std::string(artificial_prefix) + std::string(name) +
                "\" is not an artificial dataset name, allowed: " + artificial_names_allowed());
  const ExampleOptions& o = builder.options();
  const std::string where = std::string(artificial_prefix) + std::string(name) + ": ";
  if (spec->tokens != (o.format == "tokens"))
    throw Error(where + "has " + (spec->tokens ? "token ids" : "text") + ", which format \"" + o.format +
                "\" does not read, allowed: format " + (spec->tokens ? "\"tokens\"" : "\"text\" or \"alpaca\""));
  if (!spec->tokens && o.format != "text" && o.format != "alpaca")
    throw Error(where + "has text rows, allowed formats: \"text\" or \"alpaca\", not \"" + o.format + "\"");
  Examples out;
  out.rows.reserve(std::size_t(spec->entries));
  const std::string prompt = detail::artificial_prompt();
  for (std::int64_t i = 0; i < spec->entries; ++i) {
    const std::uint64_t key = derive_key(derive_key(seed, 0xa271f1c1a1ull), std::uint64_t(i));
    nlohmann::json row;
    if (spec->tokens) {
      Rng rng(key);
      std::vector<std::int32_t> ids(std::size_t(spec->length));
      for (auto& id : ids) id = std::int32_t(rng.below(std::uint64_t(vocab_size)));
      row[o.fields.input_ids] = std::move(ids);
    } else {
      const std::string first = detail::artificial_text(spec->length, derive_key(key, 1));
      const std::string second = " " + detail::artificial_text(spec->length - 1, derive_key(key, 2));
      if (o.format == "text") {
        row[o.fields.text] = first + prompt + second;
      } else {
        const std::size_t begin = prompt.find(":\n") + 2, end = prompt.rfind("\n### Response:");
        row[o.fields.instruction] = prompt.substr(begin, end - begin);
        row[o.fields.input] = first;
        row[o.fields.output] = second;
      }
    }
    try {
      Example e = builder.build(row);
      e.line = i + 1;
      out.rows.push_back(std::move(e));
    } catch (const BadRow& e) {
      if (o.on_bad_row == "fail") throw Error(where + "row " + std::to_string(i + 1) + ": " + e.what());
      ++out.skipped;
    }
  }
  if (out.rows.empty()) throw Error(where + "has no usable rows (all " + std::to_string(out.skipped) + " skipped)");
  return out;
}

}  // namespace ft::data
