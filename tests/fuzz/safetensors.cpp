// Fuzz target: the safetensors reader on arbitrary bytes.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <ft/io/safetensors.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("ft-fuzz-safetensors-" + std::to_string(::getpid()));
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  try {
    auto st = ft::io::SafetensorsFile::open(file);
    std::vector<float> sink;
    for (const auto& t : st.tensors()) {
      if (t.numel() > (1 << 20)) continue;
      sink.resize(std::size_t(t.numel()));
      try {
        ft::io::copy_elements(st, t, sink.data(), t.numel());
      } catch (const ft::Error&) {
      }
    }
  } catch (const ft::Error&) {
  }
  return 0;
}
