// Formatting of actorch::error messages: the caller's message first, then where it was raised.
#include "base/error.hpp"

#include <cstring>
#include <system_error>

namespace actorch {

std::string errno_str(int err) {
  return std::error_code(err, std::generic_category()).message();
}

} // namespace actorch

namespace actorch::detail {

namespace {

const char* short_path(const char* file) {
  // Keep the path from the project's top folder on ("core/tensor.cpp"), not the build machine's.
  for (const char* top : {"/core/", "/kernels/", "/comm/", "/actors/", "/tools/", "/bench/"}) {
    if (const char* p = std::strstr(file, top))
      return p + 1;
  }
  return file;
}

} // namespace

void throw_error(const char* file, int line, const std::string& msg) {
  throw error(concat(msg, " (", short_path(file), ":", line, ")"));
}

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw error(concat("internal error: ", cond, " failed", msg.empty() ? "" : ": ", msg, " (",
                     short_path(file), ":", line, "); please report this as a bug"));
}

} // namespace actorch::detail
