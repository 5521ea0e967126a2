// ftrun estimate against what a run really allocates: for every stock
// combination on the tiny Llama, the estimated peak of each phase (setup,
// step, evaluation, saving) and the peak ft's allocator measured
// (metrics.jsonl) agree within 5%. Then the two ways a
// run meets its memory: refused up front, or stopped by an allocation that
// fails, each with the out-of-memory exit code.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/command.hpp"
#include "support/files.hpp"

namespace test_estimate {

namespace fs = std::filesystem;

namespace {

// Removed, with everything the runs wrote, when this process exits.
const ft::testing::TempDir scratch_dir("ft_estimate");
const fs::path& scratch = scratch_dir.path;

using Result = ft::testing::CommandResult;

// `env`: variables for ftrun ("FT_PLUGIN_PATH=... ").
Result ftrun(const std::string& args, const std::string& name, const std::string& env = "") {
  return ft::testing::run_command(env + FTRUN_PATH " " + args, scratch, name);
}

// The tiny Llama on rows of 128 artificial tokens: 2 steps of 2 micro-batches of 2 rows.
std::string recipe(const std::string& name) {
  fs::create_directories(scratch);
  const fs::path path = scratch / (name + ".toml");
  std::ofstream(path) << "output_dir = \"" << (scratch / name).string() << "\"\n"
                      << "[model]\npath = \"" FT_SOURCE_DIR "/models/ft-tiny-llama\"\n"
                      << "[data]\ntrain = \"artificial:tokens-128-entries-32\"\nformat = \"tokens\"\n"
                      << "validation_split = 0.25\n"
                      << "max_seq_length = 128\ncache_dir = \"" << (scratch / "cache").string() << "\"\n"
                      << "[train]\nper_device_train_batch_size = 2\ngradient_accumulation_steps = 2\n"
                      << "max_steps = 2\nlogging_steps = 1\n[checkpoint]\nsave_steps = 0\n";
  return path.string();
}

std::string sets(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += " --set '" + k + "'";
  return out;
}

const std::string neox = "model.path=" FT_SOURCE_DIR "/models/ft-tiny-neox";

// ft-tiny-llama with `changes` to its config.json, its weights made by ftrun
// init in the scratch directory `name`; the recipe key that selects it.
std::string tiny_llama_with(const std::string& name, const nlohmann::json& changes) {
  const fs::path dir = scratch / name;
  fs::create_directories(dir);
  auto config = nlohmann::json::parse(std::ifstream(FT_SOURCE_DIR "/models/ft-tiny-llama/config.json"));
  config.merge_patch(changes);
  std::ofstream(dir / "config.json") << config.dump(2);
  const Result init = ftrun("init " + dir.string(), name + "_init");
  REQUIRE_MESSAGE(init.code == 0, init.err);
  return "model.path=" + dir.string();
}

// The tiny Llama widened until its embedding table (65536 x 256, 64 MiB in
// f32) is most of the model; made once.
const std::string& wide_llama() {
  static const std::string key =
      tiny_llama_with("wide-llama", {{"hidden_size", 256}, {"intermediate_size", 688}, {"vocab_size", 65536}});
  return key;
}

// A phase's estimated peak and the largest its records in metrics.jsonl measured.
struct Figures {
  double estimated = 0, measured = 0;
};
struct Phases {
  Figures setup, step, eval, save;
  Figures resident;  // the process's max RSS (the largest rank's)
};

// The estimate of each phase (a step, an evaluation, saving checkpoints and the result) and the run's measurements.
Phases estimate_and_measure(const std::vector<std::string>& keys, const std::string& env = "") {
  static int count = 0;
  const std::string name = "run" + std::to_string(++count);
  const std::string file = recipe(name);
  const Result estimate = ftrun("estimate " + file + sets(keys) + " --json", name + "_estimate", env);
  REQUIRE_MESSAGE(estimate.code == 0, estimate.err);
  const auto e = nlohmann::json::parse(estimate.out);
  Phases p;
  p.setup.estimated = e.at("setup_peak_bytes").get<double>();
  p.step.estimated = e.at("step_peak_bytes").get<double>();
  p.eval.estimated = e.at("eval_peak_bytes").get<double>();
  p.save.estimated = e.at("save_peak_bytes").get<double>();
  p.resident.estimated = e.at("host_peak_bytes").get<double>();
  const Result train = ftrun("train " + file + sets(keys), name + "_train", env);
  REQUIRE_MESSAGE(train.code == 0, train.err);
  std::ifstream metrics(scratch / name / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    const std::string split = j.value("split", "");
    Figures* f = split == "setup"  ? &p.setup
                 : split == "train" ? &p.step
                 : split == "eval"  ? &p.eval
                 : split == "save"  ? &p.save
                                    : nullptr;
    if (f) f->measured = std::max(f->measured, j.at("peak_memory_bytes").get<double>());
    if (j.contains("max_rss_bytes")) p.resident.measured = std::max(p.resident.measured, j["max_rss_bytes"].get<double>());
  }
  fs::remove_all(scratch / name);
  return p;
}

// Each phase's estimate within 5% of what the run with these keys measured (p).
void check_within_5_percent(const std::vector<std::string>& keys, const Phases& p, bool with_setup = true) {
  std::string what;
  for (const auto& k : keys) what += k + " ";
  for (const auto& [phase, f] : {std::pair{"setup", p.setup}, std::pair{"step", p.step}, std::pair{"evaluation", p.eval},
                                 std::pair{"saving", p.save}}) {
    if (!with_setup && std::string(phase) == "setup") continue;
    INFO(what << std::string(phase) << ": estimated " << f.estimated << ", measured " << f.measured);
    CHECK(f.measured > 0);
    CHECK(std::abs(f.measured / f.estimated - 1) <= 0.05);
  }
}

void check_within_5_percent(const std::vector<std::string>& keys) {
  check_within_5_percent(keys, estimate_and_measure(keys));
}

void check_precision(const std::string& precision) {
  for (const char* optimizer : {"sgd", "adamw", "adafactor", "adamw8bit", "lion"})
    for (const char* adapter : {"full", "lora", "prompt"})
      check_within_5_percent({"strategy.precision=" + precision, std::string("strategy.optimizer=") + optimizer,
                              std::string("strategy.adapter=") + adapter, "prompt_tuning.num_virtual_tokens=8"});
}

}  // namespace

TEST_CASE("ftrun estimate prints each term, the peak and the other parallelisms") {
  const std::string file = recipe("print");
  const Result text = ftrun("estimate " + file, "print");
  REQUIRE_MESSAGE(text.code == 0, text.err);
  for (const char* part : {"weights", "optimizer state", "block activations", "workspace", "peak", "zero3"})
    CHECK_MESSAGE(text.out.find(part) != std::string::npos, part);
  const Result json = ftrun("estimate " + file + " --json --set launch.nproc=2 --set strategy.parallelism=zero2",
                            "print_json");
  REQUIRE_MESSAGE(json.code == 0, json.err);
  const auto j = nlohmann::json::parse(json.out);
  CHECK(j.at("ranks") == 2);
  CHECK(j.at("peak_bytes").get<double>() >= j.at("step_peak_bytes").get<double>());
  CHECK(j.at("options").size() == 10);
  // Each rank's figures; the one reported is the largest.
  REQUIRE(j.at("by_rank").size() == 2);
  double largest = 0;
  for (const auto& rank : j.at("by_rank")) largest = std::max(largest, rank.at("peak_bytes").get<double>());
  CHECK(largest == j.at("peak_bytes").get<double>());
  const Result ranks = ftrun("estimate " + file + " --set launch.nproc=2 --set strategy.parallelism=zero3", "print_ranks");
  CHECK(ranks.out.find("every rank (the one reported above has the largest peak)") != std::string::npos);
  const Result bad = ftrun("estimate " + file + " --set strategy.optimizer=adam", "print_bad");
  CHECK(bad.code == 2);
  CHECK(bad.err.find("adam") != std::string::npos);
}

TEST_CASE("estimate within 5% of the measured peak: fp32, every optimizer and adapter") { check_precision("fp32"); }
TEST_CASE("estimate within 5% of the measured peak: bf16-true, every optimizer and adapter") {
  check_precision("bf16-true");
}
TEST_CASE("estimate within 5% of the measured peak: bf16-mixed, every optimizer and adapter") {
  check_precision("bf16-mixed");
}
TEST_CASE("estimate within 5% of the measured peak: fp16-mixed, every optimizer and adapter") {
  check_precision("fp16-mixed");
}

TEST_CASE("estimate within 5% of the measured peak: LoRA over a 4-bit base (QLoRA)") {
  // The blocks' values exist only while each runs; the packed weights are on the heap, beside the allocator.
  for (const char* precision : {"fp32", "bf16-true"})
    for (const char* quantize : {"model.quantize=nf4", "model.quantize=fp4"})
      check_within_5_percent({std::string("strategy.precision=") + precision, "strategy.adapter=lora", quantize,
                              "model.bnb_4bit_use_double_quant=true", "lora.target_modules=[\"all-linear\"]"});
  check_within_5_percent({"strategy.adapter=lora", "model.quantize=nf4", "train.gradient_checkpointing=every_block"});
}

TEST_CASE("estimate within 5% of the measured peak: checkpointing, offloading, a fused optimizer, dropout") {
  for (const char* precision : {"fp32", "bf16-mixed"}) {
    const std::string p = std::string("strategy.precision=") + precision;
    check_within_5_percent({p, "strategy.adapter=full", "train.gradient_checkpointing=every_block"});
    check_within_5_percent({p, "strategy.adapter=full", "train.gradient_checkpointing=every_2"});
    check_within_5_percent({p, "strategy.adapter=full", "train.activation_offloading=true"});
    check_within_5_percent({p, "strategy.adapter=lora", "lora.dropout=0.1", "lora.target_modules=[\"all-linear\"]"});
    check_within_5_percent({p, "strategy.adapter=full", "strategy.optimizer=sgd", "train.fuse_optimizer_with_backward=true",
                            "train.gradient_accumulation_steps=1", "train.max_grad_norm=0"});
    // GPT-NeoX: untied head, layer norms, biases, a parallel residual.
    for (const char* adapter : {"full", "lora"})
      check_within_5_percent({p, neox, std::string("strategy.adapter=") + adapter});
    // Bloom: the embedding norm's saved input and statistics, ALiBi.
    static const std::string bloom = tiny_llama_with("tiny-bloom", {{"architectures", {"BloomForCausalLM"}}});
    for (const char* adapter : {"full", "prompt"})
      check_within_5_percent({p, bloom, std::string("strategy.adapter=") + adapter, "prompt_tuning.num_virtual_tokens=8"});
    // Gemma 2: each branch's saved output and its norm's statistics.
    static const std::string gemma2 = tiny_llama_with(
        "tiny-gemma2", {{"architectures", {"Gemma2ForCausalLM"}}, {"head_dim", 32}, {"sliding_window", 16}});
    for (const char* adapter : {"full", "lora"})
      check_within_5_percent({p, gemma2, std::string("strategy.adapter=") + adapter});
    // Gemma 3: q/k norms, and a rotary table for each layer.
    static const std::string gemma3 = tiny_llama_with(
        "tiny-gemma3", {{"architectures", {"Gemma3ForCausalLM"}}, {"head_dim", 32}, {"sliding_window", 16}});
    check_within_5_percent({p, gemma3, "strategy.adapter=full"});
    // Mixtral: the router, the experts' sorted rows and their gradients; Qwen2-MoE adds a shared expert.
    static const std::string mixtral = tiny_llama_with(
        "tiny-mixtral", {{"architectures", {"MixtralForCausalLM"}}, {"num_local_experts", 4}, {"num_experts_per_tok", 2},
                         {"output_router_logits", true}});
    for (const char* adapter : {"full", "lora"})
      check_within_5_percent({p, mixtral, std::string("strategy.adapter=") + adapter});
    static const std::string qwen2_moe = tiny_llama_with(
        "tiny-qwen2-moe", {{"architectures", {"Qwen2MoeForCausalLM"}}, {"num_experts", 4}, {"num_experts_per_tok", 2},
                           {"moe_intermediate_size", 64}, {"shared_expert_intermediate_size", 96}});
    check_within_5_percent({p, qwen2_moe, "strategy.adapter=full"});
  }
}

// Every data-parallel stage on real ranks (mpirun): the estimate is the
// largest rank's, as the metrics' peak is.
void check_ranks(int ranks) {
  for (const char* parallelism : {"ddp", "zero1", "zero2", "zero3"})
    for (const char* precision : {"fp32", "bf16-mixed"})
      for (const char* adapter : {"full", "lora"})
        check_within_5_percent({"launch.nproc=" + std::to_string(ranks), std::string("strategy.parallelism=") + parallelism,
                                std::string("strategy.precision=") + precision, std::string("strategy.adapter=") + adapter,
                                "train.per_device_train_batch_size=1"});
  check_within_5_percent({"launch.nproc=" + std::to_string(ranks), "strategy.parallelism=zero3", neox,
                          "strategy.adapter=full", "train.per_device_train_batch_size=1"});
  // ZeRO-3 over a 4-bit base: each rank's range of every block packed, gathered whole while it runs.
  check_within_5_percent({"launch.nproc=" + std::to_string(ranks), "strategy.parallelism=zero3", "strategy.adapter=lora",
                          "model.quantize=nf4", "model.bnb_4bit_use_double_quant=true",
                          "lora.target_modules=[\"all-linear\"]", "train.per_device_train_batch_size=1"});
  // Per-tensor optimizer state cuts shards at tensor boundaries.
  for (const char* optimizer : {"adafactor", "adamw8bit"})
    check_within_5_percent({"launch.nproc=" + std::to_string(ranks), "strategy.parallelism=zero2",
                            std::string("strategy.optimizer=") + optimizer, "strategy.adapter=full",
                            "train.per_device_train_batch_size=1"});
}

TEST_CASE("estimate within 5% of the measured peak on 2 ranks: ddp, zero1, zero2, zero3") { check_ranks(2); }

// Expert parallelism: each rank's run of experts, their state, the local
// rows planned for every rank's tokens and the exchange buffers.
TEST_CASE("estimate within 5% of the measured peak: experts split over 2 and 4 ranks, alone and with zero2/zero3") {
  const std::string mixtral = tiny_llama_with(
      "tiny-mixtral-spread", {{"architectures", {"MixtralForCausalLM"}}, {"num_local_experts", 4}, {"num_experts_per_tok", 2}});
  struct Spread {
    const char* ranks;
    const char* parallelism;
    const char* experts_split;
  };
  for (const Spread& s : {Spread{"2", "ddp", "2"}, Spread{"4", "ddp", "4"}, Spread{"4", "zero2", "2"},
                          Spread{"4", "zero3", "2"}})
    for (const char* adapter : {"full", "lora"})
      check_within_5_percent({std::string("launch.nproc=") + s.ranks, std::string("strategy.parallelism=") + s.parallelism,
                              std::string("strategy.expert_parallel=") + s.experts_split, mixtral,
                              std::string("strategy.adapter=") + adapter, "train.per_device_train_batch_size=1"});
  // Merging LoRA gathers every sparse stage's experts at once.
  for (const char* parallelism : {"strategy.parallelism=ddp", "strategy.parallelism=zero3"})
    check_within_5_percent({"launch.nproc=2", parallelism, "strategy.expert_parallel=2", mixtral, "strategy.adapter=lora",
                            "lora.save_merged=true", "train.per_device_train_batch_size=1"});
}
TEST_CASE("estimate within 5% of the measured peak on 4 ranks: ddp, zero1, zero2, zero3") { check_ranks(4); }

// Pipelines: each rank keeps its chunks' stages and a context per
// micro-batch its schedule has in flight; the estimate is the largest rank's.
TEST_CASE("estimate within 5% of the measured peak: pipelines on 2 and 4 ranks, every schedule") {
  for (const char* ranks : {"2", "4"})
    for (const char* schedule : {"gpipe", "1f1b", "zero_bubble"})
      for (const char* adapter : {"full", "lora"})
        check_within_5_percent({std::string("launch.nproc=") + ranks, "strategy.parallelism=pipeline",
                                std::string("pipeline.schedule=") + schedule, std::string("strategy.adapter=") + adapter,
                                "train.per_device_train_batch_size=1", "train.gradient_accumulation_steps=4"});
  const std::vector<std::string> pipe{"launch.nproc=2", "strategy.parallelism=pipeline",
                                      "train.per_device_train_batch_size=1", "train.gradient_accumulation_steps=4"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), pipe.begin(), pipe.end());
    return more;
  };
  check_within_5_percent(with({"pipeline.schedule=interleaved_1f1b", "pipeline.stages_per_rank=2"}));
  check_within_5_percent(with({"strategy.precision=bf16-mixed", "train.gradient_checkpointing=every_block"}));
  check_within_5_percent(with({"strategy.precision=bf16-mixed", "train.activation_offloading=true"}));
  check_within_5_percent(with({"strategy.adapter=prompt", "prompt_tuning.num_virtual_tokens=8"}));
  check_within_5_percent(with({"strategy.adapter=lora", "lora.save_merged=true"}));
  check_within_5_percent(with({neox, "strategy.adapter=full"}));
  // An evaluation batch of more rows than a training one grows the context
  // it borrows, which keeps the last evaluation batch's size until the next
  // step: the estimate bounds the steps and saves after it by a full one.
  const Phases grown = estimate_and_measure(
      with({"train.per_device_eval_batch_size=3", "train.eval_steps=1", "train.max_steps=3", "strategy.adapter=full"}));
  CHECK(std::abs(grown.eval.measured / grown.eval.estimated - 1) <= 0.05);
  for (const Figures& f : {grown.step, grown.save}) {
    CHECK(f.measured <= f.estimated);
    CHECK(f.measured >= 0.85 * f.estimated);
  }
  // Two replicas of a 2-rank pipe, their optimizer state sharded (ZeRO-1).
  check_within_5_percent({"launch.nproc=4", "strategy.parallelism=pipeline", "pipeline.ranks=2",
                          "pipeline.data_parallel=zero1", "train.per_device_train_batch_size=1",
                          "train.gradient_accumulation_steps=2"});
}

