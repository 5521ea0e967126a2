// ftrun from the outside: exit codes and the exact shape of its messages.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include <ft/io/safetensors.hpp>

#include "support/files.hpp"
#include "support/skip.hpp"

namespace test_ftrun {

namespace fs = std::filesystem;

namespace {

struct Run {
  int code;
  std::string out, err;
};

// Removed, with everything the runs wrote, when this process exits.
const ft::testing::TempDir scratch_dir("ft_cli");
const fs::path& scratch = scratch_dir.path;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

Run ftrun(const std::string& args, const std::string& env = "") {
  fs::create_directories(scratch);
  std::string cmd = env + " " FTRUN_PATH " " + args + " >" + (scratch / "out").string() + " 2>" +
                    (scratch / "err").string();
  int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(scratch / "out"), slurp(scratch / "err")};
}

const std::string fixtures = std::string(FT_SOURCE_DIR) + "/tests/fixtures";
const std::string fixture_plugins = FT_FIXTURE_PLUGIN_DIR;

// Writes a recipe (model and data from the fixtures, plus `extra`) and returns its path.
std::string recipe(const std::string& extra, const std::string& model = "tiny-llama") {
  fs::create_directories(scratch);
  auto path = scratch / "recipe.toml";
  std::ofstream(path) << "[model]\npath = \"" << fixtures << "/models/" << model << "\"\n[data]\ntrain = \""
                      << fixtures << "/data/tiny.jsonl\"\n"
                      << extra;
  return path.string();
}

bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == s.size() - 1; }

}  // namespace

TEST_CASE("ftrun plugins lists the stock plugins and their combinations") {
  Run r = ftrun("plugins");
  CHECK(r.code == 0);
  CHECK(r.out.find("ft-cpu 0.1.0") != std::string::npos);
  CHECK(r.out.find("  llama, bf16-mixed, single, adamw, lora\n") != std::string::npos);
  CHECK(r.out.find("  gpt_neox, fp32, single, adafactor, full\n") != std::string::npos);
}

TEST_CASE("strategy.device chooses where a trainer runs: cuda where this build has it, one line where not") {
  // recipe() writes one file: each run writes the recipe it reads.
  // glibc's LD_DEBUG=files names every library a run maps.
  Run cpu_plan = ftrun("train " + recipe("[strategy]\nadapter = \"full\"\n") + " --dry-run", "LD_DEBUG=files");
  const std::string cuda = "[strategy]\ndevice = \"cuda\"\nadapter = \"full\"\n";
  Run plan = ftrun("train " + recipe(cuda) + " --dry-run", "LD_DEBUG=files");
  Run listed = ftrun("plugins");
  CHECK(cpu_plan.code == 0);
  CHECK(cpu_plan.err.find("libft_cpu.so") != std::string::npos);
  // A run on the CPU leaves the CUDA plugin, and CUDA's libraries, unloaded.
  CHECK(cpu_plan.err.find("libft_cuda") == std::string::npos);
  CHECK(cpu_plan.err.find("libcublasLt") == std::string::npos);
#ifdef FT_WITH_CUDA
  CHECK(plan.code == 0);
  CHECK(plan.err.find("libcublasLt") != std::string::npos);
  CHECK(plan.out.find("#   plugin       ft-cuda ") != std::string::npos);
  CHECK(plan.out.find("ft::adapters::Full, ft::device::Cuda>\n#   device       cuda: ") != std::string::npos);
  CHECK(listed.out.find("ft-cuda ") != std::string::npos);
  const std::size_t on_cuda = listed.out.find("  model, precision, parallelism, optimizer, adapter (on cuda)\n");
  CHECK(on_cuda != std::string::npos);
  CHECK(listed.out.find("  llama, bf16-mixed, single, adamw, lora\n", on_cuda) != std::string::npos);
  // fp16 with its loss scale runs there too, as every stock combination does.
  const std::string fp16_recipe = "[strategy]\ndevice = \"cuda\"\nprecision = \"fp16-mixed\"\nadapter = \"full\"\n";
  Run fp16 = ftrun("train " + recipe(fp16_recipe) + " --dry-run");
  CHECK(fp16.code == 0);
  CHECK(fp16.out.find("ft::precision::FP16Mixed") != std::string::npos);
  CHECK(fp16.out.find("ft::adapters::Full, ft::device::Cuda>\n") != std::string::npos);
  // A third party's policy offered on the CPU only is a missing combination on cuda, which names the device.
  const std::string third_party = "[strategy]\ndevice = \"cuda\"\nparallelism = \"fixture-dp\"\nprecision = \"bf16-mixed\"\n";
  Run missing = ftrun("train " + recipe(third_party) + " --dry-run --plugin " + fixture_plugins + "/libfixture_good.so");
  CHECK(missing.code == 2);
  CHECK(missing.err.rfind("ftrun: no plugin offers the trainer (llama, bf16-mixed, fixture-dp, adamw, lora) on cuda\n",
                          0) == 0);
  CHECK(missing.err.find("(llama, bf16-mixed, fixture-dp, adamw, lora)  from fixture-good  (differs in device)") !=
        std::string::npos);
  CHECK(missing.err.find("ft::adapters::LoRA, ft::device::Cuda>)  // in a .cu source") != std::string::npos);
  // Training stops in one line where no GPU answers (and trains where one does).
  Run train =
      ftrun("train " + recipe(cuda) + " --set train.max_steps=1 --set output_dir=" + (scratch / "cuda-run").string());
  if (train.code != 0) {
    CHECK(train.code == 2);
    CHECK(one_line(train.err));
    CHECK(train.err.rfind("ftrun: strategy.device = \"cuda\", but no device of that kind answers: ", 0) == 0);
  }
#else
  CHECK(plan.code == 2);
  CHECK(one_line(plan.err));
  CHECK(plan.err.find("strategy.device: no plugin offers the device \"cuda\"; offered: cpu (this ft was built without "
                      "CUDA") != std::string::npos);
  CHECK(listed.out.find("cuda: not built") != std::string::npos);
#endif
  Run typo = ftrun("train " + recipe("[strategy]\ndevice = \"gpu\"\n") + " --dry-run");
  CHECK(typo.code == 2);
  CHECK(one_line(typo.err));
  CHECK(typo.err.find(":6:10: strategy.device: ") != std::string::npos);
}

