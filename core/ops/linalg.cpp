// mm, addmm, bmm and matmul: shape and dtype checks, matmul's rank rules and batch
// broadcasting, and the choice of a layout BLAS can read without a copy. Every product ends in
// one call to kernels::cpu::gemm_batched.
#include "core/ops/linalg.hpp"

#include "core/autograd/grad_mode.hpp"
#include "core/autograd/node.hpp"

#include <algorithm>
#include <optional>
#include <sstream>

#include "core/ops/dispatch.hpp"
#include "core/ops/factory.hpp"
#include "core/tensor_iterator.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cuda/gemm.hpp"

namespace actorch {

namespace kc = kernels::cpu;

namespace {

// Note [Matrix layouts]
// ~~~~~~~~~~~~~~~~~~~~~
// BLAS reads a row-major matrix through a leading dim, optionally transposed. A (r,c) view with
// strides (s0, s1) is therefore passed as is when its rows are contiguous (s1 == 1, ld = s0),
// or with the transpose flag when its columns are (s0 == 1, ld = s1): t(), transpose() and
// row slices need no copy. A size-1 dim's stride is never used, so it does not disqualify a
// layout. The leading dim must not be smaller than the stored row (rows would overlap, as in
// an expanded matrix); such views, and column-sliced ones, are made contiguous first.
std::optional<kc::gemm_operand> blas_layout(int64_t r, int64_t c, int64_t s0, int64_t s1) {
  const int64_t row_s1 = c == 1 ? 1 : s1;
  const int64_t row_ld = r == 1 ? std::max<int64_t>(c, 1) : s0;
  if (row_s1 == 1 && row_ld >= std::max<int64_t>(c, 1))
    return kc::gemm_operand{nullptr, row_ld, false};
  const int64_t col_s0 = r == 1 ? 1 : s0;
  const int64_t col_ld = c == 1 ? std::max<int64_t>(r, 1) : s1;
  if (col_s0 == 1 && col_ld >= std::max<int64_t>(r, 1))
    return kc::gemm_operand{nullptr, col_ld, true};
  return std::nullopt;
}

// A (B,r,c) operand ready for gemm_batched; `t` keeps a contiguous copy alive when one was
// needed. See Note [Matrix layouts].
struct batched_operand {
  tensor t;
  kc::gemm_operand op;
};

batched_operand prepare(const tensor& x) {
  const int64_t r = x.size(1), c = x.size(2);
  if (auto op = blas_layout(r, c, x.stride(1), x.stride(2))) {
    op->data = x.data_ptr();
    return {x, *op};
  }
  tensor y = x.contiguous();
  return {y, kc::gemm_operand{y.data_ptr(), std::max<int64_t>(c, 1), false}};
}

// out (B,m,n), contiguous = alpha * a @ b + beta * out, with a (B,m,k) and b (B,k,n) of any
// strides (a stride-0 batch dim is read as is: one matrix shared by the whole batch).
void run_gemm(const tensor& out, const tensor& a, const tensor& b, const scalar& alpha,
              const scalar& beta) {
  const batched_operand pa = prepare(a);
  const batched_operand pb = prepare(b);
  const int64_t m = out.size(1), n = out.size(2), k = a.size(2);
  ACTORCH_KERNEL(out.device(), gemm_batched, out.dtype(), out.size(0), m, n, k, alpha, pa.op,
                 pa.t.stride(0), pb.op, pb.t.stride(0), beta, out.data_ptr(),
                 std::max<int64_t>(n, 1), m * n);
}

// "2x3": a matrix's shape in PyTorch's mm messages.
std::string mat_str(const tensor& t) {
  std::ostringstream s;
  for (int64_t d = 0; d < t.dim(); ++d)
    s << (d ? "x" : "") << t.size(d);
  return s.str();
}

void check_operands(const char* op, const tensor& a, const tensor& b) {
  check_defined(op, {&a, &b});
  common_device(op, {&a, &b});
}

void check_dtypes(const char* op, const tensor& a, const tensor& b) {
  ACTORCH_CHECK(a.dtype() == b.dtype(), op,
                ": expected mat1 and mat2 to have the same dtype, but got: ", dtype_name(a.dtype()),
                " != ", dtype_name(b.dtype()), " (shapes ", shape_str(a.sizes()), " and ",
                shape_str(b.sizes()), ")");
  ACTORCH_CHECK(a.dtype() != dtype::bool_, op,
                ": matrix products of bool tensors are not supported, as in PyTorch (shapes ",
                shape_str(a.sizes()), " and ", shape_str(b.sizes()), ")");
}

void check_mm_shapes(const char* op, const tensor& a, const tensor& b) {
  ACTORCH_CHECK(a.dim() == 2 && b.dim() == 2, op, ": expected 2-D tensors but got shapes ",
                shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  ACTORCH_CHECK(a.size(1) == b.size(0), op, ": mat1 and mat2 shapes cannot be multiplied (",
                mat_str(a), " and ", mat_str(b), ")");
}

// a (m,k) @ b (k,n) after the checks.
tensor mm_unchecked(const tensor& a, const tensor& b) {
  tensor out = empty({a.size(0), b.size(1)}, {.dtype = a.dtype(), .device = a.device()});
  run_gemm(out.unsqueeze(0), a.unsqueeze(0), b.unsqueeze(0), 1, 0);
  return out;
}

// t is (batch..., r, c): a (B,r,c) view of it when its batch dims collapse into one stride
// (contiguous with each other, or all broadcast with stride 0), a copy otherwise.
tensor collapse_batch(const tensor& t, int64_t batch) {
  const int64_t nb = t.dim() - 2;
  int64_t stride = 0;
  std::optional<int64_t> expected;
  bool ok = true;
  for (int64_t d = nb - 1; d >= 0 && ok; --d) {
    if (t.size(d) == 1)
      continue;
    if (expected)
      ok = t.stride(d) == *expected;
    else
      stride = t.stride(d);
    expected = t.stride(d) * t.size(d);
  }
  const shape_t shape{batch, t.size(-2), t.size(-1)};
  if (ok)
    return t.as_strided(shape, {stride, t.stride(-2), t.stride(-1)}, t.storage_offset());
  return t.reshape(shape);
}

} // namespace

static tensor mm_untracked(const tensor& a, const tensor& b) {
  check_operands("mm", a, b);
  check_mm_shapes("mm", a, b);
  check_dtypes("mm", a, b);
  return mm_unchecked(a, b);
}

static tensor addmm_untracked(const tensor& input, const tensor& a, const tensor& b,
                              const scalar& beta, const scalar& alpha) {
  check_defined("addmm", {&input, &a, &b});
  common_device("addmm", {&input, &a, &b});
  check_mm_shapes("addmm", a, b);
  check_dtypes("addmm", a, b);
  ACTORCH_CHECK(input.dtype() == a.dtype(),
                "addmm: expected input and mat1 to have the same dtype, but got: ",
                dtype_name(input.dtype()), " != ", dtype_name(a.dtype()));
  ACTORCH_CHECK(a.is_floating_point() || (!alpha.is_floating_point() && !beta.is_floating_point()),
                "addmm: for integral input tensors, alpha and beta must not be floating point "
                "numbers (got alpha ",
                alpha.to_double(), ", beta ", beta.to_double(), ")");
  const shape_t shape{a.size(0), b.size(1)};
  ACTORCH_CHECK(input.dim() <= 2 && broadcast_shapes(input.sizes(), shape, "addmm") == shape,
                "addmm: input of shape ", shape_str(input.sizes()),
                " cannot be broadcast to the result's shape ", shape_str(shape), " (mat1 ",
                mat_str(a), ", mat2 ", mat_str(b), ")");
  tensor out = empty(shape, {.dtype = a.dtype(), .device = a.device()});
  const bool use_input = beta.to_double() != 0.0;
  if (use_input)
    out.copy_(input);
  run_gemm(out.unsqueeze(0), a.unsqueeze(0), b.unsqueeze(0), alpha, use_input ? beta : 0);
  return out;
}

static tensor bmm_untracked(const tensor& a, const tensor& b) {
  check_operands("bmm", a, b);
  ACTORCH_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors but got shapes ",
                shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  ACTORCH_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ (", a.size(0), " and ", b.size(0),
                ") in shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  ACTORCH_CHECK(a.size(2) == b.size(1), "bmm: batch1 and batch2 shapes cannot be multiplied (",
                mat_str(a), " and ", mat_str(b), ": ", a.size(2), " != ", b.size(1), ")");
  check_dtypes("bmm", a, b);
  tensor out = empty({a.size(0), a.size(1), b.size(2)}, {.dtype = a.dtype(), .device = a.device()});
  run_gemm(out, a, b, 1, 0);
  return out;
}

static tensor matmul_untracked(const tensor& a, const tensor& b) {
  check_operands("matmul", a, b);
  const int64_t da = a.dim(), db = b.dim();
  ACTORCH_CHECK(da >= 1 && db >= 1,
                "matmul: both arguments need to be at least 1-D, but got "
                "shapes ",
                shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  const int64_t k = a.size(-1);
  const int64_t kb = db == 1 ? b.size(0) : b.size(-2);
  ACTORCH_CHECK(k == kb, "matmul: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
                " cannot be multiplied (", k, " != ", kb, ")");
  check_dtypes("matmul", a, b);

  if (da == 1 && db == 1) // dot product
    return mm_unchecked(a.unsqueeze(0), b.unsqueeze(1)).view({});
  if (da == 1 && db == 2) // row vector times matrix
    return mm_unchecked(a.unsqueeze(0), b).squeeze(0);
  if (db <= 2) {
    // (batch..., m, k) @ (k, n) or (k): fold the batch dims into the rows of one mm, as
    // PyTorch does (a view when a's layout allows it).
    shape_t out_shape(a.sizes().begin(), a.sizes().end() - 1);
    int64_t rows = 1;
    for (int64_t s : out_shape)
      rows *= s;
    const tensor out = mm_unchecked(a.reshape({rows, k}), db == 1 ? b.unsqueeze(1) : b);
    if (db == 2)
      out_shape.push_back(b.size(1));
    return out.view(out_shape);
  }

  // Batched: a is (batch_a..., m, k) or a vector (k) read as (1, k); b is (batch_b..., k, n)
  // with at least one batch dim. The batch dims broadcast against each other.
  const tensor a2 = da == 1 ? a.unsqueeze(0) : a;
  const shape_t batch_a(a2.sizes().begin(), a2.sizes().end() - 2);
  const shape_t batch_b(b.sizes().begin(), b.sizes().end() - 2);
  const size_t nb = std::max(batch_a.size(), batch_b.size());
  for (size_t i = 0; i < nb; ++i) {
    const int64_t sa = i < nb - batch_a.size() ? 1 : batch_a[i - (nb - batch_a.size())];
    const int64_t sb = i < nb - batch_b.size() ? 1 : batch_b[i - (nb - batch_b.size())];
    ACTORCH_CHECK(sa == sb || sa == 1 || sb == 1, "matmul: the batch dims of shapes ",
                  shape_str(a.sizes()), " and ", shape_str(b.sizes()),
                  " cannot be broadcast together (", shape_str(batch_a), " vs ", shape_str(batch_b),
                  ")");
  }
  const shape_t batch = broadcast_shapes(batch_a, batch_b, "matmul");
  const int64_t m = a2.size(-2), n = b.size(-1);
  const int64_t batch_numel = checked_numel(batch, "matmul");
  shape_t a_shape = batch, b_shape = batch;
  a_shape.insert(a_shape.end(), {m, k});
  b_shape.insert(b_shape.end(), {k, n});
  const tensor a3 = collapse_batch(a2.expand(a_shape), batch_numel);
  const tensor b3 = collapse_batch(b.expand(b_shape), batch_numel);
  tensor out = empty({batch_numel, m, n}, {.dtype = a.dtype(), .device = a.device()});
  run_gemm(out, a3, b3, 1, 0);
  shape_t out_shape = batch;
  if (da > 1)
    out_shape.push_back(m);
  out_shape.push_back(n);
  return out.view(out_shape);
}

tensor mm_out(const tensor& out, const tensor& a, const tensor& b) {
  check_operands("mm_out", a, b);
  check_mm_shapes("mm_out", a, b);
  check_dtypes("mm_out", a, b);
  check_defined("mm_out", {&out});
  const shape_t shape{a.size(0), b.size(1)};
  ACTORCH_CHECK(out.sizes() == shape && out.dtype() == a.dtype() && out.device() == a.device(),
                "mm_out: out (", shape_str(out.sizes()), ", ", dtype_name(out.dtype()), ", ",
                out.device().str(), ") must be ", shape_str(shape), ", ", dtype_name(a.dtype()),
                ", ", a.device().str(), ", as the product of ", mat_str(a), " and ", mat_str(b));
  ACTORCH_CHECK(out.is_contiguous(), "mm_out: out of shape ", shape_str(out.sizes()),
                " must be contiguous");
  ACTORCH_CHECK(out.storage() != a.storage() && out.storage() != b.storage(),
                "mm_out: out shares memory with an operand; the product would overwrite what "
                "it reads");
  autograd::check_in_place(out, "mm_out", {&a, &b});
  run_gemm(out.unsqueeze(0), a.unsqueeze(0), b.unsqueeze(0), 1, 0);
  out.storage()->bump_version();
  return out;
}

// Differentiable entry points: forward/backward side by side. ---------------------------------

tensor mm(const tensor& a, const tensor& b) {
  const bool track = autograd::needs_grad({&a, &b});
  tensor out;
  {
    no_grad untracked;
    out = mm_untracked(a, b);
  }
  if (track)
    autograd::record(out, "MmBackward0", {&a, &b}, {a, b}, [](const auto& g, const auto& s) {
      // out = a b: da = g b^T, db = a^T g
      using autograd::needs_input_grad;
      return std::vector<tensor>{needs_input_grad(0) ? mm(g[0], s[1].t()) : tensor(),
                                 needs_input_grad(1) ? mm(s[0].t(), g[0]) : tensor()};
    });
  return out;
}

tensor addmm(const tensor& input, const tensor& a, const tensor& b, const scalar& beta,
             const scalar& alpha) {
  const bool track = autograd::needs_grad({&input, &a, &b});
  tensor out;
  {
    no_grad untracked;
    out = addmm_untracked(input, a, b, beta, alpha);
  }
  if (track)
    autograd::record(out, "AddmmBackward0", {&input, &a, &b}, {a, b},
                     [shape = input.sizes(), be = beta.to_double(),
                      al = alpha.to_double()](const auto& g, const auto& s) {
                       // out = beta input + alpha a b
                       using autograd::needs_input_grad;
                       auto scaled = [](const tensor& t, double f) { return f == 1 ? t : t * f; };
                       return std::vector<tensor>{
                           needs_input_grad(0) ? autograd::sum_to(scaled(g[0], be), shape)
                                               : tensor(),
                           needs_input_grad(1) ? scaled(mm(g[0], s[1].t()), al) : tensor(),
                           needs_input_grad(2) ? scaled(mm(s[0].t(), g[0]), al) : tensor()};
                     });
  return out;
}

tensor bmm(const tensor& a, const tensor& b) {
  const bool track = autograd::needs_grad({&a, &b});
  tensor out;
  {
    no_grad untracked;
    out = bmm_untracked(a, b);
  }
  if (track)
    autograd::record(out, "BmmBackward0", {&a, &b}, {a, b}, [](const auto& g, const auto& s) {
      using autograd::needs_input_grad;
      return std::vector<tensor>{needs_input_grad(0) ? bmm(g[0], s[1].transpose(1, 2)) : tensor(),
                                 needs_input_grad(1) ? bmm(s[0].transpose(1, 2), g[0]) : tensor()};
    });
  return out;
}

tensor matmul(const tensor& a, const tensor& b) {
  const bool track = autograd::needs_grad({&a, &b});
  tensor out;
  {
    no_grad untracked;
    out = matmul_untracked(a, b);
  }
  if (track)
    autograd::record(out, "MatmulBackward0", {&a, &b}, {a, b}, [](const auto& g, const auto& s) {
      // Read vectors as matrices (a: 1 x k, b: k x 1), differentiate the batched product, and
      // sum the gradients over the batch dims each operand was broadcast along.
      const tensor a2 = s[0].dim() == 1 ? s[0].unsqueeze(0) : s[0];
      const tensor b2 = s[1].dim() == 1 ? s[1].unsqueeze(1) : s[1];
      shape_t batch = broadcast_shapes(shape_t(a2.sizes().begin(), a2.sizes().end() - 2),
                                       shape_t(b2.sizes().begin(), b2.sizes().end() - 2), "matmul");
      batch.insert(batch.end(), {a2.size(-2), b2.size(-1)});
      const tensor g2 = g[0].reshape(batch);
      using autograd::needs_input_grad;
      tensor ga, gb;
      if (needs_input_grad(0))
        ga = autograd::sum_to(matmul(g2, b2.transpose(-1, -2)), a2.sizes()).reshape(s[0].sizes());
      if (needs_input_grad(1))
        gb = autograd::sum_to(matmul(a2.transpose(-1, -2), g2), b2.sizes()).reshape(s[1].sizes());
      return std::vector<tensor>{ga, gb};
    });
  return out;
}

tensor tensor::matmul(const tensor& other) const {
  return actorch::matmul(*this, other);
}
tensor tensor::mm(const tensor& other) const {
  return actorch::mm(*this, other);
}
tensor tensor::bmm(const tensor& other) const {
  return actorch::bmm(*this, other);
}

} // namespace actorch
