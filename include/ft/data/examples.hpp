#pragma once
// Dataset rows to tokenised training examples: input_ids, and labels that are
// -100 wherever nothing is scored (the prompt) and the token itself elsewhere.
// Labels are unshifted, as HF's: models::causal_lm_batch applies the shift.
//
// File format: JSON Lines (one object per line; blank lines ignored), or one
// JSON array of objects when the first character that is not white space is
// '[', either compressed with gzip or zstd (data/compressed.hpp). A row's line is the line it starts on. Row formats (ExampleOptions::format;
// every field name can be changed through ExampleOptions::fields):
//   alpaca   {"instruction": non-empty string, "input": string (optional),
//             "output": non-empty string}; other keys are ignored.
//   chat     {"messages": [{"role": "system" | "user" | "assistant" | ...,
//             "content": string}, ...]} with at least one assistant message of
//             non-empty content; needs the model's chat template. A row with
//             ShareGPT's {"conversations": [{"from": "human" | "gpt" |
//             "system", "value": string}, ...]} instead reads as those roles.
//   text     {"text": non-empty string}: every token is scored, unless a
//            response template is given (below).
//   guanaco  text whose turns are marked "### Human:" and "### Assistant:"
//            (openassistant-guanaco's rows): text with those two templates.
//   tokens   {"input_ids": [ids], "labels": [ids or -100] (optional, same length)};
//            ids below the model's embedding rows (token_id_limit), and no
//            tokenizer needed.
//   preference  {"prompt": string, "chosen": non-empty string, "rejected":
//            non-empty string}, or the three as lists of messages (TRL's
//            preference rows; with messages the prompt may be implicit):
//            two examples, chosen then rejected, each scoring only its
//            completion (ExampleBuilder::preference).
//
// Response-only loss on text, as fms-hf-tuning's response_template: the
// scored part starts after the first occurrence of response_template and runs
// to the end; with an instruction_template too (multi-turn), every occurrence
// of the response template starts a scored part that ends where the next
// instruction template begins. The templates themselves are never scored. A
// row without the response template is a bad row. Matching is on characters,
// not token ids, so a template that tokenises differently in context (TRL's
// known pitfall with "\n### Response:") still matches.
//
// Chat (and alpaca with a chat template, as a user and an assistant message):
// the scored part of assistant message k starts where the template's prompt
// for messages[0..k) with add_generation_prompt ends, and ends where the
// rendering of messages[0..k] ends (its end-of-turn tokens are scored, so the
// model learns to stop). A template whose prompt is not a prefix of the
// conversation (one that drops a thinking block from history, say) must mark
// the assistant's text with {% generation %}; those spans are then what is
// scored. Alpaca without a template: Stanford Alpaca's prompt, and the output
// followed by the EOS token as the response.
//
// Scored characters become scored tokens as transformers' assistant mask
// does: every token that holds a character of a scored part.
//
// Special tokens follow transformers: text rendered by a chat template is
// tokenised as apply_chat_template(tokenize=True) does, without the
// post-processor's tokens (the template writes its own BOS; tokenizer(text)
// would add a second one); other text as tokenizer(text) does, with them. The
// EOS token is ChatOptions::eos_token (tokenizer_config.json's), which must be
// a token of the vocabulary.
//
// The pieces are separate so that a streaming reader can reuse them:
// JsonRecords splits a file into rows, ExampleBuilder turns one parsed row
// into an Example, read_examples() does both for a whole file and applies the
// bad-row policy.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <range/v3/view/facade.hpp>

#include "ft/core/error.hpp"
#include "ft/data/compressed.hpp"
#include "ft/data/example.hpp"
#include "ft/text/chat_template.hpp"
#include "ft/text/tokenizer.hpp"
#include "ft/text/tokenizer/utf8.hpp"
#include "ft/io/mapped_file.hpp"
#include "ft/device/cpu/launch.hpp"

namespace ft::data {

// ---------------------------------------------------------------------------
// Rows of a file

struct JsonRecord {
  std::int64_t line = 0;
  std::string_view text;  // one JSON value (not yet parsed)
};

// The rows of a dataset file's contents, one at a time: the non-blank lines of
// JSON Lines, or the elements of a JSON array (see the top of this file),
// found by tracking strings and nesting so that each element can be parsed,
// and skipped, on its own. Nothing is kept but the position, so a mapped
// multi-GB file streams through. A JSON array that is not closed, or text
// after it, is an error for the whole file, thrown when reading reaches it.
// `origin` names the file in errors; the records point into `content`.
class JsonRecords : public ranges::view_facade<JsonRecords, ranges::unknown> {
public:
  JsonRecords() = default;
  JsonRecords(std::string_view content, std::string origin) : content_(content), origin_(std::move(origin)) {
    if (content_.substr(0, 3) == "\xEF\xBB\xBF") content_.remove_prefix(3);  // a UTF-8 byte order mark
    std::size_t first = 0;
    for (; first < content_.size() && space(content_[first]); ++first) array_line_ += content_[first] == '\n';
    if (first < content_.size() && content_[first] == '[') array_open_ = first;
  }

private:
  friend ranges::range_access;

  static bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

