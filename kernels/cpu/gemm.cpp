// gemm: float32 -> cblas_sgemm, float64 -> cblas_dgemm; float16, bfloat16 and the integer
// dtypes (and BLAS-sized problems whose dims overflow BLAS's int) run a column-blocked loop
// that packs a panel of op(B) and accumulates each row of C in double (floats) or in wrapping
// 64-bit unsigned arithmetic (integers: the result is exact modulo 2^bits, as in PyTorch).
#include "kernels/cpu/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <type_traits>
#include <vector>

#include "base/error.hpp"

namespace actorch::kernels::cpu {

namespace {

// Columns of C computed together: one packed panel of op(B) is k x kBlockN accumulators, and
// a row of accumulators stays in registers / L1 while the k loop streams over the panel.
constexpr int64_t kBlockN = 64;

template <class T> using gemm_acc_t = std::conditional_t<is_floating_v<T>, double, uint64_t>;

template <class T> gemm_acc_t<T> to_acc(T v) {
  if constexpr (is_floating_v<T>)
    return double(static_cast<compute_t<T>>(v));
  else
    return static_cast<uint64_t>(static_cast<int64_t>(v)); // sign-extend, then wrap
}

template <class T> T from_acc(gemm_acc_t<T> v) {
  if constexpr (is_floating_v<T>)
    return static_cast<T>(static_cast<compute_t<T>>(v));
  else
    return static_cast<T>(v); // modulo 2^bits (C++20)
}

template <class T> gemm_acc_t<T> scalar_acc(const scalar& s) {
  if constexpr (is_floating_v<T>)
    return s.to_double();
  else
    return static_cast<uint64_t>(s.to<int64_t>());
}

// C = beta * C (C = 0 when beta == 0, without reading C): the whole result when k == 0 or
// alpha == 0.
template <class T> void scale_c(int64_t m, int64_t n, const scalar& beta, T* c, int64_t ldc) {
  const bool zero = beta.to_double() == 0.0;
  const auto b = scalar_acc<T>(beta);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T& out = c[i * ldc + j];
      out = zero ? T(0) : from_acc<T>(b * to_acc(out));
    }
}

// op(A) is (m,k), op(B) is (k,n), C is (m,n); see the file comment.
template <class T>
void gemm_loop(int64_t m, int64_t n, int64_t k, const scalar& alpha_s, const gemm_operand& a,
               const gemm_operand& b, const scalar& beta_s, T* c, int64_t ldc) {
  using acc = gemm_acc_t<T>;
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  const acc alpha = scalar_acc<T>(alpha_s);
  const acc beta = scalar_acc<T>(beta_s);
  const bool beta_zero = beta_s.to_double() == 0.0;

  std::vector<acc> panel(size_t(k * std::min(n, kBlockN)));
  acc row[kBlockN];
  for (int64_t j0 = 0; j0 < n; j0 += kBlockN) {
    const int64_t nb = std::min(kBlockN, n - j0);
    // Pack op(B)[:, j0:j0+nb] row by row, converted to the accumulator type.
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < nb; ++j)
        panel[size_t(p * nb + j)] =
            to_acc(b.trans ? pb[(j0 + j) * b.ld + p] : pb[p * b.ld + j0 + j]);
    for (int64_t i = 0; i < m; ++i) {
      std::fill(row, row + nb, acc(0));
      for (int64_t p = 0; p < k; ++p) {
        const acc x = to_acc(a.trans ? pa[p * a.ld + i] : pa[i * a.ld + p]);
        const acc* brow = panel.data() + p * nb;
        for (int64_t j = 0; j < nb; ++j)
          row[j] += x * brow[j];
      }
      T* crow = c + i * ldc + j0;
      for (int64_t j = 0; j < nb; ++j)
        crow[j] = beta_zero ? from_acc<T>(alpha * row[j])
                            : from_acc<T>(alpha * row[j] + beta * to_acc(crow[j]));
    }
  }
}

bool fits_blas_int(std::initializer_list<int64_t> values) {
  return std::all_of(values.begin(), values.end(), [](int64_t v) { return v <= INT_MAX; });
}

CBLAS_TRANSPOSE blas_trans(const gemm_operand& x) {
  return x.trans ? CblasTrans : CblasNoTrans;
}

} // namespace

void gemm(dtype t, int64_t m, int64_t n, int64_t k, const scalar& alpha, const gemm_operand& a,
          const gemm_operand& b, const scalar& beta, void* c, int64_t ldc) {
  ACTORCH_CHECK(t != dtype::bool_,
                "gemm: matrix multiplication of bool tensors is not supported (as in PyTorch)");
  ACTORCH_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm: negative sizes m=", m, " n=", n, " k=", k);
  if (m == 0 || n == 0)
    return;
  if (k == 0 || alpha.to_double() == 0.0) {
    dispatch(t, [&]<class T>() { scale_c(m, n, beta, static_cast<T*>(c), ldc); });
    return;
  }
  const bool blas =
      (t == dtype::float32 || t == dtype::float64) && fits_blas_int({m, n, k, a.ld, b.ld, ldc});
  if (blas && t == dtype::float32) {
    cblas_sgemm(CblasRowMajor, blas_trans(a), blas_trans(b), int(m), int(n), int(k),
                float(alpha.to_double()), static_cast<const float*>(a.data), int(a.ld),
                static_cast<const float*>(b.data), int(b.ld), float(beta.to_double()),
                static_cast<float*>(c), int(ldc));
  } else if (blas) {
    cblas_dgemm(CblasRowMajor, blas_trans(a), blas_trans(b), int(m), int(n), int(k),
                alpha.to_double(), static_cast<const double*>(a.data), int(a.ld),
                static_cast<const double*>(b.data), int(b.ld), beta.to_double(),
                static_cast<double*>(c), int(ldc));
  } else {
    dispatch(t,
             [&]<class T>() { gemm_loop<T>(m, n, k, alpha, a, b, beta, static_cast<T*>(c), ldc); });
  }
}

void gemm_batched(dtype t, int64_t batch, int64_t m, int64_t n, int64_t k, const scalar& alpha,
                  const gemm_operand& a, int64_t stride_a, const gemm_operand& b, int64_t stride_b,
                  const scalar& beta, void* c, int64_t ldc, int64_t stride_c) {
  const int64_t es = int64_t(element_size(t));
  for (int64_t i = 0; i < batch; ++i) {
    gemm_operand ai = a, bi = b;
    ai.data = static_cast<const char*>(a.data) + i * stride_a * es;
    bi.data = static_cast<const char*>(b.data) + i * stride_b * es;
    gemm(t, m, n, k, alpha, ai, bi, beta, static_cast<char*>(c) + i * stride_c * es, ldc);
  }
}

} // namespace actorch::kernels::cpu
