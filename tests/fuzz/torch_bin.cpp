// Fuzz target: the legacy torch checkpoint reader (zip + pickle) on arbitrary bytes.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <ft/io/torch_checkpoint.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("ft-fuzz-torch-bin-" + std::to_string(::getpid()));
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  try {
    auto tensors = ft::io::read_torch_checkpoint(file);
    std::size_t sum = 0;
    for (const auto& t : tensors)
      for (std::byte b : t.bytes) sum += std::size_t(b);  // every byte of every view must be readable
    static volatile std::size_t sink;
    sink = sum;
  } catch (const ft::Error&) {
  }
  return 0;
}
