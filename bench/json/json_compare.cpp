// Should core/serialize/json.cpp (the safetensors header parser) give way to nlohmann-json
// (Debian's nlohmann-json3-dev)? This program measures what the question turns on, on headers
// of the size real checkpoints have:
//   - speed: parse_json against nlohmann's DOM parser and its SAX parser (as a replacement
//     would use it, to see duplicate keys), best of 20 parses of each header;
//   - what each reports for the faults the safetensors tests pin: a duplicate key, a value
//     outside the subset, and where it is.
// Prints `json-compare tensors=N bytes=B ours_us=T dom_us=T sax_us=T` and one line per fault.
// Built only where nlohmann-json is installed (`scripts/setup.sh bench`).
#include <chrono>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "core/serialize/json.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

/// A safetensors-like header of n tensors (names and fields as save_safetensors writes them).
std::string header(int n) {
  std::string h = R"({"__metadata__":{"format":"pt"})";
  for (int i = 0; i < n; ++i)
    h += ",\"model.layers." + std::to_string(i) + ".weight\":{\"dtype\":\"F32\",\"shape\":[1024," +
         std::to_string(i % 4096) + "],\"data_offsets\":[" + std::to_string(i * 64) + "," +
         std::to_string(i * 64 + 64) + "]}";
  return h + "}";
}

/// The events a replacement would need, counted (no tree: the lower bound of its cost).
struct counting_sax : nlohmann::json::json_sax_t {
  size_t events = 0;
  bool null() override { return ++events; }
  bool boolean(bool) override { return ++events; }
  bool number_integer(number_integer_t) override { return ++events; }
  bool number_unsigned(number_unsigned_t) override { return ++events; }
  bool number_float(number_float_t, const string_t&) override { return ++events; }
  bool string(string_t&) override { return ++events; }
  bool binary(binary_t&) override { return ++events; }
  bool start_object(std::size_t) override { return ++events; }
  bool key(string_t&) override { return ++events; }
  bool end_object() override { return ++events; }
  bool start_array(std::size_t) override { return ++events; }
  bool end_array() override { return ++events; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception&) override {
    return false;
  }
};

template <class F> double best_us(F&& f) {
  double best = 1e300;
  for (int round = 0; round < 20; ++round) {
    const auto t0 = clock_type::now();
    f();
    best =
        std::min(best, std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
  }
  return best;
}

std::string ours(const std::string& text) {
  const std::string name = "case";
  try {
    actorch::serialize::parse_json(text, {"parse_json", name});
    return "accepted";
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string theirs(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    return "accepted: " + j.dump();
  } catch (const std::exception& e) {
    return e.what();
  }
}

} // namespace

int main() {
  for (int n : {100, 1000, 10000}) {
    const std::string h = header(n);
    const std::string name = "bench";
    const double ours_us = best_us([&] { actorch::serialize::parse_json(h, {"bench", name}); });
    size_t sink = 0; // keeps each parse from being optimized away
    const double dom_us = best_us([&] { sink += nlohmann::json::parse(h).size(); });
    const double sax_us = best_us([&] {
      counting_sax sax;
      nlohmann::json::sax_parse(h, &sax);
    });
    std::printf("json-compare tensors=%d bytes=%zu ours_us=%.0f dom_us=%.0f sax_us=%.0f\n", n,
                h.size(), ours_us, dom_us, sax_us);
    if (sink == 0)
      return 1;
  }
  for (const std::string& fault :
       {std::string(R"({"a":{"x":1},"a":{"x":2}})"), std::string(R"({"a":{"shape":[4.0]}})"),
        std::string(R"({"a":{"shape":[1 1]}})")}) {
    std::printf("json-fault input=%s\n  ours:     %s\n  nlohmann: %s\n", fault.c_str(),
                ours(fault).c_str(), theirs(fault).c_str());
  }
  return 0;
}