TEST_CASE("a plugin named with --plugin that is bad is refused in one line, exit 3") {
  for (const char* name : {"libfixture_bad_abi.so", "libfixture_other_toolchain.so", "libfixture_no_entry.so"}) {
    Run r = ftrun("plugins --plugin " + fixture_plugins + "/" + name);
    CHECK(r.code == 3);
    CHECK(one_line(r.err));
    CHECK(r.err.rfind("ftrun: plugin " + fixture_plugins + "/" + name + ": ", 0) == 0);
  }
  fs::create_directories(scratch);
  std::ofstream(scratch / "corrupt.so") << std::string(200, '#');
  Run r = ftrun("plugins --plugin " + (scratch / "corrupt.so").string());
  CHECK(r.code == 3);
  CHECK(one_line(r.err));
  CHECK(r.err == "ftrun: plugin " + (scratch / "corrupt.so").string() + ": not a shared library: no ELF header\n");
}

TEST_CASE("bad plugins found on FT_PLUGIN_PATH are reported, good ones still load") {
  Run r = ftrun("plugins", "FT_PLUGIN_PATH=" + fixture_plugins);
  CHECK(r.code == 3);
  CHECK(r.out.find("fixture-good 1.2.3") != std::string::npos);
  CHECK(r.out.find("ft-cpu") != std::string::npos);
  CHECK(r.err.find("libfixture_bad_abi.so: built for plugin ABI version") != std::string::npos);
  // train only warns: the combination it needs is there.
  Run t = ftrun("train " + recipe("") + " --dry-run", "FT_PLUGIN_PATH=" + fixture_plugins);
  CHECK(t.code == 0);
  CHECK(t.err.find("ftrun: warning: plugin ") != std::string::npos);
}

TEST_CASE("train --dry-run prints a resolved recipe that is itself a valid recipe") {
  Run r = ftrun("train " + recipe("[strategy]\nprecision = \"bf16-mixed\"\n") + " --dry-run --set train.max_steps=7");
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  CHECK(r.out.find("#   trainer      ft::Trainer<ft::models::Llama, ft::precision::BF16Mixed, ft::parallel::Single, "
                   "ft::optim::AdamW, ft::adapters::LoRA>") != std::string::npos);
  CHECK(r.out.find("family = \"llama\"") != std::string::npos);
  CHECK(r.out.find("max_steps = 7") != std::string::npos);
  CHECK(r.out.find("#   " FTRUN_PATH " train ") != std::string::npos);
  std::ofstream(scratch / "resolved.toml") << r.out;
  Run again = ftrun("train " + (scratch / "resolved.toml").string() + " --dry-run");
  CHECK(again.code == 0);
  CHECK(again.out.substr(again.out.find("\n\n")) == r.out.substr(r.out.find("\n\n")));
}

