// Tests of core/data datasets: TensorDataset, ConcatDataset, ChainDataset, Subset,
// random_split, npy_dataset and digits_dataset, and the sample type they return.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "core/data/dataset.hpp"
#include "core/data/digits_dataset.hpp"
#include "core/data/npy_dataset.hpp"
#include "core/ops/factory.hpp"
#include "core/serialize/npy.hpp"
#include "tests/core/files.hpp"
#include "tests/core/memory.hpp"
#include "tests/core/values.hpp"

using namespace actorch;
using namespace actorch::data;
using actorch::test::ints_of;
using Catch::Contains;

namespace {
dataset_ptr range_dataset(int64_t n, int64_t start = 0) {
  return std::make_shared<tensor_dataset>(std::vector<tensor>{arange(start, start + n)});
}

class counting_iterable : public iterable_dataset {
public:
  counting_iterable(int64_t from, int64_t to) : from_(from), to_(to) {}
  std::unique_ptr<sample_iterator> iter() const override {
    struct it : sample_iterator {
      int64_t i, end;
      std::optional<sample> next() override {
        if (i >= end)
          return std::nullopt;
        return sample(i++);
      }
    };
    auto p = std::make_unique<it>();
    p->i = from_;
    p->end = to_;
    return p;
  }

private:
  int64_t from_, to_;
};
} // namespace

TEST_CASE("sample holds nested tuples and dicts and names the kind on a wrong access",
          "[data][sample]") {
  sample s = sample::make_tuple({tensor_of({1, 2}), 3, 2.5, "a", true,
                                 sample::make_dict({{"k", 1}, {"t", sample::make_tuple({4})}})});
  CHECK(s.size() == 6);
  CHECK(s[1].as_int() == 3);
  CHECK(s[2].as_double() == 2.5);
  CHECK(s[3].as_string() == "a");
  CHECK(s[4].as_bool());
  CHECK(s[5]["t"][0].as_int() == 4);
  CHECK(s.str() == "(tensor([1, 2]), 3, 2.5, 'a', True, {'k': 1, 't': (4,)})");
  CHECK_THROWS_WITH(s[1].as_string(), Contains("expected a str but the sample holds a int"));
  CHECK_THROWS_WITH(s[5]["missing"], Contains("key 'missing' not in the dict"));
  CHECK_THROWS_WITH(s[9], Contains("tuple index 9 out of range"));
  CHECK(equal(s, s));
  CHECK_FALSE(equal(s[0], sample(tensor_of({1, 3}))));
}

TEST_CASE("TensorDataset returns a tuple of rows and checks sizes", "[data][dataset]") {
  tensor x = arange(12).view({4, 3});
  tensor y = arange(4);
  tensor_dataset ds({x, y});
  CHECK(ds.size() == 4);
  sample s = ds.get(2);
  CHECK(ints_of(s[0].as_tensor()) == std::vector<int64_t>{6, 7, 8});
  CHECK(s[1].as_tensor().item<int64_t>() == 2);
  CHECK_THROWS_WITH(ds.get(4), Contains("index 4 out of range for a dataset of 4"));
  CHECK_THROWS_WITH(tensor_dataset({x, arange(5)}), Contains("size mismatch"));
}

TEST_CASE("ConcatDataset maps indices across its parts, negative ones from the end",
          "[data][dataset]") {
  concat_dataset ds({range_dataset(3, 0), range_dataset(2, 10), range_dataset(4, 20)});
  CHECK(ds.size() == 9);
  CHECK(ds.cumulative_sizes() == std::vector<int64_t>{3, 5, 9});
  std::vector<int64_t> got;
  for (int64_t i = 0; i < ds.size(); ++i)
    got.push_back(ds.get(i)[0].as_tensor().item<int64_t>());
  CHECK(got == std::vector<int64_t>{0, 1, 2, 10, 11, 20, 21, 22, 23});
  CHECK(ds.get(-1)[0].as_tensor().item<int64_t>() == 23);
  CHECK_THROWS_WITH(ds.get(-10), Contains("should not exceed dataset length 9"));
  CHECK_THROWS_WITH(ds.get(9), Contains("out of range"));
}

TEST_CASE("ChainDataset streams its datasets one after another", "[data][dataset]") {
  chain_dataset ds({std::make_shared<counting_iterable>(0, 3),
                    std::make_shared<counting_iterable>(7, 7),
                    std::make_shared<counting_iterable>(10, 12)});
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<int64_t> got;
    auto it = ds.iter();
    while (auto s = it->next())
      got.push_back(s->as_int());
    CHECK(got == std::vector<int64_t>{0, 1, 2, 10, 11});
  }
}

