// Tests of core/serialize/safetensors: round trips of every dtype, the exact bytes of a small
// file, files exchanged with an independent writer and reader in Python (Debian has no
// python3-safetensors, so the script implements the format itself with numpy; bfloat16 is
// the upper half of a float32, rounded to nearest even, computed there on the bits),
// atomic saves failing at every byte, every way a file can be corrupt, and load_into's checks
// and its guarantee that a failed load writes no target.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/core/files.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "core/nn/layers.hpp"
#include "core/ops/factory.hpp"
#include "core/optim/sgd.hpp"
#include "core/serialize/checkpoint.hpp"
#include "core/serialize/file_io.hpp"
#include "core/serialize/safetensors.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using Catch::Contains;
using named_tensors = std::vector<std::pair<std::string, tensor>>;

namespace {

namespace fs = std::filesystem;
using actorch::test::read_file;
using actorch::test::write_file;

const fs::path& tmp_dir() {
  return actorch::test::scratch_dir("safetensors");
}

std::string tmp_path(const std::string& name) {
  return (tmp_dir() / name).string();
}

/// Temporary files a save of `target` left behind.
int tmp_files_of(const std::string& target) {
  const std::string prefix = fs::path(target).filename().string() + ".tmp.";
  int n = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(target).parent_path()))
    n += entry.path().filename().string().starts_with(prefix);
  return n;
}

// Runs `code` under Debian's python3 (with numpy), with `d` the test folder, and returns
// its exit status: a failed assert there is a non-zero status here.
int run_python(const std::string& name, const std::string& code) {
  return actorch::test::run_python(tmp_dir(), name, code);
}

std::string bytes_of(const tensor& t) {
  const tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

/// The 8 bytes of a header length field: n as a little-endian uint64.
std::string length_field(uint64_t n) {
  std::string out;
  for (int i = 0; i < 8; ++i)
    out += char((n >> (8 * i)) & 0xff);
  return out;
}

/// A file of the given header text and data section, the length field computed here.
std::string make_file(const std::string& header, const std::string& data) {
  return length_field(header.size()) + header + data;
}

/// 2x3 values of each dtype, extremes included.
tensor sample(dtype dt) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const shape_t s{2, 3};
  switch (dt) {
  case dtype::float32:
    return as_tensor(std::vector<float>{-1.5f, 0.0f, inf, nan, 1e-45f, -0.0f}, s);
  case dtype::float64:
    return as_tensor(std::vector<double>{0.1, -1.7e308, -inf, nan, 5e-324, 7.0}, s);
  case dtype::float16:
    return as_tensor(std::vector<half>{-1.5f, 65504.0f, inf, nan, 5.9604645e-8f, 0.1f}, s);
  case dtype::bfloat16:
    return as_tensor(std::vector<bfloat16>{-1.5f, 3.0e38f, -inf, nan, 1e-40f, 0.1f}, s);
  case dtype::int8: return as_tensor(std::vector<int8_t>{-128, 127, 0, -1, 1, 2}, s);
  case dtype::uint8: return as_tensor(std::vector<uint8_t>{0, 255, 1, 128, 2, 3}, s);
  case dtype::int16: return as_tensor(std::vector<int16_t>{INT16_MIN, INT16_MAX, 0, -1, 1, 2}, s);
  case dtype::int32: return as_tensor(std::vector<int32_t>{INT32_MIN, INT32_MAX, 0, -1, 1, 2}, s);
  case dtype::int64: return as_tensor(std::vector<int64_t>{INT64_MIN, INT64_MAX, 0, -1, 1, 2}, s);
  case dtype::bool_: return as_tensor(std::vector<bool>{true, false, false, true, true, false}, s);
  }
  FAIL("no sample");
  return {};
}

constexpr dtype kAllDtypes[] = {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16,
                                dtype::int8,    dtype::uint8,   dtype::int32,   dtype::int64,
                                dtype::bool_,   dtype::int16};

void check_same(const safetensors_file& got, const named_tensors& sorted_expected,
                const std::map<std::string, std::string>& metadata) {
  REQUIRE(got.tensors.size() == sorted_expected.size());
  for (size_t i = 0; i < got.tensors.size(); ++i) {
    const auto& [name, t] = got.tensors[i];
    INFO("tensor " << sorted_expected[i].first);
    CHECK(name == sorted_expected[i].first);
    CHECK(t.dtype() == sorted_expected[i].second.dtype());
    CHECK(t.sizes() == sorted_expected[i].second.sizes());
    CHECK(t.is_contiguous());
    CHECK(bytes_of(t) == bytes_of(sorted_expected[i].second));
  }
  CHECK(got.metadata == metadata);
}

/// Loading `bytes` in memory throws with the name "case" and every one of `parts`.
void require_rejected(const std::string& bytes, const std::string& part) {
  REQUIRE_THROWS_WITH(safetensors_from_bytes(bytes, "case"),
                      Contains("safetensors_from_bytes: case: ") && Contains(part));
}

} // namespace

TEST_CASE("safetensors round-trips every dtype, 0-dim and empty tensors, and metadata",
          "[core][safetensors]") {
  for (dtype dt : kAllDtypes) {
    DYNAMIC_SECTION("dtype " << dtype_name(dt)) {
      const tensor s = sample(dt);
      const tensor t = s.t(); // non-contiguous: written in C order
      REQUIRE_FALSE(t.is_contiguous());
      const named_tensors tensors = {{"matrix", s},
                                     {"empty_0x3", empty({0, 3}, {.dtype = dt})},
                                     {"transposed", t},
                                     {"empty_1d", empty({0}, {.dtype = dt})},
                                     {"scalar", s.select(0, 1).select(0, 2)}};
      const named_tensors sorted = {tensors[1], tensors[3], tensors[0], tensors[4], tensors[2]};
      REQUIRE(tensors[4].second.dim() == 0);
      const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                           {"dtype", std::string(dtype_name(dt))}};

      check_same(safetensors_from_bytes(safetensors_to_bytes(tensors, metadata), "x"), sorted,
                 metadata);
      const std::string file = tmp_path("round_trip_" + std::string(dtype_name(dt)) + ".st");
      save_safetensors(file, tensors, metadata);
      check_same(load_safetensors(file), sorted, metadata);
      CHECK(read_file(file) == safetensors_to_bytes(tensors, metadata));
    }
  }
  SECTION("no tensors, with and without metadata") {
    CHECK(safetensors_to_bytes({}) == make_file("{}      ", ""));
    const safetensors_file none = safetensors_from_bytes(safetensors_to_bytes({}), "x");
    CHECK(none.tensors.empty());
    CHECK(none.metadata.empty());
    const std::map<std::string, std::string> metadata = {{"only", "metadata"}};
    CHECK(safetensors_from_bytes(safetensors_to_bytes({}, metadata), "x").metadata == metadata);
  }
  SECTION("names and metadata with quotes, backslashes, control characters and non-ASCII") {
    const std::string odd = "q\"b\\s/\n\t\x01\x7f \xc3\xb1\xe2\x82\xac\xf0\x9f\x98\x80";
    const named_tensors tensors = {{odd, full({2}, 3.0)}, {"", full({1}, 4.0)}};
    const std::map<std::string, std::string> metadata = {{odd, odd}, {"empty", ""}, {"", "x"}};
    check_same(safetensors_from_bytes(safetensors_to_bytes(tensors, metadata), "x"),
               {tensors[1], tensors[0]}, metadata);
  }
}

