// Parsing and printing of devices.
#include "core/device.hpp"

#include <charconv>

#include "base/error.hpp"

namespace actorch {

device::device(device_type t, int i) : type(t), index(t == device_type::cpu ? 0 : i) {
  ACTORCH_CHECK(i >= 0, "device: index must be >= 0 but got ", i);
}

device::device(std::string_view spec) {
  if (spec == "cpu")
    return;
  ACTORCH_CHECK(spec.starts_with("cuda"),
                "device: expected \"cpu\", \"cuda\" or \"cuda:N\" but got \"", spec, "\"");
  type = device_type::cuda;
  auto rest = spec.substr(4);
  if (rest.empty())
    return;
  int n = -1;
  auto [end, ec] = std::from_chars(rest.data() + 1, rest.data() + rest.size(), n);
  ACTORCH_CHECK(rest[0] == ':' && ec == std::errc() && end == rest.data() + rest.size() && n >= 0,
                "device: expected \"cpu\", \"cuda\" or \"cuda:N\" but got \"", spec, "\"");
  index = n;
}

std::string device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::ostream& operator<<(std::ostream& os, const device& d) {
  return os << d.str();
}

} // namespace actorch