TEST_CASE("Subset and random_split partition a dataset reproducibly", "[data][dataset]") {
  auto base = range_dataset(10);
  subset sub(base, {7, 2, 5});
  CHECK(sub.size() == 3);
  CHECK(sub.get(1)[0].as_tensor().item<int64_t>() == 2);
  CHECK_THROWS_WITH(subset(base, {3, 10}), Contains("index 10 out of range"));

  generator g1(42), g2(42);
  auto a = random_split(base, std::vector<int64_t>{3, 7}, g1);
  auto b = random_split(base, std::vector<int64_t>{3, 7}, g2);
  REQUIRE(a.size() == 2);
  CHECK(a[0]->size() == 3);
  CHECK(a[1]->size() == 7);
  CHECK(a[0]->indices() == b[0]->indices()); // same generator state, same split
  std::set<int64_t> all(a[0]->indices().begin(), a[0]->indices().end());
  all.insert(a[1]->indices().begin(), a[1]->indices().end());
  CHECK(all.size() == 10); // a partition: every index exactly once

  generator g3(1);
  auto f = random_split(base, std::vector<double>{0.25, 0.25, 0.5}, g3);
  // floor gives 2, 2, 5; the remaining 1 goes to the first piece.
  CHECK(f[0]->size() == 3);
  CHECK(f[1]->size() == 2);
  CHECK(f[2]->size() == 5);
  CHECK_THROWS_WITH(random_split(base, std::vector<int64_t>{3, 3}, g3),
                    Contains("does not equal the length of the input dataset (10)"));
}

TEST_CASE("npy_dataset reads rows of .npy files saved side by side", "[data][dataset]") {
  const std::string dir = ACTORCH_TEST_TMP;
  save_npy(dir + "/data_x.npy", arange(12, {.dtype = dtype::float32}).view({6, 2}));
  save_npy(dir + "/data_y.npy", arange(6));
  save_npy(dir + "/data_bad.npy", arange(5));
  npy_dataset ds({dir + "/data_x.npy", dir + "/data_y.npy"});
  CHECK(ds.size() == 6);
  sample s = ds.get(4);
  CHECK(ints_of(s[0].as_tensor()) == std::vector<int64_t>{8, 9});
  CHECK(s[1].as_tensor().item<int64_t>() == 4);
  CHECK_THROWS_WITH(npy_dataset({dir + "/data_x.npy", dir + "/data_bad.npy"}),
                    Contains("data_bad.npy has 5 rows"));
}

TEST_CASE("digits_dataset parses the gzipped digits CSV", "[data][dataset]") {
  digits_dataset ds(std::string(ACTORCH_SOURCE_DIR) + "/examples/data/digits.csv.gz");
  CHECK(ds.size() == 1797);
  sample s = ds.get(0);
  CHECK(s[0].as_tensor().sizes() == shape_t{8, 8});
  // First line: 0,0,5,13,9,1,0,0,... label 0.
  CHECK(ints_of(s[0].as_tensor()[0]) == std::vector<int64_t>{0, 0, 5, 13, 9, 1, 0, 0});
  CHECK(s[1].as_int() == 0);
  CHECK(ds.get(1)[1].as_int() == 1);
  CHECK(ds.labels().max().item<int64_t>() == 9);
  CHECK(ds.images().max().item<double>() == 16.0);
  // Every row where it belongs (the file is read in buffers that cut rows): sums weighted by
  // row and by pixel, computed with Python's gzip and csv from the same file.
  const tensor pixels = ds.images().to(dtype::int64).reshape({1797, 64});
  const tensor rows = arange(1797, {.dtype = dtype::int64});
  CHECK(pixels.sum().item<int64_t>() == 561718);
  CHECK(rows.matmul(pixels.sum({1})).item<int64_t>() == 503342547);
  CHECK(pixels.sum({0}).matmul(arange(64, {.dtype = dtype::int64})).item<int64_t>() == 17660653);
  CHECK(rows.matmul(ds.labels()).item<int64_t>() == 7264791);
  // Each failure to open says the system's reason.
  CHECK_THROWS_WITH(digits_dataset("/nonexistent/digits.csv.gz"),
                    Contains("digits_dataset: cannot open /nonexistent/digits.csv.gz: No such file "
                             "or directory"));
  CHECK_THROWS_WITH(digits_dataset("/tmp"),
                    Contains("digits_dataset: cannot open /tmp: Is a directory"));
  CHECK_THROWS_WITH(
      digits_dataset(std::string(ACTORCH_SOURCE_DIR) + "/examples/data/digits.csv.gz/x"),
      Contains("/x: Not a directory"));
}

