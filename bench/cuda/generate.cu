// bench_cuda_generate: the inference engine's speed on a GPU (bench/generate.hpp):
// prefill and decode tokens/s by batch, against tools/bench_hf_generate.py on the same GPU.
#include <ft/device/cuda.cuh>

#include "../generate.hpp"

int main(int argc, char** argv) { return ft::bench::generate_main<ft::device::Cuda>("bench_cuda_generate", argc, argv); }
