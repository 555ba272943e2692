// Tests of core/serialize/npy: round trips of every dtype and layout, files written by numpy
// read by us and ours read by numpy (Debian's python3, ACTORCH_PYTHON), and one test per way a
// file can be wrong, each checking that the message names the file and the problem.
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include "tests/core/files.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "core/ops/factory.hpp"
#include "core/serialize/npy.hpp"

using namespace actorch;
using Catch::Contains;

namespace {

namespace fs = std::filesystem;
using actorch::test::read_file;
using actorch::test::write_file;

const fs::path& tmp_dir() {
  return actorch::test::scratch_dir("npy");
}

std::string tmp_path(const std::string& name) {
  return (tmp_dir() / name).string();
}

// Runs `code` under numpy's python (with `np`, `sys` and the folder `d` defined) and returns
// its exit status: a failed assert there is a non-zero status here.
int run_python(const std::string& name, const std::string& code) {
  return actorch::test::run_python(tmp_dir(), name, "import numpy as np\n" + code);
}

// The values of t in C order, as raw bytes.
std::string bytes_of(const tensor& t) {
  const tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

template <class T> std::vector<T> values_of(const tensor& t) {
  const tensor c = t.contiguous();
  std::vector<T> v(size_t(c.numel()));
  if (!v.empty())
    std::memcpy(v.data(), c.data_ptr(), c.nbytes());
  return v;
}

// 3x4 values of each dtype, extremes included (nan, -0, subnormals, the integer limits).
tensor sample(dtype dt) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const shape_t s{3, 4};
  switch (dt) {
  case dtype::float32:
    return as_tensor(std::vector<float>{-1.5f, 0.0f, 3.25f, 1e-30f, -3.4e38f, inf, -inf, nan,
                                        1e-45f, 7.0f, -0.0f, 0.1f},
                     s);
  case dtype::float64:
    return as_tensor(std::vector<double>{-1.5, 0.0, 3.25, 1e-300, -1.7e308, inf, -inf, nan, 5e-324,
                                         7.0, -0.0, 0.1},
                     s);
  case dtype::float16:
    return as_tensor(std::vector<half>{-1.5f, 0.0f, 3.25f, 65504.0f, -65504.0f, inf, -inf, nan,
                                       5.9604645e-8f, 7.0f, -0.0f, 0.1f},
                     s);
  case dtype::int8:
    return as_tensor(std::vector<int8_t>{-128, 127, 0, -1, 1, 2, 3, 4, 5, 6, 7, 8}, s);
  case dtype::uint8:
    return as_tensor(std::vector<uint8_t>{0, 255, 1, 128, 2, 3, 4, 5, 6, 7, 8, 9}, s);
  case dtype::int16:
    return as_tensor(std::vector<int16_t>{INT16_MIN, INT16_MAX, 0, -1, 1, 2, 3, 4, 5, 6, 7, 8}, s);
  case dtype::int32:
    return as_tensor(std::vector<int32_t>{INT32_MIN, INT32_MAX, 0, -1, 1, 2, 3, 4, 5, 6, 7, 8}, s);
  case dtype::int64:
    return as_tensor(std::vector<int64_t>{INT64_MIN, INT64_MAX, 0, -1, 1, 2, 3, 4, 5, 6, 7, 8}, s);
  case dtype::bool_:
    return as_tensor(std::vector<bool>{true, false, false, true, true, true, false, false, true,
                                       false, true, false},
                     s);
  case dtype::bfloat16: break;
  }
  FAIL("no sample for bfloat16");
  return {};
}

constexpr dtype kNpyDtypes[] = {dtype::float32, dtype::float64, dtype::float16,
                                dtype::int8,    dtype::uint8,   dtype::int16,
                                dtype::int32,   dtype::int64,   dtype::bool_};

void check_round_trip(const tensor& t, const std::string& file) {
  const tensor from_bytes = npy_from_bytes(npy_to_bytes(t), "round trip");
  CHECK(from_bytes.dtype() == t.dtype());
  CHECK(from_bytes.sizes() == t.sizes());
  CHECK(from_bytes.is_contiguous());
  CHECK(bytes_of(from_bytes) == bytes_of(t));

  save_npy(file, t);
  const tensor from_file = load_npy(file);
  CHECK(from_file.dtype() == t.dtype());
  CHECK(from_file.sizes() == t.sizes());
  CHECK(bytes_of(from_file) == bytes_of(t));
  CHECK(read_file(file) == npy_to_bytes(t));
}

// The header length a valid file of ours announces, and where its data starts.
size_t data_offset(const std::string& file_bytes) {
  REQUIRE(file_bytes.size() >= 10);
  REQUIRE(file_bytes[6] == 1);
  return 10 + size_t(uint8_t(file_bytes[8])) + 256 * size_t(uint8_t(file_bytes[9]));
}

// `valid` (a version 1.0 file) with its header dict replaced by `dict`, padded with spaces to
// the same header length, so that the data stays where it was.
std::string with_header(const std::string& valid, const std::string& dict) {
  const size_t start = 10, end = data_offset(valid);
  REQUIRE(dict.size() + 1 <= end - start);
  std::string out = valid;
  std::string header = dict;
  header.resize(end - start - 1, ' ');
  header += '\n';
  out.replace(start, end - start, header);
  return out;
}

} // namespace

