// ftrun estimate: the memory a recipe's run will take, per rank, before
// anything is allocated (ft/estimate/memory.hpp), and the same for the
// other parallelisms and checkpointing, as DeepSpeed's estimator tables do
// but with activations and what ft really allocates.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include <ft/core/bytes.hpp>
#include <ft/estimate/memory_estimate.hpp>
#include <ft/recipe/load.hpp>
#include <ft/stock.hpp>

#include "commands.hpp"
#include "exit_code.hpp"
#include "model_reading.hpp"
#include "memory_fit.hpp"
#include "plugin_search.hpp"

namespace ftrun {

struct EstimateOptions {
  std::string recipe;
  std::vector<std::string> sets;     // --set section.key=value
  std::vector<std::string> plugins;  // --plugin FILE, as train loads them
  bool json = false;
};

namespace {

nlohmann::ordered_json terms_json(const std::vector<ft::estimate::Term>& terms) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& t : terms) out.push_back({{"name", t.name}, {"bytes", t.bytes}, {"detail", t.detail}});
  return out;
}

// A phase's peak over the ranks, as metrics.jsonl records it (the largest
// rank's): ranks may peak in different phases (a pipeline's first rank in
// setup, its last in a step).
std::uint64_t largest_rank(const std::vector<ft::estimate::MemoryEstimate>& ranks,
                           std::uint64_t (ft::estimate::MemoryEstimate::*phase)() const) {
  std::uint64_t n = 0;
  for (const auto& one : ranks) n = std::max(n, (one.*phase)());
  return n;
}

// The rank with the largest peak in detail; each phase's peak over every rank.
nlohmann::ordered_json to_json(const ft::estimate::MemoryEstimate& e,
                               const std::vector<ft::estimate::MemoryEstimate>& by_rank) {
  using ft::estimate::MemoryEstimate;
  return {{"device", e.device},
          {"rank", e.rank},
          {"ranks", e.ranks},
          {"micro_batch", {{"rows", e.rows}, {"tokens", e.tokens}}},
          {"micro_batches_in_flight", e.in_flight},
          {"held", terms_json(e.held)},
          {"activations", terms_json(e.activations)},
          {"step_workspace", {{"bytes", e.step_workspace.bytes}, {"detail", e.step_workspace.detail}}},
          {"eval_workspace", {{"bytes", e.eval_workspace.bytes}, {"detail", e.eval_workspace.detail}}},
          {"save_workspace", {{"bytes", e.save_workspace.bytes}, {"detail", e.save_workspace.detail}}},
          {"setup_workspace", {{"bytes", e.setup_workspace.bytes}, {"detail", e.setup_workspace.detail}}},
          {"host", terms_json(e.host)},
          {"process_bytes", e.process_bytes},
          {"file_tensor_bytes", e.file_tensor_bytes},
          {"comm_scratch", {{"bytes", e.comm_scratch.bytes}, {"detail", e.comm_scratch.detail}}},
          {"heap_weights", {{"bytes", e.heap_weights.bytes}, {"detail", e.heap_weights.detail}}},
          {"step_peak_bytes", largest_rank(by_rank, &MemoryEstimate::step_peak)},
          {"eval_peak_bytes", largest_rank(by_rank, &MemoryEstimate::eval_peak)},
          {"save_peak_bytes", largest_rank(by_rank, &MemoryEstimate::save_peak)},
          {"setup_peak_bytes", largest_rank(by_rank, &MemoryEstimate::setup_peak)},
          {"peak_bytes", e.peak()},
          {"peak_phase", e.peak_phase()},
          {"host_peak_bytes", largest_rank(by_rank, &MemoryEstimate::host_peak)}};
}

void print_terms(const char* heading, const std::vector<ft::estimate::Term>& terms) {
  std::printf("  %s\n", heading);
  for (const auto& t : terms)
    if (t.bytes > 0) std::printf("    %-28s %12s   %s\n", t.name.c_str(), ft::format_bytes(t.bytes).c_str(), t.detail.c_str());
}

