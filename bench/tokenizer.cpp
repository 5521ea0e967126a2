// Tokenizer throughput: MB/s of UTF-8 text encoded, for every fixture kind.
// Texts: the Jargon File (English prose; Debian's jargon-text, read through
// `gzip -dc` and converted from Latin-1) and the multilingual test corpus
// repeated to the same size. Three ways: the whole text in one encode() call,
// line by line on one thread, and line by line on all threads (OpenMP), to set
// beside HF's encode and encode_batch (tools/bench_hf_tokenizers.py).
//   build/release/bin/bench_tokenizer --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <ft/text/tokenizer.hpp>
#include <ft/text/tokenizer/utf8.hpp>

namespace {

const std::filesystem::path fixtures = std::filesystem::path(FT_SOURCE_DIR) / "tests/fixtures/tokenizers";
const char* const jargon_gz = "/usr/share/doc/jargon-text/jargon.txt.gz";

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string jargon_text() {
  std::string latin1;
  if (FILE* p = ::popen((std::string("gzip -dc ") + jargon_gz + " 2>/dev/null").c_str(), "r")) {
    char buffer[1 << 16];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, p)) > 0;) latin1.append(buffer, n);
    ::pclose(p);
  }
  std::string utf8;
  for (char c : latin1) ft::text::tokenization::utf8_append(utf8, static_cast<unsigned char>(c));
  return utf8;
}

const std::string& text(bool jargon) {
  static const std::string prose = jargon_text();
  static const std::string corpus = [] {
    const std::string one = read_file(fixtures / "corpus.txt");
    std::string many;
    while (many.size() < std::max<std::size_t>(prose.size(), 1 << 20)) many += one;
    return many;
  }();
  return jargon && !prose.empty() ? prose : corpus;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

const ft::text::Tokenizer& tokenizer(const std::string& kind) {
  static std::map<std::string, ft::text::Tokenizer> loaded;
  auto it = loaded.find(kind);
  if (it == loaded.end())
    it = loaded.emplace(kind, ft::text::Tokenizer::from_file(fixtures / kind / "tokenizer.json")).first;
  return it->second;
}

void encode_whole(benchmark::State& state, const std::string& kind, bool jargon) {
  const auto& tok = tokenizer(kind);
  const std::string& s = text(jargon);
  std::size_t ids = 0;
  for (auto _ : state) {
    auto out = tok.encode(s);
    ids = out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(std::int64_t(state.iterations() * s.size()));
  state.counters["bytes_per_id"] = double(s.size()) / double(ids);
}

void encode_lines(benchmark::State& state, const std::string& kind, bool jargon, bool parallel) {
  const auto& tok = tokenizer(kind);
  const auto lines = lines_of(text(jargon));
  std::vector<std::vector<std::int32_t>> out(lines.size());
  for (auto _ : state) {
#pragma omp parallel for schedule(dynamic, 256) if (parallel)
    for (std::size_t i = 0; i < lines.size(); ++i) out[i] = tok.encode(lines[i]);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(std::int64_t(state.iterations() * text(jargon).size()));
}

const bool registered = [] {
  for (const char* kind :
       {"gpt2", "gpt_neox", "llama3", "qwen2", "smollm2", "llama2", "mistral", "sp_metaspace", "misc"}) {
    const std::string k = kind;
    for (bool jargon : {true, false}) {
      const std::string text_name = jargon ? "jargon" : "multilingual";
      benchmark::RegisterBenchmark(("encode_whole/" + k + "/" + text_name).c_str(),
                                   [=](benchmark::State& s) { encode_whole(s, k, jargon); })
          ->Unit(benchmark::kMillisecond)->MinTime(1.0);
      benchmark::RegisterBenchmark(("encode_lines/" + k + "/" + text_name).c_str(),
                                   [=](benchmark::State& s) { encode_lines(s, k, jargon, false); })
          ->Unit(benchmark::kMillisecond)->MinTime(1.0);
      benchmark::RegisterBenchmark(("encode_lines_parallel/" + k + "/" + text_name).c_str(),
                                   [=](benchmark::State& s) { encode_lines(s, k, jargon, true); })
          ->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseRealTime();
    }
  }
  return true;
}();

}  // namespace
