// Reading and writing safetensors checkpoints (see safetensors.hpp): a strict parser for the
// subset of JSON the header uses, a check of the header against the file before anything is
// allocated, and writes that go through a temporary file renamed over the target.
#include "core/serialize/safetensors.hpp"

#include "core/autograd/grad_mode.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <system_error>
#include <tuple>

#include "core/ops/factory.hpp"

namespace actorch {

// Note [safetensors layout]
// A safetensors file is
//   N (uint64, little-endian) | header (N bytes of UTF-8 JSON) | data section
// The header is one JSON object. Its optional key "__metadata__" maps to an object of string
// values; every other key is a tensor's name and maps to
//   {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
// where [begin, end) are byte offsets into the data section, which holds the values in C
// order, little-endian. The Python package writes the JSON compactly, "__metadata__" first,
// and pads it with spaces to a multiple of 8 bytes so that the data section is 8-aligned; we
// write the same, with the tensors and their data sorted by name.
// Reading, we accept any whitespace and key order, and reject, naming the file, the problem
// and the tensor's name where there is one:
// - JSON outside what a header needs: true, false, null, fractions and exponents, nesting
//   deeper than kMaxDepth; and everything that is not JSON (bad escapes, unpaired surrogates,
//   raw control characters, invalid UTF-8, trailing text, leading zeros);
// - duplicate keys at any level (JSON leaves them undefined; the Rust reader rejects them too);
// - tensor entries with missing, mistyped or unknown fields, and dtypes actorch lacks;
// - offsets whose span is not the shape's size, and offsets that do not tile the data section
//   exactly: overlapping tensors, bytes belonging to no tensor, and a data section longer or
//   shorter than the tensors (a truncated file, or a header that does not describe it);
// - bool bytes other than 0 and 1: reading them as a C++ bool is undefined behaviour;
// - a header longer than kMaxHeaderBytes, as the Python package does.
// All offsets are checked against the file's size before any tensor is allocated, so a
// corrupted header cannot make us allocate more than the file holds.

namespace {

constexpr int kMaxDepth = 16; // a valid header nests 3 deep; deeper input only risks the stack
constexpr std::string_view kMetadataKey = "__metadata__";
// The Python package refuses headers longer than this (its MAX_HEADER_SIZE); so do we, so that
// a corrupt length field in a large file cannot make us allocate gigabytes for the header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::atomic<int64_t> g_fail_after_bytes{-1};

/// Whose error it is: the operation and the file (or name) it was reading or writing.
struct where {
  const char* op;
  const std::string& name;
};

#define ACTORCH_ST_CHECK(cond, w, ...)                                                             \
  ACTORCH_CHECK(cond, (w).op, ": ", (w).name, ": ", __VA_ARGS__)
#define ACTORCH_ST_FAIL(w, ...) ACTORCH_FAIL((w).op, ": ", (w).name, ": ", __VA_ARGS__)

std::string errno_str(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// UTF-8. -------------------------------------------------------------------------------------

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

/// The offset of the first byte that is not valid UTF-8, or npos.
size_t invalid_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence_length(s, i);
    if (len == 0)
      return i;
    i += len;
  }
  return std::string_view::npos;
}

/// Text as it can be shown in a message: control bytes and backslashes as \xNN, non-ASCII as is
/// when the whole text is valid UTF-8 and as \xNN otherwise; cut short.
std::string escaped(std::string_view text, size_t max_len = 200) {
  const bool utf8 = invalid_utf8_at(text) == std::string_view::npos;
  std::string s;
  for (size_t i = 0; i < text.size() && i < max_len; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c >= 0x20 && c < 0x7f && c != '\\') || (c >= 0x80 && utf8)) {
      s += char(c);
    } else {
      static constexpr char hex[] = "0123456789abcdef";
      s += std::string{'\\', 'x', hex[c >> 4], hex[c & 15]};
    }
  }
  if (text.size() > max_len)
    s += "...";
  return s;
}

/// A tensor or metadata name in a message: 'name'.
std::string key_str(std::string_view name) {
  std::string s = "'";
  s += escaped(name);
  s += '\'';
  return s;
}

// dtypes. ------------------------------------------------------------------------------------

