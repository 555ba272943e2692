// A store that hands every call to an in-process hash_store: tests derive from it and change
// the one call they are about (a planted key, a slow set).
#pragma once

#include <string>
#include <vector>

#include "comm/store/hash_store.hpp"

namespace actorch::test {

class forwarding_store : public dist::store {
public:
  using milliseconds = dist::milliseconds;

  explicit forwarding_store(milliseconds timeout = default_timeout)
      : store(timeout), inner_(timeout) {}

  void set(const std::string& key, const std::string& value) override { inner_.set(key, value); }
  std::string get(const std::string& key) override { return inner_.get(key); }
  int64_t add(const std::string& key, int64_t delta) override { return inner_.add(key, delta); }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    return inner_.compare_set(key, expected, desired);
  }
  bool check(const std::vector<std::string>& keys) override { return inner_.check(keys); }
  using store::wait;
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    inner_.wait(keys, timeout);
  }
  bool delete_key(const std::string& key) override { return inner_.delete_key(key); }
  int64_t num_keys() override { return inner_.num_keys(); }

protected:
  std::string get_now(const std::string& key) override { return inner_.get(key); }

  dist::hash_store inner_;
};

} // namespace actorch::test
