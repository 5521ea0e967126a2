// Loading plugins: a good one is registered, and its inference engine
// answers through the host's decoder as the engine does in process; a
// corrupt file, a library without the entry point, another ABI version and
// another toolchain are each refused with one line that names the file.
#include <doctest/doctest.h>

#include <elf.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <ft/infer/engine_decoder.hpp>
#include <ft/infer/generate.hpp>
#include <ft/models/load.hpp>
#include <ft/plugin/decoder.hpp>
#include <ft/plugin/loader.hpp>

#include "support/generate_fixtures.hpp"

namespace test_loader {

namespace fs = std::filesystem;
using ft::plugin::Plugin;

namespace {
const fs::path fixture_dir = FT_FIXTURE_PLUGIN_DIR;

std::string refusal(const fs::path& file) {
  try {
    Plugin::load(file);
  } catch (const ft::Error& e) {
    std::string msg = e.what();
    CHECK(msg.find('\n') == std::string::npos);
    return msg;
  }
  return "loaded";
}

fs::path temp_file(const std::string& name, const std::string& bytes) {
  fs::path p = fs::temp_directory_path() / ("ft_test_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}
}  // namespace

TEST_CASE("a well-formed plugin registers its combinations") {
  auto plugin = Plugin::load(fixture_dir / "libfixture_good.so");
  CHECK(plugin->name() == "fixture-good");
  CHECK(plugin->version() == "1.2.3");
  ft::plugin::Registry registry;
  registry.add(plugin);
  registry.add(Plugin::load(fixture_dir / "libfixture_good.so"));  // the same file twice counts once
  REQUIRE(registry.factories().size() == 1);
  const auto& f = registry.factories()[0];
  CHECK(f.key == ft::plugin::TrainerKey{"llama", "bf16-mixed", "fixture-dp", "adamw", "lora"});
  CHECK(f.type_name ==
        "ft::Trainer<ft::models::Llama, ft::precision::BF16Mixed, fixture::Parallel, ft::optim::AdamW, "
        "ft::adapters::LoRA>");
  CHECK(registry.family_for("MistralForCausalLM") == "llama");
  CHECK_FALSE(registry.family_for("FalconForCausalLM"));
}

TEST_CASE("a plugin's inference engine answers through the host's decoder as the engine does in process") {
  ft::plugin::Registry registry;
  registry.add(Plugin::load(fixture_dir / "libfixture_good.so"));
  REQUIRE(registry.engines().size() == 2);  // the one family and device of its Trainers, in float32 and bfloat16
  CHECK(registry.engines()[0].key == ft::plugin::EngineKey{"llama", "float32", "cpu"});
  CHECK(registry.engines()[1].key == ft::plugin::EngineKey{"llama", "bfloat16", "cpu"});
  CHECK(registry.engines()[1].type_name == "ft::infer::Engine<bfloat16, ft::device::Cpu> for ft::models::Llama");
  CHECK_FALSE(registry.find_engine("LlamaForCausalLM", "float32", "cuda"));
  CHECK_FALSE(registry.find_engine("FalconForCausalLM", "float32", "cpu"));
  const ft::plugin::EngineFactory* factory = registry.find_engine("MistralForCausalLM", "float32", "cpu");
  REQUIRE(factory);

  // The same requests through the plugin and through an engine built here: the same logits, bit for bit.
  const std::string fixtures = std::string(FT_SOURCE_DIR) + "/tests/fixtures/";
  const std::string dir = fixtures + "parity/llama_gqa", adapter = fixtures + "peft/generate/llama_gqa_lora";
  ft::plugin::PluginDecoder plugin(*factory, dir);
  auto model = ft::models::load_pretrained<float>(dir);
  ft::infer::Engine<float> engine(*model);
  ft::infer::EngineDecoder<float> local(engine);
  for (ft::infer::Decoder* d : {static_cast<ft::infer::Decoder*>(&plugin), static_cast<ft::infer::Decoder*>(&local)}) {
    CHECK(d->load_adapter(adapter) == 0);
    d->reserve(64, 3);
  }
  CHECK(plugin.vocab_size() == local.vocab_size());
  CHECK(plugin.bytes_per_sequence() == local.bytes_per_sequence());
  std::vector<ft::infer::Request> requests;
  const auto cases = ft::testing::read_generate_cases(dir), adapted = ft::testing::read_generate_cases(adapter);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    requests.push_back(ft::testing::greedy_request(cases[i].prompt, ft::index_t(cases[i].tokens.size())));
    requests.push_back(ft::testing::greedy_request(adapted[i].prompt, ft::index_t(adapted[i].tokens.size())));
    requests.back().adapter = 0;
  }
  const auto through_plugin = ft::infer::generate(plugin, requests, true);
  const auto in_process = ft::infer::generate(local, requests, true);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    CAPTURE(i);
    CHECK(through_plugin[i].tokens == (i % 2 == 0 ? cases : adapted)[i / 2].tokens);
    CHECK(through_plugin[i].step_logits == in_process[i].step_logits);
  }
  CHECK(plugin.free_slots() == 3);
  // The plugin's own pool agrees: every slot is free again, and none is held twice.
  std::vector<ft::index_t> slots;
  for (int i = 0; i < 3; ++i) slots.push_back(plugin.acquire());
  std::vector<ft::index_t> sorted = slots;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<ft::index_t>{0, 1, 2});
  CHECK(plugin.acquire() == -1);
  for (const ft::index_t slot : slots) plugin.release(slot);
  CHECK_THROWS_WITH_AS(plugin.release(1), doctest::Contains("released but not held"), ft::Error);
  CHECK(plugin.free_slots() == 3);