TEST_CASE("the model family comes from config.json") {
  Run r = ftrun("train " + recipe("", "tiny-gpt-neox") + " --dry-run");
  CHECK(r.code == 0);
  CHECK(r.out.find("family = \"gpt_neox\"") != std::string::npos);
  CHECK(r.out.find("adapter      lora: r 8, alpha 16, dropout 0 on query_key_value") != std::string::npos);
  Run bad = ftrun("train " + recipe("", "unknown-arch") + " --dry-run");
  CHECK(bad.code == 2);
  CHECK(bad.err == "ftrun: " + fixtures +
                       "/models/unknown-arch/config.json: architecture \"FalconForCausalLM\" is not supported by any "
                       "plugin; supported: BloomForCausalLM, GPTBigCodeForCausalLM, GPTNeoXForCausalLM, Gemma2ForCausalLM, "
                       "Gemma3ForCausalLM, Gemma3ForConditionalGeneration, GemmaForCausalLM, "
                       "GraniteForCausalLM, GraniteMoeForCausalLM, GraniteMoeSharedForCausalLM, LlamaForCausalLM, "
                       "MistralForCausalLM, MixtralForCausalLM, "
                       "Phi3ForCausalLM, Qwen2ForCausalLM, Qwen2MoeForCausalLM, Qwen3ForCausalLM, "
                       "Qwen3MoeForCausalLM\n");
}

TEST_CASE("recipe errors are one line with file, line, column and key; exit 2") {
  std::string file = recipe("[train]\nlearnig_rate = 1e-4\n");
  Run r = ftrun("train " + file + " --dry-run");
  CHECK(r.code == 2);
  CHECK(r.err.rfind("ftrun: " + file + ":6:1: train.learnig_rate: unknown key (did you mean train.learning_rate?); "
                    "allowed in [train]: ", 0) == 0);
  CHECK(one_line(r.err));

  r = ftrun("train " + (file = recipe("[train]\nlearning_rate = \"fast\"\n")) + " --dry-run");
  CHECK(r.code == 2);
  CHECK(r.err == "ftrun: " + file + ":6:17: train.learning_rate: expected a number, got a string\n");

  r = ftrun("train " + (file = recipe("[train]\nper_device_train_batch_size = 0\n")) + " --dry-run");
  CHECK(r.code == 2);
  CHECK(r.err == "ftrun: " + file + ":6:31: train.per_device_train_batch_size: 0 is too small; allowed: an integer >= 1\n");

  r = ftrun("train " + (file = recipe("[data]\nvalidation = \"/nonexistent.jsonl\"\n")) + " --dry-run");
  CHECK(r.code == 2);
  CHECK(r.err.rfind("ftrun: " + file + ":", 0) == 0);
  CHECK(r.err.find(": data: ") == std::string::npos);  // the duplicate [data] table is a TOML error
  r = ftrun("train " + recipe("") + " --dry-run --set data.validation=/nonexistent.jsonl");
  CHECK(r.code == 2);
  CHECK(r.err == "ftrun: command line (--set data.validation=/nonexistent.jsonl): data.validation: no such file: "
                 "/nonexistent.jsonl; allowed: a JSONL or JSON file, or artificial:[<word>-]chars-<N>-entries-<M> or "
                 "artificial:[<word>-]tokens-<N>[plus]-entries-<M>, counts with an optional k (x 1024) or m (x 1024^2), "
                 "e.g. artificial:news-chars-512-entries-4096 or artificial:news-tokens-128kplus-entries-320 "
                 "(or \"\" for none)\n");

  r = ftrun("train /nonexistent/recipe.toml --dry-run");
  CHECK(r.code == 2);
  CHECK(r.err == "ftrun: /nonexistent/recipe.toml: no such recipe file\n");
}

TEST_CASE("a policy name no plugin offers is located at its key") {
  std::string file = recipe("[strategy]\noptimizer = \"adamx\"\n");
  Run r = ftrun("train " + file + " --dry-run");
  CHECK(r.code == 2);
  CHECK(r.err == "ftrun: " + file + ":6:13: strategy.optimizer: no plugin offers the optimizer \"adamx\"; offered: "
                                    "adafactor, adamw, adamw4bit, adamw8bit, lion, sgd\n");
}

TEST_CASE("a missing combination lists the closest and the C++ that would build it") {
  std::string file = recipe("[strategy]\nparallelism = \"fixture-dp\"\nprecision = \"bf16-mixed\"\n");
  // fixture-dp is a known name only once a plugin offers it: the fixture that offers it serves it.
  Run with_plugin = ftrun("train " + file + " --dry-run --plugin " + fixture_plugins + "/libfixture_good.so");
  CHECK(with_plugin.code == 0);
  CHECK(with_plugin.out.find("fixture-good 1.2.3") != std::string::npos);

  file = recipe("[strategy]\nparallelism = \"fixture-dp\"\nprecision = \"fp32\"\n");
  Run r = ftrun("train " + file + " --dry-run --plugin " + fixture_plugins + "/libfixture_good.so");
  CHECK(r.code == 2);
  CHECK(r.err.rfind("ftrun: no plugin offers the trainer (llama, fp32, fixture-dp, adamw, lora)\n  closest offered:\n",
                    0) == 0);
  CHECK(r.err.find("(llama, bf16-mixed, fixture-dp, adamw, lora)  from fixture-good  (differs in precision)") !=
        std::string::npos);
  CHECK(r.err.find("FT_PLUGIN(\"my-plugin\", \"0.1.0\",\n              ft::Trainer<ft::models::Llama, "
                   "ft::precision::FP32, /* the policy named \"fixture-dp\" */,\n                          "
                   "ft::optim::AdamW, ft::adapters::LoRA>)") != std::string::npos);
}