// Setup: each rank allocates and loads only what it keeps (a pipeline rank
// its stages, ZeRO-3 one whole stage at a time beside its shards). On a
// model whose embedding table alone outgrows the setup's GEMM-peak
// measurement, loading is setup's peak, and no longer outgrows a step (it
// did when every rank loaded the whole model and its gradients first). Under
// a LoRA pipeline the first rank peaks in setup and the last in a step: each
// phase's estimate is its largest rank's, as metrics.jsonl records it.
TEST_CASE("estimate within 5% of the measured peak: loading a model larger than the setup's measurement") {
  const std::string& model = wide_llama();
  for (const char* parallelism : {"zero3", "pipeline"})
    for (const char* adapter : {"full", "lora"}) {
      const std::vector<std::string> keys{model, "launch.nproc=2", std::string("strategy.parallelism=") + parallelism,
                                          std::string("strategy.adapter=") + adapter,
                                          "train.per_device_train_batch_size=1"};
      const std::string file = recipe("wide");
      const Result estimate = ftrun("estimate " + file + sets(keys) + " --json", "wide_estimate");
      REQUIRE_MESSAGE(estimate.code == 0, estimate.err);
      const auto e = nlohmann::json::parse(estimate.out);
      const Phases p = estimate_and_measure(keys);
      INFO(std::string(parallelism) << " " << adapter << ": setup " << p.setup.measured << ", step " << p.step.measured);
      CHECK(e.at("setup_workspace").at("detail").get<std::string>().find("matrices") == std::string::npos);
      CHECK(p.setup.measured < p.step.measured);
      check_within_5_percent(keys, p);
    }
}

