#pragma once
// Ranks over MPI (OpenMPI here): host buffers, one machine or many.
//
// One thread of this process talks to MPI (MPI_THREAD_FUNNELED): it starts
// every collective as a non-blocking MPI call, in the order the trainer
// issued them, and polls them to completion, so the trainer's thread goes on
// computing while a reduction moves (the overlap DDP and ZeRO depend on).
// Groups of ranks (split) are communicators of their own on the same thread.
//
// No job waits forever. Every collective has a deadline (the recipe's
// launch.collective_timeout). When one passes, or the launcher stops the job
// with SIGTERM because a rank died (mpirun does; an operator's SIGTERM to a
// training loop is a request to stop, core/signals.hpp), this thread asks every
// peer over a second communicator what it is doing (a peer's MPI thread
// answers even while its trainer computes) and checks whether the peers on
// this machine still exist; then it prints one line naming this rank, the
// collective, the phase and the peer at fault, and ends the process with a
// non-zero status. `patient` waits (a barrier while rank 0 tokenises the
// data) have no deadline but the same check every timeout period: they end
// as soon as a peer is gone.
//
// A reduction's own scratch (MPI allocates it for as long as the reduction
// runs) is host memory beside ft's: the reduction holds room for it in ft's
// cache of pages until it completes (comm/mpi_scratch.hpp), so a process's
// resident peak is what the memory estimate says.
//
// Sums of bf16 and f16 use MPI operations defined here (widen, add in f32,
// round once). MPI counts are int: a collective's parts must each stay
// under 2^31 elements (a stage of a 70B model is under 1e9).
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ft/comm/communicator.hpp"
#include "ft/comm/mpi_scratch.hpp"
#include "ft/core/signals.hpp"
#include "ft/tensor/memory.hpp"

namespace ft::comm {

class Mpi final : public Communicator {
public:
  explicit Mpi(double timeout_seconds) : timeout_(timeout_seconds) {
    static std::atomic<bool> used{false};
    if (used.exchange(true))
      throw Error("internal: MPI starts once per process, and this process has already joined a job");
    auto ready = ready_.get_future();
    thread_ = std::thread([this] { progress(); });
    try {
      ready.get();
    } catch (...) {
      thread_.join();
      throw;
    }
  }

  ~Mpi() override {
    if (world_ != this) return;  // a group: MPI_Finalize frees its communicator with the job's
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      // Leaving on an error: other ranks may still wait in a collective, and
      // MPI_Finalize would wait for them. The process ends without it and the
      // launcher stops the others.
      finalize_ = std::uncaught_exceptions() == 0;
    }
    wake_.notify_all();
    thread_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string host_of(int rank) const override {
    return world_->peers_[std::size_t(world_ranks_[std::size_t(rank)])].host;
  }
  void set_phase(std::string phase) override {
    if (world_ != this) return world_->set_phase(std::move(phase));
    std::lock_guard lock(mutex_);
    phase_ = std::move(phase);
  }

  // The ranks of this communicator with the same color, in rank order, as a
  // communicator of their own on the same MPI thread (MPI_Comm_split).
  std::unique_ptr<Communicator> split(int color, const std::string& name) override {
    std::unique_ptr<Mpi> group(new Mpi(*world_, name));
    group->count_into(*world_);
    Mpi* g = group.get();
    const MPI_Comm from = comm_;
    const int key = rank_, world_rank = world_->rank_;
    submit("split", name, false, [=](MPI_Comm, std::vector<MPI_Request>&) {
      if (int rc = MPI_Comm_split(from, color, key, &g->comm_)) return rc;
      MPI_Comm_set_errhandler(g->comm_, MPI_ERRORS_RETURN);
      MPI_Comm_rank(g->comm_, &g->rank_);
      MPI_Comm_size(g->comm_, &g->size_);
      g->world_ranks_.resize(std::size_t(g->size_));
      return MPI_Allgather(&world_rank, 1, MPI_INT, g->world_ranks_.data(), 1, MPI_INT, g->comm_);
    }).wait();
    return group;
  }

