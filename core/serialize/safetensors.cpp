// Reading and writing safetensors checkpoints (see safetensors.hpp): the header's JSON (parsed
// by json.cpp) checked against the file before anything is allocated, and writes that go
// through a temporary file renamed over the target (file_io.hpp's atomic_file).
#include "core/serialize/safetensors.hpp"

#include "base/text.hpp"
#include "core/autograd/grad_mode.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <tuple>

#include <zlib.h>

#include "core/ops/factory.hpp"
#include "core/serialize/file_io.hpp"
#include "core/serialize/json.hpp"

namespace actorch {

// Note [safetensors layout]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
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
//   deeper than kMaxDepth (json.cpp); and everything that is not JSON (bad escapes, unpaired
//   surrogates, raw control characters, invalid UTF-8, trailing text, leading zeros);
// - duplicate keys at any level (JSON leaves them undefined; the Rust reader rejects them too);
// - tensor entries with missing, mistyped or unknown fields, and dtypes actorch lacks;
// - offsets whose span is not the shape's size, and offsets that do not tile the data section
//   exactly: overlapping tensors, bytes belonging to no tensor, and a data section longer or
//   shorter than the tensors (a truncated file, or a header that does not describe it);
// - bool bytes other than 0 and 1: reading them as a C++ bool is undefined behaviour;
// - a header longer than kMaxHeaderBytes, as the Python package does.
// All offsets are checked against the file's size before any tensor is allocated, so a
// corrupted header cannot make us allocate more than the file holds.

// Note [safetensors checksums]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The format has no checksum, so a flipped bit in a tensor's data loads silently. We write one
// per tensor into "__metadata__", where the format allows any string values and every other
// reader ignores what it does not know: "actorch.crc32.<name>": 8 lowercase hex digits, zlib's
// crc32 of the tensor's bytes as stored (C order, little-endian), which Python's zlib.crc32
// computes too. Reading, a file with any such key must have one for every tensor and none for a
// tensor it lacks; each tensor's bytes are checked right after they are read, before anything
// uses them, and a mismatch names the file and the tensor. The keys are the file's own: load
// returns the metadata without them, and a save refuses user metadata under the prefix. A file
// written elsewhere, without them, loads as before. crc32 detects every burst error of up to 32
// bits and, at random, misses one corruption in 2^32; it is no defence against a forger (who
// would recompute it).

namespace {

using serialize::append_json_string;
using serialize::atomic_file;
using serialize::byte_sink;
using serialize::byte_source;
using serialize::fail_after_hook;
using serialize::file_source;
using serialize::invalid_utf8_at;
using serialize::json_value;
using serialize::key_str;
using serialize::kind_name;
using serialize::memory_source;
using serialize::string_sink;
using serialize::where;

constexpr std::string_view kMetadataKey = "__metadata__";
// See Note [safetensors checksums].
constexpr std::string_view kChecksumPrefix = "actorch.crc32.";
// The Python package refuses headers longer than this (its MAX_HEADER_SIZE); so do we, so that
// a corrupt length field in a large file cannot make us allocate gigabytes for the header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

fail_after_hook g_fail_after{"detail::set_safetensors_fail_after_bytes"};

// dtypes. ------------------------------------------------------------------------------------

struct dtype_code {
  std::string_view code;
  dtype dt;
};
constexpr dtype_code kDtypeCodes[] = {
    {"F32", dtype::float32},   {"F64", dtype::float64}, {"F16", dtype::float16},
    {"BF16", dtype::bfloat16}, {"I8", dtype::int8},     {"U8", dtype::uint8},
    {"I32", dtype::int32},     {"I64", dtype::int64},   {"BOOL", dtype::bool_},
    {"I16", dtype::int16},
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

/// zlib's crc32 of n bytes (n may exceed zlib's uInt: fed in pieces).
uint32_t crc32_of(const void* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    const uInt piece = uInt(std::min<size_t>(n, size_t(1) << 30));
    crc = crc32(crc, p, piece);
    p += piece;
    n -= piece;
  }
  return uint32_t(crc);
}

std::string hex8(uint32_t v) {
  return to_hex_digits(v, 8);
}

/// 8 lowercase hex digits as a number, or nullopt.
std::optional<uint32_t> from_hex8(std::string_view s) {
  if (s.size() != 8)
    return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0)
      return std::nullopt;
    v = v << 4 | uint32_t(d);
  }
  return v;
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

// The header's meaning. ------------------------------------------------------------------------

/// One tensor as the header describes it.
struct entry {
  std::string name;
  dtype dt = dtype::float32;
  shape_t shape;
  uint64_t begin = 0, end = 0; // within the data section
  std::optional<uint32_t> crc; // Note [safetensors checksums]
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
  ACTORCH_IO_CHECK(v.k == json_value::kind::object, w, who, "its header entry is ", kind_name(v.k),
                   ", not an object");
  const json_value* fields[3] = {};
  static constexpr const char* kFields[3] = {"dtype", "shape", "data_offsets"};
  for (size_t i = 0; i < v.keys.size(); ++i) {
    const auto* f = std::find_if(std::begin(kFields), std::end(kFields),
                                 [&](const char* k) { return v.keys[i] == k; });
    ACTORCH_IO_CHECK(f != std::end(kFields), w, who, "unexpected field ", key_str(v.keys[i]),
                     " (an entry has dtype, shape and data_offsets)");
    fields[f - std::begin(kFields)] = &v.items[i];
  }
  for (size_t i = 0; i < 3; ++i)
    ACTORCH_IO_CHECK(fields[i], w, who, "the field '", kFields[i], "' is missing");
  const json_value &dt = *fields[0], &shape = *fields[1], &offsets = *fields[2];

