// A tcp_store master alone, for tests/tools/store_attacks.py to attack from outside: it prints
// its port, then serves until its standard input closes. The job secret and the store's bounds
// come from the environment, as in a rank 0 (ACTORCH_JOB_TOKEN, ACTORCH_STORE_MAX_*).
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "comm/store/tcp_store.hpp"

int main() {
  using namespace std::chrono_literals;
  try {
    actorch::dist::tcp_store master("127.0.0.1", 0, true, 10s);
    std::printf("%u\n", unsigned(master.port()));
    std::fflush(stdout);
    char b;
    while (::read(STDIN_FILENO, &b, 1) > 0) {
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_master: %s\n", e.what());
    return 1;
  }
  return 0;
}
