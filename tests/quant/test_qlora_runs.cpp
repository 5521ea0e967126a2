// QLoRA from the outside: ftrun convert writes 4-bit models as transformers
// + bitsandbytes save them and turns them back into whole ones; ftrun train
// trains LoRA over a 4-bit base, quantized as it loads or read 4-bit, with
// the same result; what cannot work is refused in one line.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/compare.hpp"
#include "support/files.hpp"
#include "support/tensors.hpp"
#include <ft/adapters/lora.hpp>
#include <ft/adapters/lora_files.hpp>
#include <ft/io/bnb_4bit.hpp>
#include <ft/io/model_weights.hpp>
#include <ft/io/safetensors.hpp>
#include <ft/models/load.hpp>

namespace test_qlora_runs {

namespace fs = std::filesystem;
using namespace ft;

const fs::path fixtures = fs::path(FT_SOURCE_DIR) / "tests/fixtures";

bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == s.size() - 1; }

struct Run {
  int code;
  std::string out, err;
};

Run ftrun(const fs::path& dir, const std::string& args) {
  fs::create_directories(dir);
  const std::string cmd = "OMP_NUM_THREADS=1 " FTRUN_PATH " " + args + " >" + (dir / "stdout").string() + " 2>" +
                          (dir / "stderr").string();
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ft::testing::read_bytes(dir / "stdout"),
          ft::testing::read_bytes(dir / "stderr")};
}

std::vector<double> losses(const fs::path& run) {
  std::vector<double> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (auto j = nlohmann::json::parse(line); j["split"] == "train") out.push_back(j["loss"].get<double>());
  return out;
}

// Every tensor of `want`, in `got` under its name with the same dtype, shape and bytes, and no other.
void check_same_tensors(const fs::path& got_file, const fs::path& want_file) {
  auto got = io::SafetensorsFile::open(got_file);
  auto want = io::SafetensorsFile::open(want_file);
  REQUIRE(got.tensors().size() == want.tensors().size());
  for (const io::TensorView& t : want.tensors()) {
    CAPTURE(t.name);
    const io::TensorView* g = got.find(t.name);
    REQUIRE(g != nullptr);
    CHECK(g->dtype == t.dtype);
    CHECK(g->shape == t.shape);
    CHECK((g->bytes.size() == t.bytes.size() && std::memcmp(g->bytes.data(), t.bytes.data(), t.bytes.size()) == 0));
  }
}

fs::path qlora_recipe(const fs::path& dir, const fs::path& model, const std::string& model_extra,
                      const std::string& strategy = "adapter = \"lora\"") {
  const fs::path path = dir / "recipe.toml";
  fs::create_directories(dir);
  std::ofstream(path) << "output_dir = \"" << (dir / "run").string() << "\"\nseed = 7\n[model]\npath = \""
                      << model.string() << "\"\n" << model_extra << "\n[data]\ntrain = \""
                      << (fixtures / "train/jargon_small.jsonl").string()
                      << "\"\nmax_seq_length = 128\npacking = true\n[strategy]\n" << strategy
                      << "\n[lora]\nr = 8\nalpha = 16\ntarget_modules = [\"all-linear\"]\n"
                      << "[train]\nper_device_train_batch_size = 2\nlearning_rate = 3e-3\nlr_scheduler_type = "
                         "\"constant\"\nmax_steps = 24\nlogging_steps = 1\n";
  return path;
}

TEST_CASE("qlora runs: ftrun convert --quantize writes what transformers + bitsandbytes save, byte for byte") {
  ft::testing::TempDir tmp("ft_qlora_convert");
  struct Case {
    const char* fixture;
    std::string flags;
  };
  for (const Case& c : {Case{"llama_nf4_double", "--quantize nf4 --double-quant"}, Case{"llama_fp4", "--quantize fp4"}}) {
    CAPTURE(c.fixture);
    const fs::path out = tmp.path / c.fixture;
    const Run r = ftrun(tmp.path, "convert " + (fixtures / "parity/llama_gqa").string() + " " + out.string() + " " + c.flags);
    INFO(r.err);
    REQUIRE(r.code == 0);
    const fs::path want_dir = fixtures / "quant" / c.fixture / "model";
    check_same_tensors(out / "model.safetensors", want_dir / "model.safetensors");
    const auto config = io::read_json_file(out / "config.json");
    const auto want_config = io::read_json_file(want_dir / "config.json");
    CHECK(config["quantization_config"] == want_config["quantization_config"]);
    // A 4-bit model is refused a second quantization, and whole-precision one --dequantize.
    const Run again = ftrun(tmp.path, "convert " + out.string() + " " + (tmp.path / "again").string() + " --quantize nf4");
    CHECK(again.code == 2);
    CHECK(again.err.find("is 4-bit already; --quantize takes a whole-precision model (--dequantize first)") != std::string::npos);
  }
  const Run bad = ftrun(tmp.path, "convert " + (fixtures / "parity/llama_gqa").string() + " " +
                                      (tmp.path / "bad").string() + " --quantize nf4 --quant-block-size 48");
  CHECK(bad.code == 2);
  CHECK(bad.err == "ftrun convert: --quant-block-size 48 is not one bitsandbytes allows (32, 64, 128, 256, 512, 1024, "
                   "2048, 4096)\n");
}