TEST_CASE("a third party's parallelism declares nothing the estimate reads: estimate refuses in one line, and train "
          "says that it did not check the memory") {
  fs::create_directories(scratch);
  const fs::path file = scratch / "third-party-estimate.toml";
  std::ofstream(file) << "output_dir = \"" << (scratch / "third-party-run").string() << "\"\n[model]\npath = \""
                      << FT_SOURCE_DIR << "/models/ft-tiny-llama\"\n[data]\ntrain = \"" << fixtures
                      << "/data/tiny.jsonl\"\n[strategy]\nparallelism = \"fixture-dp\"\nprecision = \"bf16-mixed\"\n"
                      << "[train]\nmax_steps = 1\n";
  const std::string plugin = " --plugin " + fixture_plugins + "/libfixture_good.so";
  const std::string why = "no memory model for the parallelism \"fixture-dp\": it is not one of ft's (single, ddp, "
                          "zero1, zero2, zero3, pipeline) and declares nothing the estimate reads\n";
  Run estimate = ftrun("estimate " + file.string() + plugin);
  CHECK(estimate.code == 2);
  CHECK(estimate.err == "ftrun: " + why);
  Run train = ftrun("train " + file.string() + plugin);
  CHECK(train.code == 0);
  CHECK(train.err.find("ftrun: memory not checked before the run: " + why) != std::string::npos);
}

TEST_CASE("policy checks of the chosen Trainer run in the plugin") {
  Run r = ftrun("train " + recipe("[lora]\ntarget_modules = [\"dense\"]\n") + " --dry-run");
  CHECK(r.code == 2);
  CHECK(r.err == "ftrun: lora.target_modules: \"dense\" matches no module of the llama family; allowed: q_proj, "
                 "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, shared_expert_gate, input_linear, output_linear, w1, w2, w3, gate, or "
                 "\"all-linear\"\n");
}

TEST_CASE("command-line misuse is exit 2") {
  CHECK(ftrun("").code == 2);
  CHECK(ftrun("train").code == 2);
  CHECK(ftrun("frobnicate").code == 2);
  CHECK(ftrun("--version").out == "ftrun 0.1.0\n");
}

TEST_CASE("every stock recipe names its launch command and resolves") {
  const fs::path root = FT_SOURCE_DIR;
  int count = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root / "recipes")) {
    if (entry.path().extension() != ".toml") continue;
    ++count;
    std::string relative = fs::relative(entry.path(), root).string();
    CAPTURE(relative);
    const std::string text = slurp(entry.path());
    CHECK(text.find("#   ftrun train " + relative) != std::string::npos);
    // A model that a script fetches (tools/main_job.sh) is not in a fresh clone: resolve the
    // recipe against a fixture of the same family instead, so every other key is still checked.
    std::string sets;
    const auto model = text.find("\n[model]\npath = \"");
    REQUIRE(model != std::string::npos);
    const auto start = model + std::string("\n[model]\npath = \"").size();
    const std::string path = text.substr(start, text.find('"', start) - start);
    if (!fs::exists(root / path)) sets = " --set model.path=" + fixtures + "/train/tiny_llama";
    Run r = ftrun("train " + relative + " --dry-run" + sets, "cd " + root.string() + " &&");
    CHECK(r.code == 0);
    CHECK(r.err.empty());
  }
  CHECK(count >= 3);
}

TEST_CASE("ftrun eval reports HF's loss and perplexity over pre-tokenized rows") {
  const std::string model = fixtures + "/parity/llama_gqa";
  std::ifstream expected_file(model + "/eval_expected.json");
  std::string expected_text{std::istreambuf_iterator<char>(expected_file), {}};
  auto number_after = [](const std::string& text, const std::string& key) {
    return std::stod(text.substr(text.find("\"" + key + "\"") + key.size() + 3));
  };
  double want = number_after(expected_text, "loss");
  // Packing many rows per pass or one row per pass gives the same result.
  for (const char* max_tokens : {"2048", "3"}) {
    CAPTURE(max_tokens);
    Run r = ftrun("eval --model " + model + " --data " + model + "/eval.jsonl --json --max-tokens " + max_tokens);
    REQUIRE(r.code == 0);
    CHECK(std::abs(number_after(r.out, "loss") - want) / want < 1e-5);
    CHECK(r.out.find("\"tokens\":33") != std::string::npos);
    CHECK(r.err.empty());  // no progress bar when stderr is not a terminal
  }
}

