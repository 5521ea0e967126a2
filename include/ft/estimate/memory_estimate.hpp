#pragma once
// What a run will allocate, before it allocates anything, per rank: the
// terms and peaks (this header) and how they are made (estimate/memory.hpp).
// The estimate itself is compiled once, into ft's library
// (src/estimate/memory.cpp): what asks for it (ftrun's estimate, its check
// before a run, its benchmarks) includes this header only, and does not
// compile the model's layers it counts.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ft/estimate/declarations.hpp"
#include "ft/models/weight_map.hpp"
#include "ft/recipe/recipe.hpp"

namespace ft::estimate {

struct Term {
  std::string name;
  std::uint64_t bytes = 0;
  std::string detail;  // what it is made of, in words
};

inline std::uint64_t sum(const std::vector<Term>& terms) {
  std::uint64_t n = 0;
  for (const Term& t : terms) n += t.bytes;
  return n;
}

// One rank's memory: what the device's memory space holds (on the CPU, the
// host's), and on a GPU what the host keeps beside it.
struct MemoryEstimate {
  std::string device = "cpu";
  int rank = 0, ranks = 1;
  std::int64_t rows = 0, tokens = 0;    // a training micro-batch: rows x tokens
  int in_flight = 1;                    // micro-batches whose buffers are kept at once (a pipeline's schedule)
  std::string pipeline;                 // a pipeline's partition: each rank's stages, one line each
  std::vector<Term> held;               // from setup to the end of the run
  std::vector<Term> activations;        // a micro-batch's buffers, kept from step to step
  Term step_workspace, eval_workspace;  // the largest buffers a step (an evaluation) makes and frees
  Term save_workspace;                  // writing a checkpoint or the result (ZeRO-3 gathers stages)
  Term setup_workspace;                 // measuring the device's GEMM peak, before the model exists
  std::vector<Term> host;               // on a GPU: host memory beside the device's
  // What the allocator does not see and RSS does. The process before the
  // run allocates (code, libraries, the loaded plugins and the buffers they
  // make as they load) is measured by the caller, which is such a process;
  // MPI's collectives allocate their own scratch while gradients reduce.
  std::uint64_t process_bytes = 0;
  Term comm_scratch;
  Term heap_weights;  // a 4-bit base's packed weights, on the host heap from setup to the end
  std::uint64_t reducing_workspace = 0;  // the step's workspace while gradients reduce
  // The most rows of C a product of the run has (a micro-batch's tokens
  // forward, a trained weight's rows backward): how much of BLAS's own
  // buffers the run touches, which the caller measures with it.
  std::int64_t widest_product_rows = 0;
  // Loading reads the model file a tensor at a time, its pages resident
  // until it is converted into the weights, which are what is allocated then.
  std::uint64_t loading_weights = 0, file_tensor_bytes = 0;

  std::uint64_t held_bytes() const { return sum(held); }
  std::uint64_t activation_bytes() const { return sum(activations); }
  std::uint64_t setup_peak() const { return setup_workspace.bytes; }
  std::uint64_t step_peak() const { return held_bytes() + activation_bytes() + step_workspace.bytes; }
  std::uint64_t eval_peak() const { return held_bytes() + activation_bytes() + eval_workspace.bytes; }
  std::uint64_t save_peak() const { return held_bytes() + activation_bytes() + save_workspace.bytes; }
  std::uint64_t peak() const { return std::max({setup_peak(), step_peak(), eval_peak(), save_peak()}); }
  // While gradients reduce, MPI's scratch is beside what ft has in use
  // then: the cache of pages keeps room for it rather than the pages of
  // the peak (comm/mpi.hpp, tensor/caching_allocator.hpp).
  std::uint64_t reducing_peak() const {
    if (comm_scratch.bytes == 0) return 0;
    return held_bytes() + activation_bytes() + reducing_workspace + comm_scratch.bytes;
  }
  // The process's resident memory at its peak (max RSS): on the CPU the
  // allocator's peak, loading's file pages, or the reductions' scratch; on
  // a GPU the host terms; both over the measured process.
  std::uint64_t host_peak() const {
    if (device != "cpu") return process_bytes + heap_weights.bytes + sum(host);
    const std::uint64_t loading = loading_weights + file_tensor_bytes;
    return process_bytes + heap_weights.bytes + std::max({peak(), loading, reducing_peak()});
  }
  std::string peak_phase() const {
    if (peak() == step_peak()) return "step";
    if (peak() == eval_peak()) return "evaluation";
    return peak() == save_peak() ? "saving" : "setup";
  }
  // The largest single part of the peak, for a refusal's message.
  Term largest() const {
    const std::string phase = peak_phase();
    if (phase == "setup") return setup_workspace;
    Term best = phase == "step" ? step_workspace : phase == "evaluation" ? eval_workspace : save_workspace;
    for (const auto* list : {&held, &activations})
      for (const Term& t : *list)
        if (t.bytes > best.bytes) best = t;
    return best;
  }
};

// Every rank's estimate, rank 0 first (ranks differ where shards are uneven),
// for the model as its family reads it (models/read.hpp; a plugin's family
// through ftrun) and policies outside ft's list as they declare themselves.
std::vector<MemoryEstimate> estimate_memory_by_rank(recipe::Recipe recipe, const models::ModelReading& model,
                                                    const Declarations& declared = {});

// The same for a model of one of ft's own families.
std::vector<MemoryEstimate> estimate_memory_by_rank(const recipe::Recipe& recipe);

// The rank whose peak is the largest: the one that must fit. The setup's
// measurement is the same on every rank, so ties go to the larger step.
inline const MemoryEstimate& largest_peak_rank(const std::vector<MemoryEstimate>& ranks) {
  return *std::max_element(ranks.begin(), ranks.end(), [](const MemoryEstimate& a, const MemoryEstimate& b) {
    return std::pair(a.peak(), a.step_peak()) < std::pair(b.peak(), b.step_peak());
  });
}
inline MemoryEstimate estimate_memory(const recipe::Recipe& recipe, const models::ModelReading& model,
                                      const Declarations& declared = {}) {
  return largest_peak_rank(estimate_memory_by_rank(recipe, model, declared));
}
inline MemoryEstimate estimate_memory(const recipe::Recipe& recipe) {
  return largest_peak_rank(estimate_memory_by_rank(recipe));
}

}  // namespace ft::estimate
