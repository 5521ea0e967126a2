#pragma once
// An objective over whole sequences instead of tokens (preference tuning):
// the head gives it each position's token loss (-log p(target)) and mean
// logit, it returns the micro-batch's loss and, when training, the weight
// each position's token-loss gradient takes. The head then computes the
// gradient in a second pass over its chunks, so the logits are never kept
// (nn/cross_entropy.hpp), and the layers below see an ordinary gradient.
#include <span>

#include "ft/models/batch.hpp"

namespace ft::models {

class SequenceObjective {
public:
  virtual ~SequenceObjective() = default;
  // token_loss, logit_mean: [N] (0 where nothing is scored); weight: [N],
  // written when `backward` (the gradient of position n is weight[n] times
  // that of its token loss, before the divisor HeadOptions::token_count).
  virtual double score(const Batch& batch, std::span<const double> token_loss, std::span<const double> logit_mean,
                       std::span<double> weight, bool backward) = 0;
};

}  // namespace ft::models
