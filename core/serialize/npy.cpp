// Reading and writing numpy's .npy files (see npy.hpp): a small parser for the header's Python
// dict literal, a size check of the whole file against the header before anything is
// allocated, and writes that go through a temporary file renamed over the target.
#include "core/serialize/npy.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "base/text.hpp"
#include "core/ops/factory.hpp"
#include "core/serialize/file_io.hpp"

namespace actorch {

// Note [npy layout]
// ~~~~~~~~~~~~~~~~~
// A .npy file is
//   "\x93NUMPY" | major | minor | header length | header | data
// with the header length a little-endian uint16 in version 1.0 and a uint32 in 2.0 and 3.0.
// The header is a Python dict literal, latin1 (utf8 in 3.0), padded with spaces and ended by
// '\n' so that the data starts at a multiple of 64 bytes:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// The data is the numel * itemsize bytes of the values in C order (Fortran order when
// fortran_order is True). We read the keys in any order with any spacing, Python 2's "3L"
// dims, and '<', '=' or '|' byte orders (this machine is little-endian; '>' too for one-byte
// items, where byte order does not apply). We reject, naming the file and the problem:
// - fortran_order True: we would have to transpose; np.ascontiguousarray(a) avoids it;
// - big-endian descrs ('>f4') and dtypes actorch lacks (structured, '<i2', '<c8', objects);
// - bool bytes other than 0 and 1: reading them as a C++ bool is undefined behaviour;
// - a file whose size is not exactly header + data. Truncated data, and also trailing bytes
//   after it: numpy ignores those, but they mean the header's shape does not describe the
//   file (a corrupted or hand-edited header), and we prefer to say so.
// The sizes are checked against the file before the tensor is allocated, so a corrupted shape
// cannot make us allocate terabytes.

namespace {

using serialize::byte_cursor;
using serialize::file_source;
using serialize::memory_source;
using serialize::read_position;
using serialize::where;

constexpr std::string_view kMagic{"\x93NUMPY", 6};
constexpr size_t kAlign = 64;

/// Python's repr of a shape tuple: "()", "(5,)", "(2, 3)".
std::string tuple_str(const shape_t& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

/// Bytes as they can be shown in a message: printable ASCII as is, others as \xNN; cut short.
std::string escaped(std::string_view bytes, size_t max_len = 160) {
  std::string s;
  for (size_t i = 0; i < bytes.size() && i < max_len; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      s += char(c);
    } else {
      if (c == '\n') {
        s += "\\n";
      } else {
        s += "\\x";
        append_hex(s, c);
      }
    }
  }
  if (bytes.size() > max_len)
    s += "...";
  return s;
}

// Reading. -----------------------------------------------------------------------------------

/// The dtype a descr such as '<f4' names. See Note [npy layout] for what is accepted.
dtype descr_dtype(const std::string& descr, const where& w) {
  std::string_view body = descr;
  char order = '=';
  if (!body.empty() && std::string_view("<>|=").find(body[0]) != std::string_view::npos) {
    order = body[0];
    body.remove_prefix(1);
  }
  struct entry {
    std::string_view code;
    dtype dt;
  };
  static constexpr entry table[] = {
      {"f2", dtype::float16}, {"f4", dtype::float32}, {"f8", dtype::float64},
      {"i1", dtype::int8},    {"u1", dtype::uint8},   {"i4", dtype::int32},
      {"i8", dtype::int64},   {"b1", dtype::bool_},   {"i2", dtype::int16},
  };
  for (const entry& e : table) {
    if (body != e.code)
      continue;
    ACTORCH_IO_CHECK(order != '>' || element_size(e.dt) == 1, w, "big-endian data (descr '", descr,
                     "') is not supported: actorch reads "
                     "little-endian files; save a.astype('<",
                     e.code, "') instead");
    return e.dt;
  }
  ACTORCH_IO_FAIL(w, "unsupported dtype descr '", escaped(descr),
                  "': actorch reads '<f2', "
                  "'<f4', '<f8', '|i1', '|u1', '<i2', '<i4', '<i8' and '|b1'");
}

struct npy_header {
  dtype dt;
  shape_t shape;
};

/// A recursive-descent parser for the header's dict literal: string keys; a string, a bool or
/// a tuple of ints as values; a trailing comma allowed; trailing whitespace after the '}'.
class header_parser {
public:
  header_parser(std::string_view text, const where& w) : s_(text), w_(w) {}

