#pragma once
// A Batcher on its own thread, fed from any number of others: what a server
// needs between its connection threads and the engine. Requests queue in an
// inbox; the loop moves them into the batch between engine steps
// (continuous batching) and sleeps when there is nothing to do. Callbacks
// of a request (on_token, on_done) run on the loop's thread.
//
// The queue is bounded: a request beyond `max_waiting` is turned away
// (a server answers 429) rather than waiting without limit. shutdown()
// stops taking requests, lets those in flight finish within a grace period
// and cancels what is left.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "ft/infer/generate.hpp"

namespace ft::infer {

class Service {
public:
  enum class Admission { queued, full, closed };

  Service(Decoder& decoder, std::size_t max_waiting, index_t prefill_chunk = 0)
      : batcher_(decoder, prefill_chunk), decoder_(decoder), max_waiting_(max_waiting), thread_([this] { loop(); }) {}
  ~Service() { shutdown(std::chrono::seconds(0)); }
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Queues every request or none (the n choices of one API call). A request
  // that cannot fit max_model_len throws Error here, on the caller's thread.
  Admission submit(std::vector<Request> requests) {
    for (const Request& r : requests) batcher_.check(r);
    const std::lock_guard lock(mutex_);
    if (closed_) return Admission::closed;
    // Every request not yet done, new ones included, beyond the slots and the queue's bound.
    if (active_ + requests.size() > std::size_t(decoder_.slots()) + max_waiting_) return Admission::full;
    active_ += requests.size();
    for (Request& r : requests) {
      r.on_done = [this, done = std::move(r.on_done)](Completion&& c) {
        if (done) done(std::move(c));
        const std::lock_guard lock(mutex_);
        --active_;
      };
      inbox_.push_back(std::move(r));
    }
    wake_.notify_one();
    return Admission::queued;
  }

  // Stops taking requests, waits up to `grace` for those in flight, cancels
  // the rest (their on_done says "cancelled") and ends the loop.
  void shutdown(std::chrono::milliseconds grace) {
    {
      const std::lock_guard lock(mutex_);
      if (!thread_.joinable()) return;
      closed_ = true;
      deadline_ = std::chrono::steady_clock::now() + grace;
    }
    wake_.notify_one();
    thread_.join();
  }

  std::size_t running() const { return running_.load(); }
  std::size_t waiting() const { return waiting_.load(); }
  bool closed() const {
    const std::lock_guard lock(mutex_);
    return closed_;
  }

private:
  void loop() {
    std::vector<Request> arrived;
    for (;;) {
      bool cancel = false;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return !inbox_.empty() || closed_ || !batcher_.idle(); });
        arrived.swap(inbox_);
        if (closed_ && std::chrono::steady_clock::now() >= deadline_) cancel = true;
        else if (closed_ && arrived.empty() && batcher_.idle()) return;
      }
      // Callbacks run outside the lock: on_done takes it.
      for (Request& r : arrived) batcher_.add(std::move(r));
      arrived.clear();
      if (cancel) {
        batcher_.cancel_all();
        publish();
        return;
      }
      try {
        batcher_.step();
      } catch (const std::exception& e) {  // the step's requests cannot go on; the server can
        std::fprintf(stderr, "ftrun: inference step failed: %s; cancelling the running requests\n", e.what());
        batcher_.cancel_all();
      }
      publish();
    }
  }

  void publish() {
    running_ = batcher_.running();
    waiting_ = batcher_.waiting();
  }

  Batcher batcher_;
  Decoder& decoder_;
  std::size_t max_waiting_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Request> inbox_;
  std::size_t active_ = 0;  // submitted and not done
  bool closed_ = false;
  std::chrono::steady_clock::time_point deadline_;
  std::atomic<std::size_t> running_{0}, waiting_{0};
  std::thread thread_;  // last: it starts once everything above exists
};

}  // namespace ft::infer