TEST_CASE("npy files round-trip every dtype in every layout", "[core][npy]") {
  for (dtype dt : kNpyDtypes) {
    DYNAMIC_SECTION("dtype " << dtype_name(dt)) {
      const tensor s = sample(dt);
      const std::string file =
          tmp_path(std::string("round_trip_") + std::string(dtype_name(dt)) + ".npy");
      SECTION("a 3x4 matrix") {
        check_round_trip(s, file);
      }
      SECTION("a 0-dim tensor at a storage offset") {
        const tensor scalar0 = s.select(0, 1).select(0, 2);
        REQUIRE(scalar0.dim() == 0);
        check_round_trip(scalar0, file);
      }
      SECTION("a 1-D vector") {
        check_round_trip(s.flatten(), file);
      }
      SECTION("an empty (0, 3) tensor") {
        check_round_trip(empty({0, 3}, {.dtype = dt}), file);
      }
      SECTION("an empty 1-D tensor") {
        check_round_trip(empty({0}, {.dtype = dt}), file);
      }
      SECTION("a transposed view") {
        const tensor t = s.t();
        REQUIRE_FALSE(t.is_contiguous());
        check_round_trip(t, file);
      }
      SECTION("a strided slice") {
        const tensor t = s.slice(1, 0, 4, 2);
        REQUIRE_FALSE(t.is_contiguous());
        check_round_trip(t, file);
      }
    }
  }
}

TEST_CASE("save_npy writes numpy's header layout and a non-contiguous tensor in C order",
          "[core][npy]") {
  // [[0, 1, 2], [3, 4, 5]] transposed: C order of the 3x2 view is 0, 3, 1, 4, 2, 5.
  const tensor t = as_tensor(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3}).t();
  const std::string file = tmp_path("layout.npy");
  save_npy(file, t);
  const std::string bytes = read_file(file);
  REQUIRE(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  const size_t offset = data_offset(bytes);
  CHECK(offset % 64 == 0);
  const std::string header = bytes.substr(10, offset - 10);
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }";
  CHECK(header.substr(0, dict.size()) == dict);
  CHECK(header.back() == '\n');
  CHECK(header.find_first_not_of(' ', dict.size()) == header.size() - 1);
  REQUIRE(bytes.size() == offset + 6 * sizeof(float));
  std::vector<float> data(6);
  std::memcpy(data.data(), bytes.data() + offset, bytes.size() - offset);
  CHECK(data == std::vector<float>{0, 3, 1, 4, 2, 5});

  SECTION("shapes are Python tuples") {
    CHECK(npy_to_bytes(scalar_tensor(1.0)).find("'shape': (), }") != std::string::npos);
    CHECK(npy_to_bytes(zeros({5})).find("'shape': (5,), }") != std::string::npos);
    CHECK(npy_to_bytes(zeros({0, 3}, {.dtype = dtype::int8}))
              .find("{'descr': '|i1', 'fortran_order': False, 'shape': (0, 3), }") !=
          std::string::npos);
  }
}

