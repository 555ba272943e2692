// Gloo's rendezvous talks to a gloo::rendezvous::Store; this adapter lets connectFullMesh use
// any actorch store (hash, file, prefix, tcp). Included only by process_group_gloo.cpp.
#pragma once

#include <memory>

#include <gloo/rendezvous/store.h>

#include "comm/store/store.hpp"

namespace actorch::dist {

class gloo_store final : public gloo::rendezvous::Store {
public:
  gloo_store(std::shared_ptr<store> s, milliseconds timeout)
      : store_(std::move(s)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    store_->wait({key}, timeout_);
    const std::string v = store_->get(key);
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys, timeout_); }
  // The group's timeout, not Gloo's: see Note [Gloo connect timeout].
  void wait(const std::vector<std::string>& keys, const milliseconds&) override {
    store_->wait(keys, timeout_);
  }

private:
  std::shared_ptr<store> store_;
  milliseconds timeout_;
};

} // namespace actorch::dist
