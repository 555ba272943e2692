// The strict JSON subset of safetensors headers (see json.hpp): a recursive-descent parser that
// rejects everything a header does not need, the UTF-8 checks it relies on, and the writer of
// JSON strings that save_safetensors uses.
#include "core/serialize/json.hpp"

#include <limits>
#include <set>

#include "base/text.hpp"

namespace actorch::serialize {

namespace {

constexpr int kMaxDepth = 16; // a valid header nests 3 deep; deeper input only risks the stack

/// The length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one (overlong
/// forms, surrogates and code points past U+10FFFF are invalid, as RFC 3629 says).
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = at(i);
  if (c < 0x80)
    return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xbf; // the allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0)
      lo = 0xa0; // overlong
    if (c == 0xed)
      hi = 0x9f; // surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0)
      lo = 0x90; // overlong
    if (c == 0xf4)
      hi = 0x8f; // past U+10FFFF
  } else {
    return 0;
  }
  if (i + len > s.size() || at(i + 1) < lo || at(i + 1) > hi)
    return 0;
  for (size_t k = 2; k < len; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xbf)
      return 0;
  return len;
}

json_value make_value(json_value::kind k, size_t pos) {
  json_value v;
  v.k = k;
  v.pos = pos;
  return v;
}

/// A strict recursive-descent parser for RFC 8259 JSON restricted to objects, arrays, strings
/// and integers. See Note [safetensors layout] in safetensors.cpp for what it rejects.
class json_parser {
public:
  json_parser(std::string_view text, const where& w) : s_(text), w_(w) {}

  json_value parse_document() {
    skip_space();
    json_value v = parse_value(0);
    skip_space();
    if (pos_ != s_.size())
      malformed("unexpected text after the JSON value", pos_);
    return v;
  }

private:
  [[noreturn]] void malformed(const std::string& why, size_t at) const {
    const size_t from = at > 30 ? at - 30 : 0;
    ACTORCH_IO_FAIL(w_, "malformed header JSON: ", why, " at byte ", at, " of the ", s_.size(),
                    "-byte header (near '", escaped(s_.substr(from, 60), 60), "')");
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }
  void skip_space() {
    while (!at_end() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  void expect(char c, const char* what) {
    if (at_end())
      malformed(std::string("the header ends where ") + what + " was expected", pos_);
    if (s_[pos_] != c)
      malformed(std::string("expected ") + what + " but found '" + escaped(s_.substr(pos_, 1)) +
                    "'",
                pos_);
    ++pos_;
  }

  json_value parse_value(int depth) {
    if (at_end())
      malformed("the header ends where a value was expected", pos_);
    const char c = peek();
    if (c == '{' || c == '[') {
      if (depth >= kMaxDepth)
        malformed("values nested deeper than " + std::to_string(kMaxDepth) + " levels", pos_);
      return c == '{' ? parse_object(depth + 1) : parse_array(depth + 1);
    }
    if (c == '"') {
      json_value v = make_value(json_value::kind::string, pos_);
      v.str = parse_string();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9'))
      return parse_integer();
    for (const char* word : {"true", "false", "null"}) {
      if (s_.substr(pos_).starts_with(word))
        malformed(std::string(word) + " is not used in safetensors headers", pos_);
    }
    malformed("expected a value but found '" + escaped(s_.substr(pos_, 1)) + "'", pos_);
  }

  json_value parse_object(int depth) {
    json_value v = make_value(json_value::kind::object, pos_);
    std::set<std::string> seen;
    expect('{', "'{'");
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return v;
    }
    while (true) {
      skip_space();
      const size_t key_pos = pos_;
      if (peek() != '"') {
        if (at_end())
          malformed("the header ends where a key was expected", pos_);
        malformed("expected a string key but found '" + escaped(s_.substr(pos_, 1)) + "'", pos_);
      }
      std::string key = parse_string();
      if (!seen.insert(key).second)
        malformed("duplicate key " + key_str(key), key_pos);
      skip_space();
      expect(':', "':'");
      skip_space();
      v.items.push_back(parse_value(depth));
      v.keys.push_back(std::move(key));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}', "',' or '}'");
      return v;
    }
  }