TEST_CASE("ftrun eval scores in a plugin's engine on the device asked for: the same loss and logits") {
  // The CPU standing in for a device, from a plugin on FT_PLUGIN_PATH (tests/support/cpu_as_device.hpp).
  const std::string model = fixtures + "/parity/llama_gqa";
  const std::string ask = "eval --model " + model + " --data " + model + "/eval.jsonl --json --max-tokens 7";
  const std::string test_plugins = "FT_PLUGIN_PATH=" FT_TEST_PLUGIN_DIR;
  std::vector<std::vector<float>> logits;
  std::vector<std::string> outputs;
  for (const char* device : {"cpu", "cpu-as-device"}) {
    CAPTURE(device);
    const fs::path out = scratch / (std::string("device-logits-") + device + ".safetensors");
    const Run r = ftrun(ask + " --device " + device + " --logits-out " + out.string(), test_plugins);
    INFO(r.err);
    REQUIRE(r.code == 0);
    outputs.push_back(r.out);
    auto file = ft::io::SafetensorsFile::open(out);
    const auto& t = file.at("next_token_logits");
    logits.emplace_back(std::size_t(t.numel()));
    ft::io::copy_elements(file, t, logits.back().data(), t.numel());
  }
  CHECK(outputs[0] == outputs[1]);  // the device's products are the CPU's: the same loss to the last digit
  CHECK(logits[0] == logits[1]);
  const Run bf16 = ftrun(ask + " --device cpu-as-device --dtype bfloat16", test_plugins);
  CHECK(bf16.code == 0);
  CHECK(bf16.out.find("\"tokens\":33") != std::string::npos);
  const Run none = ftrun(ask + " --device tpu");
  CHECK(none.code == 2);
  CHECK(one_line(none.err));
  CHECK(none.err.find("no plugin runs LlamaForCausalLM in float32 on tpu; offered for it: ") != std::string::npos);
}

TEST_CASE("ftrun eval --logits-out writes each row's next-token logits, the same however rows are packed") {
  const std::string model = fixtures + "/parity/llama_gqa";
  std::vector<std::vector<float>> runs;
  for (const char* max_tokens : {"2048", "3"}) {
    fs::path out = scratch / (std::string("logits-") + max_tokens + ".safetensors");
    Run r = ftrun("eval --model " + model + " --data " + model + "/eval.jsonl --max-tokens " + max_tokens +
                  " --logits-out " + out.string());
    REQUIRE(r.code == 0);
    auto file = ft::io::SafetensorsFile::open(out);
    const auto& t = file.at("next_token_logits");
    CHECK(t.shape == std::vector<std::int64_t>{4, 128});
    runs.emplace_back(std::size_t(t.numel()));
    ft::io::copy_elements(file, t, runs.back().data(), t.numel());
  }
  double worst = 0;
  for (std::size_t i = 0; i < runs[0].size(); ++i) worst = std::max(worst, double(std::abs(runs[0][i] - runs[1][i])));
  CHECK(worst < 1e-5);
  CHECK(runs[0][0] != runs[0][128]);  // rows differ: each row's own last token
}

TEST_CASE("ftrun eval --tasks gives lm-evaluation-harness's accuracies and log-likelihoods on the tiny Llama and GPT-NeoX") {
  // tests/fixtures/eval_tasks: what lm-eval's hf model reports on the same
  // items (tools/make_eval_task_fixtures.py); packing many requests per
  // pass or one per pass gives the same answers.
  const std::string tasks = fixtures + "/eval_tasks";
  for (const std::string name : {"ft-tiny-llama", "ft-tiny-neox"}) {
    std::ifstream expected_file(tasks + "/" + name + ".json");
    const nlohmann::json expected = nlohmann::json::parse(expected_file);
    for (const char* max_tokens : {"2048", "8"}) {
      CAPTURE(name);
      CAPTURE(max_tokens);
      Run r = ftrun("eval --model " + std::string(FT_SOURCE_DIR) + "/models/" + name + " --tasks " + tasks +
                    "/choice.jsonl --json --max-tokens " + max_tokens);
      INFO(r.err);
      REQUIRE(r.code == 0);
      const nlohmann::json got = nlohmann::json::parse(r.out);
      for (const char* metric : {"acc", "acc_stderr", "acc_norm", "acc_norm_stderr"})
        CHECK(got[metric].get<double>() == doctest::Approx(expected[metric].get<double>()).epsilon(1e-12));
      REQUIRE(got["samples"].size() == expected["samples"].size());
      for (std::size_t i = 0; i < expected["samples"].size(); ++i) {
        const auto& want = expected["samples"][i];
        const auto& have = got["samples"][i];
        CAPTURE(i);
        REQUIRE(have["loglikelihoods"].size() == want["loglikelihoods"].size());
        for (std::size_t c = 0; c < want["loglikelihoods"].size(); ++c)
          CHECK(std::abs(have["loglikelihoods"][c].get<double>() - want["loglikelihoods"][c].get<double>()) < 1e-4);
        CHECK(have["is_greedy"] == want["is_greedy"]);
        CHECK(have["acc"].get<double>() == want["acc"].get<double>());
        CHECK(have["acc_norm"].get<double>() == want["acc_norm"].get<double>());
      }
    }
  }
  // Without --json: the two accuracies with their standard errors.
  Run plain = ftrun("eval --model " + std::string(FT_SOURCE_DIR) + "/models/ft-tiny-llama --tasks " + tasks +
                    "/choice.jsonl");
  CHECK(plain.code == 0);
  CHECK(plain.out.find("items 8\nacc ") != std::string::npos);
  CHECK(plain.out.find("\nacc_norm ") != std::string::npos);
}

