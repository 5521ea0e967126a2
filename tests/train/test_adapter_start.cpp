// Starting a run from an adapter trained before ([lora] init_from,
// [prompt_tuning] init_from), from the outside: ftrun train continues the
// adapter as PEFT continues it, from each place an adapter can be (its own
// directory in either of PEFT's file formats, a run's checkpoint, a finished
// run's output_dir), over two ranks with ZeRO-3 as in one process, and the
// estimate counts the adapter's rank; bad input is one line and exit 2.
//
// The reference is PEFT's own continuation (tools/make_adapter_start_fixtures.py):
// the tiny Llama's fixture adapter (r 4, alpha 8, every projection) trained six
// AdamW steps on the LoRA case's two rows, in float64.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ft/io/hf_config.hpp>
#include <ft/io/safetensors.hpp>

#include "support/compare.hpp"
#include "support/files.hpp"

namespace test_adapter_start {

namespace fs = std::filesystem;

namespace {

const fs::path source = FT_SOURCE_DIR;
const fs::path fixtures = source / "tests/fixtures/adapter_start";
const fs::path train_fixtures = source / "tests/fixtures/train";
const fs::path lora_adapter = train_fixtures / "tiny_llama_lora/adapter";
// mpirun refuses root unless told; CI machines run as root.
const std::string env = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 ";

struct Run {
  int code;
  std::string out, err;
};

const nlohmann::json& trajectory() {
  static const nlohmann::json j = ft::io::read_json_file(fixtures / "trajectory.json");
  return j;
}

// PEFT continuing the same adapter marked use_rslora (scale alpha / sqrt(r)).
const nlohmann::json& rslora_trajectory() {
  static const nlohmann::json j = ft::io::read_json_file(fixtures / "trajectory_rslora.json");
  return j;
}

// The fixture's settings on the tiny Llama and the two rows, with `extra` TOML lines.
fs::path write_recipe(const fs::path& dir, const std::string& extra, int steps = 6) {
  fs::create_directories(dir);
  const nlohmann::json& t = trajectory();
  std::ofstream(dir / "recipe.toml") << "output_dir = \"" << (dir / "run").string() << "\"\n"
                                     << "[model]\npath = \"" << (train_fixtures / "tiny_llama").string() << "\"\n"
                                     << "[data]\ntrain = \"" << (fixtures / "rows.jsonl").string() << "\"\n"
                                     << "format = \"tokens\"\npacking = false\n"
                                     << "[train]\nper_device_train_batch_size = 2\nmax_steps = " << steps << "\n"
                                     << "logging_steps = 1\nlr_scheduler_type = \"constant\"\nwarmup_steps = 0\n"
                                     << "learning_rate = " << t["learning_rate"].dump() << "\n"
                                     << "weight_decay = " << t["weight_decay"].dump() << "\n"
                                     << "adam_beta1 = " << t["adam_beta1"].dump() << "\n"
                                     << "adam_beta2 = " << t["adam_beta2"].dump() << "\n"
                                     << "adam_epsilon = " << t["adam_epsilon"].dump() << "\n"
                                     << "max_grad_norm = " << t["max_grad_norm"].dump() << "\n"
                                     << "[checkpoint]\nsave_steps = 3\n"
                                     << extra;
  return dir / "recipe.toml";
}

Run ftrun(const std::string& command, const fs::path& recipe) {
  const fs::path out = recipe.parent_path() / "stdout", err = recipe.parent_path() / "stderr";
  const std::string cmd = env + FTRUN_PATH " " + command + " " + recipe.string() + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ft::testing::read_bytes(out), ft::testing::read_bytes(err)};
}

std::vector<double> losses(const fs::path& run) {
  std::vector<double> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["split"] == "train") out.push_back(j["loss"].get<double>());
  }
  return out;
}

double relative(double got, double want) { return std::abs(got - want) / std::abs(want); }

// A run's losses, step by step, against PEFT's within 1e-5.
void check_losses(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(relative(got[i], want[i]) <= 1e-5);
  }
}

// Every lora_A and lora_B ft wrote, against PEFT's after the same steps.
void check_trained_adapter(const fs::path& adapter, const std::string& trained = "trained.safetensors") {
  auto mine = ft::io::SafetensorsFile::open(adapter / "adapter_model.safetensors");
  auto peft = ft::io::SafetensorsFile::open(fixtures / trained);
  REQUIRE(mine.tensors().size() == peft.tensors().size());
  for (const ft::io::TensorView& want : peft.tensors()) {
    CAPTURE(want.name);
    const ft::io::TensorView* got = mine.find(want.name);
    REQUIRE(got != nullptr);
    CHECK(ft::testing::relative_error(ft::testing::read_tensor<float>(mine, want.name),
                                      ft::testing::read_tensor<float>(peft, want.name)) <= 1e-4);
  }
  const nlohmann::json config = ft::io::read_json_file(adapter / "adapter_config.json");
  CHECK(config["r"] == 4);
  CHECK(config["lora_alpha"] == 8);
  CHECK(config["target_modules"].size() == 7);
}

}  // namespace

