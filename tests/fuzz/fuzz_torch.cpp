// libFuzzer target: torch_load_bytes (PyTorch's zip checkpoint format, its pickle through the
// restricted unpickler) on arbitrary bytes. A file is either read, and then written and read
// again to the same value, or refused with actorch::error. Any other exception, a crash, a
// sanitizer report or a hang is a bug. See tests/fuzz/README.md.
#include <cstdint>
#include <string_view>

#include "base/error.hpp"
#include "core/serialize/torch_format.hpp"
#include "tests/fuzz/fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace actorch;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  pickle_value v;
  try {
    v = torch_load_bytes(bytes, "fuzz.pt");
  } catch (const error&) {
    return 0;
  }
  pickle_value again;
  try {
    again = torch_load_bytes(torch_save_bytes(v), "fuzz-again.pt");
  } catch (const error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fuzz::require(false, "a value read could not be written and read again");
  }
  fuzz::require(fuzz::same(v, again), "a value written and read again differs");
  return 0;
}
