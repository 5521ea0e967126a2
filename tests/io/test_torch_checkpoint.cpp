// Legacy pytorch_model*.bin checkpoints: read without Python, equal to the
// same weights in safetensors, and refused in one line when they are not a
// plain state dict or are damaged.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <ft/io/model_weights.hpp>
#include <ft/io/torch_checkpoint.hpp>

namespace test_torch_checkpoint {

using namespace ft;
namespace fs = std::filesystem;

namespace {
const fs::path fixtures = fs::path(FT_SOURCE_DIR) / "tests/fixtures";

std::vector<std::byte> bytes_of(const io::TensorView& t) { return {t.bytes.begin(), t.bytes.end()}; }

std::string error_of(const fs::path& file) {
  try {
    io::read_torch_checkpoint(file);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("torch checkpoints: shared storages, strides, offsets and every dtype read as torch wrote them") {
  auto tensors = io::read_torch_checkpoint(fixtures / "torch/odd.bin");
  auto expected = io::SafetensorsFile::open(fixtures / "torch/odd.expected.safetensors");
  CHECK(tensors.size() == expected.tensors().size());
  for (const io::TensorView& t : tensors) {
    CAPTURE(t.name);
    const io::TensorView& want = expected.at(t.name);
    CHECK(t.dtype == want.dtype);
    CHECK(t.shape == want.shape);
    CHECK(bytes_of(t) == bytes_of(want));
  }
}

TEST_CASE("model directories with pytorch_model.bin, single or sharded, hold the same weights as safetensors") {
  struct Case {
    const char* bin;
    const char* safetensors;
  };
  for (const Case& c : {Case{"torch/llama_gqa_bin", "parity/llama_gqa"}, Case{"torch/smollm2_sharded", "parity/smollm2_tied"}}) {
    CAPTURE(c.bin);
    auto bin = io::ModelWeights::open(fixtures / c.bin), st = io::ModelWeights::open(fixtures / c.safetensors);
    REQUIRE(bin.names() == st.names());
    for (const std::string& name : bin.names()) {
      CAPTURE(name);
      CHECK(bin.at(name).shape == st.at(name).shape);
      CHECK(bytes_of(bin.at(name)) == bytes_of(st.at(name)));
    }
  }
}

TEST_CASE("torch checkpoints that are not plain state dicts, or are damaged, are refused in one line") {
  const fs::path odd = fixtures / "torch/odd.bin";
  CHECK(error_of(fixtures / "torch/not_a_state_dict.bin").find("builds __main__.Opaque, which ft does not load") !=
        std::string::npos);
  CHECK(error_of(fixtures / "torch/odd.expected.safetensors").find("not a zip archive") != std::string::npos);

  std::ifstream in(odd, std::ios::binary);
  const std::string whole{std::istreambuf_iterator<char>(in), {}};
  const fs::path cut = fs::temp_directory_path() / ("ft-torch-cut-" + std::to_string(::getpid()) + ".bin");
  // Every cut point and many single-byte corruptions give an ft::Error (or, for
  // bytes the format does not check, a successful read) and never a crash.
  for (std::size_t size = 0; size < whole.size(); size += 7) {
    std::ofstream(cut, std::ios::binary | std::ios::trunc) << whole.substr(0, size);
    std::string message = error_of(cut);
    CAPTURE(size);
    CHECK(message.rfind(cut.string() + ": ", 0) == 0);
    CHECK(message.find('\n') == std::string::npos);
  }
  for (std::size_t at = 0; at < whole.size(); at += 5) {
    std::string damaged = whole;
    damaged[at] = char(damaged[at] ^ 0x5a);
    std::ofstream(cut, std::ios::binary | std::ios::trunc) << damaged;
    std::string message = error_of(cut);
    CHECK((message.empty() || message.rfind(cut.string() + ": ", 0) == 0));
  }
  fs::remove(cut);
}

}  // namespace test_torch_checkpoint
