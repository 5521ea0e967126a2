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
// src/engine/cpu.cpp defines float, bfloat16 and float16; src/engine/
// cpu_double.cpp defines double, which only the tests' finite differences
// and double-precision checks use, so a plugin does not link it.
#include "ft/core/half.hpp"

#define FT_FOR_COMPILED_CPU_DTYPES(LIST, EXTERN) \
  LIST(EXTERN, float) LIST(EXTERN, bf16) LIST(EXTERN, f16) LIST(EXTERN, double)

// LIST's classes for every dtype above, declared extern where ft::engine is linked.
#ifdef FT_COMPILED_ENGINE
#define FT_EXTERN_COMPILED_CPU(LIST)       \
  namespace ft {                           \
  FT_FOR_COMPILED_CPU_DTYPES(LIST, extern) \
  }
#else
#define FT_EXTERN_COMPILED_CPU(LIST)
#endif