TEST_CASE("ftrun eval --tasks refuses bad items with one line naming the place") {
  const std::string model = std::string(FT_SOURCE_DIR) + "/models/ft-tiny-llama";
  fs::create_directories(scratch);
  struct Case {
    std::string rows, message;
  };
  for (const Case& c :
       {Case{"{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"gold\": 0}\n{\"question\": \"a\"}\n",
             "items.jsonl:2: row has no \"context\" string"},
        Case{"{\"context\": \"a\", \"choices\": [\"b\"], \"gold\": 0}\n", "\"choices\" must be a list of at least two strings"},
        Case{"{\"context\": \"a\", \"choices\": [\"b\", 3], \"gold\": 0}\n", "\"choices\" must hold strings only"},
        Case{"{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"gold\": 2}\n", "\"gold\" must be the index of the right choice, 0 to 1"},
        Case{"{\"context\": \"a\", \"choices\": [\"b\", \"c\"]\n", "items.jsonl:1: not valid JSON"},
        Case{"", "no items"}}) {
    CAPTURE(c.message);
    std::ofstream(scratch / "items.jsonl") << c.rows;
    Run r = ftrun("eval --model " + model + " --tasks " + (scratch / "items.jsonl").string());
    CHECK(r.code == 2);
    CHECK(one_line(r.err));
    CHECK(r.err.find(c.message) != std::string::npos);
  }
  Run both = ftrun("eval --model " + model + " --tasks a.jsonl --data b.jsonl");
  CHECK(both.code == 2);
  CHECK(both.err.find("excludes") != std::string::npos);
  Run neither = ftrun("eval --model " + model);
  CHECK(neither.code == 2);
  CHECK(neither.err.find("--data or --tasks") != std::string::npos);
}

TEST_CASE("ftrun eval refuses bad rows and bad models with one line naming the place") {
  const std::string model = fixtures + "/parity/llama_gqa";
  auto data = [](const std::string& text) {
    fs::create_directories(scratch);
    std::ofstream(scratch / "rows.jsonl") << text;
    return (scratch / "rows.jsonl").string();
  };
  struct Case {
    std::string rows, message;
  };
  for (const Case& c : {Case{"{\"input_ids\": [1, 2]}\n{\"text\": \"hi\"}\n", "rows.jsonl:2: row has no \"input_ids\""},
                        Case{"{\"input_ids\": [1, 2\n", "rows.jsonl:1: not valid JSON"},
                        Case{"{\"input_ids\": [1, 999]}\n", "token id 999 is outside the model's vocabulary [0, 128)"},
                        Case{"{\"input_ids\": [1, 2], \"labels\": [1]}\n", "\"labels\" has 1 entries, \"input_ids\" 2"},
                        Case{"{\"input_ids\": [1, 2], \"labels\": [-100, -100]}\n", "no scored tokens"},
                        Case{"", "no rows"}}) {
    CAPTURE(c.message);
    Run r = ftrun("eval --model " + model + " --data " + data(c.rows));
    CHECK(r.code == 2);
    CHECK(one_line(r.err));
    CHECK(r.err.find(c.message) != std::string::npos);
  }
  Run unknown = ftrun("eval --model " + fixtures + "/models/unknown-arch --data " + data("{\"input_ids\": [1]}\n"));
  CHECK(unknown.code == 2);
  CHECK(one_line(unknown.err));
  CHECK(unknown.err.find("no plugin runs FalconForCausalLM in float32 on cpu; the plugins found read ") !=
        std::string::npos);

  // A truncated weight file.
  fs::path cut = scratch / "truncated-model";
  fs::create_directories(cut);
  fs::copy_file(model + "/config.json", cut / "config.json", fs::copy_options::overwrite_existing);
  std::ifstream whole(model + "/model.safetensors", std::ios::binary);
  std::string bytes{std::istreambuf_iterator<char>(whole), {}};
  std::ofstream(cut / "model.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  Run truncated = ftrun("eval --model " + cut.string() + " --data " + data("{\"input_ids\": [1, 2]}\n"));
  CHECK(truncated.code == 2);
  CHECK(one_line(truncated.err));
  CHECK(truncated.err.find("model.safetensors") != std::string::npos);
}

