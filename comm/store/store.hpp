// The key-value store that ranks rendezvous through (c10d's Store): set/get/add/compare_set,
// check, wait with a timeout, delete_key, num_keys. Implementations: hash_store (one process),
// file_store (a shared file), prefix_store (a namespace over another store) and tcp_store
// (hosted by rank 0, PyTorch's TCPStore protocol). Values are byte strings.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace actorch::dist {

using milliseconds = std::chrono::milliseconds;

class store {
public:
  /// PyTorch's default store timeout (300 s).
  static constexpr milliseconds default_timeout{300000};

  explicit store(milliseconds timeout = default_timeout) : timeout_(timeout) {}
  virtual ~store();
  store(const store&) = delete;
  store& operator=(const store&) = delete;

  virtual void set(const std::string& key, const std::string& value) = 0;
  /// The value of `key`, waiting up to timeout() for it to be set; throws actorch::error
  /// naming the key when it does not appear in time.
  virtual std::string get(const std::string& key);
  /// Adds `delta` to the integer stored at `key` (0 when absent) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// Sets `key` to `desired` when its value is `expected` (or when it is absent and `expected`
  /// is empty). Returns the value `key` holds afterwards.
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  /// True when every key is set; never waits.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  /// Blocks until every key is set; throws actorch::error naming the missing keys after
  /// `timeout`.
  virtual void wait(const std::vector<std::string>& keys, milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }
  /// Removes `key`; true when it existed.
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;

  milliseconds timeout() const { return timeout_; }
  void set_timeout(milliseconds t) { timeout_ = t; }

protected:
  /// The value of a key known to exist (get() calls it after wait()).
  virtual std::string get_now(const std::string& key) = 0;
  /// "store: timed out after 2000 ms waiting for keys [a, b]" (the keys still missing, as
  /// `present` tells, check({key}) by default; every key when it throws).
  [[noreturn]] void throw_timeout(const char* store_name, const std::vector<std::string>& keys,
                                  milliseconds timeout,
                                  const std::function<bool(const std::string&)>& present = {});

private:
  milliseconds timeout_;
};

/// "[a, b, c]" for error messages.
std::string join_keys(const std::vector<std::string>& keys);

} // namespace actorch::dist