  // What the plugin refuses comes back as one line.
  CHECK_THROWS_WITH_AS(plugin.load_adapter(dir), doctest::Contains("not a PEFT adapter directory"), ft::Error);
  const std::vector<std::int32_t> outside{1, 100000};
  const ft::index_t slot = plugin.acquire();
  const ft::infer::SlotStep step{slot, outside, -1};
  std::vector<float> logits(std::size_t(plugin.vocab_size()));
  CHECK_THROWS_WITH_AS(plugin.step({&step, 1}, logits.data()), doctest::Contains("token id 100000 is outside the vocabulary"),
                       ft::Error);
  plugin.release(slot);
  CHECK_THROWS_WITH_AS(ft::plugin::PluginDecoder(*factory, fixtures + "models/unknown-arch"),
                       doctest::Contains("architecture \"FalconForCausalLM\" is not supported"), ft::Error);
}

TEST_CASE("the stock CPU plugin offers every stock parallelism, and the closest to another differ only in it") {
  ft::plugin::Registry registry;
  registry.add(Plugin::load(FT_STOCK_CPU_PLUGIN));
  for (const char* parallelism : {"single", "ddp", "zero1", "zero2", "zero3"})
    CHECK(registry.find({"llama", "bf16-mixed", parallelism, "adamw", "lora"}) != nullptr);
  CHECK(registry.find({"llama", "bf16-mixed", "fixture-dp", "adamw", "lora"}) == nullptr);
  auto near = registry.closest({"llama", "bf16-mixed", "fixture-dp", "adamw", "lora"}, 3);
  REQUIRE(near.size() == 3);
  for (const auto* f : near) {
    CHECK(f->key.parallelism != "fixture-dp");
    CHECK(f->key == ft::plugin::TrainerKey{"llama", "bf16-mixed", f->key.parallelism, "adamw", "lora"});
  }
}

