// host_identity.hpp.
#include "comm/host_identity.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace actorch::dist {

std::string host_id() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(name) + "/" + boot;
}

std::string process_start_time(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const size_t paren = stat.rfind(')'); // the command name may hold spaces and parentheses
  if (paren == std::string::npos)
    return {};
  std::istringstream fields(stat.substr(paren + 2)); // field 3 on
  std::string f;
  for (int i = 3; i <= 22 && fields >> f; ++i) {
  }
  return f;
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
