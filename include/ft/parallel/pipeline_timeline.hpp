#pragma once
// What each pipeline rank did during one step, as intervals: its forward,
// backward and weight-gradient passes, the sends it posted and the time it
// waited for a peer. Two sources give the same picture:
//   simulate_pipeline  runs a schedule on the partition's estimated costs
//                      (a forward costs its chunk's estimate, a whole
//                      backward twice that, split evenly into B and W under
//                      zero_bubble), each pass starting when its rank is
//                      free and its input has arrived; transfers take no time
//   a real run         with pipeline.timeline = true each rank appends one
//                      JSON line per step to output_dir/timeline/
// The bubble is the share of the step a rank spends without a pass to run:
// 1 - its passes' time / the step's span over all ranks (with equal costs,
// (p - 1) / (m + p - 1) under 1f1b).
#include <algorithm>
#include <array>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/parallel/pipeline_schedule.hpp"

namespace ft::parallel {

enum class PipeActivity : char { forward, backward, weights, send, wait };

inline const char* activity_letter(PipeActivity a) {
  static constexpr const char* letters[] = {"F", "B", "W", "S", "wait"};
  return letters[int(a)];
}
inline PipeActivity activity_from_letter(const std::string& s) {
  for (PipeActivity a : {PipeActivity::forward, PipeActivity::backward, PipeActivity::weights, PipeActivity::send,
                         PipeActivity::wait})
    if (s == activity_letter(a)) return a;
  throw Error("timeline: \"" + s + "\" is not an activity; allowed: F, B, W, S, wait");
}
inline bool is_pass(PipeActivity a) { return a <= PipeActivity::weights; }

struct PipeInterval {
  PipeActivity activity;
  int micro_batch, chunk;
  double start, end;  // seconds (measured) or cost units (simulated)
};

struct PipeTimeline {
  std::vector<std::vector<PipeInterval>> ranks;  // per pipeline rank

  double begin() const {
    double b = 1e300;
    for (const auto& rank : ranks)
      for (const PipeInterval& i : rank) b = std::min(b, i.start);
    return b == 1e300 ? 0 : b;
  }
  double end() const {
    double e = -1e300;
    for (const auto& rank : ranks)
      for (const PipeInterval& i : rank) e = std::max(e, i.end);
    return e == -1e300 ? 0 : e;
  }
  double busy(int rank) const {
    double t = 0;
    for (const PipeInterval& i : ranks[std::size_t(rank)])
      if (is_pass(i.activity)) t += i.end - i.start;
    return t;
  }
  double bubble(int rank) const {
    const double span = end() - begin();
    return span > 0 ? 1 - busy(rank) / span : 0;
  }
  double mean_bubble() const {
    double sum = 0;
    for (int r = 0; r < int(ranks.size()); ++r) sum += bubble(r);
    return ranks.empty() ? 0 : sum / double(ranks.size());
  }

};

// The schedule run on estimated costs, in units of the costliest chunk's forward.
inline PipeTimeline simulate_pipeline(PipeSchedule schedule, const PipePartition& p, int m) {
  const double unit = *std::max_element(p.cost.begin(), p.cost.end());
  const bool split = schedule == PipeSchedule::zero_bubble;
  std::vector<std::vector<PipeOp>> orders;
  for (int r = 0; r < p.ranks; ++r) orders.push_back(pipe_schedule(schedule, p, r, m));
  std::map<std::array<int, 3>, double> ended;  // pass -> when it ended
  PipeTimeline t;
  t.ranks.resize(std::size_t(p.ranks));
  std::vector<std::size_t> next(std::size_t(p.ranks), 0);
  std::vector<double> free_at(std::size_t(p.ranks), 0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int r = 0; r < p.ranks; ++r) {
      auto& order = orders[std::size_t(r)];
      double& now = free_at[std::size_t(r)];
      for (std::size_t& k = next[std::size_t(r)]; k < order.size(); ++k) {
        const PipeOp& op = order[k];
        double start = now;
        bool ready = true;
        for (const PipeOp& input : pass_inputs(op, p.chunks())) {
          auto it = ended.find(pass_key(input));
          if (it == ended.end()) ready = false;
          else start = std::max(start, it->second);
        }
        if (!ready) break;
        const double cost = p.cost[std::size_t(op.chunk)] / unit;
        const double length = op.pass == PipePass::backward && !split ? 2 * cost : cost;
        const PipeActivity a = op.pass == PipePass::forward    ? PipeActivity::forward
                               : op.pass == PipePass::backward ? PipeActivity::backward
                                                               : PipeActivity::weights;
        if (start > now) t.ranks[std::size_t(r)].push_back({PipeActivity::wait, op.micro_batch, op.chunk, now, start});
        t.ranks[std::size_t(r)].push_back({a, op.micro_batch, op.chunk, start, start + length});
        now = ended[pass_key(op)] = start + length;
        progressed = true;
      }
    }
  }
  for (int r = 0; r < p.ranks; ++r)
    if (next[std::size_t(r)] < orders[std::size_t(r)].size())
      throw Error("internal: pipeline schedule deadlocks at rank " + std::to_string(r));
  return t;
}

// One rank's step as a JSON line: {"step", "pipe_rank", "replica", "events": [[activity, mb, chunk, start, end]...]}.
inline nlohmann::json timeline_record(std::int64_t step, int pipe_rank, int replica,
                                      const std::vector<PipeInterval>& events) {
  nlohmann::json e = nlohmann::json::array();
  for (const PipeInterval& i : events)
    e.push_back({activity_letter(i.activity), i.micro_batch, i.chunk, i.start, i.end});
  return {{"step", step}, {"pipe_rank", pipe_rank}, {"replica", replica}, {"events", e}};
}
inline std::vector<PipeInterval> timeline_events(const nlohmann::json& record) {
  std::vector<PipeInterval> out;
  for (const nlohmann::json& e : record.at("events"))
    out.push_back({activity_from_letter(e.at(0).get<std::string>()), e.at(1).get<int>(), e.at(2).get<int>(),
                   e.at(3).get<double>(), e.at(4).get<double>()});
  return out;
}

// The plan of a recipe's pipeline: schedule, ranks, the simulated bubble, the
// partition, and each rank's order of passes (F forward, B backward, W
// deferred weight gradients; micro-batch, and chunk when interleaved).
inline std::string describe_pipeline(const recipe::Recipe& r, const PipePartition& p, std::int64_t job_ranks) {
  const int m = int(recipe::pipeline_microbatches(r));
  const PipeSchedule schedule = pipe_schedule_from_name(r.pipeline.schedule);
  std::ostringstream os;
  os << "pipeline     " << r.pipeline.schedule << ", " << m << " micro-batches per step on " << p.ranks
     << " pipeline ranks x " << job_ranks / p.ranks << " replica(s) (" << r.pipeline.data_parallel << ")"
     << "; bubble " << int(100 * simulate_pipeline(schedule, p, m).mean_bubble() + 0.5)
     << "% on estimated costs (ftrun schedule draws it)\n"
     << p.describe();
  for (int rank = 0; rank < p.ranks; ++rank) {
    os << "  rank " << rank << " order:";
    for (const PipeOp& op : pipe_schedule(schedule, p, rank, m)) {
      os << " " << (op.pass == PipePass::forward ? 'F' : op.pass == PipePass::backward ? 'B' : 'W') << op.micro_batch;
      if (p.stages_per_rank > 1) os << "." << op.chunk;
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace ft::parallel
