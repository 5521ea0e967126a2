#pragma once
// What every GPU check (tests/cuda/) starts with: ctest's "skipped" (77)
// with one line where there is no GPU, and where its fixtures are.
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <cuda_runtime.h>

namespace ft::testing {

// Ends the process with 77 when no CUDA device is present.
inline void skip_without_gpu() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no CUDA device: skipped");
    std::exit(77);
  }
}

#ifdef FT_SOURCE_DIR
// The fixtures directory: the first argument, or the source tree's tests/fixtures.
inline std::filesystem::path fixtures_dir(int argc, char** argv) {
  return argc > 1 ? std::filesystem::path(argv[1]) : std::filesystem::path(FT_SOURCE_DIR) / "tests/fixtures";
}
#endif

}  // namespace ft::testing
