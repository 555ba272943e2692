// The check every CUDA runtime call goes through (STYLE.md: throw actorch::error, never exit).
// Includes the CUDA runtime's header: only for files built where actorch has CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include "base/error.hpp"

/// Throws actorch::error naming the call and CUDA's reason when `expr` does not return success.
/// The error is cleared first, so that the next launch check does not blame it on its kernel.
#define ACTORCH_CUDA_CHECK(expr)                                                                   \
  do {                                                                                             \
    const cudaError_t actorch_err_ = (expr);                                                       \
    if (actorch_err_ != cudaSuccess)                                                               \
      (void)cudaGetLastError();                                                                    \
    ACTORCH_CHECK(actorch_err_ == cudaSuccess, #expr,                                              \
                  " failed: ", cudaGetErrorString(actorch_err_));                                  \
  } while (false)

namespace actorch::kernels::cuda {

/// The answer of a query (cudaStreamQuery, cudaEventQuery) named `call`: done, not yet (the
/// not-ready code is cleared), or an error, thrown.
inline bool query_done(cudaError_t err, const char* call) {
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  ACTORCH_CHECK(err == cudaSuccess, call, " failed: ", cudaGetErrorString(err));
  return true;
}

} // namespace actorch::kernels::cuda
