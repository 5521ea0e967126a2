// The token cache of a recipe's data (ft/data/prepared.hpp), compiled once.
#include "ft/data/prepared.hpp"

#include <cmath>
#include <fstream>

#include "ft/core/fingerprint.hpp"
#include "ft/data/artificial.hpp"
#include "ft/data/examples.hpp"
#include "ft/io/hf_config.hpp"
#include "ft/io/staged_directory.hpp"

namespace ft::data {

namespace detail {

inline nlohmann::json source_key(const std::string& source, std::int64_t seed) {
  if (source.empty()) return nullptr;
  if (source.starts_with(artificial_prefix)) return {{"artificial", source}, {"seed", seed}};
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto size = fs::file_size(source, ec);
  const auto time = fs::last_write_time(source, ec);
  return {{"path", fs::absolute(source).lexically_normal().string()},
          {"size", ec ? 0 : size},
          {"modified_ns", std::int64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           time.time_since_epoch())
                                           .count())}};
}

// TRL's DPOTrainer and its CPOTrainer / ORPOTrainer tokenise pairs differently (ExampleBuilder::cpo_pair).
inline std::string pair_tokenisation(const recipe::Recipe& r) { return r.train.objective == "dpo" ? "dpo" : "cpo"; }

inline ExampleOptions example_options(const recipe::Recipe& r) {
  const recipe::DataSection& d = r.data;
  ExampleOptions o;
  o.pair_tokenisation = pair_tokenisation(r);
  o.format = d.format;
  o.response_template = d.response_template;
  o.instruction_template = d.instruction_template;
  o.fields = {d.instruction_field, d.input_field,    d.output_field, d.messages_field, d.text_field,
              d.input_ids_field,   d.labels_field,   d.prompt_field, d.chosen_field,   d.rejected_field};
  o.max_seq_length = d.max_seq_length;
  o.on_bad_row = d.on_bad_row;
  return o;
}

}  // namespace detail

// What the recipe's tokens depend on (see the top of this file).
nlohmann::json cache_key(const recipe::Recipe& r, const text::ModelText& text) {
  const std::filesystem::path model = r.model.path;
  const recipe::DataSection& d = r.data;
  return {{"version", 1},
          {"train", detail::source_key(d.train, r.seed)},
          {"validation", detail::source_key(d.validation, r.seed + 1)},
          {"validation_split", d.validation.empty() ? d.validation_split : 0.0},
          {"tokenizer", file_fingerprint(text::ModelText::tokenizer_file(model))},
          {"tokenizer_config", file_fingerprint(model / "tokenizer_config.json")},
          {"chat_template", file_fingerprint(model / "chat_template.jinja")},
          {"token_id_limit", text.token_id_limit()},
          {"format", d.format},
          {"pair_tokenisation", d.format == "preference" ? detail::pair_tokenisation(r) : ""},
          {"fields",
           {d.instruction_field, d.input_field, d.output_field, d.messages_field, d.text_field, d.input_ids_field,
            d.labels_field, d.prompt_field, d.chosen_field, d.rejected_field}},
          {"response_template", d.response_template},
          {"instruction_template", d.instruction_template},
          {"max_seq_length", d.max_seq_length},
          {"on_bad_row", d.on_bad_row}};
}

namespace {

// The first key whose value differs, for the message that says why a cache is rebuilt.
std::string first_difference(const nlohmann::json& want, const nlohmann::json& have) {
  for (auto it = want.begin(); it != want.end(); ++it)
    if (!have.contains(it.key()) || have[it.key()] != it.value()) return it.key();
  return "";
}

}  // namespace

