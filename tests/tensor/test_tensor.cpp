// Tensors: views share storage, the allocator counts bytes, 16-bit types round.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <ft/tensor/tensor.hpp>

namespace test_tensor {

using namespace ft;

TEST_CASE("slices, transposes and reshapes are views of the same storage") {
  Tensor<float> t(Shape{2, 3, 4});
  for (index_t i = 0; i < t.numel(); ++i) t.data()[i] = float(i);
  CHECK(t.is_contiguous());
  Tensor<float> s = t.slice(1, 1, 3);
  CHECK(s.shape() == Shape{2, 2, 4});
  CHECK(s.at(1, 0, 2) == 18.0f);  // row 1, column 1+0, element 2
  CHECK(!s.is_contiguous());
  CHECK(s.shares_storage_with(t));
  Tensor<float> tr = t.transpose(1, 2);
  CHECK(tr.at(0, 3, 1) == t.at(0, 1, 3));
  s.at(0, 0, 0) = -1.0f;
  CHECK(t.at(0, 1, 0) == -1.0f);
  CHECK(t.reshape({6, 4}).at(5, 3) == 23.0f);
  CHECK_THROWS_WITH_AS(t.reshape({5, 5}), "cannot reshape [2, 3, 4] to [5, 5]", Error);
  CHECK_THROWS_AS(s.reshape({16}), Error);
  CHECK_THROWS_AS(t.slice(0, 1, 3), Error);
}

TEST_CASE("the host allocator counts current and peak bytes") {
  auto& stats = memory::Host::stats();
  std::size_t before = stats.current();
  stats.reset_peak();
  {
    Tensor<float> a(Shape{1000});
    CHECK(stats.current() == before + 4000);
    {
      Tensor<double> b(Shape{10, 10});
      Tensor<double> view = b.slice(0, 2, 4);  // views allocate nothing
      CHECK(stats.current() == before + 4800);
    }
    CHECK(stats.current() == before + 4000);
  }
  CHECK(stats.current() == before);
  CHECK(stats.peak() == before + 4800);
}

TEST_CASE("bf16 and f16 round to nearest even and keep specials") {
  CHECK(float(bf16(1.0f)) == 1.0f);
  CHECK(float(bf16(3.140625f)) == 3.140625f);                          // exactly representable
  CHECK(bf16(1.0f + 1.0f / 256).bits == bf16(1.0f).bits);              // tie goes to even
  CHECK(bf16(1.0f + 3.0f / 256).bits == bf16(1.0f + 1.0f / 64).bits);  // tie goes to even, upward
  CHECK(std::isnan(float(bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(float(bf16(std::numeric_limits<float>::infinity()))));
  CHECK(float(f16(65504.0f)) == 65504.0f);
  CHECK(std::isinf(float(f16(65520.0f))));
  CHECK(float(f16(5.9604644775390625e-8f)) == 5.9604644775390625e-8f);  // smallest subnormal
  CHECK(float(f16(2.9802322387695312e-8f)) == 0.0f);                    // half of it: tie to zero
  CHECK(float(f16(-0.333251953125f)) == -0.333251953125f);
  for (float x : {0.1f, -2.7f, 1000.5f, 1e-5f}) {
    CHECK(std::abs(float(bf16(x)) - x) <= std::abs(x) / 256);
    CHECK(std::abs(float(f16(x)) - x) <= std::abs(x) / 2048 + 6e-8f);
  }
}

}  // namespace test_tensor
