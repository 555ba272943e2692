// collective_tag: one thread-local string.
#include "comm/collective_tag.hpp"

#include <utility>

namespace actorch::dist {

namespace {
thread_local std::string tls_tag;
} // namespace

collective_tag::collective_tag(std::string tag)
    : previous_(std::exchange(tls_tag, std::move(tag))) {}

collective_tag::~collective_tag() {
  tls_tag = std::move(previous_);
}

const std::string& collective_tag::current() {
  return tls_tag;
}

} // namespace actorch::dist
