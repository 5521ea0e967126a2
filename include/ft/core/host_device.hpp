#pragma once
// Math that runs on both backends is written once, as functions and functors
// marked FT_HOST_DEVICE: under nvcc they compile for host and device, in a
// host-only build the mark is empty.
#if defined(__CUDACC__)
#define FT_HOST_DEVICE __host__ __device__
#else
#define FT_HOST_DEVICE
#endif