// The process's resident memory at its peak (max RSS) is what ft's
// allocator holds and what it does not see: the process before the run
// allocates (code, libraries, plugins, BLAS's buffers; the estimate measures
// itself), the model file's pages of the tensor being loaded, and the
// scratch MPI's collectives make beside the reductions. ft's freed buffers
// stay in its own cache of pages, never above its peak, rather than in
// glibc's heaps (tensor/memory.hpp), so the allocator's peak is what is
// resident of them. On the wide Llama (a 64 MiB embedding in an f32 file,
// all-reduced or reduce-scattered on 2 ranks through 64 MiB of scratch)
// each of the last two terms is a tenth or more of the whole, so an
// estimate without one is more than 10% under. The cache keeps room for
// MPI's scratch while a reduction runs, so where the scratch lands no
// longer depends on MPI's timing. Measured here: LoRA 1.013, full 1.001,
// DDP 1.037, ZeRO-2 1.031, ZeRO-3 1.015 of the estimate. The ranks' excess
// is mostly MPI's own start, which the estimate does not model, and it
// grows when the machine is busy and a receiver lags (ZeRO-2 reached 1.050
// in a clean-clone run of the whole suite), so ranks are held to 8%: still
// under the tenth that either term left out would show.
TEST_CASE("the resident peak (max RSS) against the estimate: loading, and MPI's scratch on 2 ranks") {
  const std::string& model = wide_llama();
  const std::vector<std::vector<std::string>> runs{
      {model, "strategy.adapter=lora"},
      {model, "strategy.adapter=full"},
      {model, "strategy.adapter=full", "launch.nproc=2", "strategy.parallelism=ddp"},
      {model, "strategy.adapter=full", "launch.nproc=2", "strategy.parallelism=zero2"},
      {model, "strategy.adapter=full", "launch.nproc=2", "strategy.parallelism=zero3"}};
  for (const auto& keys : runs) {
    const Phases p = estimate_and_measure(keys);
    std::string what;
    for (const auto& k : keys) what += k + " ";
    INFO(what << "resident: estimated " << p.resident.estimated << ", measured " << p.resident.measured);
    const bool ranks = std::find(keys.begin(), keys.end(), "launch.nproc=2") != keys.end();
    CHECK(p.resident.measured >= 0.95 * p.resident.estimated);
    CHECK(p.resident.measured <= (ranks ? 1.08 : 1.05) * p.resident.estimated);
  }
}

