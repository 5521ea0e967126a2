#pragma once
// The element types whose CPU models, adapters and inference engines ft
// compiles once, into its engine library (train/compiled.hpp). A header
// whose class templates are among them lists them in a macro over EXTERN
// and T, and declares them with FT_EXTERN_COMPILED_CPU(macro): under
// FT_COMPILED_ENGINE (a target that links ft::engine) every member a
// source uses is then the library's copy, not generated again in each
// source that builds, trains or serves a model (docs/design.md, Build:
// one test batch took 128 s instead of 218 s).
//
// src/engine/cpu.cpp defines float, bfloat16 and float16 in ft::engine.
// Double, which only the tests' finite differences and double-precision
// checks use, is defined by src/engine/cpu_double.cpp in a library of its
// own that only the tests link (FT_COMPILED_ENGINE_DOUBLE), so neither
// ftrun's build nor an installed ft::engine compiles or assumes it.
#include "ft/core/half.hpp"

#define FT_FOR_COMPILED_CPU_DTYPES(LIST, EXTERN) \
  LIST(EXTERN, float) LIST(EXTERN, bf16) LIST(EXTERN, f16)

#ifdef FT_COMPILED_ENGINE_DOUBLE
#define FT_EXTERN_COMPILED_CPU_DOUBLE(LIST) LIST(extern, double)
#else
#define FT_EXTERN_COMPILED_CPU_DOUBLE(LIST)
#endif

// LIST's classes for every dtype above, declared extern where ft::engine is linked.
#ifdef FT_COMPILED_ENGINE
#define FT_EXTERN_COMPILED_CPU(LIST)       \
  namespace ft {                           \
  FT_FOR_COMPILED_CPU_DTYPES(LIST, extern) \
  FT_EXTERN_COMPILED_CPU_DOUBLE(LIST)      \
  }
#else
#define FT_EXTERN_COMPILED_CPU(LIST)
#endif
