// libFuzzer target: npy_from_bytes on arbitrary bytes. A file is either read, and then written
// and read again to the same values, or refused with actorch::error; any other exception, a
// crash or a sanitizer report is a bug. See tests/fuzz/README.md.
#include <cstdint>
#include <string_view>

#include "base/error.hpp"
#include "core/serialize/npy.hpp"
#include "tests/fuzz/fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  actorch::tensor t;
  try {
    t = actorch::npy_from_bytes(bytes, "fuzz.npy");
  } catch (const actorch::error&) {
    return 0;
  }
  actorch::fuzz::check_same(t, actorch::npy_from_bytes(actorch::npy_to_bytes(t), "again"),
                            "a written and read again .npy differs");
  return 0;
}
