// dtype tables: names, sizes and torch.promote_types' lattice.
#include "base/dtype.hpp"

#include "base/error.hpp"

namespace actorch {

std::string_view dtype_name(dtype t) {
  switch (t) {
  case dtype::float32: return "float32";
  case dtype::float64: return "float64";
  case dtype::float16: return "float16";
  case dtype::bfloat16: return "bfloat16";
  case dtype::int8: return "int8";
  case dtype::uint8: return "uint8";
  case dtype::int16: return "int16";
  case dtype::int32: return "int32";
  case dtype::int64: return "int64";
  case dtype::bool_: return "bool";
  }
  return "unknown";
}

size_t element_size(dtype t) {
  return dispatch(t, []<class T>() { return sizeof(T); });
}

bool is_floating_point(dtype t) {
  return t == dtype::float32 || t == dtype::float64 || t == dtype::float16 || t == dtype::bfloat16;
}

bool is_integral(dtype t, bool include_bool) {
  return t == dtype::int8 || t == dtype::uint8 || t == dtype::int16 || t == dtype::int32 ||
         t == dtype::int64 || (include_bool && t == dtype::bool_);
}

dtype promote_types(dtype a, dtype b) {
  // Rows and columns in the enum's order: f4 f8 f2 bf i1 u1 i4 i8 b1 i2 (PyTorch's table, with
  // float16 x bfloat16 -> float32 and int8 x uint8 -> int16 as there).
  using enum dtype;
  static constexpr dtype table[num_dtypes][num_dtypes] = {
      /* f4 */
      {float32, float64, float32, float32, float32, float32, float32, float32, float32, float32},
      /* f8 */
      {float64, float64, float64, float64, float64, float64, float64, float64, float64, float64},
      /* f2 */
      {float32, float64, float16, float32, float16, float16, float16, float16, float16, float16},
      /* bf */
      {float32, float64, float32, bfloat16, bfloat16, bfloat16, bfloat16, bfloat16, bfloat16,
       bfloat16},
      /* i1 */ {float32, float64, float16, bfloat16, int8, int16, int32, int64, int8, int16},
      /* u1 */ {float32, float64, float16, bfloat16, int16, uint8, int32, int64, uint8, int16},
      /* i4 */ {float32, float64, float16, bfloat16, int32, int32, int32, int64, int32, int32},
      /* i8 */ {float32, float64, float16, bfloat16, int64, int64, int64, int64, int64, int64},
      /* b1 */ {float32, float64, float16, bfloat16, int8, uint8, int32, int64, bool_, int16},
      /* i2 */ {float32, float64, float16, bfloat16, int16, int16, int32, int64, int16, int16},
  };
  return table[size_t(a)][size_t(b)];
}

} // namespace actorch
