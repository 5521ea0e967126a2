// Fuzz target: tokenizers, in two modes chosen by the first byte.
//  'j': the rest is a tokenizer.json; loading it succeeds or throws ft::Error,
//       and a tokenizer that loads encodes and decodes a fixed text.
//  otherwise: the rest is text for one of the fixture tokenizers (picked by the
//       first byte): invalid UTF-8 is an ft::Error, valid text encodes and
//       decodes, and byte-level kinds give the text back byte for byte (after
//       their NFC, for the kinds that normalise: decoding is then idempotent).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <ft/text/tokenizer.hpp>
#include <ft/text/tokenizer/utf8.hpp>

namespace {

struct Kind {
  const char* name;
  enum { exact, normalising, other } round_trip;
};
constexpr Kind kinds[] = {{"gpt2", Kind::exact},         {"llama3", Kind::exact},      {"smollm2", Kind::exact},
                          {"gpt_neox", Kind::normalising}, {"qwen2", Kind::normalising}, {"llama2", Kind::other},
                          {"mistral", Kind::other},       {"sp_metaspace", Kind::other}, {"misc", Kind::other}};

const std::vector<ft::text::Tokenizer>& fixture_tokenizers() {
  static const std::vector<ft::text::Tokenizer> all = [] {
    const auto dir = std::filesystem::path(__FILE__).parent_path().parent_path() / "fixtures/tokenizers";
    std::vector<ft::text::Tokenizer> v;
    for (const Kind& k : kinds) v.push_back(ft::text::Tokenizer::from_file(dir / k.name / "tokenizer.json"));
    return v;
  }();
  return all;
}

void fuzz_text(std::uint8_t selector, std::string_view text) {
  const std::size_t k = selector % std::size(kinds);
  const ft::text::Tokenizer& tok = fixture_tokenizers()[k];
  std::vector<std::int32_t> ids;
  try {
    ids = tok.encode(text, selector & 0x80);
  } catch (const ft::Error&) {
    // Only invalid UTF-8 may be refused.
    if (ft::text::tokenization::utf8_invalid_at(text) == std::string_view::npos) std::abort();
    return;
  }
  const std::string decoded = tok.decode(ids, false);
  tok.decode(ids, true);
  if (selector & 0x80) return;  // special tokens added: no round trip
  if (kinds[k].round_trip == Kind::exact && decoded != text) std::abort();
  if (kinds[k].round_trip == Kind::normalising && tok.decode(tok.encode(decoded, false)) != decoded) std::abort();
}

void fuzz_json(std::string_view content) {
  static const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("ft-fuzz-tokenizer-" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(content.data(), std::streamsize(content.size()));
  }
  try {
    const auto tok = ft::text::Tokenizer::from_file(file);
    const auto ids = tok.encode("Hello, world! <s> 12345 caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87  \t\n end");
    tok.decode(ids, false);
    tok.decode(ids, true);
  } catch (const ft::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == 'j') fuzz_json(rest);
  else fuzz_text(data[0], rest);
  return 0;
}
