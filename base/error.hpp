// actorch's one error type and the checks that throw it. Every caller mistake anywhere in the
// project (bad shapes, dtypes, options, files) surfaces as actorch::error with a message that
// names the operation, the values involved and what was expected, plus the source location.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace actorch {

/// The exception thrown for every misuse and every failure actorch reports.
class error : public std::runtime_error {
public:
  explicit error(const std::string& what) : std::runtime_error(what) {}
};

/// The text of an errno value, for messages: "No such file or directory".
std::string errno_str(int err);

namespace detail {

template <class... Args> std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);
[[noreturn]] void throw_internal(const char* file, int line, const char* cond,
                                 const std::string& msg);

} // namespace detail
} // namespace actorch

/// Throws actorch::error with the streamed message when `cond` is false (a caller mistake).
#define ACTORCH_CHECK(cond, ...)                                                                   \
  do {                                                                                             \
    if (!(cond)) [[unlikely]]                                                                      \
      ::actorch::detail::throw_error(__FILE__, __LINE__, ::actorch::detail::concat(__VA_ARGS__));  \
  } while (false)

/// Throws unconditionally with the streamed message.
#define ACTORCH_FAIL(...)                                                                          \
  ::actorch::detail::throw_error(__FILE__, __LINE__, ::actorch::detail::concat(__VA_ARGS__))

/// An invariant of actorch itself: failing it is a bug in actorch, not in the caller.
#define ACTORCH_INTERNAL_ASSERT(cond, ...)                                                         \
  do {                                                                                             \
    if (!(cond)) [[unlikely]]                                                                      \
      ::actorch::detail::throw_internal(                                                           \
          __FILE__, __LINE__, #cond,                                                               \
          ::actorch::detail::concat(std::string() __VA_OPT__(, ) __VA_ARGS__));                    \
  } while (false)