TEST_CASE("qlora runs: a 4-bit model dequantized, and a QLoRA adapter merged into it, compute what PEFT's QLoRA did") {
  ft::testing::TempDir tmp("ft_qlora_merge");
  const fs::path fixture = fixtures / "quant/llama_nf4_double";
  const fs::path merged = tmp.path / "merged", whole = tmp.path / "whole";
  Run r = ftrun(tmp.path, "convert " + (fixture / "model").string() + " " + merged.string() + " --merge-lora " +
                              (fixture / "adapter").string());
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("dequantizing the 4-bit weights of") != std::string::npos);
  CHECK_FALSE(io::read_json_file(merged / "config.json").contains("quantization_config"));
  // The merged whole-precision model's logits are PEFT's over the 4-bit base with the adapter unmerged.
  auto expected = io::SafetensorsFile::open(fixture / "expected.safetensors");
  auto batch_file = io::SafetensorsFile::open(fixtures / "parity/llama_gqa/expected.safetensors");
  auto ids = ft::testing::read_tensor<std::int64_t>(batch_file, "input_ids");
  auto labels = ft::testing::read_tensor<std::int64_t>(batch_file, "labels");
  const auto shape = batch_file.at("input_ids").shape;
  const models::Batch batch = models::causal_lm_batch(shape[0], shape[1], std::vector<std::int32_t>(ids.begin(), ids.end()),
                                                      std::vector<std::int32_t>(labels.begin(), labels.end()));
  auto model = models::load_pretrained<float>(merged, false);
  std::vector<float> logits(std::size_t(batch.rows() * model->config().vocab_size));
  model->forward_backward(batch, {.token_count = double(batch.scored_tokens()), .backward = false}, logits.data());
  CHECK(ft::testing::relative_error(logits, ft::testing::read_tensor<float>(expected, "logits")) <= 1e-5);

  // --dequantize alone: bitsandbytes' dequantized weights, in their own dtype.
  r = ftrun(tmp.path, "convert " + (fixture / "model").string() + " " + whole.string() + " --dequantize");
  REQUIRE(r.code == 0);
  const io::ModelWeights four_bit = io::ModelWeights::open(fixture / "model");
  auto out = io::SafetensorsFile::open(whole / "model.safetensors");
  const std::string name = "model.layers.1.mlp.down_proj.weight";
  const quant::FourBitWeight w = io::read_bnb_4bit(four_bit, name);
  std::vector<float> want(std::size_t(w.numel()));
  w.dequantize(want);
  CHECK(out.at(name).dtype == "F32");
  CHECK(out.at(name).shape == w.shape);
  CHECK(ft::testing::read_tensor<float>(out, name) == want);
  CHECK(out.tensors().size() == 21);  // the 4-bit state folded into the weights
  r = ftrun(tmp.path, "convert " + whole.string() + " " + (tmp.path / "again").string() + " --dequantize");
  CHECK(r.code == 2);
  CHECK(r.err.find("is not a quantized model (4-bit or GPTQ); --dequantize has nothing to do") != std::string::npos);
}