struct dtype_code {
  std::string_view code;
  dtype dt;
};
constexpr dtype_code kDtypeCodes[] = {
    {"F32", dtype::float32},   {"F64", dtype::float64}, {"F16", dtype::float16},
    {"BF16", dtype::bfloat16}, {"I8", dtype::int8},     {"U8", dtype::uint8},
    {"I32", dtype::int32},     {"I64", dtype::int64},   {"BOOL", dtype::bool_},
};

std::string_view code_of(dtype dt) {
  for (const dtype_code& e : kDtypeCodes)
    if (e.dt == dt)
      return e.code;
  ACTORCH_INTERNAL_ASSERT(false, "no safetensors code for dtype ", dtype_name(dt));
  return {};
}

std::optional<dtype> dtype_of_code(std::string_view code) {
  for (const dtype_code& e : kDtypeCodes)
    if (e.code == code)
      return e.dt;
  return std::nullopt;
}

/// numel and byte size of `shape` of `dt`, or nullopt when they overflow.
std::optional<uint64_t> byte_size(const shape_t& shape, dtype dt) {
  uint64_t n = element_size(dt);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, uint64_t(d), &n))
      return std::nullopt;
  }
  // numel must fit in int64 too, even for an empty tensor with a huge dim elsewhere.
  uint64_t bound = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(bound, uint64_t(std::max<int64_t>(d, 1)), &bound) ||
        bound > uint64_t(std::numeric_limits<int64_t>::max()))
      return std::nullopt;
  }
  return n;
}

// The header's JSON. ---------------------------------------------------------------------------

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