  void barrier(const std::string& what, bool patient) override {
    submit("barrier", what, patient, [](MPI_Comm c, std::vector<MPI_Request>& r) {
      return MPI_Ibarrier(c, &r.emplace_back());
    }).wait();
  }

protected:
  Work all_reduce_sum_bytes(void* data, std::size_t count, Element e, const std::string& what) override {
    const std::uint64_t scratch = mpi_scratch_bytes(Reduction::all_reduce, size_, count * size_of(e));
    return submit(
        "all-reduce", what, false,
        [=, this](MPI_Comm c, std::vector<MPI_Request>& r) {
          // In pieces under MPI's int count; every rank cuts the same pieces.
          const std::size_t piece = std::size_t(1) << 30, bytes = size_of(e);
          for (std::size_t at = 0; at < count; at += piece) {
            const int n = int(std::min(piece, count - at));
            if (int rc = MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(data) + at * bytes, n, type_of(e), sum_of(e),
                                        c, &r.emplace_back()))
              return rc;
          }
          return MPI_SUCCESS;
        },
        scratch);
  }

  Work reduce_scatter_sum_bytes(const void* in, void* out, std::span<const std::size_t> counts, Element e,
                                const std::string& what) override {
    std::vector<int> n = int_counts(counts, what);
    std::uint64_t reduced = 0;
    for (std::size_t c : counts) reduced += c * size_of(e);
    const std::uint64_t scratch = mpi_scratch_bytes(Reduction::reduce_scatter, size_, reduced);
    return submit(
        "reduce-scatter", what, false,
        [=, this](MPI_Comm c, std::vector<MPI_Request>& r) {
          return MPI_Ireduce_scatter(in, out, n.data(), type_of(e), sum_of(e), c, &r.emplace_back());
        },
        scratch);
  }

  Work all_gather_bytes(const void* in, void* out, std::span<const std::size_t> counts, Element e,
                        const std::string& what) override {
    std::vector<int> n = int_counts(counts, what), at(n.size(), 0);
    for (std::size_t r = 1; r < n.size(); ++r) at[r] = at[r - 1] + n[r - 1];
    // A rank whose part already sits at its place in `out` gathers in place, as MPI requires.
    const bool in_place = in == static_cast<const char*>(out) + std::size_t(at[std::size_t(rank_)]) * size_of(e);
    return submit("all-gather", what, false, [=, this](MPI_Comm c, std::vector<MPI_Request>& r) {
      return MPI_Iallgatherv(in_place ? MPI_IN_PLACE : in, n[std::size_t(rank_)], type_of(e), out, n.data(),
                             at.data(), type_of(e), c, &r.emplace_back());
    });
  }

  Work broadcast_bytes(void* data, std::size_t bytes, int root, const std::string& what) override {
    const int n = int_counts(std::span<const std::size_t>(&bytes, 1), what)[0];
    return submit("broadcast", what, false, [=](MPI_Comm c, std::vector<MPI_Request>& r) {
      return MPI_Ibcast(data, n, MPI_BYTE, root, c, &r.emplace_back());
    });
  }

  Work all_to_all_bytes(const void* in, std::span<const std::size_t> send, void* out,
                        std::span<const std::size_t> recv, Element e, const std::string& what) override {
    std::vector<int> s = int_counts(send, what), r = int_counts(recv, what), s_at(s.size(), 0), r_at(r.size(), 0);
    for (std::size_t p = 1; p < s.size(); ++p) {
      s_at[p] = s_at[p - 1] + s[p - 1];
      r_at[p] = r_at[p - 1] + r[p - 1];
    }
    return submit("all-to-all", what, false, [=, this](MPI_Comm c, std::vector<MPI_Request>& requests) {
      return MPI_Ialltoallv(in, s.data(), s_at.data(), type_of(e), out, r.data(), r_at.data(), type_of(e), c,
                            &requests.emplace_back());
    });
  }

  Work send_bytes(const void* data, std::size_t bytes, int peer, int tag, const std::string& what) override {
    const int n = int_counts(std::span<const std::size_t>(&bytes, 1), what)[0];
    return submit("send to rank " + std::to_string(peer), what, false,
                  [=](MPI_Comm c, std::vector<MPI_Request>& r) {
                    return MPI_Isend(data, n, MPI_BYTE, peer, tag, c, &r.emplace_back());
                  });
  }