TEST_CASE("a LoRA run started from a PEFT adapter continues it as PEFT does: six AdamW steps' losses within 1e-5, "
          "every A and B within 1e-4") {
  ft::testing::TempDir dir("ft_adapter_start");
  // r, alpha and the target modules are the adapter's: the recipe names none of them.
  const fs::path recipe = write_recipe(dir.path, "[strategy]\nadapter = \"lora\"\n[lora]\ninit_from = \"" +
                                                     lora_adapter.string() + "\"\n");
  const Run r = ftrun("train", recipe);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const fs::path run = dir.path / "run";
  const std::vector<double> want = trajectory()["loss"].get<std::vector<double>>();
  check_losses(losses(run), want);
  check_trained_adapter(run / "adapter");

  SUBCASE("resuming the run continues from its checkpoint, not from the adapter it started from") {
    const Run resumed = ftrun("train --set train.max_steps=7 --set checkpoint.resume=latest", recipe);
    INFO(resumed.err);
    REQUIRE(resumed.code == 0);
    const std::vector<double> all = losses(run);
    REQUIRE(all.size() == 7);
    CHECK(relative(all.back(), trajectory()["loss_after"].get<double>()) <= 1e-5);
  }

  SUBCASE("from a checkpoint of that run, and from its output_dir, a new run goes on from those weights") {
    // Step 1 of a run started from checkpoint-3 is PEFT's fourth step; from the finished run, the loss after the sixth.
    const double after = trajectory()["loss_after"].get<double>();
    for (const auto& [from, expected] : {std::pair{run / "checkpoint-3", want[3]}, std::pair{run, after}}) {
      CAPTURE(from);
      const fs::path again = write_recipe(dir.path / "again", "[strategy]\nadapter = \"lora\"\n[lora]\ninit_from = \"" +
                                                                 from.string() + "\"\n", 1);
      const Run a = ftrun("train", again);
      INFO(a.err);
      REQUIRE(a.code == 0);
      const std::vector<double> first = losses(dir.path / "again/run");
      REQUIRE(first.size() == 1);
      CHECK(relative(first[0], expected) <= 1e-5);
      fs::remove_all(dir.path / "again");
    }
  }
}

TEST_CASE("rank-stabilised LoRA (use_rslora) started from a PEFT rsLoRA adapter continues it as PEFT does") {
  ft::testing::TempDir dir("ft_adapter_start_rslora");
  // use_rslora is the adapter's too: the update is scaled by alpha / sqrt(r) = 4, not alpha / r = 2.
  const fs::path recipe = write_recipe(dir.path, "[strategy]\nadapter = \"lora\"\n[lora]\ninit_from = \"" +
                                                     (fixtures / "adapter_rslora").string() + "\"\n");
  const Run r = ftrun("train", recipe);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("rsLoRA") != std::string::npos);
  const fs::path run = dir.path / "run";
  const std::vector<double> got = losses(run);
  check_losses(got, rslora_trajectory()["loss"].get<std::vector<double>>());
  check_trained_adapter(run / "adapter", "trained_rslora.safetensors");
  CHECK(ft::io::read_json_file(run / "adapter/adapter_config.json")["use_rslora"] == true);
  // A plain LoRA start's first loss is another: the scale reaches the loss.
  CHECK(relative(got[0], trajectory()["loss"][0].get<double>()) > 1e-3);
}

TEST_CASE("an adapter saved as adapter_model.bin starts a run, and the estimate counts the adapter's rank") {
  ft::testing::TempDir dir("ft_adapter_start_bin");
  const std::string lora = "[strategy]\nadapter = \"lora\"\n[lora]\n";
  const fs::path recipe =
      write_recipe(dir.path / "bin", lora + "init_from = \"" + (fixtures / "adapter_bin").string() + "\"\n", 1);
  const Run r = ftrun("train", recipe);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::vector<double> first = losses(dir.path / "bin/run");
  REQUIRE(first.size() == 1);
  CHECK(relative(first[0], trajectory()["loss"][0].get<double>()) <= 1e-5);

  // The estimate of a run from the adapter is that of the recipe naming the adapter's settings.
  const fs::path named = write_recipe(dir.path / "named", lora + "r = 4\nalpha = 8\ntarget_modules = [\"all-linear\"]\n");
  const fs::path started = write_recipe(dir.path / "started", lora + "init_from = \"" + lora_adapter.string() + "\"\n");
  const Run e1 = ftrun("estimate --json", named), e2 = ftrun("estimate --json", started);
  REQUIRE(e1.code == 0);
  REQUIRE(e2.code == 0);
  const auto j1 = nlohmann::json::parse(e1.out), j2 = nlohmann::json::parse(e2.out);
  CHECK(j1["held"] == j2["held"]);
  CHECK(j1["activations"] == j2["activations"]);
  CHECK(j1["peak_bytes"] == j2["peak_bytes"]);
}