TEST_CASE("a flipped byte in a tensor's data is an error naming the file and the tensor",
          "[core][safetensors]") {
  // See Note [safetensors checksums] in core/serialize/safetensors.cpp.
  const named_tensors tensors = {{"bias", full({3}, 0.5)},
                                 {"weight", arange(12, {.dtype = dtype::float32}).view({3, 4})},
                                 {"empty", empty({0})}};
  const std::string file = tmp_path("checksummed.safetensors");
  save_safetensors(file, tensors, {{"epoch", "3"}});
  const std::string good = read_file(file);
  // The checksums are the file's own: the metadata a user reads back is what they saved.
  CHECK(load_safetensors(file).metadata == std::map<std::string, std::string>{{"epoch", "3"}});

  // Every byte of the data section, flipped in one bit, is caught on load and on load_into.
  const size_t data_start = good.size() - 15 * 4; // bias (3) then weight (12) floats
  REQUIRE(good.substr(data_start, 4) == std::string("\0\0\0\x3f", 4));
  for (size_t pos = data_start; pos < good.size(); ++pos) {
    std::string bad = good;
    bad[pos] = char(uint8_t(bad[pos]) ^ (1u << (pos % 8)));
    const std::string name = pos < data_start + 12 ? "bias" : "weight";
    INFO("byte " << pos);
    write_file(file, bad);
    REQUIRE_THROWS_WITH(load_safetensors(file),
                        Contains("load_safetensors: " + file + ": tensor '" + name +
                                 "': checksum mismatch: its data has crc32 ") &&
                            Contains("after it was written"));
    tensor bias = zeros({3}), weight = zeros({3, 4}), empty_target = empty({0});
    REQUIRE_THROWS_WITH(
        load_into(file, {{"bias", bias}, {"weight", weight}, {"empty", empty_target}}),
        Contains("load_into: " + file + ": tensor '" + name + "': checksum mismatch"));
    REQUIRE(bias.sum().item<double>() == 0); // no target written
    REQUIRE(weight.sum().item<double>() == 0);
  }

  SECTION("files without checksums load as before; edited checksums are refused") {
    // A file written elsewhere (or by an earlier actorch): the same tensors, no checksum keys.
    const std::string header_of_good = good.substr(8, good.size() - 8 - 15 * 4);
    auto with_metadata = [&](const std::string& metadata) {
      std::string json = R"({"__metadata__":{)" + metadata + "}," +
                         R"("bias":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)" +
                         R"("empty":{"dtype":"F32","shape":[0],"data_offsets":[12,12]},)" +
                         R"("weight":{"dtype":"F32","shape":[3,4],"data_offsets":[12,60]}})";
      std::string len(8, '\0');
      for (size_t i = 0; i < 8; ++i)
        len[i] = char((json.size() >> (8 * i)) & 0xff);
      return len + json + good.substr(good.size() - 60);
    };
    const safetensors_file plain = safetensors_from_bytes(with_metadata(R"("epoch":"3")"), "x");
    CHECK(plain.metadata.at("epoch") == "3");
    CHECK(plain.tensors.size() == 3);
    const std::string crc_bias = header_of_good.substr(header_of_good.find("crc32.bias") + 13, 8);
    const std::string crc_weight =
        header_of_good.substr(header_of_good.find("crc32.weight") + 15, 8);
    REQUIRE(crc_bias.size() == 8);
    const std::string all = R"("actorch.crc32.bias":")" + crc_bias +
                            R"(","actorch.crc32.empty":"00000000","actorch.crc32.weight":")" +
                            crc_weight + R"(")";
    CHECK(safetensors_from_bytes(with_metadata(all), "x").tensors.size() == 3);
    require_rejected(with_metadata(R"("actorch.crc32.bias":")" + crc_bias + R"(")"),
                     "tensor 'empty' has no checksum, but 1 of the file's 3 tensors have one");
    require_rejected(with_metadata(all + R"(,"actorch.crc32.gone":"00000000")"),
                     "__metadata__ holds 'actorch.crc32.gone', a checksum for a tensor the file "
                     "does not have");
    require_rejected(
        with_metadata(R"("actorch.crc32.bias":"XYZ",)" + all.substr(all.find(',') + 1)),
        "tensor 'bias': its checksum 'XYZ' in __metadata__ is not 8 lowercase hex "
        "digits");
    require_rejected(
        with_metadata(R"("actorch.crc32.bias":"00000001",)" + all.substr(all.find(',') + 1)),
        "tensor 'bias': checksum mismatch: its data has crc32 " + crc_bias +
            " but the file records 00000001");
  }
  SECTION("a save refuses metadata under the checksums' prefix") {
    REQUIRE_THROWS_WITH(save_safetensors(file, tensors, {{"actorch.crc32.bias", "0"}}),
                        Contains("save_safetensors: " + file +
                                 ": the metadata key 'actorch.crc32.bias' is reserved"));
  }
}

TEST_CASE("save_safetensors writes the header byte for byte as the Python package lays it out",
          "[core][safetensors]") {
  // Given out of order: "b" is written after "a". 1.5f is 0x3fc00000; -2 is 0xfffffffe. The
  // checksums (Note [safetensors checksums]) are zlib.crc32 of each tensor's bytes, from Python.
  const named_tensors tensors = {{"b", as_tensor(std::vector<int32_t>{1, -2})},
                                 {"a", scalar_tensor(1.5, {.dtype = dtype::float32})}};
  const std::string json = R"({"__metadata__":{"actorch.crc32.a":"5cd8256f",)"
                           R"("actorch.crc32.b":"cf8f9871","format":"pt"},)"
                           R"("a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}})";
  REQUIRE(json.size() == 196); // + 4 spaces = 200 = 0xc8, a multiple of 8
  const std::string expected = std::string("\xc8\0\0\0\0\0\0\0", 8) + json + "    " +
                               std::string("\x00\x00\xc0\x3f", 4) +
                               std::string("\x01\x00\x00\x00\xfe\xff\xff\xff", 8);
  CHECK(safetensors_to_bytes(tensors, {{"format", "pt"}}) == expected);
  const std::string file = tmp_path("exact.safetensors");
  save_safetensors(file, tensors, {{"format", "pt"}});
  CHECK(read_file(file) == expected);

  SECTION("the header is padded with spaces to a multiple of 8 bytes for every name length") {
    for (size_t len = 1; len <= 16; ++len) {
      const std::string bytes = safetensors_to_bytes({{std::string(len, 'n'), zeros({1})}});
      uint64_t n = 0;
      for (int i = 7; i >= 0; --i)
        n = n * 256 + uint8_t(bytes[size_t(i)]);
      CHECK(n % 8 == 0);
      CHECK(bytes.size() == 8 + n + 4);
      const std::string header = bytes.substr(8, n);
      const size_t close = header.rfind('}');
      CHECK(n - close - 1 < 8);
      CHECK(header.find_first_not_of(' ', close + 1) == std::string::npos);
    }
  }
  SECTION("a transposed tensor's data is in C order") {
    // [[0, 1, 2], [3, 4, 5]] transposed: C order of the 3x2 view is 0, 3, 1, 4, 2, 5.
    const tensor t = as_tensor(std::vector<int8_t>{0, 1, 2, 3, 4, 5}, {2, 3}).t();
    const std::string bytes = safetensors_to_bytes({{"t", t}});
    CHECK(bytes.substr(bytes.size() - 6) == std::string("\0\3\1\4\2\5", 6));
  }
}

