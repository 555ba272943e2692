// Strict number parsing (parse.hpp) over std::from_chars, which takes no whitespace, no '+' and
// no locale, and says where it stopped; and format_double, its inverse for doubles.
#include "base/parse.hpp"

#include <charconv>
#include <cmath>
#include <sstream>
#include <system_error>

#include "base/error.hpp"

namespace actorch {

namespace {

std::string quoted(std::string_view text) {
  return "'" + std::string(text) + "'";
}

} // namespace

int64_t parse_int(std::string_view text, std::string_view what, int64_t lo, int64_t hi) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, v);
  const bool digits_only = ec != std::errc::invalid_argument && stop == end;
  ACTORCH_CHECK(digits_only, what, " must be an integer, but got ", quoted(text));
  const bool negative = !text.empty() && text.front() == '-';
  ACTORCH_CHECK(!(negative && lo >= 0), what, " must not be negative, but got ", quoted(text));
  ACTORCH_CHECK(ec != std::errc::result_out_of_range && v >= lo && v <= hi, what,
                " is out of range: got ", quoted(text), ", expected ", lo, "..", hi);
  return v;
}

uint64_t parse_uint(std::string_view text, std::string_view what) {
  ACTORCH_CHECK(text.empty() || text.front() != '-', what, " must not be negative, but got ",
                quoted(text));
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, v);
  ACTORCH_CHECK(ec != std::errc::invalid_argument && stop == end, what,
                " must be an unsigned integer, but got ", quoted(text));
  ACTORCH_CHECK(ec != std::errc::result_out_of_range, what, " is out of range (above ",
                std::numeric_limits<uint64_t>::max(), "): ", quoted(text));
  return v;
}

double parse_double(std::string_view text, std::string_view what) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, v);
  ACTORCH_CHECK(ec != std::errc::invalid_argument && stop == end, what,
                " must be a number, but got ", quoted(text));
  ACTORCH_CHECK(ec != std::errc::result_out_of_range && std::isfinite(v), what,
                " must be a finite number, but got ", quoted(text));
  return v;
}

std::string format_double(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

} // namespace actorch