  class cursor {
  public:
    cursor() = default;
    explicit cursor(const JsonRecords* records) : r_(records) {
      if (r_->array_open_ == std::string_view::npos) {
        at_ = 0;
      } else {
        at_ = r_->array_open_ + 1;
        line_ = r_->array_line_;
        skip_space();
        if (at_ < size() && text()[at_] == ']') {
          ++at_;
          finish_array();
          done_ = true;
          return;
        }
      }
      next();
    }
    const JsonRecord& read() const { return current_; }
    bool equal(ranges::default_sentinel_t) const { return done_; }
    void next() {
      if (r_->array_open_ == std::string_view::npos) {
        next_line();
      } else if (!array_closed_) {
        next_element();
      } else {
        done_ = true;
      }
    }

  private:
    std::string_view text() const { return r_->content_; }
    std::size_t size() const { return r_->content_.size(); }
    void skip_space() {
      for (; at_ < size() && space(text()[at_]); ++at_) line_ += text()[at_] == '\n';
    }

    void next_line() {
      while (at_ < size()) {
        std::size_t end = text().find('\n', at_);
        if (end == std::string_view::npos) end = size();
        std::string_view row = text().substr(at_, end - at_);
        const std::int64_t line = line_++;
        at_ = end + 1;
        while (!row.empty() && space(row.back())) row.remove_suffix(1);
        while (!row.empty() && space(row.front())) row.remove_prefix(1);
        if (!row.empty()) {
          current_ = {line, row};
          return;
        }
      }
      at_ = size();
      done_ = true;
    }

    void next_element() {
      skip_space();
      const std::size_t begin = at_;
      const std::int64_t begin_line = line_;
      int depth = 0;
      bool in_string = false;
      for (; at_ < size(); ++at_) {
        const char c = text()[at_];
        line_ += c == '\n';
        if (in_string) {
          if (c == '\\') {
            ++at_;  // an escaped character is never '"' or '\n' that counts
          } else if (c == '"') {
            in_string = false;
          }
        } else if (c == '"') {
          in_string = true;
        } else if (c == '[' || c == '{') {
          ++depth;
        } else if (c == ']' || c == '}') {
          if (depth == 0) break;
          --depth;
        } else if (c == ',' && depth == 0) {
          break;
        }
      }
      if (at_ >= size())
        throw Error(r_->origin_ + ":" + std::to_string(begin_line) + ": this element of the JSON array opened on line " +
                    std::to_string(r_->array_line_) +
                    " is not closed, allowed: one JSON array of objects, or one JSON object per line");
      std::size_t end = at_;
      while (end > begin && space(text()[end - 1])) --end;
      current_ = {begin_line, text().substr(begin, end - begin)};
      const char stop = text()[at_++];
      if (stop == ']') {
        finish_array();  // the element just read is still to be taken; next() then ends
      } else if (stop != ',') {
        throw Error(r_->origin_ + ":" + std::to_string(line_) + ": unexpected '" + std::string(1, stop) +
                    "' in the JSON array, allowed: one JSON array of objects");
      }
    }

    // After the closing ']': only white space may follow.
    void finish_array() {
      array_closed_ = true;
      skip_space();
      if (at_ < size())
        throw Error(r_->origin_ + ":" + std::to_string(line_) +
                    ": text after the JSON array's closing ']', allowed: one JSON array of objects");
    }

    const JsonRecords* r_ = nullptr;
    std::size_t at_ = 0;
    std::int64_t line_ = 1;
    bool array_closed_ = false, done_ = false;
    JsonRecord current_;
  };

  cursor begin_cursor() const { return cursor(this); }

  std::string_view content_;
  std::string origin_;
  std::size_t array_open_ = std::string_view::npos;  // where the '[' of a JSON array file is
  std::int64_t array_line_ = 1;                       // and its line
};

// ---------------------------------------------------------------------------
// One row to one example

class ExampleBuilder {
public:
  // Checks the options and the special tokens once; the tokenizer and the
  // template must outlive the builder. `chat` may be null (no template);
  // `tokenizer` too, for rows of token ids.
  ExampleBuilder(const text::Tokenizer* tokenizer, const text::ChatTemplate* chat, const text::ChatOptions& special,
                 const ExampleOptions& options)
      : tokenizer_(tokenizer), chat_(chat), special_(special), options_(options) {
    if (options.format != "alpaca" && options.format != "chat" && options.format != "text" &&
        options.format != "guanaco" && options.format != "tokens" && options.format != "preference")
      throw Error("dataset format '" + options.format +
                  "' is not known, allowed: alpaca, chat, text, guanaco, tokens, preference");
    if (!tokenizer && options.format != "tokens")
      throw Error("format '" + options.format + "' reads text, and the model has no tokenizer.json or "
                  "tokenizer.model, allowed: format 'tokens' (rows of token ids) or a model directory with one");
    if (!tokenizer && options.token_id_limit <= 0)
      throw Error("rows of token ids are checked against the model's vocabulary, and neither config.json's "
                  "vocab_size nor a tokenizer.json gives it");
    if (options.format == "guanaco") {
      if (options_.response_template.empty()) options_.response_template = "### Assistant:";
      if (options_.instruction_template.empty()) options_.instruction_template = "### Human:";
    }
    if (!options_.instruction_template.empty() && options_.response_template.empty())
      throw Error("an instruction_template needs a response_template (the instruction template only ends the "
                  "scored parts that response templates start)");
    if ((!options_.response_template.empty()) && options.format != "text" && options.format != "guanaco")
      throw Error("response_template applies to text rows; format '" + options.format +
                  "' marks its responses itself, allowed: format \"text\" or \"guanaco\" with a response_template");
    if (options.format == "chat" && !chat)
      throw Error("chat rows are rendered through the model's chat template, and it has none, allowed: a model "
                  "whose tokenizer_config.json or chat_template.jinja has a chat template, or another format");
    if (options.on_bad_row != "fail" && options.on_bad_row != "skip")
      throw Error("on_bad_row '" + options.on_bad_row + "' is not known, allowed: fail, skip");
    if (options.max_seq_length < 2)
      throw Error("max_seq_length " + std::to_string(options.max_seq_length) +
                  " is too small, allowed: 2 or more (one token and the one it predicts)");
    if (special.eos_token && tokenizer) {
      eos_id_ = tokenizer->token_to_id(*special.eos_token);
      if (!eos_id_)
        throw Error("eos_token '" + *special.eos_token +
                    "' is not a token of the tokenizer, allowed: a token of tokenizer.json's vocabulary");
    }
    if (special.bos_token && tokenizer) bos_id_ = tokenizer->token_to_id(*special.bos_token);
    if (options.pair_tokenisation != "dpo" && options.pair_tokenisation != "cpo")
      throw Error("pair_tokenisation '" + options.pair_tokenisation + "' is not known, allowed: dpo, cpo");
    if (options.format == "preference" && !eos_id_)
      throw Error("preference rows end each completion with the EOS token, as TRL does, and none is known, "
                  "allowed: a model whose tokenizer_config.json names its eos_token");
    if (options.format == "alpaca" && !chat && !eos_id_)
      throw Error(
          "alpaca rows without a chat template end each response with the EOS token, and none is known, "
          "allowed: ChatOptions::eos_token set (tokenizer_config.json's eos_token)");
  }

