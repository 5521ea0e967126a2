// ftrun eval: mean loss and perplexity of a model over pre-tokenized rows.
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
#include <cmath>
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

#include "commands.hpp"
#include "exit_code.hpp"
#include "model_session.hpp"

namespace ftrun {

struct EvalOptions {
  std::string model;          // HF model directory
  std::string data;           // JSONL of pre-tokenized rows
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

std::vector<Row> read_rows(const std::string& file, std::int64_t vocab) {
  std::ifstream in(file);
  if (!in) throw ft::Error(file + ": cannot be opened");
  std::vector<Row> rows;
  std::string line;
  for (long number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string where = file + ":" + std::to_string(number);
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw ft::Error(where + ": not valid JSON");
    }
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
  }
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

}  // namespace

int run_eval(const EvalOptions& options) {
  return exit_code_of([&] { return evaluate(options); });
}

Command add_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* command = app.add_subcommand("eval", "Mean loss and perplexity of a model over pre-tokenized JSONL rows");
  command->add_option("--model", o->model, "HF model directory (config.json, model.safetensors)")->required();
  command->add_option("--data", o->data, "JSONL file: {\"input_ids\": [...], \"labels\": [...]} per line")
      ->required();
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
