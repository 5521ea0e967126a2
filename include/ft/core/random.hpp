#pragma once
// Random numbers that a checkpoint can reproduce. Everything random in a run
// (adapter initialisation, dropout masks, data order) is a pure function of
// the recipe's seed and a counter: dropout at micro-batch k, layer l, element
// i is hash(seed, k, l, i), never the n-th draw of a generator that a resumed
// run would have to fast-forward. Recomputing a block in backward
// (activation checkpointing) therefore regenerates the same mask too.
//
// The mixing function is SplitMix64's finaliser (Steele, Lea and Flood 2014):
// cheap, well distributed, and the same on every machine and compiler.
#include <cmath>
#include <cstdint>
#include <numbers>

#include "ft/core/host_device.hpp"

namespace ft {

FT_HOST_DEVICE constexpr std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A key for one stream of random numbers, derived from a parent key and a label.
FT_HOST_DEVICE constexpr std::uint64_t derive_key(std::uint64_t parent, std::uint64_t label) {
  return mix64(parent ^ mix64(label + 0x9e3779b97f4a7c15ull));
}

// The i-th number of stream `key`, uniform in [0, 1) with 24 random bits (exact in f32).
FT_HOST_DEVICE constexpr float uniform01(std::uint64_t key, std::uint64_t i) {
  return float(mix64(key + (i + 1) * 0x9e3779b97f4a7c15ull) >> 40) * 0x1p-24f;
}

// A sequential generator for initialisation and shuffling, whose whole state is one integer.
class Rng {
public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ull); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next() >> 11) * 0x1p-53; }
  // Uniform integer in [0, n), without modulo bias.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = ~std::uint64_t(0) - ~std::uint64_t(0) % n;
    for (;;)
      if (std::uint64_t x = next(); x < limit) return x % n;
  }
  // Standard normal by Box-Muller (one value per call; the partner is dropped for simplicity).
  double normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  std::uint64_t state() const { return state_; }

private:
  std::uint64_t state_;
};

}  // namespace ft
