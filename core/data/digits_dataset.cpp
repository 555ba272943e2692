// digits_dataset: gunzip through zlib's gzFile, parsing the CSV into two tensors row by row.
#include "core/data/digits_dataset.hpp"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <memory>

#include "core/ops/factory.hpp"
#include "core/serialize/file_io.hpp"

namespace actorch::data {

namespace {

/// Parses line `line` ([p, e), without its newline) into pixels and labels; a blank line (or a
/// lone '\r') holds no row.
void parse_row(const std::string& path, int64_t line, const char* p, const char* e,
               std::vector<float>& pixels, std::vector<int64_t>& labels) {
  if (p == e || (e - p == 1 && *p == '\r'))
    return;
  int values[65];
  int n = 0;
  while (p < e && n < 65) {
    auto [next, ec] = std::from_chars(p, e, values[n]);
    ACTORCH_CHECK(ec == std::errc(), "digits_dataset: ", path, " line ", line,
                  ": expected an integer in field ", n + 1);
    ++n;
    p = next;
    if (p < e && *p == ',')
      ++p;
    else
      break;
  }
  while (p < e && (*p == '\r' || *p == ' '))
    ++p;
  ACTORCH_CHECK(n == 65 && p == e, "digits_dataset: ", path, " line ", line,
                ": expected 65 comma-separated integers (64 pixels and the label)");
  for (int i = 0; i < 64; ++i) {
    ACTORCH_CHECK(values[i] >= 0 && values[i] <= 16, "digits_dataset: ", path, " line ", line,
                  ": pixel ", values[i], " in field ", i + 1, " is outside 0..16");
    pixels.push_back(float(values[i]));
  }
  ACTORCH_CHECK(values[64] >= 0 && values[64] <= 9, "digits_dataset: ", path, " line ", line,
                ": label ", values[64], " is not a digit");
  labels.push_back(values[64]);
}

} // namespace

digits_dataset::digits_dataset(const std::string& path) {
  // Opened here, not by gzopen, so that every failure says the system's reason (gzopen
  // opens a directory and only its first read fails, and waits for a FIFO's writer).
  std::string why;
  const int fd = serialize::open_regular_file(path, nullptr, &why);
  ACTORCH_CHECK(fd >= 0, "digits_dataset: cannot open ", path, ": ", why);
  std::unique_ptr<gzFile_s, int (*)(gzFile)> gz(gzdopen(fd, "rb"), gzclose);
  if (gz == nullptr)
    ::close(fd);
  ACTORCH_CHECK(gz != nullptr, "digits_dataset: cannot read ", path, ": out of memory");

  // Rows are parsed as the text is decompressed: what is held is the rows so far and one line,
  // each bounded (see the header), so a gzip bomb fails within a buffer of its bound.
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  std::string partial; // the line the last buffer ended in
  int64_t line = 0;
  uint64_t total = 0;
  char buf[1 << 16];
  int got = 0;
  while ((got = gzread(gz.get(), buf, sizeof buf)) > 0) {
    total += uint64_t(got);
    ACTORCH_CHECK(total <= max_text_bytes, "digits_dataset: ", path, " decompresses to more than ",
                  max_text_bytes, " bytes, the most a digits CSV may hold");
    for (const char *p = buf, *end = buf + got; p < end;) {
      const char* nl = std::find(p, end, '\n');
      ACTORCH_CHECK(partial.size() + size_t(nl - p) <= max_line_bytes, "digits_dataset: ", path,
                    " line ", line + 1, " is longer than ", max_line_bytes, " bytes");
      if (nl == end) { // the line goes on in the next buffer
        partial.append(p, end);
        break;
      }
      if (partial.empty()) {
        parse_row(path, ++line, p, nl, pixels, labels);
      } else {
        partial.append(p, nl);
        parse_row(path, ++line, partial.data(), partial.data() + partial.size(), pixels, labels);
        partial.clear();
      }
      p = nl + 1;
    }
  }
  int errnum = 0;
  const char* msg = gzerror(gz.get(), &errnum);
  ACTORCH_CHECK(got == 0 && errnum == Z_OK, "digits_dataset: ", path, " is not valid gzip (", msg,
                ")");
  parse_row(path, ++line, partial.data(), partial.data() + partial.size(), pixels, labels);
  ACTORCH_CHECK(!labels.empty(), "digits_dataset: ", path, " holds no samples");
  const int64_t n = int64_t(labels.size());
  images_ = as_tensor(pixels, {n, 8, 8});
  labels_ = as_tensor(labels, {n});
}

sample digits_dataset::get(int64_t index) const {
  check_index(index, size(), "digits_dataset");
  return sample::make_tuple({images_.select(0, index), labels_.select(0, index).item<int64_t>()});
}

} // namespace actorch::data