TEST_CASE("a LoRA run started from an adapter gives the same losses over two ranks with ZeRO-3 as in one process") {
  ft::testing::TempDir dir("ft_adapter_start_zero3");
  const fs::path recipe = write_recipe(dir.path, "[strategy]\nadapter = \"lora\"\nparallelism = \"zero3\"\n"
                                                 "[lora]\ninit_from = \"" + lora_adapter.string() + "\"\n"
                                                 "[launch]\nnproc = 2\n", 3);
  const Run r = ftrun("train --set train.per_device_train_batch_size=1", recipe);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::vector<double> got = losses(dir.path / "run"), want = trajectory()["loss"].get<std::vector<double>>();
  REQUIRE(got.size() == 3);
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(relative(got[i], want[i]) <= 1e-5);
  }
}

TEST_CASE("prompt tuning started from a PEFT prompt adapter computes PEFT's loss at its first step") {
  ft::testing::TempDir dir("ft_adapter_start_prompt");
  const fs::path recipe = write_recipe(dir.path, "[strategy]\nadapter = \"prompt\"\n[prompt_tuning]\ninit_from = \"" +
                                                     (train_fixtures / "tiny_llama_prompt/adapter").string() + "\"\n", 1);
  const Run r = ftrun("train", recipe);
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto expected = ft::io::SafetensorsFile::open(train_fixtures / "tiny_llama_prompt/expected.safetensors");
  const std::vector<double> first = losses(dir.path / "run");
  REQUIRE(first.size() == 1);
  CHECK(relative(first[0], ft::testing::read_tensor<float>(expected, "loss")[0]) <= 1e-5);
  const nlohmann::json config = ft::io::read_json_file(dir.path / "run/adapter/adapter_config.json");
  CHECK(config["num_virtual_tokens"] == 6);  // the adapter's, where the recipe's default is 20
}

TEST_CASE("a bad adapter to start from is one line naming the key, and exit 2") {
  ft::testing::TempDir dir("ft_adapter_start_bad");
  const std::string lora = "[strategy]\nadapter = \"lora\"\n[lora]\n";
  const std::string from = "init_from = \"" + lora_adapter.string() + "\"\n";
  struct Case {
    std::string extra;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases{
      {lora + "init_from = \"" + (dir.path / "nowhere").string() + "\"\n", {"lora.init_from", "no such directory"}},
      {lora + "r = 8\n" + from, {"lora.r", "is 8", "r = 4"}},
      {lora + "alpha = 32\n" + from, {"lora.alpha", "is 32", "lora_alpha = 8"}},
      {lora + "target_modules = [\"q_proj\"]\n" + from, {"lora.target_modules", "[\"q_proj\"]", "down_proj"}},
      {"[strategy]\nadapter = \"full\"\n[lora]\n" + from, {"lora.init_from", "strategy.adapter is \"full\""}},
      {lora + "init_from = \"" + (train_fixtures / "tiny_llama_prompt/adapter").string() + "\"\n",
       {"lora.init_from", "PROMPT_TUNING adapter"}},
      {lora + "use_rslora = false\ninit_from = \"" + (fixtures / "adapter_rslora").string() + "\"\n",
       {"lora.use_rslora", "is false", "use_rslora = true"}},
      {lora + "use_rslora = true\n" + from, {"lora.use_rslora", "is true", "use_rslora = false"}},
      // An adapter for another base: its modules' shapes are not this model's.
      {lora + "init_from = \"" + (source / "tests/fixtures/peft/llama_gqa_lora").string() + "\"\n",
       {"another base model"}},
      {"[strategy]\nadapter = \"prompt\"\n[prompt_tuning]\nnum_virtual_tokens = 8\ninit_from = \"" +
           (train_fixtures / "tiny_llama_prompt/adapter").string() + "\"\n",
       {"prompt_tuning.num_virtual_tokens", "is 8", "num_virtual_tokens = 6"}}};
  for (const Case& c : cases) {
    CAPTURE(c.extra);
    const fs::path recipe = write_recipe(dir.path / "case", c.extra);
    const Run r = ftrun("train", recipe);
    CHECK(r.code == 2);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    for (const std::string& s : c.says) CHECK_MESSAGE(r.err.find(s) != std::string::npos, s, " in ", r.err);
    CHECK_FALSE(fs::exists(dir.path / "case/run/metrics.jsonl"));
    fs::remove_all(dir.path / "case");
  }
}

}  // namespace test_adapter_start
