// The strict subset of JSON that safetensors headers use (objects, arrays, strings, integers):
// a parser that names the file and the byte of every problem, the writer of JSON strings, and
// the UTF-8 checks both need. safetensors.cpp gives the parsed values their meaning.
// See Note [safetensors layout] in safetensors.cpp for what the parser rejects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/serialize/file_io.hpp"

namespace actorch::serialize {

// UTF-8. -------------------------------------------------------------------------------------

/// The offset of the first byte that is not valid UTF-8 (RFC 3629: overlong forms, surrogates
/// and code points past U+10FFFF are invalid), or npos.
size_t invalid_utf8_at(std::string_view s);

/// Text as it can be shown in a message: control bytes and backslashes as \xNN, non-ASCII as is
/// when the whole text is valid UTF-8 and as \xNN otherwise; cut short after max_len bytes.
std::string escaped(std::string_view text, size_t max_len = 200);

/// A tensor or metadata name in a message: 'name'.
std::string key_str(std::string_view name);

// JSON. --------------------------------------------------------------------------------------

/// One JSON value of the subset safetensors headers use.
struct json_value {
  enum class kind { object, array, string, integer };
  kind k = kind::object;
  size_t pos = 0;                // where it starts in the header, for messages
  std::string str;               // string
  int64_t integer = 0;           // integer
  std::vector<std::string> keys; // object: keys[i] names items[i]
  std::vector<json_value> items; // object and array
};

/// "an object", "an array", "a string", "an integer": for messages.
const char* kind_name(json_value::kind k);

/// Parses `text`, a whole header, as one JSON value of the subset with optional whitespace
/// around it. Throws actorch::error, naming `w`, "malformed header JSON", the problem and its
/// byte, for anything outside the subset or not JSON (see Note [safetensors layout]).
/// @post object keys are unique, strings are valid UTF-8 with escapes decoded.
json_value parse_json(std::string_view text, const where& w);

/// Appends `s` as a JSON string: quotes, backslashes and control characters escaped, other
/// bytes (valid UTF-8, checked by the caller) as they are, as serde_json writes them.
void append_json_string(std::string& out, std::string_view s);

} // namespace actorch::serialize