// Tokenises the recipe's data into `dir` (replacing what is there).
nlohmann::json prepare_data(const recipe::Recipe& r, const text::ModelText& text, const std::filesystem::path& dir,
                            const PrepareProgress& progress) {
  ExampleOptions options = detail::example_options(r);
  options.token_id_limit = text.token_id_limit();
  nlohmann::json counts;
  io::write_directory_atomically(
      dir,
      [&](const std::filesystem::path& staging) {
        std::filesystem::create_directories(staging / "train");
        CorpusWriter train(staging / "train");
        std::unique_ptr<CorpusWriter> validation;
        const bool split_by_file = !r.data.validation.empty();
        if (split_by_file || r.data.validation_split > 0) {
          std::filesystem::create_directories(staging / "validation");
          validation = std::make_unique<CorpusWriter>(staging / "validation");
        }
        const std::int64_t every =
            split_by_file || r.data.validation_split <= 0
                ? 0
                : std::int64_t(std::max(2.0, std::round(1.0 / r.data.validation_split)));
        std::int64_t index = 0, tokens = 0;
        auto read = [&](const std::string& source, std::int64_t seed, bool is_validation) {
          // A preference row's two examples go the same way.
          const std::int64_t per_row = options.format == "preference" ? 2 : 1;
          auto route = [&](Example&& e) {
            const std::int64_t row = index / per_row;
            const bool held_out = is_validation || (every > 0 && row % every == every - 1);
            (held_out ? *validation : train).add(e);
            ++index;
            tokens += std::int64_t(e.input_ids.size());
          };
          if (source.starts_with(artificial_prefix)) {
            const ExampleBuilder builder(text.tokenizer.get(), text.chat.get(), text.special, options);
            Examples report = artificial_examples(std::string_view(source).substr(artificial_prefix.size()), builder,
                                                  text.token_id_limit(), std::uint64_t(seed));
            for (Example& e : report.rows) route(std::move(e));
            return report.skipped;
          }
          return scan_examples(source, text.tokenizer.get(), text.chat.get(), text.special, options, route,
                               [&](std::int64_t rows, double fraction) {
                                 if (progress) progress(rows, tokens, fraction);
                               })
              .skipped;
        };
        std::int64_t skipped = read(r.data.train, r.seed, false);
        if (split_by_file) skipped += read(r.data.validation, r.seed + 1, true);
        train.finish();
        if (validation) validation->finish();
        if (train.rows() == 0) throw Error(r.data.train + ": no training rows are left after the validation split");
        counts = {{"train", {{"rows", train.rows()}, {"tokens", train.tokens()}}},
                  {"validation",
                   {{"rows", validation ? validation->rows() : 0}, {"tokens", validation ? validation->tokens() : 0}}},
                  {"skipped", skipped}};
        std::ofstream(staging / "metadata.json") << nlohmann::json{{"key", cache_key(r, text)}, {"counts", counts}}.dump(2)
                                                 << "\n";
      },
      true);
  return counts;
}

// The recipe's data from its cache, prepared first when the cache is missing or was built for other inputs.
PreparedData load_prepared(const recipe::Recipe& r, const text::ModelText& text, const PrepareProgress& progress,
                           bool force) {
  const std::filesystem::path dir = cache_dir_of(r);
  PreparedData out;
  const nlohmann::json key = cache_key(r, text);
  if (std::filesystem::exists(dir / "metadata.json") && !force) {
    const nlohmann::json have = io::read_json_file(dir / "metadata.json");
    const std::string differs = first_difference(key, have.value("key", nlohmann::json::object()));
    if (differs.empty()) {
      out.reused = true;
    } else {
      out.rebuilt_because = (dir / "metadata.json").string() + " was built for another " + differs;
    }
  } else if (std::filesystem::exists(dir) && !std::filesystem::is_empty(dir) &&
             !std::filesystem::exists(dir / "metadata.json")) {
    // Never replace a directory that ft did not write.
    throw Error(dir.string() + ": exists and is not an ft token cache (no metadata.json), allowed: data.cache_dir "
                "set to a new directory or one that ftrun prepare wrote");
  }
  if (!out.reused) prepare_data(r, text, dir, progress);
  out.metadata = io::read_json_file(dir / "metadata.json");
  out.train = TokenCorpus::open(dir / "train");
  if (std::filesystem::exists(dir / "validation")) out.validation = TokenCorpus::open(dir / "validation");
  return out;
}

}  // namespace ft::data