  // The examples of one parsed row: one, or a preference row's two (the
  // chosen completion, then the rejected one).
  std::vector<Example> build_all(const nlohmann::json& row) const {
    if (options_.format != "preference") return {build(row)};
    if (!row.is_object()) bad("the row is " + a_type(row) + ", not an object");
    return preference(row);
  }

  // The example of one parsed row; a BadRow when the row is unusable (see
  // the top of this file), an Error when the chat template cannot be used.
  Example build(const nlohmann::json& row) const {
    if (options_.format == "preference")
      throw Error("internal: a preference row makes two examples (ExampleBuilder::build_all)");
    if (!row.is_object()) bad("the row is " + a_type(row) + ", not an object");
    Example e;
    if (options_.format == "alpaca") {
      e = alpaca(row);
    } else if (options_.format == "chat") {
      e = chat_row(row);
    } else if (options_.format == "text" || options_.format == "guanaco") {
      e = text(row);
    } else {
      e = tokens(row);
    }
    const std::size_t prompt =
        std::size_t(std::find_if(e.labels.begin(), e.labels.end(), [](std::int32_t l) { return l != ignore_label; }) -
                    e.labels.begin());
    const auto n = std::min<std::size_t>(e.input_ids.size(), std::size_t(options_.max_seq_length));
    e.input_ids.resize(n);
    e.labels.resize(n);
    // labels[0] is never a target after the shift, so a row must score a later token.
    if (std::all_of(e.labels.begin() + std::ptrdiff_t(std::min<std::size_t>(n, 1)), e.labels.end(),
                    [](std::int32_t l) { return l == ignore_label; })) {
      if (options_.format != "tokens" && prompt > 0)
        bad("the prompt takes " + std::to_string(prompt) + " tokens and leaves no room for a response within " +
            "max_seq_length " + std::to_string(options_.max_seq_length));
      bad("no token after the first is scored within max_seq_length " + std::to_string(options_.max_seq_length));
    }
    return e;
  }

  const ExampleOptions& options() const { return options_; }

  // What a row of the format must look like, for messages.
  std::string allowed() const {
    const FieldNames& f = options_.fields;
    auto key = [](const std::string& k) { return "\"" + k + "\""; };
    if (options_.format == "alpaca")
      return "{" + key(f.instruction) + ": non-empty string, " + key(f.input) + ": string (optional), " +
             key(f.output) + ": non-empty string}";
    if (options_.format == "preference")
      return "{" + key(f.prompt) + ": string, " + key(f.chosen) + ": non-empty string, " + key(f.rejected) +
             ": non-empty string}, or the three as lists of {\"role\", \"content\"} messages (the prompt's may be "
             "left out: the turns chosen and rejected share)";
    if (options_.format == "chat")
      return "{" + key(f.messages) +
             R"(: [{"role": string, "content": string}, ...] with a non-empty assistant message}, or ShareGPT's )"
             R"({"conversations": [{"from": "human" | "gpt" | "system", "value": string}, ...]})";
    if (options_.format == "text" || options_.format == "guanaco") {
      std::string a = "{" + key(f.text) + ": non-empty string}";
      if (!options_.response_template.empty())
        a += " containing the response template " + nlohmann::json(options_.response_template).dump();
      return a;
    }
    return "{" + key(f.input_ids) + ": [token ids], " + key(f.labels) +
           ": [token ids or -100, one per input id] (optional)}";
  }

private:
  [[noreturn]] void bad(const std::string& what) const { throw BadRow(what + ", allowed: " + allowed()); }

