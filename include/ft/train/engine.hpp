#pragma once
// The training loop behind Trainer<...>::train(). The Trainer's five policies
// arrive here already resolved: the storage dtype T and the optimizer's dtype
// M come from the precision policy, the optimizer as a factory of per-buffer
// optimizers, the adapter and loss scaling as plain values. One loop, written
// once, therefore serves every combination, and a plugin instantiates it once
// per (T, M) pair rather than once per combination.
//
// One optimizer step:
//   1. take the step's gradient_accumulation_steps micro-batches from the
//      plan's stream (data/batches.hpp): micro-batch k = step x accumulation
//      + i, so the position in the data is a function of the step
//   2. count the scored tokens of all of them; every micro-batch's loss
//      gradient is divided by that total, so the step's gradient is the mean
//      over the whole accumulated batch, however its tokens fall into
//      micro-batches (dividing per micro-batch overweights short ones)
//   3. forward + backward each micro-batch, moving its gradient into the
//      step's (trainable.hpp)
//   4. under fp16, undo the loss scale; a non-finite gradient skips the step
//      and halves the scale, 2000 good steps in a row double it (torch's
//      GradScaler defaults)
//   5. clip the global norm, step the optimizer at the schedule's rate
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <range/v3/view/take.hpp>

#include "ft/adapters/lora.hpp"
#include "ft/adapters/lora_files.hpp"
#include "ft/adapters/prompt_tuning.hpp"
#include "ft/core/random.hpp"
#include "ft/core/fingerprint.hpp"
#include "ft/data/batches.hpp"
#include "ft/data/model_text.hpp"
#include "ft/data/prepared.hpp"
#include "ft/io/hf_config.hpp"
#include "ft/io/model_weights.hpp"
#include "ft/io/staged_directory.hpp"
#include "ft/models/load.hpp"
#include "ft/models/save.hpp"
#include "ft/optim/schedule.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/tensor/memory.hpp"
#include "ft/train/checkpoint.hpp"
#include "ft/train/flops.hpp"
#include "ft/train/generate.hpp"
#include "ft/train/metrics.hpp"
#include "ft/train/trainable.hpp"

