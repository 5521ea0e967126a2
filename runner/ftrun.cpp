// ftrun: the ft runtime. A thin command line over the library and its plugins.
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ft/version.hpp>

#include "commands.hpp"
#include "exit_code.hpp"

namespace {

// A recipe and its overrides, as train, prepare, estimate and schedule take them.
void add_recipe_options(CLI::App* command, std::string& recipe, std::vector<std::string>& sets) {
  command->add_option("recipe", recipe, "Recipe file (TOML)")->required();
  command->add_option("--set", sets, "Override a recipe key: section.key=value (repeatable)");
}

// The engine a command runs the model in: its dtype, its device and the plugins that offer it.
void add_engine_options(CLI::App* command, ftrun::EngineChoice& engine, const std::string& where = "") {
  command->add_option("--dtype", engine.dtype, "Compute dtype" + where)
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  command->add_option("--device", engine.device, "Where the model runs: cpu, cuda, or a plugin's device" + where)
      ->capture_default_str();
  command->add_option("--plugin", engine.plugins, "Also load this plugin file (repeatable)");
}

// The model generate, serve and chat load, as one of them names it: what
// MODEL may be, the checkpoint of an output_dir (`use`: the verb for it),
// the compute dtype, the device and the plugins whose engines run it.
CLI::Option* add_model_options(CLI::App* command, std::string& model, std::string& checkpoint,
                               ftrun::EngineChoice& engine, const std::string& use, const std::string& where = "") {
  command->add_option("-c,--checkpoint", checkpoint, use + " one of the output_dir's checkpoints: latest, or a step number");
  add_engine_options(command, engine, where);
  return command->add_option("model", model, "HF model directory, PEFT adapter directory, or training output_dir");
}

// Plugins whose model families init, convert and schedule may read a model with.
void add_family_plugins(CLI::App* command, std::vector<std::string>& plugins) {
  command->add_option("--plugin", plugins,
                      "Also load this plugin file, for a model only a plugin's family reads (repeatable)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ftrun: fine-tune large language models from TOML recipes", "ftrun"};
  app.set_version_flag("--version", "ftrun " FT_VERSION_STRING);
  app.require_subcommand(1);

  ftrun::PluginsOptions plugins_options;
  auto* plugins = app.add_subcommand("plugins", "List plugins and the Trainer combinations each offers");
  plugins->add_option("--plugin", plugins_options.plugins, "Also load this plugin file (repeatable)");

  ftrun::TrainOptions train_options;
  auto* train = app.add_subcommand("train", "Resolve a recipe to a Trainer and check it (--dry-run prints the plan)");
  add_recipe_options(train, train_options.recipe, train_options.sets);
  train->add_option("--plugin", train_options.plugins, "Also load this plugin file (repeatable)");
  train->add_flag("--dry-run", train_options.dry_run, "Print the resolved recipe, the plan and the launch command");

  ftrun::PrepareOptions prepare_options;
  auto* prepare = app.add_subcommand("prepare", "Tokenise a recipe's data once into its token cache (data.cache_dir)");
  add_recipe_options(prepare, prepare_options.recipe, prepare_options.sets);
  prepare->add_flag("--force", prepare_options.force, "Rebuild the cache even when it matches the recipe");

  ftrun::EstimateOptions estimate_options;
  auto* estimate = app.add_subcommand("estimate", "Memory a recipe's run will take, per rank, before it allocates "
                                                  "anything: every term, the peak phase, and the other parallelisms");
  add_recipe_options(estimate, estimate_options.recipe, estimate_options.sets);
  estimate->add_flag("--json", estimate_options.json, "Print one JSON object instead of tables");
  estimate->add_option("--plugin", estimate_options.plugins, "Also load this plugin file, as train would (repeatable)");

  ftrun::BenchOptions bench_options;
  auto* bench = app.add_subcommand("bench", "Run every point of an experiment grid (TOML) as its own training run: "
                                            "seed 003's properties, validity and stability, CSV/JSONL and plots");
  bench->add_option("grid", bench_options.grid, "Grid file (TOML): base recipe, [fixed] and [space] keys")->required();
  bench->add_option("--output", bench_options.output, "Results directory (default: the grid's `output`)");
  bench->add_flag("--dry-run", bench_options.dry_run, "List the points, their validity and commands; run nothing");

  ftrun::EvalOptions eval_options;
  auto* eval = app.add_subcommand("eval", "Mean loss and perplexity of a model over pre-tokenized JSONL rows");
  eval->add_option("--model", eval_options.model, "HF model directory (config.json, model.safetensors)")->required();
  eval->add_option("--data", eval_options.data, "JSONL file: {\"input_ids\": [...], \"labels\": [...]} per line")
      ->required();
  add_engine_options(eval, eval_options.engine);
  eval->add_option("--max-tokens", eval_options.max_tokens, "Tokens packed into one forward pass")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  eval->add_flag("--json", eval_options.json, "Print one JSON object instead of lines");
  eval->add_option("--logits-out", eval_options.logits_out,
                   "Write each row's next-token logits to this safetensors file ([rows, vocab] float32)");

  ftrun::ConvertOptions convert_options;
  auto* convert = app.add_subcommand("convert", "Convert HF model directories, GGUF files and PEFT adapters (dtype, shards, LoRA merge, tokens)");
  convert->add_option("source", convert_options.source, "HF model directory, .gguf file or PEFT adapter directory")->required();
  convert->add_option("destination", convert_options.destination, "Directory to write (must not exist unless --force)")
      ->required();
  convert->add_option("--dtype", convert_options.dtype, "Store floating-point weights as float32, bfloat16 or float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  convert->add_option("--max-shard-size", convert_options.max_shard_size, "Largest weight file, e.g. 5GB, 500MB, 2GiB")
      ->capture_default_str();
  convert->add_option("--merge-lora", convert_options.merge_lora, "Merge this PEFT LoRA adapter into the weights");
  convert->add_option("--add-tokens", convert_options.add_tokens,
                      "TOML file of tokens to add: special = [...], regular = [...], eos_token = ..., pad_token = ...");
  convert->add_option("-t,--chat-template", convert_options.chat_template, "Jinja file to use as the chat template");
  convert->add_flag("--force", convert_options.force, "Replace the destination if it exists");
  add_family_plugins(convert, convert_options.plugins);

  ftrun::ScheduleOptions schedule_options;
  auto* schedule = app.add_subcommand("schedule", "Draw a recipe's pipeline schedule as a timeline: simulated, or a "
                                                  "step a run recorded (pipeline.timeline = true)");
  add_recipe_options(schedule, schedule_options.recipe, schedule_options.sets);
  schedule->add_flag("--measured", schedule_options.measured,
                     "Draw a step recorded in <output_dir>/timeline/ instead of the simulated schedule");
  schedule->add_option("--step", schedule_options.step, "The recorded step to draw (default: the last)")
      ->check(CLI::PositiveNumber);
  schedule->add_option("--replica", schedule_options.replica, "Whose pipe to draw under pipeline x data parallelism")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  schedule->add_option("--svg", schedule_options.svg, "Also write the timeline as an SVG drawing to this file");
  add_family_plugins(schedule, schedule_options.plugins);

  ftrun::GenerateOptions gen;
  auto* generate = app.add_subcommand("generate", "Generate text from a model with a key/value cache");
  add_model_options(generate, gen.model, gen.checkpoint, gen.engine, "Use")->required();
  generate->add_option("-p,--prompt", gen.prompts, "A prompt (repeatable)");
  generate->add_option("--prompts", gen.prompts_file, "JSONL file: {\"prompt\": ...} or {\"messages\": [...]} per line");
  generate->add_option("--system", gen.system, "A system message before each prompt");
  generate->add_flag("--raw", gen.raw, "Send the prompt text as it is, without the chat template");
  generate->add_option("--max-tokens", gen.max_tokens, "Longest answer, in tokens")->check(CLI::PositiveNumber)->capture_default_str();
  generate->add_option("--temperature", gen.temperature, "0: greedy")->check(CLI::NonNegativeNumber)->capture_default_str();
  generate->add_option("--top-k", gen.top_k, "Keep the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber);
  generate->add_option("--top-p", gen.top_p, "Keep the most likely tokens whose probabilities sum to p");
  generate->add_option("--min-p", gen.min_p, "Keep tokens at least min-p x the most likely's probability");
  generate->add_option("--repetition-penalty", gen.repetition_penalty, "HF's repetition penalty (1: off)");
  generate->add_option("--seed", gen.seed, "Seed of the sampling")->capture_default_str();
  generate->add_option("--stop", gen.stop, "Stop when the answer contains this text (repeatable)");
  generate->add_option("--batch", gen.batch, "Prompts generated at once")->check(CLI::PositiveNumber)->capture_default_str();
  generate->add_flag("--json", gen.json, "One JSON object per prompt: text, token_ids, finish_reason");

  ftrun::ServeOptions serve_options;
  auto* serve = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  add_model_options(serve, serve_options.model, serve_options.checkpoint, serve_options.engine, "Serve")->required();
  serve->add_option("--adapter", serve_options.adapters, "NAME=DIR: a PEFT adapter clients pick with \"model\": NAME (repeatable)");
  serve->add_option("--served-model-name", serve_options.served_model_name, "The base model's name in the API (default: MODEL as given)");
  serve->add_option("--host", serve_options.host, "Address to listen on")->capture_default_str();
  serve->add_option("--port", serve_options.port, "Port (0: any free one, printed)")->capture_default_str();
  serve->add_option("--max-model-len", serve_options.max_model_len, "Longest prompt plus answer, in tokens (default: the model's, at most 2048)");
  serve->add_option("--max-num-seqs", serve_options.max_num_seqs, "Sequences generated at once")->check(CLI::PositiveNumber)->capture_default_str();
  serve->add_option("--max-queue", serve_options.max_queue, "Requests that may wait for a slot; more get HTTP 429")->check(CLI::NonNegativeNumber)->capture_default_str();
  serve->add_option("--max-tokens", serve_options.max_tokens, "The most tokens a request may ask for (0: up to the context)")->check(CLI::NonNegativeNumber);
  serve->add_option("--prefill-chunk", serve_options.prefill_chunk, "Prompt tokens of one request fed per step, so a long prompt does not stall the others (0: whole prompts)")->check(CLI::NonNegativeNumber)->capture_default_str();
  serve->add_option("--api-key", serve_options.api_key, "Require \"Authorization: Bearer KEY\" on /v1/");
  serve->add_option("--shutdown-timeout", serve_options.shutdown_timeout, "Seconds in-flight requests get to finish after SIGTERM")->check(CLI::NonNegativeNumber)->capture_default_str();

  ftrun::ChatOptions chat_options;
  auto* chat = app.add_subcommand("chat", "Chat in the terminal with a model, loaded here or served (--url)");
  add_model_options(chat, chat_options.model, chat_options.checkpoint, chat_options.engine, "Use",
                    " (a model loaded here)");
  chat->add_option("--url", chat_options.url, "A running OpenAI-compatible server, e.g. http://127.0.0.1:8000");
  chat->add_option("--model", chat_options.served_model, "With --url: the server's model (default: its first)");
  chat->add_option("--api-key", chat_options.api_key, "With --url: the server's API key")->envname("OPENAI_API_KEY");
  chat->add_option("--system", chat_options.system, "The system message");
  chat->add_option("-m,--message", chat_options.message, "Ask this one question, print the answer and exit");
  chat->add_option("--max-tokens", chat_options.max_tokens, "Longest answer, in tokens")->check(CLI::PositiveNumber)->capture_default_str();
  chat->add_option("--temperature", chat_options.temperature, "0: greedy")->check(CLI::NonNegativeNumber)->capture_default_str();
  chat->add_option("--top-p", chat_options.top_p, "Keep the most likely tokens whose probabilities sum to p");
  chat->add_option("--seed", chat_options.seed, "Seed of the sampling")->capture_default_str();

  ftrun::InitOptions init_options;
  auto* init = app.add_subcommand("init", "Write randomly initialised weights for a config.json (HF layout, deterministic)");
  init->add_option("source", init_options.source, "Directory with config.json (and tokenizer files to copy)")->required();
  init->add_option("destination", init_options.destination, "Directory to write; the source directory by default");
  init->add_option("--seed", init_options.seed, "Seed of the draws")->capture_default_str();
  init->add_flag("--force", init_options.force, "Replace weights that are already there");
  add_family_plugins(init, init_options.plugins);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "ftrun: " << e.what() << " (see ftrun --help)\n";
    return ftrun::bad_input;
  }

  if (*plugins) return ftrun::run_plugins(plugins_options);
  if (*train) return ftrun::run_train(train_options);
  if (*prepare) return ftrun::run_prepare(prepare_options);
  if (*estimate) return ftrun::run_estimate(estimate_options);
  if (*bench) return ftrun::run_bench(bench_options);
  if (*eval) return ftrun::run_eval(eval_options);
  if (*convert) return ftrun::run_convert(convert_options);
  if (*init) return ftrun::run_init(init_options);
  if (*schedule) return ftrun::run_schedule(schedule_options);
  if (*generate) return ftrun::run_generate(gen);
  if (*serve) return ftrun::run_serve(serve_options);
  if (*chat) return ftrun::run_chat(chat_options);
  return ftrun::bad_input;
}