  // "a string", "an array", ...: a JSON value's type for messages.
  static std::string a_type(const nlohmann::json& v) {
    const std::string name = v.type_name();
    return (name == "array" || name == "object" ? "an " : name == "null" ? "" : "a ") + name;
  }

  std::string string_field(const nlohmann::json& row, const std::string& key, bool required) const {
    const auto it = row.find(key);
    if (it == row.end() || it->is_null()) {
      if (required) bad("\"" + key + "\" is missing");
      return {};
    }
    if (!it->is_string()) bad("\"" + key + "\" is " + a_type(*it) + ", not a string");
    std::string s = it->get<std::string>();
    if (required && s.empty()) bad("\"" + key + "\" is empty");
    return s;
  }

  // How many leading elements (token ids, or characters) a and b share.
  template <class Sequence>
  static std::size_t common_prefix(const Sequence& a, const Sequence& b) {
    return std::size_t(
        std::mismatch(a.begin(), a.begin() + std::ptrdiff_t(std::min(a.size(), b.size())), b.begin()).first -
        a.begin());
  }

  // input_ids = full; labels = -100 over the prompt. The prompt's tokens are
  // normally a prefix of the full text's, but a tokenizer may merge the
  // prompt's last characters with the response's first (a prompt ending
  // mid-word), and a post-processor may append tokens (an EOS) to every
  // sequence; so the split is at the longest common prefix, and a token that
  // straddles the boundary is scored.
  static Example split_at_prompt(const std::vector<std::int32_t>& prompt, std::vector<std::int32_t> full) {
    const std::size_t n = common_prefix(prompt, full);
    Example e;
    e.labels = full;
    std::fill(e.labels.begin(), e.labels.begin() + std::ptrdiff_t(n), ignore_label);
    e.input_ids = std::move(full);
    return e;
  }

  // A preference row as TRL's DPOTrainer tokenises it: the prompt alone
  // (through the chat template with the generation prompt, for messages),
  // and the prompt followed by each completion (text completions end with
  // the EOS token); the completion starts where the prompt's tokens stop
  // being a prefix of both. Each sequence is cut at max_seq_length, keeping
  // its start; a prompt that leaves no room for a completion is a bad row.
  // With pair_tokenisation "cpo", as CPOTrainer and ORPOTrainer do instead
  // (cpo_pair).
  std::vector<Example> preference(const nlohmann::json& row) const {
    const FieldNames& f = options_.fields;
    for (const std::string* key : {&f.chosen, &f.rejected})
      if (!row.contains(*key) || row[*key].is_null()) bad("\"" + *key + "\" is missing");
    const bool messages = row[f.chosen].is_array();
    const bool cpo = options_.pair_tokenisation == "cpo";
    // The prompt's text and each whole sequence's; rendered text carries its own special tokens.
    std::string prompt_text, chosen_text, rejected_text;
    bool special_tokens = !cpo;
    if (messages) {
      if (!chat_)
        throw Error("preference rows of messages are rendered through the model's chat template, and it has none, "
                    "allowed: a model with a chat template, or rows of strings");
      nlohmann::ordered_json chosen = message_list(row, f.chosen), rejected = message_list(row, f.rejected);
      nlohmann::ordered_json prompt = nlohmann::ordered_json::array();
      if (row.contains(f.prompt) && !row[f.prompt].is_null()) {
        prompt = message_list(row, f.prompt);
      } else {  // an implicit prompt: the turns both conversations begin with
        std::size_t shared = 0;
        while (shared < chosen.size() && shared < rejected.size() && chosen[shared] == rejected[shared]) ++shared;
        prompt = nlohmann::ordered_json(chosen.begin(), chosen.begin() + std::ptrdiff_t(shared));
        chosen = nlohmann::ordered_json(chosen.begin() + std::ptrdiff_t(shared), chosen.end());
        rejected = nlohmann::ordered_json(rejected.begin() + std::ptrdiff_t(shared), rejected.end());
      }
      if (chosen.empty()) bad("\"" + f.chosen + "\" has no turn after the prompt");
      if (rejected.empty()) bad("\"" + f.rejected + "\" has no turn after the prompt");
      text::ChatOptions opts = special_;
      auto render = [&](const nlohmann::ordered_json& turns, bool generation_prompt) {
        opts.add_generation_prompt = generation_prompt;
        return text::render_chat(*chat_, turns, opts).text;
      };
      auto after_prompt = [&](const nlohmann::ordered_json& completion) {
        nlohmann::ordered_json all = prompt;
        for (const auto& m : completion) all.push_back(m);
        return render(all, false);
      };
      prompt_text = render(prompt, true);
      chosen_text = after_prompt(chosen);
      rejected_text = after_prompt(rejected);
      special_tokens = false;
    } else {
      prompt_text = string_field(row, f.prompt, false);
      std::string chosen = string_field(row, f.chosen, true), rejected = string_field(row, f.rejected, true);
      const std::string& eos = *special_.eos_token;
      if (!cpo && !chosen.ends_with(eos)) chosen += eos;
      if (!cpo && !rejected.ends_with(eos)) rejected += eos;
      chosen_text = prompt_text + chosen;
      rejected_text = prompt_text + rejected;
    }
    if (cpo) return cpo_pair(prompt_text, chosen_text, rejected_text);
    const std::vector<std::int32_t> prompt_ids = tokenizer_->encode(prompt_text, special_tokens);
    std::vector<std::int32_t> chosen_ids = tokenizer_->encode(chosen_text, special_tokens);
    std::vector<std::int32_t> rejected_ids = tokenizer_->encode(rejected_text, special_tokens);
    const std::size_t prompt_length =
        std::min(common_prefix(prompt_ids, chosen_ids), common_prefix(prompt_ids, rejected_ids));
    const auto limit = std::size_t(options_.max_seq_length);
    if (prompt_length >= limit) no_room(prompt_length);
    std::vector<Example> out;
    for (std::vector<std::int32_t>* ids : {&chosen_ids, &rejected_ids}) {
      if (ids->size() <= prompt_length)
        bad("\"" + (ids == &chosen_ids ? f.chosen : f.rejected) + "\" adds no token to the prompt");
      ids->resize(std::min(ids->size(), limit));
      Example& e = out.emplace_back();
      e.labels = *ids;
      std::fill_n(e.labels.begin(), prompt_length, ignore_label);
      e.input_ids = std::move(*ids);
    }
    return out;
  }

