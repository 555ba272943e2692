// hash_store: a map under one mutex; every change wakes the waiters, which re-check their keys.
#include "comm/store/hash_store.hpp"

#include <charconv>

#include "base/error.hpp"

namespace actorch::dist {

int64_t parse_counter(const std::string& key, const std::string& value) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  ACTORCH_CHECK(ec == std::errc() && end == value.data() + value.size(), "store: add on key '", key,
                "' whose value '", value, "' is not an integer");
  return v;
}

void hash_store::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mu_);
    data_[key] = value;
  }
  changed_.notify_all();
}

int64_t hash_store::add(const std::string& key, int64_t delta) {
  int64_t v = 0;
  {
    std::lock_guard lock(mu_);
    auto it = data_.find(key);
    v = (it == data_.end() ? 0 : parse_counter(key, it->second)) + delta;
    data_[key] = std::to_string(v);
  }
  changed_.notify_all();
  return v;
}

std::string hash_store::compare_set(const std::string& key, const std::string& expected,
                                    const std::string& desired) {
  std::string result;
  {
    std::lock_guard lock(mu_);
    auto it = data_.find(key);
    if (it == data_.end()) {
      if (!expected.empty())
        return expected; // c10d: a missing key with a non-empty expectation is left alone
      data_[key] = desired;
      result = desired;
    } else if (it->second == expected) {
      it->second = desired;
      result = desired;
    } else {
      return it->second;
    }
  }
  changed_.notify_all();
  return result;
}

bool hash_store::has_all(const std::vector<std::string>& keys) const {
  for (const auto& k : keys)
    if (!data_.contains(k))
      return false;
  return true;
}

bool hash_store::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  return has_all(keys);
}

void hash_store::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  bool ok = false;
  {
    std::unique_lock lock(mu_);
    ok = changed_.wait_for(lock, timeout, [&] { return has_all(keys); });
  }
  if (!ok)
    throw_timeout("hash_store", keys, timeout);
}

bool hash_store::delete_key(const std::string& key) {
  std::lock_guard lock(mu_);
  return data_.erase(key) > 0;
}

int64_t hash_store::num_keys() {
  std::lock_guard lock(mu_);
  return int64_t(data_.size());
}

std::string hash_store::get_now(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = data_.find(key);
  ACTORCH_CHECK(it != data_.end(), "hash_store: key '", key, "' was deleted while being read");
  return it->second;
}

} // namespace actorch::dist