  npy_header parse() {
    std::optional<std::string> descr;
    std::optional<bool> fortran_order;
    std::optional<shape_t> shape;
    skip_space();
    expect('{');
    while (true) {
      skip_space();
      if (consume('}'))
        break;
      const size_t key_pos = pos_;
      const std::string key = parse_string();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        check_unique(descr.has_value(), key, key_pos);
        ACTORCH_IO_CHECK(peek() != '[', w_,
                         "structured dtypes (a list as 'descr') are not "
                         "supported; header: ",
                         escaped(s_));
        descr = parse_string();
      } else if (key == "fortran_order") {
        check_unique(fortran_order.has_value(), key, key_pos);
        fortran_order = parse_bool();
      } else if (key == "shape") {
        check_unique(shape.has_value(), key, key_pos);
        shape = parse_shape();
      } else {
        malformed("unexpected key '" + escaped(key) + "'", key_pos);
      }
      skip_space();
      if (consume(','))
        continue;
      expect('}');
      break;
    }
    skip_space();
    if (pos_ != s_.size())
      malformed("unexpected text after the closing '}'", pos_);
    for (const auto& [have, key] : {std::pair{descr.has_value(), "descr"},
                                    std::pair{fortran_order.has_value(), "fortran_order"},
                                    std::pair{shape.has_value(), "shape"}}) {
      if (!have)
        malformed(std::string("the key '") + key + "' is missing", pos_);
    }
    ACTORCH_IO_CHECK(!*fortran_order, w_,
                     "Fortran-order data (fortran_order: True) is not "
                     "supported; save np.ascontiguousarray(a) instead (shape ",
                     tuple_str(*shape), ")");
    return {descr_dtype(*descr, w_), std::move(*shape)};
  }

private:
  [[noreturn]] void malformed(const std::string& why, size_t at) const {
    ACTORCH_IO_FAIL(w_, "malformed header: ", why, " at offset ", at, " of the header '",
                    escaped(s_), "'");
  }
  void check_unique(bool seen, const std::string& key, size_t at) const {
    if (seen)
      malformed("the key '" + key + "' appears twice", at);
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool consume(char c) {
    if (peek() != c || pos_ >= s_.size())
      return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!consume(c))
      malformed(std::string("expected '") + c + "'", pos_);
  }

  std::string parse_string() {
    const char quote = peek();
    if (quote != '\'' && quote != '"')
      malformed("expected a quoted string", pos_);
    const size_t start = ++pos_;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      if (s_[pos_] == '\\')
        malformed("escape sequences in strings are not supported", pos_);
      ++pos_;
    }
    if (pos_ == s_.size())
      malformed("unterminated string", start - 1);
    return std::string(s_.substr(start, pos_++ - start));
  }

  bool parse_bool() {
    for (const auto& [word, value] :
         {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}}) {
      if (s_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    malformed("expected True or False", pos_);
  }

  int64_t parse_dim() {
    const size_t start = pos_;
    const bool negative = consume('-');
    if (!negative)
      consume('+');
    if (peek() < '0' || peek() > '9')
      malformed("expected an integer in the shape", pos_);
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      const int digit = peek() - '0';
      if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) {
        const size_t end = s_.find_first_not_of("0123456789", pos_);
        ACTORCH_IO_FAIL(w_, "dimension ", escaped(s_.substr(start, end - start)),
                        " in the shape overflows int64");
      }
      v = v * 10 + digit;
      ++pos_;
    }
    if (!consume('L')) // Python 2 longs, as old numpy wrote them
      consume('l');
    ACTORCH_IO_CHECK(!negative || v == 0, w_, "negative dimension -", v, " in the shape");
    return v;
  }

  shape_t parse_shape() {
    const size_t start = pos_;
    expect('(');
    shape_t shape;
    bool comma = false;
    skip_space();
    while (!consume(')')) {
      shape.push_back(parse_dim());
      skip_space();
      if (consume(',')) {
        comma = true;
        skip_space();
        continue;
      }
      expect(')');
      break;
    }
    if (shape.size() == 1 && !comma)
      malformed("the shape is a parenthesised int, not a tuple (write (n,))", start);
    return shape;
  }

  std::string_view s_;
  const where& w_;
  size_t pos_ = 0;
};

