#pragma once
// The prepared token cache: a recipe's data tokenised once (`ftrun prepare`,
// or the first `ftrun train`) into memory-mapped corpora that every later run,
// and every rank, reads without tokenising again.
//
//   <cache_dir>/train/       input_ids.bin, labels.bin, index.bin (token_corpus.hpp)
//   <cache_dir>/validation/  the same, when the recipe has validation data
//   <cache_dir>/metadata.json
//       "key":    everything the tokens depend on: each source (a file's path,
//                 size and modification time, or an artificial name and the
//                 seed), the fingerprints of tokenizer.json,
//                 tokenizer_config.json and chat_template.jinja, the token
//                 ids rows may hold (the embedding's rows), the format,
//                 field names, templates, max_seq_length, on_bad_row and
//                 validation_split
//       "counts": rows, tokens and skipped rows of each split
//
// A cache is used only when its key equals the recipe's; otherwise it is
// rebuilt, and the run says which part of the key differed. It is written
// under a temporary name and renamed when complete, so a killed preparation
// never leaves a cache that looks valid.
//
// A validation_split sends every k-th row (k = round(1 / split)) to the
// validation corpus, so the split does not depend on the order of topics in
// the file.
//
// Preparation is compiled once into ft's data library (src/data/), so the
// training engine, which includes this header, does not compile the dataset
// readers (and CUDA sources, which include the engine, need not parse them).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/core/progress.hpp"
#include "ft/text/model_text.hpp"
#include "ft/data/token_corpus.hpp"
#include "ft/recipe/recipe.hpp"

namespace ft::data {

struct PreparedData {
  TokenCorpus train, validation;  // validation.size() == 0 when there is none
  nlohmann::json metadata;
  bool reused = false;
  std::string rebuilt_because;  // why an existing cache was not used ("" when there was none)
};

// Rows and tokens done so far, and the fraction of the file read, for a progress line.
using PrepareProgress = std::function<void(std::int64_t rows, std::int64_t tokens, double fraction)>;

// A progress line for preparation on `bar` (of 100): percent of the file, rows, rows/s, tokens/s.
inline PrepareProgress progress_line(Progress& bar) {
  const auto start = std::chrono::steady_clock::now();
  return [&bar, start](std::int64_t rows, std::int64_t tokens, double fraction) {
    const double s = std::max(1e-9, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    char status[128];
    std::snprintf(status, sizeof status, "%lld rows, %.0f rows/s, %.0f tokens/s", (long long)rows, double(rows) / s,
                  double(tokens) / s);
    bar.update(long(100 * fraction), status);
  };
}

// The default cache directory of a recipe: data.cache_dir, or <output_dir>/data-cache.
inline std::filesystem::path cache_dir_of(const recipe::Recipe& r) {
  return r.data.cache_dir.empty() ? std::filesystem::path(r.output_dir) / "data-cache"
                                  : std::filesystem::path(r.data.cache_dir);
}

// What the recipe's tokens depend on (see the top of this file).
nlohmann::json cache_key(const recipe::Recipe& r, const text::ModelText& text);

// Tokenises the recipe's data into `dir` (replacing what is there); returns the counts.
nlohmann::json prepare_data(const recipe::Recipe& r, const text::ModelText& text, const std::filesystem::path& dir,
                            const PrepareProgress& progress = {});

// The recipe's data from its cache, prepared first when the cache is missing or was built for other inputs.
PreparedData load_prepared(const recipe::Recipe& r, const text::ModelText& text, const PrepareProgress& progress = {},
                           bool force = false);

}  // namespace ft::data