// PEFT continuing each fixture adapter over bitsandbytes' 4-bit model for 20
// AdamW steps (tools/make_qlora_fixtures.py), and ftrun train started from the
// same adapter over the same files. Both run float32; their one-step loss
// agrees to 1e-7, and Adam's normalised updates carry the products' last-bit
// differences forward, so the gap grows with the steps, and with how far
// this machine's BLAS kernels round apart from those of the machine PEFT ran
// on. Measured at step 20, largest relative gap of a loss and of an adapter
// tensor: on an AVX-512 Intel host 2.5e-5 and 6.8e-5; on an AVX2 AMD EPYC
// (OpenBLAS's Zen kernels) 1.7e-5 / 1.2e-5 (Llama NF4), 2.2e-4 / 6.6e-4
// (Llama FP4), 4.8e-7 / 6.9e-7 (GPT-NeoX NF4).
TEST_CASE("qlora runs: 20 QLoRA steps over bitsandbytes' files follow PEFT's trajectory: losses within 1e-3, every "
          "A and B within 2e-3") {
  ft::testing::TempDir tmp("ft_qlora_trajectory");
  for (const char* name : {"llama_nf4_double", "llama_fp4", "neox_nf4"}) {
    CAPTURE(name);
    const fs::path fixture = fixtures / "quant" / name;
    const nlohmann::json peft = io::read_json_file(fixture / "trajectory.json");
    const fs::path dir = tmp.path / name;
    fs::create_directories(dir);
    std::ofstream(dir / "recipe.toml") << "output_dir = \"" << (dir / "run").string() << "\"\n[model]\npath = \""
                                       << (fixture / "model").string() << "\"\n[data]\ntrain = \""
                                       << (fixture / "rows.jsonl").string() << "\"\nformat = \"tokens\"\npacking = false\n"
                                       << "[strategy]\nadapter = \"lora\"\n[lora]\ninit_from = \""
                                       << (fixture / "adapter").string() << "\"\n[train]\nper_device_train_batch_size = 2\n"
                                       << "max_steps = " << peft["steps"] << "\nlogging_steps = 1\n"
                                       << "lr_scheduler_type = \"constant\"\nwarmup_steps = 0\n"
                                       << "learning_rate = " << peft["learning_rate"] << "\n"
                                       << "weight_decay = " << peft["weight_decay"] << "\n"
                                       << "adam_beta1 = " << peft["adam_beta1"] << "\nadam_beta2 = " << peft["adam_beta2"]
                                       << "\nadam_epsilon = " << peft["adam_epsilon"] << "\n"
                                       << "max_grad_norm = " << peft["max_grad_norm"] << "\n";
    const Run r = ftrun(dir, "train " + (dir / "recipe.toml").string());
    INFO(r.err);
    REQUIRE(r.code == 0);
    const std::vector<double> got = losses(dir / "run");
    const std::vector<double> want = peft["loss"].get<std::vector<double>>();
    REQUIRE(got.size() == want.size());
    double loss_gap = 0, tensor_gap = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      CHECK(std::abs(got[i] - want[i]) <= 1e-3 * want[i]);
      loss_gap = std::max(loss_gap, std::abs(got[i] - want[i]) / want[i]);
    }
    CHECK(want.back() < 0.5 * want.front());  // the trajectory goes somewhere
    auto mine = io::SafetensorsFile::open(dir / "run/adapter/adapter_model.safetensors");
    auto trained = io::SafetensorsFile::open(fixture / "trained.safetensors");
    REQUIRE(mine.tensors().size() == trained.tensors().size());
    for (const io::TensorView& t : trained.tensors()) {
      CAPTURE(t.name);
      REQUIRE(mine.find(t.name) != nullptr);
      const double gap = ft::testing::relative_error(ft::testing::read_tensor<float>(mine, t.name),
                                                     ft::testing::read_tensor<float>(trained, t.name));
      CHECK(gap <= 2e-3);
      tensor_gap = std::max(tensor_gap, gap);
    }
    MESSAGE(name << ": largest loss gap " << loss_gap << ", largest adapter tensor gap " << tensor_gap);
  }
}

