// The CPU's model and LoRA in double precision (core/compiled_dtypes.hpp):
// what the tests' finite differences and double-precision checks build. Its
// own library, ft_engine_double, which only the tests link.
#include <ft/adapters/lora.hpp>
#include <ft/models/transformer.hpp>

namespace ft {
FT_COMPILED_CPU_MODEL(, double)
FT_COMPILED_CPU_LORA(, double)
}  // namespace ft
