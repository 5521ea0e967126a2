// bench_generate: the inference engine's speed on the CPU (bench/generate.hpp).
#include "generate.hpp"

int main(int argc, char** argv) { return ft::bench::generate_main<ft::device::Cpu>("bench_generate", argc, argv); }
