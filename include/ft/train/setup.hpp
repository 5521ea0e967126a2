#pragma once
// Setting a run up: its text tools, its data as micro-batch plans, its model
// with the adapter attached and the trainable state laid out by the
// parallelism's runtime.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "ft/core/fingerprint.hpp"
#include "ft/core/progress.hpp"
#include "ft/data/prepared.hpp"
#include "ft/io/hf_config.hpp"
#include "ft/io/model_weights.hpp"
#include "ft/train/flops.hpp"
#include "ft/train/run.hpp"

namespace ft::train {

// "none" -> 0, "every_block" -> 1, "every_K" -> K (the recipe has checked the spelling).
inline index_t checkpoint_every(const std::string& choice) {
  if (choice == "none") return 0;
  if (choice == "every_block") return 1;
  return std::stoll(choice.substr(std::string("every_").size()));
}

// The tokenizer and chat template, and the adapter's runtime (the batch plans
// need its virtual tokens).
template <element T, class M>
void load_text(Run<T, M>& run) {
  run.text = data::ModelText::load(run.recipe.model.path);
  run.adapter = run.policies.adapter(run.recipe);
}

// The data from its token cache (data/prepared.hpp), tokenised first when the cache does not match.
template <element T, class M>
void load_data(Run<T, M>& run) {
  const recipe::Recipe& r = run.recipe;
  Progress bar("prepare", 100);
  const data::PreparedData prepared = data::load_prepared(r, run.text, data::progress_line(bar));
  bar.finish();
  if (!prepared.rebuilt_because.empty()) std::printf("data cache: rebuilt (%s)\n", prepared.rebuilt_because.c_str());
  run.skipped_rows = prepared.metadata["counts"]["skipped"].get<std::int64_t>();
  run.train_rows = prepared.train.size();
  run.data_cache = std::string(prepared.reused ? "reused " : "written to ") + data::cache_dir_of(r).string();
  const index_t virtual_tokens = run.adapter->virtual_tokens();
  run.train_plan = std::make_unique<data::BatchPlan>(prepared.train, r.train.per_device_train_batch_size,
                                                     r.data.max_seq_length, r.data.packing, run.text.pad_id,
                                                     std::uint64_t(r.seed), data::Cover::epochs, virtual_tokens);
  if (prepared.validation.size() > 0) {
    const std::int64_t rows = r.train.per_device_eval_batch_size > 0 ? r.train.per_device_eval_batch_size
                                                                     : r.train.per_device_train_batch_size;
    run.eval_plan = std::make_unique<data::BatchPlan>(prepared.validation, rows, r.data.max_seq_length, r.data.packing,
                                                      run.text.pad_id, std::uint64_t(r.seed), data::Cover::one_pass,
                                                      virtual_tokens);
  }
}

// The model from the family's reading of config.json, its weights, the
// adapter on it, and the trainable state in the parallelism's runtime.
template <element T, class M>
void build_model(Run<T, M>& run) {
  const recipe::Recipe& r = run.recipe;
  run.model = std::make_unique<models::Transformer<T>>(run.policies.model(r.model.path),
                                                       run.policies.trains_base_weights);
  run.model->load(io::ModelWeights::open(r.model.path));
  run.model->set_memory_options({checkpoint_every(r.train.gradient_checkpointing), r.train.activation_offloading});
  auto trainables = run.adapter->attach(*run.model, run.text);
  run.parallel = run.policies.parallel(*run.comm);
  run.parallel->attach(*run.model, std::move(trainables), run.policies.optimizer, r.train.fuse_optimizer_with_backward);
  run.flops_per_token = flops_per_token(run.model->config(), r.data.max_seq_length, run.policies.trains_base_weights,
                                        run.adapter->added_matmul_parameters());
  const std::filesystem::path model = r.model.path;
  run.fingerprint = {{"config", hex64(fnv1a(io::read_json_file(model / "config.json").dump()))},
                     {"tokenizer", file_fingerprint(model / "tokenizer.json")}};
}

inline std::int64_t total_steps(const recipe::Recipe& r, const data::BatchPlan& plan) {
  if (r.train.max_steps > 0) return r.train.max_steps;
  const double micro = r.train.num_train_epochs * plan.batches_per_epoch();
  return std::max<std::int64_t>(1, std::int64_t(std::ceil(micro / double(r.train.gradient_accumulation_steps))));
}

}  // namespace ft::train
