#pragma once
// Bounds on one rendering. A chat template is code from a model repository,
// so ft treats it as untrusted: whatever it does, rendering ends quickly and
// in bounded memory, with an ft::Error naming the limit it ran into rather
// than a hang or an exhausted machine. The defaults are far above what any
// real chat template needs (they render in microseconds to milliseconds).
//
// Work is counted in steps: one per expression, statement and loop
// iteration, one per item and one per 16 bytes of text that an operation
// builds, copies, scans or compares. Most of that work happens deep in value handling
// (comparing two lists, printing a dict, iterating a string), far from the
// renderer, so the budget of the rendering in progress is reachable from
// there through ActiveBudget, per thread, rather than passed through every
// call.
#include <cstddef>
#include <cstdint>
#include <string>

#include "ft/text/jinja/failure.hpp"
#include "ft/text/jinja/rendered.hpp"

namespace ft::text::jinja {

class Budget {
public:
  explicit Budget(const Limits& limits) : limits_(limits) {}

  const Limits& limits() const { return limits_; }

  void step(std::uint64_t n = 1) {
    steps_ += n;
    if (steps_ > limits_.max_steps)
      fail("rendering exceeded the limit of " + std::to_string(limits_.max_steps) + " steps");
  }

  // A string of `size` bytes or a list of `size` items may be built.
  void check_size(std::size_t size) const {
    if (size > limits_.max_output_bytes)
      fail("rendering would build a value of " + std::to_string(size) + " bytes or items, over the limit of " +
           std::to_string(limits_.max_output_bytes));
  }

  // Checks the size of a value about to be built and charges for it.
  void allocate(std::size_t size) {
    check_size(size);
    step(1 + size / 16);
  }

private:
  Limits limits_;
  std::uint64_t steps_ = 0;
};

// The budget of the rendering in progress on this thread, while one is.
class ActiveBudget {
public:
  explicit ActiveBudget(Budget& budget) : previous_(slot()) { slot() = &budget; }
  ~ActiveBudget() { slot() = previous_; }
  ActiveBudget(const ActiveBudget&) = delete;
  ActiveBudget& operator=(const ActiveBudget&) = delete;

  static Budget* get() { return slot(); }

private:
  static Budget*& slot() {
    static thread_local Budget* active = nullptr;
    return active;
  }
  Budget* previous_;
};

// Charges the active budget (if a rendering is in progress) for work on
// `n` bytes of text, or on `n` items of a list or dict, which cost more.
inline void charge_bytes(std::size_t n) {
  if (Budget* b = ActiveBudget::get()) b->step(1 + n / 16);
}
inline void charge_items(std::size_t n) {
  if (Budget* b = ActiveBudget::get()) b->step(1 + n);
}

// Checks and charges a string of `n` bytes, or a list of `n` items, about to
// be built.
inline void new_string(std::size_t n) {
  if (Budget* b = ActiveBudget::get()) b->allocate(n);
}
inline void new_items(std::size_t n) {
  if (Budget* b = ActiveBudget::get()) {
    b->check_size(n);
    b->step(1 + n);
  }
}

// The largest string or list a rendering may build (1 MiB outside one, where
// the only text built is for messages).
inline std::size_t max_value_size() {
  const Budget* b = ActiveBudget::get();
  return b ? b->limits().max_output_bytes : std::size_t(1) << 20;
}

}  // namespace ft::text::jinja