TEST_CASE("load_safetensors reads files from an independent Python writer", "[core][safetensors]") {
  // The writer follows the format with json, struct and numpy: keys in reverse order,
  // Python's spaced separators, \u escapes (a surrogate pair for the emoji), and in the
  // second file shuffled fields, no padding and no metadata.
  REQUIRE(run_python("python_writes", R"(
import json, os, struct
import numpy as np

def write(path, tensors, metadata=None, pad=True, shuffle=False):
    header, data = {}, b''
    if metadata is not None:
        header['__metadata__'] = metadata
    for name, code, shape, raw in tensors:
        entry = {'dtype': code, 'shape': list(shape), 'data_offsets': [len(data), len(data) + len(raw)]}
        if shuffle:
            entry = {'data_offsets': entry['data_offsets'], 'shape': entry['shape'], 'dtype': code}
        header[name] = entry
        data += raw
    h = json.dumps(header, ensure_ascii=True).encode('utf-8')
    if pad:
        h += b' ' * ((8 - len(h) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h + data)

def arr(values, dtype, shape):
    return np.array(values, dtype=dtype).reshape(shape).tobytes()

# bfloat16 is the upper half of a float32; these values have nothing in the lower half.
bits = np.array([1.0, -2.5, 3.140625, 0.0078125], '<f4').view('<u4')
assert not (bits & 0xFFFF).any()
bf16 = (bits >> 16).astype('<u2').tobytes()
tensors = [
    ('z.f32', 'F32', (2, 3), arr([1.5, -2.25, 3.0, 4.0, 5.5, -6.75], '<f4', (2, 3))),
    ('y.f64', 'F64', (3,), arr([0.1, -1e300, 2.0**-1074], '<f8', (3,))),
    ('x.f16', 'F16', (2, 2), arr([0.5, -2.0, 65504.0, 2.0**-24], '<f2', (2, 2))),
    ('w.bf16', 'BF16', (4,), bf16),
    ('v.i8', 'I8', (4,), arr([-128, -1, 0, 127], '<i1', (4,))),
    ('u.u8', 'U8', (4,), arr([0, 1, 200, 255], '<u1', (4,))),
    ('t.i32', 'I32', (3,), arr([-2**31, 0, 2**31 - 1], '<i4', (3,))),
    ('s.i64', 'I64', (3,), arr([-2**63, 1, 2**63 - 1], '<i8', (3,))),
    ('r.bool', 'BOOL', (3,), arr([True, False, True], '?', (3,))),
    ('q.scalar', 'F32', (), arr(3.5, '<f4', ())),
    ('p.empty', 'I64', (0, 3), b''),
    ('emb.\U0001F600\u00e9', 'F32', (1,), arr([9.0], '<f4', (1,))),
]
write(os.path.join(d, 'py_all.safetensors'), tensors, {'format': 'pt', 'note': 'tab\there \u00e9 "q"'})
write(os.path.join(d, 'py_plain.safetensors'), tensors[:2], pad=False, shuffle=True)
)") == 0);

  const safetensors_file f = load_safetensors(tmp_path("py_all.safetensors"));
  CHECK(f.metadata ==
        std::map<std::string, std::string>{{"format", "pt"}, {"note", "tab\there \xc3\xa9 \"q\""}});
  std::map<std::string, tensor> by_name(f.tensors.begin(), f.tensors.end());
  REQUIRE(f.tensors.size() == 12);
  CHECK(f.tensors.front().first == "emb.\xf0\x9f\x98\x80\xc3\xa9"); // sorted by name
  CHECK(f.tensors.back().first == "z.f32");
  using test::ints_of;
  using test::values_of;
  auto check = [&](const std::string& name, dtype dt, const shape_t& shape) {
    INFO(name);
    REQUIRE(by_name.count(name));
    CHECK(by_name[name].dtype() == dt);
    CHECK(by_name[name].sizes() == shape);
    return by_name[name];
  };
  CHECK(values_of(check("z.f32", dtype::float32, {2, 3})) ==
        std::vector<double>{1.5, -2.25, 3.0, 4.0, 5.5, -6.75});
  CHECK(values_of(check("y.f64", dtype::float64, {3})) ==
        std::vector<double>{0.1, -1e300, 4.9406564584124654e-324});
  CHECK(values_of(check("x.f16", dtype::float16, {2, 2})) ==
        std::vector<double>{0.5, -2.0, 65504.0, 5.9604644775390625e-8});
  CHECK(values_of(check("w.bf16", dtype::bfloat16, {4})) ==
        std::vector<double>{1.0, -2.5, 3.140625, 0.0078125});
  CHECK(ints_of(check("v.i8", dtype::int8, {4})) == std::vector<int64_t>{-128, -1, 0, 127});
  CHECK(ints_of(check("u.u8", dtype::uint8, {4})) == std::vector<int64_t>{0, 1, 200, 255});
  CHECK(ints_of(check("t.i32", dtype::int32, {3})) ==
        std::vector<int64_t>{INT32_MIN, 0, INT32_MAX});
  CHECK(ints_of(check("s.i64", dtype::int64, {3})) ==
        std::vector<int64_t>{INT64_MIN, 1, INT64_MAX});
  CHECK(ints_of(check("r.bool", dtype::bool_, {3})) == std::vector<int64_t>{1, 0, 1});
  CHECK(check("q.scalar", dtype::float32, {}).item<float>() == 3.5f);
  CHECK(check("p.empty", dtype::int64, {0, 3}).numel() == 0);
  CHECK(values_of(check("emb.\xf0\x9f\x98\x80\xc3\xa9", dtype::float32, {1})) ==
        std::vector<double>{9.0});

  const safetensors_file plain = load_safetensors(tmp_path("py_plain.safetensors"));
  REQUIRE(plain.tensors.size() == 2);
  CHECK(plain.metadata.empty());
  CHECK(plain.tensors[0].first == "y.f64");
  CHECK(values_of(plain.tensors[1].second) ==
        std::vector<double>{1.5, -2.25, 3.0, 4.0, 5.5, -6.75});
}

TEST_CASE("an independent Python reader reads files written by save_safetensors",
          "[core][safetensors]") {
  named_tensors tensors;
  for (dtype dt : kAllDtypes)
    tensors.emplace_back(std::string("t.") + std::string(dtype_name(dt)), sample(dt));
  tensors.emplace_back("scalar", scalar_tensor(-7.25, {.dtype = dtype::float64}));
  tensors.emplace_back("empty", empty({0, 3}, {.dtype = dtype::int32}));
  tensors.emplace_back("transposed", as_tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 5}, {2, 3}).t());
  tensors.emplace_back("emb.\xf0\x9f\x98\x80", full({1}, 9.0));
  save_safetensors(tmp_path("ours.safetensors"), tensors,
                   {{"format", "pt"}, {"note", "q\"\\\n\xc3\xa9"}});

  // The reader checks the layout too: compact JSON, metadata first, names sorted, fields in
  // the package's order, spaces up to a multiple of 8, data tiled in name order.
  REQUIRE(run_python("python_reads", R"(
import json, math, os, struct, zlib
import numpy as np
raw = open(os.path.join(d, 'ours.safetensors'), 'rb').read()
(n,) = struct.unpack('<Q', raw[:8])
assert n % 8 == 0, n
text = raw[8:8 + n]
assert len(text.rstrip(b' ')) > n - 8
h = json.loads(text.decode('utf-8'))
assert text.rstrip(b' ') == json.dumps(h, separators=(',', ':'), ensure_ascii=False).encode('utf-8'), text
assert list(h)[0] == '__metadata__'
meta = h.pop('__metadata__')
crcs = {k[len('actorch.crc32.'):]: v for k, v in meta.items() if k.startswith('actorch.crc32.')}
assert {k: v for k, v in meta.items() if not k.startswith('actorch.crc32.')} == {'format': 'pt', 'note': 'q"\\\n\u00e9'}
names = list(h)
assert names == sorted(names, key=lambda s: s.encode('utf-8')), names
for v in h.values():
    assert list(v) == ['dtype', 'shape', 'data_offsets'], v
data = raw[8 + n:]
end = 0
for name in names:
    b, e = h[name]['data_offsets']
    assert b == end, (name, b, end)
    end = e
assert end == len(data), (end, len(data))
assert sorted(crcs) == sorted(names), (crcs, names)
for name in names:
    b, e = h[name]['data_offsets']
    assert crcs[name] == '%08x' % zlib.crc32(data[b:e]), (name, crcs[name])

def get(name, code, shape):
    v = h[name]
    assert v['dtype'] == code, (name, v)
    assert tuple(v['shape']) == shape, (name, v)
    b, e = v['data_offsets']
    return data[b:e]

def arr(name, code, dt, shape):
    return np.frombuffer(get(name, code, shape), dtype=dt).reshape(shape)

inf, nan = math.inf, math.nan
def same(a, b):
    a = [float(x) for x in np.asarray(a).ravel()]
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))

assert same(arr('t.float32', 'F32', '<f4', (2, 3)), [-1.5, 0.0, inf, nan, float(np.float32(1e-45)), -0.0])
assert math.copysign(1, arr('t.float32', 'F32', '<f4', (2, 3))[1, 2]) == -1
assert same(arr('t.float64', 'F64', '<f8', (2, 3)), [0.1, -1.7e308, -inf, nan, 5e-324, 7.0])
assert same(arr('t.float16', 'F16', '<f2', (2, 3)), [-1.5, 65504.0, inf, nan, 2.0**-24, float(np.float16(0.1))])
# A bfloat16 is the upper half of a float32. Converting a float32 rounds its lower half to
# nearest, ties to even (carrying into the exponent, up to infinity); a NaN stays a NaN.
def to_bfloat16(values):
    f = np.array(values, '<f4')
    u = f.view('<u4').astype(np.uint64)
    r = np.where(np.isnan(f), (u >> 16) | 0x40, (u + 0x7FFF + ((u >> 16) & 1)) >> 16)
    return (r.astype('<u4') << 16).view('<f4')
def from_bfloat16(half):
    return (half.astype('<u4') << 16).view('<f4')
assert to_bfloat16([1 + 2**-8, 1 + 3 * 2**-8, 3.4e38]).tolist() == [1.0, 1 + 2**-6, math.inf]
bf = from_bfloat16(arr('t.bfloat16', 'BF16', '<u2', (2, 3)).ravel())
want = to_bfloat16([-1.5, 3.0e38, -inf, nan, 1e-40, 0.1])
assert same(bf, want.tolist()), (bf, want)
assert arr('t.int8', 'I8', '<i1', (2, 3)).ravel().tolist() == [-128, 127, 0, -1, 1, 2]
assert arr('t.uint8', 'U8', '<u1', (2, 3)).ravel().tolist() == [0, 255, 1, 128, 2, 3]
assert arr('t.int32', 'I32', '<i4', (2, 3)).ravel().tolist() == [-2**31, 2**31 - 1, 0, -1, 1, 2]
assert arr('t.int64', 'I64', '<i8', (2, 3)).ravel().tolist() == [-2**63, 2**63 - 1, 0, -1, 1, 2]
assert arr('t.bool', 'BOOL', '?', (2, 3)).ravel().tolist() == [True, False, False, True, True, False]
assert arr('scalar', 'F64', '<f8', ()) == -7.25
assert get('empty', 'I32', (0, 3)) == b''
assert arr('transposed', 'I64', '<i8', (3, 2)).tolist() == [[0, 3], [1, 4], [2, 5]]
assert arr('emb.\U0001F600', 'F32', '<f4', (1,)).tolist() == [9.0]
)") == 0);
}

