// The environment variables actorch reads, by one rule.
//
// Note [Environment variables]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A variable set to the empty string is unset: `ACTORCH_X= prog` and a launcher that forwards an
// empty value both mean "the default", as torch's c10 reads its TORCH_* variables. A number is
// parsed whole (parse_int) and a flag is 1/0, true/false, yes/no or on/off in any case; anything
// else is an error naming the variable and its value, never a silent default.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace actorch {

/// The value of `name`, or nullopt when it is unset or empty.
std::optional<std::string> env(const char* name);

/// `name` as a whole integer in [lo, hi], or `fallback` when it is unset or empty.
/// @throws actorch::error naming the variable and its value.
int64_t env_int(const char* name, int64_t fallback, int64_t lo = 0,
                int64_t hi = std::numeric_limits<int64_t>::max());

/// `name` as a flag, or `fallback` when it is unset or empty.
/// @throws actorch::error naming the variable and its value when it is no flag.
bool env_flag(const char* name, bool fallback);

} // namespace actorch
