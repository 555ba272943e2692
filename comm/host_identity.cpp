// host_identity.hpp.
#include "comm/host_identity.hpp"

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

} // namespace actorch::dist
