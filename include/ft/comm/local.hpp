#pragma once
// A job of one rank: every collective is a copy (or nothing), done at once.
// A single-process run goes through the same calls as a distributed one, so
// there is one training loop, not two.
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "ft/comm/communicator.hpp"

namespace ft::comm {

class Local final : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string host_of(int) const override {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    return name;
  }
  void set_phase(std::string) override {}
  void barrier(const std::string&, bool) override {}
  std::unique_ptr<Communicator> split(int, const std::string&) override { return std::make_unique<Local>(); }

protected:
  Work all_reduce_sum_bytes(void*, std::size_t, Element, const std::string&) override { return {}; }
  Work reduce_scatter_sum_bytes(const void* in, void* out, std::span<const std::size_t> counts, Element e,
                                const std::string&) override {
    copy(in, out, counts[0] * size_of(e));
    return {};
  }
  Work all_gather_bytes(const void* in, void* out, std::span<const std::size_t> counts, Element e,
                        const std::string&) override {
    copy(in, out, counts[0] * size_of(e));
    return {};
  }
  Work broadcast_bytes(void*, std::size_t, int, const std::string&) override { return {}; }
  Work all_to_all_bytes(const void* in, std::span<const std::size_t> send, void* out, std::span<const std::size_t>,
                        Element e, const std::string&) override {
    copy(in, out, send[0] * size_of(e));
    return {};
  }
  Work send_bytes(const void*, std::size_t, int peer, int, const std::string& what) override { no_peer(peer, what); }
  Work recv_bytes(void*, std::size_t, int peer, int, const std::string& what) override { no_peer(peer, what); }

private:
  static void copy(const void* in, void* out, std::size_t bytes) {
    if (in != out && bytes > 0) std::memmove(out, in, bytes);
  }
  [[noreturn]] static void no_peer(int peer, const std::string& what) {
    throw Error("internal: " + what + " addresses rank " + std::to_string(peer) + " in a job of one rank");
  }
};

}  // namespace ft::comm
