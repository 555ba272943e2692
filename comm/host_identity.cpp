// host_identity.hpp.
#include "comm/host_identity.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <vector>

namespace actorch::dist {

std::string host_id() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(name) + "/" + boot;
}

namespace {

/// Fields 3 on of /proc/<pid>/stat (the state first), or empty when it cannot be read.
std::vector<std::string> stat_fields(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const size_t paren = stat.rfind(')'); // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 > stat.size())
    return {};
  std::istringstream fields(stat.substr(paren + 2));
  std::vector<std::string> out;
  for (std::string f; fields >> f;)
    out.push_back(f);
  return out;
}

/// A zombie has exited; only its parent has not reaped it yet.
bool exited_state(const std::vector<std::string>& fields) {
  return !fields.empty() && (fields[0] == "Z" || fields[0] == "X");
}

} // namespace

std::string process_start_time(pid_t pid) {
  const std::vector<std::string> fields = stat_fields(pid);
  if (fields.size() < 20 || exited_state(fields))
    return {};
  return fields[19]; // field 22
}

bool process_exited(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH)
    return true;
  return exited_state(stat_fields(pid));
}

std::pair<std::string, uint16_t> numeric_endpoint(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (a.ss_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &s->sin_addr, host, sizeof host);
    port = ntohs(s->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof host);
    port = ntohs(s->sin6_port);
  }
  return {host, port};
}

std::string endpoint_text(const sockaddr_storage& a) {
  const auto [host, port] = numeric_endpoint(a);
  const bool v6 = a.ss_family == AF_INET6;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::pair<std::string, std::string> split_host_port(const std::string& text) {
  const size_t colon = text.rfind(':');
  // A colon inside brackets is the address's, not a port's.
  const bool has_port = colon != std::string::npos && text.find(']', colon) == std::string::npos;
  std::string host = has_port ? text.substr(0, colon) : text;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return {host, has_port ? text.substr(colon + 1) : std::string()};
}

} // namespace actorch::dist
