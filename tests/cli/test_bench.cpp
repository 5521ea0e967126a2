// ftrun bench on real runs of the tiny Llama: a grid of 2 batch sizes x 2
// precisions x full/LoRA x 1-2 ranks (a batch of 1 cannot be split over 2
// ranks: those points are invalid), killed part-way and resumed; failures
// retried; the stability experiment's counts; a grid with a typo refused before anything runs.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/command.hpp"
#include "support/files.hpp"

namespace test_bench {

namespace fs = std::filesystem;

namespace {

// Removed, with everything the runs wrote, when this process exits.
const ft::testing::TempDir scratch_dir("ft_bench");
const fs::path& scratch = scratch_dir.path;

// The base recipe: the tiny Llama, 3 steps of 64-token rows.
fs::path base_recipe() {
  fs::create_directories(scratch);
  const fs::path path = scratch / "base.toml";
  std::ofstream(path) << "output_dir = \"" << (scratch / "unused").string() << "\"\n"
                      << "[model]\npath = \"" FT_SOURCE_DIR "/models/ft-tiny-llama\"\n"
                      << "[data]\ntrain = \"artificial:tokens-64-entries-64\"\nformat = \"tokens\"\n"
                      << "max_seq_length = 64\ncache_dir = \"" << (scratch / "cache").string() << "\"\n"
                      << "[train]\nmax_steps = 3\n";
  return path;
}

fs::path grid(const std::string& name, const std::string& text) {
  base_recipe();
  const fs::path path = scratch / (name + ".toml");
  std::ofstream(path) << "recipe = \"base.toml\"\n" << text;
  return path;
}

ft::testing::CommandResult bench(const fs::path& grid_file, const std::string& name, const std::string& args = "") {
  return ft::testing::run_command(FTRUN_PATH " bench " + grid_file.string() + " --output " +
                                      (scratch / name).string() + args,
                                  scratch, name);
}

std::vector<nlohmann::json> records(const std::string& name) {
  std::vector<nlohmann::json> out;
  std::ifstream in(scratch / name / "results.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The CSV as rows of named fields.
std::vector<std::map<std::string, std::string>> csv(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> header;
  std::vector<std::map<std::string, std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    std::stringstream ss(line);
    for (std::string f; std::getline(ss, f, ',');) fields.push_back(f);
    if (line.back() == ',') fields.push_back("");
    if (header.empty()) {
      header = fields;
      continue;
    }
    REQUIRE(fields.size() == header.size());
    auto& row = rows.emplace_back();
    for (std::size_t i = 0; i < fields.size(); ++i) row[header[i]] = fields[i];
  }
  return rows;
}

std::size_t lines_in(const fs::path& file) {
  std::ifstream in(file);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

}  // namespace

TEST_CASE("ftrun bench runs a grid, marks the impossible points invalid, and resumes after a kill") {
  const fs::path g = grid("small", R"(
[space]
batch_size = [1, 2]
number_gpus = [1, 2]
"strategy.precision" = ["fp32", "bf16-mixed"]
"strategy.adapter" = ["full", "lora"]
)");
  // Killed once 13 runs are recorded: the 14th, an mpirun job of 2 ranks, is under way.
  const fs::path out = scratch / "small";
  const std::string start = "(" FTRUN_PATH " bench " + g.string() + " --output " + out.string() + " >" +
                            (scratch / "killed.log").string() + " 2>&1 & echo $! >" + (scratch / "pid").string() + ")";
  REQUIRE(std::system(start.c_str()) == 0);
  for (int i = 0; i < 1800 && lines_in(out / "results.jsonl") < 13; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(lines_in(out / "results.jsonl") >= 13);
  std::system(("kill -9 $(cat " + (scratch / "pid").string() + ")").c_str());
  // Nothing it started outlives it: not mpirun, not the ranks mpirun started.
  // ([o]: the pattern must not match the shell that runs pgrep.)
  const std::string left = "pgrep -f '[o]utput_dir=" + (out / "runs").string() + "' >/dev/null";
  int still = 0;
  for (int i = 0; i < 100 && (still = std::system(left.c_str())) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_MESSAGE(still != 0, "runs of the killed bench are still running");
  const std::size_t before = lines_in(out / "results.jsonl");
  REQUIRE(before < 16);
  // A record torn by a kill (no end of line) is dropped on resume.
  std::ofstream(out / "results.jsonl", std::ios::app) << "{\"point\": \"batch_size=2 num";

  const auto r = bench(g, "small");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find("16 points x 1 repeats = 16 runs") != std::string::npos);
  CHECK(r.out.find("resuming: " + std::to_string(before) + " done") != std::string::npos);

  // Every run answered once: none lost to the kill, none done twice.
  std::map<std::string, int> answers;
  for (const auto& rec : records("small")) ++answers[rec["point"].get<std::string>()];
  CHECK(answers.size() == 16);
  for (const auto& [point, n] : answers) CHECK_MESSAGE(n == 1, point);

  const auto rows = csv(out / "results.csv");
  REQUIRE(rows.size() == 16);
  int valid = 0, invalid = 0;
  for (const auto& row : rows) {
    INFO(row.at("batch_size") << " x " << row.at("number_gpus") << " " << row.at("strategy.precision") << " "
                              << row.at("strategy.adapter"));
    if (row.at("batch_size") == "1" && row.at("number_gpus") == "2") {
      ++invalid;
      CHECK(row.at("is_valid") == "false");
      CHECK(row.at("reason") == "batch_size cannot be evenly divided by number_gpus (1 % 2 != 0)");
      CHECK(row.at("train_tokens_per_second").empty());
      continue;
    }
    ++valid;
    CHECK(row.at("is_valid") == "true");
    CHECK(std::stod(row.at("train_tokens_per_second")) > 0);
    CHECK(std::stod(row.at("dataset_tokens_per_second_per_gpu")) > 0);
    // 3 steps x batch_size rows, over all ranks.
    CHECK(std::stod(row.at("train_samples_per_second")) * std::stod(row.at("train_runtime")) ==
          doctest::Approx(3 * std::stod(row.at("batch_size"))));
    const double measured = std::stod(row.at("peak_memory_bytes")), estimated = std::stod(row.at("estimated_peak_memory_bytes"));
    CHECK(std::abs(measured / estimated - 1) <= 0.05);
    // The run takes no GPU: ado's SFTTrainer actuator reports its gpu_* properties as 0.
    for (const char* gpu : {"gpu_compute_utilization_min", "gpu_memory_utilization_avg", "gpu_power_percent_max",
                            "gpu_power_watts_avg", "gpu_memory_utilization_peak"})
      CHECK_MESSAGE(row.at(gpu) == "0.0", gpu);
  }
  CHECK(valid == 12);
  CHECK(invalid == 4);
  for (const char* plot : {"throughput.svg", "memory.svg", "iterations.svg"}) {
    const std::string svg = ft::testing::slurp(out / plot);
    CHECK_MESSAGE(svg.find("<svg") != std::string::npos, plot);
    CHECK_MESSAGE(svg.find("</svg>") != std::string::npos, plot);
  }
  // One line per configuration: batch size is the axis, not part of the label.
  const std::string throughput = ft::testing::slurp(out / "throughput.svg");
  CHECK(throughput.find("number_gpus=2 precision=bf16-mixed adapter=lora") != std::string::npos);
  CHECK(throughput.find("batch_size=") == std::string::npos);

  // A finished grid run again runs nothing; with a [fixed] key changed, every point runs again.
  const auto again = bench(g, "small");
  CHECK(again.code == 0);
  CHECK(records("small").size() == 16);
  std::ofstream(g, std::ios::app) << "[fixed]\n\"train.max_steps\" = 2\n";
  const auto changed = bench(g, "small");
  CHECK(changed.code == 0);
  CHECK(changed.out.find("resuming") == std::string::npos);
  CHECK(records("small").size() == 32);
  CHECK(csv(out / "results.csv").size() == 16);  // the current grid's runs only
}

TEST_CASE("a failed run has no properties and is tried again, now and on the next call") {
  // A learning rate this large makes a full fine-tune's loss NaN by step 3: the run stops with an error, not an OOM.
  const fs::path g = grid("failing", "retries = 1\n[fixed]\n\"strategy.adapter\" = \"full\"\n"
                                     "[space]\n\"train.learning_rate\" = [1e-3, 1e30]\n");
  const auto r = bench(g, "failing");
  CHECK(r.code == 1);
  CHECK(r.err.find("1 run(s) failed after 1 retries; run the grid again to retry them") != std::string::npos);
  auto all = records("failing");
  REQUIRE(all.size() == 3);  // the good point once, the failing one twice
  CHECK(all[0]["status"] == "valid");
  for (int i : {1, 2}) {
    CHECK(all[i]["status"] == "failed");
    CHECK(all[i]["attempt"] == i);
    CHECK_FALSE(all[i].contains("properties"));
    CHECK_FALSE(all[i].contains("is_valid"));
    CHECK(all[i]["reason"].get<std::string>().find("the loss is") != std::string::npos);
  }
  CHECK(csv(scratch / "failing" / "results.csv").size() == 1);
  const auto again = bench(g, "failing");
  CHECK(again.code == 1);
  CHECK(records("failing").size() == 5);
}

TEST_CASE("the stability experiment counts out-of-memory, other errors and successes over its repeats") {
  const fs::path g = grid("stability", R"(
experiment = "stability"
repeats = 3
[fixed]
"strategy.adapter" = "full"
[space]
"launch.memory_limit" = ["4GB", "2MB"]
"train.learning_rate" = [1e-3, 1e30]
)");
  const auto r = bench(g, "stability");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(records("stability").size() == 12);  // every run once: outcomes are not retried
  const auto rows = csv(scratch / "stability" / "stability.csv");
  REQUIRE(rows.size() == 4);
  for (const auto& row : rows) {
    INFO(row.at("launch.memory_limit") << " " << row.at("train.learning_rate"));
    CHECK(row.at("runs") == "3");
    const bool oom = row.at("launch.memory_limit") == "2MB", diverges = row.at("train.learning_rate") == "1e+30";
    CHECK(std::stod(row.at("f_gpu_oom")) == (oom ? 1.0 : 0.0));
    CHECK(row.at("f_oom") == row.at("f_gpu_oom"));  // the earlier name, kept
    CHECK(std::stod(row.at("f_other_error")) == (!oom && diverges ? 1.0 : 0.0));
    CHECK(std::stod(row.at("f_no_error")) == (!oom && !diverges ? 1.0 : 0.0));
  }
}

TEST_CASE("a grid with a wrong key or value is refused before anything runs, naming the line") {
  const fs::path typo = grid("typo", "[space]\n\"strategy.precison\" = [\"fp32\"]\n");
  const auto r = bench(typo, "typo");
  CHECK(r.code == 2);
  CHECK(r.err.find("typo.toml:3:") != std::string::npos);
  CHECK(r.err.find("strategy.precison") != std::string::npos);
  CHECK(r.err.find("precision") != std::string::npos);  // the recipe's suggestion
  CHECK_FALSE(fs::exists(scratch / "typo"));

  const fs::path value = grid("value", "[space]\n\"train.lr_scheduler_type\" = [\"cosine\", \"wavy\"]\n");
  const auto v = bench(value, "value");
  CHECK(v.code == 2);
  CHECK(v.err.find("value.toml:3:") != std::string::npos);
  CHECK(v.err.find("\"wavy\" is not a choice") != std::string::npos);

  // --dry-run lists the points and why one cannot run.
  const fs::path listed = grid("listed", "[space]\nbatch_size = [3, 4]\nnumber_gpus = 2\n");
  const auto d = bench(listed, "listed", " --dry-run");
  CHECK(d.code == 0);
  CHECK(d.out.find("batch_size=3 number_gpus=2  invalid: batch_size cannot be evenly divided by number_gpus "
                   "(3 % 2 != 0)") != std::string::npos);
  CHECK(d.out.find("--set train.per_device_train_batch_size=2") != std::string::npos);
  CHECK(d.out.find("--set strategy.parallelism=zero3") != std::string::npos);
  CHECK_FALSE(fs::exists(scratch / "listed"));
}

TEST_CASE("a grid in ado's words runs the points this machine can run and says why the others cannot") {
  // ado's entity space as ado's actuator writes it; [models] says where its model names are here.
  const fs::path g = grid("seed", R"(
[models]
"smollm2-135m" = ")" FT_SOURCE_DIR R"(/models/ft-tiny-llama"
[fixed]
gpu_model = "NVIDIA-A100-80GB-PCIe"
number_nodes = 1
fast_moe = 0
fast_kernels = "True True True"
torch_dtype = "float32"
bf16 = false
peft_method = "lora"
r = 4
lora_alpha = 16
distributed_backend = "FSDP"
fsdp_sharding_strategy = "HYBRID_SHARD_ZERO2"
[space]
model_name = ["smollm2-135m"]
number_gpus = [0, 2]
batch_size = [2, 3]
optim = ["adamw_torch", "galore_adamw"]
)");
  const auto r = bench(g, "seed");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::map<std::string, nlohmann::json> by_point;
  for (const nlohmann::json& record : records("seed")) by_point[record["point"].get<std::string>()] = record;
  REQUIRE(by_point.size() == 8);
  for (const auto& [point, record] : by_point) {
    INFO(point);
    const bool galore = point.find("galore") != std::string::npos;
    const bool uneven = point.find("number_gpus=2 batch_size=3") != std::string::npos;
    CHECK(record["is_valid"] == (!galore && !uneven));
    if (uneven)
      CHECK(record["reason"] == "batch_size cannot be evenly divided by number_gpus (3 % 2 != 0)");
    else if (galore)
      CHECK(record["reason"].get<std::string>().find("optim galore_adamw is not one ft has") == 0);
    if (!record["is_valid"].get<bool>()) continue;
    CHECK(record["properties"]["train_tokens_per_second"].get<double>() > 0);
    const std::vector<std::string> sets = record["sets"];
    auto has = [&](const std::string& s) { return std::find(sets.begin(), sets.end(), s) != sets.end(); };
    for (const char* s : {"strategy.precision=fp32", "strategy.optimizer=adamw", "strategy.adapter=lora", "lora.r=4",
                          "lora.alpha=16"})
      CHECK_MESSAGE(has(s), s);
    if (point.find("number_gpus=0") != std::string::npos) {  // no GPU: one process on the CPU
      CHECK(has("strategy.device=cpu"));
      CHECK(has("strategy.parallelism=single"));
    } else {  // HYBRID_SHARD_ZERO2 on one node is SHARD_GRAD_OP
      CHECK(has("launch.nproc=2"));
      CHECK(has("strategy.parallelism=zero2"));
      CHECK(has("train.per_device_train_batch_size=1"));
    }
  }

  // The validity rules that need the model, the nodes or the GPU, listed without running anything.
  std::ofstream(scratch / "hosts") << "node-a slots=2\nnode-b slots=2\n";
  const fs::path rules = grid("rules", R"(
[models]
"mixtral-8x7b-instruct-v0.1" = ")" FT_SOURCE_DIR R"(/tests/fixtures/parity/mixtral_top2"
"llama-7b" = ")" FT_SOURCE_DIR R"(/models/ft-tiny-llama"
[space]
model_name = ["mixtral-8x7b-instruct-v0.1", "llama-7b"]
number_gpus = [4]
number_nodes = [2, 3]
fast_moe = [0, 4]
"launch.hostfile" = ["", ")" + (scratch / "hosts").string() + R"("]
fsdp_sharding_strategy = ["HYBRID_SHARD"]
)");
  const auto d = bench(rules, "rules", " --dry-run");
  REQUIRE_MESSAGE(d.code == 0, d.err);
  auto line_of = [&](const std::string& point) {
    const auto at = d.out.find(point);
    REQUIRE_MESSAGE(at != std::string::npos, point);
    return d.out.substr(at, d.out.find('\n', at) - at);
  };
  CHECK(line_of("number_nodes=3").find("number_gpus cannot be evenly divided by number_nodes (4 % 3 != 0)") !=
        std::string::npos);
  CHECK(line_of("number_nodes=2 fast_moe=0 launch.hostfile= ").find("needs launch.hostfile naming the machines") !=
        std::string::npos);
  CHECK(line_of("llama-7b number_gpus=4 number_nodes=2 fast_moe=4 launch.hostfile=" + (scratch / "hosts").string())
            .find("is not a Mixture of Experts model") != std::string::npos);
  // The tiny Mixtral has 4 experts: a degree of 4 divides them, and HYBRID_SHARD shards within each node's 2 ranks.
  const std::string runs = line_of("mixtral-8x7b-instruct-v0.1 number_gpus=4 number_nodes=2 fast_moe=4 launch.hostfile=" +
                                   (scratch / "hosts").string() + " fsdp_sharding_strategy=HYBRID_SHARD\n");
  CHECK(runs.find("invalid") == std::string::npos);
  const std::string command = d.out.substr(d.out.find(runs) + runs.size(), 600);
  CHECK(command.find("--set strategy.parallelism=zero3 --set launch.shard_group_size=2") != std::string::npos);
  CHECK(command.find("--set strategy.expert_parallel=4") != std::string::npos);
  CHECK(command.find("ppr:2:node") != std::string::npos);  // 2 of the 4 ranks on each machine

  // Without number_gpus, the batch is split over the point's own launch.nproc.
  const fs::path own = grid("own_nproc", "[space]\nbatch_size = 4\n\"launch.nproc\" = 2\n");
  const auto o = bench(own, "own_nproc", " --dry-run");
  REQUIRE_MESSAGE(o.code == 0, o.err);
  CHECK(o.out.find("--set train.per_device_train_batch_size=2") != std::string::npos);

  // A point that runs on a GPU needs the GPU gpu_model names; ado's rule 5 needs one named.
  const fs::path gpu = grid("gpu", "[fixed]\n\"strategy.device\" = \"cuda\"\n[space]\nnumber_gpus = 1\n"
                                   "gpu_model = [\"NVIDIA-H100-PCIe\", \"\"]\n");
  const auto gd = bench(gpu, "gpu", " --dry-run");
  REQUIRE_MESSAGE(gd.code == 0, gd.err);
  CHECK(gd.out.find("gpu_model=NVIDIA-H100-PCIe  invalid: gpu_model NVIDIA-H100-PCIe is not on this machine") !=
        std::string::npos);
  CHECK(gd.out.find("gpu_model=  invalid: if number_gpus is greater than 0 then gpu_model must be a non-empty "
                    "string") != std::string::npos);

  // The shipped example grid, as ado writes it, has only points that run here (from the repository's root,
  // as its recipes are written).
  const auto shipped = ft::testing::run_command(
      "cd " FT_SOURCE_DIR " && " FTRUN_PATH " bench bench/grids/ado_lora.toml --dry-run", scratch, "shipped");
  REQUIRE_MESSAGE(shipped.code == 0, shipped.err);
  CHECK(shipped.out.find("6 points") != std::string::npos);
  CHECK(shipped.out.find("invalid") == std::string::npos);

  // A value outside ado's vocabulary is refused when the grid is read.
  const fs::path typo = grid("seedtypo", "[space]\noptim = [\"adamw_torch\", \"adamw_trch\"]\n");
  const auto t = bench(typo, "seedtypo");
  CHECK(t.code == 2);
  CHECK(t.err.find("seedtypo.toml:3:") != std::string::npos);
  CHECK(t.err.find("\"adamw_trch\" is neither one of the optim values of ado's SFTTrainer actuator") != std::string::npos);
}

}  // namespace test_bench