TEST_CASE("merging LoRA into ZeRO-3 shards gathers the whole model: saving outgrows a step, and is estimated") {
  const std::vector<std::string> keys{"launch.nproc=2", "strategy.parallelism=zero3", "strategy.adapter=lora",
                                      "lora.save_merged=true", "train.per_device_train_batch_size=1"};
  const Phases p = estimate_and_measure(keys);
  CHECK(p.save.estimated > p.step.estimated);
  CHECK(p.save.measured > p.step.measured);
  check_within_5_percent(keys, p);
}

// A device's memory comes from a caching allocator: each allocation takes a
// block of its size class (512 bytes below 1 MiB, 2 MiB above), which is
// what the device measures, and the estimate counts each allocation as its
// block. On the CPU standing in for a device (tests/support/cpu_as_device.hpp),
// whose memory is cached as a GPU's is, every phase but setup agrees within
// 5%; setup measures the GEMM peak at the CPU's size, which the estimate
// takes as a GPU's. The model's blocks are 1.6 MB in f32, so each of their
// f32 buffers (weights, gradients, master weights, moments) takes a 2 MiB
// block: counted as asked, the full fine-tunes' estimates would be 10-20% low.
TEST_CASE("on a device, the estimate counts every allocation as the caching allocator's block") {
  const std::string model = tiny_llama_with("blocky-llama", {{"hidden_size", 192}, {"intermediate_size", 512}});
  const std::string env = "FT_PLUGIN_PATH=" FT_TEST_PLUGIN_DIR " ";
  const std::string device = "strategy.device=cpu-as-device";
  for (const std::vector<std::string>& keys :
       {std::vector<std::string>{model, device, "strategy.adapter=full"},
        {model, device, "strategy.adapter=lora", "strategy.precision=bf16-mixed"},
        {model, device, "strategy.adapter=prompt", "prompt_tuning.num_virtual_tokens=8"},
        {model, device, "strategy.adapter=full", "strategy.optimizer=adafactor"},
        {model, device, "strategy.adapter=full", "strategy.optimizer=adamw8bit", "strategy.precision=fp16-mixed"},
        {model, device, "strategy.adapter=full", "strategy.optimizer_offload=true", "strategy.precision=bf16-mixed"},
        {model, device, "strategy.adapter=full", "launch.nproc=2", "strategy.parallelism=zero2",
         "strategy.precision=bf16-mixed"},
        {model, device, "strategy.adapter=full", "launch.nproc=2", "strategy.parallelism=zero3"},
        {model, device, "strategy.adapter=full", "launch.nproc=2", "strategy.parallelism=pipeline"}})
    check_within_5_percent(keys, estimate_and_measure(keys, env), false);
}

