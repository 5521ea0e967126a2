#pragma once
// Ranks over NCCL: device buffers move GPU to GPU (NVLink, PCIe, InfiniBand
// or sockets, as NCCL finds them); host buffers go through the communicator
// this one was started from (Mpi, or Local for a job of one rank), which
// also carries NCCL's unique id from rank 0 to the others. A buffer's
// address says which way it goes, so the trainer calls it as it calls any
// communicator: device gradients and shards here, host token counts and
// norms there. Each transport keeps its own order, which every rank issues
// the same.
//
// Collectives run on a stream of their own, after what the device's stream
// had queued when they were issued, so a stage's reduction moves while the
// next stage's backward computes. A Work waits for the collective's event,
// polling NCCL's asynchronous error and the deadline
// (launch.collective_timeout): past it, the communicator is aborted and the
// wait throws one line naming this rank, the collective and the phase. NCCL
// does not say which peer is at fault; the host communicator's checks do,
// when the peer's process is gone. Creating and splitting the communicator
// wait for every rank under the same deadline.
//
// NCCL's reduce-scatter and all-gather take equal parts. ft's parts are cut
// at tensor boundaries and may differ, so unequal parts run as one NCCL
// group of reductions (broadcasts), one to (from) each part's rank. Between
// two ranks, point-to-point messages arrive in the order sent; NCCL has no
// tags, so only tag 0 is offered on device buffers.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>

#include "ft/comm/communicator.hpp"
#include "ft/comm/job.hpp"
#include "ft/comm/world.hpp"
#include "ft/device/cuda/check.hpp"

namespace ft::comm {

namespace detail {

inline void nccl_check(ncclResult_t status, const char* call) {
  if (status == ncclSuccess || status == ncclInProgress) return;
  throw Error(cuda::failed_call(call) + ": " + ncclGetErrorString(status));
}

inline ncclDataType_t nccl_type(Element e) {
  switch (e) {
    case Element::f32: return ncclFloat32;
    case Element::f64: return ncclFloat64;
    case Element::bf16: return ncclBfloat16;
    case Element::f16: return ncclFloat16;
    case Element::byte: return ncclUint8;
  }
  throw Error("internal: an element NCCL does not move");
}

// Whether `p` points into device (or managed) memory; host memory otherwise.
inline bool on_device(const void* p) {
  if (!p) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // clear it: an unregistered host pointer is not an error here
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// Calls f with a value of the element's type (its zero), to reach typed calls from bytes.
template <class F>
Work with_element(Element e, F&& f) {
  switch (e) {
    case Element::f32: return f(float{});
    case Element::f64: return f(double{});
    case Element::bf16: return f(bf16{});
    case Element::f16: return f(f16{});
    case Element::byte: return f(static_cast<unsigned char>(0));
  }
  throw Error("internal: an element no communicator moves");
}

}  // namespace detail

#define FT_NCCL_CHECK(call) ::ft::comm::detail::nccl_check((call), #call)

namespace detail {

// Runs a blocking NCCL call that returns only once every rank has made it
// (creating or splitting a communicator). NCCL aborts only a communicator it
// has returned, so past the deadline a watchdog ends this process with one
// line naming `where`, as the MPI communicator does for its own waits.
template <class Call>
void within_deadline(double timeout_seconds, const std::string& where, Call&& call) {
  if (timeout_seconds <= 0) return call();
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lock(mutex);
    if (finished.wait_for(lock, std::chrono::duration<double>(timeout_seconds), [&] { return done; })) return;
    std::fflush(stdout);
    std::fprintf(stderr, "ftrun: %s did not complete within %d s (NCCL): a peer has died or hangs\n", where.c_str(),
                 int(timeout_seconds));
    std::fflush(stderr);
    std::_Exit(1);
  });
  auto finish = [&] {
    {
      std::lock_guard lock(mutex);
      done = true;
    }
    finished.notify_one();
    watchdog.join();
  };
  try {
    call();
  } catch (...) {
    finish();
    throw;
  }
  finish();
}

}  // namespace detail

// Makes the GPU of this rank's place on its machine (job.hpp's local rank,
// modulo the GPUs it sees) the current device. Call before anything touches
// the device, so every rank of a machine takes its own GPU.
inline void use_local_gpu() {
  int count = 0;
  FT_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count < 1) throw Error("no CUDA device is visible to this rank");
  FT_CUDA_CHECK(cudaSetDevice(job_place().local_rank % count));
}

