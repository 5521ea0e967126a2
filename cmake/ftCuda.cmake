# The CUDA backend: built for sm_80 (A100) and sm_90 (H100/H200) unless the
# caller chose other architectures.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 80 90)
endif()
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
enable_language(CUDA)
# CMake 3.25 does not know nvcc 13's C++20 dialect flag (CUDA_STANDARD 20
# fails at generation), so CUDA sources are C++17 until CMake is newer.
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)
