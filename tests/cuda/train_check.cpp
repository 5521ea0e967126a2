// `ftrun train` on a GPU against the same recipe on the CPU, from the outside:
// ft's tiny Llama (models/ft-tiny-llama) on artificial token rows, two micro-batches a step,
// clipping at 1.0, a validation pass every 3 steps; with AdamW once fp32
// with full fine-tuning, once bf16-mixed with LoRA, once bf16-mixed full
// under ZeRO-2 and once fp32 full under ZeRO-3 (through NCCL, one rank);
// then Adafactor, and 8-bit AdamW under ZeRO-2, fp32 full; then prompt
// tuning, bf16-mixed; then fp16-mixed full, its loss scaled. Step for step, the GPU's loss
// and gradient norm follow the CPU's, and so does the validation loss, within
// a relative tolerance per precision. Exits 77 (skipped) where the CUDA
// plugin finds no GPU.
//
//   cuda_train_check FTRUN MODEL_DIR
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

struct Figures {
  std::map<long, double> loss, grad_norm, eval_loss;
};

Figures read_metrics(const fs::path& file) {
  Figures f;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const long step = j.at("step").get<long>();
    if (j.contains("perplexity")) f.eval_loss[step] = j.at("loss").get<double>();
    else if (j.contains("grad_norm")) {
      f.loss[step] = j.at("loss").get<double>();
      // An fp16 step that overflowed has a non-finite norm, written as null.
      f.grad_norm[step] = j.at("grad_norm").is_number() ? j.at("grad_norm").get<double>() : HUGE_VAL;
    }
  }
  return f;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The largest relative difference over the steps both have; -1 when they do not have the same steps.
double worst(const std::map<long, double>& cpu, const std::map<long, double>& gpu) {
  if (cpu.size() != gpu.size() || cpu.empty()) return -1;
  double w = 0;
  for (const auto& [step, a] : cpu) {
    const auto it = gpu.find(step);
    if (it == gpu.end()) return -1;
    if (it->second != a) w = std::max(w, std::abs(it->second - a) / std::max(std::abs(a), 1e-12));
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: cuda_train_check FTRUN MODEL_DIR\n");
    return 2;
  }
  const std::string ftrun = argv[1], model = argv[2];
  const fs::path scratch = fs::temp_directory_path() / ("ft_cuda_train_" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  struct Case {
    const char* name;
    const char* precision;
    const char* adapter;
    const char* parallelism;
    const char* optimizer;
    double loss_tolerance, grad_norm_tolerance;
  };
  // bf16-mixed: the products round their inputs to bf16 and sum in another order on each device.
  // zero2 on one rank: gradients reduce-scattered and values all-gathered through NCCL on the GPU;
  // zero3: the model's shards in the GPU's memory, each stage gathered before it runs.
  // adamw8bit: a moment near the midpoint between two codes may take the other one on the GPU.
  const Case cases[] = {{"fp32-full", "fp32", "full", "single", "adamw", 1e-5, 1e-5},
                        {"bf16-mixed-lora", "bf16-mixed", "lora", "single", "adamw", 1e-3, 1e-2},
                        {"bf16-mixed-full-zero2", "bf16-mixed", "full", "zero2", "adamw", 1e-3, 1e-2},
                        {"fp32-full-zero3", "fp32", "full", "zero3", "adamw", 1e-5, 1e-5},
                        {"fp32-full-adafactor", "fp32", "full", "single", "adafactor", 1e-5, 1e-5},
                        {"fp32-full-adamw8bit-zero2", "fp32", "full", "zero2", "adamw8bit", 1e-4, 1e-3},
                        {"bf16-mixed-prompt", "bf16-mixed", "prompt", "single", "adamw", 1e-3, 1e-2},
                        {"fp16-mixed-full", "fp16-mixed", "full", "single", "adamw", 1e-3, 1e-2}};
  bool ok = true;
  std::printf("| run | steps | loss | grad norm | validation loss | |\n|---|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    const fs::path recipe = scratch / (std::string(c.name) + ".toml");
    std::ofstream(recipe) << "[model]\npath = \"" << model << "\"\n"
                          << "[strategy]\nprecision = \"" << c.precision << "\"\nadapter = \"" << c.adapter << "\"\n"
                          << "parallelism = \"" << c.parallelism << "\"\n"
                          << "optimizer = \"" << c.optimizer << "\"\n"
                          << "[data]\ntrain = \"artificial:tokens-64-entries-256\"\nformat = \"tokens\"\n"
                          << "max_seq_length = 64\nvalidation_split = 0.1\n"
                          << "[train]\nper_device_train_batch_size = 4\ngradient_accumulation_steps = 2\n"
                          << "learning_rate = 1e-3\nmax_grad_norm = 1.0\nmax_steps = 6\nlogging_steps = 1\n"
                          << "eval_steps = 3\n[checkpoint]\nsave_steps = 0\n";
    Figures figures[2];
    for (int on_gpu = 0; on_gpu < 2; ++on_gpu) {
      const fs::path out = scratch / (std::string(c.name) + (on_gpu ? "-cuda" : "-cpu"));
      const std::string command = ftrun + " train " + recipe.string() + " --set output_dir=" + out.string() +
                                  (on_gpu ? " --set strategy.device=cuda" : "") + " >" + (scratch / "out").string() +
                                  " 2>" + (scratch / "err").string();
      const int status = std::system(command.c_str());
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      if (code != 0) {
        const std::string err = slurp(scratch / "err");
        if (on_gpu && err.find("no device of that kind answers") != std::string::npos) {
          std::printf("skipped: %s", err.c_str());
          fs::remove_all(scratch);
          return 77;
        }
        // The other cases still run, so that one pass on a GPU reports every failure.
        std::printf("%s on %s: exit %d: %s\n", c.name, on_gpu ? "cuda" : "cpu", code, err.c_str());
        ok = false;
        break;
      }
      figures[on_gpu] = read_metrics(out / "metrics.jsonl");
    }
    const double loss = worst(figures[0].loss, figures[1].loss);
    const double grad_norm = worst(figures[0].grad_norm, figures[1].grad_norm);
    const double eval = worst(figures[0].eval_loss, figures[1].eval_loss);
    const bool pass = loss >= 0 && grad_norm >= 0 && eval >= 0 && loss <= c.loss_tolerance &&
                      grad_norm <= c.grad_norm_tolerance && eval <= c.loss_tolerance;
    std::printf("| %s | %zu | %.1e (<= %.0e) | %.1e (<= %.0e) | %.1e | %s |\n", c.name, figures[0].loss.size(), loss,
                c.loss_tolerance, grad_norm, c.grad_norm_tolerance, eval, pass ? "ok" : "FAIL");
    ok = ok && pass;
  }
  fs::remove_all(scratch);
  std::printf(ok ? "ftrun on cuda follows the CPU step for step\n" : "ftrun on cuda departs from the CPU\n");
  return ok ? 0 : 1;
}
