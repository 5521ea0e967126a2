// The pipeline's plan without processes: every schedule runs each
// micro-batch's forward and backward exactly once per chunk, in an order
// whose dependencies can be met (the simulator would report a deadlock), and
// the simulated bubble of equal-cost chunks is the textbook one: (p - 1) /
// (m + p - 1) for 1f1b and gpipe, (p - 1) / (v m + p - 1) interleaved, and
// ZB-H1's (p - 1) / (3m + p - 1) for zero_bubble.
#include <doctest/doctest.h>

#include <map>
#include <tuple>

#include <ft/parallel/pipeline_timeline.hpp>

namespace test_pipeline_schedule {

using namespace ft::parallel;

namespace {

// p ranks x v chunks of equal cost (the head's and embedding's left out).
PipePartition equal_chunks(int p, int v) {
  PipePartition part;
  part.ranks = p;
  part.stages_per_rank = v;
  part.layers = p * v;
  for (int c = 0; c < p * v; ++c) {
    part.first.push_back(c == 0 ? -1 : c);
    part.last.push_back(c == p * v - 1 ? p * v : c);
    part.cost.push_back(1);
  }
  return part;
}

}  // namespace

TEST_CASE("every schedule runs each pass of each micro-batch once, on the chunk's rank") {
  for (const auto& [schedule, v] : {std::pair{PipeSchedule::gpipe, 1}, {PipeSchedule::one_f_one_b, 1},
                                    {PipeSchedule::zero_bubble, 1}, {PipeSchedule::interleaved, 2}})
    for (const int p : {2, 3, 4})
      for (const int m : {4, 8, 12}) {
        if (schedule == PipeSchedule::interleaved && m % p != 0) continue;  // refused: micro-batches go round in groups of p
        CAPTURE(int(schedule));
        CAPTURE(p);
        CAPTURE(m);
        const PipePartition part = equal_chunks(p, v);
        std::map<std::tuple<int, int, int>, int> seen;  // (pass, micro-batch, chunk) -> times
        for (int r = 0; r < p; ++r)
          for (const PipeOp& op : pipe_schedule(schedule, part, r, m)) {
            CHECK(part.rank_of(op.chunk) == r);
            ++seen[{int(op.pass), op.micro_batch, op.chunk}];
          }
        const int passes = schedule == PipeSchedule::zero_bubble ? 3 : 2;
        CHECK(seen.size() == std::size_t(passes * m * p * v));
        for (const auto& [key, times] : seen) CHECK(times == 1);
        CHECK_NOTHROW(simulate_pipeline(schedule, part, m));  // no rank waits for a pass that never comes
      }
}

TEST_CASE("the simulated bubble of equal chunks: 1f1b's, interleaved's and ZB-H1's textbook figures") {
  for (const int p : {2, 4})
    for (const int m : {4, 8, 16}) {
      CAPTURE(p);
      CAPTURE(m);
      const double ideal = double(p - 1) / (m + p - 1);
      const double one_f_one_b = simulate_pipeline(PipeSchedule::one_f_one_b, equal_chunks(p, 1), m).mean_bubble();
      CHECK(one_f_one_b == doctest::Approx(ideal).epsilon(1e-12));
      CHECK(simulate_pipeline(PipeSchedule::gpipe, equal_chunks(p, 1), m).mean_bubble() ==
            doctest::Approx(ideal).epsilon(1e-12));
      // Megatron's interleaved schedule: (p - 1) / (v m + p - 1).
      CHECK(simulate_pipeline(PipeSchedule::interleaved, equal_chunks(p, 2), m).mean_bubble() ==
            doctest::Approx(double(p - 1) / (2 * m + p - 1)).epsilon(1e-12));
      const double zero_bubble = simulate_pipeline(PipeSchedule::zero_bubble, equal_chunks(p, 1), m).mean_bubble();
      CHECK(zero_bubble == doctest::Approx(double(p - 1) / (3 * m + p - 1)).epsilon(1e-12));
    }
}

TEST_CASE("a timeline record reads back as it was written") {
  const std::vector<PipeInterval> events = {{PipeActivity::wait, 0, 1, 10.25, 10.5},
                                            {PipeActivity::forward, 0, 1, 10.5, 11},
                                            {PipeActivity::send, 0, 1, 11, 11.125},
                                            {PipeActivity::weights, 3, 1, 12, 12.5}};
  const auto record = timeline_record(7, 1, 0, events);
  CHECK(record["step"] == 7);
  const std::vector<PipeInterval> back = timeline_events(nlohmann::json::parse(record.dump()));
  REQUIRE(back.size() == events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    CHECK(back[i].activity == events[i].activity);
    CHECK(back[i].micro_batch == events[i].micro_batch);
    CHECK(back[i].start == events[i].start);
    CHECK(back[i].end == events[i].end);
  }
  PipeTimeline t;
  t.ranks = {back};
  CHECK(t.busy(0) == doctest::Approx(1.0));
  CHECK(t.bubble(0) == doctest::Approx(1 - 1.0 / 2.25));
}

}  // namespace test_pipeline_schedule
