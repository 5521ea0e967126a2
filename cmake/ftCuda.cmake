# The CUDA backend, built wherever nvcc is found (FT_ENABLE_CUDA=AUTO; ON
# requires it, OFF skips it). Sets FT_CUDA to whether it is built, and
# FT_CUDA_CHECKS to whether the GPU test programs are.
#
# Which code nvcc makes, unless the caller chose CMAKE_CUDA_ARCHITECTURES:
#  - where a GPU is visible (nvidia-smi lists one): machine code for sm_80
#    (A100) and sm_90 (H100/H200), the set ft ships;
#  - where none is (this project's build machines: nvcc, no GPU): PTX for
#    compute_80 only. It is compiled and checked as fully as machine code
#    (cicc runs; ptxas and the second architecture do not, a third of the
#    plugin's compile time), and a driver turns it into machine code for
#    any sm_80+ GPU when the plugin first loads. The GPU test programs,
#    which could only skip here, are not built (FT_BUILD_CUDA_CHECKS).
set(FT_CUDA OFF)
set(FT_CUDA_CHECKS OFF)

# What CUDA sources that include ft's headers need, carried by ft::ft
# whether or not this build has CUDA:
#  - constexpr functions callable in device code: bf16 and fp16 convert
#    through std::bit_cast;
#  - Eigen 3.4's defaulted host/device members warn under nvcc 12+ (#20012)
#    although they are right; the warning is silenced, nothing else;
#  - OpenMP in the host compiler: the host side of a CUDA source runs the
#    CPU launcher too (the reference a device result is checked against).
target_compile_options(ft INTERFACE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -diag-suppress=20012 -Xcompiler=-fopenmp>)

if(FT_ENABLE_CUDA STREQUAL "OFF")
  return()
endif()
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  if(FT_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "FT_ENABLE_CUDA=ON but no nvcc was found (set CMAKE_CUDA_COMPILER)")
  endif()
  message(STATUS "ft: CUDA backend not built (no nvcc)")
  return()
endif()
find_program(FT_NVIDIA_SMI nvidia-smi)
set(ft_gpu_visible OFF)
if(FT_NVIDIA_SMI)
  execute_process(COMMAND ${FT_NVIDIA_SMI} -L RESULT_VARIABLE ft_smi_status OUTPUT_VARIABLE ft_smi_gpus ERROR_QUIET)
  if(ft_smi_status EQUAL 0 AND ft_smi_gpus MATCHES "^GPU ")
    set(ft_gpu_visible ON)
  endif()
endif()
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  if(ft_gpu_visible)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  else()
    set(CMAKE_CUDA_ARCHITECTURES 80-virtual)
  endif()
endif()
option(FT_BUILD_CUDA_CHECKS "Build the GPU test programs (default: where a GPU is visible)" ${ft_gpu_visible})
enable_language(CUDA)
# CUDA sources are C++20, as the headers are. CMake 3.25 does not know
# nvcc's flag for it (3.26 does) and would refuse the dialect, so it is told.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)
find_package(CUDAToolkit REQUIRED)
set(FT_CUDA ON)
set(FT_CUDA_CHECKS ${FT_BUILD_CUDA_CHECKS})
if(ft_gpu_visible)
  set(ft_gpu_here "a GPU is visible")
else()
  set(ft_gpu_here "no GPU is visible, so PTX is the default and the GPU test programs are not built unless FT_BUILD_CUDA_CHECKS=ON")
endif()
message(STATUS "ft: CUDA backend built for ${CMAKE_CUDA_ARCHITECTURES} (${ft_gpu_here})")

# NCCL, where the toolkit has it (/usr/local/cuda here): ft::nccl, for the
# communicator over device buffers (ft/device/cuda/nccl.hpp). Sets FT_NCCL.
set(FT_NCCL OFF)
find_library(FT_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
find_path(FT_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
if(FT_NCCL_LIBRARY AND FT_NCCL_INCLUDE_DIR)
  add_library(ft::nccl UNKNOWN IMPORTED GLOBAL)
  set_target_properties(ft::nccl PROPERTIES IMPORTED_LOCATION ${FT_NCCL_LIBRARY}
                                            INTERFACE_INCLUDE_DIRECTORIES ${FT_NCCL_INCLUDE_DIR})
  set(FT_NCCL ON)
  message(STATUS "ft: NCCL found: ${FT_NCCL_LIBRARY}")
endif()

# ft's own CUDA targets build without a warning.
function(ft_cuda_strict target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--Werror all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
endfunction()
