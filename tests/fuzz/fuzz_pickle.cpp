// libFuzzer target: the restricted unpickler (`unpickle`) on arbitrary bytes, without the zip
// around it, so that mutations reach its opcodes. Persistent ids resolve to zero-filled storages
// of at most 2^20 elements (larger ones are refused as the storage callback's error). A pickle
// is either read, and then written and read again to the same value, or refused with
// actorch::error. Any other exception, a crash (a deep pickle's destruction: Note [Deep
// pickles]), a sanitizer report or a hang is a bug. See tests/fuzz/README.md.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>

#include "base/error.hpp"
#include "core/ops/factory.hpp"
#include "core/serialize/pickle.hpp"
#include "tests/fuzz/fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace actorch;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::map<const void*, tensor> read; // the storages the first read made, by their memory
  const auto storage = [&](const pickle_storage& s) {
    ACTORCH_CHECK(s.numel <= (int64_t(1) << 20), "fuzz: a storage of ", s.numel, " elements");
    tensor t = zeros({s.numel}, {.dtype = s.type});
    read.emplace(t.storage().get(), t);
    return t;
  };
  pickle_value v;
  try {
    v = unpickle(bytes, "fuzz.pkl", storage);
  } catch (const error&) {
    return 0;
  }
  std::map<std::string, tensor> written; // by the keys the write gave them
  const std::string again_bytes = pickle(v, [&](const tensor& t) {
    const std::string key = std::to_string(reinterpret_cast<uintptr_t>(t.storage().get()));
    written.emplace(key, read.at(t.storage().get()));
    return key;
  });
  pickle_value again;
  try {
    again = unpickle(again_bytes, "fuzz-again.pkl",
                     [&](const pickle_storage& s) { return written.at(s.key); });
  } catch (const error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fuzz::require(false, "a value read could not be written and read again");
  }
  fuzz::require(fuzz::same(v, again), "a value written and read again differs");
  return 0;
}