uint64_t read_le(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;)
    v = (v << 8) | p[i];
  return v;
}

/// Reads a whole .npy from `src`. See Note [npy layout].
tensor read_npy(byte_cursor src, const where& w) {
  const uint64_t file_size = src.size();

  // The preamble: magic, version, header length.
  unsigned char pre[12] = {};
  const size_t have = size_t(std::min<uint64_t>(file_size, sizeof pre));
  src.read(pre, have);
  const std::string_view pre_view(reinterpret_cast<const char*>(pre), have);
  if (have < kMagic.size() && kMagic.starts_with(pre_view))
    ACTORCH_IO_FAIL(w, "truncated: the file has only ", file_size,
                    " bytes, too few for the "
                    ".npy preamble");
  ACTORCH_IO_CHECK(pre_view.starts_with(kMagic), w, "not a .npy file: it starts with '",
                   escaped(pre_view.substr(0, kMagic.size())),
                   "' instead of the magic "
                   "'\\x93NUMPY'");
  ACTORCH_IO_CHECK(have >= 8, w, "truncated: the file has only ", file_size,
                   " bytes, too few "
                   "for the .npy preamble");
  const int major = pre[6], minor = pre[7];
  ACTORCH_IO_CHECK(major >= 1 && major <= 3 && minor == 0, w, "unsupported .npy version ", major,
                   ".", minor, " (actorch reads 1.0, 2.0 and 3.0)");
  const size_t len_size = major == 1 ? 2 : 4;
  const size_t pre_size = 8 + len_size;
  ACTORCH_IO_CHECK(have >= pre_size, w, "truncated: the file has only ", file_size,
                   " bytes, too few for the .npy ", major, ".0 preamble");
  const uint64_t header_len = read_le(pre + 8, len_size);
  const uint64_t data_offset = pre_size + header_len;
  ACTORCH_IO_CHECK(data_offset <= file_size, w, "truncated header: expected ", header_len,
                   " header bytes, file has ", file_size - pre_size);

  // The header: only the bytes after the preamble that were read along with it are in pre.
  std::string header(size_t(header_len), '\0');
  const size_t in_pre = have - pre_size;
  std::memcpy(header.data(), pre + pre_size, std::min<size_t>(in_pre, header.size()));
  if (header.size() > in_pre)
    src.read(header.data() + in_pre, header.size() - in_pre);
  else if (in_pre > header.size()) // a header shorter than 2 bytes: malformed, data in pre
    ACTORCH_IO_FAIL(w, "malformed header: ", header_len, " bytes cannot hold the dict");
  const npy_header h = header_parser(header, w).parse();

  // The data: its size must match the file exactly, before anything is allocated.
  uint64_t numel = 1, bound = 1; // bound: product with zeros as ones, to catch overflow
  for (int64_t d : h.shape) {
    ACTORCH_IO_CHECK(!__builtin_mul_overflow(bound, uint64_t(std::max<int64_t>(d, 1)), &bound) &&
                         bound <= uint64_t(std::numeric_limits<int64_t>::max()),
                     w, "shape ", tuple_str(h.shape), " has more elements than int64 holds");
    numel *= uint64_t(d);
  }
  uint64_t data_bytes = 0;
  ACTORCH_IO_CHECK(!__builtin_mul_overflow(numel, uint64_t(element_size(h.dt)), &data_bytes), w,
                   "shape ", tuple_str(h.shape), " of ", dtype_name(h.dt),
                   " needs more bytes than 64 bits count");
  const uint64_t after_header = file_size - data_offset;
  ACTORCH_IO_CHECK(after_header >= data_bytes, w, "truncated data: shape ", tuple_str(h.shape),
                   " of ", dtype_name(h.dt), " expected ", data_bytes, " bytes, file has ",
                   after_header);
  ACTORCH_IO_CHECK(after_header == data_bytes, w, after_header - data_bytes,
                   " trailing bytes after the data: shape ", tuple_str(h.shape), " of ",
                   dtype_name(h.dt), " expected ", data_bytes, " bytes, file has ", after_header,
                   " (the header does not describe this file)");

  tensor out = empty(h.shape, {.dtype = h.dt});
  if (data_bytes > 0)
    src.read(out.data_ptr(), size_t(data_bytes));
  if (h.dt == dtype::bool_) {
    // Checked as bytes, before anything reads them as bool. See Note [npy layout].
    const auto* bytes = static_cast<const unsigned char*>(out.data_ptr());
    for (uint64_t i = 0; i < data_bytes; ++i)
      ACTORCH_IO_CHECK(bytes[i] <= 1, w, "bool element ", i, " of ", data_bytes, " holds the byte ",
                       int(bytes[i]), "; .npy bools must be 0 or 1");
  }
  return out;
}

