// ft's engine library on the CPU: what train/compiled.hpp lists. One source:
// the engines share most of their code (the data path, checkpoints, JSON,
// the text tools), and split by dtype into three sources they took 164 s of
// CPU time where together they take 86 s.
#include <ft/train/compiled.hpp>

namespace ft {
FT_COMPILED(, device::Cpu)
}  // namespace ft
