// The stock plugin for the CPU: every family ft ships (Llama 2/3, Mistral,
// Qwen2, TinyLlama, SmolLM2; GPT-NeoX and Pythia) with every stock policy.
// The families share one source because the engine behind a Trainer does
// not depend on the family: compiled once, it serves both.
#include <ft/plugin/define.hpp>
#include <ft/stock.hpp>

FT_PLUGIN("ft-cpu", FT_VERSION_STRING,
          ft::plugin::product<ft::stock::Families, ft::stock::Precisions, ft::stock::Parallelisms,
                              ft::stock::Optimizers, ft::stock::Adapters>)
