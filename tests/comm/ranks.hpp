// Runs a group of ranks as threads of the test process, rendezvousing through one hash_store
// (Gloo's BaseTest::spawn, c10d's CollectiveTest). Catch2 assertions are not thread-safe, so
// each rank returns what it saw and the test checks the results on the main thread.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "comm/backend/gloo/process_group_gloo.hpp"
#include "comm/ddp/replica_group.hpp"
#include "comm/store/hash_store.hpp"
#include "comm/store/prefix_store.hpp"

namespace actorch::test {

inline dist::process_group_gloo::options short_timeout(int ms = 3000) {
  dist::process_group_gloo::options o;
  o.timeout = std::chrono::milliseconds(ms);
  return o;
}

/// A shared handle to a rank's group that does not own it (on_ranks does), for the APIs that
/// take a dist::group.
inline std::shared_ptr<dist::process_group> unowned(dist::process_group& pg) {
  return std::shared_ptr<dist::process_group>(&pg, [](dist::process_group*) {});
}

/// The rank's group as DDP's replica group (one replica per process).
inline std::shared_ptr<dist::replica_group> replicas_of(dist::process_group& pg) {
  return dist::process_replicas(unowned(pg));
}

/// Runs fn(rank, group) on `world` threads, rendezvousing through `st` (a new hash_store when
/// null); returns each rank's result, or rethrows the first exception a rank threw.
template <class R>
std::vector<R> on_ranks(int world, const std::function<R(int, dist::process_group_gloo&)>& fn,
                        dist::process_group_gloo::options opts = short_timeout(),
                        std::shared_ptr<dist::store> st = nullptr) {
  static_assert(!std::is_same_v<R, bool>,
                "std::vector<bool> packs the results into shared words that the rank threads "
                "would race on: return int");
  if (st == nullptr)
    st = std::make_shared<dist::hash_store>(opts.timeout);
  std::vector<R> results(static_cast<size_t>(world));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        dist::process_group_gloo pg(std::make_shared<dist::prefix_store>("pg", st), r, world, opts);
        results[size_t(r)] = fn(r, pg);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads)
    t.join();
  for (auto& e : errors)
    if (e)
      std::rethrow_exception(e);
  return results;
}

/// The message of the exception fn throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

} // namespace actorch::test
