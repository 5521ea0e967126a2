#pragma once
// Setting a run up: its text tools, its data as micro-batch plans, its model
// with the adapter attached and the trainable state laid out by the
// parallelism's runtime.
//
// In a job of several ranks every rank sets up the same run: they agree on
// the resolved recipe and the code that runs it before anything else, rank 0
// prepares the token cache while the others wait, and they agree on the
// cache before step 1. Each rank's batch plans hold its shard of the rows.
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <filesystem>
#include <memory>
#include <string>

#include "ft/core/fingerprint.hpp"
#include "ft/core/progress.hpp"
#include "ft/data/prepared.hpp"
#include "ft/io/hf_config.hpp"
#include "ft/io/model_weights.hpp"
#include "ft/recipe/recipe.hpp"
#include "ft/train/flops.hpp"
#include "ft/train/evaluation.hpp"
#include "ft/train/four_bit_base.hpp"
#include "ft/train/run.hpp"

namespace ft::train {

// "none" -> 0, "every_block" -> 1, "every_K" -> K (the recipe has checked the spelling).
inline index_t checkpoint_every(const std::string& choice) {
  if (choice == "none") return 0;
  if (choice == "every_block") return 1;
  return std::stoll(choice.substr(std::string("every_").size()));
}

// Every rank must hold the same `text` (one line per fact); a difference is
// an error naming the first line where rank 0 and another rank differ.
inline void agree(comm::Communicator& comm, const std::string& what, const std::string& text) {
  const std::vector<std::string> all = comm.all_gather_text(text, what);
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    std::istringstream a(all[0]), b(all[r]);
    std::string line_a, line_b;
    while (std::getline(a, line_a) && std::getline(b, line_b) && line_a == line_b) {
    }
    throw Error("rank 0 and rank " + std::to_string(r) + " disagree on " + what + ": rank 0 has \"" + line_a +
                "\", rank " + std::to_string(r) + " has \"" + line_b + "\"");
  }
}

// The file this engine's code was loaded from (a plugin, or the program), and its fingerprint.
template <element T, class M, class D>
std::string engine_code() {
  Dl_info info{};
  if (!::dladdr(reinterpret_cast<void*>(&engine_code<T, M, D>), &info) || !info.dli_fname) return "unknown";
  return std::filesystem::path(info.dli_fname).filename().string() + " " + file_fingerprint(info.dli_fname);
}

// Before anything else: the ranks run the same recipe with the same code.
template <element T, class M, class D>
void agree_on_run(Run<T, M, D>& run) {
  if (run.comm->size() == 1) return;  // nothing to compare, and no file to fingerprint
  agree(*run.comm, "the resolved recipe", recipe::emit(run.recipe));
  agree(*run.comm, "the trainer", run.policies.trainer + "\nbuilt into " + engine_code<T, M, D>());
}

// The tokenizer and chat template, and the adapter's and parallelism's
// runtimes (the batch plans need the virtual tokens and the data shard).
template <element T, class M, class D>
void load_text(Run<T, M, D>& run) {
  run.text = text::ModelText::load(run.recipe.model.path);
  run.adapter = run.policies.adapter(run.recipe);
  run.parallel = run.policies.parallel(*run.comm, run.recipe);
}

// The data from its token cache (data/prepared.hpp), tokenised first when the cache does not match.
template <element T, class M, class D>
void load_data(Run<T, M, D>& run) {
  const recipe::Recipe& r = run.recipe;
  comm::Communicator& comm = *run.comm;
  // Rank 0 tokenises when the cache does not match; the others then map what it wrote.
  data::PreparedData prepared;
  if (comm.rank() == 0) {
    Progress bar("prepare", 100);
    prepared = data::load_prepared(r, run.text, data::progress_line(bar));
    bar.finish();
    if (!prepared.rebuilt_because.empty()) std::printf("data cache: rebuilt (%s)\n", prepared.rebuilt_because.c_str());
  }
  comm.barrier("the token cache that rank 0 prepares", true);
  if (comm.rank() != 0) prepared = data::load_prepared(r, run.text);
  agree(comm, "the token cache " + data::cache_dir_of(r).string(), prepared.metadata.dump(1));
  run.skipped_rows = prepared.metadata["counts"]["skipped"].get<std::int64_t>();
  run.train_rows = prepared.train.size();
  run.data_cache = std::string(prepared.reused ? "reused " : "written to ") + data::cache_dir_of(r).string();
  const index_t virtual_tokens = run.adapter->virtual_tokens();
  const data::Shard shard = run.parallel->data_shard();
  const bool paired = r.data.format == "preference";
  run.train_plan = std::make_unique<data::BatchPlan>(prepared.train, r.train.per_device_train_batch_size,
                                                     r.data.max_seq_length, r.data.packing, run.text.pad_id,
                                                     std::uint64_t(r.seed), data::Cover::epochs, virtual_tokens, shard,
                                                     paired);
  if (prepared.validation.size() > 0) {
    const std::int64_t rows = r.train.per_device_eval_batch_size > 0 ? r.train.per_device_eval_batch_size
                                                                     : r.train.per_device_train_batch_size;
    run.eval_plan = std::make_unique<data::BatchPlan>(prepared.validation, rows, r.data.max_seq_length, r.data.packing,
                                                      run.text.pad_id, std::uint64_t(r.seed), data::Cover::one_pass,
                                                      virtual_tokens, shard, paired);
  }
}