TEST_CASE("a header over 65535 bytes is written as version 2.0", "[core][npy]") {
  // 22000 dims of size 1 spell "(1, 1, ..., 1)": 66000 characters.
  const tensor t = full({1}, 2.5).view(shape_t(22000, 1));
  const std::string bytes = npy_to_bytes(t);
  REQUIRE(bytes.substr(0, 8) == std::string("\x93NUMPY\x02\x00", 8));
  uint32_t header_len = 0;
  for (int i = 3; i >= 0; --i)
    header_len = header_len * 256 + uint8_t(bytes[8 + size_t(i)]);
  CHECK(header_len > 65535);
  CHECK((12 + header_len) % 64 == 0);
  CHECK(bytes.size() == 12 + header_len + sizeof(float));
  const tensor back = npy_from_bytes(bytes, "v2");
  CHECK(back.sizes() == t.sizes());
  CHECK(back.item<float>() == 2.5f);
}

TEST_CASE("load_npy reads files written by numpy", "[core][npy]") {
  REQUIRE(run_python("numpy_writes", R"(
import os
np.save(os.path.join(d, 'np_f4.npy'), np.array([[1.5, -2.25, 3.0], [4.0, 5.5, -6.75]], dtype='<f4'))
np.save(os.path.join(d, 'np_f8.npy'), np.array([0.1, -1e300, 2.0**-1074], dtype='<f8'))
np.save(os.path.join(d, 'np_f2.npy'), np.array([0.5, -2.0, 65504.0, 2.0**-24], dtype='<f2'))
np.save(os.path.join(d, 'np_i1.npy'), np.array([-128, -1, 0, 127], dtype='i1'))
np.save(os.path.join(d, 'np_u1.npy'), np.array([0, 1, 200, 255], dtype='u1'))
np.save(os.path.join(d, 'np_i2.npy'), np.array([-32768, 0, 32767], dtype='<i2'))
np.save(os.path.join(d, 'np_i4.npy'), np.array([-2147483648, 0, 2147483647], dtype='<i4'))
np.save(os.path.join(d, 'np_i8.npy'), np.array([-2**63, 1, 2**63 - 1], dtype='<i8'))
np.save(os.path.join(d, 'np_b1.npy'), np.array([True, False, True]))
np.save(os.path.join(d, 'np_0d.npy'), np.array(3.5, dtype='<f4'))
np.save(os.path.join(d, 'np_empty.npy'), np.zeros((0, 3), dtype='<i8'))
# A non-contiguous numpy array is saved in C order.
np.save(os.path.join(d, 'np_strided.npy'), np.arange(12, dtype='<i4').reshape(3, 4)[:, ::2])
with open(os.path.join(d, 'np_v2.npy'), 'wb') as f:
    np.lib.format.write_array(f, np.arange(6, dtype='<f8').reshape(2, 3), version=(2, 0))
with open(os.path.join(d, 'np_v3.npy'), 'wb') as f:
    np.lib.format.write_array(f, np.arange(4, dtype='<i4'), version=(3, 0))
)") == 0);

  SECTION("float32 matrix") {
    const tensor t = load_npy(tmp_path("np_f4.npy"));
    CHECK(t.dtype() == dtype::float32);
    CHECK(t.sizes() == shape_t{2, 3});
    CHECK(values_of<float>(t) == std::vector<float>{1.5f, -2.25f, 3.0f, 4.0f, 5.5f, -6.75f});
  }
  SECTION("float64") {
    const tensor t = load_npy(tmp_path("np_f8.npy"));
    CHECK(t.dtype() == dtype::float64);
    CHECK(values_of<double>(t) == std::vector<double>{0.1, -1e300, 4.9406564584124654e-324});
  }
  SECTION("float16") {
    const tensor t = load_npy(tmp_path("np_f2.npy"));
    CHECK(t.dtype() == dtype::float16);
    std::vector<float> v;
    for (half h : values_of<half>(t))
      v.push_back(float(h));
    CHECK(v == std::vector<float>{0.5f, -2.0f, 65504.0f, 5.9604644775390625e-8f});
  }
  SECTION("int8 and uint8") {
    const tensor i1 = load_npy(tmp_path("np_i1.npy"));
    CHECK(i1.dtype() == dtype::int8);
    CHECK(values_of<int8_t>(i1) == std::vector<int8_t>{-128, -1, 0, 127});
    const tensor u1 = load_npy(tmp_path("np_u1.npy"));
    CHECK(u1.dtype() == dtype::uint8);
    CHECK(values_of<uint8_t>(u1) == std::vector<uint8_t>{0, 1, 200, 255});
  }
  SECTION("int16 at its limits") {
    const tensor i2 = load_npy(tmp_path("np_i2.npy"));
    CHECK(i2.dtype() == dtype::int16);
    CHECK(values_of<int16_t>(i2) == std::vector<int16_t>{INT16_MIN, 0, INT16_MAX});
  }
  SECTION("int32 and int64 at their limits") {
    const tensor i4 = load_npy(tmp_path("np_i4.npy"));
    CHECK(i4.dtype() == dtype::int32);
    CHECK(values_of<int32_t>(i4) == std::vector<int32_t>{INT32_MIN, 0, INT32_MAX});
    const tensor i8 = load_npy(tmp_path("np_i8.npy"));
    CHECK(i8.dtype() == dtype::int64);
    CHECK(values_of<int64_t>(i8) == std::vector<int64_t>{INT64_MIN, 1, INT64_MAX});
  }
  SECTION("bool") {
    const tensor t = load_npy(tmp_path("np_b1.npy"));
    CHECK(t.dtype() == dtype::bool_);
    CHECK(values_of<uint8_t>(t.view({3}).to(dtype::uint8)) == std::vector<uint8_t>{1, 0, 1});
  }
  SECTION("a 0-dim array") {
    const tensor t = load_npy(tmp_path("np_0d.npy"));
    CHECK(t.dim() == 0);
    CHECK(t.item<float>() == 3.5f);
  }
  SECTION("an empty (0, 3) array") {
    const tensor t = load_npy(tmp_path("np_empty.npy"));
    CHECK(t.dtype() == dtype::int64);
    CHECK(t.sizes() == shape_t{0, 3});
  }
  SECTION("a strided array, which numpy saves in C order") {
    const tensor t = load_npy(tmp_path("np_strided.npy"));
    CHECK(t.sizes() == shape_t{3, 2});
    CHECK(values_of<int32_t>(t) == std::vector<int32_t>{0, 2, 4, 6, 8, 10});
  }
  SECTION("version 2.0") {
    REQUIRE(read_file(tmp_path("np_v2.npy"))[6] == 2);
    const tensor t = load_npy(tmp_path("np_v2.npy"));
    CHECK(t.sizes() == shape_t{2, 3});
    CHECK(values_of<double>(t) == std::vector<double>{0, 1, 2, 3, 4, 5});
  }
  SECTION("version 3.0") {
    REQUIRE(read_file(tmp_path("np_v3.npy"))[6] == 3);
    const tensor t = load_npy(tmp_path("np_v3.npy"));
    CHECK(values_of<int32_t>(t) == std::vector<int32_t>{0, 1, 2, 3});
  }
}

TEST_CASE("numpy reads files written by save_npy", "[core][npy]") {
  for (dtype dt : kNpyDtypes)
    save_npy(tmp_path("ours_" + std::string(dtype_name(dt)) + ".npy"), sample(dt));
  save_npy(tmp_path("ours_0d.npy"), scalar_tensor(-7.25, {.dtype = dtype::float64}));
  save_npy(tmp_path("ours_empty.npy"), empty({0, 3}, {.dtype = dtype::int32}));
  save_npy(tmp_path("ours_transposed.npy"),
           as_tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 5}, {2, 3}).t());

  // numpy compares nan as unequal, so the float arrays compare with equal_nan.
  REQUIRE(run_python("numpy_reads", R"(
import os
def load(name, dtype, shape):
    a = np.load(os.path.join(d, 'ours_' + name + '.npy'))
    assert a.dtype == np.dtype(dtype), (name, a.dtype)
    assert a.shape == shape, (name, a.shape)
    assert a.flags['C_CONTIGUOUS']
    m = np.load(os.path.join(d, 'ours_' + name + '.npy'), mmap_mode='r')
    assert m.offset % 64 == 0, (name, m.offset)
    return a
inf, nan = np.inf, np.nan
f = [-1.5, 0.0, 3.25, 1e-30, -3.4e38, inf, -inf, nan, 1e-45, 7.0, -0.0, 0.1]
assert np.array_equal(load('float32', '<f4', (3, 4)), np.array(f, '<f4').reshape(3, 4), equal_nan=True)
f8 = [-1.5, 0.0, 3.25, 1e-300, -1.7e308, inf, -inf, nan, 5e-324, 7.0, -0.0, 0.1]
assert np.array_equal(load('float64', '<f8', (3, 4)), np.array(f8).reshape(3, 4), equal_nan=True)
f2 = [-1.5, 0.0, 3.25, 65504.0, -65504.0, inf, -inf, nan, 2.0**-24, 7.0, -0.0, 0.1]
assert np.array_equal(load('float16', '<f2', (3, 4)), np.array(f2, '<f2').reshape(3, 4), equal_nan=True)
assert np.signbit(load('float32', '<f4', (3, 4))[2, 2])
assert load('int8', 'i1', (3, 4)).ravel().tolist() == [-128, 127, 0, -1, 1, 2, 3, 4, 5, 6, 7, 8]
assert load('uint8', 'u1', (3, 4)).ravel().tolist() == [0, 255, 1, 128, 2, 3, 4, 5, 6, 7, 8, 9]
assert load('int16', '<i2', (3, 4)).ravel().tolist() == [-2**15, 2**15 - 1, 0, -1, 1, 2, 3, 4, 5, 6, 7, 8]
assert load('int32', '<i4', (3, 4)).ravel().tolist() == [-2**31, 2**31 - 1, 0, -1, 1, 2, 3, 4, 5, 6, 7, 8]
assert load('int64', '<i8', (3, 4)).ravel().tolist() == [-2**63, 2**63 - 1, 0, -1, 1, 2, 3, 4, 5, 6, 7, 8]
assert load('bool', '?', (3, 4)).ravel().tolist() == [True, False, False, True, True, True, False, False, True, False, True, False]
z = load('0d', '<f8', ())
assert z == -7.25
assert load('empty', '<i4', (0, 3)).size == 0
assert load('transposed', '<i8', (3, 2)).tolist() == [[0, 3], [1, 4], [2, 5]]
)") == 0);
}

