// ft's engine library on the CPU: what train/compiled.hpp lists, and the
// models, adapters and inference engines of core/compiled_dtypes.hpp but
// double (cpu_double.cpp). One source: the engines share most of their code
// (the data path, checkpoints, JSON, the text tools), and split by dtype
// into three sources they took 164 s of CPU time where together they take
// 86 s.
#include <ft/adapters/lora.hpp>
#include <ft/infer/engine.hpp>
#include <ft/models/transformer.hpp>
#include <ft/train/compiled.hpp>

namespace ft {
FT_COMPILED(, device::Cpu)
FT_COMPILED_CPU_MODEL(, float)
FT_COMPILED_CPU_MODEL(, bf16)
FT_COMPILED_CPU_MODEL(, f16)
FT_COMPILED_CPU_LORA(, float)
FT_COMPILED_CPU_LORA(, bf16)
FT_COMPILED_CPU_LORA(, f16)
FT_COMPILED_CPU_INFERENCE(, float)
FT_COMPILED_CPU_INFERENCE(, bf16)
}  // namespace ft
