// End-to-end training through ftrun, one run per (precision, adapter): the
// same recipe path a user takes, on a real model and real data, reported as
// one table of step time, train and dataset tokens/s, MFU and peak memory.
//
//   build/release/bin/bench_train_table [--model DIR] [--data FILE] [--steps N]
//       [--batch B] [--seq T] [--packing true|false]
//       [--precisions fp32,bf16-mixed,...] [--adapters full,lora,prompt] [--set key=value]...
//
// Defaults: SmolLM2-135M-Instruct as tools/main_job.sh converts it, the
// Jargon File set tools/setup.sh builds, 4 steps of 4 x 256, every precision
// and adapter. The first step is left out of the averages (it warms caches
// and the allocator); figures are the mean of the others, from each run's
// metrics.jsonl. Peak tensor memory is ft's host allocator's high-water mark
// during a step, beside ftrun estimate's prediction of it; max RSS is the
// process's, beside the estimate's resident peak.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

struct Options {
  std::string model = "models/smollm2-135m-instruct/hf";
  std::string data = "data/jargon/train.jsonl";
  int steps = 4, batch = 4, seq = 256;
  std::string packing = "true";
  std::vector<std::string> precisions = {"fp32", "bf16-mixed", "bf16-true", "fp16-mixed"};
  std::vector<std::string> adapters = {"full", "lora", "prompt"};
  std::vector<std::string> sets;
};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_train_table: %s needs a value\n", arg.c_str());
      std::exit(2);
    }
    const std::string value = argv[++i];
    if (arg == "--model") o.model = value;
    else if (arg == "--data") o.data = value;
    else if (arg == "--steps") o.steps = std::stoi(value);
    else if (arg == "--batch") o.batch = std::stoi(value);
    else if (arg == "--seq") o.seq = std::stoi(value);
    else if (arg == "--packing") o.packing = value;
    else if (arg == "--precisions") o.precisions = split(value);
    else if (arg == "--adapters") o.adapters = split(value);
    else if (arg == "--set") o.sets.push_back(value);
    else {
      std::fprintf(stderr, "bench_train_table: unknown option %s\n", arg.c_str());
      std::exit(2);
    }
  }
  if (o.steps < 2) {
    std::fprintf(stderr, "bench_train_table: --steps must be 2 or more (the first is not measured)\n");
    std::exit(2);
  }
  return o;
}

struct Row {
  std::string precision, adapter;
  bool ok = false;
  std::string error;
  double seconds = 0, tokens = 0, dataset_tokens = 0, mfu = 0, peak = 0, rss = 0, estimate = 0, resident_estimate = 0;
};

Row run(const Options& o, const std::string& precision, const std::string& adapter, const fs::path& dir) {
  Row row{precision, adapter};
  fs::remove_all(dir);
  fs::create_directories(dir);
  const bool prompt = adapter == "prompt";
  std::ofstream(dir / "recipe.toml")
      << "output_dir = \"" << (dir / "run").string() << "\"\nseed = 1\n"
      << "[model]\npath = \"" << fs::absolute(o.model).string() << "\"\n"
      << "[strategy]\nprecision = \"" << precision << "\"\nadapter = \"" << adapter << "\"\n"
      << "[lora]\nr = 16\nalpha = 32\ntarget_modules = [\"all-linear\"]\n"
      << "[data]\ntrain = \"" << fs::absolute(o.data).string() << "\"\nmax_seq_length = " << o.seq
      << "\npacking = " << (prompt ? "false" : o.packing) << "\n"
      << "[train]\nper_device_train_batch_size = " << o.batch << "\nmax_steps = " << o.steps
      << "\nlearning_rate = 1e-4\nlogging_steps = 1\n";
  std::string sets;
  for (const std::string& s : o.sets) sets += " --set " + s;
  // What ftrun estimate predicts for the step, beside what the run measures.
  const std::string estimate = std::string(FTRUN_PATH) + " estimate " + (dir / "recipe.toml").string() + sets +
                               " --json >" + (dir / "estimate.json").string() + " 2>&1";
  if (std::system(estimate.c_str()) == 0) {
    std::ifstream in(dir / "estimate.json");
    const auto e = nlohmann::json::parse(in);
    row.estimate = e.at("step_peak_bytes").get<double>();
    row.resident_estimate = e.at("host_peak_bytes").get<double>();
  }
  const std::string command =
      std::string(FTRUN_PATH) + " train " + (dir / "recipe.toml").string() + sets + " >" + (dir / "log").string() + " 2>&1";
  const int status = std::system(command.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream log(dir / "log");
    std::string line, last;
    while (std::getline(log, line))
      if (!line.empty()) last = line;
    row.error = last;
    return row;
  }
  std::ifstream in(dir / "run/metrics.jsonl");
  int measured = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("split", "") != "train" || j["step"].get<int>() == 1) continue;
    row.seconds += j["seconds_per_step"].get<double>();
    row.tokens += j["train_tokens_per_second"].get<double>();
    row.dataset_tokens += j["dataset_tokens_per_second"].get<double>();
    row.mfu += j["mfu"].get<double>();
    row.peak = std::max(row.peak, j["peak_memory_bytes"].get<double>());
    row.rss = std::max(row.rss, j["max_rss_bytes"].get<double>());
    ++measured;
  }
  if (measured == 0) {
    row.error = "no metrics";
    return row;
  }
  row.seconds /= measured;
  row.tokens /= measured;
  row.dataset_tokens /= measured;
  row.mfu /= measured;
  row.ok = true;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const fs::path work = fs::temp_directory_path() / ("ft_bench_train_table_" + std::to_string(::getpid()));
  std::printf("%s, %s: %d steps of %d x %d (first not measured), packing %s\n\n", o.model.c_str(), o.data.c_str(),
              o.steps, o.batch, o.seq, o.packing.c_str());
  std::printf("| precision | adapter | s/step | train tok/s | dataset tok/s | MFU | peak tensors MiB | estimated MiB | "
              "max RSS MiB | estimated resident MiB |\n");
  std::printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::fflush(stdout);
  int failures = 0;
  for (const std::string& precision : o.precisions)
    for (const std::string& adapter : o.adapters) {
      const Row r = run(o, precision, adapter, work / (precision + "_" + adapter));
      if (!r.ok) {
        std::printf("| %s | %s | failed: %s |\n", precision.c_str(), adapter.c_str(), r.error.c_str());
        ++failures;
      } else {
        const double MiB = 1 << 20;
        std::printf("| %s | %s | %.2f | %.0f | %.0f | %.3f | %.1f | %.1f | %.1f | %.1f |\n", precision.c_str(),
                    adapter.c_str(), r.seconds, r.tokens, r.dataset_tokens, r.mfu, r.peak / MiB, r.estimate / MiB,
                    r.rss / MiB, r.resident_estimate / MiB);
      }
      std::fflush(stdout);
    }
  fs::remove_all(work);
  return failures == 0 ? 0 : 1;
}