TEST_CASE("load_npy parses headers written in any key order and spacing", "[core][npy]") {
  const std::string valid = npy_to_bytes(as_tensor(std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  SECTION("keys reordered, double quotes, no trailing comma") {
    const tensor t = npy_from_bytes(
        with_header(valid, R"({"shape": (2,3),"fortran_order":False,  "descr":"<i4"})"), "x");
    CHECK(t.sizes() == shape_t{2, 3});
    CHECK(values_of<int32_t>(t) == std::vector<int32_t>{1, 2, 3, 4, 5, 6});
  }
  SECTION("Python 2 longs and whitespace inside the tuple") {
    const tensor t = npy_from_bytes(
        with_header(valid, "{ 'descr' : '=i4' ,\t'fortran_order' : False , 'shape' : ( 6L , ) , }"),
        "x");
    CHECK(t.sizes() == shape_t{6});
  }
  SECTION("'|' byte order on a multi-byte type") {
    CHECK(npy_from_bytes(with_header(valid, "{'descr': '|i4', 'fortran_order': False, "
                                            "'shape': (3, 2), }"),
                         "x")
              .sizes() == shape_t{3, 2});
  }
}

TEST_CASE("load_npy reports every malformed file with its path and the problem", "[core][npy]") {
  const tensor t = as_tensor(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4});
  const std::string valid = npy_to_bytes(t);
  const std::string file = tmp_path("bad.npy");
  auto load_bytes = [&](const std::string& bytes) {
    write_file(file, bytes);
    return load_npy(file);
  };
  const auto names_file = Contains("load_npy: " + file + ": ");

  SECTION("a missing file") {
    const std::string missing = tmp_path("does_not_exist.npy");
    REQUIRE_THROWS_WITH(load_npy(missing),
                        Contains(missing) && Contains("cannot open the file: No such file"));
  }
  SECTION("a directory") {
    REQUIRE_THROWS_WITH(load_npy(tmp_dir().string()),
                        Contains(tmp_dir().string()) &&
                            Contains(": cannot open the file: Is a directory"));
  }
  SECTION("bad magic") {
    std::string b = valid;
    b[1] = 'P';
    REQUIRE_THROWS_WITH(load_bytes(b),
                        names_file && Contains("not a .npy file") && Contains("'\\x93PUMPY'"));
    REQUIRE_THROWS_WITH(load_bytes("PK\x03\x04 a zip"), names_file && Contains("not a .npy file"));
  }
  SECTION("an empty or cut preamble") {
    REQUIRE_THROWS_WITH(load_bytes(""), names_file && Contains("truncated: the file has only 0 "
                                                               "bytes"));
    REQUIRE_THROWS_WITH(load_bytes(valid.substr(0, 4)), names_file && Contains("only 4 bytes"));
    REQUIRE_THROWS_WITH(load_bytes(valid.substr(0, 9)),
                        names_file && Contains("only 9 bytes, too few for the .npy 1.0 preamble"));
  }
  SECTION("an unsupported version") {
    std::string b = valid;
    b[6] = 4;
    REQUIRE_THROWS_WITH(load_bytes(b), names_file && Contains("unsupported .npy version 4.0"));
    b[6] = 1;
    b[7] = 1;
    REQUIRE_THROWS_WITH(load_bytes(b), names_file && Contains("unsupported .npy version 1.1"));
  }
  SECTION("a truncated header") {
    REQUIRE_THROWS_WITH(load_bytes(valid.substr(0, 30)),
                        names_file && Contains("truncated header: expected 118 header bytes, "
                                               "file has 20"));
  }
  SECTION("truncated data") {
    REQUIRE_THROWS_WITH(load_bytes(valid.substr(0, valid.size() - 5)),
                        names_file && Contains("truncated data: shape (3, 4) of float32 "
                                               "expected 48 bytes, file has 43"));
    REQUIRE_THROWS_WITH(load_bytes(valid.substr(0, data_offset(valid))),
                        names_file && Contains("expected 48 bytes, file has 0"));
  }
  SECTION("trailing bytes after the data are an error") {
    REQUIRE_THROWS_WITH(load_bytes(valid + "garbage"),
                        names_file && Contains("7 trailing bytes after the data") &&
                            Contains("expected 48 bytes, file has 55"));
  }
  SECTION("malformed headers") {
    auto header = [&](const std::string& dict) { return load_bytes(with_header(valid, dict)); };
    REQUIRE_THROWS_WITH(header("not a dict"), names_file && Contains("malformed header") &&
                                                  Contains("expected '{' at offset 0"));
    REQUIRE_THROWS_WITH(header("{'descr': '<f4', 'shape': (3, 4), }"),
                        names_file && Contains("malformed header") &&
                            Contains("the key 'fortran_order' is missing"));
    REQUIRE_THROWS_WITH(header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), "
                               "'extra': 1}"),
                        names_file && Contains("malformed header") &&
                            Contains("unexpected key 'extra'"));
    REQUIRE_THROWS_WITH(header("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                               "'shape': (3, 4)}"),
                        names_file && Contains("malformed header") &&
                            Contains("the key 'descr' appears twice"));
    REQUIRE_THROWS_WITH(header("{'descr': '<f4', 'fortran_order': 0, 'shape': (3, 4)}"),
                        names_file && Contains("malformed header") &&
                            Contains("expected True or False"));
    REQUIRE_THROWS_WITH(header("{'descr' '<f4', 'fortran_order': False, 'shape': (3, 4)}"),
                        names_file && Contains("malformed header") &&
                            Contains("expected ':' at offset 9"));
    REQUIRE_THROWS_WITH(header("{'descr': '<f4"), names_file && Contains("malformed header") &&
                                                      Contains("unterminated string"));
    REQUIRE_THROWS_WITH(header("{'descr': '<f4', 'fortran_order': False, 'shape': [3, 4]}"),
                        names_file && Contains("malformed header") && Contains("expected '('"));
    REQUIRE_THROWS_WITH(header("{'descr': '<f4', 'fortran_order': False, 'shape': (12)}"),
                        names_file && Contains("malformed header") && Contains("not a tuple"));
    REQUIRE_THROWS_WITH(header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, x)}"),
                        names_file && Contains("malformed header") &&
                            Contains("expected an integer in the shape"));
    REQUIRE_THROWS_WITH(header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4)} x"),
                        names_file && Contains("malformed header") &&
                            Contains("unexpected text after the closing '}'"));
    REQUIRE_THROWS_WITH(header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4)"),
                        names_file && Contains("malformed header") && Contains("expected '}'"));
  }
  SECTION("negative and overflowing shapes") {
    auto shape = [&](const std::string& s, const std::string& descr = "<f4") {
      return load_bytes(with_header(valid, "{'descr': '" + descr +
                                               "', 'fortran_order': False, 'shape': " + s + "}"));
    };
    REQUIRE_THROWS_WITH(shape("(-1, 12)"), names_file && Contains("negative dimension -1"));
    REQUIRE_THROWS_WITH(shape("(99999999999999999999,)"),
                        names_file && Contains("dimension 99999999999999999999 in the shape "
                                               "overflows int64"));
    REQUIRE_THROWS_WITH(shape("(4294967296, 4294967296)"),
                        names_file && Contains("shape (4294967296, 4294967296) has more "
                                               "elements than int64 holds"));
    REQUIRE_THROWS_WITH(shape("(2305843009213693952,)", "<f8"),
                        names_file && Contains("needs more bytes than 64 bits count"));
    // A huge but representable shape is caught by the size check, before any allocation.
    REQUIRE_THROWS_WITH(shape("(1000000000000,)"),
                        names_file && Contains("truncated data: shape (1000000000000,) of "
                                               "float32 expected 4000000000000 bytes, file has "
                                               "48"));
  }
  SECTION("unsupported dtypes") {
    auto descr = [&](const std::string& d) {
      return load_bytes(
          with_header(valid, "{'descr': " + d + ", 'fortran_order': False, 'shape': (3, 4)}"));
    };
    REQUIRE_THROWS_WITH(descr("'<u2'"), names_file && Contains("unsupported dtype descr '<u2'"));
    REQUIRE_THROWS_WITH(descr("'<c8'"), names_file && Contains("unsupported dtype descr '<c8'"));
    REQUIRE_THROWS_WITH(descr("'|O'"), names_file && Contains("unsupported dtype descr '|O'"));
    REQUIRE_THROWS_WITH(descr("[('a', '<f4')]"),
                        names_file && Contains("structured dtypes") && Contains("not supported"));
    REQUIRE_THROWS_WITH(descr("'>f4'"), names_file && Contains("big-endian data (descr '>f4') "
                                                               "is not supported"));
  }
  SECTION("bool bytes other than 0 and 1") {
    std::string b = npy_to_bytes(as_tensor(std::vector<bool>{true, false, true}));
    b[b.size() - 2] = 2;
    REQUIRE_THROWS_WITH(load_bytes(b), names_file && Contains("bool element 1 of 3 holds the "
                                                              "byte 2"));
  }
  SECTION("npy_from_bytes names its source in the same way") {
    REQUIRE_THROWS_WITH(npy_from_bytes(valid.substr(0, valid.size() - 1), "weights[3]"),
                        Contains("npy_from_bytes: weights[3]: truncated data"));
  }
}