  [[noreturn]] void no_room(std::size_t prompt_tokens) const {
    bad("the prompt takes " + std::to_string(prompt_tokens) + " tokens and leaves no room for a completion within " +
        "max_seq_length " + std::to_string(options_.max_seq_length));
  }

  // A pair as TRL's CPOTrainer and ORPOTrainer (trl.experimental) tokenise
  // it. The prompt's text is what it and both sequences' texts begin with
  // (their apply_chat_template), tokenised without special tokens, as the
  // sequences are; each sequence's completion starts after the prompt's
  // tokens, one earlier when the sequence merged the prompt's last token
  // (the two prompts may then differ in that token alone). Each prompt
  // starts with the BOS token and each completion ends with the EOS token,
  // added by id where missing; a sequence over max_seq_length loses the end
  // of its completion.
  std::vector<Example> cpo_pair(std::string prompt_text, const std::string& chosen_text,
                                const std::string& rejected_text) const {
    const FieldNames& f = options_.fields;
    prompt_text.resize(std::min(common_prefix(prompt_text, chosen_text), common_prefix(prompt_text, rejected_text)));
    const std::vector<std::int32_t> prompt_ids = tokenizer_->encode(prompt_text, false);
    struct Split {
      std::vector<std::int32_t> prompt, completion;
    };
    auto split = [&](const std::string& text) {
      const std::vector<std::int32_t> full = tokenizer_->encode(text, false);
      std::size_t start = std::min(prompt_ids.size(), full.size());
      if (start > 0 && common_prefix(prompt_ids, full) < prompt_ids.size()) --start;
      return Split{{full.begin(), full.begin() + std::ptrdiff_t(start)}, {full.begin() + std::ptrdiff_t(start), full.end()}};
    };
    Split chosen = split(chosen_text), rejected = split(rejected_text);
    std::size_t differing = 0;
    for (std::size_t i = 0; i < std::min(chosen.prompt.size(), rejected.prompt.size()); ++i)
      differing += chosen.prompt[i] != rejected.prompt[i];
    const std::size_t a = chosen.prompt.size(), b = rejected.prompt.size();
    if (differing > 1 || (a > b ? a - b : b - a) > 1)
      bad("the prompt's tokens before \"" + f.chosen + "\" and before \"" + f.rejected +
          "\" differ in more than their last token");
    const auto limit = std::size_t(options_.max_seq_length);
    std::vector<Example> out;
    for (Split* s : {&chosen, &rejected}) {
      if (bos_id_ && (s->prompt.empty() || s->prompt.front() != *bos_id_)) s->prompt.insert(s->prompt.begin(), *bos_id_);
      if (s->completion.empty() || s->completion.back() != *eos_id_) s->completion.push_back(*eos_id_);
      if (s->prompt.size() >= limit) no_room(s->prompt.size());
      s->completion.resize(std::min(s->completion.size(), limit - s->prompt.size()));
      Example& e = out.emplace_back();
      e.input_ids = s->prompt;
      e.input_ids.insert(e.input_ids.end(), s->completion.begin(), s->completion.end());
      e.labels = e.input_ids;
      std::fill_n(e.labels.begin(), s->prompt.size(), ignore_label);
    }
    return out;
  }

  // A list of {"role", "content"} messages under `key`.
  nlohmann::ordered_json message_list(const nlohmann::json& row, const std::string& key) const {
    const nlohmann::json& list = row.at(key);
    if (!list.is_array()) bad("\"" + key + "\" is " + a_type(list) + ", not a list of messages like the others");
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < list.size(); ++i) {
      const nlohmann::json& m = list[i];
      const std::string where = "\"" + key + "\"[" + std::to_string(i) + "]";
      if (!m.is_object()) bad(where + " is " + a_type(m) + ", not an object");
      for (const char* field : {"role", "content"})
        if (!m.contains(field) || !m[field].is_string()) bad(where + " has no string \"" + field + "\"");
      messages.push_back({{"role", m["role"]}, {"content", m["content"]}});
    }
    return messages;
  }