TEST_CASE("qlora runs: LoRA over a base quantized as it loads trains as over the same base read 4-bit") {
  ft::testing::TempDir tmp("ft_qlora_train");
  const fs::path base = fixtures / "train/tiny_llama";
  const Run on_load = ftrun(tmp.path / "a", "train " + qlora_recipe(tmp.path / "a", base,
                                                                    "quantize = \"nf4\"\nbnb_4bit_use_double_quant = true")
                                                           .string());
  INFO(on_load.err);
  REQUIRE(on_load.code == 0);
  const std::vector<double> a = losses(tmp.path / "a/run");
  REQUIRE(a.size() == 24);
  CHECK(a[20] + a[21] + a[22] + a[23] < 0.8 * (a[0] + a[1] + a[2] + a[3]));
  CHECK(fs::exists(tmp.path / "a/run/adapter/adapter_model.safetensors"));

  const fs::path four_bit = tmp.path / "tiny_llama_nf4";
  REQUIRE(ftrun(tmp.path, "convert " + base.string() + " " + four_bit.string() + " --quantize nf4 --double-quant").code == 0);
  const Run read = ftrun(tmp.path / "b", "train " + qlora_recipe(tmp.path / "b", four_bit, "").string());
  INFO(read.err);
  REQUIRE(read.code == 0);
  CHECK(losses(tmp.path / "b/run") == a);
  CHECK(ft::testing::read_bytes(tmp.path / "a/run/adapter/adapter_model.safetensors") ==
        ft::testing::read_bytes(tmp.path / "b/run/adapter/adapter_model.safetensors"));
  // Four bits move the first loss a little from the whole-precision base's.
  const Run whole = ftrun(tmp.path / "c", "train " + qlora_recipe(tmp.path / "c", base, "").string());
  REQUIRE(whole.code == 0);
  const std::vector<double> c = losses(tmp.path / "c/run");
  CHECK(c[0] != a[0]);
  CHECK(std::abs(c[0] - a[0]) < 1e-3 * c[0]);

  // The estimate counts the packed weights to the byte.
  const Run estimate = ftrun(tmp.path / "b", "estimate " + (tmp.path / "b/recipe.toml").string() + " --json");
  REQUIRE(estimate.code == 0);
  std::uint64_t packed = 0;
  const io::ModelWeights files = io::ModelWeights::open(four_bit);
  for (const std::string& name : files.names())
    if (io::bnb_4bit_type(files, name)) packed += io::read_bnb_4bit(files, name).bytes();
  const nlohmann::json planned = nlohmann::json::parse(estimate.out);
  CHECK(planned.at("heap_weights").at("bytes").get<std::uint64_t>() == packed);

  // The plan says what the base is; ftrun generate answers over it with the adapter.
  const Run plan = ftrun(tmp.path / "b", "train " + (tmp.path / "b/recipe.toml").string() + " --dry-run");
  CHECK(plan.out.find("linear weights in 4 bits (nf4 with double quantization, as the files hold it)") != std::string::npos);
  const Run answer = ftrun(tmp.path / "b", "generate " + (tmp.path / "b/run").string() +
                                              " --raw -p \"the model\" --max-tokens 6 --json");
  INFO(answer.err);
  CHECK(answer.code == 0);
  CHECK(answer.out.find("\"token_ids\"") != std::string::npos);

  // Run a records its base's quantization beside each adapter it writes, so generate over run a loads the base
  // as it trained: its answers are those over the 4-bit files. Run b's base was 4-bit files: nothing to record.
  CHECK(fs::exists(tmp.path / "a/run/adapter/base_quantization.json"));
  CHECK(fs::exists(tmp.path / "a/run/checkpoint-24/base_quantization.json"));
  CHECK_FALSE(fs::exists(tmp.path / "b/run/adapter/base_quantization.json"));
  const std::string sample = " --raw -p \"the model\" --max-tokens 16 --temperature 1 --seed 3 --json";
  const Run over_a = ftrun(tmp.path / "a", "generate " + (tmp.path / "a/run").string() + sample);
  INFO(over_a.err);
  CHECK(over_a.code == 0);
  CHECK(over_a.out == ftrun(tmp.path / "b", "generate " + (tmp.path / "b/run").string() + sample).out);
  // The base alone, quantized as it loads, answers as the 4-bit files do.
  CHECK(ftrun(tmp.path, "generate " + base.string() + " --quantize nf4 --double-quant" + sample).out ==
        ftrun(tmp.path, "generate " + four_bit.string() + sample).out);
  const Run twice = ftrun(tmp.path, "generate " + four_bit.string() + " --quantize nf4" + sample);
  CHECK(twice.code == 2);
  CHECK(one_line(twice.err));
  CHECK(twice.err.find("holds 4-bit weights already, which load as they are; leave --quantize out") != std::string::npos);
  const Run alone = ftrun(tmp.path, "generate " + base.string() + " --double-quant" + sample);
  CHECK(alone.code == 2);
  CHECK(alone.err.find("--double-quant and --quant-block-size shape a 4-bit base; add --quantize nf4") != std::string::npos);
  const Run block = ftrun(tmp.path, "generate " + base.string() + " --quantize fp4 --quant-block-size 48" + sample);
  CHECK(block.code == 2);
  CHECK(block.err.find("--quant-block-size 48 is not one bitsandbytes allows") != std::string::npos);
}

