#pragma once
// Learning-rate schedules as HF's get_scheduler defines them: the rate at
// optimizer step s (0-based, the rate used by the step about to run) is
// lr * factor(s), with warmup rising linearly from 0 over `warmup_steps`.
//
//   constant   1 (no warmup; "constant_with_warmup" adds one)
//   linear     warmup, then (total - s) / (total - warmup), down to 0
//   cosine     warmup, then 0.5 (1 + cos(pi * cycles * 2 * progress))
//              with progress = (s - warmup) / (total - warmup), cycles 0.5
//
// Warmup given as a ratio of the total steps rounds up, as HF does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

#include "ft/core/error.hpp"

namespace ft::optim {

enum class ScheduleKind { constant, constant_with_warmup, linear, cosine };

inline ScheduleKind schedule_from_name(const std::string& name) {
  if (name == "constant") return ScheduleKind::constant;
  if (name == "constant_with_warmup") return ScheduleKind::constant_with_warmup;
  if (name == "linear") return ScheduleKind::linear;
  if (name == "cosine") return ScheduleKind::cosine;
  throw Error("lr_scheduler_type \"" + name + "\" is not supported; allowed: constant, constant_with_warmup, linear, cosine");
}

// HF's TrainingArguments.get_warmup_steps: warmup_steps wins when set, else ceil(ratio * total).
inline std::int64_t warmup_steps(std::int64_t steps, double ratio, std::int64_t total) {
  return steps > 0 ? steps : std::int64_t(std::ceil(ratio * double(total)));
}

struct Schedule {
  ScheduleKind kind = ScheduleKind::linear;
  double lr = 1e-3;
  std::int64_t warmup = 0, total = 1;

  double factor(std::int64_t s) const {
    if (kind == ScheduleKind::constant) return 1.0;
    if (s < warmup) return double(s) / double(std::max<std::int64_t>(1, warmup));
    switch (kind) {
      case ScheduleKind::constant_with_warmup: return 1.0;
      case ScheduleKind::linear:
        return std::max(0.0, double(total - s) / double(std::max<std::int64_t>(1, total - warmup)));
      case ScheduleKind::cosine: {
        double progress = double(s - warmup) / double(std::max<std::int64_t>(1, total - warmup));
        return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * 2.0 * 0.5 * progress)));
      }
      default: return 1.0;
    }
  }
  double rate(std::int64_t s) const { return lr * factor(s); }
};

}  // namespace ft::optim
