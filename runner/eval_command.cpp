// ftrun eval: mean loss and perplexity of a model over pre-tokenized rows,
// or the accuracy of multiple-choice items scored as lm-evaluation-harness
// scores them (--tasks).
//
// Rows are packed into sequences of up to --max-tokens tokens with a document
// id per row, so attention never crosses rows and positions restart: the
// result is exactly that of running each row alone (HF's convention: labels
// default to the inputs, shifted by one; -100 is not scored), at the speed of
// full batches. The mean is over scored tokens of all rows. --logits-out
// saves each row's next-token logits (the logits at its last token), to
// compare with another implementation. The rows are scored by the inference
// engine a plugin offers for the model's architecture, --dtype and
// --device, so a third party's family and device evaluate as they serve.
//
// --tasks reads items of a context, its choices and the right one's index,
// and scores each choice's log-likelihood after the context exactly as
// lm-eval's hf model does (its request encoding, truncation and metrics),
// so that a task's accuracy here is the one lm-eval reports.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include <ft/core/progress.hpp>
#include <ft/infer/decoder.hpp>
#include <ft/io/safetensors.hpp>
#include <ft/text/model_text.hpp>

#include "commands.hpp"
#include "exit_code.hpp"
#include "model_session.hpp"

namespace ftrun {

struct EvalOptions {
  std::string model;          // HF model directory
  std::string data;           // JSONL of pre-tokenized rows
  std::string tasks;          // JSONL of multiple-choice items
  std::string target_delimiter = " ";  // between an item's context and each choice, as lm-eval's
  EngineChoice engine;        // the plugin's inference engine that scores them: dtype, device
  long max_tokens = 2048;     // tokens packed into one forward pass
  bool json = false;
  std::string logits_out;     // safetensors file for each row's next-token logits
};

namespace {

struct Row {
  std::vector<std::int32_t> input_ids, labels;
};

std::vector<std::int32_t> read_ids(const nlohmann::json& row, const char* key, const std::string& where) {
  const nlohmann::json& v = row[key];
  if (!v.is_array()) throw ft::Error(where + ": \"" + key + "\" must be a list of token ids");
  std::vector<std::int32_t> ids;
  ids.reserve(v.size());
  for (const auto& x : v) {
    if (!x.is_number_integer() || !std::in_range<std::int32_t>(x.get<std::int64_t>()))
      throw ft::Error(where + ": \"" + key + "\" must hold 32-bit integers only");
    ids.push_back(x.get<std::int32_t>());
  }
  return ids;
}

// Calls `read(row, where)` with each non-blank line of a JSONL file, parsed,
// and "FILE:LINE" for its errors.
template <class Read>
void for_each_row(const std::string& file, Read read) {
  std::ifstream in(file);
  if (!in) throw ft::Error(file + ": cannot be opened");
  std::string line;
  for (long number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = file + ":" + std::to_string(number);
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw ft::Error(where + ": not valid JSON");
    }
    read(row, where);
  }
}

std::vector<Row> read_rows(const std::string& file, std::int64_t vocab) {
  std::vector<Row> rows;
  for_each_row(file, [&](const nlohmann::json& row, const std::string& where) {
    if (!row.is_object() || !row.contains("input_ids"))
      throw ft::Error(where + ": row has no \"input_ids\" (eval reads pre-tokenized rows: "
                              "{\"input_ids\": [...], \"labels\": [...] optional})");
    Row r;
    r.input_ids = read_ids(row, "input_ids", where);
    if (row.contains("labels")) r.labels = read_ids(row, "labels", where);
    if (r.input_ids.empty()) throw ft::Error(where + ": \"input_ids\" is empty");
    if (!r.labels.empty() && r.labels.size() != r.input_ids.size())
      throw ft::Error(where + ": \"labels\" has " + std::to_string(r.labels.size()) + " entries, \"input_ids\" " +
                      std::to_string(r.input_ids.size()));
    for (std::int32_t id : r.input_ids)
      if (id < 0 || id >= vocab)
        throw ft::Error(where + ": token id " + std::to_string(id) + " is outside the model's vocabulary [0, " +
                        std::to_string(vocab) + ")");
    for (std::int32_t id : r.labels)
      if (id != -100 && (id < 0 || id >= vocab))
        throw ft::Error(where + ": label " + std::to_string(id) + " is outside the vocabulary and is not -100");
    rows.push_back(std::move(r));
  });
  if (rows.empty()) throw ft::Error(file + ": no rows");
  return rows;
}

int evaluate(const EvalOptions& options) {
  std::unique_ptr<ft::infer::Decoder> engine =
      open_engine(options.model, options.engine, nullptr, load_options_for(options.model, options.engine));
  std::vector<Row> rows = read_rows(options.data, engine->vocab_size());

  const ft::index_t vocab = engine->vocab_size();
  std::vector<float> next_logits;  // [rows, V]: logits at each row's last token, for --logits-out
  double loss_sum = 0;
  long tokens = 0;
  ft::Progress progress("eval", long(rows.size()));
  std::size_t next = 0;
  while (next < rows.size()) {
    // Pack whole rows up to the token budget (a longer row goes alone).
    std::vector<std::int32_t> ids, labels, documents;
    std::int32_t document = 0;
    while (next < rows.size() &&
           (ids.empty() || ids.size() + rows[next].input_ids.size() <= std::size_t(options.max_tokens))) {
      const Row& r = rows[next++];
      ids.insert(ids.end(), r.input_ids.begin(), r.input_ids.end());
      const auto& l = r.labels.empty() ? r.input_ids : r.labels;
      labels.insert(labels.end(), l.begin(), l.end());
      documents.insert(documents.end(), r.input_ids.size(), document++);
    }
    std::vector<std::int64_t> row_ends;  // last position of each row in the pack, where its logits are wanted
    if (!options.logits_out.empty())
      for (std::size_t i = 0; i < documents.size(); ++i)
        if (i + 1 == documents.size() || documents[i + 1] != documents[i]) row_ends.push_back(std::int64_t(i));
    const std::size_t written = next_logits.size();
    next_logits.resize(written + row_ends.size() * std::size_t(vocab));
    const ft::infer::Score score = engine->score({ids, labels, documents, row_ends}, next_logits.data() + written);
    loss_sum += score.loss_sum;
    tokens += score.scored;
    std::ostringstream status;
    if (tokens) status << "loss " << std::fixed << std::setprecision(4) << loss_sum / double(tokens);
    progress.update(long(next), status.str());
  }
  progress.finish();
  if (tokens == 0) throw ft::Error(options.data + ": no scored tokens (every label is -100 or rows are one token long)");

  double loss = loss_sum / double(tokens);
  if (!options.logits_out.empty()) {
    auto bytes = std::as_bytes(std::span(next_logits));
    ft::io::write_safetensors(options.logits_out,
                              {{"next_token_logits", "F32", {std::int64_t(rows.size()), vocab}, bytes}});
  }
  if (options.json) {
    nlohmann::json out{{"loss", loss}, {"perplexity", std::exp(loss)}, {"tokens", tokens}, {"rows", rows.size()}};
    std::cout << out.dump() << "\n";
  } else {
    std::cout << std::setprecision(8) << "loss " << loss << "\nperplexity " << std::exp(loss) << "\ntokens "
              << tokens << "\nrows " << rows.size() << "\n";
  }
  return ok;
}


// A multiple-choice item, in lm-eval's terms: the context (the task's
// doc_to_text, few-shot examples included), the choices (doc_to_choice) and
// the index of the right one (doc_to_target).
struct Item {
  std::string context;
  std::vector<std::string> choices;
  std::size_t gold = 0;
};

std::vector<Item> read_items(const std::string& file) {
  std::vector<Item> items;
  for_each_row(file, [&](const nlohmann::json& row, const std::string& where) {
    const std::string shape = " (a task row is {\"context\": \"...\", \"choices\": [\"...\", ...], \"gold\": index})";
    if (!row.is_object() || !row.contains("context") || !row["context"].is_string())
      throw ft::Error(where + ": row has no \"context\" string" + shape);
    if (!row.contains("choices") || !row["choices"].is_array() || row["choices"].size() < 2)
      throw ft::Error(where + ": \"choices\" must be a list of at least two strings" + shape);
    Item item{row["context"].get<std::string>(), {}, 0};
    for (const auto& choice : row["choices"]) {
      if (!choice.is_string()) throw ft::Error(where + ": \"choices\" must hold strings only" + shape);
      item.choices.push_back(choice.get<std::string>());
    }
    if (!row.contains("gold") || !row["gold"].is_number_integer() || row["gold"].get<std::int64_t>() < 0 ||
        row["gold"].get<std::uint64_t>() >= item.choices.size())
      throw ft::Error(where + ": \"gold\" must be the index of the right choice, 0 to " +
                      std::to_string(item.choices.size() - 1) + shape);
    item.gold = row["gold"].get<std::size_t>();
    items.push_back(std::move(item));
  });
  if (items.empty()) throw ft::Error(file + ": no items");
  return items;
}

// One loglikelihood request, tokenized as lm-eval's HFLM encodes a pair: the
// context's trailing whitespace moves to the continuation, whose tokens are
// those of context + continuation past the context's own (no special tokens);
// an empty context is the prefix token alone. Truncated from the left to
// the model's length + 1, then the last token dropped: `input` is what runs,
// and its last `continuation.size()` positions predict the continuation.
struct Request {
  std::vector<std::int32_t> input, continuation;
};

Request encode_request(const ft::text::Tokenizer& tokenizer, std::string context, std::string continuation,
                       std::int32_t prefix, std::size_t max_length) {
  std::size_t end = context.size();
  while (end > 0 && std::isspace(static_cast<unsigned char>(context[end - 1]))) --end;
  continuation = context.substr(end) + continuation;
  context.resize(end);
  std::vector<std::int32_t> context_ids, continuation_ids;
  if (context.empty()) {
    context_ids = {prefix};
    continuation_ids = tokenizer.encode(continuation, false);
  } else {
    const std::vector<std::int32_t> whole = tokenizer.encode(context + continuation, false);
    context_ids = tokenizer.encode(context, false);
    const std::size_t split = std::min(context_ids.size(), whole.size());
    context_ids.assign(whole.begin(), whole.begin() + std::ptrdiff_t(split));
    continuation_ids.assign(whole.begin() + std::ptrdiff_t(split), whole.end());
  }
  if (continuation_ids.empty()) throw ft::Error("a choice encodes to no tokens after its context");
  std::vector<std::int32_t> all = context_ids;
  all.insert(all.end(), continuation_ids.begin(), continuation_ids.end());
  if (all.size() > max_length + 1) all.erase(all.begin(), all.end() - std::ptrdiff_t(max_length + 1));
  all.pop_back();
  return {std::move(all), std::move(continuation_ids)};
}

// The length lm-eval's hf model truncates to: config.json's n_positions,
// max_position_embeddings or n_ctx, else 2048.
std::size_t model_length(const std::filesystem::path& dir) {
  std::ifstream in(dir / "config.json");
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  for (const char* key : {"n_positions", "max_position_embeddings", "n_ctx"})
    if (config.is_object() && config.contains(key) && config[key].is_number_integer() && config[key].get<long>() > 0)
      return config[key].get<std::size_t>();
  return 2048;
}

// A choice's log-likelihood and whether greedy decoding would produce it.
struct Likelihood {
  double loglikelihood = 0;
  bool is_greedy = true;
};

// Every request's log-likelihood, packing whole requests up to `max_tokens`
// per pass; logits are read only at the positions that predict a continuation.
std::vector<Likelihood> score_requests(ft::infer::Decoder& engine, const std::vector<Request>& requests,
                                       long max_tokens, ft::Progress& progress) {
  const std::size_t V = std::size_t(engine.vocab_size());
  std::vector<Likelihood> out;
  std::size_t next = 0;
  while (next < requests.size()) {
    std::vector<std::int32_t> ids, documents;
    std::vector<std::int64_t> logits_at;
    const std::size_t first = next;
    while (next < requests.size() &&
           (ids.empty() || ids.size() + requests[next].input.size() <= std::size_t(max_tokens))) {
      const Request& r = requests[next];
      const std::size_t start = ids.size();
      ids.insert(ids.end(), r.input.begin(), r.input.end());
      documents.insert(documents.end(), r.input.size(), std::int32_t(next - first));
      for (std::size_t k = 0; k < r.continuation.size(); ++k)
        logits_at.push_back(std::int64_t(start + r.input.size() - r.continuation.size() + k));
      ++next;
    }
    const std::vector<std::int32_t> unscored(ids.size(), -100);
    std::vector<float> logits(logits_at.size() * V);
    engine.score({ids, unscored, documents, logits_at}, logits.data());
    std::size_t row = 0;
    for (std::size_t i = first; i < next; ++i) {
      Likelihood l;
      for (std::int32_t target : requests[i].continuation) {
        const float* z = logits.data() + row++ * V;
        const float top = *std::max_element(z, z + V);
        double sum = 0;
        for (std::size_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - double(top));
        l.loglikelihood += double(z[target]) - double(top) - std::log(sum);
        l.is_greedy = l.is_greedy && std::max_element(z, z + V) - z == target;
      }
      out.push_back(l);
    }
    progress.update(long(next));
  }
  return out;
}

// The first index of the largest value, as numpy's argmax.
std::size_t argmax(const std::vector<double>& values) {
  return std::size_t(std::max_element(values.begin(), values.end()) - values.begin());
}

// Characters of a UTF-8 string, as Python's len (lm-eval's acc_norm divides by it).
double characters(const std::string& s) {
  return double(std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// The mean of 0/1 outcomes and its standard error (lm-eval's: sample deviation / sqrt(n)).
std::pair<double, double> mean_and_stderr(const std::vector<double>& x) {
  const double n = double(x.size());
  double mean = 0, squares = 0;
  for (double v : x) mean += v / n;
  for (double v : x) squares += (v - mean) * (v - mean);
  return {mean, x.size() > 1 ? std::sqrt(squares / (n - 1)) / std::sqrt(n) : 0.0};
}

int evaluate_tasks(const EvalOptions& options) {
  const ft::text::ModelText text = ft::text::ModelText::load(options.model);
  const ft::text::Tokenizer& tokenizer = text.need_tokenizer("ftrun eval --tasks");
  const std::vector<Item> items = read_items(options.tasks);
  std::unique_ptr<ft::infer::Decoder> engine =
      open_engine(options.model, options.engine, nullptr, load_options_for(options.model, options.engine));

  // lm-eval's prefix for an empty context: the BOS token, else the EOS token.
  std::optional<std::int32_t> prefix;
  if (text.special.bos_token) prefix = tokenizer.token_to_id(*text.special.bos_token);
  if (!prefix && text.eos_id >= 0) prefix = text.eos_id;
  const std::size_t max_length = model_length(options.model);
  std::vector<Request> requests;
  for (std::size_t i = 0; i < items.size(); ++i)
    for (const std::string& choice : items[i].choices) {
      if (items[i].context.empty() && !prefix)
        throw ft::Error(options.tasks + ": item " + std::to_string(i + 1) +
                        " has an empty context and the tokenizer has no BOS or EOS token to stand for it");
      try {
        requests.push_back(
            encode_request(tokenizer, items[i].context, options.target_delimiter + choice, prefix.value_or(0), max_length));
      } catch (const ft::Error& e) {
        throw ft::Error(options.tasks + ": item " + std::to_string(i + 1) + ": " + e.what());
      }
    }

  ft::Progress progress("eval", long(requests.size()));
  const std::vector<Likelihood> scored = score_requests(*engine, requests, options.max_tokens, progress);
  progress.finish();

  std::vector<double> acc, acc_norm;
  nlohmann::ordered_json samples = nlohmann::ordered_json::array();
  std::size_t at = 0;
  for (const Item& item : items) {
    std::vector<double> lls, normalised;
    nlohmann::ordered_json greedy = nlohmann::ordered_json::array();
    for (const std::string& choice : item.choices) {
      lls.push_back(scored[at].loglikelihood);
      normalised.push_back(scored[at].loglikelihood / characters(choice));
      greedy.push_back(scored[at++].is_greedy);
    }
    acc.push_back(argmax(lls) == item.gold ? 1.0 : 0.0);
    acc_norm.push_back(argmax(normalised) == item.gold ? 1.0 : 0.0);
    samples.push_back({{"loglikelihoods", lls}, {"is_greedy", greedy}, {"gold", item.gold},
                       {"acc", acc.back()}, {"acc_norm", acc_norm.back()}});
  }
  const auto [accuracy, accuracy_stderr] = mean_and_stderr(acc);
  const auto [normalised, normalised_stderr] = mean_and_stderr(acc_norm);
  if (options.json) {
    nlohmann::ordered_json out{{"items", items.size()},          {"acc", accuracy},
                               {"acc_stderr", accuracy_stderr}, {"acc_norm", normalised},
                               {"acc_norm_stderr", normalised_stderr}, {"samples", samples}};
    std::cout << out.dump() << "\n";
  } else {
    std::cout << std::fixed << std::setprecision(4) << "items " << items.size() << "\nacc " << accuracy << " ± "
              << accuracy_stderr << "\nacc_norm " << normalised << " ± " << normalised_stderr << "\n";
  }
  return ok;
}

}  // namespace

int run_eval(const EvalOptions& options) {
  return exit_code_of([&] { return options.tasks.empty() ? evaluate(options) : evaluate_tasks(options); });
}

Command add_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* command = app.add_subcommand(
      "eval", "Mean loss and perplexity over pre-tokenized JSONL rows, or multiple-choice accuracy as lm-eval scores it");
  command->add_option("--model", o->model, "HF model directory (config.json, model.safetensors)")->required();
  CLI::Option* data =
      command->add_option("--data", o->data, "JSONL file: {\"input_ids\": [...], \"labels\": [...]} per line");
  CLI::Option* tasks = command->add_option(
      "--tasks", o->tasks,
      "JSONL file of multiple-choice items: {\"context\": \"...\", \"choices\": [...], \"gold\": index} per line; "
      "prints acc and acc_norm as lm-evaluation-harness computes them (--json: every choice's log-likelihood)");
  data->excludes(tasks);
  tasks->excludes(data);
  command->add_option("--target-delimiter", o->target_delimiter,
                      "With --tasks: what joins the context and each choice (lm-eval's target_delimiter)")
      ->capture_default_str();
  command->callback([data, tasks] {
    if (data->count() + tasks->count() == 0) throw CLI::RequiredError("--data or --tasks");
  });
  add_engine_options(command, o->engine);
  command->add_option("--max-tokens", o->max_tokens, "Tokens packed into one forward pass")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_flag("--json", o->json, "Print one JSON object instead of lines");
  command->add_option("--logits-out", o->logits_out,
                   "Write each row's next-token logits to this safetensors file ([rows, vocab] float32)");
  return {command, [o] { return run_eval(*o); }};
}

}  // namespace ftrun
