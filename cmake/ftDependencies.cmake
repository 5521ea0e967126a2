# The packages ft's headers need. Shared by the build and by the installed
# ftConfig.cmake, so that a consumer of find_package(ft) gets the same set.
include(CMakeFindDependencyMacro)
macro(ft_find_dependency)
  if(CMAKE_FIND_PACKAGE_NAME)        # inside find_package(ft)
    find_dependency(${ARGN})
  else()                             # building ft itself
    find_package(${ARGN} REQUIRED)
  endif()
endmacro()
ft_find_dependency(Eigen3 3.3 NO_MODULE)
ft_find_dependency(range-v3)
ft_find_dependency(Boost 1.74)
ft_find_dependency(tomlplusplus 3)
ft_find_dependency(nlohmann_json 3)

# OpenMP runs ft's CPU kernels on all cores.
ft_find_dependency(OpenMP)

# MPI carries the collectives of a job of several ranks (comm/mpi.hpp). ft
# calls MPI's C functions from C++; the removed C++ bindings are not wanted.
set(MPI_CXX_SKIP_MPICXX ON)
ft_find_dependency(MPI COMPONENTS CXX)

# Matrix products go to BLAS. OpenBLAS built on OpenMP is preferred: one
# thread pool for ft's loops and BLAS's, instead of two fighting for the same
# cores. Debian installs it beside the default (pthreads) build; linking it by
# path with a run path makes the loader pick it whatever the system default is.
if(NOT TARGET ft::blas)
  find_library(FT_BLAS_LIBRARY NAMES libopenblas.so.0 openblas
    PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
  if(NOT FT_BLAS_LIBRARY)
    find_library(FT_BLAS_LIBRARY NAMES openblas blas REQUIRED)
  endif()
  find_path(FT_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES ${CMAKE_LIBRARY_ARCHITECTURE} openblas REQUIRED)
  add_library(ft::blas INTERFACE IMPORTED)
  get_filename_component(ft_blas_dir ${FT_BLAS_LIBRARY} DIRECTORY)
  set_target_properties(ft::blas PROPERTIES
    INTERFACE_LINK_LIBRARIES "${FT_BLAS_LIBRARY}"
    INTERFACE_LINK_OPTIONS "LINKER:-rpath,${ft_blas_dir}"
    INTERFACE_INCLUDE_DIRECTORIES "${FT_CBLAS_INCLUDE_DIR}")
endif()

# Tokenizers split text with Unicode-class regular expressions (GPT-2, Llama 3,
# Qwen2 patterns): PCRE2 with its JIT.
if(NOT TARGET PkgConfig::PCRE2)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET GLOBAL libpcre2-8)
endif()

# Dataset files compressed with gzip or zstd (data/compressed.hpp).
ft_find_dependency(ZLIB)
if(NOT TARGET PkgConfig::ZSTD)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET GLOBAL libzstd)
endif()