  json_value parse_array(int depth) {
    json_value v = make_value(json_value::kind::array, pos_);
    expect('[', "'['");
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return v;
    }
    while (true) {
      skip_space();
      v.items.push_back(parse_value(depth));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']', "',' or ']'");
      return v;
    }
  }

  json_value parse_integer() {
    json_value v = make_value(json_value::kind::integer, pos_);
    const bool negative = peek() == '-';
    if (negative)
      ++pos_;
    if (peek() < '0' || peek() > '9')
      malformed("expected a digit after '-'", pos_);
    if (peek() == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9')
      malformed("numbers with leading zeros are not JSON", v.pos);
    uint64_t magnitude = 0;
    while (peek() >= '0' && peek() <= '9') {
      const auto digit = uint64_t(peek() - '0');
      if (magnitude > (uint64_t(std::numeric_limits<int64_t>::max()) - digit) / 10)
        malformed("the integer does not fit in 64 bits", v.pos);
      magnitude = magnitude * 10 + digit;
      ++pos_;
    }
    if (peek() == '.' || peek() == 'e' || peek() == 'E')
      malformed("only integers are used in safetensors headers, not fractions or exponents", v.pos);
    v.integer = negative ? -int64_t(magnitude) : int64_t(magnitude);
    return v;
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size())
      malformed("the header ends inside a \\u escape", pos_);
    unsigned u = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      const char c = s_[pos_];
      unsigned d = 0;
      if (c >= '0' && c <= '9')
        d = unsigned(c - '0');
      else if (c >= 'a' && c <= 'f')
        d = unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        d = unsigned(c - 'A' + 10);
      else
        malformed("a \\u escape needs 4 hex digits", pos_);
      u = u * 16 + d;
    }
    return u;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xc0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += char(0xe0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3f));
      out += char(0x80 | (cp & 0x3f));
    } else {
      out += char(0xf0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3f));
      out += char(0x80 | ((cp >> 6) & 0x3f));
      out += char(0x80 | (cp & 0x3f));
    }
  }

  std::string parse_string() {
    const size_t start = pos_;
    expect('"', "'\"'");
    std::string out;
    while (true) {
      if (at_end())
        malformed("unterminated string", start);
      const auto c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20)
        malformed("raw control character \\x" + escaped(s_.substr(pos_, 1)).substr(2) +
                      " in a string (JSON needs it escaped)",
                  pos_);
      if (c >= 0x80) {
        const size_t len = utf8_sequence_length(s_, pos_);
        if (len == 0)
          malformed("invalid UTF-8 in a string", pos_);
        out.append(s_.substr(pos_, len));
        pos_ += len;
        continue;
      }
      if (c != '\\') {
        out += char(c);
        ++pos_;
        continue;
      }
      const size_t esc = pos_++;
      if (at_end())
        malformed("unterminated string", start);
      const char e = s_[pos_++];
      switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        uint32_t cp = hex4();
        if (cp >= 0xdc00 && cp <= 0xdfff)
          malformed("unpaired low surrogate in a \\u escape", esc);
        if (cp >= 0xd800 && cp <= 0xdbff) {
          // A high surrogate must be followed by an escaped low one: "\ud83d\ude00".
          if (s_.substr(pos_, 2) != "\\u")
            malformed("unpaired high surrogate in a \\u escape", esc);
          pos_ += 2;
          const uint32_t low = hex4();
          if (low < 0xdc00 || low > 0xdfff)
            malformed("unpaired high surrogate in a \\u escape", esc);
          cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        }
        append_utf8(out, cp);
        break;
      }
      default: malformed("invalid escape '\\" + escaped(std::string_view(&e, 1)) + "'", esc);
      }
    }
  }

  std::string_view s_;
  const where& w_;
  size_t pos_ = 0;
};

} // namespace

size_t invalid_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence_length(s, i);
    if (len == 0)
      return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string escaped(std::string_view text, size_t max_len) {
  const bool utf8 = invalid_utf8_at(text) == std::string_view::npos;
  std::string s;
  for (size_t i = 0; i < text.size() && i < max_len; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c >= 0x20 && c < 0x7f && c != '\\') || (c >= 0x80 && utf8)) {
      s += char(c);
    } else {
      s += "\\x";
      append_hex(s, c);
    }
  }
  if (text.size() > max_len)
    s += "...";
  return s;
}

std::string key_str(std::string_view name) {
  std::string s = "'";
  s += escaped(name);
  s += '\'';
  return s;
}

const char* kind_name(json_value::kind k) {
  switch (k) {
  case json_value::kind::object: return "an object";
  case json_value::kind::array: return "an array";
  case json_value::kind::string: return "a string";
  case json_value::kind::integer: return "an integer";
  }
  return "?";
}

json_value parse_json(std::string_view text, const where& w) {
  return json_parser(text, w).parse_document();
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\b': out += "\\b"; break;
    case '\f': out += "\\f"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    default:
      if (c < 0x20) {
        out += "\\u00";
        append_hex(out, uint8_t(c));
      } else {
        out += ch;
      }
    }
  }
  out += '"';
}

} // namespace actorch::serialize
