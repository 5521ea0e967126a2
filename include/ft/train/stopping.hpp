#pragma once
// When a run stops before its last step, and which of its steps the run's
// throughput counts (benchmark runs, as ado's SFTTrainer actuator makes them):
//
//   train.stop_after_seconds = S     stop after the first step that ends S
//                                    seconds or more after training began
//   train.auto_stop_method =
//     "warmup_60s_stable_120s_or_10_steps"
//                                    the steps of the first 60 seconds are a
//                                    warm-up the throughput leaves out; then
//                                    stop once the measured part has lasted
//                                    120 seconds and 10 steps, whichever is
//                                    longer
//
// Both count from the start of this process's training: a resumed run's
// clock starts again.
//
// The auto-stop name is a grammar, warmup_<W>s_stable_<S>s_or_<N>_steps, of
// which ado's WARMUP_60S_STABLE_120S_OR_10_STEPS is one spelling (case
// does not matter), so a short benchmark can use warmup_2s_stable_5s_or_3_steps.
#include <cstdint>
#include <optional>
#include <regex>
#include <string>

namespace ft::train {

struct AutoStop {
  double warmup_seconds = 0;
  double stable_seconds = 0;
  std::int64_t stable_steps = 0;
};

// Nothing for "none" or for a name outside the grammar (the recipe check tells them apart).
inline std::optional<AutoStop> parse_auto_stop(const std::string& name) {
  static const std::regex grammar(R"(warmup_(\d{1,6})s_stable_(\d{1,6})s_or_(\d{1,6})_steps)", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(name, m, grammar)) return std::nullopt;
  return AutoStop{std::stod(m[1]), std::stod(m[2]), std::stoll(m[3])};
}

// Told the training seconds at the end of every step, it says whether that
// step is measured and whether the run stops after it.
class StopRule {
public:
  StopRule(double stop_after_seconds, std::optional<AutoStop> auto_stop)
      : stop_after_seconds_(stop_after_seconds), auto_stop_(auto_stop) {}

  // Whether a step can end the run early: then the ranks must agree on it.
  bool active() const { return stop_after_seconds_ >= 0 || auto_stop_.has_value(); }

  // `seconds`: from the start of the run's first step to the end of this one.
  // Returns whether this step belongs to the measured part.
  bool step_done(double seconds) {
    bool measured = !warming_up_;
    if (warming_up_ && (!auto_stop_ || seconds >= auto_stop_->warmup_seconds)) {
      warming_up_ = false;
      measured_from_ = auto_stop_ ? seconds : 0;  // the warm-up's last step is not measured
      measured = !auto_stop_;
    }
    if (measured) ++measured_steps_;
    if (stop_after_seconds_ >= 0 && seconds >= stop_after_seconds_) reason_ = "stop_after_seconds";
    if (auto_stop_ && !warming_up_ && seconds - measured_from_ >= auto_stop_->stable_seconds &&
        measured_steps_ >= auto_stop_->stable_steps)
      reason_ = "auto_stop_method";
    return measured;
  }

  // Empty until a rule says stop; then the recipe key that did.
  const std::string& reason() const { return reason_; }
  void stop(std::string reason) { reason_ = std::move(reason); }

private:
  double stop_after_seconds_;
  std::optional<AutoStop> auto_stop_;
  bool warming_up_ = true;
  double measured_from_ = 0;
  std::int64_t measured_steps_ = 0;
  std::string reason_;
};

}  // namespace ft::train
