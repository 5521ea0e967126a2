#pragma once
// The ranks of a job and the collectives a trainer needs between them.
//
// One interface, several transports: Local (a job of one rank) and Mpi (host
// buffers, one machine or many; comm/mpi.hpp); device buffers (NCCL) come
// with the CUDA backend. The trainer calls it the same way for each.
//
// Every collective is asynchronous: it returns a Work that wait() completes,
// so gradient reductions can run while backward goes on (parallel/). Calls
// are matched across ranks by order, as in MPI: every rank must issue the
// same collectives in the same order. Each carries a `what` ("gradients of
// layers.3") that, with the phase the job is in ("step 12"), names it when a
// peer dies or hangs: a transport with timeouts (Mpi) then stops the rank
// with one line saying which collective waited on which peer.
//
// traffic() counts the bytes each rank sends and receives for the
// collectives it issued, as ring algorithms move them (all-reduce of B bytes:
// 2 (w-1)/w B each way; reduce-scatter and all-gather of B bytes in all:
// (w-1)/w B), so that what a strategy moves per step can be compared with
// what it should move. Point-to-point messages and an all-to-all's parts
// count their size (a rank's part for itself moves nothing).
#include <atomic>
#include <chrono>
#include <memory>
#include <tuple>
#include <utility>
#include <cstddef>
#include <cstdint>
#include <future>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/core/half.hpp"

namespace ft::comm {

// What a collective moves: reductions add values of these types; bytes are only moved.
enum class Element { f32, f64, bf16, f16, byte };

constexpr std::size_t size_of(Element e) {
  switch (e) {
    case Element::f32: return 4;
    case Element::f64: return 8;
    case Element::bf16: return 2;
    case Element::f16: return 2;
    case Element::byte: return 1;
  }
  return 0;
}

template <class T>
constexpr Element element_of() {
  if constexpr (std::is_same_v<T, float>) return Element::f32;
  else if constexpr (std::is_same_v<T, double>) return Element::f64;
  else if constexpr (std::is_same_v<T, bf16>) return Element::bf16;
  else if constexpr (std::is_same_v<T, f16>) return Element::f16;
  else {
    static_assert(sizeof(T) == 1 && std::is_trivially_copyable_v<T>, "collectives move f32, f64, bf16, f16 or bytes");
    return Element::byte;
  }
}

// A collective in flight. wait() returns once its output may be read and its
// input reused; a default Work is already complete. The time a caller spends
// blocked in wait() is added to `waited` (nanoseconds): communication that
// backward did not hide.
class Work {
public:
  Work() = default;
  Work(std::shared_future<void> done, std::shared_ptr<std::atomic<std::int64_t>> waited)
      : done_(std::move(done)), waited_(std::move(waited)) {}
  void wait() const {
    if (!done_.valid()) return;
    if (waited_ && !ready()) {
      const auto start = std::chrono::steady_clock::now();
      done_.get();
      *waited_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    }
    done_.get();
  }
  bool ready() const {
    return !done_.valid() || done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }

private:
  std::shared_future<void> done_;
  std::shared_ptr<std::atomic<std::int64_t>> waited_;
};

// What a rank's collectives cost: bytes each way, seconds during which at
// least one was moving, and seconds the trainer spent waiting for them.
struct Traffic {
  std::uint64_t sent = 0, received = 0;
  double busy_seconds = 0, waited_seconds = 0;
};

class Communicator {
public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The machine a rank runs on (for placing work per node and for messages).
  virtual std::string host_of(int rank) const = 0;
  // What the job is doing now ("step 12"), for the message when a collective cannot complete.
  virtual void set_phase(std::string phase) = 0;

  // Typed calls; each counts its traffic and hands the bytes to the transport.

  // x = the element-wise sum of every rank's x.
  template <class T>
  Work all_reduce_sum(std::span<T> x, const std::string& what) {
    count_ring(2 * x.size_bytes());
    return all_reduce_sum_bytes(x.data(), x.size(), element_of<T>(), what);
  }
  // out = the sum over ranks of their in[offset_r, offset_r + counts[r]) for
  // this rank r: in holds every rank's part, in rank order.
  template <class T>
  Work reduce_scatter_sum(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts,
                          const std::string& what) {
    check_parts(in.size(), out.size(), counts, "reduce_scatter");
    count_ring(in.size_bytes());
    return reduce_scatter_sum_bytes(in.data(), out.data(), counts, element_of<T>(), what);
  }
  // out = every rank's `in`, in rank order; rank r's has counts[r] elements.
  template <class T>
  Work all_gather(std::span<const T> in, std::span<T> out, std::span<const std::size_t> counts,
                  const std::string& what) {
    check_parts(out.size(), in.size(), counts, "all_gather");
    count_ring(out.size_bytes());
    return all_gather_bytes(in.data(), out.data(), counts, element_of<T>(), what);
  }
  // Every rank's x becomes root's.
  template <class T>
  Work broadcast(std::span<T> x, int root, const std::string& what) {
    static_assert(std::is_trivially_copyable_v<T>);
    count_ring(x.size_bytes());
    return broadcast_bytes(x.data(), x.size_bytes(), root, what);
  }
  // Every rank sends part r of `in` to rank r and receives rank r's part for
  // it into part r of `out`: the parts lie in rank order, `send[r]` and
  // `recv[r]` elements long (MPI's all-to-all-v; an expert-parallel layer's
  // rows going to their experts and back).
  template <class T>
  Work all_to_all(std::span<const T> in, std::span<const std::size_t> send, std::span<T> out,
                  std::span<const std::size_t> recv, const std::string& what) {
    std::size_t to_send = 0, to_receive = 0;
    for (std::size_t c : send) to_send += c;
    for (std::size_t c : recv) to_receive += c;
    if (int(send.size()) != size() || int(recv.size()) != size() || to_send != in.size() || to_receive != out.size())
      throw Error("internal: all_to_all parts do not add up to the buffers");
    const std::size_t own = std::size_t(rank());
    tally_->sent += (to_send - send[own]) * sizeof(T);
    tally_->received += (to_receive - recv[own]) * sizeof(T);
    return all_to_all_bytes(in.data(), send, out.data(), recv, element_of<T>(), what);
  }
  // Point-to-point: messages between two ranks with the same tag arrive in
  // the order they were sent; tags keep apart streams that interleave (a
  // pipeline's activations and gradients of several chunks).
  template <class T>
  Work send(std::span<const T> x, int peer, const std::string& what, int tag = 0) {
    tally_->sent += x.size_bytes();
    return send_bytes(x.data(), x.size_bytes(), peer, tag, what);
  }
  template <class T>
  Work recv(std::span<T> x, int peer, const std::string& what, int tag = 0) {
    tally_->received += x.size_bytes();
    return recv_bytes(x.data(), x.size_bytes(), peer, tag, what);
  }
  // The ranks of this communicator that pass the same color, in rank order,
  // as a communicator of their own; every rank must call it. `name` names
  // the group in messages.
  virtual std::unique_ptr<Communicator> split(int color, const std::string& name) = 0;

