// digits_dataset: gunzip through zlib's gzFile, parse the CSV into two tensors.
#include "core/data/digits_dataset.hpp"

#include <unistd.h>
#include <zlib.h>

#include <charconv>
#include <memory>

#include "core/ops/factory.hpp"
#include "core/serialize/file_io.hpp"

namespace actorch::data {

digits_dataset::digits_dataset(const std::string& path) {
  // Opened here, not by gzopen, so that every failure says the system's reason (gzopen
  // opens a directory and only its first read fails).
  std::string why;
  const int fd = serialize::open_regular_file(path, nullptr, &why);
  ACTORCH_CHECK(fd >= 0, "digits_dataset: cannot open ", path, ": ", why);
  std::unique_ptr<gzFile_s, int (*)(gzFile)> gz(gzdopen(fd, "rb"), gzclose);
  if (gz == nullptr)
    ::close(fd);
  ACTORCH_CHECK(gz != nullptr, "digits_dataset: cannot read ", path, ": out of memory");
  std::string text;
  char buf[1 << 16];
  int got = 0;
  while ((got = gzread(gz.get(), buf, sizeof buf)) > 0)
    text.append(buf, size_t(got));
  int errnum = 0;
  const char* msg = gzerror(gz.get(), &errnum);
  ACTORCH_CHECK(got == 0 && errnum == Z_OK, "digits_dataset: ", path, " is not valid gzip (", msg,
                ")");

  std::vector<float> pixels;
  std::vector<int64_t> labels;
  size_t pos = 0;
  int64_t line = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos)
      end = text.size();
    ++line;
    const char* p = text.data() + pos;
    const char* e = text.data() + end;
    pos = end + 1;
    if (p == e || (e - p == 1 && *p == '\r'))
      continue;
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
