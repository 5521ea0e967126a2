#pragma once
// Token embedding: out[n, :] = table[ids[n], :], or out[n, :] += table[ids[n], :]
// for a second table (learned positions) added to the first.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "ft/core/error.hpp"

#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/device/cpu.hpp"
#include "ft/tensor/scratch.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::nn {

// One row per call, its columns shared by a team of lanes.
template <class T>
struct EmbeddingForwardRow {
  T* out;
  const std::int32_t* ids;
  const T* table;
  index_t C;
  bool accumulate;  // add the row to out (rounded to T, as torch adds two tensors of T)

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t n, const Team& team) const {
    const T* row = table + index_t(ids[n]) * C;
    for (index_t c = team.rank; c < C; c += team.size)
      out[n * C + c] = accumulate ? T(acc_t<T>(out[n * C + c]) + acc_t<T>(row[c])) : row[c];
  }
};

// A batch's rows grouped by token id, so that each table row's gradient has
// one owner: rows[starts[u] .. starts[u + 1]) are the rows of token ids[u],
// in increasing order. Made on the host, where a batch's ids are. Rows of
// `padding_idx` are left out: as torch's nn.Embedding(padding_idx=...), which
// HF builds with the config's pad_token_id, that row takes no gradient.
struct TokenRows {
  std::vector<std::int32_t> ids, starts, rows;

  TokenRows(const std::int32_t* host_ids, index_t N, std::int32_t padding_idx = -1) {
    for (index_t n = 0; n < N; ++n)
      if (host_ids[n] != padding_idx) rows.push_back(std::int32_t(n));
    std::stable_sort(rows.begin(), rows.end(), [&](std::int32_t a, std::int32_t b) { return host_ids[a] < host_ids[b]; });
    N = index_t(rows.size());
    for (index_t k = 0; k < N; ++k)
      if (k == 0 || host_ids[rows[std::size_t(k)]] != host_ids[rows[std::size_t(k - 1)]]) {
        ids.push_back(host_ids[rows[std::size_t(k)]]);
        starts.push_back(std::int32_t(k));
      }
    starts.push_back(std::int32_t(N));
  }
};

// Group u per call, its columns shared by a team of lanes: table row
// ids[u] adds the gradient of every row of that token, in row order (each
// sum rounded to T as it goes, as a walk down the batch would).
template <class T>
struct EmbeddingBackwardGroup {
  T* dtable;
  const std::int32_t* ids;
  const std::int32_t* starts;
  const std::int32_t* rows;
  const T* dout;
  index_t C;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t u, const Team& team) const {
    T* d = dtable + index_t(ids[u]) * C;
    for (index_t c = team.rank; c < C; c += team.size)
      for (std::int32_t k = starts[u]; k < starts[u + 1]; ++k)
        d[c] = T(acc_t<T>(d[c]) + acc_t<T>(dout[index_t(rows[k]) * C + c]));
  }
};

template <class Device = device::Cpu, class T>
void embedding_forward(T* out, const std::int32_t* ids, const T* table, index_t N, index_t C,
                       bool accumulate = false) {
  Device::parallel_rows(N, C, EmbeddingForwardRow<T>{out, ids, table, C, accumulate});
}

// A learned position table has `rows` rows; HF indexes past it with an error.
inline void check_position_rows(index_t rows, std::span<const std::int32_t> positions) {
  for (std::int32_t p : positions)
    if (p >= rows)
      throw Error("position " + std::to_string(p) + " is past the model's learned positions (n_positions = " +
                  std::to_string(rows) + "); use sequences of at most " + std::to_string(rows) + " tokens");
}

// host_ids: the batch's ids on the host (the grouping is made there).
// padding_idx (-1: none) takes no gradient.
template <class Device = device::Cpu, class T>
void embedding_backward(T* dtable, const std::int32_t* host_ids, const T* dout, index_t N, index_t C,
                        std::int32_t padding_idx = -1) {
  const TokenRows groups(host_ids, N, padding_idx);
  if (groups.ids.empty()) return;
  using Memory = typename Device::Memory;
  auto upload = [](const std::vector<std::int32_t>& v) {
    auto buffer = std::make_unique<memory::Scratch<std::int32_t, Memory>>(index_t(v.size()));
    Device::from_host(buffer->data(), v.data(), v.size() * sizeof(std::int32_t));
    return buffer;
  };
  const auto ids = upload(groups.ids), starts = upload(groups.starts), rows = upload(groups.rows);
  Device::parallel_rows(index_t(groups.ids.size()), C,
                        EmbeddingBackwardGroup<T>{dtable, ids->data(), starts->data(), rows->data(), dout, C});
}

}  // namespace ft::nn