// The recipe under another parallelism and checkpointing choice.
struct Option {
  std::string parallelism, checkpointing;
  std::int64_t nproc;
};

}  // namespace

int run_estimate(const EstimateOptions& options) {
  try {
    const auto loaded = ft::recipe::load<ft::recipe::Recipe>(options.recipe, options.sets);
    const ft::recipe::Recipe& r = loaded.recipe;
    // A run's process loads the plugins before it allocates (on the CPU, not
    // the stock CUDA ones); so does this one, which then measures itself as
    // what every rank starts from.
    PluginSearch loaded_plugins = find_plugins(options.plugins, r.strategy.device);
    const ft::models::ModelReading model = read_model(r.model.path, loaded_plugins);
    const ft::estimate::Declarations declared = declarations_of(loaded_plugins.registry);
    std::vector<ft::estimate::MemoryEstimate> by_rank = ft::estimate::estimate_memory_by_rank(r, model, declared);
    std::int64_t widest_rows = 0;
    for (const auto& one : by_rank) widest_rows = std::max(widest_rows, one.widest_product_rows);
    const std::uint64_t process = starting_process_bytes(r, widest_rows);
    for (auto& one : by_rank) one.process_bytes = process;
    const ft::estimate::MemoryEstimate& e = ft::estimate::largest_peak_rank(by_rank);

    // The other choices, at the recipe's ranks (2 when it has one).
    const std::int64_t ranks = r.launch.nproc > 1 ? r.launch.nproc : 2;
    using namespace ft::parallel;
    std::vector<Option> choices{{std::string(Single::name), "none", 1}, {std::string(Single::name), "every_block", 1}};
    for (std::string_view p : {DDP::name, ZeRO<1>::name, ZeRO<2>::name, ZeRO<3>::name})
      for (const char* k : {"none", "every_block"}) choices.push_back({std::string(p), k, ranks});
    std::vector<std::pair<Option, ft::estimate::MemoryEstimate>> table;
    for (const Option& o : choices) {
      ft::recipe::Recipe other = r;
      other.strategy.parallelism = o.parallelism;
      other.train.gradient_checkpointing = o.checkpointing;
      other.launch.nproc = o.nproc;
      table.emplace_back(o, ft::estimate::estimate_memory(other, model, declared));
      table.back().second.process_bytes = process;
    }

    if (options.json) {
      nlohmann::ordered_json j = to_json(e, by_rank);
      nlohmann::ordered_json others = nlohmann::ordered_json::array();
      for (const auto& [o, est] : table)
        others.push_back({{"parallelism", o.parallelism},
                          {"gradient_checkpointing", o.checkpointing},
                          {"nproc", o.nproc},
                          {"peak_bytes", est.peak()},
                          {"host_peak_bytes", est.host_peak()},
                          {"held_bytes", est.held_bytes()},
                          {"activation_bytes", est.activation_bytes()}});
      j["options"] = others;
      nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
      for (const auto& one : by_rank)
        ranks.push_back({{"rank", one.rank},
                         {"held_bytes", one.held_bytes()},
                         {"activation_bytes", one.activation_bytes()},
                         {"step_peak_bytes", one.step_peak()},
                         {"eval_peak_bytes", one.eval_peak()},
                         {"save_peak_bytes", one.save_peak()},
                         {"setup_peak_bytes", one.setup_peak()},
                         {"peak_bytes", one.peak()},
                         {"host_peak_bytes", one.host_peak()}});
      j["by_rank"] = ranks;
      std::printf("%s\n", j.dump(2).c_str());
      return ok;
    }

    std::printf("ftrun estimate: %s\n", options.recipe.c_str());
    std::printf("  %s, %s, %s, %s on %s; rank %d of %d; micro-batch %lld x %lld tokens%s\n",
                r.strategy.precision.c_str(), r.strategy.parallelism.c_str(), r.strategy.optimizer.c_str(),
                r.strategy.adapter.c_str(), e.device.c_str(), e.rank, e.ranks, (long long)e.rows, (long long)e.tokens,
                e.in_flight > 1 ? (", " + std::to_string(e.in_flight) + " in flight").c_str() : "");
    if (!e.pipeline.empty()) std::printf("  pipeline ranks' stages\n%s", e.pipeline.c_str());
    print_terms("held for the whole run", e.held);
    print_terms("a micro-batch's buffers, kept between steps", e.activations);
    std::printf("  workspace\n");
    for (const auto& [phase, term] : {std::pair{"step", &e.step_workspace}, std::pair{"evaluation", &e.eval_workspace},
                                      std::pair{"saving", &e.save_workspace}, std::pair{"setup", &e.setup_workspace}})
      if (term->bytes > 0 || phase != std::string("saving"))
        std::printf("    %-28s %12s   %s\n", phase, ft::format_bytes(term->bytes).c_str(), term->detail.c_str());
    if (!e.host.empty()) print_terms("host memory beside the device's", e.host);
    std::printf("  peak  %s in the %s (step %s, evaluation %s, saving %s, setup %s)\n", ft::format_bytes(e.peak()).c_str(),
                e.peak_phase().c_str(), ft::format_bytes(e.step_peak()).c_str(), ft::format_bytes(e.eval_peak()).c_str(),
                ft::format_bytes(e.save_peak()).c_str(), ft::format_bytes(e.setup_peak()).c_str());
    print_terms("resident beside the allocator's",
                {{"this process", e.process_bytes, "code, libraries and plugins, measured before the run allocates"},
                 {"a tensor being loaded", e.file_tensor_bytes, "the model file's largest, while it is converted"},
                 e.comm_scratch, e.heap_weights});
    std::printf("  resident peak  %s (max RSS)\n", ft::format_bytes(e.host_peak()).c_str());
    if (by_rank.size() > 1) {
      std::printf("\n  every rank (the one reported above has the largest peak):\n");
      std::printf("    %5s %12s %12s %12s %12s %12s\n", "rank", "held", "activations", "setup peak", "step peak", "peak");
      for (const auto& one : by_rank)
        std::printf("    %5d %12s %12s %12s %12s %12s\n", one.rank, ft::format_bytes(one.held_bytes()).c_str(),
                    ft::format_bytes(one.activation_bytes()).c_str(), ft::format_bytes(one.setup_peak()).c_str(),
                    ft::format_bytes(one.step_peak()).c_str(), ft::format_bytes(one.peak()).c_str());
    }
    std::printf("\n  per rank, other choices (held + activations + workspace = peak; resident: max RSS):\n");
    std::printf("    %-11s %-14s %5s %12s %12s %12s %12s\n", "parallelism", "checkpointing", "ranks", "held",
                "activations", "peak", "resident");
    for (const auto& [o, est] : table)
      std::printf("    %-11s %-14s %5lld %12s %12s %12s %12s\n", o.parallelism.c_str(), o.checkpointing.c_str(),
                  (long long)o.nproc, ft::format_bytes(est.held_bytes()).c_str(), ft::format_bytes(est.activation_bytes()).c_str(),
                  ft::format_bytes(est.peak()).c_str(), ft::format_bytes(est.host_peak()).c_str());
    return ok;
  } catch (const ft::Error& e) {
    std::cerr << "ftrun: " << e.what() << "\n";
    return bad_input;
  }
}

Command add_estimate_command(CLI::App& app) {
  auto o = std::make_shared<EstimateOptions>();
  CLI::App* command = app.add_subcommand("estimate", "Memory a recipe's run will take, per rank, before it allocates "
                                                  "anything: every term, the peak phase, and the other parallelisms");
  add_recipe_options(command, o->recipe, o->sets);
  command->add_flag("--json", o->json, "Print one JSON object instead of tables");
  command->add_option("--plugin", o->plugins, "Also load this plugin file, as train would (repeatable)");
  return {command, [o] { return run_estimate(*o); }};
}

}  // namespace ftrun
