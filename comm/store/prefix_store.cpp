// prefix_store: forwards every call with the prefixed key(s).
#include "comm/store/prefix_store.hpp"

#include "base/error.hpp"

namespace actorch::dist {

prefix_store::prefix_store(std::string prefix, std::shared_ptr<store> base)
    : store(base ? base->timeout() : default_timeout), prefix_(std::move(prefix)),
      base_(std::move(base)) {
  ACTORCH_CHECK(base_ != nullptr, "prefix_store '", prefix_, "': the base store is null");
}

std::vector<std::string> prefix_store::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys)
    out.push_back(full(k));
  return out;
}

void prefix_store::set(const std::string& key, const std::string& value) {
  base_->set(full(key), value);
}
std::string prefix_store::get(const std::string& key) {
  base_->wait({full(key)}, timeout());
  return get_now(key);
}
std::string prefix_store::get_now(const std::string& key) {
  // The base's get() finds the key at once: wait() above saw it.
  return base_->get(full(key));
}
int64_t prefix_store::add(const std::string& key, int64_t delta) {
  return base_->add(full(key), delta);
}
std::string prefix_store::compare_set(const std::string& key, const std::string& expected,
                                      const std::string& desired) {
  return base_->compare_set(full(key), expected, desired);
}
bool prefix_store::check(const std::vector<std::string>& keys) {
  return base_->check(full(keys));
}
void prefix_store::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  base_->wait(full(keys), timeout);
}
bool prefix_store::delete_key(const std::string& key) {
  return base_->delete_key(full(key));
}
int64_t prefix_store::num_keys() {
  return base_->num_keys();
}

} // namespace actorch::dist