  Work recv_bytes(void* data, std::size_t bytes, int peer, int tag, const std::string& what) override {
    const int n = int_counts(std::span<const std::size_t>(&bytes, 1), what)[0];
    return submit("receive from rank " + std::to_string(peer), what, false,
                  [=](MPI_Comm c, std::vector<MPI_Request>& r) {
                    return MPI_Irecv(data, n, MPI_BYTE, peer, tag, c, &r.emplace_back());
                  });
  }

  std::pair<double, double> timings() const override {
    return {double(world_->busy_ns_.load()) * 1e-9, double(world_->waited_ns_->load()) * 1e-9};
  }

private:
  // A group of the job's ranks (split), sharing the job's MPI thread.
  Mpi(Mpi& world, std::string name) : world_(&world), group_name_(std::move(name)) {}

  using Clock = std::chrono::steady_clock;
  using Start = std::function<int(MPI_Comm, std::vector<MPI_Request>&)>;  // returns an MPI error code

  struct Op {
    std::string name;  // "all-reduce of gradients of layers.3"
    std::string phase;
    bool patient = false;
    std::int64_t sequence = 0;  // this rank's count of operations so far, this one included
    std::uint64_t scratch = 0;  // host memory MPI allocates for it while it runs (held as room)
    MPI_Comm comm = MPI_COMM_NULL;  // the communicator it runs on (the job's, or a group's)
    Start start;
    std::vector<MPI_Request> requests;
    std::promise<void> done;
    Clock::time_point started, checked;
  };

  // What a peer's MPI thread answers when asked (fixed size: it travels as bytes).
  struct Answer {
    std::int64_t issued = 0;  // operations its trainer has issued
    char phase[96] = {};
    char doing[160] = {};  // the oldest operation it waits on, or empty when computing
  };

  struct Peer {
    int pid = 0;
    std::string host;
  };

  static constexpr int ask_tag = 1, answer_tag = 2;

  // `scratch`: the host memory MPI allocates for the operation while it runs.
  Work submit(const std::string& kind, const std::string& what, bool patient, Start start, std::uint64_t scratch = 0) {
    if (world_ != this) return world_->submit_on(comm_, kind + (group_name_.empty() ? "" : " in " + group_name_), what,
                                                 patient, std::move(start), scratch);
    return submit_on(comm_, kind, what, patient, std::move(start), scratch);
  }
  Work submit_on(MPI_Comm comm, const std::string& kind, const std::string& what, bool patient, Start start,
                 std::uint64_t scratch) {
    auto op = std::make_shared<Op>();
    op->comm = comm;
    op->name = kind + " of " + what;
    op->patient = patient;
    op->scratch = scratch;
    op->start = std::move(start);
    if (scratch) memory::Host::hold_room(scratch);
    Work work(op->done.get_future().share(), waited_ns_);  // (on the job's communicator)
    {
      std::lock_guard lock(mutex_);
      op->phase = phase_;
      op->sequence = ++issued_;
      queued_.push_back(std::move(op));
    }
    wake_.notify_all();
    return work;
  }

  std::vector<int> int_counts(std::span<const std::size_t> counts, const std::string& what) const {
    std::vector<int> n;
    std::size_t total = 0;
    for (std::size_t c : counts) {
      total += c;
      n.push_back(int(c));
    }
    if (total > std::size_t(INT_MAX))
      throw Error("internal: " + what + " moves " + std::to_string(total) +
                  " elements in one collective; MPI takes at most 2^31 - 1");
    return n;
  }

  MPI_Datatype type_of(Element e) const {
    switch (e) {
      case Element::f32: return MPI_FLOAT;
      case Element::f64: return MPI_DOUBLE;
      case Element::bf16:
      case Element::f16: return world_->half_type_;  // made once, by the job's communicator
      case Element::byte: return MPI_BYTE;
    }
    return MPI_BYTE;
  }
  MPI_Op sum_of(Element e) const {
    if (e == Element::bf16) return world_->bf16_sum_;
    if (e == Element::f16) return world_->f16_sum_;
    return MPI_SUM;
  }
  template <class H>
  static void half_sum(void* in, void* inout, int* len, MPI_Datatype*) {
    const H* a = static_cast<const H*>(in);
    H* b = static_cast<H*>(inout);
    for (int i = 0; i < *len; ++i) b[i] = H(float(a[i]) + float(b[i]));
  }

