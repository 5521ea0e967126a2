#include "memory_fit.hpp"

#include <sstream>
#include <string>
#include <vector>

#include <ft/core/bytes.hpp>
#include <ft/core/process.hpp>
#include <ft/estimate/memory.hpp>

namespace ftrun {
namespace {

// A change to the recipe and what it is called.
struct Change {
  std::string what;
  ft::recipe::Recipe recipe;
};

// The usual remedies, cheapest first: they cost time, not results.
std::vector<Change> changes(const ft::recipe::Recipe& r) {
  std::vector<Change> out;
  auto add = [&](std::string what, auto edit) {
    Change c{std::move(what), r};
    edit(c.recipe);
    out.push_back(std::move(c));
  };
  if (r.train.per_device_train_batch_size > 1) {
    const auto rows = r.train.per_device_train_batch_size / 2;
    const auto steps = r.train.gradient_accumulation_steps * 2;
    add("train.per_device_train_batch_size = " + std::to_string(rows) + " with gradient_accumulation_steps = " +
            std::to_string(steps) + " (the same batch)",
        [&](ft::recipe::Recipe& x) {
          x.train.per_device_train_batch_size = rows;
          x.train.gradient_accumulation_steps = steps;
        });
  }
  if (r.train.gradient_checkpointing != "every_block")
    add("train.gradient_checkpointing = \"every_block\"",
        [](ft::recipe::Recipe& x) { x.train.gradient_checkpointing = "every_block"; });
  if (r.launch.nproc > 1)
    for (const char* stage : {"zero1", "zero2", "zero3"})
      if (r.strategy.parallelism != stage)
        add(std::string("strategy.parallelism = \"") + stage + "\"",
            [&](ft::recipe::Recipe& x) { x.strategy.parallelism = stage; });
  if (r.strategy.optimizer == "adamw")
    add("strategy.optimizer = \"adamw8bit\"", [](ft::recipe::Recipe& x) { x.strategy.optimizer = "adamw8bit"; });
  if (r.strategy.adapter == "full")
    add("strategy.adapter = \"lora\"", [](ft::recipe::Recipe& x) { x.strategy.adapter = "lora"; });
  return out;
}

}  // namespace

void check_memory_fits(const ft::recipe::Loaded<ft::recipe::Recipe>& loaded, std::int64_t ranks_here) {
  const ft::recipe::Recipe& r = loaded.recipe;
  if (!r.launch.memory_check) return;
  std::uint64_t available = 0;
  std::string source;
  if (!r.launch.memory_limit.empty()) {
    available = ft::parse_bytes(r.launch.memory_limit).value_or(0);
    source = "launch.memory_limit = \"" + r.launch.memory_limit + "\"";
  } else if (r.strategy.device == "cpu") {
    available = ft::meminfo_bytes("MemAvailable") / std::uint64_t(std::max<std::int64_t>(1, ranks_here));  // what new allocations can get without swapping
    source = "the host's available memory" + (ranks_here > 1 ? " over " + std::to_string(ranks_here) + " ranks" : "");
  }
  if (available == 0) return;

  ft::estimate::MemoryEstimate estimate;
  try {
    estimate = ft::estimate::estimate_memory(r);
  } catch (const ft::Error&) {
    return;  // a policy the estimate has no model for: nothing to compare
  }
  if (estimate.peak() <= available) return;

  const ft::estimate::Term largest = estimate.largest();
  std::ostringstream why;
  why << "this run needs about " << ft::format_bytes(estimate.peak()) << " per rank at its peak (the " << estimate.peak_phase()
      << "; largest part: " << largest.name << ", " << ft::format_bytes(largest.bytes) << "), more than the " << ft::format_bytes(available)
      << " of " << source << ".";
  std::string fits;
  for (const Change& c : changes(r)) {
    try {
      const std::uint64_t peak = ft::estimate::estimate_memory(c.recipe).peak();
      if (peak <= available) fits += std::string(fits.empty() ? "" : "; ") + c.what + ": " + ft::format_bytes(peak);
    } catch (const ft::Error&) {
    }
  }
  if (fits.empty()) why << " No single change of micro-batch, checkpointing, ZeRO stage, optimizer or adapter fits; "
                           "see ftrun estimate for the terms";
  else why << " Changes that fit: " << fits;
  why << " (launch.memory_check = false runs it anyway)";
  throw ft::OutOfMemory(why.str(), estimate.peak());
}

}  // namespace ftrun
