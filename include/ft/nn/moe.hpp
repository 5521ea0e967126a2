#pragma once
// A mixture-of-experts MLP's routing and the row kernels around its experts'
// products (models/block.hpp runs them).
//
//   p = softmax(router(x))              [N, E], in the accumulation type: float32
//                                       as HF computes it, double for double
//   picks = top_k(p), w = p[picks]      renormalised to sum to 1 when asked
//                                       (= softmax(logits[picks]), GraniteMoE's form)
//   y[n] = sum over picks j of w[n, j] * expert_{picks[n, j]}(x[n])
//
// The routing is small (N x E) and decides the shapes of what follows, so
// it is computed on the host: the picks, their weights, and the tokens
// sorted by expert (a counting sort), so that each expert multiplies one
// contiguous run of rows with one GEMM. Row r of that sorted order is one
// (token, pick) pair; `token_at[r]` is its token, `row_of[n k + j]` the row
// of token n's j-th pick. A token's picks are kept in ascending expert
// order, the order in which HF's experts add into a token's output.
//
// HF's load-balancing loss (Switch Transformer's) over the L sparse layers
// of a batch of N tokens, with f_e the share of all L N k picks that went
// to expert e (times k) and P_e the mean of p[:, e]:
//   aux = E sum_e f_e P_e,  f_e = picks_e / (L N),  P_e = sum p[:, e] / (L N)
// The picks are not differentiable, so d aux / d p[n, e] = E f_e / (L N).
// Padding is left out of both (HF's attention_mask): N counts the tokens
// that are not padding, and only they get the gradient.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "ft/core/host_device.hpp"
#include "ft/core/numeric.hpp"
#include "ft/tensor/shape.hpp"

namespace ft::nn {

template <class A>
struct Routing {
  index_t N = 0, E = 0, k = 0;
  bool normalize = true;
  std::vector<A> probs;                  // [N, E]
  std::vector<std::int32_t> expert;      // [N, k], each token's picks in ascending order
  std::vector<A> weight;                 // [N, k]
  std::vector<std::int32_t> token_at;    // [N k]: the token of each sorted row
  std::vector<std::int32_t> row_of;      // [N, k]: the sorted row of each pick
  std::vector<index_t> first;            // [E + 1]: expert e's rows are first[e] .. first[e + 1]
  // The load-balancing loss's counts for this layer (count_routes): the
  // picks and probabilities summed over the tokens that count, which
  // `counted` flags (empty: all N).
  std::vector<double> picks, prob_sums;  // [E]
  std::vector<std::uint8_t> counted;
  index_t counted_tokens = 0;