json_value make_value(json_value::kind k, size_t pos) {
  json_value v;
  v.k = k;
  v.pos = pos;
  return v;
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

/// A strict recursive-descent parser for RFC 8259 JSON restricted to objects, arrays, strings
/// and integers. See Note [safetensors layout] for what it rejects.
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
    ACTORCH_ST_FAIL(w_, "malformed header JSON: ", why, " at byte ", at, " of the ", s_.size(),
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

// The header's meaning. ------------------------------------------------------------------------

/// One tensor as the header describes it.
struct entry {
  std::string name;
  dtype dt = dtype::float32;
  shape_t shape;
  uint64_t begin = 0, end = 0; // within the data section
};

struct header {
  std::vector<entry> entries; // sorted by name
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0; // in the file
};

std::string offsets_str(uint64_t begin, uint64_t end) {
  std::string s = "[";
  s += std::to_string(begin);
  s += ", ";
  s += std::to_string(end);
  s += ']';
  return s;
}

/// The entry of tensor `name` from its JSON value, checked on its own (not against the others).
entry parse_entry(const std::string& name, const json_value& v, uint64_t data_size,
                  const where& w) {
  const std::string who = "tensor " + key_str(name) + ": ";
  ACTORCH_ST_CHECK(v.k == json_value::kind::object, w, who, "its header entry is ", kind_name(v.k),
                   ", not an object");
  const json_value* fields[3] = {};
  static constexpr const char* kFields[3] = {"dtype", "shape", "data_offsets"};
  for (size_t i = 0; i < v.keys.size(); ++i) {
    const auto* f = std::find_if(std::begin(kFields), std::end(kFields),
                                 [&](const char* k) { return v.keys[i] == k; });
    ACTORCH_ST_CHECK(f != std::end(kFields), w, who, "unexpected field ", key_str(v.keys[i]),
                     " (an entry has dtype, shape and data_offsets)");
    fields[f - std::begin(kFields)] = &v.items[i];
  }
  for (size_t i = 0; i < 3; ++i)
    ACTORCH_ST_CHECK(fields[i], w, who, "the field '", kFields[i], "' is missing");
  const json_value &dt = *fields[0], &shape = *fields[1], &offsets = *fields[2];

  entry e;
  e.name = name;
  ACTORCH_ST_CHECK(dt.k == json_value::kind::string, w, who, "dtype is ", kind_name(dt.k),
                   ", not a string");
  const std::optional<dtype> known = dtype_of_code(dt.str);
  ACTORCH_ST_CHECK(known, w, who, "unsupported dtype ", key_str(dt.str),
                   " (actorch reads F32, F64, F16, BF16, I8, U8, I32, I64 and BOOL)");
  e.dt = *known;

  ACTORCH_ST_CHECK(shape.k == json_value::kind::array, w, who, "shape is ", kind_name(shape.k),
                   ", not an array");
  for (const json_value& d : shape.items) {
    ACTORCH_ST_CHECK(d.k == json_value::kind::integer, w, who, "shape holds ", kind_name(d.k),
                     ", not only integers");
    ACTORCH_ST_CHECK(d.integer >= 0, w, who, "negative dimension ", d.integer, " in the shape");
    e.shape.push_back(d.integer);
  }
  const std::optional<uint64_t> nbytes = byte_size(e.shape, e.dt);
  ACTORCH_ST_CHECK(nbytes, w, who, "shape ", shape_str(e.shape), " of ", dt.str,
                   " has more bytes than 64 bits count");

  ACTORCH_ST_CHECK(offsets.k == json_value::kind::array && offsets.items.size() == 2 &&
                       offsets.items[0].k == json_value::kind::integer &&
                       offsets.items[1].k == json_value::kind::integer,
                   w, who, "data_offsets must be an array of two integers [begin, end]");
  const int64_t begin = offsets.items[0].integer, end = offsets.items[1].integer;
  ACTORCH_ST_CHECK(begin >= 0 && end >= 0, w, who, "negative data_offsets [", begin, ", ", end,
                   "]");
  e.begin = uint64_t(begin);
  e.end = uint64_t(end);
  ACTORCH_ST_CHECK(e.begin <= e.end, w, who, "data_offsets ", offsets_str(e.begin, e.end),
                   " end before they begin");
  ACTORCH_ST_CHECK(e.end - e.begin == *nbytes, w, who, "data_offsets ", offsets_str(e.begin, e.end),
                   " span ", e.end - e.begin, " bytes, but shape ", shape_str(e.shape), " of ",
                   dt.str, " needs ", *nbytes);
  ACTORCH_ST_CHECK(e.end <= data_size, w, who, "data_offsets ", offsets_str(e.begin, e.end),
                   " reach past the end of the data section, which has ", data_size,
                   " bytes (the file is truncated, or the offsets are wrong)");
  return e;
}

/// Checks that the entries tile [0, data_size) exactly. See Note [safetensors layout].
void check_tiling(const std::vector<entry>& entries, uint64_t data_size, const where& w) {
  std::vector<const entry*> by_offset;
  for (const entry& e : entries)
    by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const entry* a, const entry* b) {
    return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
  });
  uint64_t covered = 0; // the data section up to here belongs to the tensors seen so far
  const entry* last = nullptr;
  for (const entry* e : by_offset) {
    if (e->begin < covered)
      ACTORCH_ST_FAIL(w, "tensors ", key_str(last->name), " (data_offsets ",
                      offsets_str(last->begin, last->end), ") and ", key_str(e->name),
                      " (data_offsets ", offsets_str(e->begin, e->end),
                      ") overlap in the data section");
    ACTORCH_ST_CHECK(e->begin == covered, w, "bytes [", covered, ", ", e->begin,
                     ") of the data section belong to no tensor (the next is ", key_str(e->name),
                     " at data_offsets ", offsets_str(e->begin, e->end), ")");
    covered = e->end;
    last = e;
  }
  ACTORCH_ST_CHECK(covered == data_size, w, data_size - covered,
                   " trailing bytes after the tensors' data: the data section has ", data_size,
                   " bytes but the tensors end at ", covered,
                   " (the header does not describe this file)");
}

// Reading. -----------------------------------------------------------------------------------

/// Where the bytes of a file come from: a file or memory, whose size is known up front.
class byte_source {
public:
  virtual ~byte_source() = default;
  virtual uint64_t size() const = 0;
  /// Copies the n bytes at `offset` to dst. @pre they lie within size().
  virtual void read_at(uint64_t offset, void* dst, size_t n) = 0;
};

