// copy and fill. Conversions are kernels::convert's, shared with the CUDA twin.
#include "kernels/cpu/copy.hpp"

#include <cstring>

#include "kernels/functors.hpp"

namespace actorch::kernels::cpu {

namespace {

template <class D, class S> void copy_typed(const strided_loop<2>& loop) {
  for_each_row(loop, [](char** p, const int64_t* s, int64_t n) {
    auto* out = reinterpret_cast<D*>(p[0]);
    const auto* in = reinterpret_cast<const S*>(p[1]);
    if (s[0] == int64_t(sizeof(D)) && s[1] == int64_t(sizeof(S))) {
      if constexpr (std::is_same_v<D, S>)
        std::memcpy(out, in, size_t(n) * sizeof(D));
      else
        for (int64_t i = 0; i < n; ++i)
          out[i] = convert<D>(in[i]);
    } else if (s[0] == int64_t(sizeof(D)) && s[1] == 0) {
      const D v = convert<D>(*in);
      for (int64_t i = 0; i < n; ++i)
        out[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<D*>(p[0] + i * s[0]) =
            convert<D>(*reinterpret_cast<const S*>(p[1] + i * s[1]));
    }
  });
}

} // namespace

void copy(dtype dst, dtype src, const strided_loop<2>& loop) {
  dispatch(dst, [&]<class D>() { dispatch(src, [&]<class S>() { copy_typed<D, S>(loop); }); });
}

void fill(dtype t, const strided_loop<1>& loop, const scalar& value) {
  dispatch(t, [&]<class T>() {
    const T v = value.to<T>();
    for_each_row(loop, [v](char** p, const int64_t* s, int64_t n) {
      if (s[0] == int64_t(sizeof(T))) {
        T* out = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i)
          out[i] = v;
      } else {
        for (int64_t i = 0; i < n; ++i)
          *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
      }
    });
  });
}

} // namespace actorch::kernels::cpu
