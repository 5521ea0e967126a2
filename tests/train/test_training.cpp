// Training from the outside: ftrun train on ft's tiny fixture models, through
// the stock plugins, checked by what a run leaves behind (metrics.jsonl,
// TensorBoard files, checkpoints, PEFT adapters, HF models) and by its exit
// status and message on bad input.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include <ft/io/safetensors.hpp>
#include <ft/report/metrics.hpp>

#include "support/files.hpp"

namespace test_training {

namespace fs = std::filesystem;

namespace {

const std::string fixtures = std::string(FT_SOURCE_DIR) + "/tests/fixtures/train";

struct Run {
  int code;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A recipe on a tiny model and the small jargon set, plus `extra` TOML lines.
fs::path write_recipe(const fs::path& dir, const std::string& extra, const std::string& model = "tiny_llama",
                      bool packing = true) {
  fs::create_directories(dir);
  const fs::path path = dir / "recipe.toml";
  std::ofstream(path) << "output_dir = \"" << (dir / "run").string() << "\"\nseed = 7\n"
                      << "[model]\npath = \"" << fixtures << "/" << model << "\"\n"
                      << "[data]\ntrain = \"" << fixtures << "/jargon_small.jsonl\"\nvalidation = \"" << fixtures
                      << "/jargon_small_validation.jsonl\"\nmax_seq_length = 128\npacking = " << (packing ? "true" : "false")
                      << "\n"
                      << extra;
  return path;
}

Run ftrun_train(const fs::path& recipe, const std::string& sets = "") {
  const fs::path out = recipe.parent_path() / "stdout", err = recipe.parent_path() / "stderr";
  const std::string cmd = "OMP_NUM_THREADS=1 " FTRUN_PATH " train " + recipe.string() + " " + sets + " >" +
                          out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

std::vector<nlohmann::json> metrics(const fs::path& run, const std::string& split = "train") {
  std::vector<nlohmann::json> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (in.eof()) break;  // no newline yet: a record the run is still writing (a test may poll a live run)
    auto j = nlohmann::json::parse(line);
    if (j["split"] == split) out.push_back(j);
  }
  return out;
}

// The last record of each step (a resumed run logs again the steps it redoes).
std::map<std::int64_t, nlohmann::json> by_step(const std::vector<nlohmann::json>& records) {
  std::map<std::int64_t, nlohmann::json> out;
  for (const auto& r : records) out[r["step"].get<std::int64_t>()] = r;
  return out;
}

std::string file_bytes(const fs::path& p) { return ft::testing::read_bytes(p); }

}  // namespace

TEST_CASE("lr_scheduler_type constant_with_warmup rises over the warmup steps and then holds, as HF's") {
  ft::testing::TempDir dir("ft_train_constant_with_warmup");
  const fs::path recipe = write_recipe(dir.path, R"(
[strategy]
adapter = "lora"
[train]
per_device_train_batch_size = 2
learning_rate = 1e-3
lr_scheduler_type = "constant_with_warmup"
warmup_steps = 4
max_steps = 6
logging_steps = 1
[checkpoint]
save_strategy = "no"
)");
  const Run r = ftrun_train(recipe);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto train = metrics(dir.path / "run");
  REQUIRE(train.size() == 6);
  // HF's LambdaLR: step s (from 0) runs at lr * s / warmup, then lr.
  const double expected[] = {0.0, 0.25e-3, 0.5e-3, 0.75e-3, 1e-3, 1e-3};
  for (std::size_t i = 0; i < 6; ++i) CHECK(std::abs(train[i]["learning_rate"].get<double>() - expected[i]) < 1e-15);
}

TEST_CASE("a LoRA run lowers the loss and leaves metrics, TensorBoard files, checkpoints, an adapter and a merged model") {
  ft::testing::TempDir dir("ft_train_lora");
  const fs::path recipe = write_recipe(dir.path, R"(
[strategy]
adapter = "lora"
[lora]
r = 8
alpha = 16
target_modules = ["all-linear"]
save_merged = true
[train]
per_device_train_batch_size = 2
learning_rate = 3e-3
lr_scheduler_type = "constant"
max_steps = 24
logging_steps = 1
eval_steps = 8
[checkpoint]
save_steps = 8
save_total_limit = 2
)");
  const Run r = ftrun_train(recipe);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const fs::path run = dir.path / "run";

  const auto train = metrics(run);
  REQUIRE(train.size() == 24);
  for (const char* key : {"step", "epoch", "loss", "learning_rate", "grad_norm", "train_tokens_per_second",
                          "dataset_tokens_per_second", "mfu", "peak_memory_bytes"})
    CHECK_MESSAGE(train[0].contains(key), key);
  CHECK(train[0]["train_tokens_per_second"].get<double>() >= train[0]["dataset_tokens_per_second"].get<double>());
  double first = 0, last = 0;
  for (int i = 0; i < 4; ++i) {
    first += train[std::size_t(i)]["loss"].get<double>();
    last += train[train.size() - 1 - std::size_t(i)]["loss"].get<double>();
  }
  CHECK(last < 0.8 * first);
  const auto eval = metrics(run, "eval");
  REQUIRE(eval.size() == 3);  // steps 8 and 16, and at the end
  CHECK(eval.back()["loss"].get<double>() < eval.front()["loss"].get<double>());

  // Only the newest two checkpoints stay; latest names the newest.
  CHECK_FALSE(fs::exists(run / "checkpoint-8"));
  CHECK(fs::exists(run / "checkpoint-16/adapter_model.safetensors"));
  CHECK(fs::exists(run / "checkpoint-24/optimizer.safetensors"));
  CHECK(fs::read_symlink(run / "latest") == "checkpoint-24");
  for (const auto& entry : fs::directory_iterator(run))
    CHECK_MESSAGE(entry.path().filename().string().find(".tmp-") == std::string::npos, entry.path());

  // The adapter in PEFT's layout, the merged model in HF's.
  const auto config = nlohmann::json::parse(slurp(run / "adapter/adapter_config.json"));
  CHECK(config["peft_type"] == "LORA");
  CHECK(config["r"] == 8);
  CHECK(config["target_modules"].size() == 7);
  auto adapter = ft::io::SafetensorsFile::open(run / "adapter/adapter_model.safetensors");
  CHECK(adapter.find("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight") != nullptr);
  CHECK(fs::exists(run / "merged/config.json"));
  CHECK(fs::exists(run / "merged/tokenizer.json"));
  auto merged = ft::io::SafetensorsFile::open(run / "merged/model.safetensors");
  auto base = ft::io::SafetensorsFile::open(fixtures + "/tiny_llama/model.safetensors");
  const auto* q = merged.find("model.layers.0.self_attn.q_proj.weight");
  REQUIRE(q != nullptr);
  CHECK_FALSE(std::ranges::equal(q->bytes, base.find("model.layers.0.self_attn.q_proj.weight")->bytes));

  // TensorBoard event files are there; their content is checked in test_tensorboard.cpp.
  bool events = false;
  for (const auto& entry : fs::directory_iterator(run / "runs"))
    events |= entry.path().filename().string().starts_with("events.out.tfevents.");
  CHECK(events);
}

TEST_CASE("gradient accumulation normalises by the target tokens of the whole step") {
  // 4 rows in one micro-batch, or the same 4 rows as 2 x 2: the same loss and gradient norm.
  ft::testing::TempDir dir("ft_train_accumulation");
  const std::string common = "[strategy]\nadapter = \"full\"\noptimizer = \"sgd\"\n[train]\nmax_steps = 2\n"
                             "learning_rate = 1e-2\nlr_scheduler_type = \"constant\"\n";
  const fs::path a = write_recipe(dir.path / "a", common + "per_device_train_batch_size = 4\n");
  const fs::path b = write_recipe(dir.path / "b", common + "per_device_train_batch_size = 2\ngradient_accumulation_steps = 2\n");
  // Unpacked rows of different lengths: each micro-batch has its own number of scored tokens.
  REQUIRE(ftrun_train(a, "--set data.packing=false").code == 0);
  REQUIRE(ftrun_train(b, "--set data.packing=false").code == 0);
  const auto ma = metrics(dir.path / "a/run"), mb = metrics(dir.path / "b/run");
  REQUIRE(ma.size() == 2);
  REQUIRE(mb.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(mb[i]["loss"].get<double>() == doctest::Approx(ma[i]["loss"].get<double>()).epsilon(1e-5));
    CHECK(mb[i]["grad_norm"].get<double>() == doctest::Approx(ma[i]["grad_norm"].get<double>()).epsilon(1e-4));
  }
}

TEST_CASE("a run killed with SIGKILL resumes from latest and ends bit for bit where an uninterrupted run ends") {
  for (const std::string strategy : {"adapter = \"lora\"\nprecision = \"bf16-mixed\"\n",
                                     "adapter = \"full\"\noptimizer = \"adafactor\"\n",
                                     "adapter = \"prompt\"\n"}) {
    CAPTURE(strategy);
    const bool packing = strategy.find("prompt") == std::string::npos;  // virtual tokens precede whole rows
    ft::testing::TempDir dir("ft_train_resume");
    const std::string extra = "[strategy]\n" + strategy +
                              "[lora]\ndropout = 0.1\n[train]\nper_device_train_batch_size = 2\n"
                              "gradient_accumulation_steps = 2\nmax_steps = 14\nlearning_rate = 2e-3\n"
                              "warmup_steps = 3\n[checkpoint]\nsave_steps = 3\nsave_total_limit = 2\n";
    const fs::path whole = write_recipe(dir.path / "whole", extra, "tiny_llama", packing);
    REQUIRE(ftrun_train(whole).code == 0);

    // The same run, killed at a random step after its first checkpoint, then resumed.
    const fs::path killed = write_recipe(dir.path / "killed", extra, "tiny_llama", packing);
    std::mt19937 rng(std::random_device{}());
    const int kill_after = 4 + int(rng() % 8);
    CAPTURE(kill_after);
    // Started through the shell exactly as ftrun_train starts a run, in the background.
    const fs::path pid_file = dir.path / "killed/pid";
    const std::string start = "OMP_NUM_THREADS=1 " FTRUN_PATH " train " + killed.string() + " >" +
                              (dir.path / "killed/stdout").string() + " 2>&1 & echo $! >" + pid_file.string();
    REQUIRE(std::system(start.c_str()) == 0);
    const pid_t pid = pid_t(std::stol(slurp(pid_file)));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (metrics(dir.path / "killed/run").size() < std::size_t(kill_after) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    REQUIRE(::kill(pid, SIGKILL) == 0);
    while (::kill(pid, 0) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // gone once reaped
    REQUIRE(fs::exists(dir.path / "killed/run/latest"));
    const Run resumed = ftrun_train(killed, "--set checkpoint.resume=latest");
    INFO(resumed.err);
    REQUIRE(resumed.code == 0);

    const auto a = by_step(metrics(dir.path / "whole/run")), b = by_step(metrics(dir.path / "killed/run"));
    REQUIRE(a.size() == 14);
    REQUIRE(b.size() == 14);
    for (const auto& [step, record] : a) {
      CAPTURE(step);
      CHECK(b.at(step)["loss"].get<double>() == record["loss"].get<double>());
      CHECK(b.at(step)["grad_norm"].get<double>() == record["grad_norm"].get<double>());
    }
    for (const char* file : {"checkpoint-14/optimizer.safetensors", "checkpoint-14/trainer_state.json"})
      CHECK_MESSAGE(file_bytes(dir.path / "whole/run" / file) == file_bytes(dir.path / "killed/run" / file), file);
    const std::string weights = strategy.find("full") == std::string::npos ? "checkpoint-14/adapter_model.safetensors"
                                                                            : "checkpoint-14/model.safetensors";
    CHECK(file_bytes(dir.path / "whole/run" / weights) == file_bytes(dir.path / "killed/run" / weights));
  }
}

TEST_CASE("a record a killed run left half-written is dropped before a resumed run appends to metrics.jsonl") {
  ft::testing::TempDir dir("ft_train_partial_record");
  const fs::path file = dir.path / "metrics.jsonl";
  auto write = [&](const std::string& bytes) { std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes; };
  const std::string whole = "{\"split\":\"train\",\"step\":1}\n{\"split\":\"train\",\"step\":2}\n";

  write(whole);
  ft::report::MetricsLog::drop_partial_record(file);
  CHECK(slurp(file) == whole);  // whole records stay as they are

  write(whole + "{\"split\":\"train\",\"st");
  ft::report::MetricsLog::drop_partial_record(file);
  CHECK(slurp(file) == whole);

  write("{\"split\":");  // nothing whole at all
  ft::report::MetricsLog::drop_partial_record(file);
  CHECK(slurp(file).empty());

  write(whole + std::string(10000, 'x'));  // a partial record longer than one read from the end
  ft::report::MetricsLog::drop_partial_record(file);
  CHECK(slurp(file) == whole);

  // Through the log a run opens: the next record starts a line of its own.
  write(whole + "{\"split\":\"train\",\"step\":3,\"lo");
  {
    ft::report::MetricsLog log(dir.path, 10, 2);
    log.log("train", {{"step", 3}, {"loss", 1.5}}, true);
  }
  const auto records = metrics(dir.path);
  REQUIRE(records.size() == 3);
  CHECK(records[2]["step"] == 3);
  CHECK(records[2]["loss"] == 1.5);
}

TEST_CASE("every optimizer and precision trains the tiny models") {
  struct Case {
    const char* strategy;
    const char* model;
  };
  for (const Case c : {Case{"optimizer = \"sgd\"\nadapter = \"full\"", "tiny_neox"},
                       Case{"optimizer = \"lion\"\nadapter = \"lora\"", "tiny_neox"},
                       Case{"optimizer = \"adafactor\"\nadapter = \"full\"\nprecision = \"bf16-true\"", "tiny_llama"},
                       Case{"optimizer = \"adamw8bit\"\nadapter = \"full\"", "tiny_llama"},
                       Case{"optimizer = \"adamw4bit\"\nadapter = \"full\"\nprecision = \"bf16-true\"", "tiny_llama"},
                       Case{"optimizer = \"adamw\"\nadapter = \"lora\"\nprecision = \"fp16-mixed\"", "tiny_llama"},
                       Case{"optimizer = \"adamw\"\nadapter = \"full\"\nprecision = \"bf16-mixed\"", "tiny_neox"}}) {
    CAPTURE(c.strategy);
    ft::testing::TempDir dir("ft_train_policies");
    const double lr = std::string(c.strategy).find("sgd") != std::string::npos ? 0.3 : 3e-3;
    const fs::path recipe = write_recipe(dir.path,
                                         std::string("[strategy]\n") + c.strategy +
                                             "\n[lora]\ntarget_modules = [\"all-linear\"]\n[train]\nmax_steps = 12\n"
                                             "per_device_train_batch_size = 2\nlr_scheduler_type = \"constant\"\n"
                                             "learning_rate = " + std::to_string(lr) + "\n",
                                         c.model);
    const Run r = ftrun_train(recipe);
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto m = metrics(dir.path / "run");
    REQUIRE(m.size() == 12);
    CHECK(m.back()["loss"].get<double>() < m.front()["loss"].get<double>());
    if (std::string(c.strategy).find("fp16") != std::string::npos) CHECK(m.back().contains("loss_scale"));
    const bool full = std::string(c.strategy).find("full") != std::string::npos;
    CHECK(fs::exists(dir.path / "run" / (full ? "model/model.safetensors" : "adapter/adapter_model.safetensors")));
  }
}

TEST_CASE("prompt tuning trains virtual tokens from a text and saves a PEFT prompt adapter") {
  for (const char* model : {"tiny_llama", "tiny_neox"}) {
    CAPTURE(model);
    ft::testing::TempDir dir("ft_train_prompt");
    const fs::path recipe = write_recipe(dir.path, R"(
[strategy]
adapter = "prompt"
[prompt_tuning]
num_virtual_tokens = 8
init_text = "Define the term"
[train]
max_steps = 24
per_device_train_batch_size = 4
learning_rate = 0.1
lr_scheduler_type = "constant"
eval_steps = 6
[preview]
prompt = "What is a hack?"
max_new_tokens = 4
)", model, false);
    const Run r = ftrun_train(recipe);
    INFO(r.out, r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("8 virtual tokens") != std::string::npos);
    CHECK(r.out.find("after training: \"What is a hack?\"") != std::string::npos);
    REQUIRE(metrics(dir.path / "run").size() == 24);
    // A few virtual tokens move a random 2-layer model's loss little, but the
    // validation loss goes down at every evaluation.
    const auto eval = metrics(dir.path / "run", "eval");
    REQUIRE(eval.size() == 4);
    for (std::size_t i = 1; i < eval.size(); ++i)
      CHECK(eval[i]["loss"].get<double>() < eval[i - 1]["loss"].get<double>());

    const fs::path adapter = dir.path / "run/adapter";
    auto file = ft::io::SafetensorsFile::open(adapter / "adapter_model.safetensors");
    REQUIRE(file.tensors().size() == 1);
    CHECK(file.find("prompt_embeddings")->shape == std::vector<std::int64_t>{8, 32});
    const auto config = nlohmann::json::parse(slurp(adapter / "adapter_config.json"));
    CHECK(config["peft_type"] == "PROMPT_TUNING");
    CHECK(config["prompt_tuning_init_text"] == "Define the term");
    CHECK(!fs::exists(dir.path / "run/merged"));
  }
}

TEST_CASE("under fp16 a step whose gradient overflows is skipped and the loss scale halved") {
  // 2^20 is too large a scale for the tiny model's float16 gradients: the
  // first steps overflow until the scale has come down far enough.
  ft::testing::TempDir dir("ft_train_fp16_overflow");
  const fs::path recipe = write_recipe(dir.path, R"(
[strategy]
adapter = "full"
precision = "fp16-mixed"
[train]
max_steps = 8
per_device_train_batch_size = 2
learning_rate = 1e-3
initial_scale_power = 20
[checkpoint]
save_steps = 1
save_total_limit = 8
)");
  const Run r = ftrun_train(recipe);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto m = metrics(dir.path / "run");
  REQUIRE(m.size() == 8);
  int skipped = 0, first_applied = 0;
  for (const auto& record : m) {
    const int step = record["step"].get<int>();
    CAPTURE(step);
    skipped += record["skipped_steps"].get<int>();
    if (record["skipped_steps"] == 0 && first_applied == 0) first_applied = step;
    CHECK(record["loss_scale"].get<double>() == std::ldexp(1.0, 20 - skipped));
  }
  REQUIRE(m.front()["skipped_steps"] == 1);
  REQUIRE(first_applied > 2);  // at least two skipped steps in a row, then one applied
  // A skipped step changes neither the weights nor the optimizer's state; an applied one does.
  auto files = [&](int step) {
    const fs::path c = dir.path / "run" / ("checkpoint-" + std::to_string(step));
    return file_bytes(c / "model.safetensors") + file_bytes(c / "optimizer.safetensors");
  };
  CHECK(files(1) == files(first_applied - 1));
  CHECK(files(first_applied - 1) != files(first_applied));
}

TEST_CASE("an artificial dataset trains with ado's response template, and a bad name is refused") {
  ft::testing::TempDir dir("ft_train_artificial");
  const std::string recipe_text = "output_dir = \"" + (dir.path / "run").string() + "\"\n" + R"(
[model]
path = ")" + fixtures + R"(/tiny_llama"
[data]
train = "artificial:news-chars-96-entries-24"
validation_split = 0.2
format = "text"
text_field = "output"
response_template = "\n### Response:"
max_seq_length = 256
[train]
max_steps = 4
per_device_train_batch_size = 2
)";
  std::ofstream(dir.path / "recipe.toml") << recipe_text;
  const Run r = ftrun_train(dir.path / "recipe.toml");
  INFO(r.out, r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("artificial:news-chars-96-entries-24: 20 rows") != std::string::npos);
  CHECK(metrics(dir.path / "run").size() == 4);
  CHECK(metrics(dir.path / "run", "eval").size() == 1);

  const Run bad = ftrun_train(dir.path / "recipe.toml", "--set data.train=artificial:news-words-96-entries-24");
  CHECK(bad.code == 2);
  CHECK(bad.err.find("data.train") != std::string::npos);
  CHECK(bad.err.find("is not an artificial dataset name") != std::string::npos);
}

TEST_CASE("ftrun prepare writes the token cache once; train reuses it, and rebuilds it when the data changes") {
  ft::testing::TempDir dir("ft_prepare");
  fs::copy_file(fixtures + "/jargon_small.jsonl", dir.path / "train.jsonl");
  const fs::path recipe = write_recipe(dir.path, "[train]\nmax_steps = 2\nper_device_train_batch_size = 2\n");
  const std::string data = "--set data.train=" + (dir.path / "train.jsonl").string();
  auto prepare = [&](const std::string& extra = "") {
    const std::string cmd = FTRUN_PATH " prepare " + recipe.string() + " " + data + " " + extra + " >" +
                            (dir.path / "out").string() + " 2>&1";
    const int status = std::system(cmd.c_str());
    return std::pair{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir.path / "out")};
  };
  auto [code, out] = prepare();
  INFO(out);
  REQUIRE(code == 0);
  CHECK(out.find("data-cache: written in") != std::string::npos);
  CHECK(out.find("train       48 rows") != std::string::npos);
  std::tie(code, out) = prepare();
  CHECK(out.find("up to date") != std::string::npos);

  Run r = ftrun_train(recipe, data);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("data cache  reused") != std::string::npos);

