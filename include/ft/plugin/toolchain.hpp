#pragma once
// FT_TOOLCHAIN_ID names what decides C++ binary compatibility between ftrun
// and a plugin: compiler family and major version, standard library and its
// release, and libstdc++'s string ABI. Host and plugin each compute it from
// their own compiler's macros; the host refuses a plugin whose id differs.
#include <cstddef>  // defines the standard library's version macros

#define FT_TOOLCHAIN_STR_(x) #x
#define FT_TOOLCHAIN_STR(x) FT_TOOLCHAIN_STR_(x)

#if defined(__clang__)
#define FT_TOOLCHAIN_COMPILER "clang-" FT_TOOLCHAIN_STR(__clang_major__)
#elif defined(__GNUC__)
#define FT_TOOLCHAIN_COMPILER "gcc-" FT_TOOLCHAIN_STR(__GNUC__)
#else
#define FT_TOOLCHAIN_COMPILER "unknown-compiler"
#endif

#if defined(_LIBCPP_VERSION)
#define FT_TOOLCHAIN_STDLIB "libc++-" FT_TOOLCHAIN_STR(_LIBCPP_VERSION)
#elif defined(__GLIBCXX__)
#define FT_TOOLCHAIN_STDLIB \
  "libstdc++-" FT_TOOLCHAIN_STR(_GLIBCXX_RELEASE) "-cxx11abi" FT_TOOLCHAIN_STR(_GLIBCXX_USE_CXX11_ABI)
#else
#define FT_TOOLCHAIN_STDLIB "unknown-stdlib"
#endif

#define FT_TOOLCHAIN_ID FT_TOOLCHAIN_COMPILER "/" FT_TOOLCHAIN_STDLIB
