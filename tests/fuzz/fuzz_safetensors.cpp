// libFuzzer target: safetensors_from_bytes and load_into_from_bytes on arbitrary bytes. A file
// is either read (and then written and read again to the same tensors and metadata) or refused
// with actorch::error; load_into either fills its targets or leaves them untouched. Any other
// exception, a crash or a sanitizer report is a bug. See tests/fuzz/README.md.
#include <cstdint>
#include <string_view>

#include "core/error.hpp"
#include "core/ops/factory.hpp"
#include "core/serialize/safetensors.hpp"
#include "tests/fuzz/fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace actorch;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // Targets of a small model's state_dict; their values must survive a refused load.
  tensor w = full({2, 3}, 7.0, {.dtype = dtype::float32}),
         b = full({3}, 7, {.dtype = dtype::int64});
  const std::vector<std::pair<std::string, tensor>> targets = {{"w", w}, {"b", b}};
  try {
    load_into_from_bytes(bytes, "fuzz.safetensors", targets, false);
  } catch (const error&) {
    fuzz::check_all(w, 7.0);
    fuzz::check_all(b, 7.0);
  }
  safetensors_file f;
  try {
    f = safetensors_from_bytes(bytes, "fuzz.safetensors");
  } catch (const error&) {
    return 0;
  }
  const safetensors_file g =
      safetensors_from_bytes(safetensors_to_bytes(f.tensors, f.metadata), "again");
  fuzz::require(f.tensors.size() == g.tensors.size() && f.metadata == g.metadata,
                "round trip changed the names or the metadata");
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    fuzz::require(f.tensors[i].first == g.tensors[i].first, "round trip changed a name");
    fuzz::check_round_trip(f.tensors[i].second, g.tensors[i].second);
  }
  return 0;
}
