// Fuzz target: the GGUF reader on arbitrary bytes. Opens the file, reads every
// metadata value through the typed getters, dequantises the small tensors, and
// builds the HF tokenizer from the vocabulary when the file has one.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ft/io/gguf.hpp>
#include <ft/io/gguf_tokenizer.hpp>

namespace {

template <class F> void tolerate(F&& f) {
  try {
    f();
  } catch (const ft::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("ft-fuzz-gguf-" + std::to_string(::getpid()));
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  try {
    const auto gguf = ft::io::GgufFile::open(file);
    const auto& m = gguf.metadata();
    for (const auto& entry : m.entries()) {
      const std::string& key = entry.first;  // clang 14 cannot capture a structured binding
      tolerate([&] { m.get_string(key); });
      tolerate([&] { m.get_u32(key); });
      tolerate([&] { m.get_i64(key); });
      tolerate([&] { m.get_f32(key); });
      tolerate([&] { m.get_bool(key); });
      tolerate([&] { m.get_strings(key); });
      tolerate([&] { m.get_integers(key); });
      tolerate([&] { m.get_floats(key); });
    }
    std::vector<float> sink;
    for (const auto& t : gguf.tensors()) {
      if (t.numel() > (1 << 16)) continue;
      sink.resize(std::size_t(t.numel()));
      tolerate([&] { ft::io::dequantize(gguf, t, sink.data(), t.numel()); });
    }
    tolerate([&] {
      const auto vocab = ft::io::read_gguf_vocab(gguf);
      (void)ft::io::hf_tokenizer_json(vocab, file.string()).dump(-1, ' ', false,
                                                                  nlohmann::json::error_handler_t::replace);
    });
  } catch (const ft::Error&) {
  }
  return 0;
}
