// gloo_checks: op headers, argument checks and point-to-point slots (gloo_checks.hpp).
#include "comm/backend/gloo/gloo_checks.hpp"

#include "base/error.hpp"
#include "core/ops/shape_ops.hpp"

namespace actorch::dist::gloo_checks {

namespace {

const char* kind_name(int64_t k) {
  switch (op_kind(k)) {
  case op_kind::broadcast: return "broadcast";
  case op_kind::all_reduce: return "all_reduce";
  case op_kind::reduce: return "reduce";
  case op_kind::all_gather: return "all_gather";
  case op_kind::gather: return "gather";
  case op_kind::scatter: return "scatter";
  case op_kind::reduce_scatter: return "reduce_scatter";
  case op_kind::all_to_all: return "all_to_all";
  case op_kind::barrier: return "barrier";
  }
  return "?";
}

} // namespace

op_header make_header(op_kind kind, const tensor* t, int root, int op) {
  op_header h;
  h.v[0] = int64_t(kind);
  h.v[1] = t ? int64_t(t->dtype()) : -1;
  h.v[2] = t ? t->numel() : 0;
  h.v[3] = root;
  h.v[4] = op;
  h.v[5] = t ? t->dim() : 0;
  for (size_t d = 0; t && d < size_t(t->dim()) && d < kMaxHeaderDims; ++d)
    h.v[6 + d] = t->sizes()[d];
  return h;
}

std::string describe(const int64_t* h) {
  std::string s = kind_name(h[0]);
  if (h[1] >= 0) {
    s.append(" ").append(dtype_name(dtype(h[1])));
    shape_t shape;
    for (int64_t d = 0; d < h[5] && d < int64_t(kMaxHeaderDims); ++d)
      shape.push_back(h[6 + d]);
    s.append(" ").append(shape_str(shape));
    if (h[5] > int64_t(kMaxHeaderDims))
      s.append(" (").append(std::to_string(h[2])).append(" elements)");
  }
  if (h[3] >= 0)
    s.append(" root ").append(std::to_string(h[3]));
  if (h[4] >= 0)
    s.append(" ").append(reduce_op_name(reduce_op(h[4])));
  if (h[kSharedSlot] > 0)
    s.append(" on shared block ").append(std::to_string(h[kSharedSlot] - 1));
  return s;
}

std::string ranks_str(const std::vector<int>& r) {
  std::string s = "[";
  for (size_t i = 0; i < r.size(); ++i) {
    if (i > 0)
      s += ", ";
    s += std::to_string(r[i]);
  }
  return s + "]";
}

void check_cpu(const char* op, const tensor& t, const char* what) {
  ACTORCH_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
  ACTORCH_CHECK(t.device().is_cpu(), op, ": the gloo backend takes CPU tensors but ", what,
                " is on ", t.device().str(), " (use the nccl backend for CUDA tensors)");
}

void check_reduce(const char* op, dtype dt, reduce_op rop) {
  const bool bitwise = rop == reduce_op::band || rop == reduce_op::bor || rop == reduce_op::bxor;
  ACTORCH_CHECK(!bitwise || !is_floating_point(dt), op, ": ", reduce_op_name(rop),
                " needs an integer or bool tensor but got ", dtype_name(dt));
  ACTORCH_CHECK(rop != reduce_op::avg || is_floating_point(dt), op,
                ": AVG needs a floating-point tensor but got ", dtype_name(dt));
}

void check_list(const char* op, const std::vector<tensor>& list, const char* what, size_t n,
                const tensor& like) {
  ACTORCH_CHECK(list.size() == n, op, ": ", what, " must hold ", n, " tensors (one per rank) but",
                " holds ", list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    check_cpu(op, list[i], what);
    ACTORCH_CHECK(list[i].dtype() == like.dtype() && list[i].numel() == like.numel(), op, ": ",
                  what, "[", i, "] is ", dtype_name(list[i].dtype()), " ",
                  shape_str(list[i].sizes()), " but must match ", dtype_name(like.dtype()), " ",
                  shape_str(like.sizes()));
  }
}

// Note [Point-to-point slots]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A Gloo recv smaller than the matching send aborts the process (an enforce in Gloo's device
// thread) and a larger one silently keeps stale data. So a send and a recv only match when they
// agree exactly on tag, dtype and element count: all three are written into the 64-bit slot,
// whole, never hashed (a hash let float32 sends of 6,266 elements meet recvs of 1,096). The
// slot's top byte says which layout holds the rest:
//   0xA5: tag in bits 40-55 (tags below 2^16), dtype in bits 36-39, numel in bits 0-35
//         (below 2^36 elements);
//   0xA6: tag in bits 24-55 (any tag), dtype in bits 20-23, numel in bits 0-19 (below 2^20).
// Gloo's own slots (its collectives) use top bytes below 0x20. A send or recv that fits neither
// layout (a tag of 2^16 or more on a tensor of 2^20 elements or more) is refused at once. Pairs
// that disagree never match, and both fail after the group's timeout with an error that says
// what must agree.
constexpr uint64_t kSmallTagPrefix = uint64_t(0xA5) << 56;
constexpr uint64_t kLargeTagPrefix = uint64_t(0xA6) << 56;
static_assert(num_dtypes <= 16, "a dtype takes 4 bits of a point-to-point slot");

uint64_t p2p_slot(int tag, const tensor& t) {
  const auto tg = uint64_t(uint32_t(tag));
  const auto dt = uint64_t(t.dtype());
  const auto n = uint64_t(t.numel());
  if (tg < (uint64_t(1) << 16) && n < (uint64_t(1) << 36))
    return kSmallTagPrefix | tg << 40 | dt << 36 | n;
  ACTORCH_CHECK(n < (uint64_t(1) << 20), "send/recv: tag ", tag, " with ", n,
                " elements cannot be matched exactly (a tag of 65536 or more takes tensors of "
                "fewer than 1048576 elements; see Note [Point-to-point slots])");
  return kLargeTagPrefix | tg << 24 | dt << 20 | n;
}

std::string p2p_what(const tensor& t, int tag) {
  return "(tag " + std::to_string(tag) + ", " + std::string(dtype_name(t.dtype())) + " " +
         shape_str(t.sizes()) + ")";
}

} // namespace actorch::dist::gloo_checks
