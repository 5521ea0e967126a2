// Data parallelism on real processes: `ftrun train` with launch.nproc = 2 or
// 4 starts mpirun on this machine. Each strategy must train exactly what one
// process trains on the same global batch (per-device batch x ranks): the
// same loss and gradient norm at every step and the same final weights, in
// fp32 within 1e-5. Checkpoints written by one sharding resume in another; a
// rank killed with SIGKILL stops the job with a line naming it, and the job
// resumes from its last checkpoint; an operator's signal stops it with a
// checkpoint of the step in flight.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <ft/core/signals.hpp>
#include <ft/io/safetensors.hpp>
#include <ft/parallel/pipeline_timeline.hpp>

#include "support/compare.hpp"
#include "support/files.hpp"
#include "support/skip.hpp"

namespace test_distributed {

namespace fs = std::filesystem;

namespace {

const std::string fixtures = std::string(FT_SOURCE_DIR) + "/tests/fixtures/train";
// Removed, with everything the runs wrote, when this process exits.
const ft::testing::TempDir scratch_dir("ft_dp");
const fs::path& scratch = scratch_dir.path;
// mpirun refuses root unless told; CI machines run as root.
const std::string mpi_env = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 ";

struct Run {
  int code;
  std::string out, err;
};

using ft::testing::read_bytes;  // "" for a file that is not there

// 20 steps of fp32 training of the tiny Llama on the small jargon set, in
// `name`: `strategy` lines, `rows` rows per rank per micro-batch, `ranks`
// processes, `train_lines` more for [train]; `model` a fixture's name or a path.
fs::path recipe(const std::string& name, const std::string& strategy, int rows, int ranks = 1,
                const std::string& train_lines = "", const std::string& model = "tiny_llama") {
  const fs::path dir = scratch / name;
  fs::create_directories(dir);
  std::ofstream(dir / "recipe.toml") << "output_dir = \"" << (dir / "run").string() << "\"\nseed = 3\n"
                                     << "[model]\npath = \"" << (model.starts_with("/") ? model : fixtures + "/" + model)
                                     << "\"\n"
                                     << "[data]\ntrain = \"" << fixtures << "/jargon_small.jsonl\"\n"
                                     << "validation = \"" << fixtures << "/jargon_small_validation.jsonl\"\n"
                                     << "max_seq_length = 128\npacking = true\n"
                                     << "[strategy]\n" << strategy
                                     << "[train]\nlogging_steps = 1\nlearning_rate = 2e-3\n"
                                     << (train_lines.find("max_steps") == std::string::npos ? "max_steps = 20\n" : "")
                                     << "per_device_train_batch_size = " << rows << "\n" << train_lines
                                     << "[launch]\nnproc = " << ranks << "\n";
  return dir / "recipe.toml";
}

// `launcher`: a command that starts ftrun's ranks itself (srun ...), or none.
Run train(const fs::path& recipe_file, const std::string& sets = "", const std::string& launcher = "") {
  const fs::path dir = recipe_file.parent_path();
  const std::string cmd = mpi_env + launcher + FTRUN_PATH " train \"" + recipe_file.string() + "\" " + sets + " >\"" +
                          (dir / "stdout").string() + "\" 2>\"" + (dir / "stderr").string() + "\"";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_bytes(dir / "stdout"), read_bytes(dir / "stderr")};
}

// Loss and gradient norm of every step, the last record of each (a resumed run logs some again).
std::map<long, std::pair<double, double>> steps(const fs::path& recipe_file) {
  std::map<long, std::pair<double, double>> out;
  std::ifstream in(recipe_file.parent_path() / "run" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["split"] != "train") continue;
    // An fp16 step that overflowed has a non-finite norm, written as null.
    const double norm = j["grad_norm"].is_number() ? j["grad_norm"].get<double>() : HUGE_VAL;
    out[j["step"].get<long>()] = {j["loss"].get<double>(), norm};
  }
  return out;
}

// The largest difference between two runs' per-step losses and gradient norms.
double metric_difference(const fs::path& a, const fs::path& b) {
  const auto x = steps(a), y = steps(b);
  REQUIRE(x.size() == 20);
  REQUIRE(y.size() == 20);
  double d = 0;
  for (const auto& [step, v] : x) {
    d = std::max(d, std::abs(v.first - y.at(step).first));
    const double norm = y.at(step).second;
    d = std::max(d, v.second == norm ? 0.0 : std::abs(v.second - norm));  // overflowed in both is no difference
  }
  return d;
}