class memory_source final : public byte_source {
public:
  explicit memory_source(std::string_view bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  void read_at(uint64_t offset, void* dst, size_t n) override {
    ACTORCH_INTERNAL_ASSERT(offset <= bytes_.size() && n <= bytes_.size() - offset);
    if (n > 0)
      std::memcpy(dst, bytes_.data() + offset, n);
  }

private:
  std::string_view bytes_;
};

class file_source final : public byte_source {
public:
  explicit file_source(const where& w) : w_(w) {
    fd_ = ::open(w.name.c_str(), O_RDONLY | O_CLOEXEC);
    ACTORCH_ST_CHECK(fd_ >= 0, w, "cannot open the file: ", errno_str(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      ::close(fd_);
      ACTORCH_ST_FAIL(w, "cannot stat the file: ", errno_str(err));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      ACTORCH_ST_FAIL(w, "not a regular file (a directory, pipe or device cannot be loaded)");
    }
    size_ = uint64_t(st.st_size);
  }
  ~file_source() override { ::close(fd_); }
  file_source(const file_source&) = delete;
  file_source& operator=(const file_source&) = delete;

  uint64_t size() const override { return size_; }
  void read_at(uint64_t offset, void* dst, size_t n) override {
    auto* p = static_cast<char*>(dst);
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, p + done, n - done, off_t(offset + done));
      if (r < 0 && errno == EINTR)
        continue;
      ACTORCH_ST_CHECK(r >= 0, w_, "read failed at byte ", offset + done, ": ", errno_str(errno));
      ACTORCH_ST_CHECK(r > 0, w_, "the file ended at byte ", offset + done, ", but it had ", size_,
                       " when opened (was it truncated while being read?)");
      done += size_t(r);
    }
  }

private:
  const where& w_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

/// Reads and checks the length and the header of a file. See Note [safetensors layout].
header read_header(byte_source& src, const where& w) {
  const uint64_t file_size = src.size();
  ACTORCH_ST_CHECK(file_size >= 8, w, "truncated: the file has only ", file_size,
                   " bytes, too few for the 8-byte header length");
  unsigned char len_bytes[8];
  src.read_at(0, len_bytes, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | len_bytes[i];
  ACTORCH_ST_CHECK(n <= file_size - 8, w, "truncated: the header length is ", n, " bytes but only ",
                   file_size - 8,
                   " follow it (or the first 8 bytes are not a safetensors header length)");
  ACTORCH_ST_CHECK(n <= kMaxHeaderBytes, w, "the header length ", n, " exceeds the ",
                   kMaxHeaderBytes,
                   "-byte limit of the safetensors package (a corrupt length field?)");
  std::string text(size_t(n), '\0');
  src.read_at(8, text.data(), text.size());

  const json_value doc = json_parser(text, w).parse_document();
  ACTORCH_ST_CHECK(doc.k == json_value::kind::object, w, "the header is ", kind_name(doc.k),
                   ", not a JSON object");
  header h;
  h.data_start = 8 + n;
  const uint64_t data_size = file_size - h.data_start;
  for (size_t i = 0; i < doc.keys.size(); ++i) {
    const json_value& v = doc.items[i];
    if (doc.keys[i] != kMetadataKey) {
      h.entries.push_back(parse_entry(doc.keys[i], v, data_size, w));
      continue;
    }
    ACTORCH_ST_CHECK(v.k == json_value::kind::object, w, "__metadata__ is ", kind_name(v.k),
                     ", not an object of strings");
    for (size_t j = 0; j < v.keys.size(); ++j) {
      ACTORCH_ST_CHECK(v.items[j].k == json_value::kind::string, w, "__metadata__ value of ",
                       key_str(v.keys[j]), " is ", kind_name(v.items[j].k), ", not a string");
      h.metadata.emplace(v.keys[j], v.items[j].str);
    }
  }
  std::sort(h.entries.begin(), h.entries.end(),
            [](const entry& a, const entry& b) { return a.name < b.name; });
  check_tiling(h.entries, data_size, w);
  return h;
}

/// The values of `e` as a new contiguous CPU tensor.
tensor read_tensor(byte_source& src, const header& h, const entry& e, const where& w) {
  tensor out = empty(e.shape, {.dtype = e.dt});
  const size_t n = size_t(e.end - e.begin);
  if (n == 0)
    return out;
  src.read_at(h.data_start + e.begin, out.data_ptr(), n);
  if (e.dt == dtype::bool_) {
    // Checked as bytes, before anything reads them as bool. See Note [safetensors layout].
    const auto* bytes = static_cast<const unsigned char*>(out.data_ptr());
    for (size_t i = 0; i < n; ++i)
      ACTORCH_ST_CHECK(bytes[i] <= 1, w, "tensor ", key_str(e.name), ": bool element ", i,
                       " holds the byte ", int(bytes[i]), "; bools must be 0 or 1");
  }
  return out;
}

safetensors_file read_all(byte_source& src, const where& w) {
  header h = read_header(src, w);
  safetensors_file out;
  out.metadata = std::move(h.metadata);
  for (const entry& e : h.entries)
    out.tensors.emplace_back(e.name, read_tensor(src, h, e, w));
  return out;
}

void read_into(byte_source& src, const std::vector<std::pair<std::string, tensor>>& targets,
               bool strict, const where& w) {
  // 1. The targets on their own: named once, defined, writable by copy_.
  std::map<std::string_view, const tensor*> wanted;
  for (const auto& [name, t] : targets) {
    ACTORCH_ST_CHECK(wanted.emplace(name, &t).second, w, "the target name ", key_str(name),
                     " appears twice");
    ACTORCH_ST_CHECK(t.defined(), w, "target ", key_str(name), " is an undefined tensor");
    ACTORCH_ST_CHECK(t.device().is_cpu(), w, "target ", key_str(name), " is on ", t.device(),
                     "; load_into writes CPU tensors");
    for (int64_t d = 0; d < t.dim(); ++d)
      ACTORCH_ST_CHECK(t.strides()[size_t(d)] != 0 || t.sizes()[size_t(d)] <= 1, w, "target ",
                       key_str(name), " has a broadcast (stride 0) dim ", d,
                       " and cannot be written in place (shape ", shape_str(t.sizes()), ")");
  }

  // 2. The header against the targets: every mismatch is reported at once, as
  // load_state_dict does, before anything is read.
  const header h = read_header(src, w);
  std::map<std::string_view, const entry*> in_file;
  for (const entry& e : h.entries)
    in_file.emplace(e.name, &e);
  std::string missing, unexpected, mismatched;
  for (const auto& [name, t] : wanted) {
    const auto it = in_file.find(name);
    if (it == in_file.end()) {
      missing += (missing.empty() ? "" : ", ") + key_str(name);
      continue;
    }
    const entry& e = *it->second;
    if (e.shape != t->sizes() || e.dt != t->dtype())
      mismatched += (mismatched.empty() ? "" : "; ") + key_str(name) + " expected shape " +
                    shape_str(t->sizes()) + " of " + std::string(dtype_name(t->dtype())) +
                    " but the file has shape " + shape_str(e.shape) + " of " +
                    std::string(dtype_name(e.dt));
  }
  if (strict) {
    for (const entry& e : h.entries)
      if (!wanted.contains(e.name))
        unexpected += (unexpected.empty() ? "" : ", ") + key_str(e.name);
  }
  ACTORCH_ST_CHECK(missing.empty() && unexpected.empty(), w, "the keys do not match the targets:",
                   missing.empty() ? "" : " missing from the file: ", missing,
                   missing.empty() || unexpected.empty() ? "" : ";",
                   unexpected.empty() ? "" : " unexpected in the file (strict): ", unexpected);
  ACTORCH_ST_CHECK(mismatched.empty(), w, "shape or dtype mismatch: ", mismatched);

  // 3. Every value is read (and checked) before the first target is written, so that a failed
  // read leaves every target as it was.
  std::vector<std::pair<const tensor*, tensor>> values;
  for (const auto& [name, t] : wanted)
    values.emplace_back(t, read_tensor(src, h, *in_file.at(name), w));

  // 4. Only now the targets; copy_ writes through their views. Loading parameters is not part
  // of any graph (PyTorch's load_state_dict copies under no_grad too), and in-place writes to
  // leaves that require grad are refused outside no_grad.
  no_grad untracked;
  for (auto& [target, value] : values) {
    tensor handle = *target; // shares the target's impl: copy_ writes into the target itself
    handle.copy_(value);
  }
}

// Writing. -----------------------------------------------------------------------------------

/// Appends `s` as a JSON string: quotes, backslashes and control characters escaped, other
/// bytes (valid UTF-8, checked by the caller) as they are, as serde_json writes them.
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
        static constexpr char hex[] = "0123456789abcdef";
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 15];
      } else {
        out += ch;
      }
    }
  }
  out += '"';
}

