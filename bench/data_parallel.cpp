// Data parallelism end to end through ftrun: one process against ddp, zero2
// and zero3 on N ranks of this machine, with the same global batch, as one
// table of step time, bytes each rank sends per step against what the
// strategy should move, and the share of communication hidden under
// compute (1 - time the trainer waited / time a collective was moving).
//
//   build/release/bin/bench_data_parallel [--ranks N] [--steps S] [--batch B] [--model DIR]
//
// Defaults: ft's tiny Llama (0.79M parameters, models/ft-tiny-llama), fp32
// full fine-tuning, 2 ranks, 30 steps of 8 rows x 256 tokens in all. Step
// figures are medians over the steps after the fifth. Theory per rank per
// step, for P parameters of 4 bytes on w ranks, as ring algorithms move
// them: ddp 2P(w-1)/w (all-reduce), zero2 2P(w-1)/w (reduce-scatter of
// gradients, all-gather of updated values), zero3 3P(w-1)/w (values
// gathered for forward and for backward, gradients reduce-scattered), plus
// for a tied embedding one more gather of the table for the head.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Figures {
  double seconds = 0, sent = 0, busy = 0, waited = 0;
};

Figures run(const std::string& name, const std::string& model, const std::string& parallelism, int ranks, int rows,
            int steps, const fs::path& out) {
  const fs::path dir = out / name;
  fs::remove_all(dir);
  const std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " FTRUN_PATH
                          " train recipes/ft_tiny_llama/ddp.toml --set model.path=" + model +
                          " --set strategy.parallelism=" + parallelism + " --set launch.nproc=" + std::to_string(ranks) +
                          " --set train.per_device_train_batch_size=" + std::to_string(rows) +
                          " --set train.max_steps=" + std::to_string(steps) +
                          " --set train.logging_steps=1 --set train.eval_steps=0 --set checkpoint.save_steps=0"
                          " --set checkpoint.resume=none --set output_dir=" + dir.string() + " >" +
                          (out / (name + ".log")).string() + " 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "bench_data_parallel: %s failed, see %s\n", name.c_str(), (out / (name + ".log")).c_str());
    std::exit(1);
  }
  std::vector<double> seconds, sent, busy, waited;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["step"].get<int>() <= 5) continue;
    if (j["split"] == "train") seconds.push_back(j["seconds_per_step"].get<double>());
    if (j["split"] == "rank0") {
      sent.push_back(j["sent_bytes_per_step"].get<double>());
      busy.push_back(j["comm_busy_seconds_per_step"].get<double>());
      waited.push_back(j["comm_wait_seconds_per_step"].get<double>());
    }
  }
  return {median(seconds), median(sent), median(busy), median(waited)};
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 2, steps = 30, batch = 8;
  std::string model = "models/ft-tiny-llama";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i], value = argv[i + 1];
    if (arg == "--ranks") ranks = std::stoi(value);
    else if (arg == "--steps") steps = std::stoi(value);
    else if (arg == "--batch") batch = std::stoi(value);
    else if (arg == "--model") model = value;
    else {
      std::fprintf(stderr, "bench_data_parallel: unknown option %s\n", arg.c_str());
      return 2;
    }
  }
  if (batch % ranks != 0) {
    std::fprintf(stderr, "bench_data_parallel: --batch %d does not split over %d ranks\n", batch, ranks);
    return 2;
  }
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(fs::path(model) / "config.json"));
  const double C = config["hidden_size"], V = config["vocab_size"];
  std::ifstream weights(fs::path(model) / "model.safetensors", std::ios::binary);
  std::uint64_t header = 0;
  weights.read(reinterpret_cast<char*>(&header), 8);
  const double P = double(fs::file_size(fs::path(model) / "model.safetensors") - 8 - header) / 4;  // f32 weights
  const double w = ranks, ring = (w - 1) / w, tied = config.value("tie_word_embeddings", false) ? V * C * 4 : 0;
  const std::map<std::string, double> theory = {
      {"ddp", 2 * P * 4 * ring}, {"zero2", 2 * P * 4 * ring}, {"zero3", (3 * P * 4 + tied) * ring}};

  const fs::path out = fs::temp_directory_path() / "ft_bench_data_parallel";
  fs::create_directories(out);
  std::printf("%s: %.3gM parameters, %d steps of %d rows x 256 tokens in all, %d ranks\n\n", model.c_str(), P / 1e6, steps,
              batch, ranks);
  std::printf("| run | s/step | vs one process | sent/rank/step | theory | comm busy s/step | waited s/step | hidden |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  const Figures one = run("single", model, "single", 1, batch, steps, out);
  std::printf("| single | %.4f | 1.00 | - | - | - | - | - |\n", one.seconds);
  for (const std::string p : {"ddp", "zero2", "zero3"}) {
    const Figures f = run(p, model, p, ranks, batch / ranks, steps, out);
    std::printf("| %s x%d | %.4f | %.2f | %.3g MB | %.3g MB | %.4f | %.4f | %.0f%% |\n", p.c_str(), ranks, f.seconds,
                f.seconds / one.seconds, f.sent / 1e6, theory.at(p) / 1e6, f.busy, f.waited,
                f.busy > 0 ? 100 * std::max(0.0, 1 - f.waited / f.busy) : 0.0);
    std::fflush(stdout);
  }
  return 0;
}
