// The NCCL communicator (device/cuda/nccl.hpp) on real GPUs, one per rank: sums,
// reduce-scatter and all-gather with equal and unequal parts (the unequal
// ones are NCCL groups), broadcast, bf16 sums, a split group, and host
// buffers going through the host communicator. Run alone (one rank over
// Local) or under mpirun (one rank per GPU over Mpi). Exits 77 (skipped)
// where there is no GPU for every rank of this machine.
#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <ft/comm/local.hpp>
#include <ft/comm/mpi.hpp>
#include <ft/device/cuda/nccl.hpp>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  ++failures;
}

// A device copy of `host`, and back.
template <class T>
struct DeviceBuffer {
  T* data = nullptr;
  std::size_t n = 0;
  explicit DeviceBuffer(const std::vector<T>& host) : n(host.size()) {
    FT_CUDA_CHECK(cudaMalloc(&data, n * sizeof(T) + 1));
    FT_CUDA_CHECK(cudaMemcpy(data, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  explicit DeviceBuffer(std::size_t size) : DeviceBuffer(std::vector<T>(size)) {}
  ~DeviceBuffer() { cudaFree(data); }
  std::vector<T> host() const {
    std::vector<T> out(n);
    FT_CUDA_CHECK(cudaMemcpy(out.data(), data, n * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }
};

// Parts of a buffer cut among w ranks: rank r holds r + 1 values (unequal), or 2 each.
std::vector<std::size_t> parts(int w, bool unequal) {
  std::vector<std::size_t> counts;
  for (int r = 0; r < w; ++r) counts.push_back(unequal ? std::size_t(r + 1) : 2);
  return counts;
}

void check(ft::comm::Communicator& comm) {
  const int w = comm.size(), r = comm.rank();
  const double ranks_sum = w * (w + 1) / 2.0;  // sum over ranks of (rank + 1)

  std::vector<float> mine(5);
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = float((r + 1) * int(i));
  DeviceBuffer<float> summed(mine);
  comm.all_reduce_sum(std::span<float>(summed.data, summed.n), "an all-reduce").wait();
  const auto sums = summed.host();
  for (std::size_t i = 0; i < sums.size(); ++i) expect(sums[i] == float(ranks_sum * double(i)), "all-reduce sum");

  std::vector<ft::bf16> halves(4, ft::bf16(float(r + 1)));
  DeviceBuffer<ft::bf16> summed_halves(halves);
  comm.all_reduce_sum(std::span<ft::bf16>(summed_halves.data, summed_halves.n), "a bf16 all-reduce").wait();
  for (ft::bf16 v : summed_halves.host()) expect(float(v) == float(ranks_sum), "bf16 all-reduce sum");

  for (bool unequal : {false, true}) {
    const std::vector<std::size_t> counts = parts(w, unequal);
    std::size_t total = 0, offset = 0;
    for (int q = 0; q < w; ++q) {
      if (q == r) offset = total;
      total += counts[std::size_t(q)];
    }
    const std::size_t own = counts[std::size_t(r)];
    const std::string kind = unequal ? " (unequal parts)" : " (equal parts)";

    std::vector<float> whole(total);
    for (std::size_t i = 0; i < total; ++i) whole[i] = float((r + 1) * int(i + 1));
    DeviceBuffer<float> in(whole), out(own);
    comm.reduce_scatter_sum(std::span<const float>(in.data, total), std::span<float>(out.data, own), counts,
                            "a reduce-scatter" + kind)
        .wait();
    const auto scattered = out.host();
    for (std::size_t j = 0; j < own; ++j)
      expect(scattered[j] == float(ranks_sum * double(offset + j + 1)), "reduce-scatter" + kind);

    std::vector<float> part(own);
    for (std::size_t j = 0; j < own; ++j) part[j] = float(100 * (offset + j));
    DeviceBuffer<float> part_in(part), gathered(total);
    comm.all_gather(std::span<const float>(part_in.data, own), std::span<float>(gathered.data, total), counts,
                    "an all-gather" + kind)
        .wait();
    const auto all = gathered.host();
    for (std::size_t i = 0; i < total; ++i) expect(all[i] == float(100 * i), "all-gather" + kind);
  }

  DeviceBuffer<float> root_values(std::vector<float>(3, float(r == 0 ? 7 : -1)));
  comm.broadcast(std::span<float>(root_values.data, root_values.n), 0, "a broadcast").wait();
  for (float v : root_values.host()) expect(v == 7, "broadcast from rank 0");

  // Host buffers go through the host communicator.
  expect(comm.sum(double(r + 1), "a host sum") == ranks_sum, "host sum");
  const auto texts = comm.all_gather_text("rank " + std::to_string(r), "host texts");
  for (int q = 0; q < w; ++q) expect(texts[std::size_t(q)] == "rank " + std::to_string(q), "host all-gather of texts");

  // A group of its own: the even ranks and the odd ones.
  std::unique_ptr<ft::comm::Communicator> group = comm.split(r % 2, "ranks of one parity");
  DeviceBuffer<float> one(std::vector<float>{1.0f});
  group->all_reduce_sum(std::span<float>(one.data, 1), "an all-reduce in a group").wait();
  expect(one.host()[0] == float(group->size()), "all-reduce in a split group");
}

}  // namespace

int main() {
  const ft::comm::JobPlace place = ft::comm::job_place();
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < place.local_size) {
    std::printf("skipped: %d rank(s) on this machine need a GPU each, %d visible\n", place.local_size, gpus);
    return 77;
  }
  try {
    ft::comm::use_local_gpu();
    std::unique_ptr<ft::comm::Communicator> host;
    if (place.size > 1) host = std::make_unique<ft::comm::Mpi>(60.0);
    else host = std::make_unique<ft::comm::Local>();
    ft::comm::Nccl comm(std::move(host), 60.0);
    check(comm);
    if (failures == 0) std::printf("nccl: rank %d of %d ok\n", comm.rank(), comm.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_check: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