  // ---- the MPI thread --------------------------------------------------------

  void progress() {
    try {
      start_mpi();
    } catch (...) {
      ready_.set_exception(std::current_exception());
      return;
    }
    ready_.set_value();
    listen();
    std::vector<std::shared_ptr<Op>> active;
    Clock::time_point busy_since;
    int idle_polls = 0;
    while (true) {
      std::deque<std::shared_ptr<Op>> fresh;
      {
        std::unique_lock lock(mutex_);
        if (active.empty() && queued_.empty() && !stopping_)
          wake_.wait_for(lock, std::chrono::milliseconds(20), [&] { return !queued_.empty() || stopping_; });
        fresh.swap(queued_);
        if (stopping_ && fresh.empty() && active.empty()) break;
      }
      if (active.empty() && !fresh.empty()) busy_since = Clock::now();
      for (auto& op : fresh) {
        op->started = op->checked = Clock::now();
        if (int rc = op->start(op->comm, op->requests)) fail(*op, "could not start: " + error_text(rc));
        active.push_back(std::move(op));
        set_doing(active.front()->name);
      }
      bool progressed = false;
      for (std::size_t i = 0; i < active.size();) {
        Op& op = *active[i];
        int complete = 0;
        if (int rc = MPI_Testall(int(op.requests.size()), op.requests.data(), &complete, MPI_STATUSES_IGNORE))
          fail(op, "failed: " + error_text(rc));
        if (complete) {
          if (op.scratch) memory::Host::give_room(op.scratch);
          op.done.set_value();
          active.erase(active.begin() + std::ptrdiff_t(i));
          progressed = true;
        } else {
          ++i;
        }
      }
      if (progressed && active.empty())
        busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - busy_since).count();
      set_doing(active.empty() ? std::string() : active.front()->name);
      answer_questions();
      if (signals::received() == SIGTERM && !sigterm_judged_) judge_sigterm(active.empty() ? nullptr : active.front().get());
      check_deadlines(active);
      // Poll often while something moves, and back off while nothing does,
      // so that waiting costs the trainer's threads little CPU.
      idle_polls = progressed ? 0 : std::min(idle_polls + 1, 6);
      if (!active.empty()) std::this_thread::sleep_for(std::chrono::microseconds(10 << idle_polls));
    }
    stop_listening();
    MPI_Comm_free(&control_);
    MPI_Comm_free(&comm_);
    if (finalize_) MPI_Finalize();
  }

  void start_mpi() {
    int provided = 0;
    if (int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided))
      throw Error("MPI could not start: " + error_text(rc));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_dup(MPI_COMM_WORLD, &control_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    for (int r = 0; r < size_; ++r) world_ranks_.push_back(r);
    MPI_Type_contiguous(2, MPI_BYTE, &half_type_);
    MPI_Type_commit(&half_type_);
    MPI_Op_create(&half_sum<bf16>, 1, &bf16_sum_);
    MPI_Op_create(&half_sum<f16>, 1, &f16_sum_);

    // Who is where, for the messages and for telling a dead local peer.
    struct Card {
      int pid;
      char host[64];
    } mine{int(::getpid()), {}};
    ::gethostname(mine.host, sizeof mine.host - 1);
    std::vector<Card> all(std::size_t(size_), Card{});
    if (int rc = MPI_Allgather(&mine, sizeof(Card), MPI_BYTE, all.data(), sizeof(Card), MPI_BYTE, control_))
      throw Error("MPI could not start: exchanging host names failed: " + error_text(rc));
    for (const Card& c : all) peers_.push_back({c.pid, std::string(c.host, strnlen(c.host, sizeof c.host))});

    signals::watch_for_mpi();
  }

  // A question may come from any peer at any time; it is answered at once.
  void listen() { MPI_Irecv(&question_, 1, MPI_INT, MPI_ANY_SOURCE, ask_tag, control_, &question_request_); }
  void answer_questions() {
    for (;;) {
      int arrived = 0;
      MPI_Status status;
      if (MPI_Test(&question_request_, &arrived, &status) || !arrived) break;
      auto answer = std::make_unique<Answer>();
      {
        std::lock_guard lock(mutex_);
        answer->issued = issued_;
        std::strncpy(answer->phase, phase_.c_str(), sizeof answer->phase - 1);
        std::strncpy(answer->doing, doing_.c_str(), sizeof answer->doing - 1);
      }
      MPI_Request sent;
      MPI_Isend(answer.get(), sizeof(Answer), MPI_BYTE, status.MPI_SOURCE, answer_tag, control_, &sent);
      answers_sent_.push_back({std::move(answer), sent});
      listen();
    }
    std::erase_if(answers_sent_, [](auto& a) {
      int done = 0;
      MPI_Test(&a.second, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
  }
  void stop_listening() {
    MPI_Cancel(&question_request_);
    MPI_Wait(&question_request_, MPI_STATUS_IGNORE);
    for (auto& a : answers_sent_) MPI_Wait(&a.second, MPI_STATUS_IGNORE);
    answers_sent_.clear();
  }

  void set_doing(const std::string& name) {
    std::lock_guard lock(mutex_);
    doing_ = name;
  }

  void check_deadlines(const std::vector<std::shared_ptr<Op>>& active) {
    const auto now = Clock::now();
    const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_));
    for (const auto& op : active) {
      if (now - op->checked < period) continue;
      if (!op->patient) fail(*op, "did not complete within " + seconds_text(timeout_));
      // A patient wait goes on while every peer is alive.
      op->checked = now;
      const std::string fault = ask_peers(std::chrono::seconds(2), 0).text();
      if (!fault.empty()) fail(*op, "cannot complete", fault);
    }
  }

  // SIGTERM: mpirun's stop after a rank died, or an operator's. The launcher
  // gives about a second before it kills: ask briefly. A training loop that
  // listens stops at its next step when every peer answers (core/signals.hpp).
  void judge_sigterm(const Op* op) {
    sigterm_judged_ = true;
    const PeerReport peers = ask_peers(std::chrono::milliseconds(300), op ? op->sequence : 0);
    if (!peers.lost() && signals::listened_to()) return;  // a peer behind this rank is no fault here
    const std::string fault = peers.text();
    std::string line = prefix() + "stopped by SIGTERM ";
    line += op ? "during " + op->name + " (" + (op->phase.empty() ? "setup" : op->phase) + ")" : "while computing (" + current_phase() + ")";
    end_process(line + "; " + (fault.empty() ? "no peer is known to have failed" : fault));
  }

  [[noreturn]] void fail(const Op& op, const std::string& why, std::string fault = {}) {
    if (fault.empty()) fault = ask_peers(std::chrono::milliseconds(500), op.sequence).text();
    end_process(prefix() + op.name + " (" + (op.phase.empty() ? "setup" : op.phase) + ") " + why + "; " +
                (fault.empty() ? "every rank answers and has reached it" : fault));
  }

  [[noreturn]] static void end_process(const std::string& line) {
    std::fflush(stdout);
    std::fprintf(stderr, "ftrun: %s\n", line.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  }

  std::string prefix() const {
    return "rank " + std::to_string(rank_) + " (pid " + std::to_string(::getpid()) + " on " +
           peers_[std::size_t(rank_)].host + "): ";
  }
  std::string current_phase() {
    std::lock_guard lock(mutex_);
    return phase_.empty() ? "setup" : phase_;
  }
  std::string peer_text(int r) const {
    return "rank " + std::to_string(r) + " (pid " + std::to_string(peers_[std::size_t(r)].pid) + " on " +
           peers_[std::size_t(r)].host + ")";
  }

  // A local peer that no longer runs (gone, or a zombie its launcher has not reaped).
  bool has_died(int r) const {
    const Peer& p = peers_[std::size_t(r)];
    if (p.host != peers_[std::size_t(rank_)].host) return false;
    std::ifstream stat("/proc/" + std::to_string(p.pid) + "/stat");
    std::string pid, name, state;
    if (!(stat >> pid >> name >> state)) return true;
    return state == "Z" || state == "X";
  }

  // Asks every peer what it does and says which are at fault: those that
  // died, else those that do not answer, else (for a collective that did not
  // complete, `sequence` > 0) those that have not reached it. Empty when none is.
  // What the peers said when asked: each list a line per peer.
  struct PeerReport {
    std::vector<std::string> died, silent, behind;  // behind: alive, not yet at the collective asked about
    bool lost() const { return !died.empty() || !silent.empty(); }
    // The first non-empty list, joined: the fault to name; empty when there is none.
    std::string text() const {
      for (const auto* list : {&died, &silent, &behind})
        if (!list->empty()) {
          std::string text;
          for (const std::string& s : *list) text += (text.empty() ? "" : "; ") + s;
          return text;
        }
      return {};
    }
  };

  PeerReport ask_peers(Clock::duration wait, std::int64_t sequence) {
    std::vector<Answer> answers(static_cast<std::size_t>(size_));
    std::vector<MPI_Request> replies(std::size_t(size_), MPI_REQUEST_NULL);
    static const int question = 1;  // outlives the sends, which are not waited for
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || has_died(r)) continue;
      MPI_Request ask;
      MPI_Isend(&question, 1, MPI_INT, r, ask_tag, control_, &ask);
      MPI_Request_free(&ask);
      MPI_Irecv(&answers[std::size_t(r)], sizeof(Answer), MPI_BYTE, r, answer_tag, control_, &replies[std::size_t(r)]);
    }
    std::vector<bool> answered(std::size_t(size_), false);
    const auto until = Clock::now() + wait;
    for (bool waiting = true; waiting && Clock::now() < until;) {
      waiting = false;
      for (int r = 0; r < size_; ++r) {
        if (replies[std::size_t(r)] == MPI_REQUEST_NULL) continue;
        int done = 0;
        MPI_Test(&replies[std::size_t(r)], &done, MPI_STATUS_IGNORE);
        if (done) answered[std::size_t(r)] = true;
        else waiting = true;
      }
      answer_questions();  // a peer asking at the same time gets its answer
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (auto& reply : replies)
      if (reply != MPI_REQUEST_NULL) {  // unanswered: withdrawn before `answers` goes
        MPI_Cancel(&reply);
        MPI_Wait(&reply, MPI_STATUS_IGNORE);
      }

    PeerReport report;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      if (has_died(r)) report.died.push_back(peer_text(r) + " has died or exited");
      else if (!answered[std::size_t(r)]) report.silent.push_back(peer_text(r) + " does not answer");
      else if (answers[std::size_t(r)].issued < sequence) {
        const Answer& a = answers[std::size_t(r)];
        const std::string doing = a.doing[0] ? "waits in " + std::string(a.doing) : "computes";
        report.behind.push_back(peer_text(r) + " has not reached it: it " + doing + " (" +
                                (a.phase[0] ? std::string(a.phase) : "setup") + ")");
      }
    }
    return report;
  }

  static std::string error_text(int code) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    MPI_Error_string(code, text, &length);
    return std::string(text, std::size_t(length));
  }
  static std::string seconds_text(double s) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%g s", s);
    return buffer;
  }

  bool sigterm_judged_ = false;  // on the MPI thread only

  double timeout_ = 0;
  int rank_ = 0, size_ = 1;
  std::vector<Peer> peers_;
  MPI_Comm comm_ = MPI_COMM_NULL, control_ = MPI_COMM_NULL;
  Mpi* world_ = this;                // the job's communicator, which owns the MPI thread
  std::vector<int> world_ranks_;     // the job's rank of each rank of this communicator
  std::string group_name_;           // a group's name in messages ("" for the job)
  MPI_Datatype half_type_ = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL, f16_sum_ = MPI_OP_NULL;

  std::thread thread_;
  std::promise<void> ready_;
  std::mutex mutex_;  // guards what follows, shared by the trainer's thread and the MPI thread
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Op>> queued_;
  std::int64_t issued_ = 0;
  std::string phase_, doing_;
  bool stopping_ = false, finalize_ = true;
  std::atomic<std::int64_t> busy_ns_{0};  // while at least one operation moves
  std::shared_ptr<std::atomic<std::int64_t>> waited_ns_ = std::make_shared<std::atomic<std::int64_t>>(0);

  // The MPI thread's own.
  int question_ = 0;
  MPI_Request question_request_ = MPI_REQUEST_NULL;
  std::vector<std::pair<std::unique_ptr<Answer>, MPI_Request>> answers_sent_;
};

}  // namespace ft::comm