TEST_CASE("a save removes the temporary files that killed processes of this host left",
          "[core][safetensors]") {
  // See Note [Temporary files of dead processes] in core/serialize/file_io.cpp. A child process
  // is SIGKILLed while its save's temporary file is open and half written.
  const std::string file = tmp_path("killed.safetensors");
  save_safetensors(file, {{"w", full({4}, 1.0)}});
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready[0]);
    const serialize::where w{"save_safetensors", file};
    serialize::atomic_file half(w);
    half.write("half a checkpoint", 17);
    (void)!::write(ready[1], "x", 1);
    for (;;)
      ::pause(); // killed here, between the write and the rename
  }
  ::close(ready[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  REQUIRE(::kill(child, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(tmp_files_of(file) == 1); // what the killed save left
  const std::string left = [&] {
    for (const auto& entry : fs::directory_iterator(tmp_dir()))
      if (entry.path().filename().string().starts_with("killed.safetensors.tmp."))
        return entry.path().string();
    return std::string();
  }();
  CHECK(left.find("." + std::to_string(child) + ".") != std::string::npos);

  // Temporaries that must stay: a live process's (pid 1, and this one's), another host's.
  // <file>.tmp.<host>.<pid>.<n>: the same host, other pids.
  const size_t host_begin = file.size() + 5, host_end = left.rfind('.', left.rfind('.') - 1);
  const std::string live = file + ".tmp." + left.substr(host_begin, host_end - host_begin);
  write_file(live + ".1.7", "init's");
  write_file(live + "." + std::to_string(::getpid()) + ".99", "ours");
  write_file(file + ".tmp.elsewhere." + std::to_string(child) + ".0", "another host's");
  write_file(file + ".tmp.not-a-temporary", "a name we did not write");
  save_safetensors(file, {{"w", full({4}, 2.0)}});
  CHECK_FALSE(fs::exists(left));
  CHECK(fs::exists(live + ".1.7"));
  CHECK(fs::exists(live + "." + std::to_string(::getpid()) + ".99"));
  CHECK(fs::exists(file + ".tmp.elsewhere." + std::to_string(child) + ".0"));
  CHECK(fs::exists(file + ".tmp.not-a-temporary"));
  CHECK(load_safetensors(file).tensors.at(0).second.sum().item<double>() == 8);
  for (const auto& entry : fs::directory_iterator(tmp_dir()))
    if (entry.path().filename().string().starts_with("killed.safetensors.tmp."))
      fs::remove(entry.path());
}

TEST_CASE("save_safetensors leaves the previous file intact when a save fails at any point",
          "[core][safetensors]") {
  const std::string file = tmp_path("atomic.safetensors");
  save_safetensors(file, {{"old", full({2}, 1.0)}}, {{"version", "old"}});
  const std::string old_bytes = read_file(file);
  const named_tensors next = {{"a", full({3}, 2.0)},
                              {"b", full({2, 2}, 3, {.dtype = dtype::int8})}};
  const std::string new_bytes = safetensors_to_bytes(next, {{"version", "new"}});

  struct hook_off {
    ~hook_off() { detail::set_safetensors_fail_after_bytes(-1); }
  } guard;
  SECTION("a failure after every number of bytes written, up to just before the rename") {
    for (size_t n = 0; n <= new_bytes.size(); ++n) {
      INFO("failing after " << n << " bytes");
      detail::set_safetensors_fail_after_bytes(int64_t(n));
      REQUIRE_THROWS_WITH(save_safetensors(file, next, {{"version", "new"}}),
                          Contains("save_safetensors: " + file +
                                   ": injected failure after writing " + std::to_string(n) +
                                   " bytes"));
      detail::set_safetensors_fail_after_bytes(-1);
      REQUIRE(read_file(file) == old_bytes);
      REQUIRE(load_safetensors(file).metadata.at("version") == "old");
      REQUIRE(tmp_files_of(file) == 0);
    }
    // Past the end the hook does not fire: the save completes.
    detail::set_safetensors_fail_after_bytes(int64_t(new_bytes.size()) + 1);
    save_safetensors(file, next, {{"version", "new"}});
    detail::set_safetensors_fail_after_bytes(-1);
    CHECK(read_file(file) == new_bytes);
    CHECK(tmp_files_of(file) == 0);
  }
  SECTION("a failed rename: the target is a non-empty directory") {
    const std::string dir = tmp_path("a_directory.safetensors");
    fs::create_directories(fs::path(dir) / "inside");
    REQUIRE_THROWS_WITH(save_safetensors(dir, next),
                        Contains("save_safetensors: " + dir + ": renaming") &&
                            Contains("over the target failed"));
    CHECK(fs::is_directory(fs::path(dir) / "inside"));
    CHECK(tmp_files_of(dir) == 0);
  }
  SECTION("a folder that does not exist") {
    const std::string missing = tmp_path("no_such_dir/x.safetensors");
    REQUIRE_THROWS_WITH(save_safetensors(missing, next),
                        Contains(missing) && Contains("cannot create the temporary file"));
  }
  SECTION("a rejected save creates no file at all") {
    REQUIRE_THROWS_WITH(
        save_safetensors(file, {{"a", zeros({1})}, {"a", zeros({2})}}),
        Contains("save_safetensors: " + file + ": the tensor name 'a' appears twice"));
    CHECK(read_file(file) == old_bytes);
    CHECK(tmp_files_of(file) == 0);
  }
}

TEST_CASE("save_safetensors rejects duplicate, reserved and non-UTF-8 names and undefined tensors",
          "[core][safetensors]") {
  const auto in_memory = Contains("safetensors_to_bytes: (in memory): ");
  REQUIRE_THROWS_WITH(
      safetensors_to_bytes({{"w", zeros({1})}, {"b", zeros({1})}, {"w", ones({1})}}),
      in_memory && Contains("the tensor name 'w' appears twice"));
  REQUIRE_THROWS_WITH(safetensors_to_bytes({{"__metadata__", zeros({1})}}),
                      in_memory && Contains("cannot be named '__metadata__'"));
  REQUIRE_THROWS_WITH(safetensors_to_bytes({{"bad\xff", zeros({1})}}),
                      in_memory && Contains("the tensor name 'bad\\xff' is not valid UTF-8"));
  REQUIRE_THROWS_WITH(safetensors_to_bytes({{"surrogate\xed\xa0\x80", zeros({1})}}),
                      in_memory && Contains("is not valid UTF-8 (at byte 9)"));
  REQUIRE_THROWS_WITH(safetensors_to_bytes({}, {{"k", "overlong\xc0\xaf"}}),
                      in_memory && Contains("the metadata value") && Contains("not valid UTF-8"));
  REQUIRE_THROWS_WITH(safetensors_to_bytes({{"u", tensor()}}),
                      in_memory && Contains("tensor 'u' is an undefined tensor"));
}

TEST_CASE("load_safetensors reports a file truncated at every byte as truncated",
          "[core][safetensors]") {
  const std::string valid =
      safetensors_to_bytes({{"a", full({2}, 1.5)},
                            {"m", as_tensor(std::vector<bool>{true, false, true})},
                            {"z", empty({0}, {.dtype = dtype::int64})}},
                           {{"k", "v"}});
  REQUIRE_NOTHROW(safetensors_from_bytes(valid, "case"));
  const std::string file = tmp_path("truncated.safetensors");
  for (size_t len = 0; len < valid.size(); ++len) {
    INFO("cut to " << len << " of " << valid.size() << " bytes");
    require_rejected(valid.substr(0, len), "truncated");
    write_file(file, valid.substr(0, len));
    REQUIRE_THROWS_WITH(load_safetensors(file),
                        Contains("load_safetensors: " + file + ": ") && Contains("truncated"));
  }
  SECTION("the messages say what is missing") {
    require_rejected(valid.substr(0, 5), "truncated: the file has only 5 bytes, too few for the "
                                         "8-byte header length");
    require_rejected(valid.substr(0, 20), "truncated: the header length is");
    require_rejected(valid.substr(0, valid.size() - 1),
                     "tensor 'm': data_offsets [8, 11] reach past the end of the data section, "
                     "which has 10 bytes");
  }
}

TEST_CASE("load_safetensors answers every corrupted header byte with an error or a valid file",
          "[core][safetensors]") {
  const std::string valid = safetensors_to_bytes(
      {{"a", full({2}, 1.5)}, {"b", as_tensor(std::vector<int32_t>{1, 2, 3})}}, {{"k", "v"}});
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = n * 256 + uint8_t(valid[size_t(i)]);
  size_t errors = 0, loads = 0;
  for (size_t pos = 0; pos < 8 + n; ++pos) {
    for (const unsigned replacement :
         {0x01u, 0x80u, 0xffu, unsigned('"'), unsigned('}'), unsigned('9'), unsigned(' '),
          unsigned('\\'), unsigned(','), unsigned('[')}) {
      std::string bytes = valid;
      bytes[pos] = char(pos < 8 ? uint8_t(bytes[pos]) ^ replacement : replacement);
      if (bytes == valid)
        continue;
      try {
        (void)safetensors_from_bytes(bytes, "flipped");
        ++loads; // e.g. a changed letter of a name, or a space for a space
      } catch (const actorch::error& e) {
        ++errors;
        INFO("byte " << pos << " set to " << int(replacement));
        REQUIRE_THAT(e.what(), Contains("safetensors_from_bytes: flipped: "));
      } catch (const std::exception& e) {
        FAIL("byte " << pos << ": not an actorch::error: " << e.what());
      }
    }
  }
  CHECK(errors > 10 * loads);
}

TEST_CASE("load_safetensors rejects malformed JSON, naming the problem and where it is",
          "[core][safetensors]") {
  const std::string data("\0\0\xc0\x3f", 4); // one float32, 1.5
  const std::string entry = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  auto bad = [&](const std::string& header, const std::string& message) {
    INFO(header);
    require_rejected(make_file(header, data), message);
  };
  bad("", "malformed header JSON: the header ends where a value was expected at byte 0");
  bad("   ", "the header ends where a value was expected at byte 3");
  bad("[]", "the header is an array, not a JSON object");
  bad("7", "the header is an integer, not a JSON object");
  bad(R"({"a":)" + entry, "the header ends where ',' or '}' was expected");
  bad(R"({"a":)" + entry + ",}", "expected a string key but found '}'");
  bad(R"({'a':)" + entry + "}", "expected a string key but found ''' at byte 1");
  bad(R"({"a")" + entry + "}", "expected ':' but found '{'");
  bad(R"({"a":)" + entry + " x", "expected ',' or '}' but found 'x'");
  bad(R"({"a":)" + entry + "} x", "unexpected text after the JSON value at byte");
  bad(R"({"a":)" + entry + "}}", "unexpected text after the JSON value");
  bad(R"({"a":{"dtype":"F32","shape":[1 1],"data_offsets":[0,4]}})",
      "expected ',' or ']' but found '1'");
  bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})",
      "only integers are used in safetensors headers");
  bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4e0]}})", "not fractions or exponents");
  bad(R"({"a":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}})", "leading zeros");
  bad(R"({"a":{"dtype":"F32","shape":[-],"data_offsets":[0,4]}})", "expected a digit after '-'");
  bad(R"({"a":{"dtype":"F32","shape":[+1],"data_offsets":[0,4]}})",
      "expected a value but found '+'");
  bad(R"({"a":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,4]}})",
      "the integer does not fit in 64 bits");
  bad(R"({"a":{"dtype":"F32","shape":[true],"data_offsets":[0,4]}})",
      "true is not used in safetensors headers");
  bad(R"({"__metadata__":null,"a":)" + entry + "}", "null is not used in safetensors headers");
  bad(R"({"a":)" + entry + R"(,"a":)" + entry + "}", "duplicate key 'a' at byte 54");
  bad(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      "duplicate key 'dtype'");
  bad(R"({"a\q":)" + entry + "}", "invalid escape '\\q'");
  bad(R"({"a\u12G4":)" + entry + "}", "a \\u escape needs 4 hex digits");
  bad(R"({"a\u12)", "the header ends inside a \\u escape");
  bad(R"({"\ud83d":)" + entry + "}", "unpaired high surrogate");
  bad(R"({"\ud83d\u0041":)" + entry + "}", "unpaired high surrogate");
  bad(R"({"\ude00":)" + entry + "}", "unpaired low surrogate");
  bad("{\"a\nb\":" + entry + "}", "raw control character \\x0a in a string");
  bad("{\"a\xff\":" + entry + "}", "invalid UTF-8 in a string at byte 3");
  bad("{\"a\xc3\":" + entry + "}", "invalid UTF-8 in a string");
  bad("{\"\xe0\x80\x80\":" + entry + "}", "invalid UTF-8"); // overlong
  bad(R"({"a)", "unterminated string at byte 1");
  bad(std::string(20, '[') + std::string(20, ']'), "values nested deeper than 16 levels");

  SECTION("the messages show the header around the problem") {
    require_rejected(make_file(R"({"a":)" + entry + " x", data), "(near '");
  }
  SECTION("whitespace of every JSON kind and escapes are accepted") {
    const std::string header = " {\t\"\\u0061\\n\\\"\\/\\ud83d\\ude00\" :\r\n{ \"shape\" : [ 1 ] , "
                               "\"data_offsets\":[ 0 ,4 ],\"dtype\":\"F32\" } , "
                               "\"__metadata__\" : { \"k\\u00e9\" : \"\\t\\b\\f\\r\\\\\" } }\n";
    const safetensors_file f = safetensors_from_bytes(make_file(header, data), "ok");
    REQUIRE(f.tensors.size() == 1);
    CHECK(f.tensors[0].first == "a\n\"/\xf0\x9f\x98\x80");
    CHECK(f.tensors[0].second.item<float>() == 1.5f);
    CHECK(f.metadata == std::map<std::string, std::string>{{"k\xc3\xa9", "\t\b\f\r\\"}});
  }
}

