// Numbers read from outside the program (a file's metadata, a command-line flag, an environment
// variable) parsed strictly: the whole text must be one number, in range, or the call throws
// naming what was read. std::stoll("2x1") is 2 and std::stoll(" 5") is 5; here both are errors.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace actorch {

/// `text` as a whole decimal integer (an optional '-' then digits: no spaces, no '+', no hex)
/// within [lo, hi]. @throws actorch::error naming `what` and `text`, saying "negative" when a
/// negative value is below a lo of 0 or more, "out of range" otherwise.
int64_t parse_int(std::string_view text, std::string_view what,
                  int64_t lo = std::numeric_limits<int64_t>::min(),
                  int64_t hi = std::numeric_limits<int64_t>::max());

/// `text` as a whole unsigned decimal integer (digits only). @throws actorch::error naming
/// `what` and `text`.
uint64_t parse_uint(std::string_view text, std::string_view what);

/// `text` as a whole finite decimal floating-point number ("0.01", "1e-3", "-2"). @throws
/// actorch::error naming `what` and `text` for trailing text, "nan", "inf", an empty string.
double parse_double(std::string_view text, std::string_view what);

/// `v` as text that parse_double reads back to the same double (17 significant digits).
std::string format_double(double v);

} // namespace actorch
