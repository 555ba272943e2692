// ACTORCH_HOST_DEVICE marks a function that the CPU and the CUDA kernels share: compiled for
// both sides by nvcc, a plain function elsewhere. The per-element arithmetic of the kernels is
// written once this way, so that CI, which has no GPU, runs what a GPU would compute.
#pragma once

#if defined(__CUDACC__)
#define ACTORCH_HOST_DEVICE __host__ __device__
#else
#define ACTORCH_HOST_DEVICE
#endif