TEST_CASE("load_npy rejects numpy's Fortran-order and big-endian files, saying so", "[core][npy]") {
  REQUIRE(run_python("numpy_unsupported", R"(
import os
np.save(os.path.join(d, 'np_fortran.npy'), np.asfortranarray(np.arange(6, dtype='<f4').reshape(2, 3)))
np.save(os.path.join(d, 'np_big_endian.npy'), np.arange(3, dtype='>i4'))
np.save(os.path.join(d, 'np_uint16.npy'), np.arange(3, dtype='<u2'))
)") == 0);
  const std::string fortran = tmp_path("np_fortran.npy");
  REQUIRE_THROWS_WITH(load_npy(fortran), Contains(fortran) &&
                                             Contains("Fortran-order data (fortran_order: True) is "
                                                      "not supported") &&
                                             Contains("shape (2, 3)"));
  const std::string big = tmp_path("np_big_endian.npy");
  REQUIRE_THROWS_WITH(load_npy(big), Contains(big) && Contains("big-endian data (descr '>i4') "
                                                               "is not supported"));
  const std::string u2 = tmp_path("np_uint16.npy");
  REQUIRE_THROWS_WITH(load_npy(u2), Contains(u2) && Contains("unsupported dtype descr '<u2'"));
}

TEST_CASE("save_npy replaces its target atomically and reports failures with the path",
          "[core][npy]") {
  const std::string file = tmp_path("atomic.npy");
  auto temporaries = [&] {
    int n = 0;
    for (const auto& entry : fs::directory_iterator(tmp_dir()))
      n += entry.path().filename().string().starts_with("atomic.npy.tmp.");
    return n;
  };
  save_npy(file, zeros({2}));
  save_npy(file, ones({3}));
  CHECK(load_npy(file).sizes() == shape_t{3});
  CHECK(temporaries() == 0);

  SECTION("bfloat16 has no numpy dtype and leaves the old file alone") {
    REQUIRE_THROWS_WITH(save_npy(file, zeros({2}, {.dtype = dtype::bfloat16})),
                        Contains("save_npy: " + file + ": bfloat16 has no numpy dtype"));
    CHECK(read_file(file) == npy_to_bytes(ones({3})));
    CHECK(temporaries() == 0);
    REQUIRE_THROWS_WITH(npy_to_bytes(zeros({2}, {.dtype = dtype::bfloat16})),
                        Contains("bfloat16 has no numpy dtype"));
  }
  SECTION("an undefined tensor") {
    REQUIRE_THROWS_WITH(save_npy(file, tensor()),
                        Contains("save_npy: " + file + ": cannot save an undefined tensor"));
    CHECK(read_file(file) == npy_to_bytes(ones({3})));
  }
  SECTION("a missing directory") {
    const std::string missing = tmp_path("no_such_dir/x.npy");
    REQUIRE_THROWS_WITH(save_npy(missing, ones({3})),
                        Contains("save_npy: " + missing + ": cannot create the temporary file") &&
                            Contains("No such file or directory"));
  }
  SECTION("a directory in the way of the rename") {
    const std::string dir = tmp_path("a_directory.npy");
    fs::create_directories(dir);
    REQUIRE_THROWS_WITH(save_npy(dir, ones({3})),
                        Contains("save_npy: " + dir + ": renaming") && Contains("failed"));
    int left = 0;
    for (const auto& entry : fs::directory_iterator(tmp_dir()))
      left += entry.path().filename().string().starts_with("a_directory.npy.tmp.");
    CHECK(left == 0);
  }
}