TEST_CASE("a run whose estimate exceeds launch.memory_limit is refused before it loads anything") {
  const std::string file = recipe("refused");
  const std::string big = " --set train.per_device_train_batch_size=16";  // a step's peak above setup's
  const Result r = ftrun("train " + file + " --set launch.memory_limit=2MB", "refused");
  CHECK(r.code == 4);
  CHECK(r.err.find("more than the 1.9 MiB of launch.memory_limit") != std::string::npos);
  CHECK(r.err.find("largest part: ") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(scratch / "refused" / "metrics.jsonl"));
  // With room for LoRA but not for a full fine-tune, the refusal names the change that fits.
  const Result lora = ftrun("estimate " + file + big + " --json --set strategy.adapter=lora", "refused_lora");
  const Result full = ftrun("estimate " + file + big + " --json --set strategy.adapter=full", "refused_full");
  const double lora_peak = nlohmann::json::parse(lora.out).at("peak_bytes").get<double>();
  const double full_peak = nlohmann::json::parse(full.out).at("peak_bytes").get<double>();
  REQUIRE(lora_peak < full_peak);
  const std::string limit = std::to_string(std::int64_t((lora_peak + full_peak) / 2));
  const Result fits =
      ftrun("train " + file + big + " --set strategy.adapter=full --set launch.memory_limit=" + limit, "refused_fits");
  CHECK(fits.code == 4);
  CHECK(fits.err.find("Changes that fit: ") != std::string::npos);
  CHECK(fits.err.find("strategy.adapter = \"lora\"") != std::string::npos);
  // LoRA on a model whose layers are most of it: with room for a 4-bit base only, that is what is named.
  static const std::string deep = tiny_llama_with("deep-llama", {{"num_hidden_layers", 8}, {"intermediate_size", 2048}});
  const std::string lora_deep = " --set strategy.adapter=lora --set " + deep;
  const Result whole = ftrun("estimate " + file + lora_deep + " --json", "refused_whole");
  const Result four_bit = ftrun("estimate " + file + lora_deep + " --json --set model.quantize=nf4", "refused_four_bit");
  const double whole_peak = nlohmann::json::parse(whole.out).at("peak_bytes").get<double>();
  const double four_bit_peak = nlohmann::json::parse(four_bit.out).at("peak_bytes").get<double>();
  REQUIRE(four_bit_peak < 0.8 * whole_peak);  // the layers' weights (a quarter of the peak here) go to the heap
  const std::string room = std::to_string(std::int64_t((whole_peak + four_bit_peak) / 2));
  const Result qlora = ftrun("train " + file + lora_deep + " --set launch.memory_limit=" + room, "refused_qlora");
  CHECK(qlora.code == 4);
  CHECK(qlora.err.find("model.quantize = \"nf4\" (a 4-bit base, as QLoRA)") != std::string::npos);
}