TEST_CASE("load_safetensors rejects headers that do not describe the data", "[core][safetensors]") {
  const std::string eight(8, '\0');
  auto bad = [&](const std::string& header, const std::string& data, const std::string& message) {
    INFO(header);
    require_rejected(make_file(header, data), message);
  };
  auto one = [](const std::string& fields) { return R"({"a":{)" + fields + "}}"; };
  SECTION("entries") {
    bad(R"({"a":[1]})", eight, "tensor 'a': its header entry is an array, not an object");
    bad(one(R"("dtype":"F32","shape":[2])"), eight,
        "tensor 'a': the field 'data_offsets' is missing");
    bad(one(R"("dtype":"F32","data_offsets":[0,8])"), eight,
        "tensor 'a': the field 'shape' is missing");
    bad(one(R"("shape":[2],"data_offsets":[0,8])"), eight,
        "tensor 'a': the field 'dtype' is missing");
    bad(one(R"("dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1)"), eight,
        "tensor 'a': unexpected field 'extra'");
    bad(one(R"("dtype":32,"shape":[2],"data_offsets":[0,8])"), eight,
        "tensor 'a': dtype is an integer, not a string");
    bad(one(R"("dtype":"F32","shape":2,"data_offsets":[0,8])"), eight,
        "tensor 'a': shape is an integer, not an array");
    bad(one(R"("dtype":"F32","shape":["2"],"data_offsets":[0,8])"), eight,
        "tensor 'a': shape holds a string, not only integers");
    bad(one(R"("dtype":"F32","shape":[-2],"data_offsets":[0,8])"), eight,
        "tensor 'a': negative dimension -2 in the shape");
    bad(one(R"("dtype":"F32","shape":[2],"data_offsets":[0,8,8])"), eight,
        "tensor 'a': data_offsets must be an array of two integers [begin, end]");
    bad(one(R"("dtype":"F32","shape":[2],"data_offsets":{"b":0})"), eight,
        "data_offsets must be an array of two integers");
    bad(one(R"("dtype":"F32","shape":[2],"data_offsets":[-8,0])"), eight,
        "tensor 'a': negative data_offsets [-8, 0]");
    bad(one(R"("dtype":"U16","shape":[4],"data_offsets":[0,8])"), eight,
        "tensor 'a': unsupported dtype 'U16' (actorch reads F32, F64, F16, BF16, I8, U8, I16, I32, "
        "I64 and BOOL)");
    bad(one(R"("dtype":"f32","shape":[2],"data_offsets":[0,8])"), eight, "unsupported dtype 'f32'");
    bad(one(R"("dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8])"), eight,
        "tensor 'a': shape [4294967296, 4294967296] of F32 has more bytes than 64 bits count");
    bad(one(R"("dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0])"), "",
        "has more bytes than 64 bits count");
  }
  SECTION("offsets against the shape and the data section") {
    bad(one(R"("dtype":"F32","shape":[2],"data_offsets":[8,0])"), eight,
        "tensor 'a': data_offsets [8, 0] end before they begin");
    bad(one(R"("dtype":"F32","shape":[3],"data_offsets":[0,8])"), eight,
        "tensor 'a': data_offsets [0, 8] span 8 bytes, but shape [3] of F32 needs 12");
    bad(one(R"("dtype":"F64","shape":[2],"data_offsets":[0,8])"), eight,
        "span 8 bytes, but shape [2] of F64 needs 16");
    bad(one(R"("dtype":"F32","shape":[2],"data_offsets":[8,16])"), eight,
        "tensor 'a': data_offsets [8, 16] reach past the end of the data section, which has 8 "
        "bytes");
    bad(one(R"("dtype":"F32","shape":[2],"data_offsets":[0,8])"), eight + "xy",
        "2 trailing bytes after the tensors' data: the data section has 10 bytes but the tensors "
        "end at 8");
    bad("{}", "x", "1 trailing bytes after the tensors' data");
    bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
        eight, "tensors 'a' (data_offsets [0, 4]) and 'b' (data_offsets [2, 6]) overlap");
    bad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
        eight, "tensors 'a' (data_offsets [0, 8]) and 'b' (data_offsets [4, 4]) overlap");
    bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
        eight, "overlap in the data section");
    bad(one(R"("dtype":"F32","shape":[1],"data_offsets":[4,8])"), eight,
        "bytes [0, 4) of the data section belong to no tensor (the next is 'a' at data_offsets "
        "[4, 8])");
  }
  SECTION("metadata and bools") {
    bad(R"({"__metadata__":[]})", "", "__metadata__ is an array, not an object of strings");
    bad(R"({"__metadata__":{"epoch":3}})", "",
        "__metadata__ value of 'epoch' is an integer, not a string");
    bad(R"({"__metadata__":{"a":"x","nested":{}}})", "",
        "__metadata__ value of 'nested' is an object, not a string");
    bad(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\1\0\2", 3),
        "tensor 'm': bool element 2 holds the byte 2; bools must be 0 or 1");
  }
  SECTION("zero-size tensors may share an offset and the header needs no padding") {
    const safetensors_file f = safetensors_from_bytes(
        make_file(R"({"e":{"dtype":"I64","shape":[0],"data_offsets":[0,0]},)"
                  R"("f":{"dtype":"BOOL","shape":[2,0],"data_offsets":[0,0]},)"
                  R"("g":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                  "\x05"),
        "ok");
    REQUIRE(f.tensors.size() == 3);
    CHECK(f.tensors[1].second.sizes() == shape_t{2, 0});
    CHECK(test::ints_of(f.tensors[2].second) == std::vector<int64_t>{5});
  }
  SECTION("a header length past the Python package's 100 MB limit") {
    // A sparse file, so that the length field is not also a truncation.
    const std::string file = tmp_path("huge_header.safetensors");
    write_file(file, length_field(100'000'001));
    fs::resize_file(file, 8 + 100'000'001);
    REQUIRE_THROWS_WITH(load_safetensors(file), Contains("load_safetensors: " + file +
                                                         ": the header length 100000001 "
                                                         "exceeds the 100000000-byte limit"));
    fs::remove(file);
  }
  SECTION("files that are not regular files or do not exist") {
    const std::string missing = tmp_path("does_not_exist.safetensors");
    REQUIRE_THROWS_WITH(load_safetensors(missing), Contains("load_safetensors: " + missing +
                                                            ": cannot open the file: No such"));
    REQUIRE_THROWS_WITH(load_safetensors(tmp_dir().string()),
                        Contains(tmp_dir().string()) &&
                            Contains(": cannot open the file: Is a directory"));
    // A FIFO is refused at once, not waited on for a writer (nor /dev/null read as empty).
    const test::unwritten_fifo fifo(tmp_path("a_fifo.safetensors"));
    REQUIRE_THROWS_WITH(load_safetensors(fifo.path()),
                        Contains(fifo.path() + ": cannot open the file: not a regular file (a pipe "
                                               "or device cannot be loaded)"));
    CHECK_FALSE(fifo.waited_on());
    REQUIRE_THROWS_WITH(load_safetensors("/dev/null"),
                        Contains("/dev/null: cannot open the file: not a regular file"));
    const std::string under_a_file = tmp_path("a_file.safetensors") + "/inside.safetensors";
    write_file(tmp_path("a_file.safetensors"), "not a directory");
    REQUIRE_THROWS_WITH(load_safetensors(under_a_file),
                        Contains(under_a_file + ": cannot open the file: Not a directory"));
  }
}