// Writing. -----------------------------------------------------------------------------------

std::string_view npy_descr(dtype dt, const where& w) {
  switch (dt) {
  case dtype::float32: return "<f4";
  case dtype::float64: return "<f8";
  case dtype::float16: return "<f2";
  case dtype::int8: return "|i1";
  case dtype::uint8: return "|u1";
  case dtype::int16: return "<i2";
  case dtype::int32: return "<i4";
  case dtype::int64: return "<i8";
  case dtype::bool_: return "|b1";
  case dtype::bfloat16: break;
  }
  ACTORCH_IO_FAIL(w, "bfloat16 has no numpy dtype; convert first, e.g. t.to(dtype::float32)");
}

/// The tensor whose bytes are written: defined, on the CPU, contiguous.
tensor writable(const tensor& t, const where& w) {
  ACTORCH_IO_CHECK(t.defined(), w, "cannot save an undefined tensor");
  npy_descr(t.dtype(), w); // rejects bfloat16 before any copy
  return t.to(kCPU).contiguous();
}

/// Preamble and header for `t`, padded so that the data starts at a multiple of kAlign.
std::string npy_header_bytes(const tensor& t, const where& w) {
  const std::string dict = std::string("{'descr': '") + std::string(npy_descr(t.dtype(), w)) +
                           "', 'fortran_order': False, 'shape': " + tuple_str(t.sizes()) + ", }";
  auto padded = [&](size_t pre_size) {
    return (pre_size + dict.size() + 1 + kAlign - 1) / kAlign * kAlign;
  };
  int major = 1;
  size_t pre_size = 10;
  if (padded(pre_size) - pre_size > 0xffff) {
    major = 2;
    pre_size = 12;
  }
  const size_t total = padded(pre_size);
  const uint64_t header_len = total - pre_size;
  ACTORCH_IO_CHECK(header_len <= 0xffffffffu, w, "the header of a tensor with ", t.dim(),
                   " dims does not fit in a .npy file");
  std::string out(kMagic);
  out += char(major);
  out += char(0);
  for (size_t i = 0; i < pre_size - 8; ++i)
    out += char((header_len >> (8 * i)) & 0xff);
  out += dict;
  out.append(total - out.size() - 1, ' ');
  out += '\n';
  return out;
}

} // namespace

tensor load_npy(const std::string& path) {
  const where w{"load_npy", path};
  file_source src(w, read_position::after_bytes);
  return read_npy(byte_cursor(src), w);
}

tensor npy_from_bytes(std::string_view bytes, const std::string& name_for_errors) {
  const where w{"npy_from_bytes", name_for_errors};
  memory_source src(bytes);
  return read_npy(byte_cursor(src), w);
}

std::string npy_to_bytes(const tensor& t) {
  static const std::string name = "(in memory)";
  const where w{"npy_to_bytes", name};
  const tensor c = writable(t, w);
  std::string out = npy_header_bytes(c, w);
  if (c.nbytes() > 0)
    out.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
  return out;
}

void save_npy(const std::string& path, const tensor& t) {
  const where w{"save_npy", path};
  const tensor c = writable(t, w);
  const std::string header = npy_header_bytes(c, w);
  serialize::atomic_file tmp(w);
  tmp.write(header.data(), header.size());
  tmp.write(c.data_ptr(), c.nbytes());
  tmp.commit();
}

} // namespace actorch
