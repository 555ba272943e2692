// Where a tensor's storage lives: the CPU, or CUDA device n. Parsed from PyTorch's spellings
// ("cpu", "cuda", "cuda:1").
#pragma once

#include <compare>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace actorch {

enum class device_type : uint8_t { cpu, cuda };

struct device {
  device_type type = device_type::cpu;
  int index = 0; // the CUDA ordinal; always 0 for the CPU

  device() = default;
  device(device_type t, int i = 0);
  /// "cpu", "cuda" or "cuda:N"; anything else throws, naming the string.
  device(std::string_view spec); // NOLINT: implicit, as torch.device accepts a string
  device(const char* spec) : device(std::string_view(spec)) {} // NOLINT

  bool is_cpu() const { return type == device_type::cpu; }
  bool is_cuda() const { return type == device_type::cuda; }
  std::string str() const;
  friend auto operator<=>(const device&, const device&) = default;
};

std::ostream& operator<<(std::ostream& os, const device& d);

inline const device kCPU{};

} // namespace actorch
