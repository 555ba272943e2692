// dtypes: names, sizes, promotion lattice and the 16-bit float conversions.
#include <bit>
#include <cmath>

#include <catch2/catch.hpp>

#include "base/dtype.hpp"
#include "core/allocator.hpp"
#include "core/ops/factory.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::test;

TEST_CASE("dtype names and sizes", "[core][dtype]") {
  CHECK(dtype_name(dtype::bfloat16) == "bfloat16");
  CHECK(dtype_name(dtype::bool_) == "bool");
  CHECK(element_size(dtype::float16) == 2);
  CHECK(element_size(dtype::int64) == 8);
  CHECK(element_size(dtype::bool_) == 1);
  CHECK(is_floating_point(dtype::bfloat16));
  CHECK_FALSE(is_integral(dtype::bool_));
  CHECK(is_integral(dtype::bool_, true));
}

TEST_CASE("promote_types follows torch's table", "[core][dtype]") {
  CHECK(promote_types(dtype::int32, dtype::float16) == dtype::float16);
  CHECK(promote_types(dtype::float16, dtype::bfloat16) == dtype::float32);
  CHECK(promote_types(dtype::uint8, dtype::int8) == dtype::int16);
  CHECK(promote_types(dtype::int16, dtype::uint8) == dtype::int16);
  CHECK(promote_types(dtype::int16, dtype::int32) == dtype::int32);
  CHECK(promote_types(dtype::bool_, dtype::int16) == dtype::int16);
  CHECK(promote_types(dtype::int16, dtype::float16) == dtype::float16);
  CHECK(promote_types(dtype::bool_, dtype::uint8) == dtype::uint8);
  CHECK(promote_types(dtype::int64, dtype::float32) == dtype::float32);
  CHECK(promote_types(dtype::float64, dtype::float32) == dtype::float64);
  for (int a = 0; a < num_dtypes; ++a)
    for (int b = 0; b < num_dtypes; ++b)
      CHECK(promote_types(dtype(a), dtype(b)) == promote_types(dtype(b), dtype(a)));
}

TEST_CASE("float16 conversions round to nearest even", "[core][dtype]") {
  CHECK(half(1.0f).bits == 0x3c00);
  CHECK(half(-2.0f).bits == 0xc000);
  CHECK(half(65504.0f).bits == 0x7bff);
  CHECK(half(65520.0f).bits == 0x7c00);                   // overflows to inf
  CHECK(half(5.9604644775390625e-8f).bits == 0x0001);     // smallest subnormal
  CHECK(half(2.98023223876953125e-8f).bits == 0x0000);    // half of it: tie to even (0)
  CHECK(half(8.94069671630859375e-8f).bits == 0x0002);    // 1.5 subnormals: tie to even (2)
  CHECK(half(1.0f + 0x1p-11f).bits == 0x3c00);            // tie between 1 and next: even
  CHECK(half(1.0f + 0x1p-11f + 0x1p-20f).bits == 0x3c01); // just above the tie
  CHECK(std::isnan(float(half(NAN))));
  for (uint32_t bits = 0; bits < 0x7c00; ++bits) // every finite positive half round-trips
    REQUIRE(half(float(half::from_bits(uint16_t(bits)))).bits == bits);
}

TEST_CASE("bfloat16 conversions round to nearest even", "[core][dtype]") {
  CHECK(bfloat16(1.0f).bits == 0x3f80);
  CHECK(bfloat16(std::bit_cast<float>(0x3f808000u)).bits == 0x3f80); // tie: even
  CHECK(bfloat16(std::bit_cast<float>(0x3f818000u)).bits == 0x3f82); // tie: even (up)
  CHECK(bfloat16(std::bit_cast<float>(0x3f808001u)).bits == 0x3f81);
  CHECK(std::isnan(float(bfloat16(NAN))));
  CHECK(float(bfloat16(3.0f)) == 3.0f);
}