  index_t rows(index_t e) const { return first[std::size_t(e + 1)] - first[std::size_t(e)]; }
};

// The routing of N tokens from the router's logits [N, E] in host memory.
template <class T, class A = acc_t<T>>
Routing<A> route(const T* logits, index_t N, index_t E, index_t k, bool normalize) {
  Routing<A> r;
  r.N = N, r.E = E, r.k = k, r.normalize = normalize;
  r.probs.resize(std::size_t(N * E));
  r.expert.resize(std::size_t(N * k));
  r.weight.resize(std::size_t(N * k));
  std::vector<std::int32_t> order(static_cast<std::size_t>(E));
  for (index_t n = 0; n < N; ++n) {
    A* p = r.probs.data() + n * E;
    A most = -INFINITY, sum = 0;
    for (index_t e = 0; e < E; ++e) most = std::max(most, A(logits[n * E + e]));
    for (index_t e = 0; e < E; ++e) sum += p[e] = std::exp(A(logits[n * E + e]) - most);
    for (index_t e = 0; e < E; ++e) p[e] /= sum;
    // The k most probable, the lower index first among equals (torch.topk's order).
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [p](std::int32_t a, std::int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    A total = 0;
    for (index_t j = 0; j < k; ++j) total += p[order[std::size_t(j)]];  // summed as HF does, most probable first
    std::sort(order.begin(), order.begin() + k);
    for (index_t j = 0; j < k; ++j) {
      const std::int32_t e = order[std::size_t(j)];
      r.expert[std::size_t(n * k + j)] = e;
      r.weight[std::size_t(n * k + j)] = normalize ? p[e] / total : p[e];
    }
  }
  r.first.assign(std::size_t(E + 1), 0);
  for (std::int32_t e : r.expert) ++r.first[std::size_t(e + 1)];
  std::partial_sum(r.first.begin(), r.first.end(), r.first.begin());
  r.token_at.resize(std::size_t(N * k));
  r.row_of.resize(std::size_t(N * k));
  std::vector<index_t> next(r.first.begin(), r.first.end() - 1);
  for (index_t i = 0; i < N * k; ++i) {
    const index_t row = next[std::size_t(r.expert[std::size_t(i)])]++;
    r.row_of[std::size_t(i)] = std::int32_t(row);
    r.token_at[std::size_t(row)] = std::int32_t(i / k);
  }
  return r;
}

// Expert parallelism: P ranks each hold El of the E experts, rank p the
// experts [p El, (p + 1) El). A rank's sorted rows for rank p's experts are
// one contiguous run, so it sends its runs in rank order and gets their
// outputs back in the same order. What it receives from rank p for its
// local expert j, counts[p El + j] rows, arrives rank after rank; its
// experts multiply them expert after expert (local rows).
struct ExpertRoute {
  std::vector<std::size_t> send, recv;    // [P]: rows to and from each rank
  std::vector<index_t> first;             // [El + 1]: local expert j's rows are first[j] .. first[j + 1]
  std::vector<std::int32_t> received_at;  // [rows]: the received row that each local row is
  std::vector<std::int32_t> local_at;     // [rows]: the local row that each received row is

  index_t rows() const { return first.back(); }
};

// The route of this rank's rows (sorted_first: its Routing's first, over
// all E experts) given the counts every rank sends its El experts.
inline ExpertRoute route_to_ranks(const std::vector<index_t>& sorted_first, index_t P, index_t El,
                                  const std::vector<double>& counts) {
  ExpertRoute r;
  r.first.assign(std::size_t(El + 1), 0);
  for (index_t p = 0; p < P; ++p) {
    r.send.push_back(std::size_t(sorted_first[std::size_t((p + 1) * El)] - sorted_first[std::size_t(p * El)]));
    std::size_t from_p = 0;
    for (index_t j = 0; j < El; ++j) {
      const index_t n = index_t(counts[std::size_t(p * El + j)]);
      from_p += std::size_t(n);
      r.first[std::size_t(j + 1)] += n;
    }
    r.recv.push_back(from_p);
  }
  std::partial_sum(r.first.begin(), r.first.end(), r.first.begin());
  r.received_at.resize(std::size_t(r.rows()));
  r.local_at.resize(std::size_t(r.rows()));
  std::vector<index_t> next(r.first.begin(), r.first.end() - 1);  // each local expert's next row
  index_t received = 0;
  for (index_t p = 0; p < P; ++p)
    for (index_t j = 0; j < El; ++j)
      for (index_t i = 0; i < index_t(counts[std::size_t(p * El + j)]); ++i, ++received) {
        const index_t local = next[std::size_t(j)]++;
        r.received_at[std::size_t(local)] = std::int32_t(received);
        r.local_at[std::size_t(received)] = std::int32_t(local);
      }
  return r;
}

// Sets the load-balancing loss's counts of a routing over the tokens n
// for which counts(n) holds (not padding).
template <class A, class Counts>
void count_routes(Routing<A>& r, Counts&& counts) {
  r.picks.assign(std::size_t(r.E), 0);
  r.prob_sums.assign(std::size_t(r.E), 0);
  r.counted.assign(std::size_t(r.N), 0);
  r.counted_tokens = 0;
  for (index_t n = 0; n < r.N; ++n) {
    if (!counts(n)) continue;
    r.counted[std::size_t(n)] = 1;
    ++r.counted_tokens;
    for (index_t e = 0; e < r.E; ++e) r.prob_sums[std::size_t(e)] += r.probs[std::size_t(n * r.E + e)];
    for (index_t j = 0; j < r.k; ++j) r.picks[std::size_t(r.expert[std::size_t(n * r.k + j)])] += 1;
  }
}

// The router logits' gradient [N, E] (host) from the gradient of the
// picks' weights [N, k] and, when not empty, the load-balancing loss's
// gradient on every probability of column e (the same for every token
// that counted):
// back through the renormalisation, then the softmax, as HF's
// autograd runs it.
template <class T, class A>
void route_backward(const Routing<A>& r, const A* d_weight, const std::vector<A>& d_prob_aux, T* d_logits) {
  const index_t N = r.N, E = r.E, k = r.k;
  std::vector<A> dp(static_cast<std::size_t>(E));
  for (index_t n = 0; n < N; ++n) {
    const A* p = r.probs.data() + n * E;
    if (d_prob_aux.empty() || (!r.counted.empty() && !r.counted[std::size_t(n)])) std::fill(dp.begin(), dp.end(), A(0));
    else std::copy(d_prob_aux.begin(), d_prob_aux.end(), dp.begin());
    const std::int32_t* picks = r.expert.data() + n * k;
    const A* dw = d_weight + n * k;
    const A* w = r.weight.data() + n * k;
    if (r.normalize) {
      A total = 0, dot = 0;
      for (index_t j = 0; j < k; ++j) total += p[picks[j]];
      for (index_t j = 0; j < k; ++j) dot += dw[j] * w[j];
      for (index_t j = 0; j < k; ++j) dp[std::size_t(picks[j])] += (dw[j] - dot) / total;
    } else {
      for (index_t j = 0; j < k; ++j) dp[std::size_t(picks[j])] += dw[j];
    }
    A mean = 0;
    for (index_t e = 0; e < E; ++e) mean += p[e] * dp[std::size_t(e)];
    for (index_t e = 0; e < E; ++e) d_logits[n * E + e] = T(p[e] * (dp[std::size_t(e)] - mean));
  }
}

// Row r of `out`: row index[r] of `in` (a token's input row for each sorted
// row; a received row for each local row, and back).
template <class T>
struct GatherRows {
  T* out;
  const T* in;
  const std::int32_t* index;
  index_t C;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t r, const Team& team) const {
    const T* from = in + index_t(index[r]) * C;
    for (index_t c = team.rank; c < C; c += team.size) out[r * C + c] = from[c];
  }
};

// Token n: its picks' outputs weighted and summed in the order of its
// picks, plus the shared expert's output (when shared is not null) scaled
// by its gate (when shared_gate is not null).
template <class T>
struct CombineExperts {
  using A = acc_t<T>;
  T* out;
  const T* expert_out;
  const std::int32_t* row_of;
  const A* weight;
  const T* shared;
  const A* shared_gate;
  index_t k, C;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t n, const Team& team) const {
    for (index_t c = team.rank; c < C; c += team.size) {
      A sum = 0;
      for (index_t j = 0; j < k; ++j)
        sum += weight[n * k + j] * A(expert_out[index_t(row_of[n * k + j]) * C + c]);
      if (shared) sum += (shared_gate ? shared_gate[n] : A(1)) * A(shared[n * C + c]);
      out[n * C + c] = T(sum);
    }
  }
};