  Example alpaca(const nlohmann::json& row) const {
    const FieldNames& f = options_.fields;
    const std::string instruction = string_field(row, f.instruction, true);
    const std::string input = string_field(row, f.input, false);
    const std::string output = string_field(row, f.output, true);
    if (!chat_) {
      const std::string prompt = alpaca_prompt(instruction, input);
      return split_at_prompt(tokenizer_->encode(prompt, true),
                             tokenizer_->encode(prompt + output + *special_.eos_token, true));
    }
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", input.empty() ? instruction : instruction + "\n\n" + input}});
    messages.push_back({{"role", "assistant"}, {"content", output}});
    return conversation(messages);
  }

  // A row's messages: {"role", "content"} objects under fields.messages, or
  // ShareGPT's "conversations" of {"from", "value"} (FastChat's and
  // Samantha's rows) when the row has no messages, with the speakers mapped
  // to roles as FastChat's and axolotl's loaders map them.
  Example chat_row(const nlohmann::json& row) const {
    const bool sharegpt = !row.contains(options_.fields.messages) && row.contains("conversations");
    const std::string& key = sharegpt ? std::string("conversations") : options_.fields.messages;
    const char* role_field = sharegpt ? "from" : "role";
    const char* content_field = sharegpt ? "value" : "content";
    const auto it = row.find(key);
    if (it == row.end() || it->is_null()) bad("\"" + key + "\" is missing");
    if (!it->is_array()) bad("\"" + key + "\" is " + a_type(*it) + ", not a list");
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    bool answered = false;
    for (std::size_t i = 0; i < it->size(); ++i) {
      const nlohmann::json& m = (*it)[i];
      const std::string where = "\"" + key + "\"[" + std::to_string(i) + "]";
      if (!m.is_object()) bad(where + " is " + a_type(m) + ", not an object");
      for (const char* field : {role_field, content_field})
        if (!m.contains(field) || !m[field].is_string())
          bad(where + " has no string \"" + field + "\"");
      std::string role = m[role_field].get<std::string>();
      if (sharegpt) role = sharegpt_role(role, where);
      const std::string content = m[content_field].get<std::string>();
      answered |= role == "assistant" && !content.empty();
      messages.push_back({{"role", role}, {"content", content}});
    }
    if (!answered) bad("\"" + key + "\" has no assistant message with content, so nothing would be scored");
    return conversation(messages);
  }

  std::string sharegpt_role(const std::string& from, const std::string& where) const {
    static const std::pair<const char*, const char*> roles[] = {
        {"human", "user"},    {"user", "user"},           {"gpt", "assistant"}, {"assistant", "assistant"},
        {"chatgpt", "assistant"}, {"system", "system"}, {"tool", "tool"}};
    for (const auto& [speaker, role] : roles)
      if (from == speaker) return role;
    bad(where + " has \"from\": " + nlohmann::json(from).dump() +
        ", which is no ShareGPT speaker ft knows (human, user, gpt, assistant, chatgpt, system, tool)");
  }

  // Renders the messages and scores the assistant messages (see the top of this file).
  Example conversation(const nlohmann::ordered_json& messages) const {
    text::ChatOptions opts = special_;
    const text::jinja::Rendered full = text::render_chat(*chat_, messages, opts);
    std::vector<std::int32_t> full_ids = tokenizer_->encode(full.text, false);
    std::vector<std::pair<std::size_t, std::size_t>> spans;
    bool prefix = true;
    for (std::size_t k = 0; k < messages.size() && prefix; ++k) {
      if (messages[k]["role"] != "assistant") continue;
      const nlohmann::ordered_json before(messages.begin(), messages.begin() + std::ptrdiff_t(k));
      const nlohmann::ordered_json through(messages.begin(), messages.begin() + std::ptrdiff_t(k + 1));
      opts.add_generation_prompt = true;
      const std::string prompt = text::render_chat(*chat_, before, opts).text;
      opts.add_generation_prompt = false;
      const std::string done = k + 1 == messages.size() ? full.text : text::render_chat(*chat_, through, opts).text;
      prefix = full.text.compare(0, prompt.size(), prompt) == 0 && full.text.compare(0, done.size(), done) == 0 &&
               prompt.size() <= done.size();
      spans.emplace_back(prompt.size(), done.size());
    }
    if (prefix) return scored_spans(full.text, spans, std::move(full_ids), false);
    if (full.generation_spans.empty())
      throw Error("chat template " + chat_->origin() +
                  ": the prompt it renders with add_generation_prompt is not the start of the conversation it "
                  "renders, and it marks no {% generation %} blocks, so the response cannot be located, allowed: "
                  "a template whose generation prompt is a prefix of the conversation, or that marks the "
                  "assistant's text with {% generation %}");
    return scored_spans(full.text, full.generation_spans, std::move(full_ids), false);
  }

  // Scores every token that holds a character of a span, as transformers'
  // assistant mask does. A span's first token is found as the longest common
  // prefix of the tokens of the text before it with the full text's tokens;
  // its end likewise, plus the token that straddles it, if any. A span that
  // reaches the end of the text scores everything after, appended EOS included.
  // `special`: whether `full` was encoded with the post-processor's tokens.
  Example scored_spans(std::string_view text, const std::vector<std::pair<std::size_t, std::size_t>>& spans,
                       std::vector<std::int32_t> full, bool special) const {
    Example e;
    e.labels.assign(full.size(), ignore_label);
    for (const auto& [begin, end] : spans) {
      if (begin >= end) continue;
      const std::size_t first = common_prefix(tokenizer_->encode(text.substr(0, begin), special), full);
      std::size_t last = full.size();
      if (end < text.size()) {
        const auto before_end = tokenizer_->encode(text.substr(0, end), special);
        last = common_prefix(before_end, full);
        if (last < before_end.size()) last = std::min(last + 1, full.size());
      }
      for (std::size_t i = first; i < last; ++i) e.labels[i] = full[i];
    }
    e.input_ids = std::move(full);
    return e;
  }

