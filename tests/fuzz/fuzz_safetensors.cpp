// libFuzzer target: safetensors_from_bytes and load_into_from_bytes on arbitrary bytes. A file
// is either read (and then written and read again to the same tensors and metadata) or refused
// with actorch::error; load_into either fills its targets with the file's values or leaves them
// untouched. Any other
// exception, a crash or a sanitizer report is a bug. See tests/fuzz/README.md.
#include <cstdint>
#include <string_view>

#include "base/error.hpp"
#include "core/ops/factory.hpp"
#include "core/serialize/safetensors.hpp"
#include "tests/fuzz/fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace actorch;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // Targets of a small model's state_dict; a refused load leaves their values as they were,
  // a load gives them the file's.
  const tensor seven_w = full({2, 3}, 7.0, {.dtype = dtype::float32}),
               seven_b = full({3}, 7, {.dtype = dtype::int64});
  const std::vector<std::pair<std::string, tensor>> targets = {{"w", seven_w.clone()},
                                                               {"b", seven_b.clone()}};
  bool loaded = true;
  try {
    load_into_from_bytes(bytes, "fuzz.safetensors", targets, false);
  } catch (const error&) {
    loaded = false;
    fuzz::check_same(targets[0].second, seven_w, "a refused load_into wrote into a target");
    fuzz::check_same(targets[1].second, seven_b, "a refused load_into wrote into a target");
  }
  safetensors_file f;
  try {
    f = safetensors_from_bytes(bytes, "fuzz.safetensors");
  } catch (const error&) {
    fuzz::require(!loaded, "load_into took a file that load refuses");
    return 0;
  }
  for (const auto& [name, target] : targets)
    for (const auto& [file_name, value] : f.tensors)
      if (loaded && name == file_name)
        fuzz::check_same(target, value, "load_into wrote other values than the file's");
  const safetensors_file g =
      safetensors_from_bytes(safetensors_to_bytes(f.tensors, f.metadata), "again");
  fuzz::require(f.tensors.size() == g.tensors.size() && f.metadata == g.metadata,
                "round trip changed the names or the metadata");
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    fuzz::require(f.tensors[i].first == g.tensors[i].first, "round trip changed a name");
    fuzz::check_same(f.tensors[i].second, g.tensors[i].second, "round trip changed a tensor");
  }
  return 0;
}