namespace ft::train {

enum class AdapterKind { full, lora, prompt };

// What the policies decided, as values.
struct EngineSetup {
  std::string trainer;  // the Trainer's C++ type, for logs and checkpoints
  std::string adapter_description;  // "lora: r 16, alpha 32, ...", for the run's header
  AdapterKind adapter = AdapterKind::full;
  bool loss_scaling = false;
};

// A run that cannot go on (NaN loss): the message names the step and the last good checkpoint.
struct TrainingStopped : Error {
  using Error::Error;
};

namespace detail {

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// 134.5M, 2.44M, 58.2K: parameter counts as people say them.
inline std::string count_text(double n) {
  char buffer[32];
  if (n >= 1e9) std::snprintf(buffer, sizeof buffer, "%.2fB", n / 1e9);
  else if (n >= 1e6) std::snprintf(buffer, sizeof buffer, "%.2fM", n / 1e6);
  else std::snprintf(buffer, sizeof buffer, "%.1fK", n / 1e3);
  return buffer;
}

inline std::size_t max_rss_bytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return std::size_t(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace detail

template <element T, class M>
class Engine {
public:
  Engine(recipe::Recipe recipe, EngineSetup setup, OptimizerFactory<M> factory)
      : r_(std::move(recipe)), setup_(std::move(setup)), trainables_(std::move(factory)),
        loss_scale_(setup_.loss_scaling ? std::ldexp(1.0, int(r_.train.initial_scale_power)) : 1.0) {}

  // Runs the recipe to the end; throws ft::Error for bad input, TrainingStopped when the loss diverges.
  void run() {
    namespace fs = std::filesystem;
    out_ = r_.output_dir;
    fs::create_directories(out_);
    remove_stale_staging(out_);
    const fs::path resume_from = resolve_resume(out_, r_.checkpoint.resume);

    load_text();
    load_data();
    build_model();
    total_steps_ = total_steps();
    const optim::Schedule schedule{optim::schedule_from_name(r_.train.lr_scheduler_type), r_.train.learning_rate,
                                   optim::warmup_steps(r_.train.warmup_steps, r_.train.warmup_ratio, total_steps_),
                                   total_steps_};
    std::int64_t step = 0;
    if (!resume_from.empty()) step = resume(resume_from);
    describe_run(step);

    MetricsLog log(out_, long(total_steps_), long(step));
    log_ = &log;
    if (!r_.preview.prompt.empty() && step == 0) log.say("before training: " + preview());
    peak_flops_ = measure_gemm_peak();

    Window window;
    while (step < total_steps_) {
      const double lr = schedule.rate(step);
      const StepResult s = train_step(step, lr);
      ++step;
      window.add(s);
      if (!std::isfinite(s.loss))
        throw TrainingStopped("step " + std::to_string(step) + ": the loss is " + (std::isnan(s.loss) ? "nan" : "inf") +
                              "; stopping. Last good checkpoint: " + last_checkpoint_ +
                              " (lower learning_rate or check the data, then resume from it)");
      log.progress(long(step), "loss " + format(s.loss) + "  lr " + format(lr));
      if (step % r_.train.logging_steps == 0 || step == total_steps_) log.log("train", window.take(step, *this, lr));
      if (r_.train.eval_steps > 0 && step % r_.train.eval_steps == 0 && step != total_steps_) evaluate(step);
      if (r_.checkpoint.save_steps > 0 && step % r_.checkpoint.save_steps == 0 && step != total_steps_)
        save_checkpoint(step);
    }
    log.finish();
    evaluate(step);
    save_checkpoint(step);
    if (!r_.preview.prompt.empty()) log.say("after training: " + preview());
    save_final();
  }

private:
  struct StepResult {
    double loss = 0, grad_norm = 0, seconds = 0;
    std::int64_t tokens = 0, dataset_tokens = 0, scored = 0;
    bool skipped = false;
  };

  // Averages over the steps since the last log, as HF's Trainer logs.
  struct Window {
    double loss = 0, grad_norm = 0, seconds = 0;
    std::int64_t steps = 0, tokens = 0, dataset_tokens = 0, skipped = 0;
    void add(const StepResult& s) {
      loss += s.loss;
      grad_norm += s.grad_norm;
      seconds += s.seconds;
      tokens += s.tokens;
      dataset_tokens += s.dataset_tokens;
      skipped += s.skipped;
      ++steps;
    }
    // The averages as a metrics record; the window starts again empty.
    nlohmann::ordered_json take(std::int64_t step, const Engine& e, double lr) {
      nlohmann::ordered_json j;
      j["step"] = step;
      j["epoch"] = double(step * e.r_.train.gradient_accumulation_steps) / e.train_plan_->batches_per_epoch();
      j["loss"] = loss / double(steps);
      j["learning_rate"] = lr;
      j["grad_norm"] = grad_norm / double(steps);
      j["train_tokens_per_second"] = double(tokens) / seconds;
      j["dataset_tokens_per_second"] = double(dataset_tokens) / seconds;
      j["mfu"] = e.flops_per_token_ * double(tokens) / seconds / e.peak_flops_;
      j["peak_memory_bytes"] = memory::Host::stats().peak();
      j["max_rss_bytes"] = detail::max_rss_bytes();
      j["seconds_per_step"] = seconds / double(steps);
      if (e.setup_.loss_scaling) {
        j["loss_scale"] = e.loss_scale_;
        j["skipped_steps"] = skipped;
      }
      *this = Window{};
      return j;
    }
  };

  static std::string format(double x) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.4g", x);
    return buffer;
  }

  // --- set-up -------------------------------------------------------------

  void load_text() { text_ = data::ModelText::load(r_.model.path); }

  // The data from its token cache (data/prepared.hpp), tokenised first when the cache does not match.
  void load_data() {
    Progress bar("prepare", 100);
    const data::PreparedData prepared = data::load_prepared(r_, text_, data::progress_line(bar));
    bar.finish();
    if (!prepared.rebuilt_because.empty()) std::printf("data cache: rebuilt (%s)\n", prepared.rebuilt_because.c_str());
    skipped_rows_ = prepared.metadata["counts"]["skipped"].get<std::int64_t>();
    train_rows_ = prepared.train.size();
    data_cache_ = std::string(prepared.reused ? "reused " : "written to ") + data::cache_dir_of(r_).string();
    train_plan_ = std::make_unique<data::BatchPlan>(prepared.train, r_.train.per_device_train_batch_size,
                                                    r_.data.max_seq_length, r_.data.packing, text_.pad_id,
                                                    std::uint64_t(r_.seed), data::Cover::epochs,
                                                    virtual_tokens());
    if (prepared.validation.size() > 0) {
      const std::int64_t rows = r_.train.per_device_eval_batch_size > 0 ? r_.train.per_device_eval_batch_size
                                                                        : r_.train.per_device_train_batch_size;
      eval_plan_ = std::make_unique<data::BatchPlan>(prepared.validation, rows, r_.data.max_seq_length,
                                                     r_.data.packing, text_.pad_id, std::uint64_t(r_.seed),
                                                     data::Cover::one_pass, virtual_tokens());
    }
  }

  // The prompt's virtual tokens at the start of every row; none without prompt tuning.
  std::int64_t virtual_tokens() const {
    return setup_.adapter == AdapterKind::prompt ? r_.prompt_tuning.num_virtual_tokens : 0;
  }

  void build_model() {
    const bool full = setup_.adapter == AdapterKind::full;
    model_ = std::make_unique<models::Transformer<T>>(models::read_model_spec(r_.model.path), full);
    model_->load(io::ModelWeights::open(r_.model.path));
    model_->set_memory_options({checkpoint_every(r_.train.gradient_checkpointing), r_.train.activation_offloading});
    const bool fused = r_.train.fuse_optimizer_with_backward;
    const index_t L = model_->config().num_layers;
    if (full) {
      trainables_.add("embed", -1, model_->embedding().parameters(), fused);
      for (auto& b : model_->blocks())
        trainables_.add("layers." + std::to_string(b.layer()), b.layer(), b.parameters(), fused);
      if (model_->head().parameters().size() > 0) trainables_.add("head", L, model_->head().parameters(), fused);
      if (fused) share_block_gradients();
    } else if (setup_.adapter == AdapterKind::prompt) {
      prompt_ = std::make_unique<adapters::PromptTuning<T>>(*model_, virtual_tokens(), std::uint64_t(r_.seed));
      if (!r_.prompt_tuning.init_text.empty()) {
        prompt_->init_from_tokens(
            adapters::prompt_init_ids(text_.tokenizer->encode(r_.prompt_tuning.init_text, true), virtual_tokens()));
      }
      trainables_.add("prompt", -1, prompt_->parameters(), fused);
    } else {
      adapters::LoraOptions o;
      o.r = r_.lora.r;
      o.alpha = r_.lora.alpha;
      o.dropout = r_.lora.dropout;
      o.target_modules = r_.lora.target_modules;
      o.seed = std::uint64_t(r_.seed);
      if (o.target_modules.empty()) throw Error("internal: the Trainer resolves lora.target_modules before training");
      lora_ = std::make_unique<adapters::LoraModel<T>>(*model_, o);
      for (auto& b : lora_->blocks())
        trainables_.add("lora.layers." + std::to_string(b->targets()[0].layer), b->targets()[0].layer,
                        b->parameters(), fused);
    }
    trainables_.sync_master_from_storage();
    const double lora_matmul = lora_ ? double(trainables_.parameter_count()) : 0.0;
    flops_per_token_ = flops_per_token(model_->config(), r_.data.max_seq_length, full, lora_matmul);
    const std::filesystem::path model = r_.model.path;
    fingerprint_ = {{"config", hex64(fnv1a(io::read_json_file(model / "config.json").dump()))},
                    {"tokenizer", file_fingerprint(model / "tokenizer.json")}};
  }

  // Fused into backward, a block's gradient is applied and cleared before the
  // next block's backward starts, so all blocks can write into one buffer.
  void share_block_gradients() {
    auto& blocks = model_->blocks();
    const index_t size = blocks.front().parameters().size();
    for (auto& b : blocks)
      if (b.parameters().size() != size) return;  // blocks of different shapes keep their own
    block_gradients_ = Tensor<T>(Shape{size});
    for (auto& b : blocks) b.parameters().share_gradients(block_gradients_);
  }

  // "none" -> 0, "every_block" -> 1, "every_K" -> K (the recipe has checked the spelling).
  static index_t checkpoint_every(const std::string& choice) {
    if (choice == "none") return 0;
    if (choice == "every_block") return 1;
    return std::stoll(choice.substr(std::string("every_").size()));
  }

  std::int64_t total_steps() const {
    if (r_.train.max_steps > 0) return r_.train.max_steps;
    const double micro = r_.train.num_train_epochs * train_plan_->batches_per_epoch();
    return std::max<std::int64_t>(1, std::int64_t(std::ceil(micro / double(r_.train.gradient_accumulation_steps))));
  }

  void describe_run(std::int64_t step) const {
    std::printf("ft train: %s\n", setup_.trainer.c_str());
    std::printf("  model       %s: %s parameters, %s trainable (%.3f%%)\n", r_.model.path.c_str(),
                detail::count_text(double(model_->parameter_count())).c_str(),
                detail::count_text(double(trainables_.parameter_count())).c_str(),
                100.0 * double(trainables_.parameter_count()) / double(model_->parameter_count()));
    std::printf("  adapter     %s\n", setup_.adapter_description.c_str());
    std::printf("  data        %s: %lld rows (%lld skipped), %s micro-batches of %lld x %lld per epoch%s\n",
                r_.data.train.c_str(), (long long)train_rows_, (long long)skipped_rows_,
                format(train_plan_->batches_per_epoch()).c_str(), (long long)r_.train.per_device_train_batch_size,
                (long long)r_.data.max_seq_length, r_.data.packing ? " (packed)" : "");
    std::printf("  data cache  %s\n", data_cache_.c_str());
    std::printf("  steps       %lld (x %lld micro-batches)%s\n", (long long)total_steps_,
                (long long)r_.train.gradient_accumulation_steps,
                step > 0 ? (", resuming after step " + std::to_string(step)).c_str() : "");
    std::printf("  output      %s\n", out_.c_str());
    std::fflush(stdout);
  }

  // --- one step -------------------------------------------------------------

  StepResult train_step(std::int64_t step, double lr) {
    const auto start = std::chrono::steady_clock::now();
    memory::Host::stats().reset_peak();
    const std::int64_t accumulation = r_.train.gradient_accumulation_steps;
    std::vector<models::Batch> batches;
    StepResult s;
    for (data::MicroBatch m : train_plan_->micro_batches(step * accumulation) | ranges::views::take(accumulation)) {
      s.dataset_tokens += m.dataset_tokens;
      s.tokens += m.batch.rows();
      s.scored += m.batch.scored_tokens();
      batches.push_back(std::move(m.batch));
    }
    const double divisor = double(std::max<std::int64_t>(1, s.scored));
    trainables_.begin_step();
    if (r_.train.fuse_optimizer_with_backward) {  // one micro-batch, no clipping, no loss scale (Trainer checks)
      if (lora_) lora_->set_dropout(true, derive_key(std::uint64_t(r_.seed), std::uint64_t(step)));
      double squares = 0;
      ++optimizer_step_;
      s.loss = model_->forward_backward(batches[0], {.token_count = divisor}, nullptr, [&](index_t stage) {
        squares += trainables_.step_stage(stage, lr, optimizer_step_);
      }) / divisor;
      s.grad_norm = std::sqrt(squares);
      s.seconds = detail::seconds_since(start);
      return s;
    }
    double loss_sum = 0;
    for (std::int64_t k = 0; k < accumulation; ++k) {
      if (lora_) lora_->set_dropout(true, derive_key(std::uint64_t(r_.seed), std::uint64_t(step * accumulation + k)));
      loss_sum += model_->forward_backward(batches[std::size_t(k)], {.token_count = divisor / loss_scale_});
      trainables_.end_micro_batch();
    }
    s.loss = loss_sum / divisor;
    if (setup_.loss_scaling) trainables_.scale_grads(1.0 / loss_scale_);
    s.grad_norm = trainables_.clip(r_.train.max_grad_norm);
    if (setup_.loss_scaling && !std::isfinite(s.grad_norm)) {
      s.skipped = true;  // overflow in f16: this step's update is dropped, the scale lowered
      loss_scale_ /= 2;
      good_steps_ = 0;
    } else {
      trainables_.step(lr, ++optimizer_step_);
      if (setup_.loss_scaling && ++good_steps_ == 2000) {
        loss_scale_ *= 2;
        good_steps_ = 0;
      }
    }
    s.seconds = detail::seconds_since(start);
    return s;
  }

  void evaluate(std::int64_t step) {
    if (!eval_plan_) return;
    if (lora_) lora_->set_dropout(false, 0);
    double loss = 0;
    std::int64_t scored = 0;
    for (const data::MicroBatch& m : eval_plan_->micro_batches()) {
      loss += model_->forward_backward(m.batch, {.backward = false});
      scored += m.batch.scored_tokens();
    }
    nlohmann::ordered_json j;
    j["step"] = step;
    j["loss"] = loss / double(std::max<std::int64_t>(1, scored));
    j["perplexity"] = std::exp(j["loss"].get<double>());
    j["tokens"] = scored;
    log_->log("eval", j);
  }

  // --- checkpoints ----------------------------------------------------------

  std::vector<StateArray> state_arrays() {
    std::vector<StateArray> arrays;
    for (auto& b : trainables_.buffers()) {
      for (StateArray a : b.optimizer->state()) {
        a.name = b.name + "/" + a.name;
        arrays.push_back(std::move(a));
      }
      if constexpr (TrainableSet<T, M>::has_master)
        arrays.push_back({b.name + "/master", io::safetensors_dtype_of<M>(), b.master.data(),
                          b.master.size() * sizeof(M)});
    }
    return arrays;
  }

  nlohmann::ordered_json trainer_state(std::int64_t step) const {
    nlohmann::ordered_json j;
    j["global_step"] = step;
    j["optimizer_step"] = optimizer_step_;
    j["loss_scale"] = loss_scale_;
    j["good_steps"] = good_steps_;
    j["micro_batches_done"] = step * r_.train.gradient_accumulation_steps;
    j["trainer"] = setup_.trainer;
    j["seed"] = r_.seed;
    j["model"] = fingerprint_;
    j["data"] = {{"train", r_.data.train},
                 {"rows", train_rows_},
                 {"per_device_train_batch_size", r_.train.per_device_train_batch_size},
                 {"gradient_accumulation_steps", r_.train.gradient_accumulation_steps},
                 {"max_seq_length", r_.data.max_seq_length},
                 {"packing", r_.data.packing}};
    return j;
  }

  void write_trainables(const std::filesystem::path& dir) {
    if (lora_) adapters::save_peft_adapter(*lora_, model_->config(), r_.model.path, dir, "F32");
    else if (prompt_)
      adapters::save_peft_prompt(*prompt_, model_->config(), {r_.model.path, r_.prompt_tuning.init_text}, dir);
    else models::save_pretrained(*model_, r_.model.path, dir, io::safetensors_dtype_of<T>());
  }

  void save_checkpoint(std::int64_t step) {
    const std::string name = checkpoint_name(step);
    io::write_directory_atomically(
        out_ / name,
        [&](const std::filesystem::path& dir) {
          write_trainables(dir);
          write_state(dir / "optimizer.safetensors", state_arrays());
          write_json(dir / "trainer_state.json", trainer_state(step));
        },
        true);
    update_latest(out_, name);
    prune_checkpoints(out_, r_.checkpoint.save_total_limit);
    last_checkpoint_ = (out_ / name).string();
    if (log_) log_->say("saved " + last_checkpoint_);
  }

  // Restores everything a step depends on; returns the step to continue after.
  std::int64_t resume(const std::filesystem::path& dir) {
    const nlohmann::json state = io::read_json_file(dir / "trainer_state.json");
    const std::string where = (dir / "trainer_state.json").string() + ": ";
    if (state.value("model", nlohmann::json()) != nlohmann::json(fingerprint_)) {
      const bool tokenizer = state["model"].value("tokenizer", "") != fingerprint_["tokenizer"].get<std::string>();
      throw Error(where + "was written for another " + (tokenizer ? "tokenizer" : "model configuration") +
                  " than " + r_.model.path + " has; resuming would continue a different run");
    }
    if (state.value("trainer", "") != setup_.trainer)
      throw Error(where + "was written by " + state.value("trainer", "?") + ", this recipe builds " + setup_.trainer);
    if (lora_) adapters::load_peft_adapter(*lora_, model_->config(), dir);
    else if (prompt_) adapters::load_peft_prompt(*prompt_, model_->config(), dir);
    else model_->load(io::ModelWeights::open(dir));
    trainables_.sync_master_from_storage();
    read_state(dir / "optimizer.safetensors", state_arrays());
    optimizer_step_ = state.at("optimizer_step").get<std::int64_t>();
    loss_scale_ = state.at("loss_scale").get<double>();
    good_steps_ = state.at("good_steps").get<std::int64_t>();
    last_checkpoint_ = dir.string();
    return state.at("global_step").get<std::int64_t>();
  }

  void save_final() {
    if (lora_ || prompt_) {
      const auto adapter = out_ / "adapter";
      io::write_directory_atomically(adapter, [&](const auto& dir) { write_trainables(dir); }, true);
      std::printf("adapter (PEFT) in %s\n", adapter.c_str());
      if (lora_ && r_.lora.save_merged) {
        lora_->merge_into_model();
        const auto merged = out_ / "merged";
        io::write_directory_atomically(
            merged,
            [&](const auto& dir) { models::save_pretrained(*model_, r_.model.path, dir, io::safetensors_dtype_of<T>()); },
            true);
        std::printf("merged model (HF) in %s\n", merged.c_str());
      }
    } else {
      const auto model = out_ / "model";
      io::write_directory_atomically(model, [&](const auto& dir) { write_trainables(dir); }, true);
      std::printf("model (HF) in %s\n", model.c_str());
    }
    std::fflush(stdout);
  }

  // --- preview --------------------------------------------------------------

  std::string preview() {
    if (lora_) lora_->set_dropout(false, 0);
    std::string prompt = r_.preview.prompt;
    if (text_.chat) {
      data::ChatOptions options = text_.special;
      options.add_generation_prompt = true;
      prompt = data::apply_chat_template(
          *text_.chat, nlohmann::ordered_json::array({{{"role", "user"}, {"content", prompt}}}), options);
    } else {
      prompt = data::alpaca_prompt(prompt, "");
    }
    // A rendered template already has its special tokens.
    const std::vector<std::int32_t> tokens = text_.tokenizer->encode(prompt, !text_.chat);
    const auto answer = generate_greedy(*model_, tokens, r_.preview.max_new_tokens, text_.eos_id, virtual_tokens());
    return "\"" + r_.preview.prompt + "\" -> \"" + text_.tokenizer->decode(answer) + "\"";
  }

  recipe::Recipe r_;
  EngineSetup setup_;
  TrainableSet<T, M> trainables_;
  std::filesystem::path out_;
  data::ModelText text_;
  std::string data_cache_;  // where the tokenised data came from, for the run's header
  std::unique_ptr<data::BatchPlan> train_plan_, eval_plan_;
  std::int64_t train_rows_ = 0, skipped_rows_ = 0, total_steps_ = 0;
  std::unique_ptr<models::Transformer<T>> model_;
  std::unique_ptr<adapters::LoraModel<T>> lora_;
  std::unique_ptr<adapters::PromptTuning<T>> prompt_;
  Tensor<T> block_gradients_;  // shared by every block when the optimizer is fused into backward
  nlohmann::ordered_json fingerprint_;
  double flops_per_token_ = 0, peak_flops_ = 1;
  double loss_scale_ = 1;
  std::int64_t optimizer_step_ = 0, good_steps_ = 0;
  std::string last_checkpoint_ = "none";
  MetricsLog* log_ = nullptr;
};

}  // namespace ft::train
