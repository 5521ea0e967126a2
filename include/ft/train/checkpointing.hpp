#pragma once
// A run's checkpoints (layout in checkpoint.hpp): the adapter's trained
// parameters, the optimizer state and master weights by name, and the
// trainer state; and reading them back so that the run continues bit for bit.
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "ft/io/hf_config.hpp"
#include "ft/io/staged_directory.hpp"
#include "ft/train/checkpoint.hpp"
#include "ft/train/run.hpp"

namespace ft::train {

template <element T, class M>
nlohmann::ordered_json trainer_state(const Run<T, M>& run, std::int64_t step) {
  const recipe::Recipe& r = run.recipe;
  nlohmann::ordered_json j;
  j["global_step"] = step;
  j["optimizer_step"] = run.optimizer_step;
  j["loss_scale"] = run.loss_scale.value;
  j["good_steps"] = run.loss_scale.good_steps;
  j["micro_batches_done"] = step * r.train.gradient_accumulation_steps;
  j["trainer"] = run.policies.trainer;
  j["seed"] = r.seed;
  j["model"] = run.fingerprint;
  j["data"] = {{"train", r.data.train},
               {"rows", run.train_rows},
               {"per_device_train_batch_size", r.train.per_device_train_batch_size},
               {"gradient_accumulation_steps", r.train.gradient_accumulation_steps},
               {"max_seq_length", r.data.max_seq_length},
               {"packing", r.data.packing}};
  return j;
}

// Writes checkpoint-<step>, points latest at it, prunes old ones; returns its path.
template <element T, class M>
std::filesystem::path save_checkpoint(Run<T, M>& run, std::int64_t step) {
  const std::string name = checkpoint_name(step);
  io::write_directory_atomically(
      run.out / name,
      [&](const std::filesystem::path& dir) {
        run.adapter->save(dir);
        write_state(dir / "optimizer.safetensors", run.parallel->state_arrays());
        write_json(dir / "trainer_state.json", trainer_state(run, step));
      },
      true);
  update_latest(run.out, name);
  prune_checkpoints(run.out, run.recipe.checkpoint.save_total_limit);
  run.last_checkpoint = (run.out / name).string();
  return run.out / name;
}

// Restores everything a step depends on; returns the step to continue after.
template <element T, class M>
std::int64_t resume(Run<T, M>& run, const std::filesystem::path& dir) {
  const nlohmann::json state = io::read_json_file(dir / "trainer_state.json");
  const std::string where = (dir / "trainer_state.json").string() + ": ";
  if (state.value("model", nlohmann::json()) != nlohmann::json(run.fingerprint)) {
    const bool tokenizer = state["model"].value("tokenizer", "") != run.fingerprint["tokenizer"].template get<std::string>();
    throw Error(where + "was written for another " + (tokenizer ? "tokenizer" : "model configuration") + " than " +
                run.recipe.model.path + " has; resuming would continue a different run");
  }
  if (state.value("trainer", "") != run.policies.trainer)
    throw Error(where + "was written by " + state.value("trainer", "?") + ", this recipe builds " + run.policies.trainer);
  run.adapter->load(dir);
  run.parallel->sync_master_from_storage();
  read_state(dir / "optimizer.safetensors", run.parallel->state_arrays());
  run.optimizer_step = state.at("optimizer_step").get<std::int64_t>();
  run.loss_scale.value = state.at("loss_scale").get<double>();
  run.loss_scale.good_steps = state.at("good_steps").get<std::int64_t>();
  run.last_checkpoint = dir.string();
  return state.at("global_step").get<std::int64_t>();
}

}  // namespace ft::train