TEST_CASE("ftrun generate answers through the chat template, reproducibly, and refuses bad prompts in one line") {
  const std::string model = std::string(FT_SOURCE_DIR) + "/models/ft-tiny-llama";
  const Run a = ftrun("generate " + model + " -p 'What is a hacker?' -p 'Define foo.' --max-tokens 6 --json");
  INFO(a.err);
  REQUIRE(a.code == 0);
  std::istringstream lines(a.out);
  int answers = 0;
  for (std::string line; std::getline(lines, line); ++answers) {
    const auto j = nlohmann::json::parse(line);
    CHECK(j["token_ids"].size() == 6);
    CHECK(j["finish_reason"] == "length");
    CHECK(j["prompt_tokens"].get<int>() > 10);  // the template's turn markers around the question
  }
  CHECK(answers == 2);
  CHECK(ftrun("generate " + model + " -p 'What is a hacker?' -p 'Define foo.' --max-tokens 6 --json").out == a.out);
  // Sampling with a seed repeats itself, whatever else is in the batch.
  const std::string sampled = "generate " + model + " --raw --temperature 0.9 --top-p 0.9 --seed 5 --max-tokens 8 ";
  const Run alone = ftrun(sampled + "-p hello --json"), batched = ftrun(sampled + "-p hello -p 'other text' --json");
  CHECK(alone.code == 0);
  CHECK(batched.out.substr(0, alone.out.size()) == alone.out);

  fs::create_directories(scratch);
  std::ofstream(scratch / "prompts.jsonl") << "{\"prompt\": \"hi\"}\n{\"text\": \"no prompt key\"}\n";
  const Run bad_row = ftrun("generate " + model + " --prompts " + (scratch / "prompts.jsonl").string());
  CHECK(bad_row.code == 2);
  CHECK(bad_row.err.find("prompts.jsonl:2: needs \"prompt\"") != std::string::npos);
  CHECK(one_line(bad_row.err));
  const Run none = ftrun("generate " + model);
  CHECK(none.code == 2);
  CHECK(one_line(none.err));
  const Run bad_value = ftrun("generate " + model + " -p hi --top-p 0");
  CHECK(bad_value.code == 2);
  CHECK(bad_value.err.find("top_p must be in (0, 1]") != std::string::npos);
}

TEST_CASE("ftrun generate runs the model in a plugin's engine on the device asked for, and says which exist") {
  const std::string model = std::string(FT_SOURCE_DIR) + "/models/ft-tiny-llama";
  const std::string ask = "generate " + model + " -p 'What is a hacker?' -p 'Define foo.' --max-tokens 6 --json";
  const Run cpu = ftrun(ask);
  INFO(cpu.err);
  REQUIRE(cpu.code == 0);
  // The CPU standing in for a device (tests/support/cpu_as_device.hpp): the engine's device path, from a plugin
  // found on FT_PLUGIN_PATH; its products are the CPU's, so greedy tokens are the CPU engine's.
  const std::string test_plugins = "FT_PLUGIN_PATH=" FT_TEST_PLUGIN_DIR;
  const Run device = ftrun(ask + " --device cpu-as-device", test_plugins);
  INFO(device.err);
  REQUIRE(device.code == 0);
  auto tokens = [](const std::string& out) {
    std::vector<nlohmann::json> ids;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) ids.push_back(nlohmann::json::parse(line)["token_ids"]);
    return ids;
  };
  CHECK(tokens(device.out) == tokens(cpu.out));
  CHECK(tokens(cpu.out).size() == 2);
  const Run bf16 = ftrun(ask + " --device cpu-as-device --dtype bfloat16", test_plugins);
  CHECK(bf16.code == 0);
  CHECK(tokens(bf16.out).size() == 2);

  // A device no plugin offers: one line naming what is offered for the model.
  const Run none = ftrun(ask + " --device tpu");
  CHECK(none.code == 2);
  CHECK(one_line(none.err));
  CHECK(none.err.find("no plugin runs LlamaForCausalLM in float32 on tpu; offered for it: ") != std::string::npos);
  CHECK(none.err.find("(llama, float32) on cpu, (llama, bfloat16) on cpu") != std::string::npos);