TEST_CASE("digits_dataset names the line and field of a malformed CSV", "[data][dataset]") {
  // zlib reads a file that is not gzipped as it is, so plain CSV exercises the parser.
  const std::string path = (test::scratch_dir("digits") / "bad.csv").string();
  auto line = [](int pixel, int label) {
    std::string s;
    for (int i = 0; i < 64; ++i)
      s += std::to_string(i == 10 ? pixel : i % 17) + ",";
    return s + std::to_string(label) + "\n";
  };
  auto load = [&](const std::string& text) {
    test::write_file(path, text);
    return digits_dataset(path);
  };
  CHECK(load(line(16, 9) + line(0, 0)).size() == 2);
  CHECK_THROWS_WITH(load(line(0, 0) + line(17, 3)),
                    Contains("line 2: pixel 17 in field 11 is outside 0..16"));
  CHECK_THROWS_WITH(load(line(-1, 3)), Contains("line 1: pixel -1 in field 11"));
  CHECK_THROWS_WITH(load(line(0, 10)), Contains("line 1: label 10 is not a digit"));
  CHECK_THROWS_WITH(load("1,2,3\n"), Contains("line 1: expected 65 comma-separated integers"));
  CHECK_THROWS_WITH(load(line(0, 1) + "x" + line(0, 1)),
                    Contains("line 2: expected an integer in field 1"));
  CHECK_THROWS_WITH(load(line(0, 1).insert(0, "1,")), Contains("line 1: expected 65"));
  CHECK_THROWS_WITH(load("\n\n"), Contains("holds no samples"));
  // The last line needs no newline; "\r\n" ends a line as "\n" does.
  std::string unended = line(0, 0), crlf = line(3, 4);
  unended.pop_back();
  crlf.back() = '\r';
  CHECK(load(line(16, 9) + unended).size() == 2);
  CHECK(load("\r\n" + crlf + "\n").size() == 1);
  CHECK_THROWS_WITH(load(line(0, 1) + std::string(5000, ' ')),
                    Contains("digits_dataset: " + path + " line 2 is longer than " +
                             std::to_string(digits_dataset::max_line_bytes) + " bytes"));
}

TEST_CASE("digits_dataset stops a gzip bomb at its bound, holding a buffer of it at most",
          "[data][dataset][digits]") {
  // 64 MiB of text in 64 KiB of gzip: one line of '0's, or newlines alone.
  auto bomb = [](const std::string& name, char fill) {
    const std::string path = (test::scratch_dir("digits") / name).string();
    gzFile out = gzopen(path.c_str(), "wb9");
    REQUIRE(out != nullptr);
    const std::string mib(1 << 20, fill);
    for (int i = 0; i < 64; ++i)
      REQUIRE(gzwrite(out, mib.data(), unsigned(mib.size())) == int(mib.size()));
    REQUIRE(gzclose(out) == Z_OK);
    return path;
  };
  const std::string zeros = bomb("zeros.csv.gz", '0'), newlines = bomb("newlines.csv.gz", '\n');
  const bool measured = test::reset_peak_memory();
  const uint64_t before = test::status_bytes("VmRSS");
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(digits_dataset(zeros),
                    Contains("digits_dataset: " + zeros + " line 1 is longer than " +
                             std::to_string(digits_dataset::max_line_bytes) + " bytes"));
  CHECK_THROWS_WITH(digits_dataset(newlines),
                    Contains("digits_dataset: " + newlines + " decompresses to more than " +
                             std::to_string(digits_dataset::max_text_bytes) +
                             " bytes, the most a digits CSV may hold"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5);
  if (measured)
    CHECK(test::status_bytes("VmHWM") - before < (uint64_t(8) << 20));
  else
    WARN("/proc/self/clear_refs cannot reset the peak memory here: not measured");
}

TEST_CASE("digits_dataset refuses a FIFO or a device at once, naming it",
          "[data][dataset][digits]") {
  const test::unwritten_fifo fifo((test::scratch_dir("digits") / "digits.fifo").string());
  CHECK_THROWS_WITH(digits_dataset(fifo.path()),
                    Contains("digits_dataset: cannot open " + fifo.path() +
                             ": not a regular file (a pipe or device cannot be loaded)"));
  CHECK_FALSE(fifo.waited_on()); // refused at once, not after the watchdog's writer came
  CHECK_THROWS_WITH(digits_dataset("/dev/null"),
                    Contains("digits_dataset: cannot open /dev/null: not a regular file"));
}