void check_utf8(std::string_view s, const char* what, const where& w) {
  const size_t at = invalid_utf8_at(s);
  ACTORCH_ST_CHECK(at == std::string_view::npos, w, what, " ", key_str(s),
                   " is not valid UTF-8 (at byte ", at, "); safetensors headers are UTF-8 JSON");
}

/// What one save writes: the tensors in file order and the bytes before their data.
struct plan {
  std::vector<const std::pair<std::string, tensor>*> order; // sorted by name
  std::string head;                                         // length, JSON, padding
};

plan make_plan(const std::vector<std::pair<std::string, tensor>>& tensors,
               const std::map<std::string, std::string>& metadata, const where& w) {
  plan p;
  for (const auto& named : tensors)
    p.order.push_back(&named);
  std::sort(p.order.begin(), p.order.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  for (size_t i = 0; i < p.order.size(); ++i) {
    const auto& [name, t] = *p.order[i];
    ACTORCH_ST_CHECK(i == 0 || p.order[i - 1]->first != name, w, "the tensor name ", key_str(name),
                     " appears twice");
    ACTORCH_ST_CHECK(name != kMetadataKey, w,
                     "a tensor cannot be named '__metadata__': the header reserves that key");
    check_utf8(name, "the tensor name", w);
    ACTORCH_ST_CHECK(t.defined(), w, "tensor ", key_str(name), " is an undefined tensor");
  }
  for (const auto& [key, value] : metadata) {
    check_utf8(key, "the metadata key", w);
    check_utf8(value, "the metadata value", w);
  }

  // The JSON, compact as serde_json writes it, "__metadata__" first. See Note [safetensors
  // layout].
  std::string json = "{";
  if (!metadata.empty()) {
    append_json_string(json, kMetadataKey);
    json += ":{";
    for (const auto& [key, value] : metadata) {
      if (json.back() != '{')
        json += ',';
      append_json_string(json, key);
      json += ':';
      append_json_string(json, value);
    }
    json += '}';
  }
  uint64_t offset = 0;
  for (const auto* named : p.order) {
    const tensor& t = named->second;
    if (json.size() > 1)
      json += ',';
    append_json_string(json, named->first);
    json += ":{\"dtype\":\"";
    json += code_of(t.dtype());
    json += "\",\"shape\":[";
    for (size_t d = 0; d < t.sizes().size(); ++d) {
      if (d > 0)
        json += ',';
      json += std::to_string(t.sizes()[d]);
    }
    json += "],\"data_offsets\":[" + std::to_string(offset) + ",";
    offset += t.nbytes();
    json += std::to_string(offset) + "]}";
  }
  json += '}';
  json.append((8 - json.size() % 8) % 8, ' ');
  ACTORCH_ST_CHECK(json.size() <= kMaxHeaderBytes, w, "the header of ", tensors.size(),
                   " tensors takes ", json.size(), " bytes, more than the ", kMaxHeaderBytes,
                   " that the safetensors package reads");

  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    p.head += char((n >> (8 * i)) & 0xff);
  p.head += json;
  return p;
}

/// Where the bytes of a save go.
class byte_sink {
public:
  virtual ~byte_sink() = default;
  virtual void write(const void* data, size_t n) = 0;
};

class string_sink final : public byte_sink {
public:
  explicit string_sink(std::string& out) : out_(out) {}
  void write(const void* data, size_t n) override {
    out_.append(static_cast<const char*>(data), n);
  }

private:
  std::string& out_;
};

/// Writes the head, then each tensor's values in C order (copied to the CPU first if needed).
void write_plan(const plan& p, byte_sink& sink) {
  sink.write(p.head.data(), p.head.size());
  for (const auto* named : p.order) {
    const tensor c = named->second.to(kCPU).contiguous();
    if (c.nbytes() > 0)
      sink.write(c.data_ptr(), c.nbytes());
  }
}

/// The temporary file of one save: removed unless the rename over the target happened.
class temp_file final : public byte_sink {
public:
  explicit temp_file(const where& w) : w_(w) {
    static std::atomic<uint64_t> counter{0};
    for (int attempt = 0;; ++attempt) {
      path_ = w.name + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0)
        return;
      ACTORCH_ST_CHECK(errno == EEXIST && attempt < 100, w, "cannot create the temporary file ",
                       path_, ": ", errno_str(errno));
    }
  }
  ~temp_file() override {
    if (fd_ >= 0)
      ::close(fd_);
    if (!renamed_)
      ::unlink(path_.c_str());
  }
  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;

  void write(const void* data, size_t n) override {
    const auto* p = static_cast<const char*>(data);
    const int64_t fail_after = g_fail_after_bytes.load();
    if (fail_after >= 0 && written_ + n > uint64_t(fail_after)) {
      write_raw(p, size_t(uint64_t(fail_after) - written_));
      injected_failure();
    }
    write_raw(p, n);
  }

  /// fsync, close, rename over the target, then fsync the directory so the rename persists.
  void commit() {
    const int64_t fail_after = g_fail_after_bytes.load();
    if (fail_after >= 0 && written_ >= uint64_t(fail_after))
      injected_failure();
    ACTORCH_ST_CHECK(::fsync(fd_) == 0, w_, "fsync of the temporary file ", path_,
                     " failed: ", errno_str(errno));
    const int fd = std::exchange(fd_, -1);
    ACTORCH_ST_CHECK(::close(fd) == 0, w_, "closing the temporary file ", path_,
                     " failed: ", errno_str(errno));
    ACTORCH_ST_CHECK(::rename(path_.c_str(), w_.name.c_str()) == 0, w_, "renaming ", path_,
                     " over the target failed: ", errno_str(errno));
    renamed_ = true;
    // Best effort: the file is complete and in place; a failure here (some file systems
    // refuse fsync on directories) only means the rename might not survive a power cut.
    const std::string dir = std::filesystem::path(w_.name).parent_path().string();
    const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }

private:
  [[noreturn]] void injected_failure() const {
    ACTORCH_ST_FAIL(w_, "injected failure after writing ", written_, " bytes of ", path_,
                    " (detail::set_safetensors_fail_after_bytes)");
  }
  void write_raw(const char* p, size_t n) {
    while (n > 0) {
      const ssize_t r = ::write(fd_, p, n);
      if (r < 0 && errno == EINTR)
        continue;
      ACTORCH_ST_CHECK(r > 0, w_, "writing the temporary file ", path_,
                       " failed: ", r < 0 ? errno_str(errno) : std::string("no progress"));
      p += r;
      n -= size_t(r);
      written_ += uint64_t(r);
    }
  }

  const where& w_;
  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool renamed_ = false;
};

} // namespace

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const where w{"save_safetensors", path};
  const plan p = make_plan(tensors, metadata, w); // every check before the file is created
  temp_file tmp(w);
  write_plan(p, tmp);
  tmp.commit();
}

