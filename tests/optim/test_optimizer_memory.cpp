// The memory estimate's optimizer terms (estimate/memory.hpp) against what
// the optimizers allocate: the state each one makes, and the scratch one step
// makes and frees, byte for byte on the CPU and block for block on a device
// whose memory is a caching allocator (the CPU standing in for one). The
// estimate's own tests compare whole runs within 5%; these pin the terms too
// small to move a tiny model's peak that grow with a large one: Adafactor's
// partials per matrix row, 8-bit AdamW's code maps.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <ft/estimate/memory.hpp>
#include <ft/optim/adafactor_runtime.hpp>
#include <ft/optim/quantized_adamw_runtime.hpp>
#include <ft/optim/elementwise_runtimes.hpp>
#include <ft/optim/optimizer.hpp>
#include <ft/train/makers.hpp>

#include "support/cpu_as_device.hpp"

namespace test_optimizer_memory {

namespace {

using namespace ft;

// A buffer as a model lays one out: a factored matrix with many rows, a
// stack of matrices, a vector shorter than a partial's chunk and one longer,
// and a matrix of whole 128-element blocks (which 4-bit AdamW quantizes).
std::vector<models::ParameterEntry> entries_of(index_t& size) {
  std::vector<models::ParameterEntry> out;
  size = 0;
  for (const auto& [name, shape] : {std::pair{"embed", Shape{3000, 24}}, std::pair{"stack", Shape{3, 40, 33}},
                                    std::pair{"norm", Shape{24}}, std::pair{"long", Shape{10000}},
                                    std::pair{"blocks", Shape{64, 128}}}) {
    out.push_back({name, shape, size});
    size += shape.numel();
  }
  return out;
}

template <class Policy, class Device>
void check_terms(const std::string& optimizer, bool cached) {
  using Memory = typename Device::Memory;
  index_t size = 0;
  const std::vector<models::ParameterEntry> entries = entries_of(size);
  recipe::TrainSection t;
  t.momentum = 0.9;         // SGD keeps its momentum
  t.adafactor_beta1 = 0.9;  // Adafactor keeps a first moment
  const estimate::detail::Blocks block{cached};
  INFO(optimizer << (cached ? " on the device" : " on the CPU"));

  memory::Array<float, Memory> p{std::size_t(size)}, g{std::size_t(size)};
  const std::size_t before = Memory::stats().current();
  const auto made = train::make_optimizer_runtime<Policy, float, Device>(entries, size, t);
  CHECK(Memory::stats().current() - before ==
        estimate::detail::optimizer_state_bytes<float>(optimizer, entries, size, t, block));

  const std::size_t held = Memory::stats().current();
  Memory::stats().reset_peak();
  made->step(p.data(), g.data(), 1e-3, 1);
  // Adafactor declares its step's scratch; the others make none.
  const std::uint64_t scratch = estimate::detail::optimizer_step_scratch<float>(optimizer, entries, false, block);
  CHECK((scratch > 0) == (optimizer == "adafactor"));
  CHECK(Memory::stats().peak() - held == scratch);
  CHECK(Memory::stats().current() == held);
}

template <class Device>
void check_every_optimizer(bool cached) {
  check_terms<optim::SGD, Device>("sgd", cached);
  check_terms<optim::AdamW, Device>("adamw", cached);
  check_terms<optim::Lion, Device>("lion", cached);
  check_terms<optim::Adafactor, Device>("adafactor", cached);
  check_terms<optim::AdamW8bit, Device>("adamw8bit", cached);
  check_terms<optim::AdamW4bit, Device>("adamw4bit", cached);
}

}  // namespace

TEST_CASE("the estimate's optimizer state and step scratch are what the optimizers allocate, on the CPU") {
  check_every_optimizer<device::Cpu>(false);
}

TEST_CASE("the estimate's optimizer state and step scratch are the caching allocator's blocks on a device") {
  check_every_optimizer<testing::CpuAsDevice>(true);
}

}  // namespace test_optimizer_memory
