// Tests of core/trace: events recorded by many threads at once all reach the written Chrome
// trace, each thread's lane named once; clear() drops them.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "core/trace.hpp"
#include "tests/core/files.hpp"

using namespace actorch;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

} // namespace

TEST_CASE("trace keeps every event recorded by many threads at once", "[trace]") {
  trace::clear();
  trace::enable();
  constexpr int threads = 4, per_thread = 2000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([t] {
      for (int i = 0; i < per_thread; ++i) {
        const auto now = trace::clock::now();
        trace::record("lane " + std::to_string(t), "event", now, now,
                      "\"i\": " + std::to_string(i));
      }
    });
  for (auto& th : pool)
    th.join();
  trace::enable(false);
  trace::record("lane 9", "after", trace::clock::now(), trace::clock::now()); // not recorded

  const std::string path = (test::scratch_dir("trace") / "many.json").string();
  trace::write_chrome_json(path, 3, "bench");
  const std::string text = test::read_file(path);
  CHECK(count(text, "\"ph\":\"X\"") == size_t(threads * per_thread));
  CHECK(count(text, "\"thread_name\"") == size_t(threads));
  for (int t = 0; t < threads; ++t)
    CHECK(count(text, "{\"name\":\"lane " + std::to_string(t) + "\"}") == 1);
  CHECK(count(text, "\"after\"") == 0);
  CHECK(count(text, "\"i\": 1999") == size_t(threads));

  // Written twice, the same events; cleared, none.
  trace::write_chrome_json(path, 3, "bench");
  CHECK(count(test::read_file(path), "\"ph\":\"X\"") == size_t(threads * per_thread));
  trace::clear();
  trace::write_chrome_json(path, 3, "bench");
  CHECK(count(test::read_file(path), "\"ph\":\"X\"") == 0);
}
