// Gloo's rendezvous talks to a gloo::rendezvous::Store; this adapter lets connectFullMesh use
// any actorch store (hash, file, prefix, tcp). Included only by process_group_gloo.cpp.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>

#include <netinet/in.h>
#include <sys/socket.h>

#include <gloo/rendezvous/store.h>

#include "comm/store/store.hpp"

namespace actorch::dist {

class gloo_store final : public gloo::rendezvous::Store {
public:
  gloo_store(std::shared_ptr<store> s, milliseconds timeout)
      : store_(std::move(s)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    std::string value(data.begin(), data.end());
    if (!key.empty() && key.find_first_not_of("0123456789") == std::string::npos)
      scrub_addresses(value);
    store_->set(key, value);
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

  /// Gloo's connectFullMesh publishes under key "<rank>" its pairs' addresses, each the raw
  /// bytes of a tcp::Address: a sockaddr_storage (128 bytes, of which an IPv4 address fills
  /// 16 and an IPv6 one 28) and a sequence number. Gloo never initialises the rest of the
  /// sockaddr_storage, so it carried stack and heap bytes of the process to anyone who could
  /// read the store. This zeroes, in place, every byte of each record past its address family's
  /// sockaddr, which Gloo never reads; a value that is not whole records is left alone.
  static void scrub_addresses(std::string& value) {
    constexpr size_t kRecord = sizeof(sockaddr_storage) + sizeof(ssize_t);
    if (value.empty() || value.size() % kRecord != 0)
      return;
    for (size_t at = 0; at < value.size(); at += kRecord) {
      sa_family_t family = 0;
      std::memcpy(&family, value.data() + at + offsetof(sockaddr_storage, ss_family),
                  sizeof family);
      const size_t used = family == AF_INET    ? sizeof(sockaddr_in)
                          : family == AF_INET6 ? sizeof(sockaddr_in6)
                                               : sizeof(sockaddr_storage);
      std::memset(value.data() + at + used, 0, sizeof(sockaddr_storage) - used);
    }
  }

private:
  std::shared_ptr<store> store_;
  milliseconds timeout_;
};

} // namespace actorch::dist