TEST_CASE("an allocation that fails mid-run ends it with the out-of-memory code, the phase and the bytes") {
  const std::string file = recipe("oom");
  const std::string big = " --set train.per_device_train_batch_size=16";  // a step's peak above setup's
  const Result estimate = ftrun("estimate " + file + big + " --json", "oom_estimate");
  const auto j = nlohmann::json::parse(estimate.out);
  // Room for the setup, the model and its state, not for all of a step's activations.
  REQUIRE(j.at("peak_phase") == "step");
  const std::int64_t limit =
      j.at("peak_bytes").get<std::int64_t>() - j.at("activations")[0].at("bytes").get<std::int64_t>() / 4;
  REQUIRE(limit > j.at("setup_peak_bytes").get<std::int64_t>());
  const Result r = ftrun("train " + file + big + " --set launch.memory_check=false --set launch.memory_limit=" +
                             std::to_string(limit),
                         "oom");
  CHECK(r.code == 4);
  CHECK(r.err.find("out of memory in step 1: cannot allocate ") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  std::ifstream metrics(scratch / "oom" / "metrics.jsonl");
  std::string last;
  for (std::string line; std::getline(metrics, line);) last = line;
  const auto record = nlohmann::json::parse(last);
  CHECK(record.at("error") == "out_of_memory");
  CHECK(record.at("phase") == "step 1");
  CHECK(record.at("requested_bytes").get<double>() > 0);
}

TEST_CASE("a job started by the user's own mpirun is refused on every rank, and says why once") {
  const std::string file = recipe("mpirun");
  const Result r = ft::testing::run_command(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " FT_MPIRUN " -np 2 --oversubscribe " FTRUN_PATH
      " train " + file + " --set strategy.parallelism=ddp --set launch.memory_limit=2MB",
      scratch, "mpirun");
  CHECK(r.code == 4);
  const std::string refusal = "more than the 1.9 MiB of launch.memory_limit";
  const auto first = r.err.find(refusal);
  CHECK(first != std::string::npos);
  CHECK(r.err.find(refusal, first + 1) == std::string::npos);
  CHECK_FALSE(fs::exists(scratch / "mpirun" / "metrics.jsonl"));
}

}  // namespace test_estimate
