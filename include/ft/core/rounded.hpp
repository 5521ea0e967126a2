#pragma once
// rounded(x): a float the compiler must round as written. Where ft matches
// another library's float32 arithmetic to the bit (torchao's AdamW4bit,
// bitsandbytes' double-quantized absmax), a product that library rounds
// before a sum must not be fused with it into an FMA, as GCC and Clang do
// with `a * b + c` where the target has one.
#include "ft/core/host_device.hpp"

namespace ft {

FT_HOST_DEVICE inline float rounded(float x) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(x, 0.0f);  // __f*_rn operations are never contracted
#elif defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(x));
  return x;
#elif defined(__GNUC__) && defined(__aarch64__)
  __asm__("" : "+w"(x));
  return x;
#else
  volatile float kept = x;
  return kept;
#endif
}

}  // namespace ft