TEST_CASE("qlora runs: checkpointing, activation offload and the fused optimizer over a 4-bit base train the same "
          "steps; every precision trains over it") {
  ft::testing::TempDir tmp("ft_qlora_compose");
  const fs::path recipe = qlora_recipe(tmp.path, fixtures / "train/tiny_llama",
                                       "quantize = \"nf4\"\nbnb_4bit_use_double_quant = true");
  // The fused optimizer steps each block before the global norm is known, so none of these runs clips.
  auto run = [&](const std::string& name, const std::string& sets) {
    const Run r = ftrun(tmp.path / name, "train " + recipe.string() + " --set train.max_steps=6 --set train.max_grad_norm=0 "
                                              "--set output_dir=" + (tmp.path / name / "run").string() + " " + sets);
    INFO(r.err);
    REQUIRE(r.code == 0);
    return losses(tmp.path / name / "run");
  };
  const std::vector<double> plain = run("plain", "");
  REQUIRE(plain.size() == 6);
  const std::string adapter = ft::testing::read_bytes(tmp.path / "plain/run/adapter/adapter_model.safetensors");
  CHECK(run("composed", "--set train.gradient_checkpointing=every_block --set train.activation_offloading=true "
                        "--set train.fuse_optimizer_with_backward=true") == plain);
  CHECK(ft::testing::read_bytes(tmp.path / "composed/run/adapter/adapter_model.safetensors") == adapter);
  for (const char* precision : {"bf16-mixed", "bf16-true"}) {
    CAPTURE(precision);
    const std::vector<double> got = run(precision, std::string("--set strategy.precision=") + precision);
    REQUIRE(got.size() == 6);
    CHECK(std::abs(got[0] - plain[0]) < 2e-3 * plain[0]);  // the same 4-bit base, products in bf16 (measured 2e-4)
  }
}

