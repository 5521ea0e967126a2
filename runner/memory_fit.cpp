#include "memory_fit.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include <ft/core/bytes.hpp>
#include <ft/core/process.hpp>
#include <ft/estimate/memory_estimate.hpp>
#include <ft/device/cpu/gemm.hpp>
#include <ft/stock.hpp>
#include <ft/train/flops.hpp>
#include <ft/train/four_bit_base.hpp>

#include "model_reading.hpp"

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
  const auto quoted = [](std::string_view name) { return "\"" + std::string(name) + "\""; };
  if (r.launch.nproc > 1)
    for (std::string_view stage : {ft::parallel::ZeRO<1>::name, ft::parallel::ZeRO<2>::name, ft::parallel::ZeRO<3>::name})
      if (r.strategy.parallelism != stage)
        add("strategy.parallelism = " + quoted(stage), [&](ft::recipe::Recipe& x) { x.strategy.parallelism = stage; });
  if (r.strategy.optimizer == ft::optim::AdamW::name)
    add("strategy.optimizer = " + quoted(ft::optim::AdamW8bit::name),
        [](ft::recipe::Recipe& x) { x.strategy.optimizer = ft::optim::AdamW8bit::name; });
  if (r.strategy.adapter == ft::adapters::Full::name)
    add("strategy.adapter = " + quoted(ft::adapters::LoRA::name),
        [](ft::recipe::Recipe& x) { x.strategy.adapter = ft::adapters::LoRA::name; });
  // An adapter's frozen base can be 4-bit (QLoRA).
  else if (!ft::train::four_bit_base(r).any())
    add("model.quantize = \"nf4\" (a 4-bit base, as QLoRA)", [](ft::recipe::Recipe& x) { x.model.quantize = "nf4"; });
  return out;
}

}  // namespace

int threads_per_rank(std::int64_t nproc) {
  if (const char* threads = std::getenv("OMP_NUM_THREADS"); threads && std::atoi(threads) > 0) return std::atoi(threads);
  const long cores = long(std::max(1u, std::thread::hardware_concurrency()));
  return int(std::max(1L, cores / long(std::max<std::int64_t>(1, nproc))));
}

std::uint64_t starting_process_bytes(const ft::recipe::Recipe& r, std::int64_t widest_rows) {
  if (r.strategy.device != "cpu") return ft::resident_bytes();
  // A run's setup begins with a product that measures the GEMM peak
  // (train/flops.hpp); on the CPU it makes BLAS touch the buffers it keeps
  // per thread, and the run's widest products touch more of them (OpenBLAS
  // packs a call's rows by its inner block: device/cpu/gemm.hpp). One product
  // of each shape touches them here, with a rank's threads; an inner
  // dimension of 1024 reaches any inner block. Their matrices are ft's to
  // count, not the process's: their cached pages go back.
  struct RankThreads {  // a rank's threads for the products, this process's again after
    int mine = omp_get_max_threads();
    explicit RankThreads(int rank) { omp_set_num_threads(rank); }
    ~RankThreads() { omp_set_num_threads(mine); }
  } rank_threads(threads_per_rank(r.launch.nproc));
  ft::train::measure_gemm_peak<ft::device::Cpu, float>(ft::device::Cpu::gemm_peak_size, 0);
  {
    const ft::index_t rows = std::min<ft::index_t>(widest_rows, ft::blas_row_block), inner = 1024, columns = 16;
    const ft::memory::HostVector<float> a(std::size_t(inner * rows), 1.0f), b(std::size_t(inner * columns), 1.0f);
    ft::memory::HostVector<float> c(std::size_t(rows * columns));
    ft::gemm<float>(ft::Op::transpose, ft::Op::none, rows, columns, inner, 1.0f, a.data(), rows, b.data(), columns,
                    0.0f, c.data(), columns);
  }
  ft::memory::Host::release_cached();
  return ft::resident_bytes();
}

std::string check_memory_fits(const ft::recipe::Loaded<ft::recipe::Recipe>& loaded, std::int64_t ranks_here, bool starts_ranks,
                              PluginSearch& plugins) {
  const ft::recipe::Recipe& r = loaded.recipe;
  if (!r.launch.memory_check) return {};
  std::uint64_t available = 0;
  std::string source;
  // launch.memory_limit bounds ft's allocator (a device's memory, or the
  // host's); the host's available memory bounds the whole process, less
  // what this process already holds when it is the one that trains (ranks
  // about to be started bring their own).
  bool resident = false;
  if (!r.launch.memory_limit.empty()) {
    available = ft::parse_bytes(r.launch.memory_limit).value_or(0);
    source = "launch.memory_limit = \"" + r.launch.memory_limit + "\"";
  } else if (r.strategy.device == "cpu") {
    available = ft::meminfo_bytes("MemAvailable") / std::uint64_t(std::max<std::int64_t>(1, ranks_here));  // what new allocations can get without swapping
    source = "the host's available memory" + (ranks_here > 1 ? " over " + std::to_string(ranks_here) + " ranks" : "");
    resident = true;
  }
  if (available == 0) return {};
  // This process as it is now: without the BLAS buffers that setup's first
  // product will touch (starting_process_bytes), which a check need not wait for.
  const std::uint64_t process = ft::resident_bytes(), held_already = resident && !starts_ranks ? process : 0;
  auto need = [&](ft::estimate::MemoryEstimate e) {
    e.process_bytes = process;
    return resident ? e.host_peak() - std::min(held_already, e.host_peak()) : e.peak();
  };

  ft::models::ModelReading model;
  const ft::estimate::Declarations declared = declarations_of(plugins.registry);
  ft::estimate::MemoryEstimate estimate;
  try {
    model = read_model(r.model.path, plugins);
    estimate = ft::estimate::estimate_memory(r, model, declared);
  } catch (const ft::Error& e) {
    return e.what();  // a policy the estimate has no model for: nothing to compare, and the caller says so
  }
  const std::uint64_t needed = need(estimate);
  if (needed <= available) return {};

  const ft::estimate::Term largest = estimate.largest();
  std::ostringstream why;
  why << "this run needs about " << ft::format_bytes(needed) << (held_already ? " more" : "") << " per rank at its peak (the " << estimate.peak_phase()
      << "; largest part: " << largest.name << ", " << ft::format_bytes(largest.bytes) << "), more than the " << ft::format_bytes(available)
      << " of " << source << ".";
  std::string fits;
  for (const Change& c : changes(r)) {
    try {
      const std::uint64_t peak = need(ft::estimate::estimate_memory(c.recipe, model, declared));
      if (peak <= available) fits += std::string(fits.empty() ? "" : "; ") + c.what + ": " + ft::format_bytes(peak);
    } catch (const ft::Error&) {
    }
  }
  if (fits.empty()) why << " No single change of micro-batch, checkpointing, ZeRO stage, optimizer, adapter or 4-bit base fits; "
                           "see ftrun estimate for the terms";
  else why << " Changes that fit: " << fits;
  why << " (launch.memory_check = false runs it anyway)";
  throw ft::OutOfMemory(why.str(), needed);
}

}  // namespace ftrun