  // The scored character spans of a text under the response (and instruction) template.
  std::vector<std::pair<std::size_t, std::size_t>> response_spans(std::string_view text) const {
    const std::string& response = options_.response_template;
    const std::string& instruction = options_.instruction_template;
    std::vector<std::pair<std::size_t, std::size_t>> spans;
    std::size_t at = text.find(response);
    if (at == std::string_view::npos) bad("the text does not contain the response template");
    while (at != std::string_view::npos) {
      const std::size_t begin = at + response.size();
      if (instruction.empty()) return {{begin, text.size()}};
      const std::size_t end = std::min(text.find(instruction, begin), text.size());
      spans.emplace_back(begin, end);
      at = end == text.size() ? std::string_view::npos : text.find(response, end);
    }
    return spans;
  }

  Example text(const nlohmann::json& row) const {
    const std::string text = string_field(row, options_.fields.text, true);
    std::vector<std::int32_t> ids = tokenizer_->encode(text, true);
    if (eos_id_ && (ids.empty() || ids.back() != *eos_id_)) ids.push_back(*eos_id_);
    if (!options_.response_template.empty()) return scored_spans(text, response_spans(text), std::move(ids), true);
    Example e;
    e.labels = ids;
    e.input_ids = std::move(ids);
    return e;
  }