// The largest difference between two files' tensors, which must have the same names.
double weight_difference(const fs::path& a, const fs::path& b) {
  const auto fa = ft::io::SafetensorsFile::open(a), fb = ft::io::SafetensorsFile::open(b);
  REQUIRE(fa.tensors().size() == fb.tensors().size());
  double d = 0;
  for (const auto& t : fa.tensors()) {
    const auto x = ft::testing::read_tensor<double>(fa, t.name), y = ft::testing::read_tensor<double>(fb, t.name);
    REQUIRE(x.size() == y.size());
    for (std::size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  }
  return d;
}

fs::path final_weights(const fs::path& recipe_file, const std::string& file = "model/model.safetensors") {
  return recipe_file.parent_path() / "run" / file;
}

// The validation loss at the end of a run (ranks share the validation rows unevenly).
double final_eval_loss(const fs::path& recipe_file) {
  double loss = -1;
  std::ifstream in(recipe_file.parent_path() / "run" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (const auto j = nlohmann::json::parse(line); j["split"] == "eval") loss = j["loss"].get<double>();
  REQUIRE(loss >= 0);
  return loss;
}

// Trains `dp` and checks it against the finished run `single`: every step's
// loss and gradient norm, the final weights (`weights` in output_dir) and validation loss.
Run expect_same_training(const fs::path& single, const fs::path& dp,
                         const std::string& weights = "model/model.safetensors", double tolerance = 1e-5,
                         const std::string& sets = "") {
  const Run r = train(dp, sets);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(metric_difference(single, dp) < tolerance);
  CHECK(weight_difference(final_weights(single, weights), final_weights(dp, weights)) < tolerance);
  CHECK(std::abs(final_eval_loss(single) - final_eval_loss(dp)) < tolerance);
  return r;
}

// Resumes `resumed` from `checkpoint`, step 10 of `reference`'s 20: its ten
// steps' losses and its final weights are the reference's within 1e-5.
void expect_resumed_as(const fs::path& reference, const fs::path& resumed, const fs::path& checkpoint,
                       const std::string& weights = "model/model.safetensors", const std::string& sets = "") {
  std::ofstream(resumed, std::ios::app) << "[checkpoint]\nresume = \"" << checkpoint.string() << "\"\n";
  const Run run = train(resumed, sets);
  INFO(run.err);
  REQUIRE(run.code == 0);
  CHECK(run.out.find("resuming after step 10") != std::string::npos);
  const auto a = steps(reference), b = steps(resumed);
  REQUIRE(b.size() == 10);
  for (const auto& [step, v] : b) CHECK(std::abs(v.first - a.at(step).first) < 1e-5);
  CHECK(weight_difference(final_weights(reference, weights), final_weights(resumed, weights)) < 1e-5);
}

}  // namespace

TEST_CASE("ddp, zero1, zero2 and zero3 on 2 ranks train what one process trains on the same global batch") {
  const fs::path single = recipe("single", "adapter = \"full\"\n", 4);
  REQUIRE(train(single).code == 0);
  for (const std::string parallelism : {"ddp", "zero1", "zero2", "zero3"}) {
    CAPTURE(parallelism);
    const fs::path dp = recipe("two_" + parallelism, "adapter = \"full\"\nparallelism = \"" + parallelism + "\"\n", 2, 2);
    const Run r = expect_same_training(single, dp);
    CHECK(r.out.find("ranks 2") != std::string::npos);
    // Each rank's memory and traffic, in a record of its own.
    std::ifstream metrics(dp.parent_path() / "run" / "metrics.jsonl");
    int rank_records = 0;
    for (std::string line; std::getline(metrics, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["split"] != "rank1") continue;
      ++rank_records;
      CHECK(j["rank"] == 1);
      CHECK(j["sent_bytes_per_step"].get<double>() > 0);
      CHECK(j["state_bytes"].get<double>() > 0);
    }
    CHECK(rank_records == 20);
  }
}

TEST_CASE("LoRA over a 4-bit base: ddp, zero2 and zero3 on 2 ranks, zero3 on 4, and a 2-rank pipeline, train what "
          "one process trains") {
  const std::string four_bit = "--set model.quantize=nf4 --set model.bnb_4bit_use_double_quant=true";
  const std::string adapter = "adapter/adapter_model.safetensors", lora = "adapter = \"lora\"\n";
  const fs::path single = recipe("qlora_single", lora, 4);
  REQUIRE(train(single, four_bit).code == 0);
  for (const std::string parallelism : {"ddp", "zero2", "zero3"}) {
    CAPTURE(parallelism);
    const fs::path dp = recipe("qlora_" + parallelism, lora + "parallelism = \"" + parallelism + "\"\n", 2, 2);
    if (parallelism == "zero3") std::ofstream(dp, std::ios::app) << "[checkpoint]\nsave_steps = 10\n";
    expect_same_training(single, dp, adapter, 1e-5, four_bit);
  }
  // ZeRO-3 keeps a quarter of the packed blocks on each rank, and resumes as the other adapters do.
  const std::string zero3 = lora + "parallelism = \"zero3\"\n";
  const fs::path four = recipe("qlora_zero3_four", zero3, 1, 4);
  expect_same_training(single, four, adapter, 1e-5, four_bit);
  const fs::path two = scratch / "qlora_zero3" / "recipe.toml";
  expect_resumed_as(two, recipe("qlora_zero3_resumed", zero3, 2, 2), two.parent_path() / "run" / "checkpoint-10",
                    adapter, four_bit);

  const std::string accumulate = "gradient_accumulation_steps = 4\n";
  const fs::path one = recipe("qlora_pipe_single", lora, 2, 1, accumulate, "tiny_neox");
  REQUIRE(train(one, four_bit).code == 0);
  const fs::path pp = recipe("qlora_pipe", lora + "parallelism = \"pipeline\"\n", 2, 2, accumulate, "tiny_neox");
  std::ofstream(pp, std::ios::app) << "[pipeline]\nschedule = \"1f1b\"\n";
  expect_same_training(one, pp, adapter, 1e-5, four_bit);
}

TEST_CASE("4 ranks: zero2 and zero3 with Adafactor (shards cut at tensor boundaries) on LoRA match one process") {
  const std::string adafactor_lora = "optimizer = \"adafactor\"\nadapter = \"lora\"\n";
  const fs::path single = recipe("adafactor_single", adafactor_lora, 4);
  REQUIRE(train(single).code == 0);
  for (const std::string parallelism : {"zero2", "zero3"}) {
    CAPTURE(parallelism);
    const fs::path dp = recipe("adafactor_four_" + parallelism, adafactor_lora + "parallelism = \"" + parallelism + "\"\n", 1, 4);
    expect_same_training(single, dp, "adapter/adapter_model.safetensors");
  }
}

// Cut at tensor boundaries, the tied embedding (one tensor) and the head
// fall whole to one rank: the other holds an empty shard of them.
TEST_CASE("zero3 with Adafactor on a full fine-tune, where a rank holds none of some stages, matches one process") {
  const std::string adafactor_full = "optimizer = \"adafactor\"\nadapter = \"full\"\n";
  const fs::path single = recipe("adafactor_full_single", adafactor_full, 4);
  REQUIRE(train(single).code == 0);
  const fs::path dp = recipe("adafactor_full_two_zero3", adafactor_full + "parallelism = \"zero3\"\n", 2, 2);
  expect_same_training(single, dp);
}

TEST_CASE("hybrid sharding: zero3 within groups of 2 ranks, replicated over 2 groups, matches one process") {
  const fs::path single = recipe("hybrid_single", "adapter = \"full\"\n", 4);
  REQUIRE(train(single).code == 0);
  const fs::path hybrid = recipe("hybrid_zero3", "adapter = \"full\"\nparallelism = \"zero3\"\n", 1, 4);
  std::ofstream(hybrid, std::ios::app) << "shard_group_size = 2\n[checkpoint]\nsave_steps = 10\n";  // in [launch]
  expect_same_training(single, hybrid);
  // One group's shards make the checkpoint: the other group holds the same.
  const fs::path checkpoint = hybrid.parent_path() / "run" / "checkpoint-10";
  CHECK(fs::exists(checkpoint / "optimizer-0-of-2.safetensors"));
  CHECK(fs::exists(checkpoint / "optimizer-1-of-2.safetensors"));
  CHECK_FALSE(fs::exists(checkpoint / "optimizer-0-of-4.safetensors"));
}

TEST_CASE("zero3 on an untied model (GPT-NeoX) with gradient checkpointing matches one process") {
  const std::string strategy = "adapter = \"full\"\n";
  const std::string checkpointing = "gradient_checkpointing = \"every_block\"\n";
  const fs::path single = recipe("neox_single", strategy, 4, 1, checkpointing, "tiny_neox");
  REQUIRE(train(single).code == 0);
  const fs::path dp = recipe("neox_zero3", strategy + "parallelism = \"zero3\"\n", 2, 2, checkpointing, "tiny_neox");
  expect_same_training(single, dp);
}

TEST_CASE("zero3 on 4 ranks holds at most 0.3x the parameter, gradient and optimizer bytes of one process") {
  auto state_bytes = [](const fs::path& recipe_file) {
    std::ifstream in(recipe_file.parent_path() / "run" / "metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      if (const auto j = nlohmann::json::parse(line); j["split"] == "train") return j.at("state_bytes").get<double>();
    FAIL("no training record in metrics.jsonl");
    return 0.0;
  };
  for (const std::string precision : {"fp32", "bf16-mixed"}) {
    CAPTURE(precision);
    const std::string strategy = "adapter = \"full\"\nprecision = \"" + precision + "\"\n";
    const fs::path single = recipe("memory_single_" + precision, strategy, 4, 1, "max_steps = 2\n");
    const fs::path sharded =
        recipe("memory_zero3_" + precision, strategy + "parallelism = \"zero3\"\n", 1, 4, "max_steps = 2\n");
    REQUIRE(train(single).code == 0);
    const Run r = train(sharded);
    INFO(r.err);
    REQUIRE(r.code == 0);
    const double one = state_bytes(single), four = state_bytes(sharded);
    MESSAGE(precision << ": state bytes per rank, one process " << one << ", zero3 on 4 ranks " << four << " ("
                      << four / one << "x)");
    CHECK(four <= 0.3 * one);
    // The master weights start from the shards the load kept: the second
    // step's loss (after one update) is the one process's.
    const auto a = steps(single), b = steps(sharded);
    REQUIRE(b.size() == 2);
    CHECK(std::abs(b.at(2).first - a.at(2).first) < 1e-3);
  }
}

TEST_CASE("gradient accumulation on 2 ranks (FSDP's no_shard) reduces once per step and matches one process") {
  const fs::path single = recipe("accumulation_single", "adapter = \"full\"\n", 4);
  REQUIRE(train(single).code == 0);
  const fs::path dp = recipe("accumulation_two", "adapter = \"full\"\nparallelism = \"no_shard\"\n", 1, 2,
                             "gradient_accumulation_steps = 2\n");
  expect_same_training(single, dp);
}

namespace {

// While it lives, ftrun also loads the tests' plugins (ft-cpu-as-device).
struct TestPlugins {
  TestPlugins() { ::setenv("FT_PLUGIN_PATH", FT_TEST_PLUGIN_DIR, 1); }
  ~TestPlugins() { ::unsetenv("FT_PLUGIN_PATH"); }
};

}  // namespace

// The engine's device paths, without a GPU: the CPU standing in for a device
// (support/cpu_as_device.hpp) runs the CPU's own kernels, so every step and
// every weight must come out exactly as on the CPU; a difference is the
// device paths' (uploads, copies through the host, device buffers in the
// collectives). A checkpoint written on the device resumes on the CPU.
TEST_CASE("the CPU standing in for a device trains bit for bit what the CPU trains, on 1 and 2 ranks") {
  const TestPlugins plugins;
  struct Case {
    std::string name, strategy;
    int rows, ranks;
    std::string weights = "model/model.safetensors";
    bool packing = true;  // prompt tuning puts its virtual tokens before unpacked rows
    std::string train_lines = "";
  };
  const std::string lora = "adapter/adapter_model.safetensors";
  const auto made = [](const fs::path& file, const Case& c) {
    if (c.packing) return file;
    std::string text = read_bytes(file);
    text.replace(text.find("packing = true"), 14, "packing = false");
    std::ofstream(file) << text;
    return file;
  };
  for (const Case& c : {Case{"device_single", "adapter = \"full\"\n", 4, 1},
                        Case{"device_lora_mixed", "adapter = \"lora\"\nprecision = \"bf16-mixed\"\n", 4, 1, lora},
                        Case{"device_ddp", "adapter = \"full\"\nparallelism = \"ddp\"\n", 2, 2},
                        Case{"device_zero1_lora", "adapter = \"lora\"\nparallelism = \"zero1\"\n", 2, 2, lora},
                        Case{"device_zero2_mixed", "adapter = \"full\"\nparallelism = \"zero2\"\nprecision = \"bf16-mixed\"\n",
                             2, 2},
                        Case{"device_zero3", "adapter = \"full\"\nparallelism = \"zero3\"\n", 2, 2},
                        Case{"device_zero3_mixed_lora",
                             "adapter = \"lora\"\nparallelism = \"zero3\"\nprecision = \"bf16-mixed\"\n", 2, 2, lora},
                        // Offloaded: the optimizer steps on the host (on the CPU itself a no-op).
                        Case{"device_single_offload", "adapter = \"full\"\noptimizer_offload = true\n", 4, 1},
                        Case{"device_zero2_mixed_offload",
                             "adapter = \"full\"\nparallelism = \"zero2\"\nprecision = \"bf16-mixed\"\n"
                             "optimizer_offload = true\n",
                             2, 2},
                        Case{"device_zero3_offload", "adapter = \"full\"\nparallelism = \"zero3\"\noptimizer_offload = true\n",
                             2, 2},
                        // Optimizers whose state is per tensor: Adafactor's factored moments, 8-bit
                        // AdamW's codes and block scales, stepped in the device's memory.
                        Case{"device_adafactor_single", "adapter = \"full\"\noptimizer = \"adafactor\"\n", 4, 1},
                        Case{"device_adafactor_zero2_mixed_lora",
                             "adapter = \"lora\"\nparallelism = \"zero2\"\nprecision = \"bf16-mixed\"\n"
                             "optimizer = \"adafactor\"\n",
                             2, 2, lora},
                        Case{"device_adamw8bit_zero3_mixed",
                             "adapter = \"full\"\nparallelism = \"zero3\"\nprecision = \"bf16-mixed\"\n"
                             "optimizer = \"adamw8bit\"\n",
                             2, 2},
                        // Prompt tuning: the virtual tokens and their gradient in the device's memory.
                        Case{"device_prompt_single", "adapter = \"prompt\"\n", 4, 1, lora, false},
                        Case{"device_prompt_zero2_mixed",
                             "adapter = \"prompt\"\nparallelism = \"zero2\"\nprecision = \"bf16-mixed\"\n", 2, 2,
                             lora, false},
                        // fp16 with a loss scale of 2^20: the first steps overflow in the
                        // device's memory and are skipped, the scale halved each time.
                        Case{"device_fp16_zero2",
                             "adapter = \"full\"\nparallelism = \"zero2\"\nprecision = \"fp16-mixed\"\n", 2, 2,
                             "model/model.safetensors", true, "initial_scale_power = 20\n"}}) {
    CAPTURE(c.name);
    const fs::path cpu = made(recipe(c.name + "_cpu", c.strategy, c.rows, c.ranks, c.train_lines), c);
    const Run on_cpu = train(cpu);
    INFO(on_cpu.err);
    REQUIRE(on_cpu.code == 0);
    const fs::path device =
        made(recipe(c.name, c.strategy + "device = \"cpu-as-device\"\n", c.rows, c.ranks, c.train_lines), c);
    std::ofstream(device, std::ios::app) << "[checkpoint]\nsave_steps = 10\n";
    const double exactly = std::numeric_limits<double>::denorm_min();  // a difference below it is none
    const Run r = expect_same_training(cpu, device, c.weights, exactly);
    CHECK(r.out.find("device      the CPU, through the paths of a device") != std::string::npos);
    if (c.train_lines.find("initial_scale_power") != std::string::npos)
      CHECK(std::isinf(steps(device).at(1).second));  // the skip was taken, on both

    // Its checkpoint (optimizer state and master weights copied out of the
    // device's memory) resumes on the CPU with the device run's steps.
    const fs::path resumed = made(recipe(c.name + "_resumed", c.strategy, c.rows, c.ranks, c.train_lines), c);
    std::ofstream(resumed, std::ios::app) << "[checkpoint]\nresume = \""
                                          << (device.parent_path() / "run" / "checkpoint-10").string() << "\"\n";
    const Run again = train(resumed);
    INFO(again.err);
    REQUIRE(again.code == 0);
    const auto a = steps(device), b = steps(resumed);
    REQUIRE(b.size() == 10);
    for (const auto& [step, v] : b) CHECK(v == a.at(step));
  }

  // Offloading takes the master weights (f32) and AdamW's two moments (f32)
  // of a rank's half of the model out of the device's memory: 12 bytes per
  // parameter off the device's peak over step 1 (a rank's half is a few
  // parameters more or less than half, per buffer, and each of the three
  // arrays takes a block of the device cache's 512-byte classes).
  auto device_peak = [](const std::string& name) {
    std::ifstream in(scratch / name / "run" / "metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      if (const auto j = nlohmann::json::parse(line); j["split"] == "train") return j["peak_memory_bytes"].get<double>();
    return 0.0;
  };
  const auto model = ft::io::SafetensorsFile::open(fixtures + "/tiny_llama/model.safetensors");
  double parameters = 0;
  for (const auto& t : model.tensors()) parameters += double(t.numel());
  const double kept = device_peak("device_zero2_mixed"), offloaded = device_peak("device_zero2_mixed_offload");
  CAPTURE(kept);
  CAPTURE(offloaded);
  CHECK(kept - offloaded == doctest::Approx(12 * parameters / 2).epsilon(0.03));

  // ftrun estimate puts them on the host too: its step peak is the device's
  // measured one (to the byte here; the estimate's contract is 5%).
  const fs::path dir = scratch / "device_zero2_mixed_offload";
  REQUIRE(std::system((FTRUN_PATH " estimate " + (dir / "recipe.toml").string() + " --json >" +
                       (dir / "estimate.json").string()).c_str()) == 0);
  const auto estimate = nlohmann::json::parse(read_bytes(dir / "estimate.json"));
  double measured = 0;
  std::ifstream metrics(dir / "run" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);)
    if (const auto j = nlohmann::json::parse(line); j["split"] == "train")
      measured = std::max(measured, j["peak_memory_bytes"].get<double>());
  CHECK(estimate["step_peak_bytes"].get<double>() == doctest::Approx(measured).epsilon(0.05));
}

TEST_CASE("a checkpoint written by zero2 on 2 ranks resumes on 4 ranks (zero1), on 2 (zero3) and on one process") {
  const fs::path whole = recipe("reshard_whole", "adapter = \"full\"\nparallelism = \"zero2\"\n", 2, 2);
  std::ofstream(whole, std::ios::app) << "[checkpoint]\nsave_steps = 10\n";
  const Run first = train(whole);
  INFO(first.err);
  REQUIRE(first.code == 0);
  const fs::path checkpoint = whole.parent_path() / "run" / "checkpoint-10";
  REQUIRE(fs::exists(checkpoint / "optimizer-0-of-2.safetensors"));
  REQUIRE(fs::exists(checkpoint / "optimizer-1-of-2.safetensors"));

  struct Resumed {
    std::string name, strategy;
    int rows, ranks;
  };
  // ZeRO-3 loads the checkpoint's model a stage at a time, keeping its shards.
  for (const Resumed& r : {Resumed{"reshard_four", "adapter = \"full\"\nparallelism = \"zero1\"\n", 1, 4},
                           Resumed{"reshard_zero3", "adapter = \"full\"\nparallelism = \"zero3\"\n", 2, 2},
                           Resumed{"reshard_one", "adapter = \"full\"\n", 4, 1}}) {
    CAPTURE(r.name);
    expect_resumed_as(whole, recipe(r.name, r.strategy, r.rows, r.ranks), checkpoint);
  }
}

namespace {

// A tiny Mixtral (2 layers, 4 experts of width 48, top 2) over the tiny
// Llama's tokenizer, its weights drawn by ftrun init; `aux`: it adds the
// load-balancing loss. Returns its directory.
std::string tiny_mixtral(const std::string& name, bool aux) {
  const fs::path dir = scratch / name;
  fs::create_directories(dir);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(fixtures + "/tiny_llama/" + file, dir / file, fs::copy_options::overwrite_existing);
  std::ofstream(dir / "config.json") << R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "hidden_act": "silu", "hidden_size": 32,
    "head_dim": 8, "intermediate_size": 48, "max_position_embeddings": 512, "num_attention_heads": 4,
    "num_hidden_layers": 2, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
    "router_aux_loss_coef": 0.02, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false,
    "vocab_size": 512, "output_router_logits": )" << (aux ? "true" : "false") << "}\n";
  const std::string init = FTRUN_PATH " init " + dir.string() + " >/dev/null";
  REQUIRE(std::system(init.c_str()) == 0);
  return dir.string();
}

// The largest state_bytes any rank reported.
double largest_state_bytes(const fs::path& recipe_file) {
  double most = 0;
  std::ifstream in(recipe_file.parent_path() / "run" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (const auto j = nlohmann::json::parse(line); j.contains("state_bytes"))
      most = std::max(most, j["state_bytes"].get<double>());
  return most;
}

}  // namespace

TEST_CASE("expert parallelism on 2 and 4 ranks, alone and with zero1/zero2/zero3, trains what one process trains") {
  const std::string model = tiny_mixtral("tiny_mixtral", false);
  const fs::path single = recipe("moe_single", "adapter = \"full\"\n", 4, 1, "", model);
  REQUIRE(train(single).code == 0);
  struct Spread {
    std::string name, parallelism;
    int experts_split, rows, ranks;
  };
  for (const Spread& s : {Spread{"ep2", "ddp", 2, 2, 2}, Spread{"ep4", "ddp", 4, 1, 4},
                          Spread{"ep2_zero2", "zero2", 2, 2, 2}, Spread{"ep2_zero2_two_groups", "zero2", 2, 1, 4},
                          Spread{"ep2_zero3", "zero3", 2, 2, 2}, Spread{"ep2_zero3_two_groups", "zero3", 2, 1, 4}}) {
    CAPTURE(s.name);
    const fs::path spread = recipe("moe_" + s.name,
                                   "adapter = \"full\"\nparallelism = \"" + s.parallelism + "\"\nexpert_parallel = " +
                                       std::to_string(s.experts_split) + "\n",
                                   s.rows, s.ranks, "", model);
    if (s.name == "ep2") std::ofstream(spread, std::ios::app) << "[checkpoint]\nsave_steps = 10\n";
    // Greedy answers before and after training: every rank takes rank 0's token, so all run as many forwards.
    if (s.name == "ep4") std::ofstream(spread, std::ios::app) << "[preview]\nprompt = \"What is a hack?\"\nmax_new_tokens = 6\n";
    const Run r = expect_same_training(single, spread);
    if (s.name == "ep4") CHECK(r.out.find("after training: \"What is a hack?\" -> ") != std::string::npos);
  }
  CHECK(train(scratch / "moe_ep4" / "recipe.toml", "--dry-run").out.find(
            "parallelism  ddp: 4 rank(s), gradients all-reduced; experts split over groups of 4 ranks (all-to-all)") !=
        std::string::npos);
  // Each rank of 4 holds one expert of 4 per layer: 48,544 of the 76,192 parameters, and their state.
  CHECK(largest_state_bytes(scratch / "moe_ep4" / "recipe.toml") < 0.66 * largest_state_bytes(single));

  // ddp's checkpoint: the first rank of each expert group writes its run of
  // experts' state, rank 0 the rest; zero1 on two groups of 2 continues it.
  const fs::path checkpoint = scratch / "moe_ep2" / "run" / "checkpoint-10";
  CHECK(fs::exists(checkpoint / "optimizer-0-of-2.safetensors"));
  CHECK(fs::exists(checkpoint / "optimizer-1-of-2.safetensors"));
  expect_resumed_as(
      single, recipe("moe_ep2_resumed", "adapter = \"full\"\nparallelism = \"zero1\"\nexpert_parallel = 2\n", 1, 4, "", model),
      checkpoint);
  // zero3 keeps its range of the rest of each block and of its run of experts from the same checkpoint.
  expect_resumed_as(
      single, recipe("moe_ep2_resumed_zero3", "adapter = \"full\"\nparallelism = \"zero3\"\nexpert_parallel = 2\n", 2, 2, "", model),
      checkpoint);
}

TEST_CASE("expert parallelism with the optimizer fused into backward trains what one process trains") {
  // Each block's experts are reduced over the ranks that hold them and
  // stepped inside backward, the rest over every rank; the gradient norm
  // counts each run of experts once.
  const std::string model = tiny_mixtral("tiny_mixtral_fused", false);
  const std::string fused = "fuse_optimizer_with_backward = true\nmax_grad_norm = 0.0\n";
  const fs::path single = recipe("moe_fused_single", "adapter = \"full\"\n", 4, 1, fused, model);
  REQUIRE(train(single).code == 0);
  for (const auto& [name, parallelism, rows, ranks] :
       {std::tuple<std::string, std::string, int, int>{"ep2", "ddp", 2, 2}, {"ep2_zero1_two_groups", "zero1", 1, 4}}) {
    CAPTURE(name);
    expect_same_training(single, recipe("moe_fused_" + name,
                                        "adapter = \"full\"\nparallelism = \"" + parallelism +
                                            "\"\nexpert_parallel = 2\n",
                                        rows, ranks, fused, model));
  }
}

TEST_CASE("expert parallelism with the load-balancing loss trains what ddp trains and resumes bit for bit") {
  const std::string model = tiny_mixtral("tiny_mixtral_aux", true);
  // Each rank's micro-batch has its own load-balancing loss, as under DDP.
  const fs::path ddp = recipe("moe_aux_ddp", "adapter = \"full\"\nparallelism = \"ddp\"\n", 2, 2, "", model);
  REQUIRE(train(ddp).code == 0);
  const std::string strategy = "adapter = \"full\"\nparallelism = \"ddp\"\nexpert_parallel = 2\n";
  const fs::path spread = recipe("moe_aux_ep2", strategy, 2, 2, "", model);
  std::ofstream(spread, std::ios::app) << "[checkpoint]\nsave_steps = 10\n";
  expect_same_training(ddp, spread);
  const fs::path checkpoint = spread.parent_path() / "run" / "checkpoint-10";

  const fs::path same = recipe("moe_aux_same", strategy, 2, 2, "", model);
  std::ofstream(same, std::ios::app) << "[checkpoint]\nresume = \"" << checkpoint.string() << "\"\n";
  const Run r = train(same);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto a = steps(spread), b = steps(same);
  REQUIRE(b.size() == 10);
  for (const auto& [step, v] : b) CHECK(v == a.at(step));
  CHECK(weight_difference(final_weights(spread), final_weights(same)) == 0);

  // Each run of experts keeps its state apart: another split cannot read it.
  const fs::path other = recipe("moe_aux_other", "adapter = \"full\"\nparallelism = \"ddp\"\n", 2, 2, "", model);
  std::ofstream(other, std::ios::app) << "[checkpoint]\nresume = \"" << checkpoint.string() << "\"\n";
  const Run refused = train(other);
  CHECK(refused.code != 0);
  CHECK(refused.err.find("was written with strategy.expert_parallel = 2, this run sets 1") != std::string::npos);
}

TEST_CASE("LoRA on a mixture's routers and experts (all-linear) on 2 ranks with zero2 trains what one process "
          "trains, and resumes") {
  const std::string model = tiny_mixtral("tiny_mixtral_lora", false);
  const std::string lora = "[lora]\nr = 4\nalpha = 8\ntarget_modules = [\"all-linear\"]\n";
  const fs::path single = recipe("moe_lora_single", "adapter = \"lora\"\n", 4, 1, "", model);
  std::ofstream(single, std::ios::app) << lora;
  REQUIRE(train(single).code == 0);
  const fs::path adapter = final_weights(single, "adapter/adapter_model.safetensors");
  const auto file = ft::io::SafetensorsFile::open(adapter);
  CHECK(file.tensors().size() == 2 * 7 * 2);  // q, k, v, o, the router, gate_up and down in two layers
  CHECK(file.at("base_model.model.model.layers.1.mlp.experts.base_layer.lora_A.weight").shape ==
        std::vector<std::int64_t>{4 * 8, 32});  // 4 experts of rank 8: gate_up's rank is twice r, as in PEFT

  const fs::path dp = recipe("moe_lora_zero2", "adapter = \"lora\"\nparallelism = \"zero2\"\n", 2, 2, "", model);
  std::ofstream(dp, std::ios::app) << lora << "[checkpoint]\nsave_steps = 10\n";
  expect_same_training(single, dp, "adapter/adapter_model.safetensors");
  const fs::path resumed = recipe("moe_lora_resumed", "adapter = \"lora\"\nparallelism = \"zero2\"\n", 2, 2, "", model);
  std::ofstream(resumed, std::ios::app) << lora;
  expect_resumed_as(dp, resumed, dp.parent_path() / "run" / "checkpoint-10", "adapter/adapter_model.safetensors");
}

TEST_CASE("LoRA on a mixture's routed experts split over 2 and 4 ranks, alone and with zero2/zero3, trains what one "
          "process trains, merges and resumes exactly") {
  const std::string model = tiny_mixtral("tiny_mixtral_lora_ep", false);
  const std::string lora = "[lora]\nr = 4\nalpha = 8\ntarget_modules = [\"all-linear\"]\nsave_merged = true\n";
  const fs::path single = recipe("moe_lora_ep_single", "adapter = \"lora\"\n", 4, 1, "", model);
  std::ofstream(single, std::ios::app) << lora;
  REQUIRE(train(single).code == 0);
  struct Spread {
    std::string name, parallelism;
    int experts_split, rows, ranks;
  };
  for (const Spread& s : {Spread{"ep2", "ddp", 2, 2, 2}, Spread{"ep4", "ddp", 4, 1, 4},
                          Spread{"ep2_zero2_two_groups", "zero2", 2, 1, 4}, Spread{"ep2_zero3_two_groups", "zero3", 2, 1, 4}}) {
    CAPTURE(s.name);
    const fs::path spread = recipe("moe_lora_" + s.name,
                                   "adapter = \"lora\"\nparallelism = \"" + s.parallelism + "\"\nexpert_parallel = " +
                                       std::to_string(s.experts_split) + "\n",
                                   s.rows, s.ranks, "", model);
    std::ofstream(spread, std::ios::app) << lora << (s.name == "ep2" ? "[checkpoint]\nsave_steps = 10\n" : "");
    const Run r = train(spread);
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(metric_difference(single, spread) < 1e-5);
    CHECK(std::abs(final_eval_loss(single) - final_eval_loss(spread)) < 1e-5);
    // The adapter holds every expert's A and B, put together from the ranks;
    // so does the merged model. AdamW divides each gradient by its own
    // running size, so where an expert's gradients are small the order in
    // which its rows were summed (here they come from two ranks) shows in
    // the fifth decimal of its B after 20 steps.
    CHECK(weight_difference(final_weights(single, "adapter/adapter_model.safetensors"),
                            final_weights(spread, "adapter/adapter_model.safetensors")) < 5e-5);
    CHECK(weight_difference(final_weights(single, "merged/model.safetensors"),
                            final_weights(spread, "merged/model.safetensors")) < 5e-5);
  }
  // Each rank of 4 keeps one expert's A and B of 4 per layer, and their state.
  CHECK(largest_state_bytes(scratch / "moe_lora_ep4" / "recipe.toml") <
        largest_state_bytes(scratch / "moe_lora_ep_single" / "recipe.toml"));

  // Each rank reads its run of experts' A and B, and their state, from the whole checkpoint.
  const fs::path resumed = recipe("moe_lora_ep2_resumed", "adapter = \"lora\"\nparallelism = \"ddp\"\nexpert_parallel = 2\n",
                                  2, 2, "", model);
  std::ofstream(resumed, std::ios::app) << lora;
  expect_resumed_as(scratch / "moe_lora_ep2" / "recipe.toml", resumed, scratch / "moe_lora_ep2" / "run" / "checkpoint-10",
                    "adapter/adapter_model.safetensors");
}

TEST_CASE("expert parallelism bad input: one line each naming strategy.expert_parallel, exit 2") {
  const std::string model = tiny_mixtral("tiny_mixtral_bad", false);
  auto refused = [&](const std::string& name, const std::string& strategy, int ranks, const std::string& model_dir,
                     const std::string& says) {
    CAPTURE(name);
    const Run r = train(recipe(name, "adapter = \"full\"\n" + strategy, 1, ranks, "", model_dir));
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(r.err.find(says) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  };
  refused("ep_experts", "parallelism = \"ddp\"\nexpert_parallel = 3\n", 3, model,
          "strategy.expert_parallel = 3 does not divide the 4 experts of each sparse layer; allowed: a divisor of 4");
  refused("ep_ranks", "parallelism = \"ddp\"\nexpert_parallel = 4\n", 2, model,
          "strategy.expert_parallel = 4 does not divide the job's 2 ranks into expert groups");
  refused("ep_dense", "parallelism = \"ddp\"\nexpert_parallel = 2\n", 2, "tiny_llama",
          "strategy.expert_parallel = 2 splits a mixture of experts' experts over ranks, but");
  refused("ep_pipeline", "parallelism = \"pipeline\"\nexpert_parallel = 2\n[pipeline]\nschedule = \"gpipe\"\n", 2, model,
          "strategy.expert_parallel = 2 needs parallelism ddp, zero1, zero2 or zero3");
}

namespace {

// Starts `killed` (with `sets`) in the background, waits for its
// checkpoint-`at`, kills one of its `ranks` ranks with SIGKILL: the job must
// stop within 30 s with a line naming the rank that died.
void kill_one_rank(const fs::path& killed, std::size_t ranks, int at, const std::string& sets = "") {
  const fs::path dir = killed.parent_path();
  const std::string start = "(" + mpi_env + FTRUN_PATH " train " + killed.string() + " " + sets + " >" + (dir / "stdout").string() +
                            " 2>" + (dir / "stderr").string() + "; echo $? >" + (dir / "status").string() + ") &";
  REQUIRE(std::system(start.c_str()) == 0);
  const fs::path checkpoint = dir / "run" / ("checkpoint-" + std::to_string(at));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(checkpoint) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(fs::exists(checkpoint));
  // The ranks are mpirun's children (ftrun's launcher is mpirun's parent).
  const std::string find_ranks = "pgrep -P $(pgrep -f '^mpirun .* train " + killed.string() + "')";
  std::FILE* pipe = ::popen(find_ranks.c_str(), "r");
  std::vector<int> pids;
  for (int pid = 0; std::fscanf(pipe, "%d", &pid) == 1;) pids.push_back(pid);
  ::pclose(pipe);
  REQUIRE(pids.size() == ranks);
  const auto killed_at = std::chrono::steady_clock::now();
  REQUIRE(::kill(pids.back(), SIGKILL) == 0);
  while (!fs::exists(dir / "status") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string err = read_bytes(dir / "stderr");
  INFO(err);
  CHECK(std::stoi(read_bytes(dir / "status")) != 0);
  CHECK(seconds < 30);
  CHECK(err.find("ftrun: rank ") != std::string::npos);
  CHECK(err.find("(pid " + std::to_string(pids.back()) + " on ") != std::string::npos);
  CHECK(err.find("has died or exited") != std::string::npos);
}

// The killed job's command again continues from its latest checkpoint and
// ends exactly where the uninterrupted `reference` ended: every step's loss
// and gradient norm, and the final weights.
void expect_exact_resume(const fs::path& reference, const fs::path& killed, std::size_t total_steps,
                         const std::string& weights = "model/model.safetensors", const std::string& sets = "",
                         const std::string& launcher = "") {
  const Run resumed = train(killed, sets, launcher);
  INFO(resumed.err);
  REQUIRE(resumed.code == 0);
  CHECK(resumed.out.find("resuming after step ") != std::string::npos);
  const auto a = steps(reference), b = steps(killed);
  REQUIRE(b.size() == total_steps);
  for (const auto& [step, v] : b) {
    CAPTURE(step);
    CHECK(v.first == a.at(step).first);
    CHECK(v.second == a.at(step).second);
  }
  CHECK(weight_difference(final_weights(reference, weights), final_weights(killed, weights)) == 0);
}

}  // namespace

// An operator's stop (core/signals.hpp): SIGINT, SIGTERM or SIGUSR1 at a
// random step makes every rank finish that step, write its checkpoint and
// exit with code 5, whoever started the ranks and whichever one the signal
// reached; resume = "auto" then continues bit for bit as the uninterrupted
// run. A second SIGINT ends a run at once.
namespace {

// A job started in the background; `pid` is its first process (ftrun, or the launcher).
struct Started {
  pid_t pid;
  fs::path dir;
};

Started start(const fs::path& recipe_file, const std::string& launcher = "") {
  const fs::path dir = recipe_file.parent_path();
  const std::string cmd = "exec env " + mpi_env + launcher + FTRUN_PATH " train \"" + recipe_file.string() + "\" >\"" +
                          (dir / "stdout").string() + "\" 2>\"" + (dir / "stderr").string() + "\"";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  return {pid, dir};
}

// The job's exit code, or -1 when it has not ended within `seconds` (then it is killed).
int exit_code(const Started& job, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (::waitpid(job.pid, &status, WNOHANG) != job.pid) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(job.pid, SIGKILL);
      ::waitpid(job.pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits until the job has logged `step` (logging_steps = 1).
void wait_for_step(const Started& job, long step) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(job.dir / "run" / "metrics.jsonl");
    long last = 0;
    for (std::string line; std::getline(in, line);)
      if (line.find("\"split\":\"train\"") != std::string::npos) last = nlohmann::json::parse(line)["step"].get<long>();
    if (last >= step) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("the job did not reach step " << step << ": " << read_bytes(job.dir / "stderr"));
}

// The step of the first complete checkpoint the job writes within a minute, or -1.
// Only checkpoint-<digits> is complete: checkpoint-<step>.tmp-<pid> is still
// being written by the other ranks.
long first_checkpoint(const Started& job) {
  for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(std::chrono::milliseconds(20)))
    for (const auto& entry : fs::directory_iterator(job.dir / "run")) {
      const std::string name = entry.path().filename().string();
      const std::string digits = name.starts_with("checkpoint-") ? name.substr(11) : "";
      if (!digits.empty() && std::ranges::all_of(digits, [](char c) { return c >= '0' && c <= '9'; }))
        return std::stol(digits);
    }
  return -1;
}

std::vector<pid_t> children_of(pid_t parent) {
  std::FILE* pipe = ::popen(("pgrep -P " + std::to_string(parent)).c_str(), "r");
  std::vector<pid_t> pids;
  for (int pid = 0; std::fscanf(pipe, "%d", &pid) == 1;) pids.push_back(pid);
  ::pclose(pipe);
  return pids;
}

// The step of the run's "stop" record, or -1.
long stop_record(const fs::path& recipe_file) {
  std::ifstream in(recipe_file.parent_path() / "run" / "metrics.jsonl");
  long step = -1;
  for (std::string line; std::getline(in, line);)
    if (const auto j = nlohmann::json::parse(line); j["split"] == "stop") step = j["step"].get<long>();
  return step;
}

// Sends `signal` to what `target` picks from the started job once it has
// logged a random step, and checks the stop: exit code 5, one line saying
// which signal, the step and the checkpoint, and that checkpoint on disk.
// ftrun's own launcher passes SIGINT and SIGTERM on as SIGUSR1, so its ranks report `seen`.
void stop_with(const fs::path& stopped, int signal, int seen, const std::string& launcher,
               const std::function<pid_t(const Started&)>& target) {
  static std::mt19937 random(std::random_device{}());
  const long at = std::uniform_int_distribution<long>(2, 40)(random);
  CAPTURE(at);
  const Started job = start(stopped, launcher);
  wait_for_step(job, at);
  const pid_t to = target(job);
  REQUIRE(to > 0);
  REQUIRE(::kill(to, signal) == 0);
  const int code = exit_code(job, 120);
  const std::string err = read_bytes(job.dir / "stderr");
  INFO(err);
  REQUIRE(code == 5);
  const long step = stop_record(stopped);
  CHECK(step >= at);
  CHECK(step < 60);
  if (seen != signal) CHECK(err.find(std::string("ftrun: ") + ft::signals::name(signal) + ": every rank stops") != std::string::npos);
  const std::string line = std::string("ftrun: stopped by ") + ft::signals::name(seen) + " after step " +
                           std::to_string(step) + " of 60; saved " + (job.dir / "run").string() + "/checkpoint-" +
                           std::to_string(step) + ", from which resume = \"auto\" continues\n";
  CHECK(err.find(line) != std::string::npos);
  CHECK(fs::exists(job.dir / "run" / ("checkpoint-" + std::to_string(step)) / "trainer_state.json"));
}

const std::string resumable = "[checkpoint]\nresume = \"auto\"\n";

}  // namespace

TEST_CASE("a rank killed with SIGKILL stops the job with a line naming it; resume = auto continues exactly") {
  const std::string strategy = "adapter = \"full\"\nparallelism = \"zero2\"\n";
  const std::string more = "[checkpoint]\nsave_steps = 10\nsave_total_limit = 30\nresume = \"auto\"\n";
  const fs::path reference = recipe("kill_reference", strategy, 2, 2, "max_steps = 200\n");
  const fs::path killed = recipe("kill_killed", strategy, 2, 2, "max_steps = 200\n");
  for (const fs::path& p : {reference, killed}) std::ofstream(p, std::ios::app) << more;
  REQUIRE(train(reference).code == 0);
  kill_one_rank(killed, 2, 20);

  // A copy of what the kill left, to resume on 4 ranks below.
  const fs::path four = recipe("kill_four", strategy, 1, 4, "max_steps = 200\n");
  std::ofstream(four, std::ios::app) << more;
  fs::copy(killed.parent_path() / "run", four.parent_path() / "run",
           fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  expect_exact_resume(reference, killed, 200);
  const auto a = steps(reference);

  // On 4 ranks with the same global batch it continues the same way (other reduction orders: within 1e-5).
  const Run on_four = train(four);
  INFO(on_four.err);
  REQUIRE(on_four.code == 0);
  CHECK(on_four.out.find("resuming after step ") != std::string::npos);
  const auto c = steps(four);
  REQUIRE(c.size() == 200);
  for (const auto& [step, v] : c) CHECK(std::abs(v.first - a.at(step).first) < 1e-5);
  CHECK(weight_difference(final_weights(reference), final_weights(four)) < 1e-5);
}

TEST_CASE("QLoRA under zero3: a rank killed with SIGKILL stops the job; resume = auto continues exactly") {
  const std::string four_bit = "--set model.quantize=nf4 --set model.bnb_4bit_use_double_quant=true";
  const std::string strategy = "adapter = \"lora\"\nparallelism = \"zero3\"\n";
  const std::string more = "[checkpoint]\nsave_steps = 10\nsave_total_limit = 30\nresume = \"auto\"\n";
  const fs::path reference = recipe("qlora_kill_reference", strategy, 2, 2, "max_steps = 200\n");
  const fs::path killed = recipe("qlora_kill_killed", strategy, 2, 2, "max_steps = 200\n");
  for (const fs::path& p : {reference, killed}) std::ofstream(p, std::ios::app) << more;
  REQUIRE(train(reference, four_bit).code == 0);
  kill_one_rank(killed, 2, 20, four_bit);
  expect_exact_resume(reference, killed, 200, "adapter/adapter_model.safetensors", four_bit);
}

TEST_CASE("multi-rank bad input: one line each, before any rank trains") {
  SUBCASE("single with several ranks") {
    const Run r = train(recipe("bad_single", "adapter = \"full\"\n", 2, 2));
    CHECK(r.code == 2);
    CHECK(r.err.find("parallelism single runs one process, but the job has 2 ranks") != std::string::npos);
  }
  SUBCASE("a batch the data cannot fill on every rank") {
    const Run r = train(recipe("bad_world", "parallelism = \"ddp\"\n", 64, 4, "", "tiny_llama"));
    CHECK(r.code != 0);
    CHECK(r.err.find("fewer than one batch of rows_per_batch 64 for each of 4 ranks") != std::string::npos);
  }
  SUBCASE("a shard group size that does not divide the ranks") {
    const Run r = train(recipe("bad_group", "parallelism = \"zero3\"\n", 2, 4), "--set launch.shard_group_size=3");
    CHECK(r.code == 2);
    CHECK(r.err.find("launch.shard_group_size = 3 does not divide the 4 ranks of the job into groups; allowed: a "
                     "divisor of 4") != std::string::npos);
  }
  SUBCASE("launch.nproc that is not the job's size") {
    const fs::path p = recipe("bad_nproc", "parallelism = \"ddp\"\n", 2, 3);
    const std::string cmd = mpi_env + FT_MPIRUN " -np 2 --oversubscribe " FTRUN_PATH " train " + p.string() +
                            " >/dev/null 2>" + (p.parent_path() / "stderr").string();
    CHECK(std::system(cmd.c_str()) != 0);
    CHECK(read_bytes(p.parent_path() / "stderr").find("launch.nproc: is 3, but mpirun started this job with 2 ranks") !=
          std::string::npos);
  }
  SUBCASE("ranks started with different recipes") {
    const fs::path p = recipe("bad_disagree", "parallelism = \"ddp\"\n", 2, 1);
    const std::string cmd = mpi_env + FT_MPIRUN " --oversubscribe -np 1 " FTRUN_PATH " train " + p.string() +
                            " : -np 1 " FTRUN_PATH " train " + p.string() + " --set train.learning_rate=0.003" +
                            " >/dev/null 2>" + (p.parent_path() / "stderr").string();
    CHECK(std::system(cmd.c_str()) != 0);
    const std::string err = read_bytes(p.parent_path() / "stderr");
    INFO(err);
    CHECK(err.find("rank 0 and rank 1 disagree on the resolved recipe: rank 0 has \"learning_rate = 0.002") !=
          std::string::npos);
    CHECK(err.find("rank 1 has \"learning_rate = 0.003") != std::string::npos);
  }
  SUBCASE("--dry-run prints the launch command, shell-quoted") {
    const fs::path p = recipe("dry run", "parallelism = \"zero1\"\nadapter = \"full\"\n", 2, 2);
    const Run r = train(p, "--dry-run");
    CHECK(r.code == 0);
    CHECK(r.out.find("mpirun -np 2 --bind-to none --stdin none --oversubscribe") != std::string::npos);
    CHECK(r.out.find(" train '" + p.string() + "'") != std::string::npos);
  }
  SUBCASE("resuming with another global batch") {
    const fs::path first = recipe("bad_batch_first", "parallelism = \"ddp\"\nadapter = \"full\"\n", 2, 2,
                                  "max_steps = 2\n");
    REQUIRE(train(first).code == 0);
    const fs::path second = recipe("bad_batch_second", "parallelism = \"ddp\"\nadapter = \"full\"\n", 1, 2);
    std::ofstream(second, std::ios::app) << "[checkpoint]\nresume = \"" << (first.parent_path() / "run/latest").string()
                                         << "\"\n";
    const Run r = train(second);
    CHECK(r.code != 0);
    CHECK(r.err.find("was written with a global batch of 4 rows per step, this run takes 2") != std::string::npos);
  }
}

TEST_CASE("launch details: NCCL_, UCX_, FI_ and CUDA_ variables, launch.mpirun_args and launch.devices reach mpirun") {
  const fs::path p = recipe("launch_details", "parallelism = \"ddp\"\n", 2, 2, "max_steps = 2\n");
  const std::string env = "NCCL_FT_PROBE=1 UCX_FT_PROBE=1 FI_FT_PROBE=1 CUDA_FT_PROBE=1 OTHER_FT_PROBE=1 ";
  const Run dry = train(p, "--dry-run --set 'launch.mpirun_args=[\"--tag-output\"]' --set launch.devices=0,1,3", env);
  REQUIRE_MESSAGE(dry.code == 0, dry.err);
  for (const char* name : {"CUDA_FT_PROBE", "FI_FT_PROBE", "NCCL_FT_PROBE", "UCX_FT_PROBE"})
    CHECK_MESSAGE(dry.out.find(std::string("-x ") + name + " ") != std::string::npos, name);
  CHECK(dry.out.find("OTHER_FT_PROBE") == std::string::npos);
  CHECK(dry.out.find("-x CUDA_VISIBLE_DEVICES=0,1,3 --tag-output ") != std::string::npos);
  CHECK(dry.out.find("mpirun_args = [\"--tag-output\"]") != std::string::npos);  // in the resolved recipe

  // mpirun takes them: rank 0's lines come tagged with its rank.
  const Run run = train(p, "--set 'launch.mpirun_args=[\"--tag-output\"]'", "NCCL_FT_PROBE=1 ");
  REQUIRE_MESSAGE(run.code == 0, run.err);
  CHECK(run.out.find("[1,0]<stdout>:") != std::string::npos);

  const Run bad = train(p, "--dry-run --set launch.devices=0,gpu1");
  CHECK(bad.code == 2);
  CHECK(bad.err.find("launch.devices") != std::string::npos);
  CHECK(bad.err.find("\"gpu1\", which is not a device") != std::string::npos);
  const Run one = train(p, "--dry-run --set launch.devices=gpu1");
  CHECK(one.code == 2);
  CHECK(one.err.find("\"gpu1\" is not a device; allowed: ") != std::string::npos);
}

// Two machines made on this one: two network namespaces joined by a veth
// pair, each with its own host name. mpirun runs in the first and reaches
// the second through a launch agent that enters it; MPI moves everything
// over TCP between the two addresses.
TEST_CASE("two nodes x two ranks over TCP between network namespaces train what one process trains") {
  const std::string tag = std::to_string(::getpid() % 100000);
  const std::string ns1 = "ft-a" + tag, ns2 = "ft-b" + tag;
  const fs::path dir = scratch / "two_nodes";
  fs::create_directories(dir);
  const std::string make = "ip netns add " + ns1 + " && ip netns add " + ns2 + " && ip link add fta" + tag +
                           " type veth peer name ftb" + tag + " && ip link set fta" + tag + " netns " + ns1 +
                           " && ip link set ftb" + tag + " netns " + ns2 + " && ip -n " + ns1 +
                           " addr add 10.77.0.1/24 dev fta" + tag + " && ip -n " + ns2 + " addr add 10.77.0.2/24 dev ftb" +
                           tag + " && ip -n " + ns1 + " link set fta" + tag + " up && ip -n " + ns2 + " link set ftb" +
                           tag + " up && ip -n " + ns1 + " link set lo up && ip -n " + ns2 + " link set lo up";
  if (::geteuid() != 0 || std::system((make + " 2>" + (dir / "netns_error").string()).c_str()) != 0) {
    std::system(("ip netns del " + ns1 + " 2>/dev/null; ip netns del " + ns2 + " 2>/dev/null").c_str());
    return ft::test::skip("network namespaces cannot be made here (needs root and iproute2): " +
                          read_bytes(dir / "netns_error"));
  }
  std::ofstream(dir / "agent.sh") << "#!/bin/sh\n# mpirun's launch agent: AGENT HOST COMMAND... runs COMMAND on that \"machine\".\n"
                                  << "case $1 in 10.77.0.1) ns=" << ns1 << "; name=node1;; *) ns=" << ns2
                                  << "; name=node2;; esac\nshift\n"
                                  << "exec ip netns exec $ns unshare --uts sh -c \"hostname $name; $*\"\n";
  fs::permissions(dir / "agent.sh", fs::perms::owner_all);
  std::ofstream(dir / "hostfile") << "10.77.0.1 slots=2\n10.77.0.2 slots=2\n";

  const fs::path single = recipe("two_nodes_single", "adapter = \"full\"\n", 4);
  REQUIRE(train(single).code == 0);
  const fs::path nodes = recipe("two_nodes_ddp", "adapter = \"full\"\nparallelism = \"zero2\"\n", 1, 4);
  const std::string mca = "OMPI_MCA_plm_rsh_agent=" + (dir / "agent.sh").string() +
                          " OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=10.77.0.0/24"
                          " OMPI_MCA_oob_tcp_if_include=10.77.0.0/24 ";
  const std::string cmd = "ip netns exec " + ns1 + " unshare --uts sh -c 'hostname node1; " + mpi_env + mca +
                          FTRUN_PATH " train " + nodes.string() + " --set launch.hostfile=" + (dir / "hostfile").string() +
                          " >" + (nodes.parent_path() / "stdout").string() + " 2>" +
                          (nodes.parent_path() / "stderr").string() + "'";
  const int status = std::system(cmd.c_str());
  std::system(("ip netns del " + ns1 + "; ip netns del " + ns2).c_str());
  const std::string out = read_bytes(nodes.parent_path() / "stdout");
  INFO(read_bytes(nodes.parent_path() / "stderr"));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(out.find("ranks       4 on 2 machine(s): node1 x2, node2 x2") != std::string::npos);
  CHECK(metric_difference(single, nodes) < 1e-5);
  CHECK(weight_difference(final_weights(single), final_weights(nodes)) < 1e-5);
}

// A Slurm cluster of this one machine: tests/train/slurm_cluster.sh starts
// munged, slurmctld and slurmd for the test. srun starts the ranks itself
// and they find each other through its PMIx server; in a batch job, the
// mpirun that ftrun starts takes the CPUs Slurm allocated. Both must train
// what one process trains; srun without an MPI plugin is refused in one line.
TEST_CASE("Slurm: ranks started by srun --mpi=pmix, and by ftrun's mpirun in an sbatch job, train what one process trains") {
  const fs::path dir = scratch / "slurm";
  const std::string cluster = std::string(FT_SOURCE_DIR) + "/tests/train/slurm_cluster.sh ";
  if (::geteuid() != 0 || std::system("command -v srun sbatch slurmctld slurmd munged >/dev/null") != 0) {
    return ft::test::skip("a Slurm cluster cannot be started here (needs root and the slurm-wlm and munge packages)");
  }
  fs::create_directories(dir);
  const int started = std::system((cluster + "start " + dir.string() + " 2>" + (dir / "error").string()).c_str());
  struct Stop {
    std::string command;
    ~Stop() { std::system(command.c_str()); }
  } stop{cluster + "stop " + dir.string()};
  INFO(read_bytes(dir / "error"));
  REQUIRE(started == 0);
  const std::string slurm = "SLURM_CONF=" + (dir / "slurm.conf").string() + " ";

  const fs::path single = recipe("slurm_single", "adapter = \"full\"\n", 4);
  REQUIRE(train(single).code == 0);

  const fs::path by_srun = recipe("slurm_srun", "adapter = \"full\"\nparallelism = \"zero2\"\n", 2, 2);
  Run r = train(by_srun, "", slurm + "srun --mpi=pmix -n 2 --kill-on-bad-exit=1 ");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("ranks       2 on 1 machine(s)") != std::string::npos);
  CHECK(metric_difference(single, by_srun) < 1e-5);
  CHECK(weight_difference(final_weights(single), final_weights(by_srun)) < 1e-5);

  // sbatch runs the script once, on the allocation's first CPU; launch.nproc = 2 makes ftrun start mpirun there.
  const fs::path batch = recipe("slurm_sbatch", "adapter = \"full\"\nparallelism = \"ddp\"\n", 2, 2);
  std::ofstream(batch.parent_path() / "job.sh") << "#!/bin/sh\nexec " FTRUN_PATH " train " << batch.string() << "\n";
  const std::string submit = mpi_env + slurm + "sbatch --wait -n 2 -o " + (batch.parent_path() / "stdout").string() +
                             " -e " + (batch.parent_path() / "stderr").string() + " " +
                             (batch.parent_path() / "job.sh").string() + " >/dev/null";
  const int status = std::system(submit.c_str());
  INFO(read_bytes(batch.parent_path() / "stderr"));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(read_bytes(batch.parent_path() / "stdout").find("ranks       2 on 1 machine(s)") != std::string::npos);
  CHECK(metric_difference(single, batch) < 1e-5);
  CHECK(weight_difference(final_weights(single), final_weights(batch)) < 1e-5);

  // srun passes SIGUSR1 (Slurm's --signal warning) to every rank: they stop with a checkpoint, and srun
  // exits with their code. (srun's own SIGTERM cancels the step; scancel sends SIGTERM to the ranks.)
  const std::string srun = slurm + "srun --mpi=pmix -n 2 ";
  const fs::path reference = recipe("slurm_signal_reference", "adapter = \"full\"\nparallelism = \"zero2\"\n", 2, 1,
                                    "max_steps = 60\n");
  const fs::path stopped = recipe("slurm_signal_stopped", "adapter = \"full\"\nparallelism = \"zero2\"\n", 2, 1,
                                  "max_steps = 60\n");
  for (const fs::path& p : {reference, stopped}) std::ofstream(p, std::ios::app) << resumable;
  REQUIRE(train(reference, "", srun).code == 0);
  stop_with(stopped, SIGUSR1, SIGUSR1, srun, [](const Started& job) { return job.pid; });
  expect_exact_resume(reference, stopped, 60, "model/model.safetensors", "", srun);

  const fs::path no_plugin = recipe("slurm_no_pmix", "adapter = \"full\"\nparallelism = \"ddp\"\n", 2, 2);
  r = train(no_plugin, "", slurm + "srun --mpi=none -n 2 ");
  CHECK(r.code == 2);  // srun passes on the ranks' exit code, and adds a line of its own
  CHECK(r.err.rfind("ftrun: srun started this job's 2 ranks without an MPI plugin, so they cannot find each other (no "
                    "PMIX_RANK in the environment); start it with srun --mpi=pmix, or set MpiDefault=pmix in "
                    "slurm.conf\n",
                    0) == 0);
  CHECK(r.err.find("ftrun:", 1) == std::string::npos);  // once, from rank 0
  CHECK_FALSE(fs::exists(no_plugin.parent_path() / "run"));
}

TEST_CASE("a hostfile naming a host that does not resolve is refused in one line before mpirun starts") {
  const fs::path p = recipe("bad_host", "parallelism = \"ddp\"\n", 2, 2);
  std::ofstream(p.parent_path() / "hostfile") << "# machines\nlocalhost slots=1\nno-such-host.invalid slots=1\n";
  const Run r = train(p, "--set launch.hostfile=" + (p.parent_path() / "hostfile").string());
  CHECK(r.code == 2);
  CHECK(r.err.rfind("ftrun: " + (p.parent_path() / "hostfile").string() +
                        ":3: launch.hostfile names the host \"no-such-host.invalid\", which does not resolve (",
                    0) == 0);
  CHECK(r.err.ends_with("); allowed: a host name or address this machine can reach\n"));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

// Pipeline parallelism (parallel/pipeline.hpp) on the 4-block tiny Llama
// with tied embeddings: the first rank holds the embedding, the last the
// head, and the table's gradient and values travel between them.
namespace {

const std::string four_blocks = "../../../models/ft-tiny-llama";  // relative to the train fixtures

// A pipeline recipe: 4 micro-batches per step of `rows` rows.
fs::path pipeline_recipe(const std::string& name, const std::string& schedule, int rows, int ranks,
                         const std::string& pipeline_lines = "", const std::string& train_lines = "") {
  const fs::path p = recipe(name, "adapter = \"full\"\nparallelism = \"pipeline\"\n", rows, ranks,
                            "gradient_accumulation_steps = 4\n" + train_lines, four_blocks);
  std::ofstream(p, std::ios::app) << "[pipeline]\nschedule = \"" << schedule << "\"\n" << pipeline_lines;
  return p;
}

// The mean over the run's logged steps of the ranks' measured bubble.
double mean_bubble(const fs::path& recipe_file) {
  std::ifstream in(recipe_file.parent_path() / "run" / "metrics.jsonl");
  double sum = 0;
  int n = 0;
  for (std::string line; std::getline(in, line);)
    if (const auto j = nlohmann::json::parse(line); j["split"] == "train" && j["step"].get<int>() > 2) {
      sum += j.at("pipeline_bubble").get<double>();
      ++n;
    }
  REQUIRE(n > 0);
  return sum / n;
}

}  // namespace

TEST_CASE("every pipeline schedule on 2 and 4 ranks trains what one process trains; pipeline x ddp/zero1 what ddp trains") {
  const fs::path single = recipe("pipe_single", "adapter = \"full\"\n", 2, 1, "gradient_accumulation_steps = 4\n",
                                 four_blocks);
  REQUIRE(train(single).code == 0);
  std::map<std::string, double> bubbles;
  for (const int ranks : {2, 4})
    for (const std::string schedule : {"gpipe", "1f1b", "interleaved_1f1b", "zero_bubble"}) {
      // Interleaving 2 chunks per rank needs 2 x ranks blocks.
      if (schedule == "interleaved_1f1b" && ranks == 4) continue;
      const std::string name = schedule + "_on_" + std::to_string(ranks);
      CAPTURE(name);
      const fs::path pp = pipeline_recipe("pipe_" + name, schedule, 2, ranks,
                                          schedule == "interleaved_1f1b" ? "stages_per_rank = 2\n" : "");
      expect_same_training(single, pp);
      bubbles[name] = mean_bubble(pp);
    }
  // 2 pipeline ranks x 2 replicas against DDP on 2 ranks with the same rows
  // per rank: what the pipeline adds to data parallelism. (One process with
  // twice the rows per micro-batch rounds its GEMMs differently, and on this
  // model AdamW carries that past 1e-5 in 20 steps with or without a
  // pipeline; the data-parallel tests above compare DDP with one process.)
  const fs::path ddp = recipe("pipe_ddp_reference", "adapter = \"full\"\nparallelism = \"ddp\"\n", 2, 2,
                              "gradient_accumulation_steps = 4\n", four_blocks);
  REQUIRE(train(ddp).code == 0);
  for (const std::string data_parallel : {"ddp", "zero1"}) {
    CAPTURE(data_parallel);
    const fs::path mixed = pipeline_recipe("pipe_x_" + data_parallel, "1f1b", 2, 4,
                                           "ranks = 2\ndata_parallel = \"" + data_parallel + "\"\n");
    expect_same_training(ddp, mixed);
  }
  // The bubble each rank measured (time waiting for a peer / the step's schedule) beside 1f1b's ideal
  // (p - 1) / (m + p - 1) for m = 4 micro-batches; timings on a shared machine, so printed, not asserted.
  for (const int p : {2, 4})
    MESSAGE("pipeline bubble on " << p << " ranks: ideal 1f1b " << double(p - 1) / (4 + p - 1) << ", measured 1f1b "
                                  << bubbles["1f1b_on_" + std::to_string(p)] << ", zero_bubble "
                                  << bubbles["zero_bubble_on_" + std::to_string(p)] << ", gpipe "
                                  << bubbles["gpipe_on_" + std::to_string(p)]);
  for (const auto& [name, bubble] : bubbles) {
    CAPTURE(name);
    CHECK(bubble > 0);
    CHECK(bubble < 1);
  }
}

TEST_CASE("a pipeline on 2 ranks trains LoRA, an untied checkpointed GPT-NeoX and every precision as one process") {
  struct Variant {
    std::string name, strategy, model, train_lines, weights;
    double tolerance;
  };
  const std::string full = "adapter = \"full\"\n", model = "model/model.safetensors";
  for (const Variant& v : {
           Variant{"lora", "adapter = \"lora\"\n", "tiny_llama", "", "adapter/adapter_model.safetensors", 1e-5},
           Variant{"neox", full, "tiny_neox", "gradient_checkpointing = \"every_block\"\n", model, 1e-5},
           // The stream between ranks is in the compute dtype, as between blocks in one process: the
           // same sums in the same order, so reduced precision matches as closely as fp32.
           Variant{"neox_bf16_mixed", full + "precision = \"bf16-mixed\"\n", "tiny_neox", "", model, 1e-5},
           Variant{"neox_bf16_true", full + "precision = \"bf16-true\"\n", "tiny_neox", "", model, 1e-5},
           Variant{"neox_fp16_mixed", full + "precision = \"fp16-mixed\"\n", "tiny_neox", "", model, 1e-5},
           // Tied embeddings: the head's part of the table's gradient is summed over the step on the
           // last rank before it joins the embedding's part, where one process alternates them per
           // micro-batch; in bf16 that rounds differently (a weight differs by one bf16 step, 2^-8).
           Variant{"bf16_mixed_tied", full + "precision = \"bf16-mixed\"\n", "tiny_llama", "", model, 1e-2}}) {
    CAPTURE(v.name);
    const std::string lines = "gradient_accumulation_steps = 4\n" + v.train_lines;
    const fs::path single = recipe("pipe_variant_single_" + v.name, v.strategy, 2, 1, lines, v.model);
    REQUIRE(train(single).code == 0);
    const fs::path pp = recipe("pipe_variant_" + v.name, v.strategy + "parallelism = \"pipeline\"\n", 2, 2, lines,
                               v.model);
    std::ofstream(pp, std::ios::app) << "[pipeline]\nschedule = \"1f1b\"\n";
    expect_same_training(single, pp, v.weights, v.tolerance);
  }
}

TEST_CASE("a pipeline checkpoint holds one optimizer file per pipeline rank and resumes re-partitioned") {
  const fs::path two = pipeline_recipe("pipe_ckpt_two", "1f1b", 2, 2);
  std::ofstream(two, std::ios::app) << "[checkpoint]\nsave_steps = 10\n";
  const Run r = train(two);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const fs::path checkpoint = two.parent_path() / "run" / "checkpoint-10";
  CHECK(fs::exists(checkpoint / "optimizer-0-of-2.safetensors"));
  CHECK(fs::exists(checkpoint / "optimizer-1-of-2.safetensors"));
  // On 4 pipeline ranks, and in one process, steps 11-20 continue as the 2-rank run did.
  const fs::path four = pipeline_recipe("pipe_ckpt_four", "zero_bubble", 2, 4);
  const fs::path one = recipe("pipe_ckpt_one", "adapter = \"full\"\n", 2, 1, "gradient_accumulation_steps = 4\n",
                              four_blocks);
  for (const fs::path& p : {four, one}) {
    CAPTURE(p);
    expect_resumed_as(two, p, checkpoint);
  }
}

TEST_CASE("a pipeline rank killed with SIGKILL stops the pipe with a line naming it; resume continues exactly") {
  const std::string more = "[checkpoint]\nsave_steps = 10\nsave_total_limit = 30\nresume = \"auto\"\n";
  const fs::path reference = pipeline_recipe("pipe_kill_reference", "1f1b", 2, 2, "", "max_steps = 100\n");
  const fs::path killed = pipeline_recipe("pipe_kill_killed", "1f1b", 2, 2, "", "max_steps = 100\n");
  for (const fs::path& p : {reference, killed}) std::ofstream(p, std::ios::app) << more;
  REQUIRE(train(reference).code == 0);
  kill_one_rank(killed, 2, 20);
  expect_exact_resume(reference, killed, 100);
}

TEST_CASE("a pipeline run records each rank's timeline; ftrun schedule draws it and the simulated schedule") {
  const fs::path p = pipeline_recipe("pipe_timeline", "zero_bubble", 2, 2, "timeline = true\n");
  const Run r = train(p);
  INFO(r.err);
  REQUIRE(r.code == 0);
  // One line per step on each rank; every pass of the step's schedule is there.
  for (const int rank : {0, 1}) {
    std::ifstream in(p.parent_path() / "run" / "timeline" / ("rank-" + std::to_string(rank) + ".jsonl"));
    int lines = 0;
    for (std::string line; std::getline(in, line); ++lines) {
      const auto events = ft::parallel::timeline_events(nlohmann::json::parse(line));
      int passes = 0, waits = 0;
      for (const auto& e : events) {
        CHECK(e.end >= e.start);
        passes += ft::parallel::is_pass(e.activity);
        waits += e.activity == ft::parallel::PipeActivity::wait;
      }
      CHECK(passes == 3 * 4);  // F, B and W of 4 micro-batches
      if (rank == 1) CHECK(waits > 0);  // the last rank waits for its first activations
    }
    CHECK(lines == 20);
  }
  const fs::path svg = p.parent_path() / "measured.svg";
  const std::string schedule = mpi_env + FTRUN_PATH " schedule " + p.string();
  const Run measured = [&] {
    const int status = std::system((schedule + " --measured --step 12 --svg " + svg.string() + " >" +
                                    (p.parent_path() / "out").string()).c_str());
    return Run{WEXITSTATUS(status), read_bytes(p.parent_path() / "out"), ""};
  }();
  CHECK(measured.code == 0);
  CHECK(measured.out.find("measured at step 12") != std::string::npos);
  CHECK(measured.out.find("bubble ") != std::string::npos);
  const std::string drawing = read_bytes(svg);
  CHECK(drawing.starts_with("<svg "));
  CHECK(drawing.ends_with("</svg>\n"));
  CHECK(drawing.find("micro-batch 3") != std::string::npos);
  // Without --measured: the schedule simulated on estimated costs.
  const int status = std::system((schedule + " >" + (p.parent_path() / "simulated").string()).c_str());
  CHECK(WEXITSTATUS(status) == 0);
  const std::string simulated = read_bytes(p.parent_path() / "simulated");
  CHECK(simulated.find("simulated on estimated costs") != std::string::npos);
  CHECK(simulated.find("rank 0 order: F0 F1 B0 F2 B1 W0 F3 B2 W1 W2 B3 W3") != std::string::npos);
  // A step nobody recorded is refused in one line.
  const int missing = std::system((schedule + " --measured --step 99 2>" + (p.parent_path() / "err").string()).c_str());
  CHECK(WEXITSTATUS(missing) == 2);
  CHECK(read_bytes(p.parent_path() / "err").find("step 99 was not recorded") != std::string::npos);
}

TEST_CASE("pipeline bad input: one line each, exit 2, before any rank trains") {
  SUBCASE("more pipeline ranks than blocks") {
    const fs::path p = recipe("pipe_bad_ranks", "parallelism = \"pipeline\"\n", 2, 4);  // the 2-block fixture
    const Run r = train(p);
    CHECK(r.code == 2);
    CHECK(r.err.find("pipeline: 4 ranks x 1 stages per rank need at least 4 blocks, the model has 2; use at most 2 "
                     "pipeline ranks") != std::string::npos);
  }
  SUBCASE("a micro-batch count the schedule cannot use") {
    const Run r = train(pipeline_recipe("pipe_bad_micro", "interleaved_1f1b", 2, 2, "stages_per_rank = 2\n"),
                        "--set pipeline.microbatches=3 --set train.gradient_accumulation_steps=1");
    CHECK(r.code == 2);
    CHECK(r.err.find("set pipeline.microbatches to a multiple of 2") != std::string::npos);
    const Run fill = train(pipeline_recipe("pipe_bad_fill", "1f1b", 2, 4),
                           "--set train.gradient_accumulation_steps=2");
    CHECK(fill.code == 2);
    CHECK(fill.err.find("set pipeline.microbatches to at least 4, or use gpipe") != std::string::npos);
  }
  SUBCASE("a schedule that does not exist") {
    const fs::path p = pipeline_recipe("pipe_bad_name", "2f2b", 2, 2);
    const Run r = train(p);
    CHECK(r.code == 2);
    CHECK(r.err.find("pipeline.schedule") != std::string::npos);
    CHECK(r.err.find("gpipe, 1f1b, interleaved_1f1b, zero_bubble") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  SUBCASE("--dry-run prints the partition and each rank's order") {
    const Run r = train(pipeline_recipe("pipe_dry", "1f1b", 2, 2), "--dry-run");
    CHECK(r.code == 0);
    CHECK(r.out.find("rank 0: embed, layers 0-1") != std::string::npos);
    CHECK(r.out.find("rank 1: layers 2-3, head") != std::string::npos);
    CHECK(r.out.find("rank 0 order: F0 F1 B0 F2 B1 F3 B2 B3") != std::string::npos);
  }
}

TEST_CASE("every pipeline schedule on the CPU standing in for a device trains bit for bit what the CPU pipeline trains") {
  // The stream between chunks, the tied table and its gradient go through host copies; the
  // contexts, stages and steps stay in the device's memory.
  const TestPlugins plugins;
  const double exactly = std::numeric_limits<double>::denorm_min();
  for (const auto& [schedule, lines] : {std::pair<std::string, std::string>{"1f1b", ""}, {"zero_bubble", ""},
                                        {"interleaved_1f1b", "stages_per_rank = 2\n"}}) {
    CAPTURE(schedule);
    const fs::path cpu = pipeline_recipe("pipe_on_cpu_" + schedule, schedule, 2, 2, lines);
    const Run on_cpu = train(cpu);
    INFO(on_cpu.err);
    REQUIRE(on_cpu.code == 0);
    const fs::path device = pipeline_recipe("pipe_on_device_" + schedule, schedule, 2, 2, lines);
    const Run r = train(device, "--set strategy.device=cpu-as-device");
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("device      the CPU, through the paths of a device") != std::string::npos);
    CHECK(metric_difference(cpu, device) < exactly);
    CHECK(weight_difference(final_weights(cpu), final_weights(device)) < exactly);
    CHECK(std::abs(final_eval_loss(cpu) - final_eval_loss(device)) < exactly);
  }
}

TEST_CASE("SIGTERM, SIGINT or SIGUSR1 stops one process or every rank after a step with a checkpoint; resume continues exactly") {
  struct Case {
    std::string name, strategy;
    int rows, ranks, signal, seen;
    std::string launcher;                        // a command that starts the ranks, or ftrun's own mpirun
    std::function<pid_t(const Started&)> target;  // which process gets the signal
  };
  const auto launcher_itself = [](const Started& job) { return job.pid; };
  const auto one_rank = [](const Started& job) {  // ftrun -> mpirun -> the ranks: the last rank alone
    const std::vector<pid_t> mpirun = children_of(job.pid);
    const std::vector<pid_t> ranks = mpirun.size() == 1 ? children_of(mpirun[0]) : std::vector<pid_t>{};
    return ranks.size() == 2 ? std::max(ranks[0], ranks[1]) : pid_t(-1);
  };
  const std::string mpirun = std::string(FT_MPIRUN) + " --oversubscribe -np 2 ";
  for (const Case& c : {Case{"one_process", "adapter = \"full\"\n", 4, 1, SIGTERM, SIGTERM, "", launcher_itself},
                        Case{"zero2_by_ftrun", "adapter = \"full\"\nparallelism = \"zero2\"\n", 2, 2, SIGINT, SIGUSR1, "",
                             launcher_itself},
                        Case{"zero3_by_mpirun", "adapter = \"lora\"\nparallelism = \"zero3\"\n", 2, 2, SIGUSR1, SIGUSR1, mpirun,
                             launcher_itself},
                        Case{"ddp_one_rank", "adapter = \"full\"\nparallelism = \"ddp\"\n", 2, 2, SIGTERM, SIGTERM, "", one_rank},
                        Case{"zero3_on_four", "adapter = \"full\"\nparallelism = \"zero3\"\n", 1, 4, SIGTERM, SIGUSR1, "",
                             launcher_itself}}) {
    CAPTURE(c.name);
    const int nproc = c.launcher.empty() ? c.ranks : 1;  // a launcher's ranks are a job already
    const fs::path reference = recipe("signal_reference_" + c.name, c.strategy, c.rows, nproc, "max_steps = 60\n");
    const fs::path stopped = recipe("signal_stopped_" + c.name, c.strategy, c.rows, nproc, "max_steps = 60\n");
    for (const fs::path& p : {reference, stopped}) std::ofstream(p, std::ios::app) << resumable;
    REQUIRE(train(reference, "", c.launcher).code == 0);
    stop_with(stopped, c.signal, c.seen, c.launcher, c.target);
    const bool adapter = c.strategy.find("lora") != std::string::npos;
    expect_exact_resume(reference, stopped, 60, adapter ? "adapter/adapter_model.safetensors" : "model/model.safetensors",
                        "", c.launcher);
  }
}

TEST_CASE("a pipeline on 2 ranks stops on SIGTERM to its launcher and resumes exactly") {
  const fs::path reference = pipeline_recipe("signal_pipe_reference", "1f1b", 2, 2, "", "max_steps = 60\n");
  const fs::path stopped = pipeline_recipe("signal_pipe_stopped", "1f1b", 2, 2, "", "max_steps = 60\n");
  for (const fs::path& p : {reference, stopped}) std::ofstream(p, std::ios::app) << resumable;
  REQUIRE(train(reference).code == 0);
  stop_with(stopped, SIGTERM, SIGUSR1, "", [](const Started& job) { return job.pid; });
  expect_exact_resume(reference, stopped, 60);
}

TEST_CASE("SIGUSR2 to ftrun's launcher makes every rank write a checkpoint and go on") {
  const fs::path p = recipe("signal_save", "adapter = \"full\"\nparallelism = \"zero2\"\n", 2, 2, "max_steps = 100000\n");
  std::ofstream(p, std::ios::app) << resumable;
  const Started job = start(p);
  wait_for_step(job, 2);
  REQUIRE(::kill(job.pid, SIGUSR2) == 0);
  const long saved = first_checkpoint(job);
  REQUIRE(saved >= 2);
  CHECK(fs::exists(job.dir / "run" / ("checkpoint-" + std::to_string(saved)) / "optimizer-1-of-2.safetensors"));
  wait_for_step(job, saved + 2);  // it went on
  REQUIRE(::kill(job.pid, SIGTERM) == 0);
  CHECK(exit_code(job, 120) == 5);
  CHECK(read_bytes(job.dir / "stderr").find("ftrun: SIGUSR2: every rank writes a checkpoint") != std::string::npos);
}

TEST_CASE("a second SIGINT ends a run at once, leaving the last checkpoint as it was") {
  // The 4-block model's steps are long enough (~0.3 s) that the second signal comes while the first step runs.
  const fs::path p = recipe("signal_twice", "adapter = \"full\"\n", 8, 1, "max_steps = 100000\n", four_blocks);
  std::ofstream(p, std::ios::app) << "[checkpoint]\nsave_steps = 5\n";
  const Started job = start(p);
  wait_for_step(job, 7);
  REQUIRE(::kill(job.pid, SIGINT) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // two pending SIGINTs would be delivered as one
  REQUIRE(::kill(job.pid, SIGINT) == 0);
  CHECK(exit_code(job, 60) == 130);
  CHECK(stop_record(p) == -1);
  CHECK(fs::exists(job.dir / "run" / "checkpoint-5" / "trainer_state.json"));
}

// ftrun control (runner/control_command.cpp) over a registry of the test's
// own (XDG_RUNTIME_DIR): a 2-rank job started by ftrun's launcher answers
// list and status, saves a checkpoint when asked and goes on, and stops
// with one when asked; a job killed with SIGKILL shows as dead until
// cleanup forgets it; an unknown job and another user's process are refused
// in one line.
TEST_CASE("ftrun control drives a 2-rank job through status, save and stop; cleanup forgets a dead job") {
  const fs::path xdg = scratch / "control_registry";
  fs::create_directories(xdg);
  const std::string env = "XDG_RUNTIME_DIR=" + xdg.string() + " ";
  auto control = [&](const std::string& args) {
    const std::string cmd = env + FTRUN_PATH " control " + args + " >\"" + (xdg / "out").string() + "\" 2>\"" +
                            (xdg / "err").string() + "\"";
    const int status = std::system(cmd.c_str());
    return Run{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_bytes(xdg / "out"), read_bytes(xdg / "err")};
  };
  auto one_line = [](const Run& r, const std::string& says) {
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(r.err.find(says) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  };
  CHECK(control("list").out.starts_with("no jobs"));

  const fs::path p = recipe("control_job", "adapter = \"full\"\nparallelism = \"zero2\"\n", 2, 2, "max_steps = 100000\n");
  std::ofstream(p, std::ios::app) << resumable;
  const Started job = start(p, env);
  wait_for_step(job, 2);
  Run r = control("list");
  INFO(r.out);
  REQUIRE(r.code == 0);
  std::istringstream rows(r.out);
  std::string header, id, kind, state;
  std::getline(rows, header);
  rows >> id >> kind >> state;
  CHECK(header.starts_with("ID"));
  CHECK(kind == "train");
  CHECK(state == "training");
  CHECK(r.out.find((job.dir / "run").string()) != std::string::npos);

  r = control("status " + id + " --json");
  REQUIRE(r.code == 0);
  const auto status = nlohmann::json::parse(r.out);
  CHECK(status["ranks"] == 2);
  CHECK(status["state"] == "training");
  CHECK(status["total_steps"] == 100000);
  CHECK(status["step"].get<long>() >= 2);
  CHECK(status["output_dir"] == (job.dir / "run").string());
  r = control("status " + (job.dir / "run").string());  // by output_dir
  CHECK(r.code == 0);
  CHECK(r.out.find("state       training") != std::string::npos);

  r = control("save " + id);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("saves a checkpoint after the step in flight and goes on") != std::string::npos);
  const long saved = first_checkpoint(job);
  REQUIRE(saved > 0);
  wait_for_step(job, saved + 2);  // it went on

  r = control("stop " + id);
  REQUIRE(r.code == 0);
  CHECK(exit_code(job, 120) == 5);
  CHECK(stop_record(p) > saved + 1);
  CHECK(control("list").out.starts_with("no jobs"));  // a job that ended removed its record

  // A job killed with SIGKILL cannot remove its record.
  const fs::path q = recipe("control_killed", "adapter = \"full\"\n", 4, 1, "max_steps = 100000\n");
  const Started killed = start(q, env);
  wait_for_step(killed, 2);
  REQUIRE(::kill(killed.pid, SIGKILL) == 0);
  REQUIRE(exit_code(killed, 30) == 128 + SIGKILL);
  r = control("list");
  CHECK(r.out.find("run-" + std::to_string(killed.pid)) != std::string::npos);
  CHECK(r.out.find(" dead ") != std::string::npos);
  one_line(control("stop " + std::to_string(killed.pid)), "is gone (killed?); `ftrun control cleanup` forgets it");
  r = control("cleanup");
  CHECK(r.out == "removed run-" + std::to_string(killed.pid) + " (process " + std::to_string(killed.pid) + " is gone)\n");
  CHECK(control("list").out.starts_with("no jobs"));

  one_line(control("status no-such-job"), "no job \"no-such-job\" is registered in ");
  if (::geteuid() == 0 && std::system("command -v setpriv >/dev/null") == 0) {
    const pid_t other = ::fork();
    if (other == 0) {
      ::execlp("setpriv", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "30",
               static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    one_line(control("stop " + std::to_string(other)), "; ftrun control reaches only your own jobs");
    ::kill(other, SIGKILL);
    ::waitpid(other, nullptr, 0);
  }
}

}  // namespace test_distributed
