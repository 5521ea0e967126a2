// The MPI communicator on real processes. ctest runs this binary under
// `mpirun -np 2` and `-np 4`; every test checks what each rank receives.
//
// With `--scenario NAME` it plays one failure instead, for the tests in
// tests/comm/test_failures.cpp: `hang` (the last rank never joins the
// all-reduce), `die` (the last rank kills itself with SIGKILL before it).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <ft/comm/mpi.hpp>
#include <ft/comm/mpi_scratch.hpp>
#include <ft/comm/world.hpp>
#include <ft/tensor/array.hpp>
#include <ft/tensor/memory.hpp>

namespace {

ft::comm::Communicator& world() {
  static std::unique_ptr<ft::comm::Communicator> w = ft::comm::join_job(60);
  return *w;
}

std::vector<std::size_t> uneven_counts(int size) {
  std::vector<std::size_t> counts;
  for (int r = 0; r < size; ++r) counts.push_back(std::size_t(r == 1 ? 0 : 3 + r));  // rank 1 holds none
  return counts;
}

TEST_CASE("the job has several ranks and every rank knows every host") {
  auto& c = world();
  REQUIRE(c.size() >= 2);
  CHECK(c.rank() < c.size());
  for (int r = 0; r < c.size(); ++r) CHECK_FALSE(c.host_of(r).empty());
}

TEST_CASE("all-reduce sums f32, f64 and bf16 in place, also over more than one message") {
  auto& c = world();
  const int w = c.size(), r = c.rank();
  std::vector<float> x(100003);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(r + 1) * float(i % 7);
  c.all_reduce_sum(std::span<float>(x), "f32 values").wait();
  const float ranks = float(w * (w + 1) / 2);
  for (std::size_t i = 0; i < x.size(); i += 997) CHECK(x[i] == ranks * float(i % 7));

  std::vector<double> d{double(r), 0.5};
  c.all_reduce_sum(std::span<double>(d), "f64 values").wait();
  CHECK(d[0] == double(w * (w - 1) / 2));
  CHECK(d[1] == 0.5 * w);

  std::vector<ft::bf16> h(5, ft::bf16(float(r + 1)));
  c.all_reduce_sum(std::span<ft::bf16>(h), "bf16 values").wait();
  for (ft::bf16 v : h) CHECK(float(v) == ranks);
}

TEST_CASE("reduce-scatter gives each rank the sum of its part, parts of any size") {
  auto& c = world();
  const auto counts = uneven_counts(c.size());
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t(0));
  std::vector<float> in(total);
  for (std::size_t i = 0; i < total; ++i) in[i] = float(i) + 100.0f * float(c.rank());
  std::vector<float> out(counts[std::size_t(c.rank())]);
  c.reduce_scatter_sum(std::span<const float>(in), std::span<float>(out), counts, "a scattered sum").wait();
  std::size_t begin = 0;
  for (int r = 0; r < c.rank(); ++r) begin += counts[std::size_t(r)];
  const int w = c.size();
  for (std::size_t k = 0; k < out.size(); ++k)
    CHECK(out[k] == float(w) * float(begin + k) + 100.0f * float(w * (w - 1) / 2));
}

TEST_CASE("all-gather collects every rank's part, into another buffer or in place") {
  auto& c = world();
  const auto counts = uneven_counts(c.size());
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t(0));
  std::size_t begin = 0;
  for (int r = 0; r < c.rank(); ++r) begin += counts[std::size_t(r)];
  std::vector<float> mine(counts[std::size_t(c.rank())]);
  for (std::size_t k = 0; k < mine.size(); ++k) mine[k] = float(begin + k);
  std::vector<float> all(total, -1.0f);
  c.all_gather(std::span<const float>(mine), std::span<float>(all), counts, "parts").wait();
  for (std::size_t i = 0; i < total; ++i) CHECK(all[i] == float(i));

  std::vector<float> same(total, -1.0f);
  std::copy(mine.begin(), mine.end(), same.begin() + std::ptrdiff_t(begin));
  c.all_gather(std::span<const float>(same.data() + begin, mine.size()), std::span<float>(same), counts, "parts in place")
      .wait();
  CHECK(same == all);
}

TEST_CASE("broadcast, point-to-point around a ring, text, sums and maxima") {
  auto& c = world();
  const int w = c.size(), r = c.rank();
  std::vector<int> b(3, r == 1 ? 7 : 0);
  c.broadcast(std::span<int>(b), 1, "from rank 1").wait();
  CHECK(b == std::vector<int>(3, 7));

  const int next = (r + 1) % w, previous = (r + w - 1) % w;
  const std::vector<double> out{double(r), double(r) * 2};
  std::vector<double> in(2);
  auto sent = c.send(std::span<const double>(out), next, "to the next rank");
  c.recv(std::span<double>(in), previous, "from the previous rank").wait();
  sent.wait();
  CHECK(in == std::vector<double>{double(previous), double(previous) * 2});

  const auto texts = c.all_gather_text(std::string(std::size_t(r), 'x') + "rank " + std::to_string(r), "texts");
  REQUIRE(texts.size() == std::size_t(w));
  for (int k = 0; k < w; ++k) CHECK(texts[std::size_t(k)] == std::string(std::size_t(k), 'x') + "rank " + std::to_string(k));
  CHECK(c.sum(1.5, "a sum") == 1.5 * w);
  CHECK(c.max(double(r), "a maximum") == double(w - 1));
  c.barrier("the end", false);
}