  // Returns when every rank has called it. `patient` waits without the
  // transport's timeout: for waits whose length is the work of one rank
  // (tokenising a dataset for the others), not a collective's.
  virtual void barrier(const std::string& what, bool patient = false) = 0;

  Traffic traffic() const {
    Traffic t = *tally_;
    std::tie(t.busy_seconds, t.waited_seconds) = timings();
    return t;
  }

  // Blocking conveniences for small values.
  double sum(double x, const std::string& what) {
    all_reduce_sum(std::span<double>(&x, 1), what).wait();
    return x;
  }
  double max(double x, const std::string& what);
  // Every rank's text, in rank order.
  std::vector<std::string> all_gather_text(const std::string& text, const std::string& what);

protected:
  // Seconds busy and waited for, for a transport that measures them.
  virtual std::pair<double, double> timings() const { return {0, 0}; }
  virtual Work all_reduce_sum_bytes(void* data, std::size_t count, Element e, const std::string& what) = 0;
  virtual Work reduce_scatter_sum_bytes(const void* in, void* out, std::span<const std::size_t> counts, Element e,
                                        const std::string& what) = 0;
  virtual Work all_gather_bytes(const void* in, void* out, std::span<const std::size_t> counts, Element e,
                                const std::string& what) = 0;
  virtual Work broadcast_bytes(void* data, std::size_t bytes, int root, const std::string& what) = 0;
  virtual Work all_to_all_bytes(const void* in, std::span<const std::size_t> send, void* out,
                                std::span<const std::size_t> recv, Element e, const std::string& what) = 0;
  virtual Work send_bytes(const void* data, std::size_t bytes, int peer, int tag, const std::string& what) = 0;
  virtual Work recv_bytes(void* data, std::size_t bytes, int peer, int tag, const std::string& what) = 0;

private:
  // A ring moves (w-1)/w of `bytes` out of each rank and into it.
  void count_ring(std::size_t bytes) {
    const int w = size();
    if (w < 2) return;
    const std::uint64_t moved = std::uint64_t(double(bytes) * double(w - 1) / double(w));
    tally_->sent += moved;
    tally_->received += moved;
  }
  void check_parts(std::size_t whole, std::size_t part, std::span<const std::size_t> counts, const char* op) const {
    std::size_t total = 0;
    for (std::size_t c : counts) total += c;
    if (int(counts.size()) != size() || total != whole || counts[std::size_t(rank())] != part)
      throw Error(std::string("internal: ") + op + " parts do not add up to the buffer");
  }

  Traffic traffic_;
  Traffic* tally_ = &traffic_;  // a group counts into its job's

protected:
  // This communicator's traffic counts into `job`'s (a group made by split).
  void count_into(Communicator& job) { tally_ = job.tally_; }
};

inline double Communicator::max(double x, const std::string& what) {
  std::vector<double> all(static_cast<std::size_t>(size()));
  const std::vector<std::size_t> ones(std::size_t(size()), 1);
  all_gather(std::span<const double>(&x, 1), std::span<double>(all), ones, what).wait();
  double m = x;
  for (double v : all) m = v > m ? v : m;
  return m;
}

inline std::vector<std::string> Communicator::all_gather_text(const std::string& text, const std::string& what) {
  const std::size_t w = std::size_t(size());
  std::vector<double> lengths(w);
  const double mine = double(text.size());
  const std::vector<std::size_t> ones(w, 1);
  all_gather(std::span<const double>(&mine, 1), std::span<double>(lengths), ones, what).wait();
  std::vector<std::size_t> counts(w);
  std::size_t total = 0;
  for (std::size_t r = 0; r < w; ++r) total += counts[r] = std::size_t(lengths[r]);
  std::vector<unsigned char> bytes(total);
  const auto* begin = reinterpret_cast<const unsigned char*>(text.data());
  all_gather(std::span<const unsigned char>(begin, text.size()), std::span<unsigned char>(bytes), counts, what).wait();
  std::vector<std::string> out;
  std::size_t at = 0;
  for (std::size_t r = 0; r < w; ++r) {
    out.emplace_back(reinterpret_cast<const char*>(bytes.data()) + at, counts[r]);
    at += counts[r];
  }
  return out;
}

}  // namespace ft::comm
