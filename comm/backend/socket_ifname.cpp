// GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME, parsed and checked against getifaddrs(3).
#include "comm/backend/socket_ifname.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "base/env.hpp"
#include "base/error.hpp"

namespace actorch::dist {

namespace {

struct ifaddrs_list {
  ifaddrs* head = nullptr;
  ifaddrs_list() {
    ACTORCH_CHECK(::getifaddrs(&head) == 0, "getifaddrs failed: ", std::strerror(errno));
  }
  ~ifaddrs_list() { ::freeifaddrs(head); }
  ifaddrs_list(const ifaddrs_list&) = delete;
  ifaddrs_list& operator=(const ifaddrs_list&) = delete;
};

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "(none)" : out;
}

std::string trimmed(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos)
    return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::vector<std::string> split_commas(const std::string& value) {
  std::vector<std::string> out;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ','))
    out.push_back(trimmed(item));
  if (!value.empty() && value.back() == ',')
    out.emplace_back();
  return out;
}

} // namespace

std::vector<std::string> network_interfaces() {
  const ifaddrs_list list;
  std::vector<std::string> names;
  for (const ifaddrs* a = list.head; a != nullptr; a = a->ifa_next)
    if (a->ifa_name != nullptr)
      names.emplace_back(a->ifa_name);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::vector<std::string> parse_gloo_ifnames(const std::string& value, const char* variable) {
  const std::vector<std::string> existing = network_interfaces();
  std::vector<std::string> out;
  for (const std::string& name : split_commas(value)) {
    ACTORCH_CHECK(!name.empty(), variable, "='", value,
                  "' has an empty interface name (expected names separated by commas)");
    ACTORCH_CHECK(std::find(existing.begin(), existing.end(), name) != existing.end(), variable,
                  "='", value, "': no network interface named '", name,
                  "' on this host; the interfaces are: ", joined(existing));
    out.push_back(name);
  }
  return out;
}

std::vector<std::string> gloo_socket_ifnames() {
  const auto v = env("GLOO_SOCKET_IFNAME");
  return v ? parse_gloo_ifnames(*v) : std::vector<std::string>{};
}

void check_nccl_ifname(const std::string& value) {
  const char* variable = "NCCL_SOCKET_IFNAME";
  std::string list = value;
  const bool exclude = !list.empty() && list[0] == '^';
  if (exclude)
    list.erase(0, 1);
  const bool exact = !list.empty() && list[0] == '=';
  if (exact)
    list.erase(0, 1);
  const std::vector<std::string> existing = network_interfaces();
  const std::vector<std::string> entries = split_commas(list);
  ACTORCH_CHECK(!entries.empty(), variable, "='", value, "' names no interface");
  auto matches = [exact](const std::string& entry, const std::string& name) {
    return exact ? name == entry : name.compare(0, entry.size(), entry) == 0;
  };
  for (const std::string& entry : entries)
    ACTORCH_CHECK(!entry.empty(), variable, "='", value, "' has an empty interface name");
  if (exclude) {
    const bool any_left = std::any_of(existing.begin(), existing.end(), [&](const auto& name) {
      return std::none_of(entries.begin(), entries.end(),
                          [&](const auto& e) { return matches(e, name); });
    });
    ACTORCH_CHECK(any_left, variable, "='", value,
                  "' excludes every network interface on this host: ", joined(existing));
    return;
  }
  for (const std::string& entry : entries)
    ACTORCH_CHECK(std::any_of(existing.begin(), existing.end(),
                              [&](const auto& name) { return matches(entry, name); }),
                  variable, "='", value, "': no network interface ",
                  exact ? "named '" : "whose name starts with '", entry,
                  "' on this host; the interfaces are: ", joined(existing));
}

void check_nccl_socket_ifname() {
  if (const auto v = env("NCCL_SOCKET_IFNAME"))
    check_nccl_ifname(*v);
}

int interface_family(const std::string& name) {
  const ifaddrs_list list;
  bool v6 = false;
  for (const ifaddrs* a = list.head; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr || name != a->ifa_name || a->ifa_addr == nullptr)
      continue;
    if (a->ifa_addr->sa_family == AF_INET)
      return AF_INET;
    v6 = v6 || a->ifa_addr->sa_family == AF_INET6;
  }
  ACTORCH_CHECK(v6, "network interface '", name,
                "' has no IPv4 or IPv6 address (is it up, with an address assigned?)");
  return AF_INET6;
}

} // namespace actorch::dist
