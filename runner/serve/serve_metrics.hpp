#pragma once
// What ftrun serve counts for GET /metrics, in Prometheus' text form:
// requests by endpoint and status, tokens, and latency histograms.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace ftrun::serve {

// A histogram in Prometheus' form: cumulative buckets, sum and count.
class Histogram {
public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v) {
    const std::lock_guard lock(mutex_);
    ++counts_[std::size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin())];
    sum_ += v;
  }
  void write(std::ostream& out, const std::string& name, const std::string& help) const {
    const std::lock_guard lock(mutex_);
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < bounds_.size(); ++i) {
      cumulative += counts_[i];
      out << name << "_bucket{le=\"" << bounds_[i] << "\"} " << cumulative << "\n";
    }
    cumulative += counts_.back();
    out << name << "_bucket{le=\"+Inf\"} " << cumulative << "\n"
        << name << "_sum " << sum_ << "\n"
        << name << "_count " << cumulative << "\n";
  }

private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  double sum_ = 0;
};

struct Metrics {
  std::mutex mutex;
  std::map<std::pair<std::string, int>, std::uint64_t> requests;  // (endpoint, status) -> count
  std::atomic<std::uint64_t> prompt_tokens{0}, generation_tokens{0};
  Histogram latency{{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}};
  Histogram first_token{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};

  void count(const std::string& endpoint, int status) {
    const std::lock_guard lock(mutex);
    ++requests[{endpoint, status}];
  }
};

}  // namespace ftrun::serve
