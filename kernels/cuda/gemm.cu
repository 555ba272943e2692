// GEMM through cuBLAS. cuBLAS is column-major; a row-major matrix with leading dim ld is the
// column-major view of its transpose, so row-major C = op(A) op(B) is computed as column-major
// C^T = op(B)^T op(A)^T: B first, A second, m and n swapped. An operand stored as op(X) reads,
// column-major, as op(X)^T, which is what the product needs: cuBLAS transposes an operand
// exactly when it is transposed in storage.
#include "kernels/cuda/gemm.hpp"

#include <cublas_v2.h>

#include <climits>
#include <vector>

#include "kernels/cuda/launch.cuh"

namespace actorch::kernels::cuda {

namespace {

#define ACTORCH_CUBLAS_CHECK(expr)                                                                 \
  do {                                                                                             \
    const cublasStatus_t actorch_status_ = (expr);                                                 \
    ACTORCH_CHECK(actorch_status_ == CUBLAS_STATUS_SUCCESS, #expr,                                 \
                  " failed: ", cublasGetStatusString(actorch_status_));                            \
  } while (false)

// One handle per thread and device, bound to the current stream at each call.
cublasHandle_t handle() {
  thread_local std::vector<cublasHandle_t> handles;
  const int device = current_device();
  if (size_t(device) >= handles.size())
    handles.resize(size_t(device) + 1, nullptr);
  cublasHandle_t& h = handles[size_t(device)];
  if (!h)
    ACTORCH_CUBLAS_CHECK(cublasCreate(&h)); // leaked at thread exit, as PyTorch's pool does
  ACTORCH_CUBLAS_CHECK(cublasSetStream(h, static_cast<cudaStream_t>(current_stream(device))));
  return h;
}

struct types {
  cudaDataType_t data;
  cublasComputeType_t compute;
};

types types_of(dtype t) {
  switch (t) {
  case dtype::float32: return {CUDA_R_32F, CUBLAS_COMPUTE_32F};
  case dtype::float64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
  case dtype::float16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
  case dtype::bfloat16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
  default: break;
  }
  ACTORCH_FAIL("gemm: CUDA matrix multiply is not implemented for ", dtype_name(t),
               " (nor is it in PyTorch); convert to a floating point dtype");
}

// alpha and beta as cuBLAS reads them: in the compute type.
struct factors {
  double d[2];
  float f[2];
  const void* alpha(dtype t) const { return t == dtype::float64 ? (const void*)&d[0] : &f[0]; }
  const void* beta(dtype t) const { return t == dtype::float64 ? (const void*)&d[1] : &f[1]; }
};

int checked_int(int64_t v, const char* what) {
  ACTORCH_CHECK(v >= 0 && v <= INT_MAX, "gemm: ", what, " ", v, " exceeds cuBLAS's int range");
  return int(v);
}

cublasOperation_t op_of(const gemm_operand& x) {
  return x.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}

// C = beta * C over m rows of n elements with leading dim ldc: the k == 0 product.
// In double, then rounded, as the CPU's alpha == 0 path.
template <class T> struct scale_fn {
  double beta;
  __device__ void operator()(char* (&p)[1]) const {
    T& c = *reinterpret_cast<T*>(p[0]);
    c = beta == 0 ? T(0) : T(compute_t<T>(beta * double(compute_t<T>(c))));
  }
};

void scale_c(dtype t, int64_t batch, int64_t m, int64_t n, const scalar& beta, void* c, int64_t ldc,
             int64_t stride_c) {
  dispatch(t, [&]<class T>() {
    if constexpr (is_floating_v<T>) {
      strided_loop<1> loop;
      loop.ndim = 3;
      loop.sizes[0] = batch;
      loop.sizes[1] = m;
      loop.sizes[2] = n;
      loop.strides[0][0] = stride_c * int64_t(sizeof(T));
      loop.strides[0][1] = ldc * int64_t(sizeof(T));
      loop.strides[0][2] = int64_t(sizeof(T));
      loop.data[0] = static_cast<char*>(c);
      launch_elementwise(loop, scale_fn<T>{beta.to_double()}, "gemm (k = 0 or alpha = 0)");
    }
  });
}

} // namespace

void gemm_batched(dtype t, int64_t batch, int64_t m, int64_t n, int64_t k, const scalar& alpha,
                  const gemm_operand& a, int64_t stride_a, const gemm_operand& b, int64_t stride_b,
                  const scalar& beta, void* c, int64_t ldc, int64_t stride_c) {
  const types ty = types_of(t);
  if (batch == 0 || m == 0 || n == 0)
    return;
  if (k == 0 || alpha.to_double() == 0) { // A and B are not read, as on the CPU
    scale_c(t, batch, m, n, beta, c, ldc, stride_c);
    return;
  }
  const factors f{{alpha.to_double(), beta.to_double()},
                  {float(alpha.to_double()), float(beta.to_double())}};
  const int mi = checked_int(m, "m"), ni = checked_int(n, "n"), ki = checked_int(k, "k");
  const int lda = checked_int(a.ld, "lda"), ldb = checked_int(b.ld, "ldb");
  const int ldci = checked_int(ldc, "ldc");
  if (batch == 1) {
    ACTORCH_CUBLAS_CHECK(cublasGemmEx(handle(), op_of(b), op_of(a), ni, mi, ki, f.alpha(t), b.data,
                                      ty.data, ldb, a.data, ty.data, lda, f.beta(t), c, ty.data,
                                      ldci, ty.compute, CUBLAS_GEMM_DEFAULT));
    return;
  }
  ACTORCH_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle(), op_of(b), op_of(a), ni, mi, ki, f.alpha(t), b.data, ty.data, ldb, stride_b, a.data,
      ty.data, lda, stride_a, f.beta(t), c, ty.data, ldci, stride_c, checked_int(batch, "batch"),
      ty.compute, CUBLAS_GEMM_DEFAULT));
}

void gemm(dtype t, int64_t m, int64_t n, int64_t k, const scalar& alpha, const gemm_operand& a,
          const gemm_operand& b, const scalar& beta, void* c, int64_t ldc) {
  cuda::gemm_batched(t, 1, m, n, k, alpha, a, 0, b, 0, beta, c, ldc, int64_t(m) * ldc);
}

} // namespace actorch::kernels::cuda