TEST_CASE("a library's needed libraries are read from its dynamic section without loading it") {
  const auto needed = ft::plugin::needed_libraries(FT_STOCK_CPU_PLUGIN);
  CHECK(std::find(needed.begin(), needed.end(), "libstdc++.so.6") != needed.end());
  CHECK(std::find(needed.begin(), needed.end(), "libc.so.6") != needed.end());
  CHECK_FALSE(ft::plugin::needs_cuda(FT_STOCK_CPU_PLUGIN));
  // A file that is no library, whole or cut short, names none.
  auto garbage = temp_file("garbage-needed.so", std::string(4096, '\x7f'));
  CHECK(ft::plugin::needed_libraries(garbage).empty());
  std::ifstream in(FT_STOCK_CPU_PLUGIN, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  auto cut = temp_file("cut-needed.so", bytes.substr(0, bytes.size() / 3));
  CHECK(ft::plugin::needed_libraries(cut).empty());
  // A string table said to be larger than the file: none, and no attempt to make room for it.
  std::string patched = bytes;
  Elf64_Ehdr eh;
  std::memcpy(&eh, patched.data(), sizeof eh);
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr p;
    std::memcpy(&p, patched.data() + eh.e_phoff + std::size_t(i) * sizeof p, sizeof p);
    if (p.p_type != PT_DYNAMIC) continue;
    for (std::size_t at = p.p_offset; at + sizeof(Elf64_Dyn) <= p.p_offset + p.p_filesz; at += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d;
      std::memcpy(&d, patched.data() + at, sizeof d);
      if (d.d_tag != DT_STRSZ) continue;
      d.d_un.d_val = std::uint64_t(1) << 62;
      std::memcpy(patched.data() + at, &d, sizeof d);
    }
  }
  REQUIRE(patched != bytes);
  auto huge = temp_file("huge-strings.so", patched);
  CHECK(ft::plugin::needed_libraries(huge).empty());
  fs::remove(garbage);
  fs::remove(cut);
  fs::remove(huge);
}

TEST_CASE("another ABI version is refused, naming both versions") {
  auto file = fixture_dir / "libfixture_bad_abi.so";
  CHECK(refusal(file) == "plugin " + file.string() + ": built for plugin ABI version " +
                             std::to_string(FT_PLUGIN_ABI_VERSION + 1) + ", but this ftrun speaks version " +
                             std::to_string(FT_PLUGIN_ABI_VERSION) + "; rebuild the plugin against this ft");
}

TEST_CASE("another toolchain is refused, naming both toolchains") {
  auto file = fixture_dir / "libfixture_other_toolchain.so";
  CHECK(refusal(file) == "plugin " + file.string() +
                             ": built with toolchain othercc-99/otherlib-1, but this ftrun was built with " +
                             FT_TOOLCHAIN_ID + "; rebuild the plugin with the same compiler and standard library");
}

TEST_CASE("a library without the entry point is refused") {
  auto file = fixture_dir / "libfixture_no_entry.so";
  CHECK(refusal(file) == "plugin " + file.string() +
                             ": not an ft plugin: it exports no ft_plugin_v entry point (define one with FT_PLUGIN)");
}

TEST_CASE("corrupt and truncated files are refused") {
  auto garbage = temp_file("garbage.so", std::string(4096, '\x7f'));
  CHECK(refusal(garbage) == "plugin " + garbage.string() + ": not a shared library: no ELF header");

  std::ifstream in(FT_STOCK_CPU_PLUGIN, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  auto truncated = temp_file("truncated.so", bytes.substr(0, bytes.size() / 3));
  CHECK(refusal(truncated).rfind("plugin " + truncated.string() + ": truncated: its headers reach byte ", 0) == 0);
  // Every cut, down to the ELF header itself, is refused without a crash.
  for (std::size_t cut : {bytes.size() - 1, bytes.size() / 2, std::size_t(4096), std::size_t(100), std::size_t(10)}) {
    auto cut_file = temp_file("cut.so", bytes.substr(0, cut));
    CHECK(refusal(cut_file).rfind("plugin " + cut_file.string() + ": ", 0) == 0);
    fs::remove(cut_file);
  }

  auto empty = temp_file("empty.so", "");
  CHECK(refusal(empty) == "plugin " + empty.string() + ": not a shared library: only 0 bytes");

  CHECK(refusal("/nonexistent/plugin.so") == "plugin /nonexistent/plugin.so: no such file");
  fs::remove(garbage);
  fs::remove(truncated);
  fs::remove(empty);
}

}  // namespace test_loader
