#include "base/env.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "base/error.hpp"
#include "base/parse.hpp"

namespace actorch {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0')
    return std::nullopt;
  return std::string(v);
}

int64_t env_int(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const auto v = env(name);
  return v ? parse_int(*v, std::string("environment variable ") + name, lo, hi) : fallback;
}

bool env_flag(const char* name, bool fallback) {
  const auto v = env(name);
  if (!v)
    return fallback;
  std::string s = *v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "1" || s == "true" || s == "yes" || s == "on")
    return true;
  if (s == "0" || s == "false" || s == "no" || s == "off")
    return false;
  ACTORCH_FAIL("environment variable ", name, " is '", *v,
               "'; expected 1 or 0 (or true/false, yes/no, on/off)");
}

} // namespace actorch
