// An in-process store: ranks that are threads of one process rendezvous through it (Gloo's
// HashStore, c10d's HashStore). Waiting is a condition variable, not polling.
#pragma once

#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "comm/store/store.hpp"

namespace actorch::dist {

class hash_store final : public store {
public:
  explicit hash_store(milliseconds timeout = default_timeout) : store(timeout) {}

  void set(const std::string& key, const std::string& value) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using store::wait;
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

protected:
  std::string get_now(const std::string& key) override;

private:
  bool has_all(const std::vector<std::string>& keys) const;

  std::mutex mu_;
  std::condition_variable changed_;
  std::unordered_map<std::string, std::string> data_;
};

/// The integer a store holds for add(): its decimal text, as c10d keeps it.
int64_t parse_counter(const std::string& key, const std::string& value);

} // namespace actorch::dist
