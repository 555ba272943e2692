// libFuzzer target: torch_load_bytes (PyTorch's zip checkpoint format, its pickle through the
// restricted unpickler) on arbitrary bytes. A file is either read, and then written and read
// again to the same value, or refused with actorch::error. Any other exception, a crash, a
// sanitizer report or a hang is a bug. See tests/fuzz/README.md.
#include <cstdint>
#include <string_view>

#include "base/error.hpp"
#include "core/ops/elementwise.hpp"
#include "core/serialize/torch_format.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

bool same(const actorch::pickle_value& a, const actorch::pickle_value& b) {
  using actorch::pickle_value;
  if (a.v.index() != b.v.index())
    return false;
  return std::visit(
      [&](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b.v);
        if constexpr (std::is_same_v<T, pickle_value::none>) {
          return true;
        } else if constexpr (std::is_same_v<T, pickle_value::tuple> ||
                             std::is_same_v<T, pickle_value::list>) {
          if (x.items.size() != y.items.size())
            return false;
          for (size_t i = 0; i < x.items.size(); ++i)
            if (!same(x.items[i], y.items[i]))
              return false;
          return true;
        } else if constexpr (std::is_same_v<T, pickle_value::dict>) {
          if (x.items.size() != y.items.size() || x.ordered != y.ordered)
            return false;
          for (size_t i = 0; i < x.items.size(); ++i)
            if (!same(x.items[i].first, y.items[i].first) ||
                !same(x.items[i].second, y.items[i].second))
              return false;
          return true;
        } else if constexpr (std::is_same_v<T, actorch::tensor>) {
          return x.dtype() == y.dtype() && x.sizes() == y.sizes() &&
                 actorch::equal(x.contiguous(), y.contiguous());
        } else if constexpr (std::is_same_v<T, double>) {
          return x == y || (x != x && y != y); // NaN is NaN
        } else {
          return x == y;
        }
      },
      a.v);
}

} // namespace

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
  fuzz::require(same(v, again), "a value written and read again differs");
  return 0;
}
