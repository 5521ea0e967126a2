#pragma once
// The ftrun subcommands. Each returns an exit code (exit_code.hpp) and prints
// its own errors as one line on stderr.
#include <string>
#include <vector>

namespace ftrun {

struct PluginsOptions {
  std::vector<std::string> plugins;  // --plugin FILE
};
int run_plugins(const PluginsOptions& options);

struct TrainOptions {
  std::string recipe;
  std::vector<std::string> sets;     // --set section.key=value
  std::vector<std::string> plugins;  // --plugin FILE
  bool dry_run = false;
};
int run_train(const TrainOptions& options);

struct PrepareOptions {
  std::string recipe;
  std::vector<std::string> sets;  // --set section.key=value
  bool force = false;             // rebuild even when the cache matches
};
int run_prepare(const PrepareOptions& options);

struct EstimateOptions {
  std::string recipe;
  std::vector<std::string> sets;     // --set section.key=value
  std::vector<std::string> plugins;  // --plugin FILE, as train loads them
  bool json = false;
};
int run_estimate(const EstimateOptions& options);

struct BenchOptions {
  std::string grid;    // the grid file (bench_grid.hpp)
  std::string output;  // replaces the grid's output directory when not empty
  bool dry_run = false;
};
int run_bench(const BenchOptions& options);

// Where eval, generate, serve and chat run the model: its element type, its
// device, and plugin files to load before the stock ones.
struct EngineChoice {
  std::string dtype = "float32";
  std::string device = "cpu";
  std::vector<std::string> plugins;  // --plugin FILE
};

struct EvalOptions {
  std::string model;          // HF model directory
  std::string data;           // JSONL of pre-tokenized rows
  EngineChoice engine;        // the plugin's inference engine that scores them: dtype, device
  long max_tokens = 2048;     // tokens packed into one forward pass
  bool json = false;
  std::string logits_out;     // safetensors file for each row's next-token logits
};
int run_eval(const EvalOptions& options);

struct ConvertOptions {
  std::string source, destination;
  std::string dtype;                    // empty: keep each tensor's dtype
  std::string max_shard_size = "5GB";
  std::string merge_lora;               // PEFT adapter directory to merge into the weights
  std::string add_tokens;               // TOML file of tokens to add (data/token_additions.hpp)
  std::string chat_template;            // Jinja file replacing the model's chat template
  bool force = false;                   // replace an existing destination
  std::vector<std::string> plugins;     // --plugin FILE: for a model a plugin's family reads
};
int run_convert(const ConvertOptions& options);

struct ScheduleOptions {
  std::string recipe;
  std::vector<std::string> sets;  // --set section.key=value
  bool measured = false;          // draw a recorded step instead of the simulated schedule
  long step = 0;                  // the recorded step to draw; 0: the last one
  int replica = 0;                // whose pipe, under pipeline x data parallelism
  std::string svg;                // write the drawing here
  std::vector<std::string> plugins;  // --plugin FILE: for a model a plugin's family reads
};
int run_schedule(const ScheduleOptions& options);

struct GenerateOptions {
  std::string model;                        // HF model, PEFT adapter or training output_dir
  std::string checkpoint;                   // -c: one of an output_dir's checkpoints ("latest", a step)
  std::vector<std::string> prompts;         // --prompt TEXT
  std::string prompts_file;                 // --prompts FILE.jsonl
  std::string system;                       // a system message before each prompt
  bool raw = false;                         // no chat template
  std::vector<std::string> stop;            // stop strings
  long max_tokens = 128;
  double temperature = 0, top_p = 1, min_p = 0, repetition_penalty = 1;
  long top_k = 0, seed = 0, batch = 16;
  EngineChoice engine;
  bool json = false;
};
int run_generate(const GenerateOptions& options);

struct ServeOptions {
  std::string model;                  // HF model, PEFT adapter or training output_dir
  std::string checkpoint;             // -c: one of an output_dir's checkpoints
  std::vector<std::string> adapters;  // --adapter NAME=DIR
  std::string served_model_name;      // the base model's name in the API; MODEL by default
  std::string host = "127.0.0.1";
  int port = 8000;                    // 0: any free port (printed)
  long max_model_len = 0;             // 0: the model's max_position_embeddings, at most 2048
  long max_num_seqs = 8;              // sequences in the running batch (key/value cache slots)
  long max_queue = 64;                // requests waiting beyond those; more get 429
  long max_tokens = 0;                // the most a request may ask for; 0: up to the context
  long prefill_chunk = 512;           // prompt tokens of one request fed per step; 0: whole prompts
  std::string api_key;
  EngineChoice engine;
  double shutdown_timeout = 30;       // seconds in-flight requests get after SIGTERM
};
int run_serve(const ServeOptions& options);

struct ChatOptions {
  std::string model;         // load this model here (HF model, PEFT adapter or training output_dir)
  std::string checkpoint;    // -c: one of an output_dir's checkpoints
  std::string url;           // or talk to this server
  std::string served_model;  // --model: the server's model to use; its first by default
  std::string api_key;
  std::string system;        // the system message
  std::string message;       // one question, then exit
  long max_tokens = 512;
  double temperature = 0, top_p = 1;
  long seed = 0;
  EngineChoice engine;
};
int run_chat(const ChatOptions& options);

struct InitOptions {
  std::string source, destination;  // destination: the source directory when empty
  long seed = 0;
  bool force = false;               // replace existing weights
  std::vector<std::string> plugins;  // --plugin FILE: for a model a plugin's family reads
};
int run_init(const InitOptions& options);

}  // namespace ftrun