// The model from the family's reading of config.json; its weights, of which
// each rank allocates and loads only what the parallelism keeps there (a
// pipeline rank's stages, ZeRO-3's shards, one stage at a time); the adapter
// on it, and the trainable state in the parallelism's runtime.
template <element T, class M, class D>
void build_model(Run<T, M, D>& run) {
  const recipe::Recipe& r = run.recipe;
  models::ModelSpec spec = run.policies.model(r.model.path);
  run.parallel->shape(spec);
  run.model = std::make_unique<models::Transformer<T, D>>(std::move(spec), run.policies.trains_base_weights,
                                                          models::unallocated);
  run.parallel->place(*run.model, run.policies.optimizer);
  if (const auto quantize = four_bit_base(r).quantize) run.model->quantize_on_load(*quantize);
  run.model->load(io::ModelWeights::open(r.model.path));
  run.model->set_memory_options({checkpoint_every(r.train.gradient_checkpointing), r.train.activation_offloading});
  auto trainables = run.adapter->attach(*run.model, run.text);
  run.parallel->attach(std::move(trainables), r.train.fuse_optimizer_with_backward);
  run.flops_per_token = flops_per_token(run.model->config(), r.data.max_seq_length, run.policies.trains_base_weights,
                                        run.adapter->added_matmul_parameters());
  const std::filesystem::path model = r.model.path;
  run.fingerprint = {{"config", hex64(fnv1a(io::read_json_file(model / "config.json").dump()))},
                     {"tokenizer", file_fingerprint(text::ModelText::tokenizer_file(model))}};
}

// A preference objective (train/preference.hpp); for DPO first the
// reference's log-probabilities, read from the checkpoint a run resumes
// from, or computed from the model as the run starts.
template <element T, class M, class D>
void start_preference(Run<T, M, D>& run, const std::filesystem::path& resume_from) {
  const std::string& objective = run.recipe.train.objective;
  if (objective == "sft") return;
  if (run.model->config().moe.aux_loss_coef > 0)
    throw Error(run.recipe.model.path + ": a mixture of experts with a load-balancing loss (router_aux_loss_coef > 0) "
                "is not yet trained with train.objective = \"" + objective + "\"");
  const PreferenceKind kind = preference_kind(objective);
  if (kind == PreferenceKind::dpo) {
    const std::size_t validation = run.eval_plan ? std::size_t(run.eval_plan->corpus().size()) : 0;
    if (!resume_from.empty()) {
      run.reference = ReferenceLogps::read(resume_from, std::size_t(run.train_plan->corpus().size()), validation);
    } else {
      run.enter("the reference pass");
      const auto start = std::chrono::steady_clock::now();
      // The training pairs this rank's steps take (all its share from the
      // second epoch on), and its share of the validation pairs.
      std::vector<std::int64_t> rows;
      const std::int64_t micro_batches = run.total_steps * run.recipe.train.gradient_accumulation_steps;
      for (std::int64_t g = 0; g < micro_batches && std::int64_t(rows.size()) < run.train_plan->rows(); ++g)
        for (std::int64_t row : run.train_plan->batch_rows(g)) rows.push_back(row);
      run.reference.train = reference_pass(run, *run.train_plan, std::move(rows), "training pairs");
      if (run.eval_plan) {
        std::vector<std::int64_t> mine;
        for (std::int64_t g = 0; g < run.eval_plan->pass_batches(); ++g)
          for (std::int64_t row : run.eval_plan->batch_rows(g)) mine.push_back(row);
        run.reference.validation = reference_pass(run, *run.eval_plan, std::move(mine), "validation pairs");
      }
      run.reference.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }
  run.preference = std::make_unique<PreferenceObjective>(kind, run.recipe.preference);
}

inline std::int64_t total_steps(const recipe::Recipe& r, const data::BatchPlan& plan) {
  if (r.train.max_steps > 0) return r.train.max_steps;
  const double micro = r.train.num_train_epochs * plan.batches_per_epoch();
  return std::max<std::int64_t>(1, std::int64_t(std::ceil(micro / double(r.train.gradient_accumulation_steps))));
}

}  // namespace ft::train
