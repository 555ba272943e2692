// float16 and bfloat16 storage types. Arithmetic goes through float: each value converts on
// load and rounds (to nearest even) on store, as PyTorch's CPU kernels do for these dtypes.
// The conversions are shared by the CPU and CUDA kernels (bit for bit the same on both).
#pragma once

#include <bit>
#include <cstdint>

#include "base/host_device.hpp"

namespace actorch {

/// IEEE 754 binary16.
struct half {
  uint16_t bits = 0;

  half() = default;
  ACTORCH_HOST_DEVICE half(float f)
      : bits(from_float(f)) {} // NOLINT: implicit, like a built-in float type
  ACTORCH_HOST_DEVICE operator float() const { return to_float(bits); }

  static constexpr half from_bits(uint16_t b) {
    half h;
    h.bits = b;
    return h;
  }
  ACTORCH_HOST_DEVICE static uint16_t from_float(float f);
  ACTORCH_HOST_DEVICE static float to_float(uint16_t h);
};

/// bfloat16: the top 16 bits of a float32.
struct bfloat16 {
  uint16_t bits = 0;

  bfloat16() = default;
  ACTORCH_HOST_DEVICE bfloat16(float f)
      : bits(from_float(f)) {} // NOLINT: implicit, like a built-in float type
  ACTORCH_HOST_DEVICE operator float() const { return std::bit_cast<float>(uint32_t(bits) << 16); }

  static constexpr bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  ACTORCH_HOST_DEVICE static uint16_t from_float(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep it a quiet NaN
      return uint16_t((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u); // round to nearest, ties to even
    return uint16_t(u >> 16);
  }
};

ACTORCH_HOST_DEVICE inline uint16_t half::from_float(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) // NaN
    return uint16_t(sign | 0x7e00u);
  if (abs >= 0x477ff000u) // rounds to >= 65520: overflow to infinity
    return uint16_t(sign | 0x7c00u);
  if (abs < 0x38800000u) { // below the smallest normal half (2^-14): subnormal or zero
    // Scale so that the subnormal's integer mantissa lands in the low bits, rounding to even.
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f; // 2^24
    const float r = scaled + 12582912.0f - 12582912.0f;           // round half to even
    return uint16_t(sign | uint32_t(r));
  }
  const uint32_t mant_odd = (abs >> 13) & 1u;
  const uint32_t rounded = abs + 0xfffu + mant_odd; // round to nearest, ties to even
  return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
}

ACTORCH_HOST_DEVICE inline float half::to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) { // zero or subnormal: mant * 2^-24
    const float v = float(mant) * 5.9604644775390625e-8f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(v) | sign);
  }
  if (exp == 31) // inf or NaN
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

} // namespace actorch
