// bitsandbytes' 4-bit quantization, byte for byte: the codes, absmax,
// double-quantized absmax and offset that bitsandbytes made of each input
// (tools/make_bnb_fixtures.py), and the weights it dequantized them to.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ft/io/safetensors.hpp>
#include <ft/quant/four_bit_weight.hpp>

namespace test_bnb4 {

namespace fs = std::filesystem;
using namespace ft;

const fs::path fixture = fs::path(FT_SOURCE_DIR) / "tests/fixtures/quant/bnb4.safetensors";

std::vector<float> floats(const io::SafetensorsFile& file, const std::string& name) {
  const io::TensorView& t = file.at(name);
  std::vector<float> out(std::size_t(t.numel()));
  io::copy_elements(file, t, out.data(), t.numel());
  return out;
}

std::vector<std::uint8_t> bytes(const io::SafetensorsFile& file, const std::string& name) {
  const io::TensorView& t = file.at(name);
  REQUIRE(t.dtype == "U8");
  std::vector<std::uint8_t> out(t.bytes.size());
  std::memcpy(out.data(), t.bytes.data(), out.size());
  return out;
}

// Equal to the bit (a float compare would let -0 pass for 0).
void check_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what);
  std::size_t differ = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i]) && differ++ == 0) first = i;
  CHECK_MESSAGE(differ == 0, what << ": " << differ << " values differ, the first at " << first << " ("
                                  << (differ ? got[first] : 0.f) << " against " << (differ ? want[first] : 0.f) << ")");
}

void check_codes(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want, const std::string& what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what);
  std::size_t differ = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && differ++ == 0) first = i;
  CHECK_MESSAGE(differ == 0, what << ": " << differ << " bytes differ, the first at " << first);
}

// The hashed case's input, as the generator computes it.
std::vector<float> hashed(std::int64_t n, float scale) {
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t h = std::uint32_t((std::uint64_t(i) * 2654435761ull) % (1ull << 32));
    x[std::size_t(i)] = (float(h) * 0x1p-32f - 0.5f) * scale;
  }
  return x;
}

std::string fnv1a(const std::vector<std::uint8_t>& data) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::uint8_t b : data) h = (h ^ b) * 0x100000001b3ull;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

TEST_CASE("bnb4: NF4 and FP4 codes, absmax, nested state and dequantized weights equal bitsandbytes' to the bit") {
  const io::SafetensorsFile file = io::SafetensorsFile::open(fixture);
  const nlohmann::json cases = nlohmann::json::parse(file.metadata().at("cases"));
  REQUIRE(cases.size() > 40);
  for (const nlohmann::json& c : cases) {
    const std::string name = c["name"];
    CAPTURE(name);
    quant::FourBitOptions options;
    options.type = c["type"] == "nf4" ? quant::FourBit::nf4 : quant::FourBit::fp4;
    options.blocksize = c["blocksize"];
    options.double_quant = c["double_quant"];
    const bool stored = !c.contains("hashed");
    const std::vector<float> input = stored ? floats(file, name + ".input")
                                            : hashed(c["hashed"]["count"], c["hashed"]["scale"].get<float>());
    const quant::FourBitWeight w = quant::quantize_weight(input, c["shape"].get<std::vector<std::int64_t>>(), c["dtype"], options);
    if (options.double_quant) {
      REQUIRE(w.nested.has_value());
      check_codes(w.nested->codes, bytes(file, name + ".absmax"), name + " nested codes");
      check_bits(w.nested->absmax, floats(file, name + ".nested_absmax"), name + " nested absmax");
      check_bits({w.nested->offset}, floats(file, name + ".offset"), name + " offset");
    } else {
      check_bits(w.absmax, floats(file, name + ".absmax"), name + " absmax");
    }
    std::vector<float> dequantized(std::size_t(w.numel()));
    w.dequantize(dequantized);
    // A layer is dequantized a panel of rows at a time: any run of rows gives the same values, whether its
    // first element starts a byte, a block, or neither.
    if (w.shape.size() == 2 && w.shape[0] > 5)
      for (const auto& [first, rows] : {std::pair<std::int64_t, std::int64_t>{1, 2}, {2, 3}}) {
        const std::int64_t cols = w.columns();
        std::vector<float> panel(std::size_t(rows * cols));
        w.dequantize_rows(first, panel);
        CHECK(std::equal(panel.begin(), panel.end(), dequantized.begin() + first * cols));
      }
    if (stored) {
      check_codes(w.packed, bytes(file, name + ".packed"), name + " codes");
      check_bits(dequantized, floats(file, name + ".dequantized"), name + " dequantized");
    } else {
      CHECK(fnv1a(w.packed) == c["hashed"]["packed_fnv1a"].get<std::string>());
      double sum = 0;
      for (float v : dequantized) sum += v;
      CHECK(sum == doctest::Approx(c["hashed"]["dequantized_sum"].get<double>()).epsilon(1e-12));
    }
  }
}

TEST_CASE("bnb4: the code books and midpoints") {
  // NF4 ascends and spans [-1, 1]; FP4's second half is its first negated.
  for (std::size_t i = 1; i < 16; ++i) CHECK(quant::nf4_code[i - 1] < quant::nf4_code[i]);
  for (std::size_t i = 0; i < 8; ++i) CHECK(quant::fp4_code[i + 8] == -quant::fp4_code[i]);
  CHECK(!std::signbit(quant::fp4_code[8]));
  for (std::size_t i = 1; i < 256; ++i) CHECK(quant::dynamic_code[i - 1] < quant::dynamic_code[i]);
  CHECK(quant::dynamic_code[255] == 1.0f);
  // A value on a midpoint takes the lower code, one just above it the upper.
  const float mid = (quant::nf4_code[9] + quant::nf4_code[10]) / 2;
  const std::vector<float> x = {1.0f, mid, std::nextafter(mid, 2.0f), 0.0f};
  const quant::CodedBlocks q = quant::quantize_4bit(x, 64, quant::FourBit::nf4);
  CHECK(q.codes == std::vector<std::uint8_t>{0xf9, 0xa7});
  CHECK_THROWS_WITH_AS(quant::quantize_weight(x, {4}, "float32", {quant::FourBit::nf4, 48, false}),
                       "4-bit block size 48 is not one bitsandbytes allows (32, 64, 128, 256, 512, 1024, 2048, 4096)",
                       Error);
  const std::vector<float> bad = {1.0f, std::nanf("")};
  CHECK_THROWS_WITH_AS(quant::quantize_4bit(bad, 64, quant::FourBit::nf4), "cannot quantize a tensor holding NaN or infinity",
                       Error);
}

}  // namespace test_bnb4