#ifdef FT_WITH_CUDA
  // The GPU where this build has the CUDA plugin: it generates where a GPU answers (cuda_generate checks its
  // tokens against HF's), and stops in one line naming the flag where none does.
  const Run gpu = ftrun(ask + " --device cuda");
  if (gpu.code == 0) {
    CHECK(tokens(gpu.out).size() == 2);
  } else {
    CHECK(one_line(gpu.err));
    CHECK(gpu.err.rfind("ftrun: --device cuda, but no device of that kind answers: cudaGetDevice(&index) failed with no "
                        "usable CUDA device: ",
                        0) == 0);
  }
#endif

  // Each plugin lists its inference engines.
  const Run plugins = ftrun("plugins", test_plugins);
  CHECK(plugins.out.find("inference engines: (llama, float32) on cpu, (gpt_neox, float32) on cpu, (phi3, float32) on "
                         "cpu, (gpt_bigcode, float32) on cpu, (bloom, float32) on cpu, (llama, bfloat16) on cpu, "
                         "(gpt_neox, bfloat16) on cpu, (phi3, bfloat16) on cpu, (gpt_bigcode, bfloat16) on cpu, "
                         "(bloom, bfloat16) on cpu\n") !=
        std::string::npos);
  CHECK(plugins.out.find("inference engines: (llama, float32) on cpu-as-device, (llama, bfloat16) on cpu-as-device") !=
        std::string::npos);
}

TEST_CASE("ftrun generate on SmolLM2-135M-Instruct (the GGUF, converted) answers as HF generate, token for token") {
  // tools/make_smollm2_generate_fixture.py wrote HF's answers; the GGUF is fetched, not shipped.
  const fs::path gguf = fs::path(FT_SOURCE_DIR) / "models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(gguf)) {
    return ft::test::skip("no " + gguf.string() + " (bash tools/fetch_smollm2.sh fetches it)");
  }
  const fs::path hf = scratch / "smollm2";
  const Run converted = ftrun("convert " + gguf.string() + " " + hf.string() + " --force");
  INFO(converted.err);
  REQUIRE(converted.code == 0);
  const auto expected =
      nlohmann::json::parse(std::ifstream(std::string(FT_SOURCE_DIR) + "/tests/fixtures/smollm2/generate_expected.json"));
  std::string prompts;
  for (const auto& a : expected["answers"]) prompts += " -p '" + a["prompt"].get<std::string>() + "'";
  const Run run = ftrun("generate " + hf.string() + prompts + " --json --max-tokens " + expected["max_tokens"].dump());
  INFO(run.err);
  REQUIRE(run.code == 0);
  std::istringstream lines(run.out);
  for (const auto& a : expected["answers"]) {
    std::string line;
    REQUIRE(std::getline(lines, line));
    const auto got = nlohmann::json::parse(line);
    CAPTURE(a["prompt"]);
    CHECK(got["prompt_tokens"] == a["prompt_tokens"]);
    CHECK(got["token_ids"] == a["token_ids"]);
    CHECK(got["finish_reason"] == (a["eos"].get<bool>() ? "stop" : "length"));
    CHECK(got["text"] == a["text"]);
  }
}

TEST_CASE("ftrun chat answers as ftrun generate does, keeps the conversation, and takes its commands") {
  const std::string model = std::string(FT_SOURCE_DIR) + "/models/ft-tiny-llama";
  const Run one = ftrun("chat " + model + " -m 'What is a hacker?' --max-tokens 6");
  const Run generated = ftrun("generate " + model + " -p 'What is a hacker?' --max-tokens 6");
  INFO(one.err);
  REQUIRE(one.code == 0);
  CHECK(one.out == generated.out);
  fs::create_directories(scratch);
  // Two turns: the second answer is the one generate gives for the whole conversation.
  std::ofstream(scratch / "turns.txt") << "What is a hacker?\n/help\nDefine foo.\n";
  const Run turns = ftrun("chat " + model + " --max-tokens 6 < " + (scratch / "turns.txt").string());
  REQUIRE(turns.code == 0);
  CHECK(turns.out.starts_with(one.out));
  CHECK(turns.err.find("/clear") != std::string::npos);  // the help text
  nlohmann::json conversation = {{"messages", nlohmann::json::array({
      {{"role", "user"}, {"content", "What is a hacker?"}},
      {{"role", "assistant"}, {"content", one.out.substr(0, one.out.size() - 1)}},
      {{"role", "user"}, {"content", "Define foo."}}})}};
  std::ofstream(scratch / "conversation.jsonl") << conversation.dump() << "\n";
  const Run second = ftrun("generate " + model + " --max-tokens 6 --prompts " + (scratch / "conversation.jsonl").string());
  CHECK(turns.out == one.out + second.out);
  const Run neither = ftrun("chat");
  CHECK(neither.code == 2);
  CHECK(one_line(neither.err));
}

}  // namespace test_ftrun
