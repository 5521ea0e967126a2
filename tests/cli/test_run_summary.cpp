// The end of a run as a benchmark reads it: the summary record in
// metrics.jsonl (the names of ado's SFTTrainer actuator), the stop rules that end a run early, and
// checkpoint.save_strategy = "no", which writes nothing but the metrics.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/command.hpp"
#include "support/files.hpp"

namespace test_run_summary {

namespace fs = std::filesystem;

namespace {

// Removed, with everything the runs wrote, when this process exits.
const ft::testing::TempDir scratch_dir("ft_summary");
const fs::path& scratch = scratch_dir.path;

// The tiny Llama on rows of 64 artificial tokens: micro-batches of 2 rows, 2 per step.
std::string recipe(const std::string& name, const std::string& extra = "") {
  fs::create_directories(scratch);
  const fs::path path = scratch / (name + ".toml");
  std::ofstream(path) << "output_dir = \"" << (scratch / name).string() << "\"\n"
                      << "[model]\npath = \"" FT_SOURCE_DIR "/models/ft-tiny-llama\"\n"
                      << "[data]\ntrain = \"artificial:tokens-64-entries-64\"\nformat = \"tokens\"\n"
                      << "max_seq_length = 64\ncache_dir = \"" << (scratch / "cache").string() << "\"\n"
                      << "[train]\nper_device_train_batch_size = 2\ngradient_accumulation_steps = 2\n"
                      << "logging_steps = 1\n"
                      << extra;
  return path.string();
}

ft::testing::CommandResult ftrun(const std::string& args, const std::string& name) {
  return ft::testing::run_command(FTRUN_PATH " " + args, scratch, name);
}

std::vector<nlohmann::json> records(const std::string& name, const std::string& split) {
  std::vector<nlohmann::json> out;
  std::ifstream in(scratch / name / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.value("split", "") == split) out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

TEST_CASE("the summary gives ado's figures, consistent with the steps the run took") {
  const auto r = ftrun("train " + recipe("plain", "max_steps = 3\n"), "plain");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto summary = records("plain", "summary");
  REQUIRE(summary.size() == 1);
  const auto& s = summary[0];
  CHECK(s.at("step") == 3);
  CHECK(s.at("stopped_by") == "max_steps");
  CHECK(s.at("measured_steps") == 3);
  CHECK(s.at("warmup_steps") == 0);
  const double seconds = s.at("train_runtime").get<double>();
  CHECK(seconds > 0);
  // 3 steps x 2 micro-batches x 2 rows x 64 tokens, no padding.
  CHECK(s.at("train_samples_per_second").get<double>() * seconds == doctest::Approx(12));
  CHECK(s.at("train_steps_per_second").get<double>() * seconds == doctest::Approx(3));
  CHECK(s.at("train_tokens_per_second").get<double>() * seconds == doctest::Approx(768));
  CHECK(s.at("train_tokens_per_gpu_per_second") == s.at("train_tokens_per_second"));
  CHECK(s.at("dataset_tokens_per_second").get<double>() * seconds == doctest::Approx(768));
  CHECK(s.at("dataset_tokens_per_second_per_gpu") == s.at("dataset_tokens_per_second"));
  CHECK(s.at("cpu_compute_utilization").get<double>() > 0);
  CHECK(s.at("cpu_memory_utilization").get<double>() > 0);
  // The run's peak is the largest step's.
  double largest = 0;
  for (const auto& t : records("plain", "train")) largest = std::max(largest, t.at("peak_memory_bytes").get<double>());
  CHECK(s.at("peak_memory_bytes").get<double>() == largest);
  CHECK(s.at("max_rss_bytes").get<double>() >= largest);
  CHECK(s.at("state_bytes").get<double>() > 0);
  CHECK(r.out.find("summary  step 3  train_runtime ") != std::string::npos);
  // The default save strategy writes the last checkpoint and the result (a LoRA adapter by default).
  CHECK(fs::exists(scratch / "plain" / "checkpoint-3"));
  CHECK(fs::exists(scratch / "plain" / "adapter" / "adapter_model.safetensors"));
}

TEST_CASE("stop_after_seconds ends the run after the step that passes it") {
  const auto r = ftrun("train " + recipe("timed", "max_steps = 50\nstop_after_seconds = 0\n"), "timed");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto summary = records("timed", "summary");
  REQUIRE(summary.size() == 1);
  CHECK(summary[0].at("step") == 1);
  CHECK(summary[0].at("stopped_by") == "stop_after_seconds");
  CHECK(records("timed", "train").size() == 1);
  CHECK(fs::exists(scratch / "timed" / "checkpoint-1"));  // a stopped run still ends as a finished one
}

TEST_CASE("auto_stop_method leaves the warm-up out of the throughput, then stops after its steps") {
  // No seconds of warm-up: the first step alone warms up, then 3 are measured.
  const auto r =
      ftrun("train " + recipe("auto", "max_steps = 50\nauto_stop_method = \"WARMUP_0S_STABLE_0S_OR_3_STEPS\"\n"),
            "auto");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto summary = records("auto", "summary");
  REQUIRE(summary.size() == 1);
  const auto& s = summary[0];
  CHECK(s.at("step") == 4);
  CHECK(s.at("stopped_by") == "auto_stop_method");
  CHECK(s.at("measured_steps") == 3);
  CHECK(s.at("warmup_steps") == 1);
  CHECK(s.at("train_samples_per_second").get<double>() * s.at("train_runtime").get<double>() == doctest::Approx(12));
  // The measured part is the last 3 steps: shorter than the whole run's steps.
  double all = 0;
  for (const auto& t : records("auto", "train")) all += t.at("seconds_per_step").get<double>();
  CHECK(s.at("train_runtime").get<double>() < all);
}

TEST_CASE("two ranks stop at the same step, and save_strategy = \"no\" writes only the metrics") {
  const auto r = ftrun("train " +
                           recipe("ranks", "max_steps = 50\nstop_after_seconds = 0\n[checkpoint]\nsave_strategy = "
                                           "\"no\"\n[strategy]\nparallelism = \"ddp\"\n[launch]\nnproc = 2\n"),
                       "ranks");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto summary = records("ranks", "summary");
  REQUIRE(summary.size() == 1);
  const auto& s = summary[0];
  CHECK(s.at("step") == 1);
  // Both ranks' rows: 2 ranks x 2 micro-batches x 2 rows.
  CHECK(s.at("train_samples_per_second").get<double>() * s.at("train_runtime").get<double>() == doctest::Approx(8));
  CHECK(s.at("train_tokens_per_gpu_per_second").get<double>() * 2 ==
        doctest::Approx(s.at("train_tokens_per_second").get<double>()));
  std::vector<std::string> written;
  for (const auto& e : fs::directory_iterator(scratch / "ranks")) written.push_back(e.path().filename().string());
  std::sort(written.begin(), written.end());
  // The metrics, their TensorBoard copy and the memory plan the dashboard draws: no checkpoint, no model.
  CHECK(written == std::vector<std::string>{"memory_plan.json", "metrics.jsonl", "runs"});
}

TEST_CASE("a stop rule the recipe cannot use is refused with what is allowed") {
  const auto r = ftrun("train " + recipe("bad", "auto_stop_method = \"when_bored\"\n") + " --dry-run", "bad");
  CHECK(r.code != 0);
  CHECK(r.err.find("train.auto_stop_method") != std::string::npos);
  CHECK(r.err.find("warmup_<W>s_stable_<S>s_or_<N>_steps") != std::string::npos);
  const auto save = ftrun("train " + recipe("bad_save", "[checkpoint]\nsave_strategy = \"epoch\"\n") + " --dry-run",
                          "bad_save");
  CHECK(save.code != 0);
  CHECK(save.err.find("one of steps, no") != std::string::npos);
}

}  // namespace test_run_summary