TEST_CASE("load_into copies a checkpoint into its targets by name, through views",
          "[core][safetensors]") {
  const tensor w = as_tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  const tensor b = as_tensor(std::vector<float>{-1, -2, -3});
  const tensor steps = scalar_tensor(int64_t(42));
  const std::string file = tmp_path("checkpoint.safetensors");
  save_safetensors(file, {{"w", w}, {"b", b}, {"steps", steps}});

  // The targets are views: w of a transposed buffer, b of every other element of another.
  const tensor w_buffer = zeros({3, 2});
  const tensor b_buffer = zeros({6});
  const tensor steps_target = scalar_tensor(int64_t(0));
  const named_tensors targets = {
      {"w", w_buffer.t()}, {"b", b_buffer.slice(0, 0, 6, 2)}, {"steps", steps_target}};
  load_into(file, targets);
  CHECK(test::values_of(w_buffer) == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(test::values_of(b_buffer) == std::vector<double>{-1, 0, -2, 0, -3, 0});
  CHECK(steps_target.item<int64_t>() == 42);

  SECTION("not strict: keys of the file that no target wants are skipped") {
    const tensor b_only = zeros({3});
    load_into(file, {{"b", b_only}}, /*strict=*/false);
    CHECK(test::values_of(b_only) == std::vector<double>{-1, -2, -3});
  }
  SECTION("from memory") {
    const tensor b_only = zeros({3});
    load_into_from_bytes(read_file(file), "mem", {{"b", b_only}}, false);
    CHECK(test::values_of(b_only) == std::vector<double>{-1, -2, -3});
  }
}

TEST_CASE("load_into reports missing, unexpected and mismatched keys and then writes no target",
          "[core][safetensors]") {
  const std::string file = tmp_path("state.safetensors");
  save_safetensors(file, {{"a", full({2}, 1.0)},
                          {"b", full({2, 3}, 2.0)},
                          {"c", full({3}, 3, {.dtype = dtype::int64})}});
  const std::string in_file = "load_into: " + file + ": ";

  // Targets filled with 7: after every failed load_into they must still hold only 7s.
  const tensor a = full({2}, 7.0), b = full({2, 3}, 7.0), c = full({3}, 7, {.dtype = dtype::int64});
  auto untouched = [&] {
    for (const tensor& t : {a, b, c})
      for (double v : test::values_of(t))
        if (v != 7)
          return false;
    return true;
  };

  SECTION("a key the file lacks") {
    const tensor d = full({1}, 7.0);
    REQUIRE_THROWS_WITH(load_into(file, {{"a", a}, {"b", b}, {"c", c}, {"d", d}}),
                        Contains(in_file + "the keys do not match the targets: missing from the "
                                           "file: 'd'"));
    CHECK(test::values_of(d) == std::vector<double>{7});
  }
  SECTION("keys no target wants, when strict") {
    REQUIRE_THROWS_WITH(load_into(file, {{"a", a}}),
                        Contains(in_file + "the keys do not match the targets: unexpected in the "
                                           "file (strict): 'b', 'c'"));
  }
  SECTION("both at once") {
    const tensor d = full({1}, 7.0);
    REQUIRE_THROWS_WITH(load_into(file, {{"d", d}, {"b", b}}),
                        Contains("missing from the file: 'd'; unexpected in the file (strict): "
                                 "'a', 'c'"));
    CHECK(test::values_of(d) == std::vector<double>{7});
  }
  SECTION("a shape that differs") {
    const tensor b_wrong = full({3, 2}, 7.0);
    REQUIRE_THROWS_WITH(load_into(file, {{"a", a}, {"b", b_wrong}, {"c", c}}),
                        Contains(in_file + "shape or dtype mismatch: 'b' expected shape [3, 2] of "
                                           "float32 but the file has shape [2, 3] of float32"));
    CHECK(test::values_of(b_wrong) == std::vector<double>(6, 7.0));
  }
  SECTION("a dtype that differs, reported with every other mismatch") {
    const tensor b_wrong = full({2, 3}, 7.0, {.dtype = dtype::float64});
    const tensor c_wrong = full({3}, 7, {.dtype = dtype::int32});
    REQUIRE_THROWS_WITH(
        load_into(file, {{"a", a}, {"b", b_wrong}, {"c", c_wrong}}),
        Contains("'b' expected shape [2, 3] of float64 but the file has shape [2, 3] of float32; "
                 "'c' expected shape [3] of int32 but the file has shape [3] of int64"));
  }
  SECTION("targets named twice, undefined or broadcast") {
    REQUIRE_THROWS_WITH(load_into(file, {{"a", a}, {"b", b}, {"a", full({2}, 0.0)}}),
                        Contains(in_file + "the target name 'a' appears twice"));
    REQUIRE_THROWS_WITH(load_into(file, {{"a", a}, {"b", tensor()}, {"c", c}}),
                        Contains("target 'b' is an undefined tensor"));
    REQUIRE_THROWS_WITH(
        load_into(file, {{"a", a}, {"b", full({1, 3}, 0.0).expand({2, 3})}, {"c", c}}),
        Contains("target 'b' has a broadcast (stride 0) dim 0"));
  }
  SECTION("a corrupt value found only while reading the data") {
    // The header is fine, "z" sorts last and its bool bytes are invalid, which its checksum
    // finds first: a, b and c would all have been written by a loader that copies as it reads.
    std::string bytes = safetensors_to_bytes({{"a", full({2}, 1.0)},
                                              {"b", full({2, 3}, 2.0)},
                                              {"c", full({3}, 3, {.dtype = dtype::int64})},
                                              {"z", as_tensor(std::vector<bool>{true, false})}});
    bytes.back() = '\x03';
    const tensor z = as_tensor(std::vector<bool>{false, false});
    REQUIRE_THROWS_WITH(
        load_into_from_bytes(bytes, "corrupt", {{"a", a}, {"b", b}, {"c", c}, {"z", z}}),
        Contains("load_into_from_bytes: corrupt: tensor 'z': checksum mismatch"));
    CHECK(test::ints_of(z) == std::vector<int64_t>{0, 0});
  }
  SECTION("a corrupt file") {
    std::string bytes = read_file(file);
    bytes.resize(bytes.size() - 1);
    const std::string cut = tmp_path("state_cut.safetensors");
    write_file(cut, bytes);
    REQUIRE_THROWS_WITH(load_into(cut, {{"a", a}, {"b", b}, {"c", c}}),
                        Contains("load_into: " + cut + ": tensor 'c'") && Contains("truncated"));
  }
  CHECK(untouched());
}

TEST_CASE("load_into writes parameters that require grad", "[core][safetensors]") {
  actorch::tensor w = actorch::zeros({2}).requires_grad_();
  const std::string bytes = actorch::safetensors_to_bytes({{"w", actorch::ones({2})}});
  actorch::load_into_from_bytes(bytes, "mem", {{"w", w}});
  CHECK(w.sum().item<double>() == 2);
  CHECK(w.requires_grad());
}

TEST_CASE("load_checkpoint takes a model state saved through DDP (module. keys) into the bare "
          "model",
          "[core][safetensors][checkpoint]") {
  generator g(4);
  nn::sequential saved{std::make_shared<nn::linear>(3, 2, true, &g)};
  optim::sgd opt(saved.parameters(), {.lr = 0.1});
  const std::string path = tmp_path("ddp_checkpoint.st");
  save_checkpoint(path, saved, opt, {{"epoch", "3"}});
  // The same file with every model key as DDP's state_dict names it.
  named_tensors renamed;
  for (auto& [k, t] : load_safetensors(path).tensors)
    renamed.emplace_back(k.rfind("model.", 0) == 0 ? "model.module." + k.substr(6) : k, t);
  save_safetensors(path, renamed, load_safetensors(path).metadata);

  nn::sequential fresh{std::make_shared<nn::linear>(3, 2)};
  optim::sgd fresh_opt(fresh.parameters(), {.lr = 0.1});
  CHECK(load_checkpoint(path, fresh, fresh_opt).at("epoch") == "3");
  CHECK(test::values_of(fresh.state_dict()[0].second) ==
        test::values_of(saved.state_dict()[0].second));
}