TEST_CASE("allocators return aligned memory and say whether it is pinned", "[core][allocator]") {
  for (allocator* a : {cpu_allocator(), pinned_allocator()}) {
    void* p = a->allocate(100);
    CHECK(reinterpret_cast<uintptr_t>(p) % kAlignment == 0);
    static_cast<char*>(p)[99] = 1; // writable to the end
    a->deallocate(p, 100);
    void* z = a->allocate(0);
    CHECK(z != nullptr);
    a->deallocate(z, 0);
  }
  CHECK(pinned_allocator()->name() == "pinned");
  // No GPU driver on the test machines: pinned memory falls back to plain aligned memory.
  INFO("pinned memory page-locked: " << pinned_memory_is_page_locked());
  CHECK_THROWS_WITH(cpu_allocator()->allocate(size_t(-1) - 10), Catch::Contains("size overflow"));
}

TEST_CASE("the CPU allocator reuses freed large blocks by size, within its limit",
          "[core][allocator]") {
  cpu_empty_cache();
  allocator* a = cpu_allocator();
  const size_t big = (4u << 20) + 100; // held as 4 MiB + one page
  void* p = a->allocate(big);
  static_cast<char*>(p)[big - 1] = 1;
  a->deallocate(p, big);
  CHECK(cpu_cached_bytes() == (4u << 20) + 4096);
  void* q = a->allocate(big - 50); // the same page count: the same block
  CHECK(q == p);
  CHECK(cpu_cached_bytes() == 0);
  a->deallocate(q, big - 50);
  void* other = a->allocate(8u << 20); // another size: not the held block
  CHECK(cpu_cached_bytes() == (4u << 20) + 4096);
  a->deallocate(other, 8u << 20);
  CHECK(cpu_cached_bytes() == (12u << 20) + 4096);
  const size_t configured = cpu_cache_limit();
  set_cpu_cache_limit(9u << 20); // frees blocks until what is held fits
  CHECK(cpu_cached_bytes() <= (9u << 20));
  const size_t held = cpu_cached_bytes();
  void* small = a->allocate(1000); // small blocks are never held
  a->deallocate(small, 1000);
  CHECK(cpu_cached_bytes() == held);
  set_cpu_cache_limit(0);
  CHECK(cpu_cached_bytes() == 0);
  void* r = a->allocate(big);
  a->deallocate(r, big); // limit 0: freed at once
  CHECK(cpu_cached_bytes() == 0);
  set_cpu_cache_limit(configured);
}

TEST_CASE("int16 computes, promotes and converts as torch.short does", "[core][dtype]") {
  const tensor s = tensor_of({-3, 100, 32767}, {.dtype = dtype::int16});
  CHECK(element_size(dtype::int16) == 2);
  CHECK(dtype_name(dtype::int16) == "int16");
  CHECK(is_integral(dtype::int16));
  CHECK((s + 1).dtype() == dtype::int16);
  CHECK(values_of(s + 1) == std::vector<double>{-2, 101, -32768}); // wraps, as torch's does
  CHECK((s * tensor_of({2}, {.dtype = dtype::int32})).dtype() == dtype::int32);
  CHECK((s + 0.5).dtype() == dtype::float32);
  CHECK(values_of(s.sum()) == std::vector<double>{32864}); // sums in int64, as torch's
  CHECK(s.sum().dtype() == dtype::int64);
  // The shortcuts: torch's .float(), .double(), .long(), .short(), .int(), .half().
  CHECK(s.to_float().dtype() == dtype::float32);
  CHECK(s.to_double().dtype() == dtype::float64);
  CHECK(s.to_long().dtype() == dtype::int64);
  CHECK(s.to_int().dtype() == dtype::int32);
  CHECK(s.to_half().dtype() == dtype::float16);
  CHECK(tensor_of({1.7, -2.7}).to_short().dtype() == dtype::int16);
  CHECK(values_of(tensor_of({1.7, -2.7}).to_short()) == std::vector<double>{1, -2});
  CHECK(values_of(s.to_double()) == std::vector<double>{-3, 100, 32767});
}