  std::vector<std::int32_t> id_list(const nlohmann::json& row, const std::string& key, bool labels) const {
    const auto& list = row.at(key);
    if (!list.is_array()) bad("\"" + key + "\" is " + a_type(list) + ", not a list");
    const std::int64_t vocab = options_.token_id_limit > 0 ? options_.token_id_limit : tokenizer_->vocab_size();
    std::vector<std::int32_t> ids;
    ids.reserve(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
      const auto& v = list[i];
      const std::string where = "\"" + key + "\"[" + std::to_string(i) + "]";
      if (!v.is_number_integer()) bad(where + " is " + a_type(v) + ", not an integer");
      const auto id = v.get<std::int64_t>();
      if ((id < 0 || id >= vocab) && !(labels && id == ignore_label))
        bad(where + " = " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
      ids.push_back(std::int32_t(id));
    }
    return ids;
  }

  Example tokens(const nlohmann::json& row) const {
    const FieldNames& f = options_.fields;
    if (!row.contains(f.input_ids)) bad("\"" + f.input_ids + "\" is missing");
    Example e;
    e.input_ids = id_list(row, f.input_ids, false);
    if (e.input_ids.empty()) bad("\"" + f.input_ids + "\" is empty");
    if (row.contains(f.labels) && !row[f.labels].is_null()) {
      e.labels = id_list(row, f.labels, true);
      if (e.labels.size() != e.input_ids.size())
        bad("\"" + f.labels + "\" has " + std::to_string(e.labels.size()) + " entries and \"" + f.input_ids +
            "\" " + std::to_string(e.input_ids.size()));
    } else {
      e.labels = e.input_ids;
    }
    return e;
  }

  const text::Tokenizer* tokenizer_;
  const text::ChatTemplate* chat_;
  text::ChatOptions special_;
  ExampleOptions options_;
  std::optional<std::int32_t> eos_id_, bos_id_;  // bos_id_: the BOS token, where the tokenizer has one
};

// ---------------------------------------------------------------------------
// A whole file

// Parquet and Arrow files (what HF datasets hold) are refused in one line
// that says how to write the rows as JSON Lines, by their first bytes.
inline void refuse_columnar(std::string_view content, const std::string& origin) {
  const char* kind = content.starts_with("PAR1") ? "a Parquet file"
                     : content.starts_with("ARROW1") ? "an Arrow file"
                     : content.starts_with("\xFF\xFF\xFF\xFF") ? "an Arrow stream (HF datasets' .arrow)"
                                                                  : nullptr;
  if (!kind) return;
  throw Error(origin + ": is " + kind + "; ft reads JSON Lines or JSON rows, allowed: the rows written out once, e.g. "
              "python -c \"import datasets; datasets.Dataset.from_" + std::string(content.starts_with("PAR1") ? "parquet" : "file") +
              "('" + origin + "').to_json('rows.jsonl')\"");
}

// Reads a dataset file (see the top of this file) row by row and hands each
// example to `take`, in file order, without keeping them: the file is mapped,
// not read into memory, so a file larger than memory streams through. With
// on_bad_row "fail" the first bad row is an ft::Error "<file>:<line>: ...";
// with "skip" bad rows are counted and the first few messages kept (the
// returned Examples has those and no rows). `progress(rows, fraction)` is
// called after every block of rows with the rows read and the fraction of
// the file's bytes behind them. A file that cannot be read, is not well-formed as a
// whole, or yields no example is an error.
inline Examples scan_examples(const std::filesystem::path& file, const text::Tokenizer* tokenizer, const text::ChatTemplate* chat,
                              const text::ChatOptions& special, const ExampleOptions& options,
                              const std::function<void(Example&&)>& take,
                              const std::function<void(std::int64_t, double)>& progress = {}) {
  constexpr std::size_t kept_messages = 5;
  const std::string origin = file.string();
  const ExampleBuilder builder(tokenizer, chat, special, options);
  std::error_code ec;
  if (!std::filesystem::exists(file, ec))
    throw Error(origin + ": the dataset file does not exist, allowed: a JSON Lines or JSON file of " +
                builder.options().format + " rows");
  if (std::filesystem::is_directory(file, ec))
    throw Error(origin + ": is a directory, allowed: a JSON Lines or JSON file of " + builder.options().format +
                " rows");
  std::shared_ptr<const io::MappedFile> mapping;
  std::string_view content;
  if (std::filesystem::file_size(file, ec) > 0) {
    mapping = io::map_file_readonly(file, "a dataset file", 1, "a dataset");
    content = {reinterpret_cast<const char*>(mapping->bytes().data()), mapping->bytes().size()};
    if (const Compression c = compression_of(content.substr(0, 4)); c != Compression::none) {
      mapping = map_decompressed(file, c);
      content = {reinterpret_cast<const char*>(mapping->bytes().data()), mapping->bytes().size()};
    }
  }
  refuse_columnar(content, origin);

  Examples out;
  std::int64_t kept = 0;
  // Rows are built a block at a time on every thread, then taken in file
  // order: the examples, the first bad row named and the skip count are what
  // one thread would give.
  constexpr std::size_t block = 1024;
  struct Outcome {
    std::vector<Example> examples;  // a row's: one, or a preference pair
    std::optional<std::string> bad;  // why the row is bad (BadRow)
    std::exception_ptr error;        // any other failure, rethrown in order
  };
  auto build = [&](const JsonRecord& record) {
    Outcome o;
    try {
      if (const auto bad = text::tokenization::utf8_invalid_at(record.text); bad != std::string_view::npos)
        throw BadRow("the row is not valid UTF-8 (byte " + std::to_string(bad + 1) + "), allowed: UTF-8 text");
      nlohmann::json row;
      try {
        row = nlohmann::json::parse(record.text);
      } catch (const nlohmann::json::parse_error& e) {
        throw BadRow("the row is not valid JSON (byte " + std::to_string(e.byte) + "), allowed: " + builder.allowed());
      } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double
        throw BadRow(std::string("the row is not usable JSON (") + e.what() + "), allowed: " + builder.allowed());
      }
      o.examples = builder.build_all(row);
      for (Example& e : o.examples) e.line = record.line;
    } catch (const BadRow& e) {
      o.bad = e.what();
    } catch (...) {
      o.error = std::current_exception();
    }
    return o;
  };
  std::vector<JsonRecord> records;
  std::vector<Outcome> outcomes;
  std::int64_t rows = 0;
  std::size_t released = 0;  // the bytes before this are done with
  auto take_block = [&] {
    outcomes.assign(records.size(), Outcome{});
    cpu::parallel_for(std::int64_t(records.size()), [&](std::int64_t i) {
      outcomes[std::size_t(i)] = build(records[std::size_t(i)]);
    });
    for (std::size_t i = 0; i < records.size(); ++i) {
      Outcome& o = outcomes[i];
      if (!o.examples.empty()) {
        for (Example& e : o.examples) take(std::move(e));
        ++kept;
        continue;
      }
      const std::string where = origin + ":" + std::to_string(records[i].line) + ": ";
      if (o.bad) {
        if (options.on_bad_row == "fail") throw Error(where + *o.bad);
        ++out.skipped;
        if (out.first_skips.size() < kept_messages) out.first_skips.push_back(where + *o.bad);
        continue;
      }
      try {
        std::rethrow_exception(o.error);
      } catch (const Error& e) {
        throw Error(where + e.what());
      }
    }
    rows += std::int64_t(records.size());
    // The rows behind are done with: a file larger than memory streams through.
    const auto end = std::size_t(records.back().text.data() - content.data());
    mapping->release(mapping->bytes().subspan(released, end - released));
    released = end;
    if (progress) progress(rows, double(end) / double(content.size()));
    records.clear();
  };
  for (const JsonRecord& record : JsonRecords(content, origin)) {
    records.push_back(record);
    if (records.size() == block) take_block();
  }
  if (!records.empty()) take_block();
  if (progress) progress(rows, 1.0);
  if (kept == 0) {
    if (out.skipped == 0)
      throw Error(origin + ": has no rows, allowed: a JSON Lines or JSON file of " + options.format + " rows");
    throw Error(origin + ": has no usable rows (all " + std::to_string(out.skipped) +
                " skipped; the first: " + out.first_skips.front() + ")");
  }
  return out;
}

// All the examples of a dataset file, in memory (scan_examples, kept).
inline Examples read_examples(const std::filesystem::path& file, const text::Tokenizer* tokenizer, const text::ChatTemplate* chat,
                              const text::ChatOptions& special, const ExampleOptions& options) {
  std::vector<Example> rows;
  Examples out = scan_examples(file, tokenizer, chat, special, options,
                               [&](Example&& e) { rows.push_back(std::move(e)); });
  out.rows = std::move(rows);
  return out;
}

}  // namespace ft::data