  entry e;
  e.name = name;
  ACTORCH_IO_CHECK(dt.k == json_value::kind::string, w, who, "dtype is ", kind_name(dt.k),
                   ", not a string");
  const std::optional<dtype> known = dtype_of_code(dt.str);
  ACTORCH_IO_CHECK(known, w, who, "unsupported dtype ", key_str(dt.str),
                   " (actorch reads F32, F64, F16, BF16, I8, U8, I16, I32, I64 and BOOL)");
  e.dt = *known;

  ACTORCH_IO_CHECK(shape.k == json_value::kind::array, w, who, "shape is ", kind_name(shape.k),
                   ", not an array");
  for (const json_value& d : shape.items) {
    ACTORCH_IO_CHECK(d.k == json_value::kind::integer, w, who, "shape holds ", kind_name(d.k),
                     ", not only integers");
    ACTORCH_IO_CHECK(d.integer >= 0, w, who, "negative dimension ", d.integer, " in the shape");
    e.shape.push_back(d.integer);
  }
  const std::optional<uint64_t> nbytes = byte_size(e.shape, e.dt);
  ACTORCH_IO_CHECK(nbytes, w, who, "shape ", shape_str(e.shape), " of ", dt.str,
                   " has more bytes than 64 bits count");

  ACTORCH_IO_CHECK(offsets.k == json_value::kind::array && offsets.items.size() == 2 &&
                       offsets.items[0].k == json_value::kind::integer &&
                       offsets.items[1].k == json_value::kind::integer,
                   w, who, "data_offsets must be an array of two integers [begin, end]");
  const int64_t begin = offsets.items[0].integer, end = offsets.items[1].integer;
  ACTORCH_IO_CHECK(begin >= 0 && end >= 0, w, who, "negative data_offsets [", begin, ", ", end,
                   "]");
  e.begin = uint64_t(begin);
  e.end = uint64_t(end);
  ACTORCH_IO_CHECK(e.begin <= e.end, w, who, "data_offsets ", offsets_str(e.begin, e.end),
                   " end before they begin");
  ACTORCH_IO_CHECK(e.end - e.begin == *nbytes, w, who, "data_offsets ", offsets_str(e.begin, e.end),
                   " span ", e.end - e.begin, " bytes, but shape ", shape_str(e.shape), " of ",
                   dt.str, " needs ", *nbytes);
  ACTORCH_IO_CHECK(e.end <= data_size, w, who, "data_offsets ", offsets_str(e.begin, e.end),
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
      ACTORCH_IO_FAIL(w, "tensors ", key_str(last->name), " (data_offsets ",
                      offsets_str(last->begin, last->end), ") and ", key_str(e->name),
                      " (data_offsets ", offsets_str(e->begin, e->end),
                      ") overlap in the data section");
    ACTORCH_IO_CHECK(e->begin == covered, w, "bytes [", covered, ", ", e->begin,
                     ") of the data section belong to no tensor (the next is ", key_str(e->name),
                     " at data_offsets ", offsets_str(e->begin, e->end), ")");
    covered = e->end;
    last = e;
  }
  ACTORCH_IO_CHECK(covered == data_size, w, data_size - covered,
                   " trailing bytes after the tensors' data: the data section has ", data_size,
                   " bytes but the tensors end at ", covered,
                   " (the header does not describe this file)");
}

// Reading. -----------------------------------------------------------------------------------

/// Moves the checksums out of h.metadata into the entries. See Note [safetensors checksums].
void take_checksums(header& h, const where& w) {
  size_t found = 0;
  for (auto it = h.metadata.lower_bound(std::string(kChecksumPrefix));
       it != h.metadata.end() && it->first.starts_with(kChecksumPrefix);) {
    const std::string name = it->first.substr(kChecksumPrefix.size());
    const auto e =
        std::lower_bound(h.entries.begin(), h.entries.end(), name,
                         [](const entry& a, const std::string& n) { return a.name < n; });
    ACTORCH_IO_CHECK(e != h.entries.end() && e->name == name, w, "__metadata__ holds ",
                     key_str(it->first), ", a checksum for a tensor the file does not have");
    e->crc = from_hex8(it->second);
    ACTORCH_IO_CHECK(e->crc, w, "tensor ", key_str(name), ": its checksum ", key_str(it->second),
                     " in __metadata__ is not 8 lowercase hex digits");
    ++found;
    it = h.metadata.erase(it);
  }
  if (found == 0 || found == h.entries.size())
    return;
  for (const entry& e : h.entries)
    ACTORCH_IO_CHECK(e.crc, w, "tensor ", key_str(e.name), " has no checksum, but ", found,
                     " of the file's ", h.entries.size(),
                     " tensors have one (__metadata__ was edited, or the file is corrupt)");
}

/// Reads and checks the length and the header of a file. See Note [safetensors layout].
header read_header(byte_source& src, const where& w) {
  const uint64_t file_size = src.size();
  ACTORCH_IO_CHECK(file_size >= 8, w, "truncated: the file has only ", file_size,
                   " bytes, too few for the 8-byte header length");
  unsigned char len_bytes[8];
  src.read_at(0, len_bytes, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | len_bytes[i];
  ACTORCH_IO_CHECK(n <= file_size - 8, w, "truncated: the header length is ", n, " bytes but only ",
                   file_size - 8,
                   " follow it (or the first 8 bytes are not a safetensors header length)");
  ACTORCH_IO_CHECK(n <= kMaxHeaderBytes, w, "the header length ", n, " exceeds the ",
                   kMaxHeaderBytes,
                   "-byte limit of the safetensors package (a corrupt length field?)");
  std::string text(size_t(n), '\0');
  src.read_at(8, text.data(), text.size());

  const json_value doc = serialize::parse_json(text, w);
  ACTORCH_IO_CHECK(doc.k == json_value::kind::object, w, "the header is ", kind_name(doc.k),
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
    ACTORCH_IO_CHECK(v.k == json_value::kind::object, w, "__metadata__ is ", kind_name(v.k),
                     ", not an object of strings");
    for (size_t j = 0; j < v.keys.size(); ++j) {
      ACTORCH_IO_CHECK(v.items[j].k == json_value::kind::string, w, "__metadata__ value of ",
                       key_str(v.keys[j]), " is ", kind_name(v.items[j].k), ", not a string");
      h.metadata.emplace(v.keys[j], v.items[j].str);
    }
  }
  std::sort(h.entries.begin(), h.entries.end(),
            [](const entry& a, const entry& b) { return a.name < b.name; });
  check_tiling(h.entries, data_size, w);
  take_checksums(h, w);
  return h;
}

/// The values of `e` as a new contiguous CPU tensor.
tensor read_tensor(byte_source& src, const header& h, const entry& e, const where& w) {
  tensor out = empty(e.shape, {.dtype = e.dt});
  const size_t n = size_t(e.end - e.begin);
  if (n == 0) {
    ACTORCH_IO_CHECK(!e.crc || *e.crc == 0, w, "tensor ", key_str(e.name),
                     ": checksum mismatch: it has no data (crc32 00000000) but the file records ",
                     hex8(*e.crc));
    return out;
  }
  src.read_at(h.data_start + e.begin, out.data_ptr(), n);
  if (e.crc) {
    const uint32_t got = crc32_of(out.data_ptr(), n);
    ACTORCH_IO_CHECK(got == *e.crc, w, "tensor ", key_str(e.name),
                     ": checksum mismatch: its data has crc32 ", hex8(got),
                     " but the file records ", hex8(*e.crc),
                     " (the data was changed or corrupted after it was written)");
  }
  if (e.dt == dtype::bool_) {
    // Checked as bytes, before anything reads them as bool. See Note [safetensors layout].
    const auto* bytes = static_cast<const unsigned char*>(out.data_ptr());
    for (size_t i = 0; i < n; ++i)
      ACTORCH_IO_CHECK(bytes[i] <= 1, w, "tensor ", key_str(e.name), ": bool element ", i,
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
    ACTORCH_IO_CHECK(wanted.emplace(name, &t).second, w, "the target name ", key_str(name),
                     " appears twice");
    ACTORCH_IO_CHECK(t.defined(), w, "target ", key_str(name), " is an undefined tensor");
    ACTORCH_IO_CHECK(t.device().is_cpu(), w, "target ", key_str(name), " is on ", t.device(),
                     "; load_into writes CPU tensors");
    for (int64_t d = 0; d < t.dim(); ++d)
      ACTORCH_IO_CHECK(t.strides()[size_t(d)] != 0 || t.sizes()[size_t(d)] <= 1, w, "target ",
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
  ACTORCH_IO_CHECK(missing.empty() && unexpected.empty(), w, "the keys do not match the targets:",
                   missing.empty() ? "" : " missing from the file: ", missing,
                   missing.empty() || unexpected.empty() ? "" : ";",
                   unexpected.empty() ? "" : " unexpected in the file (strict): ", unexpected);
  ACTORCH_IO_CHECK(mismatched.empty(), w, "shape or dtype mismatch: ", mismatched);

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

void check_utf8(std::string_view s, const char* what, const where& w) {
  const size_t at = invalid_utf8_at(s);
  ACTORCH_IO_CHECK(at == std::string_view::npos, w, what, " ", key_str(s),
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
    ACTORCH_IO_CHECK(i == 0 || p.order[i - 1]->first != name, w, "the tensor name ", key_str(name),
                     " appears twice");
    ACTORCH_IO_CHECK(name != kMetadataKey, w,
                     "a tensor cannot be named '__metadata__': the header reserves that key");
    check_utf8(name, "the tensor name", w);
    ACTORCH_IO_CHECK(t.defined(), w, "tensor ", key_str(name), " is an undefined tensor");
  }
  for (const auto& [key, value] : metadata) {
    check_utf8(key, "the metadata key", w);
    check_utf8(value, "the metadata value", w);
    ACTORCH_IO_CHECK(!key.starts_with(kChecksumPrefix), w, "the metadata key ", key_str(key),
                     " is reserved: actorch stores each tensor's checksum under '", kChecksumPrefix,
                     "<name>'");
  }
  // Note [safetensors checksums]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // One pass over the data for them, before the header is made.
  std::map<std::string, std::string> all = metadata;
  for (const auto* named : p.order) {
    const tensor c = named->second.to(kCPU).contiguous();
    all.emplace(std::string(kChecksumPrefix) + named->first,
                hex8(crc32_of(c.data_ptr(), c.nbytes())));
  }

  // The JSON, compact as serde_json writes it, "__metadata__" first. See Note [safetensors
  // layout].
  std::string json = "{";
  if (!all.empty()) {
    append_json_string(json, kMetadataKey);
    json += ":{";
    for (const auto& [key, value] : all) {
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
  ACTORCH_IO_CHECK(json.size() <= kMaxHeaderBytes, w, "the header of ", tensors.size(),
                   " tensors takes ", json.size(), " bytes, more than the ", kMaxHeaderBytes,
                   " that the safetensors package reads");

  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    p.head += char((n >> (8 * i)) & 0xff);
  p.head += json;
  return p;
}

/// Writes the head, then each tensor's values in C order (copied to the CPU first if needed).
void write_plan(const plan& p, byte_sink& sink) {
  sink.write(p.head.data(), p.head.size());
  for (const auto* named : p.order) {
    const tensor c = named->second.to(kCPU).contiguous();
    if (c.nbytes() > 0)
      sink.write(c.data_ptr(), c.nbytes());
  }
}

} // namespace

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const where w{"save_safetensors", path};
  const plan p = make_plan(tensors, metadata, w); // every check before the file is created
  atomic_file tmp(w, &g_fail_after);
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
  g_fail_after.set(n);
}

} // namespace detail
} // namespace actorch