  // Another row in the file: the cache no longer matches and is rebuilt, saying why.
  std::ofstream(dir.path / "train.jsonl", std::ios::app)
      << R"({"instruction": "What is a frob?", "input": "", "output": "A small thing to twiddle."})" << "\n";
  std::tie(code, out) = prepare();
  CHECK(code == 0);
  CHECK(out.find("was built for another train") != std::string::npos);
  CHECK(out.find("train       49 rows") != std::string::npos);
}

TEST_CASE("a diverging run stops at the step with a NaN loss and names the last good checkpoint") {
  ft::testing::TempDir dir("ft_train_nan");
  const fs::path recipe = write_recipe(dir.path, R"(
[strategy]
adapter = "full"
optimizer = "sgd"
[train]
learning_rate = 1e12
lr_scheduler_type = "constant"
max_grad_norm = 0
max_steps = 20
[checkpoint]
save_steps = 1
)");
  const Run r = ftrun_train(recipe);
  CHECK(r.code == 1);
  CHECK(r.err.find("the loss is") != std::string::npos);
  CHECK(r.err.find("Last good checkpoint: " + (dir.path / "run").string() + "/checkpoint-") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}

TEST_CASE("resuming with another tokenizer or trainer is refused") {
  ft::testing::TempDir dir("ft_train_refuse");
  const std::string extra = "[strategy]\nadapter = \"lora\"\n[train]\nmax_steps = 2\n[checkpoint]\nsave_steps = 1\n";
  const fs::path recipe = write_recipe(dir.path, extra);
  REQUIRE(ftrun_train(recipe).code == 0);
  const fs::path checkpoint = dir.path / "run/checkpoint-2";

  // The same model with a changed tokenizer.
  const fs::path model = dir.path / "model";
  fs::copy(fixtures + "/tiny_llama", model);
  std::ofstream(model / "tokenizer.json", std::ios::app) << "\n";
  const Run other_tokenizer = ftrun_train(recipe, "--set model.path=" + model.string() +
                                                      " --set checkpoint.resume=" + checkpoint.string());
  CHECK(other_tokenizer.code == 2);
  CHECK(other_tokenizer.err.find("another tokenizer") != std::string::npos);

  const Run other_optimizer =
      ftrun_train(recipe, "--set strategy.optimizer=lion --set checkpoint.resume=" + checkpoint.string());
  CHECK(other_optimizer.code == 2);
  CHECK(other_optimizer.err.find("was written by") != std::string::npos);

  const Run no_latest = ftrun_train(recipe, "--set checkpoint.resume=latest --set output_dir=" +
                                                (dir.path / "empty").string());
  CHECK(no_latest.code == 2);
  CHECK(no_latest.err.find("latest") != std::string::npos);
}

TEST_CASE("options that cannot work together are refused before anything is allocated") {
  ft::testing::TempDir dir("ft_train_refusals");
  struct Case {
    const char* extra;
    const char* says;
  };
  for (const Case c : {Case{"[train]\nfuse_optimizer_with_backward = true\ngradient_accumulation_steps = 2\n",
                            "cannot accumulate"},
                       Case{"[train]\nfuse_optimizer_with_backward = true\n", "max_grad_norm = 0"},
                       Case{"[lora]\ntarget_modules = [\"q_prj\"]\n", "\"q_prj\" matches no module"},
                       Case{"[strategy]\nprecision = \"fp16-mixed\"\n[train]\nfuse_optimizer_with_backward = true\n"
                            "max_grad_norm = 0\n",
                            "scales the loss"}}) {
    CAPTURE(c.extra);
    const Run r = ftrun_train(write_recipe(dir.path, c.extra));
    CHECK(r.code == 2);
    CHECK(r.err.find(c.says) != std::string::npos);
    CHECK_FALSE(fs::exists(dir.path / "run/metrics.jsonl"));
  }
}

TEST_CASE("activation checkpointing and offloading change memory, not results") {
  // Full fine-tuning, so every weight gradient passes through the recomputed activations.
  ft::testing::TempDir dir("ft_train_memory");
  const std::string extra = "[strategy]\nadapter = \"full\"\n[train]\nmax_steps = 3\nper_device_train_batch_size = 2\n";
  std::vector<std::string> runs;
  for (const std::string memory : {"", "gradient_checkpointing = \"every_block\"\n",
                                   "gradient_checkpointing = \"every_2\"\nactivation_offloading = true\n",
                                   "activation_offloading = true\n"}) {
    CAPTURE(memory);
    const fs::path run_dir = dir.path / std::to_string(runs.size());
    const Run r = ftrun_train(write_recipe(run_dir, extra + memory));
    INFO(r.err);
    REQUIRE(r.code == 0);
    runs.push_back(file_bytes(run_dir / "run/model/model.safetensors"));
    const auto m = metrics(run_dir / "run");
    REQUIRE(m.size() == 3);
    CHECK(m[2]["loss"].get<double>() == metrics(dir.path / "0/run")[2]["loss"].get<double>());
  }
  for (std::size_t i = 1; i < runs.size(); ++i) CHECK(runs[i] == runs[0]);
}

TEST_CASE("the optimizer fused into backward gives the same weights and holds one block's gradient") {
  ft::testing::TempDir dir("ft_train_fused");
  for (const std::string precision : {"fp32", "bf16-mixed"}) {
    CAPTURE(precision);
    const std::string extra = "[strategy]\nadapter = \"full\"\noptimizer = \"adamw\"\nprecision = \"" + precision +
                              "\"\n[train]\nmax_steps = 4\nmax_grad_norm = 0\nper_device_train_batch_size = 2\n";
    const fs::path plain = dir.path / (precision + "-plain"), fused = dir.path / (precision + "-fused");
    REQUIRE(ftrun_train(write_recipe(plain, extra)).code == 0);
    const Run r = ftrun_train(write_recipe(fused, extra + "fuse_optimizer_with_backward = true\n"));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(file_bytes(plain / "run/model/model.safetensors") == file_bytes(fused / "run/model/model.safetensors"));
    const auto a = metrics(plain / "run"), b = metrics(fused / "run");
    REQUIRE(a.size() == 4);
    REQUIRE(b.size() == 4);
    CHECK(b[3]["loss"].get<double>() == a[3]["loss"].get<double>());
    CHECK(b[3]["grad_norm"].get<double>() == doctest::Approx(a[3]["grad_norm"].get<double>()).epsilon(1e-9));
    CHECK(b[3]["peak_memory_bytes"].get<double>() < a[3]["peak_memory_bytes"].get<double>());
  }
}

}  // namespace test_training