class Nccl final : public Communicator {
public:
  // Every rank of `host` calls it, on its current CUDA device.
  Nccl(std::unique_ptr<Communicator> host, double timeout_seconds) : host_(std::move(host)), timeout_(timeout_seconds) {
    ncclUniqueId id{};
    if (host_->rank() == 0) FT_NCCL_CHECK(ncclGetUniqueId(&id));
    host_->broadcast(std::span<ncclUniqueId>(&id, 1), 0, "the NCCL communicator's id").wait();
    detail::within_deadline(timeout_, "rank " + std::to_string(rank()) + ", setup: creating the NCCL communicator",
                            [&] { FT_NCCL_CHECK(ncclCommInitRank(&comm_, host_->size(), id, host_->rank())); });
    open_stream();
  }
  ~Nccl() override {
    if (!aborted_) {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
    cudaEventDestroy(issued_);
    cudaStreamDestroy(stream_);
  }
  Nccl(const Nccl&) = delete;
  Nccl& operator=(const Nccl&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string host_of(int rank) const override { return host_->host_of(rank); }
  void set_phase(std::string phase) override {
    phase_ = phase;
    host_->set_phase(std::move(phase));
  }
  void barrier(const std::string& what, bool patient) override { host_->barrier(what, patient); }

  std::unique_ptr<Communicator> split(int color, const std::string& name) override {
    std::unique_ptr<Communicator> host = host_->split(color, name);
    ncclComm_t part = nullptr;
    detail::within_deadline(timeout_, "rank " + std::to_string(rank()) + ": splitting the NCCL communicator (" + name + ")",
                            [&] { FT_NCCL_CHECK(ncclCommSplit(comm_, color, rank(), &part, nullptr)); });
    auto group = std::unique_ptr<Nccl>(new Nccl(std::move(host), part, timeout_));
    group->count_into(*this);
    return group;
  }

protected:
  std::pair<double, double> timings() const override {
    const Traffic t = host_->traffic();
    return {t.busy_seconds, t.waited_seconds + double(*waited_) * 1e-9};
  }

  Work all_reduce_sum_bytes(void* data, std::size_t count, Element e, const std::string& what) override {
    if (!detail::on_device(data))
      return detail::with_element(e, [&](auto zero) {
        using V = decltype(zero);
        return host_->all_reduce_sum(std::span<V>(static_cast<V*>(data), count), what);
      });
    return enqueue(what, [&] {
      FT_NCCL_CHECK(ncclAllReduce(data, data, count, detail::nccl_type(e), ncclSum, comm_, stream_));
    });
  }

  Work reduce_scatter_sum_bytes(const void* in, void* out, std::span<const std::size_t> counts, Element e,
                                const std::string& what) override {
    if (!detail::on_device(in))
      return detail::with_element(e, [&](auto zero) {
        using V = decltype(zero);
        return host_->reduce_scatter_sum(std::span<const V>(static_cast<const V*>(in), total(counts)),
                                         std::span<V>(static_cast<V*>(out), counts[std::size_t(rank())]), counts,
                                         what);
      });
    return enqueue(what, [&] {
      const ncclDataType_t type = detail::nccl_type(e);
      if (equal(counts)) {
        FT_NCCL_CHECK(ncclReduceScatter(in, out, counts[0], type, ncclSum, comm_, stream_));
        return;
      }
      each_part(counts, e, [&](int r, std::size_t at, std::size_t n) {
        FT_NCCL_CHECK(ncclReduce(static_cast<const char*>(in) + at, out, n, type, ncclSum, r, comm_, stream_));
      });
    });
  }

  Work all_gather_bytes(const void* in, void* out, std::span<const std::size_t> counts, Element e,
                        const std::string& what) override {
    if (!detail::on_device(out))
      return detail::with_element(e, [&](auto zero) {
        using V = decltype(zero);
        return host_->all_gather(std::span<const V>(static_cast<const V*>(in), counts[std::size_t(rank())]),
                                 std::span<V>(static_cast<V*>(out), total(counts)), counts, what);
      });
    return enqueue(what, [&] {
      const ncclDataType_t type = detail::nccl_type(e);
      if (equal(counts)) {
        FT_NCCL_CHECK(ncclAllGather(in, out, counts[0], type, comm_, stream_));
        return;
      }
      each_part(counts, e, [&](int r, std::size_t at, std::size_t n) {
        FT_NCCL_CHECK(ncclBroadcast(in, static_cast<char*>(out) + at, n, type, r, comm_, stream_));
      });
    });
  }

  Work broadcast_bytes(void* data, std::size_t bytes, int root, const std::string& what) override {
    if (!detail::on_device(data))
      return host_->broadcast(std::span<unsigned char>(static_cast<unsigned char*>(data), bytes), root, what);
    return enqueue(what, [&] { FT_NCCL_CHECK(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_)); });
  }

  // NCCL has no all-to-all of its own: one group of sends and receives.
  Work all_to_all_bytes(const void* in, std::span<const std::size_t> send, void* out,
                        std::span<const std::size_t> recv, Element e, const std::string& what) override {
    if (!detail::on_device(out))
      return detail::with_element(e, [&](auto zero) {
        using V = decltype(zero);
        return host_->all_to_all(std::span<const V>(static_cast<const V*>(in), total(send)), send,
                                 std::span<V>(static_cast<V*>(out), total(recv)), recv, what);
      });
    return enqueue(what, [&] {
      const std::size_t width = size_of(e);
      FT_NCCL_CHECK(ncclGroupStart());
      std::size_t s_at = 0, r_at = 0;
      for (int p = 0; p < size(); ++p) {
        const std::size_t s = send[std::size_t(p)], r = recv[std::size_t(p)];
        if (s > 0) FT_NCCL_CHECK(ncclSend(static_cast<const char*>(in) + s_at * width, s * width, ncclUint8, p, comm_, stream_));
        if (r > 0) FT_NCCL_CHECK(ncclRecv(static_cast<char*>(out) + r_at * width, r * width, ncclUint8, p, comm_, stream_));
        s_at += s;
        r_at += r;
      }
      FT_NCCL_CHECK(ncclGroupEnd());
    });
  }

  Work send_bytes(const void* data, std::size_t bytes, int peer, int tag, const std::string& what) override {
    if (!detail::on_device(data))
      return host_->send(std::span<const unsigned char>(static_cast<const unsigned char*>(data), bytes), peer, what,
                         tag);
    untagged(tag, what);
    return enqueue(what, [&] { FT_NCCL_CHECK(ncclSend(data, bytes, ncclUint8, peer, comm_, stream_)); });
  }

  Work recv_bytes(void* data, std::size_t bytes, int peer, int tag, const std::string& what) override {
    if (!detail::on_device(data))
      return host_->recv(std::span<unsigned char>(static_cast<unsigned char*>(data), bytes), peer, what, tag);
    untagged(tag, what);
    return enqueue(what, [&] { FT_NCCL_CHECK(ncclRecv(data, bytes, ncclUint8, peer, comm_, stream_)); });
  }

private:
  Nccl(std::unique_ptr<Communicator> host, ncclComm_t comm, double timeout_seconds)
      : host_(std::move(host)), comm_(comm), timeout_(timeout_seconds) {
    open_stream();
  }
  void open_stream() {
    FT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&issued_, cudaEventDisableTiming));
  }

  // Issues NCCL calls on this communicator's stream after what the device's
  // stream (the legacy default one, where ft's kernels run) has queued.
  template <class Issue>
  Work enqueue(const std::string& what, Issue&& issue) {
    FT_CUDA_CHECK(cudaEventRecord(issued_, 0));
    FT_CUDA_CHECK(cudaStreamWaitEvent(stream_, issued_, 0));
    issue();
    cudaEvent_t done = nullptr;
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    FT_CUDA_CHECK(cudaEventRecord(done, stream_));
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout_));
    std::shared_future<void> complete =
        std::async(std::launch::deferred, [this, done, what, phase = phase_, deadline] {
          try {
            wait_for(done, what, phase, deadline);
          } catch (...) {
            cudaEventDestroy(done);
            throw;
          }
          cudaEventDestroy(done);
        }).share();
    return Work(std::move(complete), waited_);
  }

  void wait_for(cudaEvent_t done, const std::string& what, const std::string& phase,
                std::chrono::steady_clock::time_point deadline) {
    const std::string where = "rank " + std::to_string(rank()) + ", " + (phase.empty() ? "setup" : phase) + ": " + what;
    for (;;) {
      const cudaError_t status = cudaEventQuery(done);
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) ft::cuda::check(status, ("NCCL's " + what).c_str());
      ncclResult_t async = ncclSuccess;
      FT_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        abort_communicator();
        throw Error(where + " failed in NCCL: " + ncclGetErrorString(async));
      }
      if (timeout_ > 0 && std::chrono::steady_clock::now() > deadline) {
        abort_communicator();
        throw Error(where + " did not complete within " + std::to_string(int(timeout_)) +
                    " s (NCCL): a peer has died or hangs");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  void abort_communicator() {
    if (aborted_) return;
    ncclCommAbort(comm_);
    aborted_ = true;
  }
  void untagged(int tag, const std::string& what) const {
    if (tag != 0) throw Error("internal: " + what + " is tagged, and NCCL matches messages by order alone");
  }
  // One NCCL group of calls, one per non-empty part: call(rank, its byte offset, its elements).
  template <class Call>
  void each_part(std::span<const std::size_t> counts, Element e, Call&& call) {
    FT_NCCL_CHECK(ncclGroupStart());
    std::size_t offset = 0;
    for (int r = 0; r < size(); ++r) {
      const std::size_t n = counts[std::size_t(r)];
      if (n > 0) call(r, offset * size_of(e), n);
      offset += n;
    }
    FT_NCCL_CHECK(ncclGroupEnd());
  }
  static bool equal(std::span<const std::size_t> counts) {
    for (std::size_t c : counts)
      if (c != counts[0]) return false;
    return true;
  }
  static std::size_t total(std::span<const std::size_t> counts) {
    std::size_t n = 0;
    for (std::size_t c : counts) n += c;
    return n;
  }

  std::unique_ptr<Communicator> host_;
  ncclComm_t comm_ = nullptr;
  double timeout_;
  std::string phase_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t issued_ = nullptr;
  bool aborted_ = false;
  std::shared_ptr<std::atomic<std::int64_t>> waited_ = std::make_shared<std::atomic<std::int64_t>>(0);
};

// The communicator of this process's job when it trains on GPUs: this
// rank's GPU made current, then NCCL over the job's host communicator
// (world.hpp).
inline std::unique_ptr<Communicator> join_job_on_gpus(double timeout_seconds) {
  use_local_gpu();
  return std::make_unique<Nccl>(join_job(timeout_seconds), timeout_seconds);
}

}  // namespace ft::comm