TEST_CASE("collectives issued back to back complete in order while this thread goes on") {
  auto& c = world();
  std::vector<std::vector<float>> buffers(8, std::vector<float>(4096, 1.0f));
  std::vector<ft::comm::Work> works;
  for (auto& b : buffers) works.push_back(c.all_reduce_sum(std::span<float>(b), "one of eight"));
  for (auto& w : works) w.wait();
  for (auto& b : buffers) CHECK(b[4095] == float(c.size()));
}

// MPI's scratch is host memory beside ft's: while a reduction runs, ft's
// cache of pages gives up cached blocks so that the room for it fits
// within the peak, and takes the room back when the reduction completes.
TEST_CASE("a reduction keeps room for MPI's scratch in the host's cache of pages until it completes") {
  auto& c = world();
  auto& pages = ft::memory::Host::pages();
  constexpr std::size_t MiB = std::size_t(1) << 20;
  pages.release_cached();
  { ft::memory::Array<float> freed(32 * MiB / sizeof(float)); }  // cached, at the peak
  REQUIRE(pages.reserved().current() >= 32 * MiB);
  for (const bool scatter : {false, true}) {
    std::vector<float> x(16 * MiB / sizeof(float), 1.0f), part(x.size() / std::size_t(c.size()));
    const auto reduction = scatter ? ft::comm::Reduction::reduce_scatter : ft::comm::Reduction::all_reduce;
    const std::size_t room = ft::comm::mpi_scratch_bytes(reduction, c.size(), x.size() * sizeof(float));
    REQUIRE(room > 0);
    const std::vector<std::size_t> counts(std::size_t(c.size()), part.size());
    ft::comm::Work work = scatter ? c.reduce_scatter_sum(std::span<const float>(x), std::span<float>(part), counts, "with room")
                                  : c.all_reduce_sum(std::span<float>(x), "with room");
    // Posted: what the cache reserves and the room fit within the peak (the freed block went).
    CHECK(pages.reserved().current() + room <= std::max(pages.allocated().peak(), pages.allocated().current() + room));
    CHECK(pages.reserved().current() < 32 * MiB);
    work.wait();
    CHECK(pages.room() == 0);
    CHECK((scatter ? part[0] : x[0]) == float(c.size()));
    { ft::memory::Array<float> freed(32 * MiB / sizeof(float)); }  // cached again for the next round
  }
}

TEST_CASE("traffic counts what a ring moves") {
  auto& c = world();
  const auto before = c.traffic();
  std::vector<float> x(1000);
  c.all_reduce_sum(std::span<float>(x), "counted").wait();
  const auto after = c.traffic();
  const double w = c.size();
  CHECK(double(after.sent - before.sent) == doctest::Approx(2 * 4000 * (w - 1) / w).epsilon(0.001));
}


TEST_CASE("all-to-all hands each rank its part from every rank, parts of any size, and counts what leaves") {
  auto& c = world();
  const int w = c.size(), me = c.rank();
  // Rank s sends rank d (s + 2 d) % 3 values s * 100 + d * 10 + i: some parts empty, its own part too.
  auto part = [](int s, int d) { return std::size_t((s + 2 * d) % 3); };
  std::vector<std::size_t> send, recv;
  std::vector<float> in;
  for (int d = 0; d < w; ++d) {
    send.push_back(part(me, d));
    recv.push_back(part(d, me));
    for (std::size_t i = 0; i < send.back(); ++i) in.push_back(float(me * 100 + d * 10) + float(i));
  }
  std::vector<float> out(std::accumulate(recv.begin(), recv.end(), std::size_t(0)), -1.0f);
  const auto before = c.traffic();
  c.all_to_all(std::span<const float>(in), send, std::span<float>(out), recv, "parts for every rank").wait();
  const auto after = c.traffic();
  std::size_t at = 0;
  for (int s = 0; s < w; ++s)
    for (std::size_t i = 0; i < part(s, me); ++i) CHECK(out[at++] == float(s * 100 + me * 10) + float(i));
  const std::size_t own = part(me, me);
  CHECK(after.sent - before.sent == (in.size() - own) * sizeof(float));
  CHECK(after.received - before.received == (out.size() - own) * sizeof(float));
}
TEST_CASE("split makes groups of ranks whose collectives stay among them") {
  auto& c = world();
  const int r = c.rank();
  auto group = c.split(r % 2, "the ranks of one parity");
  CHECK(group->size() == (c.size() + 1 - r % 2) / 2);
  CHECK(group->rank() == r / 2);
  CHECK(group->host_of(group->rank()) == c.host_of(r));
  std::vector<double> x{double(r)};
  group->all_reduce_sum(std::span<double>(x), "ranks of one parity").wait();
  double want = 0;
  for (int k = r % 2; k < c.size(); k += 2) want += k;
  CHECK(x[0] == want);
  // Half-precision sums use operations the job made; a group uses them too.
  std::vector<ft::bf16> h(3, ft::bf16(float(r)));
  group->all_reduce_sum(std::span<ft::bf16>(h), "bf16 among ranks of one parity").wait();
  for (ft::bf16 v : h) CHECK(float(v) == float(want));
  c.barrier("after the groups", false);
}

// ---- failures ---------------------------------------------------------------

int scenario(const std::string& name) {
  auto c = ft::comm::join_job(2);
  c->set_phase("step 3");
  std::vector<float> x(16, 1.0f);
  c->all_reduce_sum(std::span<float>(x), "warm-up").wait();
  if (c->rank() == c->size() - 1) {
    if (name == "die") ::kill(::getpid(), SIGKILL);
    if (name == "hang") std::this_thread::sleep_for(std::chrono::seconds(30));
  }
  c->all_reduce_sum(std::span<float>(x), "gradients of layers.0").wait();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--scenario") == 0) return scenario(argv[2]);
  doctest::Context context(argc, argv);
  const int failed = context.run();
  return failed;
}
