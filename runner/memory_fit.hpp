#pragma once
// Before a run loads anything: does its estimated peak fit the memory it
// has? A run that will not fit is refused with the largest term and the
// cheapest changes that would fit, each with its own estimate.
#include <ft/recipe/load.hpp>
#include <ft/recipe/recipe.hpp>

namespace ftrun {

// Throws ft::OutOfMemory with that message when the run will not fit; does
// nothing when it fits, when launch.memory_check is off, or when the memory
// available is not known (a GPU without launch.memory_limit). The host's
// available memory is shared by `ranks_here`, the job's ranks on this machine.
void check_memory_fits(const ft::recipe::Loaded<ft::recipe::Recipe>& loaded, std::int64_t ranks_here);

}  // namespace ftrun