// Token n, backward of CombineExperts' routed part: each pick's weight
// gradient <d out[n], its expert's output> and its row's output gradient
// w d out[n].
template <class T>
struct CombineExpertsBackward {
  using A = acc_t<T>;
  A* d_weight;
  T* d_expert_out;
  const T* d_out;
  const T* expert_out;
  const std::int32_t* row_of;
  const A* weight;
  index_t k, C;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t n, const Team& team) const {
    for (index_t j = 0; j < k; ++j) {
      const index_t row = row_of[n * k + j];
      const A w = A(weight[n * k + j]);
      A dot = 0;
      for (index_t c = team.rank; c < C; c += team.size) {
        const A g = A(d_out[n * C + c]);
        dot += g * A(expert_out[row * C + c]);
        d_expert_out[row * C + c] = T(w * g);
      }
      dot = team.sum(dot);
      if (team.rank == 0) d_weight[n * k + j] = dot;
    }
  }
};

// Token n: d in[n] += the input gradients of its picks' rows.
template <class T>
struct ScatterAddRows {
  using A = acc_t<T>;
  T* d_in;
  const T* d_rows;
  const std::int32_t* row_of;
  index_t k, C;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t n, const Team& team) const {
    for (index_t c = team.rank; c < C; c += team.size) {
      A sum = A(d_in[n * C + c]);
      for (index_t j = 0; j < k; ++j) sum += A(d_rows[index_t(row_of[n * k + j]) * C + c]);
      d_in[n * C + c] = T(sum);
    }
  }
};

// Index n: the shared expert's gate, sigmoid of its logit.
template <class T>
struct SigmoidOf {
  acc_t<T>* out;
  const T* logit;
  FT_HOST_DEVICE void operator()(index_t n) const { out[n] = acc_t<T>(1) / (acc_t<T>(1) + std::exp(-acc_t<T>(logit[n]))); }
};

// Token n, backward of the shared expert's gated output s * shared[n]: the
// shared expert's output gradient s d out[n], and the gate logit's
// <d out[n], shared[n]> s (1 - s).
template <class T>
struct SharedGateBackward {
  using A = acc_t<T>;
  T* d_shared;
  T* d_logit;
  const T* d_out;
  const T* shared;
  const A* gate;
  index_t C;

  template <class Team>
  FT_HOST_DEVICE void operator()(index_t n, const Team& team) const {
    const A s = gate[n];
    A dot = 0;
    for (index_t c = team.rank; c < C; c += team.size) {
      const A g = A(d_out[n * C + c]);
      dot += g * A(shared[n * C + c]);
      d_shared[n * C + c] = T(s * g);
    }
    dot = team.sum(dot);
    if (team.rank == 0) d_logit[n] = T(dot * s * (A(1) - s));
  }
};

}  // namespace ft::nn