TEST_CASE("gptq runs: LoRA over a GPTQ base trains as over its dequantized weights, and generate answers over it") {
  ft::testing::TempDir tmp("ft_gptq_train");
  const fs::path gptq = fixtures / "gptq/tiny_llama_4bit_desc_act";
  // The dequantized weights beside the tokenizer, as a model directory of their own.
  const fs::path whole = tmp.path / "whole";
  fs::create_directories(whole);
  for (const char* f : {"dequantized/config.json", "dequantized/model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(gptq / f, whole / fs::path(f).filename());
  const Run packed = ftrun(tmp.path / "a", "train " + qlora_recipe(tmp.path / "a", gptq, "").string());
  INFO(packed.err);
  REQUIRE(packed.code == 0);
  const Run dequantized = ftrun(tmp.path / "b", "train " + qlora_recipe(tmp.path / "b", whole, "").string());
  REQUIRE(dequantized.code == 0);
  const std::vector<double> a = losses(tmp.path / "a/run");
  REQUIRE(a.size() == 24);
  CHECK(a == losses(tmp.path / "b/run"));
  CHECK(a[20] + a[21] + a[22] + a[23] < a[0] + a[1] + a[2] + a[3]);
  const Run plan = ftrun(tmp.path / "a", "train " + (tmp.path / "a/recipe.toml").string() + " --dry-run");
  CHECK(plan.out.find("linear weights quantized by GPTQ (4-bit codes in groups of 16, as the files hold it)") !=
        std::string::npos);
  const Run answer = ftrun(tmp.path / "a", "generate " + (tmp.path / "a/run").string() +
                                              " --raw -p \"the model\" --max-tokens 6 --json");
  INFO(answer.err);
  CHECK(answer.code == 0);
  CHECK(answer.out.find("\"token_ids\"") != std::string::npos);
  const Run full = ftrun(tmp.path / "c", "train " + qlora_recipe(tmp.path / "c", gptq, "", "adapter = \"full\"").string() +
                                            " --dry-run");
  CHECK(full.code == 2);
  CHECK(full.err.find("a GPTQ base (4-bit codes in groups of 16, as the files hold it) is frozen") != std::string::npos);
  const Run convert = ftrun(tmp.path, "convert " + gptq.string() + " " + (tmp.path / "out").string());
  CHECK(convert.code == 2);
  CHECK(one_line(convert.err));
  CHECK(convert.err.find("is a GPTQ model, which ftrun train, generate, serve and eval read as it is; ftrun convert "
                         "writes it whole (--dequantize) or with an adapter merged (--merge-lora)") != std::string::npos);

  // --dequantize writes the reference's dequantization, tensor for tensor: fp16 weights where GPTQ codes were.
  const fs::path again = tmp.path / "again";
  Run r = ftrun(tmp.path, "convert " + gptq.string() + " " + again.string() + " --dequantize");
  INFO(r.err);
  REQUIRE(r.code == 0);
  check_same_tensors(again / "model.safetensors", gptq / "dequantized/model.safetensors");
  CHECK_FALSE(io::read_json_file(again / "config.json").contains("quantization_config"));

  // --merge-lora dequantizes first, and the merged model computes what the adapter over the GPTQ base computes.
  const fs::path merged = tmp.path / "merged";
  r = ftrun(tmp.path, "convert " + gptq.string() + " " + merged.string() + " --merge-lora " +
                          (tmp.path / "a/run/adapter").string() + " --dtype float32");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("dequantizing the GPTQ weights of") != std::string::npos);
  auto base = std::make_unique<models::Transformer<float>>(models::read_model_spec(gptq), false);
  base->load(io::ModelWeights::open(gptq));
  adapters::LoraModel<float> lora(*base, {.r = 8, .alpha = 16, .target_modules = {"all-linear"}, .seed = 3});
  adapters::load_peft_adapter(lora, base->config(), tmp.path / "a/run/adapter");
  std::vector<std::int32_t> ids(24);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t((i * 37 + 5) % std::size_t(base->config().vocab_size));
  const models::Batch batch = models::causal_lm_batch(2, 12, ids, ids);
  auto logits = [&](models::Transformer<float>& m) {
    std::vector<float> out(std::size_t(batch.rows() * m.config().vocab_size));
    m.forward_backward(batch, {.token_count = double(batch.scored_tokens()), .backward = false}, out.data());
    return out;
  };
  const std::vector<float> adapted = logits(*base);
  CHECK(ft::testing::relative_error(logits(*models::load_pretrained<float>(merged, false)), adapted) <= 1e-5);
  CHECK(ft::testing::relative_error(logits(*models::load_pretrained<float>(again, false)), adapted) > 1e-4);
}

TEST_CASE("qlora runs: what a 4-bit base cannot do is refused in one line, exit 2") {
  ft::testing::TempDir tmp("ft_qlora_refuse");
  const fs::path base = fixtures / "train/tiny_llama";
  auto refused = [&](const std::string& model_extra, const std::string& strategy) {
    const Run r = ftrun(tmp.path, "train " + qlora_recipe(tmp.path, base, model_extra, strategy).string() + " --dry-run");
    CHECK(r.code == 2);
    CHECK(one_line(r.err));
    return r.err;
  };
  CHECK(refused("quantize = \"nf4\"", "adapter = \"full\"")
            .find("a 4-bit base (nf4, blocks of 64, quantized as it loads) is frozen, but strategy.adapter = \"full\" "
                  "trains the base weights") != std::string::npos);
  CHECK(refused("quantize = \"nf4\"\nbnb_4bit_compute_dtype = \"bfloat16\"", "")
            .find("model.bnb_4bit_compute_dtype = \"bfloat16\", but strategy.precision = \"fp32\" runs products in "
                  "float32") != std::string::npos);
  CHECK(refused("quantize = \"nf4\"\nload_in_4bit = true\nbnb_4bit_quant_type = \"fp4\"", "")
            .find("ask for different 4-bit types") != std::string::npos);
  CHECK(refused("quant_block_size = 128", "").find("shape a 4-bit base, but the recipe asks for none") != std::string::npos);
  CHECK(refused("quant_block_size = 100", "").find("100 is not a block size bitsandbytes allows") != std::string::npos);

  // Quantizations ft does not read, named.
  const fs::path gptq = tmp.path / "gptq";
  fs::create_directories(gptq);
  nlohmann::json config = io::read_json_file(base / "config.json");
  config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}};
  std::ofstream(gptq / "config.json") << config.dump();
  CHECK(ft::testing::error_of([&] { (void)models::read_model(gptq); })
            .find("quantization_config.quant_method \"awq\" is not supported") != std::string::npos);
  config["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_8bit", true}};
  std::ofstream(gptq / "config.json") << config.dump();
  CHECK(ft::testing::error_of([&] { (void)models::read_model(gptq); }).find("8-bit weights (load_in_8bit)") !=
        std::string::npos);
}

}  // namespace test_qlora_runs