safetensors_file load_safetensors(const std::string& path) {
  const where w{"load_safetensors", path};
  file_source src(w);
  return read_all(src, w);
}

void load_into(const std::string& path, const std::vector<std::pair<std::string, tensor>>& targets,
               bool strict) {
  const where w{"load_into", path};
  file_source src(w);
  read_into(src, targets, strict, w);
}

std::string safetensors_to_bytes(const std::vector<std::pair<std::string, tensor>>& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  static const std::string name = "(in memory)";
  const where w{"safetensors_to_bytes", name};
  std::string out;
  string_sink sink(out);
  write_plan(make_plan(tensors, metadata, w), sink);
  return out;
}

safetensors_file safetensors_from_bytes(std::string_view bytes,
                                        const std::string& name_for_errors) {
  const where w{"safetensors_from_bytes", name_for_errors};
  memory_source src(bytes);
  return read_all(src, w);
}

void load_into_from_bytes(std::string_view bytes, const std::string& name_for_errors,
                          const std::vector<std::pair<std::string, tensor>>& targets, bool strict) {
  const where w{"load_into_from_bytes", name_for_errors};
  memory_source src(bytes);
  read_into(src, targets, strict, w);
}

namespace detail {

void set_safetensors_fail_after_bytes(int64_t n) {
  g_fail_after_bytes.store(n < 0 ? -1 : n);
}

} // namespace detail
} // namespace actorch
