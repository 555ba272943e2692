// The elementwise reductions behind every ReduceOp, for every dtype, in the signature Gloo's
// algorithms and the shared-memory all-reduce take: c = a op b over n elements (c may be a).
// Included by process_group_gloo.cpp only.
#pragma once

#include <cstddef>
#include <type_traits>

#include "comm/process_group.hpp"
#include "base/dtype.hpp"

namespace actorch::dist {

using reduce_fn = void (*)(void*, const void*, const void*, size_t);

// Elementwise c = a op b for one dtype. Signed integers wrap (computed unsigned, as the tensor
// core does); 16-bit floats compute in float; bool sums are OR and products AND.
template <class T, reduce_op Op> void reduce_kernel(void* c, const void* a, const void* b, size_t n) {
  auto* pc = static_cast<T*>(c);
  const auto* pa = static_cast<const T*>(a);
  const auto* pb = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) {
    const T x = pa[i], y = pb[i];
    if constexpr (std::is_same_v<T, bool>) {
      if constexpr (Op == reduce_op::sum || Op == reduce_op::max || Op == reduce_op::bor)
        pc[i] = x || y;
      else if constexpr (Op == reduce_op::bxor)
        pc[i] = x != y;
      else
        pc[i] = x && y;
    } else if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      if constexpr (Op == reduce_op::sum || Op == reduce_op::avg)
        pc[i] = T(U(U(x) + U(y)));
      else if constexpr (Op == reduce_op::product)
        pc[i] = T(U(U(x) * U(y)));
      else if constexpr (Op == reduce_op::min)
        pc[i] = y < x ? y : x;
      else if constexpr (Op == reduce_op::max)
        pc[i] = y > x ? y : x;
      else if constexpr (Op == reduce_op::band)
        pc[i] = T(x & y);
      else if constexpr (Op == reduce_op::bor)
        pc[i] = T(x | y);
      else
        pc[i] = T(x ^ y);
    } else {
      using C = compute_t<T>;
      const C cx = C(x), cy = C(y);
      if constexpr (Op == reduce_op::sum || Op == reduce_op::avg)
        pc[i] = T(cx + cy);
      else if constexpr (Op == reduce_op::product)
        pc[i] = T(cx * cy);
      else if constexpr (Op == reduce_op::min)
        pc[i] = T(cy < cx ? cy : cx); // NaN in a stays
      else if constexpr (Op == reduce_op::max)
        pc[i] = T(cy > cx ? cy : cx);
      else
        pc[i] = x; // unreachable: bitwise ops on floats are rejected at issue
    }
  }
}

template <class T> reduce_fn pick_reduce(reduce_op op) {
  switch (op) {
  case reduce_op::sum: return reduce_kernel<T, reduce_op::sum>;
  case reduce_op::avg: return reduce_kernel<T, reduce_op::avg>;
  case reduce_op::product: return reduce_kernel<T, reduce_op::product>;
  case reduce_op::min: return reduce_kernel<T, reduce_op::min>;
  case reduce_op::max: return reduce_kernel<T, reduce_op::max>;
  case reduce_op::band: return reduce_kernel<T, reduce_op::band>;
  case reduce_op::bor: return reduce_kernel<T, reduce_op::bor>;
  case reduce_op::bxor: return reduce_kernel<T, reduce_op::bxor>;
  }
  return nullptr;
}

} // namespace actorch::dist
