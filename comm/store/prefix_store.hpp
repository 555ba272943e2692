// A namespace inside another store: every key becomes "prefix/key" (c10d's PrefixStore), so
// process groups and runs sharing one store never see each other's keys.
#pragma once

#include <memory>

#include "comm/store/store.hpp"

namespace actorch::dist {

class prefix_store final : public store {
public:
  prefix_store(std::string prefix, std::shared_ptr<store> base);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using store::wait;
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override;
  bool delete_key(const std::string& key) override;
  /// The base store's count (as in c10d): keys outside the prefix are counted too.
  int64_t num_keys() override;

  const std::shared_ptr<store>& base() const { return base_; }

protected:
  std::string get_now(const std::string& key) override;

private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<store> base_;
};

} // namespace actorch::dist
