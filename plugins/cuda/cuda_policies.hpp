#pragma once
// The policies the stock CUDA plugins cross with their model family: the
// CPU plugins' but fp16-mixed.
#include "stock_policies.hpp"

namespace ft::stock::cuda {
using Precisions = std::tuple<precision::FP32, precision::BF16True, precision::BF16Mixed>;
}
