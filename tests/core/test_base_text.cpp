// base/env.hpp's one rule for environment variables, base/text.hpp's hex and lists, and
// base/child_process.hpp.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <catch2/catch.hpp>

#include "base/child_process.hpp"
#include "base/env.hpp"
#include "base/error.hpp"
#include "base/text.hpp"
#include "tests/core/files.hpp"

using namespace actorch;
using Catch::Matchers::Contains;

TEST_CASE("an empty environment variable is unset, a number is whole", "[base][env]") {
  const test::env_var unset("ACTORCH_TEST_ENV", std::nullopt);
  CHECK_FALSE(env("ACTORCH_TEST_ENV").has_value());
  CHECK(env_int("ACTORCH_TEST_ENV", 7) == 7);
  {
    const test::env_var empty("ACTORCH_TEST_ENV", std::string());
    CHECK_FALSE(env("ACTORCH_TEST_ENV").has_value());
    CHECK(env_int("ACTORCH_TEST_ENV", 7) == 7);
    CHECK(env_flag("ACTORCH_TEST_ENV", true));
  }
  const test::env_var set("ACTORCH_TEST_ENV", std::string("12"));
  CHECK(*env("ACTORCH_TEST_ENV") == "12");
  CHECK(env_int("ACTORCH_TEST_ENV", 7) == 12);
  CHECK_THROWS_WITH(env_int("ACTORCH_TEST_ENV", 7, 0, 10),
                    Contains("ACTORCH_TEST_ENV") && Contains("12"));
  const test::env_var bad("ACTORCH_TEST_ENV", std::string("12x"));
  CHECK_THROWS_WITH(env_int("ACTORCH_TEST_ENV", 7), Contains("ACTORCH_TEST_ENV"));
}

TEST_CASE("an environment flag is one of the usual spellings, or an error", "[base][env]") {
  for (const char* yes : {"1", "true", "YES", "On"}) {
    const test::env_var v("ACTORCH_TEST_FLAG", std::string(yes));
    CHECK(env_flag("ACTORCH_TEST_FLAG", false));
  }
  for (const char* no : {"0", "false", "No", "OFF"}) {
    const test::env_var v("ACTORCH_TEST_FLAG", std::string(no));
    CHECK_FALSE(env_flag("ACTORCH_TEST_FLAG", true));
  }
  const test::env_var v("ACTORCH_TEST_FLAG", std::string("2"));
  CHECK_THROWS_WITH(env_flag("ACTORCH_TEST_FLAG", true),
                    Contains("ACTORCH_TEST_FLAG is '2'") && Contains("expected 1 or 0"));
}

TEST_CASE("hex digits and number lists", "[base][text]") {
  const unsigned char bytes[] = {0x00, 0x9f, 0xff};
  CHECK(to_hex(bytes, 3) == "009fff");
  CHECK(to_hex(bytes, 3, ' ') == "00 9f ff");
  CHECK(to_hex(bytes, 0).empty());
  CHECK(to_hex_digits(0xbeef, 8) == "0000beef");
  CHECK(to_hex_digits(0x123456789, 8) == "23456789");
  std::string s = "x";
  append_hex(s, 10);
  CHECK(s == "x0a");
  CHECK(join_numbers({0, 2, 11}, ", ") == "0, 2, 11");
  CHECK(join_numbers({}, ",").empty());
}

TEST_CASE("a child's wait status in words", "[base][child_process]") {
  const pid_t exits = ::fork();
  if (exits == 0)
    ::_exit(3);
  CHECK(describe_wait_status(reap(exits)) == "exited with status 3");
  const pid_t killed = ::fork();
  if (killed == 0) {
    ::pause();
    ::_exit(0);
  }
  ::kill(killed, SIGKILL);
  CHECK(describe_wait_status(reap(killed)) == "was killed by signal 9 (Killed)");
}

TEST_CASE("a child whose parent is gone before it asks ends at once", "[base][child_process]") {
  // The middle process forks a grandchild and exits; the grandchild, asking too late, exits
  // with 128 + SIGKILL rather than live on under init (nobody sees that status but the check
  // that it is not still running).
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t middle = ::fork();
  if (middle == 0) {
    const pid_t me = ::getpid();
    if (::fork() == 0) {
      while (::getppid() == me)
        ::usleep(1000);
      die_with_parent(me); // does not return
      (void)!::write(fds[1], "alive", 5);
      ::_exit(0);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  CHECK(describe_wait_status(reap(middle)) == "exited with status 0");
  char buf[8];
  CHECK(::read(fds[0], buf, sizeof buf) == 0); // every writer ended without writing
  ::close(fds[0]);
}
