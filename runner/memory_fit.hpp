#pragma once
// Before a run loads anything: does its estimated peak fit the memory it
// has? A run that will not fit is refused with the largest term and the
// cheapest changes that would fit, each with its own estimate.
#include <cstdint>
#include <string>

#include <ft/recipe/load.hpp>
#include <ft/recipe/recipe.hpp>

#include "plugin_search.hpp"

namespace ftrun {

// The threads each rank of a job ftrun starts runs: OMP_NUM_THREADS when
// set, else this machine's cores shared out over `nproc` ranks.
int threads_per_rank(std::int64_t nproc);

// The resident memory a run's process has when it begins to allocate the
// model: this process (code, libraries, the plugins it loaded) after the
// setup's first matrix product and a product of `widest_rows` rows (the
// run's widest, MemoryEstimate::widest_product_rows), which it runs with
// the threads a rank runs, so that BLAS touches what its buffers will hold.
std::uint64_t starting_process_bytes(const ft::recipe::Recipe& recipe, std::int64_t widest_rows);

// Throws ft::OutOfMemory with that message when the run will not fit; does
// nothing when it fits, when launch.memory_check is off, or when the memory
// available is not known (a GPU without launch.memory_limit). The model is
// read and the policies declared through `plugins` (model_reading.hpp);
// returns why the run could not be estimated (a policy that declares
// nothing), empty when it was checked. The host's
// available memory is shared by `ranks_here`, the job's ranks on this
// machine; `starts_ranks` when this process launches them rather than trains.
std::string check_memory_fits(const ft::recipe::Loaded<ft::recipe::Recipe>& loaded, std::int64_t ranks_here,
                              bool starts_ranks, PluginSearch& plugins);

}  // namespace ftrun
