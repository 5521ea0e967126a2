#pragma once
// A run's checkpoints (layout in checkpoint.hpp): the adapter's trained
// parameters, the optimizer state and master weights by name, and the
// trainer state; and reading them back so that the run continues bit for bit.
//
// In a job of several ranks rank 0 makes the staging directory and writes
// the weights and the trainer state; when the optimizer state is sharded
// every rank writes its shard beside them; once all have written, rank 0
// renames the directory into place and moves `latest`. A checkpoint written
// by one sharding reads back into any other (ranges are recorded), as long
// as each optimizer step sees the same rows: the global batch
// (per-device batch x accumulation x ranks) must not change.
#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "ft/io/hf_config.hpp"
#include "ft/io/staged_directory.hpp"
#include "ft/train/checkpoint.hpp"
#include "ft/train/run.hpp"

namespace ft::train {

template <element T, class M, class D>
nlohmann::ordered_json trainer_state(const Run<T, M, D>& run, std::int64_t step) {
  const recipe::Recipe& r = run.recipe;
  nlohmann::ordered_json j;
  j["global_step"] = step;
  j["optimizer_step"] = run.optimizer_step;
  j["loss_scale"] = run.loss_scale.value;
  j["good_steps"] = run.loss_scale.good_steps;
  j["micro_batches_done"] = step * r.train.gradient_accumulation_steps;
  j["trainer"] = run.policies.trainer;
  j["resumable_as"] = run.policies.resumable_as;
  j["seed"] = r.seed;
  j["expert_parallel"] = r.strategy.expert_parallel;
  j["model"] = run.fingerprint;
  j["objective"] = r.train.objective;
  j["data"] = {{"train", r.data.train},
               {"rows", run.train_rows},
               {"per_device_train_batch_size", r.train.per_device_train_batch_size},
               {"gradient_accumulation_steps", r.train.gradient_accumulation_steps},
               {"ranks", run.parallel->data_shard().world},
               {"max_seq_length", r.data.max_seq_length},
               {"packing", r.data.packing}};
  return j;
}

// Writes checkpoint-<step>, points latest at it, prunes old ones; returns its path.
template <element T, class M, class D>
std::filesystem::path save_checkpoint(Run<T, M, D>& run, std::int64_t step) {
  comm::Communicator& comm = *run.comm;
  const std::string name = checkpoint_name(step);
  run.enter("checkpoint " + name);
  const std::filesystem::path dst = run.out / name;
  const std::string made = comm.rank() == 0 ? io::stage_directory(dst).string() : "";
  const std::filesystem::path staging = comm.all_gather_text(made, "the checkpoint's staging directory")[0];
  const auto shard = run.parallel->state_shard();
  if (shard.writes) write_state(staging / state_file_name(shard.part, shard.parts), run.parallel->state_arrays());
  run.parallel->read_model_on_rank0([&] { run.adapter->save(staging); });
  if (comm.rank() == 0) {
    write_json(staging / "trainer_state.json", trainer_state(run, step));
    if (run.preference && run.preference->kind() == PreferenceKind::dpo) run.reference.write(staging);
  }
  comm.barrier("writing " + name + " on every rank", true);
  if (comm.rank() == 0) {
    io::commit_directory(staging, dst, true);
    update_latest(run.out, name);
    prune_checkpoints(run.out, run.recipe.checkpoint.save_total_limit);
  }
  comm.barrier("renaming " + name + " into place", true);  // rank 0 flushes it to disk first
  run.last_checkpoint = dst.string();
  return dst;
}

// Restores everything a step depends on; returns the step to continue after.
template <element T, class M, class D>
std::int64_t resume(Run<T, M, D>& run, const std::filesystem::path& dir) {
  const nlohmann::json state = io::read_json_file(dir / "trainer_state.json");
  const std::string where = (dir / "trainer_state.json").string() + ": ";
  if (state.value("model", nlohmann::json()) != nlohmann::json(run.fingerprint)) {
    const bool tokenizer = state["model"].value("tokenizer", "") != run.fingerprint["tokenizer"].template get<std::string>();
    throw Error(where + "was written for another " + (tokenizer ? "tokenizer" : "model configuration") + " than " +
                run.recipe.model.path + " has; resuming would continue a different run");
  }
  if (state.value("resumable_as", state.value("trainer", "")) != run.policies.resumable_as)
    throw Error(where + "was written by " + state.value("trainer", "?") + ", this recipe builds " + run.policies.trainer +
                "; only the parallelism and the device may change on resume");
  if (const std::int64_t then = state.value("expert_parallel", std::int64_t(1)); then != run.recipe.strategy.expert_parallel)
    throw Error(where + "was written with strategy.expert_parallel = " + std::to_string(then) + ", this run sets " +
                std::to_string(run.recipe.strategy.expert_parallel) + "; each run of experts keeps its optimizer state "
                "apart, so resume with the same expert_parallel");
  if (const std::string then = state.value("objective", "sft"); then != run.recipe.train.objective)
    throw Error(where + "was written with train.objective = \"" + then + "\", this run sets \"" +
                run.recipe.train.objective + "\"; to start a new objective from its weights, name its adapter or "
                "model as this run's starting point instead of resuming");
  const nlohmann::json data = state.value("data", nlohmann::json::object());
  const recipe::TrainSection& t = run.recipe.train;
  const std::int64_t then = data.value("per_device_train_batch_size", 0) * data.value("gradient_accumulation_steps", 0) *
                            data.value("ranks", 1),
                     now = t.per_device_train_batch_size * t.gradient_accumulation_steps * run.parallel->data_shard().world;
  if (then != now)
    throw Error(where + "was written with a global batch of " + std::to_string(then) + " rows per step, this run takes " +
                std::to_string(now) + " (per_device_train_batch_size x gradient_accumulation_steps x ranks); keep the "
                "product the same to resume (ranks: the data-parallel ones; a pipeline's ranks share rows), so that every step sees the rows it would have seen");
  run.adapter->load(dir);  // a full fine-tune's model loads as at setup: each rank keeps its part
  run.parallel->values_loaded();
  const std::vector<optim::StateArray> arrays = run.parallel->state_arrays();
  std::string mine;
  for (const optim::StateArray& a : arrays) mine += a.name + "\n";
  std::set<std::string> names;
  for (const std::string& text : run.comm->all_gather_text(mine, "the names of the optimizer state")) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) names.insert(line);
  }
  read_state(dir, arrays, names);
  run.optimizer_step = state.at("optimizer_step").get<std::int64_t>();
  run.loss_scale.value = state.at("loss_scale").get<double>();
  run.loss_scale.good_steps = state.at("good_steps").get<std::int64_t>();
  run.last_checkpoint = dir.string();
  return state.at("global_step").get<std::int64_t>();
}

}  // namespace ft::train
