#pragma once
// Tokenised examples laid out flat, in memory or memory-mapped from a
// prepared cache (ft/data/prepared.hpp), so batches read a multi-GB corpus
// without loading it:
//
//   input_ids.bin  int32, every example's ids one after another
//   labels.bin     int32, the same length (-100 = not scored)
//   index.bin      int64 offsets [n + 1] into the two files, then int64 source lines [n]
//
// Little-endian, as every machine ft runs on; the files carry no header, the
// cache's metadata.json says what they hold and the sizes are checked on open.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/data/example.hpp"
#include "ft/io/mapped_file.hpp"

namespace ft::data {

class TokenCorpus {
public:
  TokenCorpus() = default;

  // A corpus that owns copies of the examples.
  static TokenCorpus from_examples(const std::vector<Example>& examples) {
    auto owned = std::make_shared<Owned>();
    owned->offsets.push_back(0);
    for (const Example& e : examples) {
      if (e.labels.size() != e.input_ids.size())
        throw Error("the example of line " + std::to_string(e.line) + " has " + std::to_string(e.labels.size()) +
                    " labels for " + std::to_string(e.input_ids.size()) + " tokens, allowed: one label per token");
      owned->ids.insert(owned->ids.end(), e.input_ids.begin(), e.input_ids.end());
      owned->labels.insert(owned->labels.end(), e.labels.begin(), e.labels.end());
      owned->offsets.push_back(std::int64_t(owned->ids.size()));
      owned->lines.push_back(e.line);
    }
    TokenCorpus c;
    c.ids_ = owned->ids.data();
    c.labels_ = owned->labels.data();
    c.offsets_ = owned->offsets.data();
    c.lines_ = owned->lines.data();
    c.n_ = std::int64_t(examples.size());
    c.keep_ = std::move(owned);
    return c;
  }

  // Maps a corpus that write() or a CorpusWriter wrote into `dir`.
  static TokenCorpus open(const std::filesystem::path& dir) {
    auto mapped = std::make_shared<Mapped>();
    const std::string what = "a token cache file";
    mapped->index = io::map_file_readonly(dir / "index.bin", what, 8, "one offset");
    const std::size_t index_bytes = mapped->index->bytes().size();
    if ((index_bytes - 8) % 16 != 0)
      throw Error((dir / "index.bin").string() + ": is " + std::to_string(index_bytes) +
                  " bytes, not 8 + 16 per example; the cache is damaged (delete it to rebuild)");
    TokenCorpus c;
    c.n_ = std::int64_t((index_bytes - 8) / 16);
    c.offsets_ = reinterpret_cast<const std::int64_t*>(mapped->index->bytes().data());
    c.lines_ = c.offsets_ + c.n_ + 1;
    const std::int64_t tokens = c.offsets_[c.n_];
    for (const char* name : {"input_ids.bin", "labels.bin"}) {
      const auto file = dir / name;
      std::error_code ec;
      if (std::uintmax_t(tokens) * 4 != std::filesystem::file_size(file, ec) || ec)
        throw Error(file.string() + ": does not hold the " + std::to_string(tokens) +
                    " tokens index.bin counts; the cache is damaged (delete it to rebuild)");
    }
    if (tokens > 0) {
      mapped->ids = io::map_file_readonly(dir / "input_ids.bin", what, 4, "one token");
      mapped->labels = io::map_file_readonly(dir / "labels.bin", what, 4, "one token");
      c.ids_ = reinterpret_cast<const std::int32_t*>(mapped->ids->bytes().data());
      c.labels_ = reinterpret_cast<const std::int32_t*>(mapped->labels->bytes().data());
    }
    c.keep_ = std::move(mapped);
    return c;
  }

  std::int64_t size() const { return n_; }
  std::int64_t tokens() const { return n_ > 0 ? offsets_[n_] : 0; }
  std::int64_t length(std::int64_t i) const { return offsets_[i + 1] - offsets_[i]; }
  std::span<const std::int32_t> input_ids(std::int64_t i) const {
    return {ids_ + offsets_[i], std::size_t(length(i))};
  }
  std::span<const std::int32_t> labels(std::int64_t i) const {
    return {labels_ + offsets_[i], std::size_t(length(i))};
  }
  std::int64_t line(std::int64_t i) const { return lines_[i]; }

private:
  struct Owned {
    std::vector<std::int32_t> ids, labels;
    std::vector<std::int64_t> offsets, lines;
  };
  struct Mapped {
    std::shared_ptr<const io::MappedFile> ids, labels, index;
  };

  std::shared_ptr<const void> keep_;  // what the pointers point into
  const std::int32_t* ids_ = nullptr;
  const std::int32_t* labels_ = nullptr;
  const std::int64_t* offsets_ = nullptr;
  const std::int64_t* lines_ = nullptr;
  std::int64_t n_ = 0;
};

// Appends examples to a corpus directory as they come, keeping only the index
// (16 bytes per example) in memory; finish() writes the index.
class CorpusWriter {
public:
  explicit CorpusWriter(const std::filesystem::path& dir)
      : dir_(dir), ids_(dir / "input_ids.bin", std::ios::binary), labels_(dir / "labels.bin", std::ios::binary) {
    if (!ids_ || !labels_) throw Error(dir.string() + ": cannot write the token cache there");
    offsets_.push_back(0);
  }
  void add(const Example& e) {
    ids_.write(reinterpret_cast<const char*>(e.input_ids.data()), std::streamsize(e.input_ids.size() * 4));
    labels_.write(reinterpret_cast<const char*>(e.labels.data()), std::streamsize(e.labels.size() * 4));
    offsets_.push_back(offsets_.back() + std::int64_t(e.input_ids.size()));
    lines_.push_back(e.line);
  }
  std::int64_t rows() const { return std::int64_t(lines_.size()); }
  std::int64_t tokens() const { return offsets_.back(); }
  void finish() {
    ids_.close();
    labels_.close();
    std::ofstream index(dir_ / "index.bin", std::ios::binary);
    index.write(reinterpret_cast<const char*>(offsets_.data()), std::streamsize(offsets_.size() * 8));
    index.write(reinterpret_cast<const char*>(lines_.data()), std::streamsize(lines_.size() * 8));
    if (!ids_ || !labels_ || !index) throw Error(dir_.string() + ": the token cache could not be written");
  }

private:
  std::filesystem::path dir_;
  std::ofstream ids_, labels_;
  std::vector<std::int64_t> offsets_, lines_;
};

}  // namespace ft::data
